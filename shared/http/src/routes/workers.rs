//! FETCH, ACK and FAIL (nack); heartbeats and the workers they tell of in `heartbeat`,
//! job progress in `progress`, checkpoints in `checkpoints`.

use axum::body::Body;
use axum::extract::{FromRequest, State};
use axum::http::Request;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use axum::{Extension, Router};
use ojs_core::failure::Failure;
use ojs_core::validate::{MAX_FETCH_QUEUES, MAX_VISIBILITY_MS};
use ojs_core::{time, JobId, JobState, OjsError, QueueName};
use ojs_store::{AckRequest, FailRequest, Fence, FetchRequest};
use serde_json::{json, Map, Value};

use super::reply;
use crate::error::ApiError;
use crate::extract::{BodyAndPath, JsonBody, OptionalJsonBody, Tenant};
use crate::negotiate::Format;
use crate::AppState;

/// Most jobs one FETCH may claim.
const MAX_FETCH: u64 = 100;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .merge(super::checkpoints::router())
        .merge(super::heartbeat::router())
        .merge(super::progress::router())
        .route("/ojs/v1/workers/fetch", post(fetch_jobs))
        .route("/ojs/v1/workers/ack", post(ack_job))
        .route("/ojs/v1/jobs/{id}/ack", post(ack_job_by_path))
        .route("/ojs/v1/workers/nack", post(fail_job))
}

pub(super) fn object(body: Value) -> Result<Map<String, Value>, OjsError> {
    match body {
        Value::Object(o) => Ok(o),
        _ => Err(OjsError::invalid_request(
            "the request body must be a JSON object",
        )),
    }
}

/// A JSON body that must be an object; with `OPTIONAL`, one left out is `{}`.
pub(super) struct ObjectBody<const OPTIONAL: bool = false>(pub Map<String, Value>);

impl<S: Send + Sync, const OPTIONAL: bool> FromRequest<S> for ObjectBody<OPTIONAL> {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, state: &S) -> Result<Self, Self::Rejection> {
        let body = if OPTIONAL {
            OptionalJsonBody::from_request(req, state).await?.0
        } else {
            Some(JsonBody::from_request(req, state).await?.0)
        };
        Ok(Self(body.map(object).transpose()?.unwrap_or_default()))
    }
}

pub(super) fn job_id(body: &Map<String, Value>) -> Result<JobId, OjsError> {
    match body.get("job_id").or_else(|| body.get("id")) {
        Some(Value::String(s)) => JobId::parse(s).map_err(|e| e.with_path("$.job_id")),
        Some(_) => Err(OjsError::invalid_request("job_id must be a string").with_path("$.job_id")),
        None => Err(OjsError::invalid_request("job_id is required").with_path("$.job_id")),
    }
}

pub(super) fn worker_id(body: &Map<String, Value>) -> Result<Option<String>, OjsError> {
    match body.get("worker_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => Ok(Some(s.clone())),
        Some(_) => Err(OjsError::invalid_request(
            "worker_id must be a non-empty string of at most 256 characters",
        )
        .with_path("$.worker_id")),
    }
}

/// The optional `attempt` a worker echoes from FETCH to fence its ACK, FAIL or heartbeat
/// on the attempt it holds.
pub(super) fn attempt(body: &Map<String, Value>, path: &str) -> Result<Option<u32>, OjsError> {
    match body.get("attempt") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                OjsError::invalid_request(
                    "attempt must be the job's attempt number as FETCH returned it (an integer from 1)",
                )
                .with_path(path)
            }),
    }
}

pub(super) fn bounded(
    body: &Map<String, Value>,
    key: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, OjsError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| (min..=max).contains(n))
            .map(Some)
            .ok_or_else(|| {
                OjsError::invalid_request(format!("{key} must be an integer from {min} to {max}"))
                    .with_path(&format!("$.{key}"))
            }),
    }
}

fn parse_fetch(body: Value) -> Result<FetchRequest, OjsError> {
    let body = object(body)?;
    let queues = match body.get("queues") {
        Some(Value::Array(list)) if !list.is_empty() => {
            // Named twice is asked once (order kept): a BatchGetItem refuses duplicate keys.
            let mut queues: Vec<QueueName> = Vec::new();
            for q in list {
                let q = match q {
                    Value::String(s) => QueueName::parse(s).map_err(|e| e.with_path("$.queues"))?,
                    _ => {
                        return Err(OjsError::invalid_request("queues must be strings")
                            .with_path("$.queues"))
                    }
                };
                if !queues.iter().any(|have| have.as_str() == q.as_str()) {
                    queues.push(q);
                }
                if queues.len() > MAX_FETCH_QUEUES {
                    return Err(OjsError::invalid_request(format!(
                        "a FETCH names at most {MAX_FETCH_QUEUES} distinct queues"
                    ))
                    .with_path("$.queues"));
                }
            }
            queues
        }
        _ => {
            return Err(OjsError::invalid_request(
                "queues must be a non-empty array of queue names",
            )
            .with_path("$.queues"))
        }
    };
    let count = bounded(&body, "count", 1, MAX_FETCH)?.unwrap_or(1);
    Ok(FetchRequest {
        queues,
        count: usize::try_from(count).unwrap_or(1),
        worker_id: worker_id(&body)?,
        visibility_timeout_ms: bounded(&body, "visibility_timeout_ms", 1, MAX_VISIBILITY_MS)?,
        tenant: ojs_core::tenant::Scope::Any,
        scheduling: ojs_core::pool::Scheduling::of_fetch(&body)?,
    })
}

