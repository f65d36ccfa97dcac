//! FETCH, ACK and FAIL (nack).

use axum::extract::Path;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post, put};
use axum::{Extension, Router};
use ojs_core::failure::Failure;
use ojs_core::progress::ProgressReport;
use ojs_core::validate::{MAX_FETCH_QUEUES, MAX_VISIBILITY_MS};
use ojs_core::{time, JobId, JobState, OjsError, QueueName};
use ojs_store::{AckRequest, Directive, Fence, FetchRequest, WorkerInfo, WorkerState};
use serde_json::{json, Map, Value};

use super::reply;
use crate::error::ApiError;
use crate::extract::{JsonBody, OptionalJsonBody, Tenant};
use crate::negotiate::Format;
use crate::AppState;

/// Most jobs one FETCH may claim.
const MAX_FETCH: u64 = 100;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .merge(super::checkpoints::router())
        .route("/ojs/v1/workers/fetch", post(fetch_jobs))
        .route("/ojs/v1/workers/ack", post(ack_job))
        .route("/ojs/v1/jobs/{id}/ack", post(ack_job_by_path))
        .route("/ojs/v1/workers/nack", post(fail_job))
        .route("/ojs/v1/workers/heartbeat", post(heartbeat))
        .route("/ojs/v1/workers/beat", post(heartbeat))
        .route("/ojs/v1/workers/{id}/health", get(worker_health))
        .route("/ojs/v1/workers/progress", post(report_progress))
        .route(
            "/ojs/v1/jobs/{id}/progress",
            put(put_progress).get(get_progress),
        )
        .route("/ojs/v1/admin/workers", get(list_workers))
        .route(
            "/ojs/v1/admin/workers/{id}/{directive}",
            post(set_directive),
        )
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

/// A worker id that no heartbeat accepts (empty, or longer than [`worker_id`] allows)
/// names no worker: the 404 is answered without a lookup.
pub(crate) fn check_worker_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 256 {
        return Err(OjsError::not_found(format!("worker {id:.64} not found")).into());
    }
    Ok(())
}

/// The 404 for a worker id that names no registered worker.
pub(crate) fn no_such_worker(id: &str) -> ApiError {
    ApiError(OjsError::not_found(format!("worker {id} not found")))
}

/// The optional `attempt` a worker echoes from FETCH to fence its ACK, FAIL or heartbeat
/// on the attempt it holds.
fn attempt(body: &Map<String, Value>, path: &str) -> Result<Option<u32>, OjsError> {
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
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    ack(&app, &tenant, object(body)?).await
}

