//! PUSH, INFO and CANCEL.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use ojs_core::{time, Job, JobId, NewJob, OjsError};
use serde_json::json;

use super::reply;
use crate::error::ApiError;
use crate::extract::{BatchBody, JsonBody, TraceHeaders};
use crate::AppState;
use ojs_store::PushOutcome;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/jobs", post(enqueue_job))
        .route("/ojs/v1/jobs/batch", post(enqueue_batch))
        .route("/ojs/v1/jobs/{id}", get(get_job).delete(cancel_job))
}

async fn enqueue_job(
    State(app): State<AppState>,
    trace: TraceHeaders,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let mut new = NewJob::from_json(body)?;
    trace.adopt_into(&mut new.spec.meta);
    super::schemas::check_args(&app, &new).await?;
    let mut job = Job::enqueue(new, time::now());
    let pressed = app
        .store
        .admit_enqueue(&[(&job.spec.queue, 1)])
        .await
        .inspect_err(log_refusal)?;
    match app.store.put_job(&job).await? {
        // on_conflict "ignore": the live duplicate answers for the new job.
        PushOutcome::Existing(existing) => {
            return Ok(reply(StatusCode::OK, pushed(&existing)));
        }
        // replace_except_schedule kept the replaced job's schedule.
        PushOutcome::CreatedAs(stored) => job = *stored,
        PushOutcome::Created => {}
    }
    tracing::info!(job_id = %job.id, queue = %job.spec.queue, "job pushed");
    let mut res = reply(StatusCode::CREATED, pushed(&job));
    if let Ok(loc) = HeaderValue::from_str(&format!("/ojs/v1/jobs/{}", job.id)) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    pressure_headers(&mut res, &pressed);
    Ok(res)
}

/// A refusal by a full queue is logged (ojs-backpressure.md §10: the event a rejection
/// would emit has no table write to be derived from; a refused flood costs reads only).
fn log_refusal(e: &ojs_store::StoreError) {
    if let ojs_store::StoreError::QueueFull {
        queue,
        depth,
        bound,
    } = e
    {
        tracing::info!(%queue, depth, bound, "backpressure: enqueue rejected, queue full");
    }
}

/// The warning headers of an accepted enqueue (ojs-backpressure.md §7.3), for the queue
/// under the most pressure.
fn pressure_headers(res: &mut Response, pressed: &[ojs_store::QueuePressure]) {
    let Some(most) = pressed
        .iter()
        .max_by(|a, b| a.pressure.total_cmp(&b.pressure))
    else {
        return;
    };
    let figures = json!({
        "depth": most.depth,
        "bound": most.bound,
        // Two decimals: a header, not a measurement.
        "pressure": (most.pressure * 100.0).round() / 100.0,
    });
    if let serde_json::Value::Object(figures) = figures {
        crate::layer::queue_depth_headers(res.headers_mut(), &figures);
    }
}

/// The PUSH answer: the binding's `{"job": {...}}`, and the job's `id` at the top level
/// too, where the durable execution suite (release v0.4.0, every case) reads it.
fn pushed(job: &Job) -> serde_json::Value {
    json!({ "job": job.to_json(), "id": job.id.to_string() })
}

async fn get_job(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = JobId::parse(&id)?;
    let job = app
        .store
        .get_job_settled(&id, time::now())
        .await?
        .ok_or_else(|| super::no_such_job(&id))?;
    Ok(reply(StatusCode::OK, super::job_and_bare_job(&job)))
}

async fn cancel_job(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = JobId::parse(&id)?;
    let job = app.store.cancel_job(&id, time::now()).await?;
    tracing::info!(job_id = %job.id, "job cancelled");
    Ok(reply(StatusCode::OK, super::job_and_bare_job(&job)))
}

/// Most jobs one batch may carry.
const MAX_BATCH: usize = 1000;

