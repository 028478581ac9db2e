//! The proxy's server, its settings, and its log of every request.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};

use super::answers::error_code;
use super::rules::ec2_rules;
use super::upstream::upstream;
pub(super) use crate::control::lock;
use crate::control::{broken_body, Fault, Rule};

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The EC2 action (the form's `Action`).
    pub action: String,
    /// Every form parameter, `Action` included.
    pub params: BTreeMap<String, String>,
    /// When it was answered.
    pub at: Instant,
    /// The answer's HTTP status.
    pub status: u16,
    /// Answered by an injected fault (not by moto, nor by the proxy's own EC2 rules).
    pub faulted: bool,
    /// The error code of the answer, when it was an EC2 error.
    pub code: Option<String>,
}

/// A ClientToken the proxy has seen answered.
#[derive(Debug, Clone)]
pub(super) struct TokenRecord {
    pub(super) params: BTreeMap<String, String>,
    pub(super) instances: Vec<String>,
}

/// The window of [`Proxy::refuse_new_profile`]: its length until a RunInstances naming a profile
/// opens it, then its end.
#[derive(Debug, Clone, Copy)]
pub(super) enum ProfileRefusal {
    For(Duration),
    Until(Instant),
}

/// What the proxy keeps to behave as EC2.
#[derive(Debug, Default)]
pub(super) struct Ec2State {
    pub(super) visibility_delay: Duration,
    pub(super) hidden_until: HashMap<String, Instant>,
    pub(super) pending_for: Duration,
    pub(super) pending_until: HashMap<String, Instant>,
    pub(super) tag_lag: Duration,
    /// When a tag filter first finds each instance made while `tag_lag` was set.
    pub(super) tag_indexed_at: HashMap<String, Instant>,
    /// Whether the windows hide a new instance from at least one read ([`Proxy::miss_first_look`]).
    pub(super) miss_first_look: bool,
    /// Instances made under a visibility delay that no read has missed yet.
    pub(super) unmissed: HashSet<String>,
    /// Instances made under a tag-filter lag that no tag-filtered listing has missed yet.
    pub(super) tag_unmissed: HashSet<String>,
    pub(super) tokens: HashMap<String, TokenRecord>,
    pub(super) started: HashMap<String, DateTime<Utc>>,
    pub(super) subnet_zone: HashMap<String, String>,
    pub(super) offered: HashMap<String, Vec<String>>,
    /// How many instances a filtered listing's page looks at ([`Proxy::page_by_scan`]).
    pub(super) scan_per_page: Option<usize>,
    /// How RunInstances refuses the instance profile it names ([`Proxy::refuse_new_profile`]).
    pub(super) new_profile_refusal: Option<ProfileRefusal>,
    /// How many more RunInstances launches fail right after they are made ([`Proxy::fail_launches`]).
    pub(super) failing_launches: usize,
    /// The state reason (code, message) those launches end with; `None`: moto's own.
    pub(super) failing_reason: Option<(String, String)>,
    /// The state reason each instance whose launch failed so reads with.
    pub(super) launch_reasons: HashMap<String, (String, String)>,
    /// How far EC2's clock reads from this machine's ([`Proxy::set_clock_offset`]).
    pub(super) clock_offset: chrono::TimeDelta,
}

#[derive(Debug)]
pub(super) struct ProxyState {
    pub(super) upstream: String,
    pub(super) http: reqwest::Client,
    /// The injected faults (the fakes' shared matcher).
    pub(super) faults: crate::Control,
    pub(super) log: Mutex<Vec<Seen>>,
    pub(super) ec2: Mutex<Ec2State>,
    /// One lock a ClientToken, held by a RunInstances of that token from the token's check to its
    /// record: EC2 answers one token with one instance even when two requests of it overlap, and
    /// serves other tokens' requests meanwhile.
    pub(super) run_tokens: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// One address of the proxy: its state, and the page size its listings are forced to.
#[derive(Debug, Clone)]
pub(super) struct View {
    pub(super) state: Arc<ProxyState>,
    pub(super) per_page: Option<usize>,
}

/// The proxy, on 127.0.0.1 until dropped.
#[derive(Debug)]
pub struct Proxy {
    /// Its address, `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<ProxyState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// A proxy serving `state` on an address of its own, its listings forced to `per_page`.
    async fn serving(state: Arc<ProxyState>, per_page: Option<usize>) -> Proxy {
        let view = View {
            state: state.clone(),
            per_page,
        };
        let app = axum::Router::new().fallback(forward).with_state(view);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { url, state, task }
    }

