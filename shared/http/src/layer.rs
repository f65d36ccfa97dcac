//! The layer every response passes through: request id, `OJS-Version`, content type,
//! Accept negotiation, and the rendering of error bodies (including axum's own 404/405).

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use ojs_core::{ErrorCode, OjsError};
use serde_json::{json, Value};
use tracing::Instrument;

use crate::cors::CorsPolicy;
use crate::error::{ApiError, PendingError};
use crate::negotiate::{self, Envelopes, Format};
use crate::AppState;

/// The Content-Type of JSON responses (binding §6.5; the conformance suite compares it
/// exactly).
pub const OJS_JSON: &str = "application/openjobspec+json";
/// The same media type with a parameter naming its `application/json` alias, answered to
/// the Python SDK, which parses a success body only when its Content-Type contains
/// `application/json` (README, "Client compatibility").
pub const OJS_JSON_ALIASED: &str = "application/openjobspec+json; alias=\"application/json\"";
/// The User-Agent prefix of the Python SDK's HTTP client (httpx).
const PYTHON_SDK_AGENT: &[u8] = b"python-httpx/";
/// The value of `OJS-Version` on every response.
const OJS_VERSION: &str = "1.0";
/// Longest client-supplied request id echoed back.
const MAX_REQUEST_ID: usize = 128;

/// Wraps a router in the OJS response layer.
pub(crate) fn wrap(router: Router, state: AppState) -> Router {
    router.layer(middleware::from_fn_with_state(state, ojs_layer))
}

/// Marks a response whose handler set its own Content-Type (the Cloudq binding answers
/// `application/json`); the layer keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnContentType;

/// The job a response is about, for the request log line.
#[derive(Debug, Clone)]
pub(crate) struct LogSubject {
    job_id: String,
    queue: String,
    /// The trace the job's `meta.traceparent` names.
    trace_id: Option<String>,
    /// How many jobs the response carries (FETCH and batch answers).
    jobs: usize,
}

impl LogSubject {
    /// The first job of `{"job": ...}` or `{"jobs": [...]}`, if any.
    pub(crate) fn of(body: &Value) -> Option<Self> {
        let (job, jobs) = match (body.get("job"), body.get("jobs").and_then(Value::as_array)) {
            (Some(job), _) => (job, 1),
            (None, Some(list)) => (list.first()?, list.len()),
            _ => return None,
        };
        let field = |k: &str| job.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let trace_id = job
            .get("meta")
            .and_then(Value::as_object)
            .and_then(ojs_core::trace::of_meta)
            .map(|t| t.trace_id);
        Some(Self {
            job_id: field("id"),
            queue: field("queue"),
            trace_id,
            jobs,
        })
    }
}

/// Runs the handler; a panic costs this request a `500 internal_error`, not the process
/// (release builds unwind: on Lambda an abort would kill the instance and every request
/// in it, and the next cold start would pay for it). No input is meant to reach a panic
/// (the HTTP fuzzer checks); this is the backstop.
async fn run_catching_panics(next: Next, req: Request<Body>) -> Response {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(next.run(req))
        .catch_unwind()
        .await
    {
        Ok(res) => res,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(panic = %what, "handler panicked; answered 500");
            ApiError(OjsError::new(
                ErrorCode::Internal,
                "the server failed on this request; it is logged under the request_id",
            ))
            .into_response()
        }
    }
}

/// Paths served without an API key: discovery and liveness, which reveal no job data.
fn is_public(method: &Method, path: &str) -> bool {
    crate::scopes::route(method, path).is_some_and(|r| r.need == crate::scopes::Need::Public)
}

/// Inside the router: a path that [`crate::scopes::ROUTES`] does not list answers 500,
/// whatever the auth mode, so no route is ever served on a guess of its scope (and every
/// test that calls a route missing from the table fails).
pub(crate) fn guard_routes(router: Router<AppState>) -> Router<AppState> {
    router.route_layer(middleware::from_fn(route_guard))
}

async fn route_guard(req: Request<Body>, next: Next) -> Response {
    let pattern = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|m| m.as_str().to_owned());
    match pattern {
        // A method the table does not list on a listed path is the router's 405 (the
        // route layer also wraps it); a new method the router serves there is caught by
        // the table's test of the routers' source.
        Some(p) if !crate::scopes::ROUTES.iter().any(|r| r.path == p) => {
            tracing::error!(method = %req.method(), route = %p, "route missing from the scope table");
            ApiError(OjsError::new(
                ErrorCode::Internal,
                format!(
                    "no scope is defined for {} {p} (shared/http/src/scopes.rs)",
                    req.method()
                ),
            ))
            .into_response()
        }
        _ => next.run(req).await,
    }
}