/// `POST /ojs/v1/jobs/batch`: every job is validated first (any invalid job rejects the
/// whole batch, with an error per index), then all are stored or none.
async fn enqueue_batch(
    State(app): State<AppState>,
    trace: TraceHeaders,
    BatchBody(body): BatchBody,
) -> Result<Response, ApiError> {
    let jobs = match body {
        serde_json::Value::Object(mut o) => match o.remove("jobs") {
            Some(serde_json::Value::Array(jobs)) if !jobs.is_empty() => jobs,
            _ => {
                return Err(OjsError::invalid_request("jobs must be a non-empty array")
                    .with_path("$.jobs")
                    .into())
            }
        },
        serde_json::Value::Array(jobs) if !jobs.is_empty() => jobs,
        _ => return Err(OjsError::invalid_request("the batch must be {\"jobs\": [...]}").into()),
    };
    if jobs.len() > MAX_BATCH {
        return Err(OjsError::new(
            ojs_core::ErrorCode::ValidationError,
            format!("a batch holds at most {MAX_BATCH} jobs, got {}", jobs.len()),
        )
        .into());
    }
    let mut parsed = Vec::with_capacity(jobs.len());
    let mut errors = Vec::new();
    for (index, raw) in jobs.into_iter().enumerate() {
        let checked = match NewJob::from_json(raw) {
            Ok(mut new) => {
                trace.adopt_into(&mut new.spec.meta);
                super::schemas::check_args(&app, &new)
                    .await
                    .map(|()| new)
                    .map_err(|e| e.0)
            }
            Err(e) => Err(e),
        };
        match checked {
            Ok(new) => parsed.push(new),
            Err(e) => errors.push(json!({"index": index, "code": e.code.as_str(), "message": e.message, "details": e.details})),
        }
    }
    if !errors.is_empty() {
        let first = errors[0]["message"].as_str().unwrap_or_default().to_owned();
        return Err(OjsError::invalid_request(format!(
            "{} of the batch's jobs are invalid (first: {first}); nothing was enqueued",
            errors.len()
        ))
        .with_detail("errors", errors)
        .into());
    }
    let now = time::now();
    // Microsecond offsets keep the batch's order FIFO among equal priorities.
    let jobs: Vec<Job> = parsed
        .into_iter()
        .enumerate()
        .map(|(i, new)| {
            Job::enqueue(
                new,
                now + chrono::Duration::microseconds(i64::try_from(i).unwrap_or(0)),
            )
        })
        .collect();
    // The bound is judged for the whole batch (ojs-backpressure.md §9.3).
    let mut per_queue: std::collections::BTreeMap<&ojs_core::QueueName, u64> =
        std::collections::BTreeMap::new();
    for job in &jobs {
        *per_queue.entry(&job.spec.queue).or_default() += 1;
    }
    let adding: Vec<(&ojs_core::QueueName, u64)> = per_queue.into_iter().collect();
    let pressed = app
        .store
        .admit_enqueue(&adding)
        .await
        .inspect_err(log_refusal)?;
    app.store.put_batch(&jobs).await.map_err(|e| match e {
        ojs_store::BatchError::Conflict { index, .. } => ApiError(
            OjsError::new(
                ojs_core::ErrorCode::Duplicate,
                format!("job {index} duplicates an existing job (same id or unique key); nothing was enqueued"),
            )
            .with_detail("index", index),
        ),
        ojs_store::BatchError::Store(e) => e.into(),
    })?;
    tracing::info!(count = jobs.len(), "batch pushed");
    // A batch body of 5 MiB full of escaped characters answered whole would pass
    // Lambda's 6 MB, and the producer would see an error for jobs that were enqueued.
    let out = crate::views::bounded_views(&jobs, app.store.answer_bound().bytes);
    let mut res = reply(
        StatusCode::CREATED,
        json!({ "jobs": out, "count": jobs.len() }),
    );
    pressure_headers(&mut res, &pressed);
    Ok(res)
}