/// `POST /ojs/v1/jobs/{id}/ack` (ojs-results.md §10.1, ojs-serverless.md §3): the ACK of
/// job `id`, its body (`result`, `worker_id`, `attempt`; may be left out) as
/// `/workers/ack` reads it. A body naming another `job_id` is refused.
async fn ack_job_by_path(
    State(app): State<AppState>,
    tenant: Tenant,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let mut body = match body {
        Some(b) => object(b)?,
        None => Map::new(),
    };
    let named = JobId::parse(&id)?;
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
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body = object(body)?;
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
        .fail_job(&id, &failure, fence, requeue, now)
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

/// Most job ids one heartbeat may extend.
const MAX_BEAT_JOBS: usize = 100;

/// The jobs a heartbeat reports, each with the attempt it holds when the worker says:
/// in any of the forms SDKs send, `active_jobs` as a list (or a count), `active_job_ids`,
/// `job_ids`, or a single `job_id` (with `attempt`). A listed job is an id or an object
/// `{"job_id" | "id": ..., "attempt": n}`.
type BeatJobs = (Vec<(JobId, Option<u32>)>, u64);

fn beat_jobs(body: &Map<String, Value>) -> Result<BeatJobs, OjsError> {
    let mut ids = Vec::new();
    let mut reported = None;
    for key in ["active_jobs", "active_job_ids", "job_ids"] {
        match body.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if key == "active_jobs" => reported = n.as_u64(),
            Some(Value::Array(list)) => {
                for (i, v) in list.iter().enumerate() {
                    let path = format!("$.{key}[{i}]");
                    let listed = match v {
                        Value::String(raw) => {
                            (JobId::parse(raw).map_err(|e| e.with_path(&path))?, None)
                        }
                        Value::Object(o) => (
                            job_id(o).map_err(|e| e.with_path(&format!("{path}.job_id")))?,
                            attempt(o, &format!("{path}.attempt"))?,
                        ),
                        _ => {
                            return Err(OjsError::invalid_request(format!(
                                "{key} must list job ids or {{\"job_id\", \"attempt\"}} objects"
                            ))
                            .with_path(&path))
                        }
                    };
                    ids.push(listed);
                }
            }
            Some(_) => {
                return Err(
                    OjsError::invalid_request(format!("{key} must be an array of job ids"))
                        .with_path(&format!("$.{key}")),
                )
            }
        }
    }
    if body.contains_key("job_id") {
        ids.push((job_id(body)?, attempt(body, "$.attempt")?));
    }
    // One entry per job: the first listed (a stable sort keeps list order among equals).
    ids.sort_by_key(|(id, _)| *id);
    ids.dedup_by_key(|(id, _)| *id);
    if ids.len() > MAX_BEAT_JOBS {
        return Err(OjsError::invalid_request(format!(
            "at most {MAX_BEAT_JOBS} jobs per heartbeat"
        )));
    }
    let count = reported.unwrap_or(ids.len() as u64);
    Ok((ids, count))
}

async fn heartbeat(
    State(app): State<AppState>,
    tenant: Tenant,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body = object(body)?;
    let worker = worker_id(&body)?.ok_or_else(|| {
        OjsError::invalid_request("worker_id is required").with_path("$.worker_id")
    })?;
    let (mut jobs, reported) = beat_jobs(&body)?;
    if tenant.0 != ojs_core::tenant::Scope::Any && !jobs.is_empty() {
        // A worker acting for one tenant extends that tenant's leases only (one batch
        // read, for such a worker only); another tenant's job is as unknown as a gone one.
        let own: std::collections::HashSet<JobId> = app
            .store
            .admin()
            .get_jobs(&jobs.iter().map(|(id, _)| *id).collect::<Vec<_>>())
            .await?
            .iter()
            .filter(|j| tenant.sees(j))
            .map(|j| j.id)
            .collect();
        jobs.retain(|(id, _)| own.contains(id));
    }
    let vis = bounded(&body, "visibility_timeout_ms", 1, MAX_VISIBILITY_MS)?;
    let worker_state = beat_state(&body)?;
    let acting_for = match &tenant.0 {
        ojs_core::tenant::Scope::One(Some(t)) => Some(t),
        _ => None,
    };
    let now = time::now();
    let beat = app
        .store
        .workers()
        .heartbeat(
            &ojs_store::Heartbeat {
                worker_id: &worker,
                state: worker_state,
                jobs: &jobs,
                reported_active: reported,
                visibility_timeout_ms: vis,
                tenant: acting_for,
            },
            now,
        )
        .await?;
    let ids = |v: &[JobId]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    Ok(reply(
        StatusCode::OK,
        json!({
            "acknowledged": true,
            "worker_state": worker_state.as_str(),
            "state": beat.directive.as_str(),
            "directive": beat.directive.as_str(),
            "jobs_extended": ids(&beat.extended),
            "jobs_cancelled": ids(&beat.cancelled),
            "server_time": time::format(&now),
        }),
    ))
}

