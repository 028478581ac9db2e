//! What every fake shares: a log of the requests it served and fault injection on demand, as one axum
//! middleware ([`Control::layer`]).
//!
//! A fault is matched by HTTP method, a substring of the path (and query) and, for a Query API that
//! posts its action as a form (EC2), pairs the form body must carry ([`Rule::when_form`]); it applies
//! to the next `times` matching requests:
//! - [`Fault::Status`]: answer this status, body and headers instead of serving the request;
//! - [`Fault::Text`]: answer this status and body as it stands (an XML error) instead of serving it;
//! - [`Fault::Latency`]: wait, then serve;
//! - [`Fault::DropAnswer`]: serve the request (its effects happen), then break the connection after the
//!   status line, so the client sees a dropped connection: the ambiguous failure.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
pub(crate) use orca_machines::kit::lock;

/// What an injected fault does.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status, JSON body and headers; the request is not served.
    Status {
        /// The HTTP status.
        status: u16,
        /// The JSON body.
        body: serde_json::Value,
        /// Extra headers (for example `Retry-After`).
        headers: Vec<(String, String)>,
    },
    /// Wait this long, then serve the request.
    Latency(Duration),
    /// Serve the request, then drop the connection before the body: the client cannot know the outcome.
    DropAnswer,
    /// Answer with this status and this body as it stands, of this content type (an XML error of a
    /// Query API); the request is not served.
    Text {
        /// The HTTP status.
        status: u16,
        /// The `Content-Type` of the body.
        content_type: String,
        /// The body.
        body: String,
    },
}

impl Fault {
    /// The answer this fault gives instead of serving the request ([`Fault::Status`],
    /// [`Fault::Text`]); `None` for a fault that serves it.
    pub fn response(&self) -> Option<Response> {
        let status = |s: u16| StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        match self {
            Fault::Status {
                status: s,
                body,
                headers,
            } => {
                let mut r = (status(*s), axum::Json(body.clone())).into_response();
                add_headers(&mut r, headers);
                Some(r)
            }
            Fault::Text {
                status: s,
                content_type,
                body,
            } => {
                let mut r = (status(*s), body.clone()).into_response();
                add_headers(&mut r, &[("content-type", content_type)]);
                Some(r)
            }
            Fault::Latency(_) | Fault::DropAnswer => None,
        }
    }
}

/// Adds `headers` to `r` (replacing a header of the same name), leaving out any whose name or
/// value is not valid in HTTP.
pub(crate) fn add_headers(r: &mut Response, headers: &[(impl AsRef<str>, impl AsRef<str>)]) {
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_ref().as_bytes()),
            HeaderValue::from_str(v.as_ref()),
        ) {
            r.headers_mut().insert(k, v);
        }
    }
}

/// A fault, the requests it applies to, and how many more times it fires.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Only requests of this method (any when `None`).
    pub method: Option<Method>,
    /// Only requests whose path and query contain this (any when empty).
    pub path_contains: String,
    /// What happens.
    pub fault: Fault,
    /// How many more matching requests it applies to.
    pub times: u32,
    /// Only requests whose form body (`application/x-www-form-urlencoded`) carries every one of these
    /// pairs (any when empty): the action and parameters of a Query API such as EC2's.
    pub form: Vec<(String, String)>,
}

impl Rule {
    /// A rule for `times` requests of `method` whose path contains `path_contains`.
    pub fn new(method: Option<Method>, path_contains: &str, fault: Fault, times: u32) -> Self {
        Rule {
            method,
            path_contains: path_contains.to_string(),
            fault,
            times,
            form: Vec::new(),
        }
    }

    /// The same rule, only for requests whose form body carries `key` = `value` as well.
    pub fn when_form(mut self, key: &str, value: &str) -> Self {
        self.form.push((key.to_string(), value.to_string()));
        self
    }

    fn matches(&self, method: &Method, path: &str, form: &[(String, String)]) -> bool {
        self.times > 0
            && self.method.as_ref().is_none_or(|m| m == method)
            && path.contains(&self.path_contains)
            && self.form.iter().all(|p| form.contains(p))
    }
}

/// One served request, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// The method.
    pub method: Method,
    /// The path and query.
    pub path: String,
    /// The status answered.
    pub status: u16,
    /// When it was answered, on tokio's clock (the paused clock of a test or bench that pauses it).
    pub at: tokio::time::Instant,
}

/// The request log and fault rules of one fake server.
#[derive(Debug, Default)]
pub struct Control {
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<Logged>>,
}

impl Control {
    /// Adds a fault rule (rules are tried in the order added).
    pub fn inject(&self, rule: Rule) {
        lock(&self.rules).push(rule);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        lock(&self.rules).clear();
    }

    /// Removes the fault rules `remove` picks.
    pub fn clear_faults_where(&self, remove: impl Fn(&Rule) -> bool) {
        lock(&self.rules).retain(|r| !remove(r));
    }

    /// Every request served so far.
    pub fn log(&self) -> Vec<Logged> {
        lock(&self.log).clone()
    }

    /// How many requests were served so far.
    pub fn requests(&self) -> u64 {
        lock(&self.log).len() as u64
    }

    /// How many requests so far matched `method` and contained `path_contains`.
    pub fn count(&self, method: &Method, path_contains: &str) -> usize {
        lock(&self.log)
            .iter()
            .filter(|l| l.method == *method && l.path.contains(path_contains))
            .count()
    }

    /// Forgets the log.
    pub fn clear_log(&self) {
        lock(&self.log).clear();
    }

