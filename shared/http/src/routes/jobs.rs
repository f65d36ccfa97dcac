//! PUSH, INFO and CANCEL.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use ojs_core::{time, Job, JobId, NewJob, OjsError};
use serde_json::{json, Value};

use super::reply;
use crate::error::ApiError;
use crate::extract::{FromHead, PathParam, Tenant, TraceHeaders, MAX_BATCH_BYTES};
use crate::AppState;
use ojs_core::validate::MAX_ENVELOPE_BYTES;
use ojs_store::{KeyClaim, PushOutcome, StoreError};

use super::idempotency::{jobs_gone, replayed, IdempotentBody};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/jobs", post(enqueue_job))
        .route("/ojs/v1/jobs/batch", post(enqueue_batch))
        .route("/ojs/v1/jobs/{id}", get(get_job).delete(cancel_job))
}

/// What PUSH gives every job it is sent: the request's tenant and trace.
struct Producer {
    tenant: Tenant,
    trace: TraceHeaders,
}

crate::extract::from_head!(Producer);

impl FromHead for Producer {
    type Rejection = ApiError;

    fn from_head(parts: &axum::http::request::Parts) -> Result<Self, ApiError> {
        let Ok(trace) = TraceHeaders::from_head(parts);
        let tenant = Tenant::from_head(parts)?;
        Ok(Self { tenant, trace })
    }
}

impl Producer {
    /// `raw` as a new job: parsed, given the request's tenant (its `meta` being at
    /// `meta_path` in the request) and trace, its args checked against its schema.
    async fn new_job(
        &self,
        app: &AppState,
        raw: Value,
        meta_path: &str,
    ) -> Result<NewJob, ApiError> {
        let mut new = NewJob::from_json(raw)?;
        self.tenant.adopt(&mut new.spec.meta, meta_path)?;
        self.trace.adopt_into(&mut new.spec.meta);
        super::schemas::check_args(app, &new).await?;
        Ok(new)
    }
}

async fn enqueue_job(
    State(app): State<AppState>,
    producer: Producer,
    IdempotentBody(idempotent, body): IdempotentBody<MAX_ENVELOPE_BYTES>,
) -> Result<Response, ApiError> {
    let new = producer.new_job(&app, body, "$.meta").await?;
    let now = time::now();
    let mut job = Job::enqueue(new, now);
    let Some(idempotent) = idempotent else {
        return push_one(&app, job, Try::Plain).await.map(|p| p.response);
    };
    let attempt = match idempotent.claim(&app, &[job.id], now).await? {
        KeyClaim::Answered { status, ids } => return replay_one(&app, status, &ids).await,
        KeyClaim::Unfinished { ids } => {
            // The same request, tried before: the job it claimed, made or found.
            if let Some(id) = ids.first() {
                job.id = *id;
            }
            Try::Again
        }
        KeyClaim::Fresh | KeyClaim::Reused => Try::First,
    };
    let claimed = job.id;
    let outcome = push_one(&app, job, attempt).await;
    let summary = match &outcome {
        Ok(p) => Ok((
            p.status,
            (p.id != claimed).then_some(std::slice::from_ref(&p.id)),
        )),
        Err(e) => Err(e.0.code.http_status()),
    };
    idempotent.settle(&app, summary).await;
    outcome.map(|p| p.response)
}

/// Judges an enqueue of `jobs` against their tenants' limits (ojs-multi-tenancy.md
/// §8.2): refused whole, 429 `TENANT_LIMIT_EXCEEDED`, when one would pass a limit.
async fn admit_tenants(app: &AppState, jobs: &[Job]) -> Result<(), ApiError> {
    let mut per_tenant: std::collections::BTreeMap<ojs_core::tenant::TenantId, (u64, u64)> =
        std::collections::BTreeMap::new();
    for job in jobs {
        if let Some(t) = job.tenant() {
            let counts = per_tenant.entry(t).or_default();
            counts.0 += 1;
            counts.1 += u64::from(job.status.state == ojs_core::JobState::Scheduled);
        }
    }
    if per_tenant.is_empty() {
        return Ok(());
    }
    let adding: Vec<_> = per_tenant.iter().map(|(t, (n, s))| (t, *n, *s)).collect();
    app.store
        .admission()
        .admit_tenant_enqueue(&adding)
        .await
        .inspect_err(log_refusal)
        .map_err(ApiError::from)
}

/// Which try of a request a PUSH or batch PUSH is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Try {
    /// Without an idempotency key.
    Plain,
    /// The first under its key: its jobs have ids no other request has, so a job found
    /// with one of them was written by a later try of this very request, racing it.
    First,
    /// A later try under the key (same body), its jobs with the ids the first claimed:
    /// they may exist already.
    Again,
}

/// A PUSH's answer, with what its idempotency key records of it.
struct Pushed {
    status: u16,
    id: JobId,
    response: Response,
}

