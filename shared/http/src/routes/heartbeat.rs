//! Worker heartbeats, and what the server knows of its workers from them: a worker's
//! health, the admin listing of workers, and the directives a worker's next beat returns.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use ojs_core::validate::MAX_VISIBILITY_MS;
use ojs_core::{time, JobId, OjsError};
use ojs_store::{Directive, WorkerInfo, WorkerState};
use serde_json::{json, Map, Value};

use super::path_ids::{found, WorkerId};
use super::reply;
use super::workers::{attempt, bounded, job_id, worker_id, ObjectBody};
use crate::error::ApiError;
use crate::extract::{FromPathParam, PathParam, Tenant};
use crate::AppState;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/workers/heartbeat", post(heartbeat))
        .route("/ojs/v1/workers/beat", post(heartbeat))
        .route("/ojs/v1/workers/{id}/health", get(worker_health))
        .route("/ojs/v1/admin/workers", get(list_workers))
        .route(
            "/ojs/v1/admin/workers/{id}/{directive}",
            post(set_directive),
        )
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
    ObjectBody(body): ObjectBody,
) -> Result<Response, ApiError> {
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
    PathParam(id): PathParam<WorkerId>,
) -> Result<Response, ApiError> {
    let w = found(&id, app.store.workers().worker(&id.0).await?)?;
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
    WorkerId::from_path_param(&id)?;
    let w = app.store.workers().set_directive(&id, directive).await?;
    Ok(reply(
        StatusCode::OK,
        json!({"worker": {"id": w.id, "directive": w.directive.as_str(), "last_seen": w.last_seen}}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