    /// A proxy in front of `upstream` (moto; or an address nothing listens on, for tests that inject
    /// every answer).
    pub async fn start(upstream: &str) -> Proxy {
        let state = Arc::new(ProxyState {
            upstream: upstream.to_string(),
            http: reqwest::Client::new(),
            faults: crate::Control::default(),
            log: Mutex::new(Vec::new()),
            ec2: Mutex::new(Ec2State::default()),
            run_tokens: Mutex::new(HashMap::new()),
        });
        Proxy::serving(state, None).await
    }

    /// Another address on the same proxy (same rules, log and EC2 state) whose DescribeInstances
    /// listings page by `per_page` instances, whatever `MaxResults` says (which it still checks).
    pub async fn paged(&self, per_page: usize) -> Proxy {
        Proxy::serving(self.state.clone(), Some(per_page.max(1))).await
    }

    /// Adds a fault rule (see [`rule`](super::rule)); rules are tried in the order added.
    pub fn inject(&self, rule: Rule) {
        self.state.faults.inject(rule);
    }

    /// Removes every rule for `action`.
    pub fn clear(&self, action: &str) {
        let action = ("Action".to_string(), action.to_string());
        self.state
            .faults
            .clear_faults_where(|r| r.form.contains(&action));
    }

    /// Instances made from now on stay invisible for `delay` (see the module documentation);
    /// `Duration::ZERO` stops hiding new ones.
    pub fn set_visibility_delay(&self, delay: Duration) {
        lock(&self.state.ec2).visibility_delay = delay;
    }

    /// Instances made from now on show `pending` for `d` after they are made (moto answers
    /// `running` at once; EC2 takes seconds to boot one); `Duration::ZERO` stops it for new ones.
    pub fn keep_pending(&self, d: Duration) {
        lock(&self.state.ec2).pending_for = d;
    }

    /// Instances made from now on are found by tag filters (`tag:...` in a DescribeInstances
    /// listing) only `lag` after reads by id find them; `Duration::ZERO` stops it for new ones.
    pub fn set_tag_filter_lag(&self, lag: Duration) {
        lock(&self.state.ec2).tag_lag = lag;
    }

    /// From now on, the visibility delay and the tag-filter lag hide each instance made under them
    /// (and [`Proxy::hide`] the instance it hides) from at least the first read they apply to,
    /// however late that read comes. On a loaded machine the first look can come after a window of
    /// milliseconds is over; a test that counts the looks a wait takes holds with this whatever the
    /// load.
    pub fn miss_first_look(&self) {
        lock(&self.state.ec2).miss_first_look = true;
    }

    /// Filtered DescribeInstances listings page as EC2 does when it filters: each page looks at the
    /// next `n` instances of the region and holds those that match, so pages come short, or empty,
    /// with a `NextToken` while instances remain to look at (whatever `MaxResults` says).
    pub fn page_by_scan(&self, n: usize) {
        lock(&self.state.ec2).scan_per_page = Some(n.max(1));
    }

    /// For `d` from the next RunInstances naming an instance profile (that one refused too),
    /// RunInstances refuses the instance profile it names, as EC2 does for a while after IAM made it:
    /// `InvalidParameterValue` "Value (...) for parameter iamInstanceProfile.name is invalid. Invalid
    /// IAM Instance Profile name" (nothing is made). The window opens at that request, not at this
    /// call: on a loaded machine a create's lookups before it can take longer than a short window,
    /// and a test of the refusal must see at least one.
    pub fn refuse_new_profile(&self, d: Duration) {
        lock(&self.state.ec2).new_profile_refusal = Some(ProfileRefusal::For(d));
    }

    /// The next `n` RunInstances that make instances have them terminated right after they are
    /// made, as EC2 does with an instance that fails at launch (a volume it cannot make, a KMS key it
    /// may not use): the answer shows the instance made, reads then show it terminated with a state
    /// reason (moto's).
    pub fn fail_launches(&self, n: usize) {
        let mut ec2 = lock(&self.state.ec2);
        ec2.failing_launches = n;
        ec2.failing_reason = None;
    }

    /// As [`Proxy::fail_launches`], with the instances then read with EC2's state reason `code` and
    /// `message` (EC2 ends a launch for `Server.InsufficientInstanceCapacity`,
    /// `Server.InternalError`, `Client.InternalError`, `Client.VolumeLimitExceeded`, ...), where
    /// moto would say `Client.UserInitiatedShutdown`.
    pub fn fail_launches_for(&self, n: usize, code: &str, message: &str) {
        let mut ec2 = lock(&self.state.ec2);
        ec2.failing_launches = n;
        ec2.failing_reason = Some((code.to_string(), message.to_string()));
    }