async fn fetch_jobs(
    State(app): State<AppState>,
    format: Option<Extension<Format>>,
    Tenant(tenant): Tenant,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let req = FetchRequest {
        tenant,
        ..parse_fetch(body)?
    };
    app.settle_pushes(&req.queues).await;
    let mut outcome = app.store.workers().fetch(&req, time::now()).await?;
    if !outcome.saw_ready && !app.config.fetch_recheck.is_zero() {
        tokio::time::sleep(app.config.fetch_recheck).await;
        outcome = app.store.workers().fetch(&req, time::now()).await?;
    }
    let mut jobs: Vec<Value> = outcome.jobs.iter().map(|j| j.to_json()).collect();
    if format.is_some_and(|Extension(f)| f == Format::Proto) {
        let kept = within_proto_bound(&jobs, app.store.engine().answer_bound().bytes);
        if kept < jobs.len() {
            jobs.truncate(kept);
            let over = outcome.jobs.split_off(kept);
            tracing::warn!(
                given_back = over.len(),
                "a FETCH answered in Protobuf would pass the response limit; its last jobs are given back"
            );
            app.store
                .engine()
                .give_back_claimed(over, time::now())
                .await;
        }
    }
    let Some(limit) = outcome.limit else {
        return Ok(reply(StatusCode::OK, json!({ "jobs": jobs })));
    };
    let reset =
        limit.reset_at.timestamp() + i64::from(limit.reset_at.timestamp_subsec_micros() > 0);
    let state = json!({"limit": limit.limit, "remaining": limit.remaining, "reset": reset});
    if jobs.is_empty() && limit.remaining == 0 {
        // The queue's own limit is what stands between the worker and a job.
        let wait_ms = (limit.reset_at - time::now()).num_milliseconds().max(1);
        return Err(OjsError::new(
            ojs_core::ErrorCode::RateLimited,
            "the queue's rate limit is reached; retry after the window resets",
        )
        .with_detail("rate_limit", state)
        .with_detail(
            "retry_after_seconds",
            (wait_ms as f64 / 1000.0).ceil() as u64,
        )
        .into());
    }
    let mut res = reply(StatusCode::OK, json!({ "jobs": jobs }));
    crate::layer::rate_limit_headers(res.headers_mut(), &state);
    Ok(res)
}

/// How many of a FETCH's job `views`, in order, its delimited Protobuf answer can carry
/// within `bound` bytes as Lambda carries it. The store bounds the claims by the JSON
/// answer; the Protobuf form of the same jobs can be several times larger (a number in
/// `args` becomes a `google.protobuf.Value` of 11 bytes, and the binary body is
/// base64-encoded), so the jobs past the bound are given back rather than lost in an
/// answer the gateway refuses. The first job always goes: no job the API accepts is too
/// large alone.
fn within_proto_bound(views: &[Value], bound: usize) -> usize {
    let mut total = 0usize;
    for (i, view) in views.iter().enumerate() {
        let bytes = crate::negotiate::delimited_answer_bytes(view).unwrap_or(usize::MAX);
        total = total.saturating_add(bytes);
        if i > 0 && total > bound {
            return i;
        }
    }
    views.len()
}

async fn ack_job(
    State(app): State<AppState>,
    tenant: Tenant,
    ObjectBody(body): ObjectBody,
) -> Result<Response, ApiError> {
    ack(&app, &tenant, body).await
}

/// `POST /ojs/v1/jobs/{id}/ack` (ojs-results.md §10.1, ojs-serverless.md §3): the ACK of
/// job `id`, its body (`result`, `worker_id`, `attempt`; may be left out) as
/// `/workers/ack` reads it. A body naming another `job_id` is refused.
async fn ack_job_by_path(
    State(app): State<AppState>,
    tenant: Tenant,
    BodyAndPath(ObjectBody(mut body), named): BodyAndPath<ObjectBody<true>, JobId>,
) -> Result<Response, ApiError> {
    if let Some(given) = body.get("job_id").or_else(|| body.get("id")) {
        if given.as_str().and_then(|g| JobId::parse(g).ok()).as_ref() != Some(&named) {
            return Err(OjsError::invalid_request(
                "job_id in the body must be the path's job id when given",
            )
            .with_path("$.job_id")
            .into());
        }
    }
    body.insert("job_id".into(), Value::from(named.to_string()));
    ack(&app, &tenant, body).await
}

