//! Plumbing shared by the test proxies ([`crate::fault_proxy`], [`crate::strict_proxy`]):
//! forwarding one HTTP request to an upstream, DynamoDB JSON-protocol error answers, and a
//! poison-tolerant lock.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;

/// Headers that belong to one connection, never forwarded.
pub(crate) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "content-length",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
];

/// The HTTP client a proxy forwards with.
pub(crate) fn upstream_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        .build()?)
}

/// Locks `m`; a panicking test thread must not hide the state from the others.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The DynamoDB operation named by a request's `X-Amz-Target` (e.g. `PutItem`).
pub(crate) fn operation_of(headers: &hyper::HeaderMap) -> Option<String> {
    headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .map(|t| t.rsplit('.').next().unwrap_or(t).to_owned())
}

/// An upstream answer, read whole.
pub(crate) struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Response headers, hop-by-hop ones removed.
    pub headers: reqwest::header::HeaderMap,
    /// Body.
    pub body: Bytes,
}

impl Answer {
    /// As a hyper response.
    pub fn into_response(self) -> anyhow::Result<Response<Full<Bytes>>> {
        let mut answer = Response::builder().status(self.status);
        for (name, value) in &self.headers {
            answer = answer.header(name.as_str(), value.as_bytes());
        }
        Ok(answer.body(Full::new(self.body))?)
    }
}

/// Sends `method path` with `headers` (hop-by-hop ones skipped) and `body` to `upstream`.
pub(crate) async fn send(
    client: &reqwest::Client,
    upstream: &str,
    method: &hyper::Method,
    path: &str,
    headers: &hyper::HeaderMap,
    body: Bytes,
) -> anyhow::Result<Answer> {
    let method = reqwest::Method::from_bytes(method.as_str().as_bytes())?;
    let mut out = client.request(method, format!("{upstream}{path}"));
    for (name, value) in headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out = out.header(name.as_str(), value.as_bytes());
        }
    }
    let res = out.body(body).send().await.context("forwarding")?;
    let status = res.status().as_u16();
    let mut headers = res.headers().clone();
    for h in HOP_BY_HOP {
        headers.remove(*h);
    }
    let body = res.bytes().await.context("reading the answer")?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// A DynamoDB JSON-protocol error answer: `{"__type": type_name, "message": message}`,
/// where `type_name` is the full shape id (e.g.
/// `com.amazon.coral.validate#ValidationException`).
pub(crate) fn aws_error(status: u16, type_name: &str, message: &str) -> Response<Full<Bytes>> {
    let code = type_name.rsplit('#').next().unwrap_or(type_name);
    let body = serde_json::json!({ "__type": type_name, "message": message }).to_string();
    Response::builder()
        .status(status)
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amzn-errortype", code)
        .header("x-amzn-requestid", uuid::Uuid::new_v4().to_string())
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}
