//! The layer every response passes through: request id, `OJS-Version`, content type,
//! Accept negotiation, and the rendering of error bodies (including axum's own 404/405).

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use ojs_core::{ErrorCode, OjsError};
use serde_json::{json, Value};

use crate::error::{ApiError, PendingError};

/// The media type of every response body.
pub(crate) const OJS_JSON: &str = "application/openjobspec+json";
/// The value of `OJS-Version` on every response.
const OJS_VERSION: &str = "1.0";
/// Longest client-supplied request id echoed back.
const MAX_REQUEST_ID: usize = 128;

/// Wraps a router in the OJS response layer.
pub(crate) fn wrap(router: Router) -> Router {
    router.layer(middleware::from_fn(ojs_layer))
}

async fn ojs_layer(req: Request<Body>, next: Next) -> Response {
    let request_id = request_id(&req);
    let started = std::time::Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let mut res = if accepts_json(&req) {
        next.run(req).await
    } else {
        ApiError(OjsError::new(
            ErrorCode::NotAcceptable,
            "this server produces application/openjobspec+json or application/json",
        ))
        .into_response()
    };
    if let Some(PendingError(err)) = res.extensions_mut().remove::<PendingError>() {
        res = render_error(res.status(), &err, &request_id);
    } else if res.status().is_client_error() && !res.headers().contains_key(header::CONTENT_TYPE) {
        // Routing rejections (unknown path, wrong method) carry no body of ours.
        let code = match res.status() {
            StatusCode::NOT_FOUND => ErrorCode::NotFound,
            StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
            _ => ErrorCode::InvalidRequest,
        };
        let message = format!("no OJS endpoint {method} {path}");
        res = render_error(res.status(), &OjsError::new(code, message), &request_id);
    }
    let headers = res.headers_mut();
    headers.insert("ojs-version", HeaderValue::from_static(OJS_VERSION));
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        headers.insert("x-request-id", v);
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(OJS_JSON));
    tracing::info!(
        request_id = %request_id,
        method = %method,
        path = %path,
        status = res.status().as_u16(),
        latency_us = started.elapsed().as_micros() as u64,
        "request"
    );
    res
}

/// The client's `X-Request-Id` when it is printable and short, else `req_<uuidv7>`.
fn request_id(req: &Request<Body>) -> String {
    req.headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| {
            !v.is_empty() && v.len() <= MAX_REQUEST_ID && v.chars().all(|c| c.is_ascii_graphic())
        })
        .map_or_else(|| format!("req_{}", uuid::Uuid::now_v7()), str::to_owned)
}

/// Whether `Accept` (absent, `*/*`, JSON or OJS JSON, with any parameters) allows JSON.
fn accepts_json(req: &Request<Body>) -> bool {
    let Some(accept) = req.headers().get(header::ACCEPT) else {
        return true;
    };
    let Ok(accept) = accept.to_str() else {
        return false;
    };
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let refused = parts.any(|p| p.trim().replace(' ', "") == "q=0");
        !refused
            && matches!(
                essence.as_str(),
                "*/*" | "application/*" | "application/json" | OJS_JSON | ""
            )
    })
}

fn render_error(status: StatusCode, err: &OjsError, request_id: &str) -> Response {
    let mut body = json!({
        "code": err.code.as_str(),
        "type": err.code.kind(),
        "message": err.message,
        "retryable": err.code.retryable(),
        "hint": err.code.hint(),
        "docs_url": format!("https://openjobspec.org/spec/errors#{}", err.code.as_str()),
        "request_id": request_id,
    });
    if !err.details.is_empty() {
        body["details"] = Value::Object(err.details.clone());
    }
    let mut res = (status, json!({ "error": body }).to_string()).into_response();
    if err.code == ErrorCode::RateLimited || err.code == ErrorCode::BackendError {
        let after = err
            .details
            .get("retry_after_seconds")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        if let Ok(v) = HeaderValue::from_str(&after.to_string()) {
            res.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    if let Some(state) = err.details.get("rate_limit") {
        rate_limit_headers(res.headers_mut(), state);
    }
    res
}

/// `X-RateLimit-Limit`, `-Remaining` and `-Reset` from `{limit, remaining, reset}`.
pub(crate) fn rate_limit_headers(headers: &mut axum::http::HeaderMap, state: &Value) {
    for (name, key) in [
        ("x-ratelimit-limit", "limit"),
        ("x-ratelimit-remaining", "remaining"),
        ("x-ratelimit-reset", "reset"),
    ] {
        if let Some(v) = state
            .get(key)
            .and_then(|v| HeaderValue::from_str(&v.to_string()).ok())
        {
            headers.insert(name, v);
        }
    }
}