/// ACK of the job `body` names (another tenant's is not found).
async fn ack(
    app: &AppState,
    tenant: &Tenant,
    body: Map<String, Value>,
) -> Result<Response, ApiError> {
    let ack = AckRequest {
        id: job_id(&body)?,
        result: body.get("result").cloned(),
        worker_id: worker_id(&body)?,
        attempt: attempt(&body, "$.attempt")?,
    };
    super::tenant_owns(app, tenant, &ack.id).await?;
    let job = app.store.lifecycle().ack_job(&ack, time::now()).await?;
    let view = job.to_json();
    Ok(reply(
        StatusCode::OK,
        json!({
            "acknowledged": true,
            "id": job.id.to_string(),
            "state": job.status.state.as_str(),
            "attempt": job.status.attempt,
            "completed_at": view.get("completed_at"),
            "job": view,
        }),
    ))
}

async fn fail_job(
    State(app): State<AppState>,
    tenant: Tenant,
    ObjectBody(body): ObjectBody,
) -> Result<Response, ApiError> {
    let id = job_id(&body)?;
    super::tenant_owns(&app, &tenant, &id).await?;
    let failure = Failure::from_json(body.get("error"))?;
    let worker = worker_id(&body)?;
    let fence = Fence {
        worker_id: worker.as_deref(),
        attempt: attempt(&body, "$.attempt")?,
    };
    let requeue = match body.get("requeue") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(OjsError::invalid_request("requeue must be a boolean")
                .with_path("$.requeue")
                .into())
        }
    };
    let now = time::now();
    let outcome = app
        .store
        .lifecycle()
        .fail_job(
            FailRequest {
                id: &id,
                failure: &failure,
                fence,
                requeue,
            },
            now,
        )
        .await?;
    let job = outcome.job;
    let view = job.to_json();
    let mut out = json!({
        "id": job.id.to_string(),
        "state": job.status.state.as_str(),
        "attempt": job.status.attempt,
        "max_attempts": job.spec.retry.max_attempts,
    });
    for key in ["next_attempt_at", "discarded_at", "completed_at", "error"] {
        if let Some(v) = view.get(key) {
            out[key] = v.clone();
        }
    }
    if job.status.state == JobState::Retryable {
        if let Some(next) = &job.status.next_attempt_at {
            // The delay decided at `now`, not what is left of it after the writes.
            let delay = (*next - now).num_milliseconds().max(0);
            out["retry_delay_ms"] = json!(delay);
        }
    }
    out["job"] = view;
    Ok(reply(StatusCode::OK, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_body_rules() {
        assert!(parse_fetch(json!({"queues": ["a", "b"], "count": 5})).is_ok());
        for bad in [
            json!({}),
            json!({"queues": []}),
            json!({"queues": "a"}),
            json!({"queues": ["Bad"]}),
            json!({"queues": ["a"], "count": 0}),
            json!({"queues": ["a"], "count": 101}),
            json!({"queues": ["a"], "visibility_timeout_ms": -5}),
            json!({"queues": ["a"], "worker_id": 7}),
            json!([1]),
        ] {
            assert!(parse_fetch(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn fetch_queues_deduplicated_and_bounded() {
        let req = parse_fetch(json!({"queues": ["b", "a", "b", "a", "c"]}))
            .unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = req.queues.iter().map(QueueName::as_str).collect();
        assert_eq!(
            names,
            ["b", "a", "c"],
            "named twice is asked once, order kept"
        );
        // Repeats do not count towards the cap; distinct names over it are a 400.
        let at_cap: Vec<String> = (0..MAX_FETCH_QUEUES).map(|i| format!("q{i}")).collect();
        let mut repeated = at_cap.clone();
        repeated.extend(at_cap.iter().cloned());
        assert!(parse_fetch(json!({ "queues": repeated })).is_ok());
        let over: Vec<String> = (0..=MAX_FETCH_QUEUES).map(|i| format!("q{i}")).collect();
        let err = parse_fetch(json!({ "queues": over }))
            .err()
            .unwrap_or_else(|| panic!("over the cap accepted"));
        assert_eq!(err.code, ojs_core::ErrorCode::InvalidRequest);
        assert_eq!(err.details["validation_errors"][0]["path"], "$.queues");
    }
}