/// The state a heartbeat reports of its worker (ojs-graceful-shutdown.md §5): `state`
/// ([`WorkerState::parse`]; running when absent, so a worker's last beat always says
/// where it is: the Go and JS SDKs send theirs, the Python and Rust SDKs none), and
/// `shutdown: true` as at least drain.
fn beat_state(body: &Map<String, Value>) -> Result<WorkerState, OjsError> {
    let state = match body.get("state") {
        None | Some(Value::Null) => WorkerState::Running,
        Some(Value::String(s)) => WorkerState::parse(s).ok_or_else(|| {
            OjsError::invalid_request(
                "state must be one of running, quiet, drain (draining, shutting_down), \
                 terminate (terminated)",
            )
            .with_path("$.state")
        })?,
        Some(_) => {
            return Err(OjsError::invalid_request("state must be a string").with_path("$.state"))
        }
    };
    match body.get("shutdown") {
        None | Some(Value::Null | Value::Bool(false)) => Ok(state),
        Some(Value::Bool(true)) => Ok(state.max(WorkerState::Drain)),
        Some(_) => {
            Err(OjsError::invalid_request("shutdown must be a boolean").with_path("$.shutdown"))
        }
    }
}

/// What a worker's state is called where it is listed or probed: `stale` after
/// [`super::admin::STALE_AFTER_SECS`] without a heartbeat, otherwise the state it reported
/// when it is not running, otherwise its directive.
fn shown_state(w: &WorkerInfo, stale_before: time::Timestamp) -> &'static str {
    let seen = w
        .last_seen
        .as_deref()
        .and_then(|raw| time::parse(raw, "$").ok());
    if seen.is_none_or(|t| t < stale_before) {
        "stale"
    } else if w.reported != WorkerState::Running {
        w.reported.as_str()
    } else {
        w.directive.as_str()
    }
}

/// `GET /ojs/v1/workers/{id}/health` (ojs-graceful-shutdown.md §8, GS-R004): 200 while
/// the worker runs and beats, 503 when it is quiet, draining, terminating or stale (a
/// readiness probe's "not ready"), with its state either way; 404 for an unknown worker.
async fn worker_health(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    check_worker_id(&id)?;
    let w = app
        .store
        .workers()
        .worker(&id)
        .await?
        .ok_or_else(|| no_such_worker(&id))?;
    let stale_before = time::now() - chrono::Duration::seconds(super::admin::STALE_AFTER_SECS);
    let state = shown_state(&w, stale_before);
    let ready = state == "running";
    let status = match state {
        "running" => "healthy",
        "stale" => "unhealthy",
        _ => "draining",
    };
    Ok(reply(
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        json!({
            "worker_id": w.id,
            "status": status,
            "state": state,
            "reported_state": w.reported.as_str(),
            "directive": w.directive.as_str(),
            "accepting_jobs": w.takes_jobs() && ready,
            "active_jobs": w.active_jobs,
            "last_seen": w.last_seen,
        }),
    ))
}

/// `GET /ojs/v1/admin/workers` (ojs-admin-api.md §9.1): `items` with `state` (running,
/// quiet, drain, terminate (as the worker reported or was directed), or stale after [`super::admin::STALE_AFTER_SECS`] without a
/// heartbeat), `summary` and `pagination`; also `workers` and `directive`, as before.
async fn list_workers(State(app): State<AppState>) -> Result<Response, ApiError> {
    let stale_before = time::now() - chrono::Duration::seconds(super::admin::STALE_AFTER_SECS);
    let (mut running, mut quiet, mut stale) = (0u64, 0u64, 0u64);
    let workers: Vec<Value> = app
        .store
        .workers().list_workers()
        .await?
        .into_iter()
        .map(|w| {
            let state = shown_state(&w, stale_before);
            match state {
                "stale" => stale += 1,
                "running" => running += 1,
                _ => quiet += 1,
            }
            json!({"id": w.id, "directive": w.directive.as_str(), "reported_state": w.reported.as_str(), "state": state, "last_seen": w.last_seen, "last_heartbeat_at": w.last_seen, "started_at": w.last_seen, "queues": [], "active_jobs": w.active_jobs})
        })
        .collect();
    let total = workers.len();
    Ok(reply(
        StatusCode::OK,
        json!({
            "items": workers,
            "workers": workers,
            "summary": {"total": total, "running": running, "quiet": quiet, "stale": stale},
            "pagination": {"total": total, "page": 1, "per_page": total.max(1), "limit": total, "offset": 0, "has_more": false},
        }),
    ))
}