    /// EC2's clock reads `seconds` later than this machine's (earlier when negative), as a machine
    /// whose clock is off sees it: every answer's `Date` header and every instance's `launchTime`
    /// are written by that clock.
    pub fn set_clock_offset(&self, seconds: i64) {
        lock(&self.state.ec2).clock_offset = chrono::TimeDelta::seconds(seconds);
    }

    /// Hides instance `id` for `delay` from now (as if it had just been made): after
    /// [`Proxy::miss_first_look`], from at least the next read of it too, however late that comes.
    /// `Duration::ZERO` shows it again at once.
    pub fn hide(&self, id: &str, delay: Duration) {
        let mut ec2 = lock(&self.state.ec2);
        if delay.is_zero() {
            ec2.unmissed.remove(id);
        } else if ec2.miss_first_look {
            ec2.unmissed.insert(id.to_string());
        }
        ec2.hidden_until
            .insert(id.to_string(), Instant::now() + delay);
    }

    /// Every request so far, in order.
    pub fn log(&self) -> Vec<Seen> {
        lock(&self.state.log).clone()
    }

    /// How many requests it has seen.
    pub fn requests(&self) -> u64 {
        lock(&self.state.log).len() as u64
    }

    /// The requests of `action`, in order.
    pub fn of(&self, action: &str) -> Vec<Seen> {
        self.log()
            .into_iter()
            .filter(|s| s.action == action)
            .collect()
    }

    /// How many requests of `action` it has seen.
    pub fn count(&self, action: &str) -> usize {
        self.of(action).len()
    }
}

async fn forward(
    State(view): State<View>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let state = &*view.state;
    let pairs = crate::control::form_pairs(&body);
    let params: BTreeMap<String, String> = pairs.iter().cloned().collect();
    let action = params.get("Action").cloned().unwrap_or_default();
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let fault = state.faults.take_for(&method, path, &pairs);
    let dropped = matches!(fault, Some(Fault::DropAnswer));
    if let Some(Fault::Latency(d)) = &fault {
        tokio::time::sleep(*d).await;
    }
    let (response, faulted, code) = match fault.as_ref().and_then(Fault::response) {
        // An answer in place of EC2's: the request never reaches moto.
        Some(answer) => {
            let code = match &fault {
                Some(Fault::Text { body, .. }) => error_code(body),
                _ => None,
            };
            (answer, true, code)
        }
        None => {
            // Served in a task of its own: a client that hangs up (a timeout, a process that
            // dies) must not cut a RunInstances between moto making the instance and the proxy
            // recording its ClientToken, or the token's retry would make a second instance.
            let served = {
                let (view, action, params) = (view.clone(), action.clone(), params.clone());
                tokio::spawn(async move {
                    let state = &*view.state;
                    let token = match params.get("ClientToken") {
                        Some(t) if action == "RunInstances" => Some(
                            lock(&state.run_tokens)
                                .entry(t.clone())
                                .or_default()
                                .clone(),
                        ),
                        _ => None,
                    };
                    let _served_alone = match &token {
                        Some(t) => Some(t.lock().await),
                        None => None,
                    };
                    match ec2_rules(state, &action, &params).await {
                        Some(answered) => answered,
                        None => {
                            upstream(&view, &action, &params, &method, &uri, &headers, &body).await
                        }
                    }
                })
            };
            let (r, code) = served.await.expect("the proxy's request task");
            match fault {
                // Served (by moto or by the proxy's EC2 rules), and the answer lost on the way.
                Some(Fault::DropAnswer) => {
                    let (parts, _) = r.into_parts();
                    (Response::from_parts(parts, broken_body()), true, code)
                }
                other => (r, other.is_some(), code),
            }
        }
    };
    lock(&state.log).push(Seen {
        action,
        params,
        at: Instant::now(),
        status: response.status().as_u16(),
        faulted,
        code,
    });
    let offset = lock(&state.ec2).clock_offset;
    if offset.is_zero() || dropped {
        return response;
    }
    by_ec2_clock(response, offset).await
}

/// `response` as EC2's clock, `offset` from this machine's, writes it: its `Date` header and its
/// instances' `launchTime`.
async fn by_ec2_clock(response: Response, offset: chrono::TimeDelta) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let text = super::answers::shift_launch_times(&String::from_utf8_lossy(&bytes), offset);
    let date = (Utc::now() + offset)
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    parts.headers.insert(
        axum::http::header::DATE,
        date.parse().expect("an HTTP date"),
    );
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(text))
}
