//! FETCH, ACK and FAIL (nack).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use ojs_core::failure::Failure;
use ojs_core::{time, JobId, JobState, OjsError, QueueName};
use ojs_store::{AckRequest, FetchRequest};
use serde_json::{json, Map, Value};

use super::reply;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::AppState;

/// Most jobs one FETCH may claim.
const MAX_FETCH: u64 = 100;
/// Longest accepted lease.
const MAX_VISIBILITY_MS: u64 = 12 * 3_600_000;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/workers/fetch", post(fetch_jobs))
        .route("/ojs/v1/workers/ack", post(ack_job))
        .route("/ojs/v1/workers/nack", post(fail_job))
}

fn object(body: Value) -> Result<Map<String, Value>, OjsError> {
    match body {
        Value::Object(o) => Ok(o),
        _ => Err(OjsError::invalid_request(
            "the request body must be a JSON object",
        )),
    }
}

fn job_id(body: &Map<String, Value>) -> Result<JobId, OjsError> {
    match body.get("job_id").or_else(|| body.get("id")) {
        Some(Value::String(s)) => JobId::parse(s).map_err(|e| e.with_path("$.job_id")),
        Some(_) => Err(OjsError::invalid_request("job_id must be a string").with_path("$.job_id")),
        None => Err(OjsError::invalid_request("job_id is required").with_path("$.job_id")),
    }
}

fn worker_id(body: &Map<String, Value>) -> Result<Option<String>, OjsError> {
    match body.get("worker_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => Ok(Some(s.clone())),
        Some(_) => Err(OjsError::invalid_request(
            "worker_id must be a non-empty string of at most 256 characters",
        )
        .with_path("$.worker_id")),
    }
}

fn bounded(
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
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .map(|q| match q {
                Value::String(s) => QueueName::parse(s).map_err(|e| e.with_path("$.queues")),
                _ => Err(OjsError::invalid_request("queues must be strings").with_path("$.queues")),
            })
            .collect::<Result<Vec<_>, _>>()?,
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
    })
}

async fn fetch_jobs(
    State(app): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let req = parse_fetch(body)?;
    let mut jobs = app.store.fetch(&req, time::now()).await?;
    if jobs.is_empty() && !app.config.fetch_recheck.is_zero() {
        tokio::time::sleep(app.config.fetch_recheck).await;
        jobs = app.store.fetch(&req, time::now()).await?;
    }
    let jobs: Vec<Value> = jobs.iter().map(|j| j.to_json()).collect();
    Ok(reply(StatusCode::OK, json!({ "jobs": jobs })))
}

async fn ack_job(
    State(app): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body = object(body)?;
    let ack = AckRequest {
        id: job_id(&body)?,
        result: body.get("result").cloned(),
        worker_id: worker_id(&body)?,
    };
    let job = app.store.ack_job(&ack, time::now()).await?;
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
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body = object(body)?;
    let id = job_id(&body)?;
    let failure = Failure::from_json(body.get("error"))?;
    let worker = worker_id(&body)?;
    let outcome = app
        .store
        .fail_job(&id, &failure, worker.as_deref(), time::now())
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
            let delay = (*next - time::now()).num_milliseconds().max(0);
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
}