/// `POST /ojs/v1/admin/workers/{id}/{quiet|terminate|resume}`: the directive the worker's
/// next heartbeat returns.
async fn set_directive(
    State(app): State<AppState>,
    Path((id, directive)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let directive = match directive.as_str() {
        "quiet" => Directive::Quiet,
        "terminate" => Directive::Terminate,
        "resume" | "running" => Directive::Running,
        other => {
            return Err(OjsError::not_found(format!(
                "no worker action {other:?}; use quiet, terminate or resume"
            ))
            .into())
        }
    };
    check_worker_id(&id)?;
    let w = app
        .store
        .workers()
        .set_directive(&id, directive)
        .await
        .map_err(|e| match e {
            ojs_store::StoreError::NotFound => no_such_worker(&id),
            other => other.into(),
        })?;
    Ok(reply(
        StatusCode::OK,
        json!({"worker": {"id": w.id, "directive": w.directive.as_str(), "last_seen": w.last_seen}}),
    ))
}

/// Records `report` on job `id` and answers its progress after it (ojs-progress.md §7.1's
/// shape). A report for a job not active, or not held by the reporting worker, is ignored
/// (§6.1): the answer is then the progress as it stands.
async fn record_progress(
    app: &AppState,
    tenant: &Tenant,
    id: &JobId,
    report: &ProgressReport,
) -> Result<Response, ApiError> {
    super::tenant_owns(app, tenant, id).await?;
    let job = match app
        .store
        .workers()
        .report_progress(id, report, time::now())
        .await
    {
        Err(ojs_store::StoreError::NotFound) => return Err(super::no_such_job(id).into()),
        other => other?,
    };
    Ok(reply(StatusCode::OK, job.progress_view()))
}

/// `PUT /ojs/v1/jobs/{id}/progress` (ojs-progress.md §6.1): `progress` 0.0-1.0
/// (clamped), `message`, `data`; `worker_id`/`attempt` fence it like ACK when given.
async fn put_progress(
    State(app): State<AppState>,
    tenant: Tenant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let id = JobId::parse(&id)?;
    let report = ProgressReport::from_spec_body(&body)?;
    record_progress(&app, &tenant, &id, &report).await
}

/// `POST /ojs/v1/workers/progress`, as the Python and JavaScript SDKs report:
/// `job_id`, `percentage` 0-100 (clamped), `message`, `data`.
async fn report_progress(
    State(app): State<AppState>,
    tenant: Tenant,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let (id, report) = ProgressReport::from_sdk_body(&body)?;
    record_progress(&app, &tenant, &id, &report).await
}

/// `GET /ojs/v1/jobs/{id}/progress` (§7.1): nulls when none was reported; 404 for no job.
async fn get_progress(
    State(app): State<AppState>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = JobId::parse(&id)?;
    let job = app
        .store
        .engine()
        .get_job(&id)
        .await?
        .filter(|job| tenant.sees(job))
        .ok_or_else(|| super::no_such_job(&id))?;
    let mut res = reply(StatusCode::OK, job.progress_view());
    res.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    Ok(res)
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

    #[test]
    fn a_beat_reports_the_state_it_names_and_shutdown_as_at_least_drain() {
        let obj = |v: Value| v.as_object().cloned().unwrap_or_default();
        for (body, want) in [
            (json!({}), WorkerState::Running),
            (json!({"state": null}), WorkerState::Running),
            (json!({"state": "running"}), WorkerState::Running),
            (json!({"state": "quiet"}), WorkerState::Quiet),
            (json!({"state": "drain"}), WorkerState::Drain),
            (json!({"state": "draining"}), WorkerState::Drain),
            (json!({"state": "terminate"}), WorkerState::Terminate),
            (json!({"shutdown": false}), WorkerState::Running),
            (
                json!({"state": "quiet", "shutdown": false}),
                WorkerState::Quiet,
            ),
            (json!({"shutdown": true}), WorkerState::Drain),
            (
                json!({"state": "quiet", "shutdown": true}),
                WorkerState::Drain,
            ),
            (
                json!({"state": "terminate", "shutdown": true}),
                WorkerState::Terminate,
            ),
        ] {
            assert_eq!(beat_state(&obj(body.clone())).ok(), Some(want), "{body}");
        }
        for bad in [
            json!({"state": "Drain"}),
            json!({"state": ""}),
            json!({"state": 1}),
            json!({"shutdown": "true"}),
            json!({"shutdown": 1}),
        ] {
            assert!(beat_state(&obj(bad.clone())).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_worker_shows_stale_then_its_own_state_then_its_directive() {
        let now = time::now();
        let stale_before = now - chrono::Duration::seconds(60);
        let worker = |reported, directive, seen: Option<time::Timestamp>| WorkerInfo {
            id: "w".into(),
            directive,
            reported,
            last_seen: seen.map(|t| time::format(&t)),
            active_jobs: 0,
            tenant: None,
        };
        let fresh = Some(now);
        let old = Some(now - chrono::Duration::seconds(61));
        for (w, want) in [
            (
                worker(WorkerState::Running, Directive::Running, fresh),
                "running",
            ),
            (
                worker(WorkerState::Drain, Directive::Running, fresh),
                "drain",
            ),
            (
                worker(WorkerState::Quiet, Directive::Terminate, fresh),
                "quiet",
            ),
            (
                worker(WorkerState::Running, Directive::Quiet, fresh),
                "quiet",
            ),
            (
                worker(WorkerState::Running, Directive::Terminate, fresh),
                "terminate",
            ),
            (worker(WorkerState::Drain, Directive::Running, old), "stale"),
            // Seen at the very bound: not yet stale.
            (
                worker(WorkerState::Running, Directive::Running, Some(stale_before)),
                "running",
            ),
            (
                worker(WorkerState::Running, Directive::Running, None),
                "stale",
            ),
        ] {
            assert_eq!(shown_state(&w, stale_before), want, "{w:?}");
        }
    }

    #[test]
    fn heartbeat_accepts_every_sdk_shape() {
        let id = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";
        let obj = |v: Value| v.as_object().cloned().unwrap_or_default();
        let (ids, n) = beat_jobs(&obj(json!({"active_jobs": [id]}))).unwrap_or_default();
        assert_eq!((ids.len(), n), (1, 1));
        let (ids, n) =
            beat_jobs(&obj(json!({"active_jobs": 3, "active_job_ids": [id]}))).unwrap_or_default();
        assert_eq!((ids.len(), n), (1, 3));
        let (ids, _) =
            beat_jobs(&obj(json!({"job_id": id, "active_jobs": [id]}))).unwrap_or_default();
        assert_eq!(ids.len(), 1);
        assert!(beat_jobs(&obj(json!({"active_jobs": ["nope"]}))).is_err());
        assert!(beat_jobs(&obj(json!({"active_jobs": "x"}))).is_err());
        let (ids, n) = beat_jobs(&obj(
            json!({"active_jobs": [{"job_id": id, "attempt": 2}], "job_ids": [{"id": id}]}),
        ))
        .unwrap_or_default();
        assert_eq!((ids.len(), ids[0].1, n), (1, Some(2), 1));
        let (ids, _) = beat_jobs(&obj(json!({"job_id": id, "attempt": 3}))).unwrap_or_default();
        assert_eq!(ids.first().map(|j| j.1), Some(Some(3)));
        for bad in [
            json!({"active_jobs": [{"job_id": id, "attempt": 0}]}),
            json!({"active_jobs": [{"job_id": id, "attempt": "2"}]}),
            json!({"active_jobs": [{"attempt": 2}]}),
            json!({"active_jobs": [7]}),
            json!({"job_id": id, "attempt": -1}),
        ] {
            assert!(beat_jobs(&obj(bad.clone())).is_err(), "{bad}");
        }
    }
}
