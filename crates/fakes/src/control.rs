//! What every fake shares: a log of the requests it served and fault injection on demand, as one axum
//! middleware ([`Control::layer`]).
//!
//! A fault is matched by HTTP method and a substring of the path (and query), and applies to the next
//! `times` matching requests:
//! - [`Fault::Status`]: answer this status, body and headers instead of serving the request;
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
}

impl Rule {
    /// A rule for `times` requests of `method` whose path contains `path_contains`.
    pub fn new(method: Option<Method>, path_contains: &str, fault: Fault, times: u32) -> Self {
        Rule {
            method,
            path_contains: path_contains.to_string(),
            fault,
            times,
        }
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
}

/// The request log and fault rules of one fake server.
#[derive(Debug, Default)]
pub struct Control {
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<Logged>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

    fn take(&self, method: &Method, path: &str) -> Option<Fault> {
        let mut rules = lock(&self.rules);
        let hit = rules.iter_mut().find(|r| {
            r.times > 0
                && r.method.as_ref().is_none_or(|m| m == method)
                && path.contains(&r.path_contains)
        })?;
        hit.times -= 1;
        let fault = hit.fault.clone();
        rules.retain(|r| r.times > 0);
        Some(fault)
    }

    /// The middleware: logs each request and applies the first matching fault.
    pub async fn layer(State(control): State<Arc<Control>>, req: Request, next: Next) -> Response {
        let method = req.method().clone();
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        let fault = control.take(&method, &path);
        let response = match fault {
            Some(Fault::Status {
                status,
                body,
                headers,
            }) => {
                let mut r = (
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    axum::Json(body),
                )
                    .into_response();
                for (k, v) in headers {
                    if let (Ok(k), Ok(v)) = (
                        HeaderName::from_bytes(k.as_bytes()),
                        HeaderValue::from_str(&v),
                    ) {
                        r.headers_mut().insert(k, v);
                    }
                }
                r
            }
            Some(Fault::Latency(d)) => {
                tokio::time::sleep(d).await;
                next.run(req).await
            }
            Some(Fault::DropAnswer) => {
                let served = next.run(req).await;
                let (parts, _) = served.into_parts();
                let broken = broken_body();
                let mut r = Response::from_parts(parts, broken);
                r.headers_mut().remove(axum::http::header::CONTENT_LENGTH);
                r
            }
            None => next.run(req).await,
        };
        lock(&control.log).push(Logged {
            method,
            path,
            status: response.status().as_u16(),
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
fn broken_body() -> Body {
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