/// The headers the HTTP binding puts on every response: `OJS-Version`, `X-Request-Id` and
/// the OJS JSON `Content-Type`.
fn standard_headers(headers: &mut HeaderMap, request_id: &str, json_type: &'static str) {
    version_and_request_id(headers, request_id);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(json_type));
}

/// `OJS-Version` and `X-Request-Id`, for a response that keeps its own Content-Type.
fn version_and_request_id(headers: &mut HeaderMap, request_id: &str) {
    headers.insert("ojs-version", HeaderValue::from_static(OJS_VERSION));
    if let Ok(v) = HeaderValue::from_str(request_id) {
        headers.insert("x-request-id", v);
    }
}

/// What the layer reads of a request before its handler runs, for the answer's headers
/// and the request's log line.
struct Seen {
    request_id: String,
    xray_trace_id: Option<String>,
    started: std::time::Instant,
    method: Method,
    path: String,
    origin: Option<HeaderValue>,
    json_type: &'static str,
}

impl Seen {
    fn of(req: &Request<Body>, state: &AppState) -> Self {
        Self {
            request_id: request_id(req),
            xray_trace_id: xray_trace_id(req),
            started: std::time::Instant::now(),
            method: req.method().clone(),
            path: req.uri().path().to_owned(),
            origin: req.headers().get(header::ORIGIN).cloned(),
            json_type: if state.config.json_alias_for_all || sdk_request(req.headers()) {
                OJS_JSON_ALIASED
            } else {
                OJS_JSON
            },
        }
    }
}

async fn ojs_layer(State(state): State<AppState>, mut req: Request<Body>, next: Next) -> Response {
    let seen = Seen::of(&req, &state);
    if CorsPolicy::is_preflight(&seen.method, req.headers()) {
        return preflight(&state, &req, &seen);
    }
    let principal = authorize(&state, req.headers(), &seen.method, &seen.path).await;
    let key_id = principal
        .as_ref()
        .ok()
        .and_then(|p| p.as_ref().map(|p| p.key_id.clone()));
    if let Ok(Some(p)) = &principal {
        // Handlers that register something record the key that did (crate::extract::Caller).
        req.extensions_mut().insert(p.clone());
    }
    let (res, ddb) = match principal {
        Err(err) => (
            ApiError(err).into_response(),
            ojs_store::UsageSnapshot::default(),
        ),
        Ok(_) => serve(req, next, &seen).await,
    };
    let mut res = render_error_body(res, &seen).await;
    finish_headers(&mut res, &state, &seen);
    log_request(&res, &seen, key_id.as_deref(), &ddb);
    res
}

/// The answer to a CORS preflight, which no handler sees.
fn preflight(state: &AppState, req: &Request<Body>, seen: &Seen) -> Response {
    let mut res = StatusCode::NO_CONTENT.into_response();
    state
        .cors
        .preflight_headers(req.headers(), res.headers_mut());
    // "Every response must include" the three (HTTP binding, standard response headers).
    standard_headers(res.headers_mut(), &seen.request_id, seen.json_type);
    res
}

/// Who the request comes from: nobody on a public path or with auth off; an error for a
/// missing or unknown key (401), or for a valid key that lacks the scope or the tenant
/// this request needs (403).
async fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    method: &Method,
    path: &str,
) -> Result<Option<crate::auth::Principal>, OjsError> {
    if is_public(method, path) {
        return Ok(None);
    }
    match state.auth.check(headers).await {
        Ok(Some(p)) => crate::scopes::check(p.scopes, method, path)
            .and_then(|()| {
                let tenant = p.tenant.as_ref().map(|t| t.as_str());
                crate::scopes::check_tenant(tenant, method, path)
            })
            .map(|()| Some(p)),
        other => other,
    }
}

/// Runs the handler on the negotiated request, answering in the format negotiated, with
/// the DynamoDB calls and capacity the handling took.
async fn serve(
    req: Request<Body>,
    next: Next,
    seen: &Seen,
) -> (Response, ojs_store::UsageSnapshot) {
    let kind = Envelopes::of(&seen.method, &seen.path);
    let (req, format) = match negotiate_request(req, &seen.method, &seen.path, kind).await {
        Ok(negotiated) => negotiated,
        Err(err) => {
            return (
                ApiError(err).into_response(),
                ojs_store::UsageSnapshot::default(),
            )
        }
    };
    // Every line logged while the request is handled carries its id.
    let span = tracing::info_span!(
        "request",
        request_id = %seen.request_id,
        xray_trace_id = seen.xray_trace_id.as_deref().unwrap_or("-"),
    );
    let (res, usage) = ojs_store::measured(run_catching_panics(next, req).instrument(span)).await;
    let res = match format {
        Format::Proto => negotiate::encode_response(res, kind).await,
        Format::Json => res,
    };
    (res, usage)
}