    /// The fault of the first rule that matches a request of `method` to `path` (and query) whose
    /// form body decodes to `form` ([`form_pairs`]; empty for none), used up once: what
    /// [`Control::layer`] applies, and what a server that reads the body itself (the EC2 tests'
    /// proxy in front of moto) asks for.
    pub fn take_for(
        &self,
        method: &Method,
        path: &str,
        form: &[(String, String)],
    ) -> Option<Fault> {
        let mut rules = lock(&self.rules);
        let hit = rules.iter_mut().find(|r| r.matches(method, path, form))?;
        hit.times -= 1;
        let fault = hit.fault.clone();
        rules.retain(|r| r.times > 0);
        Some(fault)
    }

    fn wants_form(&self) -> bool {
        lock(&self.rules).iter().any(|r| !r.form.is_empty())
    }

    /// The middleware: logs each request and applies the first matching fault.
    pub async fn layer(State(control): State<Arc<Control>>, req: Request, next: Next) -> Response {
        let method = req.method().clone();
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        // The body is read (and handed on) only while some rule looks into it.
        let (req, form) = if control.wants_form() {
            let (parts, body) = req.into_parts();
            let bytes = axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap_or_default();
            let form = form_pairs(&bytes);
            (Request::from_parts(parts, Body::from(bytes)), form)
        } else {
            (req, Vec::new())
        };
        let fault = control.take_for(&method, &path, &form);
        let answered = fault.as_ref().and_then(Fault::response);
        let response = match (answered, fault) {
            (Some(answer), _) => answer,
            (None, Some(Fault::Latency(d))) => {
                tokio::time::sleep(d).await;
                next.run(req).await
            }
            (None, Some(Fault::DropAnswer)) => {
                let (parts, _) = next.run(req).await.into_parts();
                let mut r = Response::from_parts(parts, broken_body());
                r.headers_mut().remove(axum::http::header::CONTENT_LENGTH);
                r
            }
            (None, _) => next.run(req).await,
        };
        lock(&control.log).push(Logged {
            method,
            path,
            status: response.status().as_u16(),
            at: tokio::time::Instant::now(),
        });
        response
    }
}

/// The pairs of a query string or an `application/x-www-form-urlencoded` body, decoded (`+` is a
/// space, `%XX` a byte), in order, repeated keys kept.
pub fn form_pairs(encoded: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(encoded)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A body whose first read fails, so hyper aborts the connection mid-answer.
pub(crate) fn broken_body() -> Body {
    struct Broken;
    impl http_body::Body for Broken {
        type Data = axum::body::Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            std::task::Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "injected: connection dropped",
            ))))
        }
    }
    Body::new(Broken)
}

/// A fake server running on 127.0.0.1 until dropped.
#[derive(Debug)]
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its request log and faults.
    pub control: Arc<Control>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `router` on 127.0.0.1 on a port the OS picks, behind the [`Control`] middleware.
pub async fn serve(router: Router, control: Arc<Control>) -> std::io::Result<Running> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let app = router.layer(axum::middleware::from_fn_with_state(
        control.clone(),
        Control::layer,
    ));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(Running {
        addr,
        control,
        task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::post;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A Query API (EC2's shape): every action is a form posted to `/`; a rule picks requests by
    /// the form's pairs, and answers an XML error as it stands.
    #[tokio::test]
    async fn rules_match_the_form_body_and_answer_text() {
        let served = Arc::new(AtomicU32::new(0));
        let s = served.clone();
        let router = axum::Router::new().route(
            "/",
            post(move |body: String| {
                let s = s.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    body
                }
            }),
        );
        let control = Arc::new(Control::default());
        let server = serve(router, control.clone()).await.unwrap();
        let xml = "<Response><Errors><Error><Code>RequestLimitExceeded</Code></Error></Errors>\
                   </Response>";
        control.inject(
            Rule::new(
                Some(Method::POST),
                "",
                Fault::Text {
                    status: 503,
                    content_type: "text/xml".into(),
                    body: xml.into(),
                },
                2,
            )
            .when_form("Action", "RunInstances")
            .when_form("InstanceType", "t3.micro"),
        );
        control
            .inject(Rule::new(None, "", Fault::DropAnswer, 1).when_form("Action", "StopInstances"));
        let http = reqwest::Client::new();
        let post = |form: &'static [(&'static str, &'static str)]| {
            http.post(format!("{}/", server.url())).form(form).send()
        };
        // Another action, or the same one with other parameters: served, body intact.
        let r = post(&[("Action", "DescribeInstances")]).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "Action=DescribeInstances");
        let r = post(&[("Action", "RunInstances"), ("InstanceType", "t3.small")])
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        // The matching one: the text as it stands, not served.
        let r = post(&[("Action", "RunInstances"), ("InstanceType", "t3.micro")])
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()["content-type"], "text/xml");
        assert_eq!(r.text().await.unwrap(), xml);
        assert_eq!(served.load(Ordering::SeqCst), 2);
        // Rules are removed by what they match.
        control.clear_faults_where(|r| r.form.contains(&("Action".into(), "RunInstances".into())));
        let r = post(&[("Action", "RunInstances"), ("InstanceType", "t3.micro")])
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        // The drop rule is still there, and for its action only.
        assert!(control
            .take_for(&Method::POST, "/", &form_pairs(b"Action=RunInstances"))
            .is_none());
        let dropped = match post(&[("Action", "StopInstances")]).await {
            Ok(r) => r.bytes().await.is_err(),
            Err(_) => true,
        };
        assert!(dropped, "the answer must be lost");
        assert_eq!(served.load(Ordering::SeqCst), 4);
    }
}