/// Stores `job` and answers for it. A try under an idempotency key finds its job when
/// another try of the same request made it (see [`Try`]): that job is the answer.
async fn push_one(app: &AppState, mut job: Job, attempt: Try) -> Result<Pushed, ApiError> {
    let keyed = attempt != Try::Plain;
    if attempt == Try::Again {
        if let Some(found) = app.store.engine().get_full_job(&job.id).await? {
            return Ok(created(found, &[]));
        }
    }
    let pressed = app
        .store
        .admission()
        .admit_enqueue(&[(&job.spec.queue, 1)])
        .await
        .inspect_err(log_refusal)?;
    admit_tenants(app, std::slice::from_ref(&job)).await?;
    let outcome = match app.store.lifecycle().put_job(&job).await {
        Ok(outcome) => outcome,
        // Another try wrote it meanwhile (its id, or its unique key for its id).
        Err(StoreError::Duplicate) if keyed => return found_again(app, &job.id).await,
        Err(StoreError::UniqueConflict { existing }) if keyed && existing == job.id.to_string() => {
            return found_again(app, &job.id).await
        }
        Err(e) => return Err(e.into()),
    };
    match outcome {
        // on_conflict "ignore": the live duplicate answers for the new job.
        PushOutcome::Existing(existing) => {
            return Ok(Pushed {
                status: 200,
                id: existing.id,
                response: reply(StatusCode::OK, pushed(&existing)),
            });
        }
        // replace_except_schedule kept the replaced job's schedule.
        PushOutcome::CreatedAs(stored) => job = *stored,
        PushOutcome::Created => {}
    }
    tracing::info!(job_id = %job.id, queue = %job.spec.queue, "job pushed");
    app.note_push(&job.spec.queue);
    Ok(created(job, &pressed))
}

async fn found_again(app: &AppState, id: &JobId) -> Result<Pushed, ApiError> {
    match app.store.engine().get_full_job(id).await? {
        Some(found) => Ok(created(found, &[])),
        None => Err(StoreError::Duplicate.into()),
    }
}

/// The 201 of a PUSH: the job, its `Location`, and the pressure headers.
fn created(job: Job, pressed: &[ojs_store::QueuePressure]) -> Pushed {
    let mut res = reply(StatusCode::CREATED, pushed(&job));
    if let Ok(loc) = HeaderValue::from_str(&format!("/ojs/v1/jobs/{}", job.id)) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    pressure_headers(&mut res, pressed);
    Pushed {
        status: 201,
        id: job.id,
        response: res,
    }
}

