//! The admin API (ojs-admin-api.md) under `/ojs/v1/admin/`: queues, system operations
//! and the dashboard's other reads here; jobs and the dead letter queue in `admin_jobs`,
//! statistics in `admin_stats`, tenants in `admin_tenants`. (`GET /ojs/v1/admin/workers` and the worker directives are served by
//! the workers group, the queue rate limit and recount by the queues group; pausing and
//! resuming a queue, and deleting a dead letter, by the handlers of the queues and dead
//! letter groups.)

use crate::entry_views::EntryView;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{delete, get, post, put};
use axum::Router;
use ojs_core::{time, ErrorCode, OjsError, QueueName};
use ojs_store::{QueueInfo, QueueStats, StoreError};
use serde_json::{json, Value};

use super::admin_jobs as jobs;
use super::admin_stats::{self as stats, counts, with_stats};
use super::admin_tenants as tenants;
use super::path_ids::WorkerId;
use super::{queues, reply};
use crate::error::ApiError;
use crate::extract::{BodyAndPath, JsonBody, PathParam};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/admin/stats", get(stats::get_stats))
        .route("/ojs/v1/admin/stats/history", get(stats::get_history))
        .route("/ojs/v1/admin/queues", get(list_queues))
        .route("/ojs/v1/admin/queues/{name}", get(get_queue))
        .route(
            "/ojs/v1/admin/queues/{name}/pause",
            post(queues::set_paused::<true>),
        )
        .route(
            "/ojs/v1/admin/queues/{name}/resume",
            post(queues::set_paused::<false>),
        )
        .route("/ojs/v1/admin/queues/{name}/config", put(configure_queue))
        .route(
            "/ojs/v1/admin/queues/{name}/jobs",
            delete(jobs::purge_queue),
        )
        .route("/ojs/v1/admin/jobs", get(jobs::list_jobs))
        .route(
            "/ojs/v1/admin/jobs/{id}",
            get(jobs::get_job).patch(jobs::patch_job),
        )
        .route("/ojs/v1/admin/jobs/{id}/retry", post(jobs::retry_job))
        .route("/ojs/v1/admin/jobs/{id}/cancel", post(jobs::cancel_job))
        .route("/ojs/v1/admin/jobs/bulk/{action}", post(jobs::bulk_jobs))
        .route("/ojs/v1/admin/workers/{id}", delete(deregister_worker))
        .route(
            "/ojs/v1/admin/dead-letter",
            get(jobs::list_dead_letter).delete(jobs::purge_dead_letter),
        )
        .route(
            "/ojs/v1/admin/dead-letter/stats",
            get(jobs::dead_letter_stats),
        )
        .route(
            "/ojs/v1/admin/dead-letter/retry",
            post(jobs::bulk_retry_dead_letter),
        )
        .route(
            "/ojs/v1/admin/dead-letter/{id}/retry",
            post(jobs::retry_dead_letter),
        )
        .route(
            "/ojs/v1/admin/dead-letter/{id}",
            delete(super::dead_letter::delete_dead_letter_admin),
        )
        .route(
            "/ojs/v1/admin/system/maintenance",
            get(get_maintenance).post(set_maintenance),
        )
        .route("/ojs/v1/admin/system/config", get(get_config))
        .route("/ojs/v1/admin/schemas", get(list_schemas))
        .route("/ojs/v1/admin/schemas/{type}", get(get_schema))
        .route("/ojs/v1/admin/tenants", get(tenants::list_tenants))
        .route(
            "/ojs/v1/admin/tenants/{id}",
            get(tenants::get_tenant)
                .put(tenants::put_tenant)
                .delete(tenants::delete_tenant),
        )
        .route(
            "/ojs/v1/admin/tenants/{id}/limits",
            put(tenants::put_tenant_limits),
        )
        .route("/ojs/v1/admin/tenants/{id}/stats", get(tenants::get_tenant))
        .route(
            "/ojs/v1/admin/tenants/{id}/jobs",
            get(jobs::list_tenant_jobs),
        )
        .route(
            "/ojs/v1/admin/scheduling/stats",
            get(stats::scheduling_stats),
        )
        .route(
            "/ojs/v1/admin/keys/{id}/registrations",
            get(key_registrations),
        )
}

fn queue_view(q: &QueueInfo, st: &QueueStats) -> Value {
    json!({
        "name": q.name,
        "state": if st.paused { "paused" } else { "active" },
        "paused": st.paused,
        "counts": counts(st),
        "created_at": q.created_at,
    })
}

/// `GET /ojs/v1/admin/queues` (§6.1).
async fn list_queues(
    State(app): State<AppState>,
    Query(p): Query<super::admin_query::RawPaging>,
) -> Result<Response, ApiError> {
    let paging = p.parse()?;
    let queues = app.store.engine().list_queues().await?;
    let total = queues.len();
    let page = queues
        .into_iter()
        .skip(paging.offset())
        .take(paging.per_page);
    let items: Vec<Value> = with_stats(&app, page)
        .await?
        .iter()
        .map(|(q, st)| queue_view(q, st))
        .collect();
    Ok(reply(StatusCode::OK, paging.listing(items, total)))
}