/// The OJS error body of a handler's error, and of axum's own rejections: routing
/// rejections (unknown path, wrong method) carry no body, and extractor rejections (a
/// path or query parameter that does not parse) axum's plain text.
async fn render_error_body(mut res: Response, seen: &Seen) -> Response {
    if let Some(PendingError(err)) = res.extensions_mut().remove::<PendingError>() {
        return render_error(res.status(), &err, &seen.request_id);
    }
    if !(res.status().is_client_error() && is_axum_rejection(&res)) {
        return res;
    }
    let code = match res.status() {
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        _ => ErrorCode::InvalidRequest,
    };
    let text = axum::body::to_bytes(std::mem::take(res.body_mut()), 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let (method, path) = (&seen.method, &seen.path);
    let message = if text.is_empty() {
        format!("no OJS endpoint {method} {path}")
    } else {
        format!("{text} ({method} {path})")
    };
    render_error(
        res.status(),
        &OjsError::new(code, message),
        &seen.request_id,
    )
}

/// The headers of every answer (a handler's own Content-Type kept), the challenge of a
/// 401 and the CORS headers.
fn finish_headers(res: &mut Response, state: &AppState, seen: &Seen) {
    if res.extensions().get::<OwnContentType>().is_some() {
        version_and_request_id(res.headers_mut(), &seen.request_id);
    } else {
        standard_headers(res.headers_mut(), &seen.request_id, seen.json_type);
    }
    if res.status() == StatusCode::UNAUTHORIZED {
        res.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    state
        .cors
        .response_headers(seen.origin.as_ref(), res.headers_mut());
}

/// The request's one log line.
fn log_request(res: &Response, seen: &Seen, key_id: Option<&str>, ddb: &ojs_store::UsageSnapshot) {
    let subject = res.extensions().get::<LogSubject>();
    tracing::info!(
        request_id = %seen.request_id,
        method = %seen.method,
        path = %seen.path,
        status = res.status().as_u16(),
        latency_us = seen.started.elapsed().as_micros() as u64,
        key_id = key_id.unwrap_or("-"),
        job_id = subject.map_or("-", |s| s.job_id.as_str()),
        queue = subject.map_or("-", |s| s.queue.as_str()),
        trace_id = subject.and_then(|s| s.trace_id.as_deref()).unwrap_or("-"),
        xray_trace_id = seen.xray_trace_id.as_deref().unwrap_or("-"),
        jobs = subject.map_or(0, |s| s.jobs),
        ddb_calls = ddb.calls,
        ddb_rcu = ddb.read_units,
        ddb_wcu = ddb.write_units,
        "request"
    );
}

/// The answer's format, then the body as its handler reads it: decompressed
/// (`Content-Encoding`), then translated from Protobuf. A 406 is decided before the body
/// is read.
async fn negotiate_request(
    req: Request<Body>,
    method: &Method,
    path: &str,
    kind: Envelopes,
) -> Result<(Request<Body>, Format), OjsError> {
    // `/metrics` answers Prometheus text whatever a scraper accepts.
    let format = if negotiate::produces_text(method, path) {
        Format::Json
    } else {
        negotiate::response_format(req.headers(), kind)?
    };
    let req = crate::decompress::decode_request(req, kind.body_limit()).await?;
    let mut req = negotiate::decode_request(req, kind).await?;
    // The handler's to know too: a FETCH bounds its answer by the form it is sent in.
    req.extensions_mut().insert(format);
    Ok((req, format))
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

/// The X-Ray trace API Gateway gives the request (`X-Amzn-Trace-Id`, `Root=1-...`), when
/// printable and short: the request's line is then found from its trace in X-Ray.
fn xray_trace_id(req: &Request<Body>) -> Option<String> {
    req.headers()
        .get("x-amzn-trace-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 256 && v.chars().all(|c| c.is_ascii_graphic()))
        .map(str::to_owned)
}

/// Whether a request comes from an official SDK: httpx's User-Agent (the Python SDK's
/// client), or both `OJS-Version` and `X-Request-ID`, which the Python, JavaScript and Rust
/// SDKs send on every request (a Python client may set its own User-Agent) and the
/// conformance suite, which compares the Content-Type exactly, never sends together.
fn sdk_request(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::USER_AGENT)
        .is_some_and(|ua| ua.as_bytes().starts_with(PYTHON_SDK_AGENT))
        || (headers.contains_key("ojs-version") && headers.contains_key("x-request-id"))
}

/// Whether a response is axum's own (no body, or its plain-text rejection), not ours.
fn is_axum_rejection(res: &Response) -> bool {
    res.headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|ct| ct.as_bytes().starts_with(b"text/plain"))
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
    if matches!(
        err.code,
        ErrorCode::RateLimited
            | ErrorCode::QueueFull
            | ErrorCode::TenantLimitExceeded
            | ErrorCode::BackendError
    ) {
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
    if err.code == ErrorCode::QueueFull {
        queue_depth_headers(res.headers_mut(), &err.details);
    }
    res
}

/// `X-OJS-Queue-Depth` and `X-OJS-Queue-Bound` (ojs-backpressure.md §7.2), and
/// `X-OJS-Queue-Pressure` when `pressure` is given (§7.3), from `{depth, bound,
/// pressure}`.
pub(crate) fn queue_depth_headers(
    headers: &mut axum::http::HeaderMap,
    figures: &serde_json::Map<String, Value>,
) {
    let names = [
        ("x-ojs-queue-depth", "depth"),
        ("x-ojs-queue-bound", "bound"),
        ("x-ojs-queue-pressure", "pressure"),
    ];
    figure_headers(headers, names, |key| figures.get(key));
}

/// `X-RateLimit-Limit`, `-Remaining` and `-Reset` from `{limit, remaining, reset}`.
pub(crate) fn rate_limit_headers(headers: &mut axum::http::HeaderMap, state: &Value) {
    let names = [
        ("x-ratelimit-limit", "limit"),
        ("x-ratelimit-remaining", "remaining"),
        ("x-ratelimit-reset", "reset"),
    ];
    figure_headers(headers, names, |key| state.get(key));
}

/// Each header `(name, key)` whose figure `key` there is, the figure as its JSON text.
fn figure_headers<'a>(
    headers: &mut axum::http::HeaderMap,
    names: [(&'static str, &str); 3],
    figure: impl Fn(&str) -> Option<&'a Value>,
) {
    for (name, key) in names {
        if let Some(v) = figure(key).and_then(|v| HeaderValue::from_str(&v.to_string()).ok()) {
            headers.insert(name, v);
        }
    }
}

#[cfg(test)]
mod panic_tests {
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    /// A handler that panics costs its request a 500 with the OJS error body; the next
    /// request is served (the process unwinds, it does not abort).
    #[tokio::test]
    async fn a_panicking_handler_answers_500_internal_error_and_the_server_goes_on() {
        let store = crate::test_support::unreachable_store();
        let state = AppState::new(store, crate::HttpConfig::default());
        async fn boom() -> &'static str {
            let limits: Vec<u64> = Vec::new();
            let i = limits.len() + 3;
            if i > 2 {
                panic!("index {i} out of range");
            }
            "unreachable"
        }
        let router = wrap(
            Router::new()
                .route("/boom", get(boom))
                .route("/ok", get(|| async { "fine" })),
            state,
        );
        let req = |path: &str| {
            Request::builder()
                .uri(path)
                .body(Body::empty())
                .unwrap_or_default()
        };
        let res = router
            .clone()
            .oneshot(req("/boom"))
            .await
            .map_err(|e| e.to_string());
        let res = res.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(res.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(body["error"]["code"], "internal_error", "{body}");
        assert_eq!(body["error"]["retryable"], false);
        let ok = router.oneshot(req("/ok")).await.map_err(|e| e.to_string());
        assert_eq!(ok.map(|r| r.status()), Ok(StatusCode::OK));
    }

    /// A route the scope table does not list is never served, whatever the auth mode;
    /// listed routes are, and unknown paths stay the router's 404.
    #[tokio::test]
    async fn a_route_missing_from_the_scope_table_answers_500() {
        let state = AppState::new(
            crate::test_support::unreachable_store(),
            crate::HttpConfig::default(),
        );
        let router = Router::new()
            .route("/ojs/v1/unlisted/{id}", get(|| async { "served" }))
            .route("/ojs/v1/queues", get(|| async { "listed" }));
        let router = wrap(guard_routes(router).with_state(state.clone()), state);
        let status = |path: &'static str| {
            let router = router.clone();
            async move {
                let req = Request::builder()
                    .uri(path)
                    .body(Body::empty())
                    .unwrap_or_default();
                router
                    .oneshot(req)
                    .await
                    .map(|r| r.status())
                    .map_err(|e| e.to_string())
            }
        };
        assert_eq!(
            status("/ojs/v1/unlisted/7").await,
            Ok(StatusCode::INTERNAL_SERVER_ERROR)
        );
        assert_eq!(status("/ojs/v1/queues").await, Ok(StatusCode::OK));
        let put = Request::builder()
            .method("PUT")
            .uri("/ojs/v1/queues")
            .body(Body::empty())
            .unwrap_or_default();
        let put = router.clone().oneshot(put).await.map(|r| r.status());
        assert_eq!(put.ok(), Some(StatusCode::METHOD_NOT_ALLOWED));
        assert_eq!(status("/ojs/v1/nowhere").await, Ok(StatusCode::NOT_FOUND));
    }
}