/// The first answer of an idempotent PUSH again: its status, and its job as it is now.
async fn replay_one(app: &AppState, status: u16, ids: &[JobId]) -> Result<Response, ApiError> {
    let id = ids.first().ok_or_else(jobs_gone)?;
    let job = app
        .store
        .engine()
        .get_full_job(id)
        .await?
        .ok_or_else(jobs_gone)?;
    let response = if status == 200 {
        reply(StatusCode::OK, pushed(&job))
    } else {
        created(job, &[]).response
    };
    Ok(replayed(response))
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
    // ojs-multi-tenancy.md §11.1's tenant.limit_exceeded, as a log line: a refusal
    // writes nothing for the change stream to derive an event from.
    if let ojs_store::StoreError::TenantLimit {
        tenant,
        limit,
        current,
        maximum,
        ..
    } = e
    {
        tracing::info!(event = "tenant.limit_exceeded", %tenant, limit, current, maximum, "enqueue rejected: tenant limit");
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
    tenant: Tenant,
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    let now = time::now();
    let job = app.store.lifecycle().get_job_settled(&id, now).await?;
    let job = super::seen_job(&tenant, &id, job)?;
    Ok(reply(StatusCode::OK, super::job_and_bare_job(&job)))
}

async fn cancel_job(
    State(app): State<AppState>,
    tenant: Tenant,
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    super::tenant_owns(&app, &tenant, &id).await?;
    let job = app.store.lifecycle().cancel_job(&id, time::now()).await?;
    tracing::info!(job_id = %job.id, "job cancelled");
    Ok(reply(StatusCode::OK, super::job_and_bare_job(&job)))
}

/// Most jobs one batch may carry.
const MAX_BATCH: usize = 1000;

/// `POST /ojs/v1/jobs/batch`: every job is validated first (any invalid job rejects the
/// whole batch, with an error per index), then all are stored or none.
async fn enqueue_batch(
    State(app): State<AppState>,
    producer: Producer,
    IdempotentBody(idempotent, body): IdempotentBody<MAX_BATCH_BYTES>,
) -> Result<Response, ApiError> {
    let parsed = parse_batch(&app, &producer, batch_entries(body)?).await?;
    let now = time::now();
    let mut jobs = enqueue_in_order(parsed, now);
    let Some(idempotent) = idempotent else {
        return push_batch(&app, &jobs, Try::Plain).await;
    };
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let attempt = match idempotent.claim(&app, &ids, now).await? {
        KeyClaim::Answered { ids, .. } => return replay_batch(&app, &ids).await,
        KeyClaim::Unfinished { ids } => {
            // The same request (same body, so as many jobs), tried before.
            for (job, id) in jobs.iter_mut().zip(ids) {
                job.id = id;
            }
            Try::Again
        }
        KeyClaim::Fresh | KeyClaim::Reused => Try::First,
    };
    let outcome = push_batch(&app, &jobs, attempt).await;
    let summary = match &outcome {
        // A batch answers with the jobs it claimed.
        Ok(_) => Ok((201, None)),
        Err(e) => Err(e.0.code.http_status()),
    };
    idempotent.settle(&app, summary).await;
    outcome
}

/// The raw jobs of a batch body, `{"jobs": [...]}` or a bare array: at least one, at most
/// [`MAX_BATCH`].
fn batch_entries(body: serde_json::Value) -> Result<Vec<serde_json::Value>, ApiError> {
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
    Ok(jobs)
}

/// Every job of the batch checked as PUSH checks one; any invalid job refuses the whole
/// batch, with an error per index.
async fn parse_batch(
    app: &AppState,
    producer: &Producer,
    jobs: Vec<serde_json::Value>,
) -> Result<Vec<NewJob>, ApiError> {
    let mut parsed = Vec::with_capacity(jobs.len());
    let mut errors = Vec::new();
    for (index, raw) in jobs.into_iter().enumerate() {
        let meta_path = format!("$.jobs[{index}].meta");
        match producer.new_job(app, raw, &meta_path).await {
            Ok(new) => parsed.push(new),
            Err(ApiError(e)) => errors.push(json!({"index": index, "code": e.code.as_str(), "message": e.message, "details": e.details})),
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
    Ok(parsed)
}

/// The batch's jobs enqueued at `now`, a microsecond apart, which keeps the batch's order
/// FIFO among equal priorities.
fn enqueue_in_order(parsed: Vec<NewJob>, now: time::Timestamp) -> Vec<Job> {
    parsed
        .into_iter()
        .enumerate()
        .map(|(i, new)| {
            Job::enqueue(
                new,
                now + chrono::Duration::microseconds(i64::try_from(i).unwrap_or(0)),
            )
        })
        .collect()
}

/// Stores the batch's `jobs`, all or none, and answers for them. A try under an
/// idempotency key finds its jobs when another try of the same request made them (see
/// [`Try`]): they are the answer.
async fn push_batch(app: &AppState, jobs: &[Job], attempt: Try) -> Result<Response, ApiError> {
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    if attempt == Try::Again {
        if let Some(found) = all_of(app, &ids).await? {
            return Ok(batch_answer(app, &found, &[]));
        }
    }
    // The bound is judged for the whole batch (ojs-backpressure.md §9.3).
    let mut per_queue: std::collections::BTreeMap<&ojs_core::QueueName, u64> =
        std::collections::BTreeMap::new();
    for job in jobs {
        *per_queue.entry(&job.spec.queue).or_default() += 1;
    }
    let adding: Vec<(&ojs_core::QueueName, u64)> = per_queue.into_iter().collect();
    let pressed = app
        .store
        .admission()
        .admit_enqueue(&adding)
        .await
        .inspect_err(log_refusal)?;
    admit_tenants(app, jobs).await?;
    let put = app.store.engine().put_batch(jobs).await;
    if attempt != Try::Plain && matches!(put, Err(ojs_store::BatchError::Conflict { .. })) {
        // Another try wrote them meanwhile.
        if let Some(found) = all_of(app, &ids).await? {
            return Ok(batch_answer(app, &found, &[]));
        }
    }
    put.map_err(|e| match e {
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
    for (queue, _) in &adding {
        app.note_push(queue);
    }
    Ok(batch_answer(app, jobs, &pressed))
}

/// The jobs of `ids`, in order and whole (args and meta kept in the payload bucket
/// brought back), when every one of them exists.
async fn all_of(app: &AppState, ids: &[JobId]) -> Result<Option<Vec<Job>>, ApiError> {
    let found = app.store.admin().get_jobs(ids).await?;
    if found.len() != ids.len() {
        return Ok(None);
    }
    Ok(Some(app.store.engine().shown_jobs(found).await))
}

/// The 201 of a batch PUSH.
fn batch_answer(app: &AppState, jobs: &[Job], pressed: &[ojs_store::QueuePressure]) -> Response {
    // A batch body of 5 MiB full of escaped characters answered whole would pass
    // Lambda's 6 MB, and the producer would see an error for jobs that were enqueued.
    // Counted as JSON: a Protobuf batch answer (`BatchEnqueueResponse`) carries only each
    // job's index, id and outcome.
    let out = crate::views::bounded_views(
        jobs,
        app.store.engine().answer_bound().bytes,
        crate::negotiate::Format::Json,
    );
    let mut res = reply(
        StatusCode::CREATED,
        json!({ "jobs": out, "count": jobs.len() }),
    );
    pressure_headers(&mut res, pressed);
    res
}

/// The first answer of an idempotent batch PUSH again: its jobs as they are now.
async fn replay_batch(app: &AppState, ids: &[JobId]) -> Result<Response, ApiError> {
    let jobs = all_of(app, ids).await?.ok_or_else(jobs_gone)?;
    Ok(replayed(batch_answer(app, &jobs, &[])))
}
