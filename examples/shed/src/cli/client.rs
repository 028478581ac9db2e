//! The CLI's HTTP client: requests built segment by segment, JSON answers, event streams, and the
//! server's refusals as [`Failure::Refused`].

use reqwest::Method;
use serde_json::Value;

use crate::backend::ApiError;

/// The most the CLI reads of one answer: a list of every shed of a server is a few hundred KiB.
const MAX_ANSWER: usize = 16 << 20;

/// The most one event of a stream may hold before its end (a shed's status is under 1 KiB).
const MAX_EVENT: usize = 1 << 20;

/// The body of `resp`, or why it was not read: a broken answer, or one over [`MAX_ANSWER`], whose
/// rest is never read.
async fn body(mut resp: reqwest::Response) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("the server: {e}"))? {
        if bytes.len() + chunk.len() > MAX_ANSWER {
            return Err(Failure::Other(format!(
                "the server's answer is over {} MiB; not read further",
                MAX_ANSWER >> 20
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Why a command stopped short.
#[derive(Debug)]
pub(super) enum Failure {
    /// The server refused: its error body, with the answer's HTTP status.
    Refused(ApiError),
    /// Anything else: the server could not be reached, or its answer could not be read.
    Other(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Other(e)
    }
}

/// A server's API root, with the client's bearer token.
pub(super) struct Client {
    pub(super) http: reqwest::Client,
    pub(super) base: url::Url,
    pub(super) token: Option<String>,
}

/// The error body of an answer that is not a success (a body that is not one is kept as text).
fn refusal(status: u16, bytes: &[u8]) -> Failure {
    let e = serde_json::from_slice::<ApiError>(bytes).unwrap_or_else(|_| {
        ApiError::new(
            status,
            &format!("HTTP_{status}"),
            String::from_utf8_lossy(bytes),
        )
    });
    Failure::Refused(ApiError { status, ..e })
}

impl Client {
    /// A request to the API route made of `segments` under the server's root, each segment
    /// percent-encoded on its own (a `/` or `..` in a segment can never reach another route).
    pub(super) fn req(&self, method: Method, segments: &[&str]) -> reqwest::RequestBuilder {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        let mut r = self.http.request(method, url);
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    /// Why a request got no answer: orca's transport error (what failed, with every cause and
    /// without the URL), and, when nothing took the connection, where and what to check.
    fn unanswered(&self, e: reqwest::Error) -> String {
        let connect = e.is_connect();
        let said = orca::kit::transport_error(e);
        if connect {
            format!(
                "no server answers at {}: {said}; is shed-server running there? (the address is --server, or SHED_SERVER)",
                self.base
            )
        } else {
            format!("the server: {said}")
        }
    }

    /// Sends a request to the route of `segments` (as [`Client::req`] makes it).
    pub(super) async fn call(&self, method: Method, segments: &[&str]) -> Result<Value, Failure> {
        self.send(self.req(method, segments)).await
    }

    /// Sends `r`: the JSON of a success (`null` for an empty body), else the refusal.
    pub(super) async fn send(&self, r: reqwest::RequestBuilder) -> Result<Value, Failure> {
        let resp = r.send().await.map_err(|e| self.unanswered(e))?;
        let status = resp.status().as_u16();
        let bytes = body(resp).await?;
        if !(200..300).contains(&status) {
            return Err(refusal(status, &bytes));
        }
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        Ok(serde_json::from_slice(&bytes).map_err(|e| format!("the server's answer: {e}"))?)
    }

    /// Sends `r` asking for an event stream and calls `on` for each `(event, data)` until it
    /// answers an exit code.
    pub(super) async fn events(
        &self,
        r: reqwest::RequestBuilder,
        mut on: impl FnMut(&str, Value) -> Option<i32>,
    ) -> Result<i32, Failure> {
        let mut resp = r
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| self.unanswered(e))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(refusal(status, &body(resp).await?));
        }
        // Bytes, not text, until a block ends: a character may be split between two chunks.
        let mut buf = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| format!("the stream broke off: {e}"))?
        {
            buf.extend_from_slice(&chunk);
            while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = buf.drain(..end + 2).collect();
                let Some((name, data)) = parse_event(&String::from_utf8_lossy(&block)) else {
                    continue;
                };
                if let Some(code) = on(&name, data) {
                    return Ok(code);
                }
            }
            if buf.len() > MAX_EVENT {
                return Err(Failure::Other(format!(
                    "an event of the server's stream is over {} MiB; not read further",
                    MAX_EVENT >> 20
                )));
            }
        }
        Err(Failure::Other(
            "the stream ended before the shed settled".into(),
        ))
    }
}

/// One block of an event stream: its event name (`message` when it names none) and its data, as
/// JSON when it is JSON; `None` for a block without data (a keep-alive).
fn parse_event(block: &str) -> Option<(String, Value)> {
    let mut name = "message".to_string();
    let mut data = String::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    if data.is_empty() {
        return None;
    }
    let v = serde_json::from_str(&data).unwrap_or(Value::String(data));
    Some((name, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_segment_is_percent_encoded_on_its_own() {
        let client = Client {
            http: reqwest::Client::new(),
            base: url::Url::parse("http://127.0.0.1:8421/prefix/").unwrap(),
            token: None,
        };
        let r = client
            .req(
                reqwest::Method::POST,
                &["api", "sheds", "zz/../b?x#y", "stop"],
            )
            .build()
            .unwrap();
        assert_eq!(
            r.url().as_str(),
            "http://127.0.0.1:8421/prefix/api/sheds/zz%2F..%2Fb%3Fx%23y/stop"
        );
    }
}