/// `GET /ojs/v1/admin/queues/{name}` (§6.2).
async fn get_queue(
    State(app): State<AppState>,
    PathParam(queue): PathParam<QueueName>,
) -> Result<Response, ApiError> {
    let info = app
        .store
        .engine()
        .list_queues()
        .await?
        .into_iter()
        .find(|q| q.name == queue.as_str())
        .ok_or_else(|| OjsError::not_found(format!("queue {queue} not found")))?;
    let st = app.store.derived().queue_stats(&queue).await?;
    let settings = app.store.admin().admin_queue_settings(&queue).await?;
    let mut body = queue_view(&info, &st);
    body["configuration"] = json!({
        "rate_limit": settings.rate_limit.map(|r| r.to_json()),
        "backpressure": st.backpressure.map(|b| b.to_json()),
    });
    Ok(reply(StatusCode::OK, body))
}

/// `PUT /ojs/v1/admin/queues/{name}/config` (§6.6): the queue-wide rate limit
/// (`{"rate_limit": {"limit", "period"}}`, `null` to remove it), applied at FETCH, and
/// the depth bound (`{"backpressure": {"max_depth", "strategy", "warning_threshold"}}`,
/// ojs-backpressure.md §6.2; `null` or `max_depth` 0 removes it), applied at PUSH. A
/// queue-wide concurrency or retention is not offered (retention is the table's TTL
/// setting); asking for one is a 422 `unsupported`. Every field is checked before any is
/// stored: a refused request changes nothing.
async fn configure_queue(
    State(app): State<AppState>,
    BodyAndPath(JsonBody(body), queue): BodyAndPath<JsonBody, QueueName>,
) -> Result<Response, ApiError> {
    let Value::Object(fields) = &body else {
        return Err(OjsError::invalid_request("the request body must be a JSON object").into());
    };
    for (k, v) in fields {
        match k.as_str() {
            "rate_limit" | "backpressure" => {}
            "concurrency" | "retention" if !v.is_null() => {
                return Err(OjsError::new(
                    ErrorCode::Unsupported,
                    format!(
                        "a queue-wide {k} is not supported by this server; set a job's own \
                         rate_limit.concurrency, and retention with OJS_RETENTION"
                    ),
                )
                .with_path(&format!("$.{k}"))
                .into())
            }
            "concurrency" | "retention" => {}
            other => {
                return Err(
                    OjsError::invalid_request(format!("unknown field {other:?}"))
                        .with_path(&format!("$.{other}"))
                        .into(),
                )
            }
        }
    }
    let bound = fields
        .get("backpressure")
        .map(ojs_core::backpressure::Backpressure::from_json)
        .transpose()?;
    match fields.get("rate_limit") {
        None => {}
        Some(Value::Null) => {
            app.store
                .engine()
                .set_queue_rate_limit(queue.as_str(), None)
                .await?
        }
        Some(rl) => {
            let limit = rl["limit"].as_u64().filter(|l| *l > 0).ok_or_else(|| {
                OjsError::invalid_request("rate_limit.limit must be a positive integer")
                    .with_path("$.rate_limit.limit")
            })?;
            let period = rl["period"].as_str().ok_or_else(|| {
                OjsError::invalid_request("rate_limit.period must be an ISO 8601 duration")
                    .with_path("$.rate_limit.period")
            })?;
            let spec = json!({"rate": {"limit": limit, "period": period}});
            let policy = ojs_core::rate_limit::RateLimitPolicy::for_queue(&spec, queue.as_str())?;
            app.store
                .engine()
                .set_queue_rate_limit(queue.as_str(), Some(&policy))
                .await?;
        }
    }
    if let Some(bound) = bound {
        app.store
            .engine()
            .set_queue_backpressure(queue.as_str(), bound.as_ref())
            .await?;
    }
    get_queue(State(app), PathParam(queue)).await
}

/// `DELETE /ojs/v1/admin/workers/{id}` (§9.4): removes a worker that missed its
/// heartbeats (none for [`STALE_AFTER_SECS`]); its leases run out and the sweep retries
/// its jobs.
async fn deregister_worker(
    State(app): State<AppState>,
    PathParam(WorkerId(id)): PathParam<WorkerId>,
) -> Result<Response, ApiError> {
    let stale_before = time::now() - chrono::Duration::seconds(STALE_AFTER_SECS);
    app.store
        .admin()
        .deregister_worker(&id, stale_before)
        .await
        .map_err(|e| match e {
            StoreError::Conflict { .. } => ApiError(OjsError::conflict(format!(
                "worker {id} sent a heartbeat within the last {STALE_AFTER_SECS} s; quiet it \
                 instead, or wait until it is stale"
            ))),
            other => other.into(),
        })?;
    Ok(reply(
        StatusCode::OK,
        json!({"deregistered": true, "worker_id": id}),
    ))
}

/// A worker without a heartbeat for this long is stale.
pub(crate) const STALE_AFTER_SECS: i64 = 120;

fn maintenance_view(m: &ojs_store::Maintenance) -> Value {
    json!({
        "enabled": m.enabled,
        "maintenance": m.enabled,
        "reason": m.reason,
        "started_at": m.started_at,
        "enabled_at": m.started_at,
        "ends_at": m.ends_at,
        "estimated_end": m.ends_at,
        "paused_queues": m.paused_queues,
    })
}

async fn get_maintenance(State(app): State<AppState>) -> Result<Response, ApiError> {
    let m = app.store.admin().maintenance().await?;
    Ok(reply(StatusCode::OK, maintenance_view(&m)))
}

/// `POST /ojs/v1/admin/system/maintenance` (§12.1): on pauses every queue (FETCH returns
/// nothing, PUSH still accepts); off resumes the queues it paused.
async fn set_maintenance(
    State(app): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let enabled = body["enabled"].as_bool().ok_or_else(|| {
        OjsError::invalid_request("enabled must be true or false").with_path("$.enabled")
    })?;
    let reason = body["reason"].as_str();
    let now = time::now();
    let duration = body["estimated_duration"]
        .as_str()
        .or_else(|| body["duration"].as_str());
    let ends_at = match duration {
        Some(d) => {
            let d = ojs_core::duration::parse(d).ok_or_else(|| {
                OjsError::invalid_request("estimated_duration must be an ISO 8601 duration")
                    .with_path("$.estimated_duration")
            })?;
            Some(now + chrono::Duration::from_std(d).unwrap_or_default())
        }
        None => None,
    };
    let m = app
        .store
        .admin()
        .set_maintenance(enabled, reason, ends_at, now)
        .await?;
    tracing::info!(enabled, "maintenance mode set");
    Ok(reply(StatusCode::OK, maintenance_view(&m)))
}

/// `GET /ojs/v1/admin/system/config` (§12.2): non-sensitive settings.
async fn get_config(State(app): State<AppState>) -> Result<Response, ApiError> {
    Ok(reply(
        StatusCode::OK,
        json!({
            "backend": "dynamodb",
            "table": app.store.table(),
            "queue_shards": app.store.engine().queue_shards(),
            "auth": match app.config.auth { crate::AuthMode::Off => "off", crate::AuthMode::ApiKey => "api-key" },
            "fetch_recheck_ms": u64::try_from(app.config.fetch_recheck.as_millis()).unwrap_or(u64::MAX),
            "cors_allowed_origins": app.config.cors_origins,
        }),
    ))
}

/// A registered schema as the dashboard lists it: `type`, `version`, `schema`.
fn schema_view(e: &ojs_store::SchemaEntry) -> Value {
    let mut v = e.view();
    let d = &e.doc;
    v["type"] = json!(d.job_type.clone().unwrap_or_else(|| d.uri.clone()));
    v["version"] = match &d.version {
        Some(Value::String(s)) => json!(s),
        Some(other) => json!(other.to_string()),
        None => json!("1"),
    };
    v
}

/// `GET /ojs/v1/admin/schemas`.
async fn list_schemas(State(app): State<AppState>) -> Result<Response, ApiError> {
    let all = app.store.schemas().list().await?;
    let schemas = super::views(&all, schema_view);
    Ok(reply(StatusCode::OK, json!({ "schemas": schemas })))
}

/// `GET /ojs/v1/admin/schemas/{type}`: the latest version of a job type in the versioned
/// registry, the one of highest precedence (ojs-schema-registry.md §4.2, §6.3: one Query
/// of the type's versions). A type with no version, or a URI, is looked for as before
/// among every registration (one more Query): the one registered last under that URI or
/// naming that type.
async fn get_schema(
    State(app): State<AppState>,
    Path(job_type): Path<String>,
) -> Result<Response, ApiError> {
    if ojs_core::JobType::parse(&job_type).is_ok() {
        let versions = app.store.schemas().list_versions(&job_type).await?;
        if let Some(latest) = versions.first() {
            return Ok(reply(
                StatusCode::OK,
                super::schema_versions::version_view(latest),
            ));
        }
    }
    let found = app
        .store
        .schemas()
        .list()
        .await?
        .into_iter()
        .filter(|e| e.doc.uri == job_type || e.doc.job_type.as_deref() == Some(&job_type))
        .max_by(|a, b| a.created_at.cmp(&b.created_at))
        .ok_or_else(|| super::schema_versions::no_versions(&job_type))?;
    Ok(reply(StatusCode::OK, schema_view(&found)))
}

/// `GET /ojs/v1/admin/keys/{id}/registrations`: the push endpoints, webhook
/// subscriptions, cron jobs and schemas registered with API key `id` (README, "API keys
/// and scopes"). A key id is 12 hex digits; anything else names no key.
async fn key_registrations(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if id.len() != 12 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(OjsError::invalid_request(format!(
            "{id:.64} is not an API key id (12 lower-case hex digits)"
        ))
        .into());
    }
    let listing = crate::registrations::list_by_key(&app.store, &id).await?;
    Ok(reply(StatusCode::OK, listing))
}
