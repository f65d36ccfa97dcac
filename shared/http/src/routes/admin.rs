//! The admin API (ojs-admin-api.md) under `/ojs/v1/admin/`: queues, statistics, system
//! operations and the dashboard's other reads here; jobs and the dead letter queue in
//! `admin_jobs`. (`GET /ojs/v1/admin/workers` and the worker directives are served by
//! the workers group, the queue rate limit and recount by the queues group; pausing and
//! resuming a queue, and deleting a dead letter, by the handlers of the queues and dead
//! letter groups.)

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{delete, get, post, put};
use axum::Router;
use ojs_core::{time, ErrorCode, OjsError, QueueName};
use ojs_store::{EventQuery, QueueInfo, QueueStats, StoreError};
use serde::Deserialize;
use serde_json::{json, Value};

use super::admin_jobs as jobs;
use super::{queues, reply};
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/admin/stats", get(get_stats))
        .route("/ojs/v1/admin/stats/history", get(get_history))
        .route("/ojs/v1/admin/queues", get(list_queues))
        .route("/ojs/v1/admin/queues/{name}", get(get_queue))
        .route(
            "/ojs/v1/admin/queues/{name}/pause",
            post(queues::pause_queue),
        )
        .route(
            "/ojs/v1/admin/queues/{name}/resume",
            post(queues::resume_queue),
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
        .route("/ojs/v1/admin/tenants", get(list_tenants))
        .route(
            "/ojs/v1/admin/tenants/{id}",
            get(get_tenant).put(put_tenant).delete(delete_tenant),
        )
        .route(
            "/ojs/v1/admin/tenants/{id}/limits",
            axum::routing::put(put_tenant_limits),
        )
        .route("/ojs/v1/admin/tenants/{id}/stats", get(get_tenant))
        .route(
            "/ojs/v1/admin/tenants/{id}/jobs",
            get(super::admin_jobs::list_tenant_jobs),
        )
        .route("/ojs/v1/admin/scheduling/stats", get(scheduling_stats))
        .route(
            "/ojs/v1/admin/keys/{id}/registrations",
            get(key_registrations),
        )
}

fn counts(st: &QueueStats) -> Value {
    json!({
        "available": st.available,
        "active": st.active,
        "scheduled": st.scheduled,
        "retryable": st.retryable,
        "pending": st.pending,
        "completed": st.completed,
        "discarded": st.discarded,
        "cancelled": st.cancelled,
    })
}

fn add(total: &mut QueueStats, st: &QueueStats) {
    total.available += st.available;
    total.active += st.active;
    total.scheduled += st.scheduled;
    total.retryable += st.retryable;
    total.pending += st.pending;
    total.completed += st.completed;
    total.discarded += st.discarded;
    total.cancelled += st.cancelled;
}

/// Every queue with its counts (one counter read per queue).
async fn queues_with_stats(app: &AppState) -> Result<Vec<(QueueInfo, QueueStats)>, ApiError> {
    with_stats(app, app.store.engine().list_queues().await?).await
}

/// Each of `queues` with its counts (one counter read per queue).
async fn with_stats(
    app: &AppState,
    queues: impl IntoIterator<Item = QueueInfo>,
) -> Result<Vec<(QueueInfo, QueueStats)>, ApiError> {
    let mut out = Vec::new();
    for q in queues {
        let Ok(name) = QueueName::parse(&q.name) else {
            continue;
        };
        let st = app.store.derived().queue_stats(&name).await?;
        out.push((q, st));
    }
    Ok(out)
}

/// The event id every event of `at` or later sorts after (event ids are `evt_` and a
/// UUIDv7, whose first 48 bits are the Unix time in milliseconds).
fn event_cursor_at(at: &time::Timestamp) -> String {
    let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    let hex = format!("{ms:012x}");
    format!("evt_{}-{}-0000-0000-000000000000", &hex[..8], &hex[8..])
}

/// Lifecycle events of `types` since `since` for `queues` (all when empty).
async fn events_since(
    app: &AppState,
    types: &[&str],
    queues: Vec<String>,
    since: &time::Timestamp,
) -> Result<Vec<Value>, ApiError> {
    let q = EventQuery {
        types: types.iter().map(|t| (*t).to_owned()).collect(),
        queues,
        after: Some(event_cursor_at(since)),
        limit: 10_000,
        tenant: ojs_core::tenant::Scope::Any,
    };
    Ok(app.store.derived().list_events(&q).await?.events)
}

/// Jobs finished and failed in the last minute, from the lifecycle events.
async fn throughput(app: &AppState, queues: Vec<String>) -> Result<Value, ApiError> {
    let since = time::now() - chrono::Duration::minutes(1);
    let events = events_since(app, &["job.completed", "job.failed"], queues, &since).await?;
    let done = events
        .iter()
        .filter(|e| e["type"] == "job.completed")
        .count();
    Ok(json!({
        "processed_per_minute": done,
        "failed_per_minute": events.len() - done,
    }))
}

/// `GET /ojs/v1/admin/stats` (§10.1).
async fn get_stats(State(app): State<AppState>) -> Result<Response, ApiError> {
    let queues = queues_with_stats(&app).await?;
    let mut total = QueueStats::default();
    for (_, st) in &queues {
        add(&mut total, st);
    }
    let names = queues.iter().map(|(q, _)| q.name.clone()).collect();
    let workers = app.store.workers().list_workers().await?.len();
    Ok(reply(
        StatusCode::OK,
        json!({
            "queues": queues.len(),
            "workers": workers,
            "jobs": counts(&total),
            "throughput": throughput(&app, names).await?,
            "uptime_seconds": app.started.elapsed().as_secs(),
        }),
    ))
}

#[derive(Debug, Deserialize)]
struct HistoryParams {
    period: Option<String>,
    since: Option<String>,
    until: Option<String>,
    queue: Option<String>,
}

/// `GET /ojs/v1/admin/stats/history` (§10.2): enqueued, processed and failed jobs per
/// period, counted from the lifecycle events (kept for the event retention; latency is
/// not recorded).
async fn get_history(
    State(app): State<AppState>,
    Query(p): Query<HistoryParams>,
) -> Result<Response, ApiError> {
    let period = p.period.as_deref().unwrap_or("5m");
    let secs: i64 = match period {
        "1m" => 60,
        "5m" => 300,
        "1h" => 3600,
        "1d" => 86_400,
        other => {
            return Err(OjsError::invalid_request(format!(
                "period must be 1m, 5m, 1h or 1d (got {other:?})"
            ))
            .with_path("$.period")
            .into())
        }
    };
    let now = time::now();
    let until = match p.until.as_deref() {
        Some(raw) => time::parse(raw, "$.until")?,
        None => now,
    };
    let since = match p.since.as_deref() {
        Some(raw) => time::parse(raw, "$.since")?,
        None => until - chrono::Duration::hours(1),
    };
    if since >= until || (until - since).num_seconds() / secs > 2000 {
        return Err(OjsError::invalid_request(
            "since must be before until, and the range at most 2000 periods",
        )
        .with_path("$.since")
        .into());
    }
    let queues = match p.queue.as_deref().filter(|q| !q.is_empty()) {
        Some(q) => vec![QueueName::parse(q)?.as_str().to_owned()],
        None => Vec::new(),
    };
    let events = events_since(
        &app,
        &["job.enqueued", "job.completed", "job.failed"],
        queues,
        &since,
    )
    .await?;
    let bucket = |t: i64| t - t.rem_euclid(secs);
    let mut data: BTreeMap<i64, [u64; 3]> = BTreeMap::new();
    let mut t = bucket(since.timestamp());
    while t <= until.timestamp() {
        data.insert(t, [0; 3]);
        t += secs;
    }
    for e in &events {
        let Some(at) = e["time"]
            .as_str()
            .and_then(|raw| time::parse(raw, "$").ok())
        else {
            continue;
        };
        if at > until {
            continue;
        }
        let slot = match e["type"].as_str() {
            Some("job.enqueued") => 0,
            Some("job.completed") => 1,
            _ => 2,
        };
        if let Some(b) = data.get_mut(&bucket(at.timestamp())) {
            b[slot] += 1;
        }
    }
    let data: Vec<Value> = data
        .into_iter()
        .filter_map(|(t, [enqueued, processed, failed])| {
            let at = chrono::DateTime::<chrono::Utc>::from_timestamp(t, 0)?;
            Some(json!({
                "timestamp": time::format(&at),
                "enqueued": enqueued,
                "processed": processed,
                "failed": failed,
            }))
        })
        .collect();
    Ok(reply(
        StatusCode::OK,
        json!({"period": period, "data": data}),
    ))
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
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let queue = QueueName::parse(&name)?;
    let info = app
        .store
        .engine()
        .list_queues()
        .await?
        .into_iter()
        .find(|q| q.name == name)
        .ok_or_else(|| OjsError::not_found(format!("queue {name} not found")))?;
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
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let queue = QueueName::parse(&name)?;
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
    get_queue(State(app), Path(name)).await
}

/// `DELETE /ojs/v1/admin/workers/{id}` (§9.4): removes a worker that missed its
/// heartbeats (none for [`STALE_AFTER_SECS`]); its leases run out and the sweep retries
/// its jobs.
async fn deregister_worker(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    super::workers::check_worker_id(&id)?;
    let stale_before = time::now() - chrono::Duration::seconds(STALE_AFTER_SECS);
    app.store
        .admin()
        .deregister_worker(&id, stale_before)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => super::workers::no_such_worker(&id),
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
    let schemas: Vec<Value> = app
        .store
        .schemas()
        .list_schemas()
        .await?
        .iter()
        .map(schema_view)
        .collect();
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
        let versions = app.store.schemas().list_schema_versions(&job_type).await?;
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
        .list_schemas()
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

/// A tenant's view (ojs-multi-tenancy.md §10.2): its jobs' counts, summed and per queue
/// (terminal counts since its counters began), `total_jobs`, its settings, and its
/// limits with what they are judged on.
/// A tenant as the admin API shows it: the spec's stats (§10.2: `jobs`, `limits` with
/// each limit and its current use, `fairness`) and settings (`config`), with what the
/// official dashboard's tenant pages read beside them: `name` (the id: tenants have no
/// other name), `state`, `created_at` (when its settings were stored or its first job
/// counted, whichever came first), `stats` (queues, job counts, live workers acting for
/// it) and `limits.max_concurrent_jobs` / `max_jobs_per_second` as plain numbers.
fn tenant_view(
    t: &ojs_store::TenantStats,
    record: &ojs_store::TenantRecord,
    workers: usize,
) -> Value {
    let counts = super::queues::counts_view;
    let config = &record.config;
    let queues: serde_json::Map<String, Value> = t
        .queues
        .iter()
        .map(|(q, st)| (q.clone(), counts(st)))
        .collect();
    let settings = config.to_json();
    let created_at = match (record.created_at, t.first_seen) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let per_second = config
        .max_enqueue_rate
        .filter(|w| !w.period.is_zero())
        .map(|w| f64::from(w.limit) / w.period.as_secs_f64());
    json!({
        "tenant_id": t.tenant,
        "id": t.tenant,
        "name": t.tenant,
        "state": "active",
        "created_at": created_at.map(|c| time::format(&c)),
        "jobs": counts(&t.total),
        "total_jobs": t.total.total(),
        "queues": queues,
        "stats": {"queues": t.queues.len(), "jobs": counts(&t.total), "workers": workers},
        "config": settings,
        "fairness": {"weight": config.weight()},
        "limits": {
            "max_queue_depth": {"limit": config.max_queue_depth, "current": t.total.depth()},
            "max_scheduled": {"limit": config.max_scheduled, "current": t.total.scheduled},
            // Active jobs as counted; the slots taken are the item the claims keep.
            "max_concurrency": {"limit": config.max_concurrency, "current": t.total.active},
            "max_enqueue_rate": settings["limits"]["max_enqueue_rate"],
            "max_concurrent_jobs": config.max_concurrency,
            "max_jobs_per_second": per_second,
        },
    })
}

/// Live workers by the tenant they act for (one Query of the workers' partition).
async fn workers_by_tenant(
    app: &AppState,
) -> Result<std::collections::HashMap<String, usize>, ApiError> {
    let mut by = std::collections::HashMap::new();
    for w in app.store.workers().list_workers().await? {
        if let Some(t) = w.tenant {
            *by.entry(t).or_insert(0) += 1;
        }
    }
    Ok(by)
}

fn tenant_id(id: &str) -> Result<ojs_core::tenant::TenantId, ApiError> {
    ojs_core::tenant::TenantId::parse(id)?.ok_or_else(|| {
        ApiError(OjsError::invalid_request(
            "the default tenant takes no settings here: its jobs are the queues' own",
        ))
    })
}

/// `PUT /ojs/v1/admin/tenants/{id}` (§10.1): sets the tenant's `fairness_weight` and
/// `limits` (fields left out keep their values; `null` removes one), in force at once on
/// this instance and within the settings' time to live on the others.
async fn put_tenant(
    State(app): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    set_tenant(&app, &id, &body, false).await
}

/// `PUT /ojs/v1/admin/tenants/{id}/limits` (§9.3): its limits only; a `reason` is logged.
async fn put_tenant_limits(
    State(app): State<AppState>,
    Path(id): Path<String>,
    JsonBody(mut body): JsonBody,
) -> Result<Response, ApiError> {
    let reason = body
        .as_object_mut()
        .and_then(|o| o.remove("reason"))
        .and_then(|r| r.as_str().map(str::to_owned));
    tracing::info!(tenant = %id, reason = reason.as_deref().unwrap_or(""), "tenant limits changed");
    set_tenant(&app, &id, &body, true).await
}

async fn set_tenant(
    app: &AppState,
    id: &str,
    body: &Value,
    limits_only: bool,
) -> Result<Response, ApiError> {
    let tenant = tenant_id(id)?;
    let before = app.store.engine().get_tenant_config(&tenant).await?;
    let config = ojs_core::tenant::TenantConfig::merged(
        &before.clone().unwrap_or_default().config,
        body,
        limits_only,
    )?;
    let created_at = before
        .as_ref()
        .and_then(|b| b.created_at)
        .unwrap_or_else(time::now);
    app.store
        .engine()
        .put_tenant_config(&tenant, &config, created_at)
        .await?;
    let record = ojs_store::TenantRecord {
        config,
        created_at: Some(created_at),
    };
    let stats = app
        .store
        .derived()
        .tenant_stats(&tenant)
        .await?
        .unwrap_or_else(|| ojs_store::TenantStats {
            tenant: tenant.to_string(),
            ..Default::default()
        });
    let status = if before.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let workers = workers_by_tenant(app).await?;
    let view = tenant_view(
        &stats,
        &record,
        workers.get(tenant.as_str()).copied().unwrap_or(0),
    );
    Ok(reply(status, view))
}

/// `DELETE /ojs/v1/admin/tenants/{id}`: removes its settings (its jobs and counts stay);
/// 404 when it has none.
async fn delete_tenant(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = tenant_id(&id)?;
    if !app.store.engine().delete_tenant_config(&tenant).await? {
        return Err(OjsError::not_found(format!("tenant {tenant} has no settings")).into());
    }
    Ok(reply(
        StatusCode::OK,
        json!({"deleted": true, "tenant_id": tenant.as_str()}),
    ))
}

/// `GET /ojs/v1/admin/tenants`: every tenant that had a job, with its counts (the default
/// tenant, whose jobs are the queues' own, is not listed).
async fn list_tenants(
    State(app): State<AppState>,
    Query(p): Query<super::admin_query::RawPaging>,
) -> Result<Response, ApiError> {
    let paging = p.parse()?;
    // Tenants that had jobs, and those with settings but no job yet.
    let mut configs: std::collections::BTreeMap<String, ojs_store::TenantRecord> = app
        .store
        .engine()
        .list_tenant_configs()
        .await?
        .into_iter()
        .collect();
    let mut all: Vec<(ojs_store::TenantStats, ojs_store::TenantRecord)> = app
        .store
        .derived()
        .list_tenants()
        .await?
        .into_iter()
        .map(|t| {
            let c = configs.remove(&t.tenant).unwrap_or_default();
            (t, c)
        })
        .collect();
    all.extend(configs.into_iter().map(|(tenant, c)| {
        let stats = ojs_store::TenantStats {
            tenant,
            ..Default::default()
        };
        (stats, c)
    }));
    all.sort_by(|a, b| a.0.tenant.cmp(&b.0.tenant));
    let workers = workers_by_tenant(&app).await?;
    let items: Vec<Value> = all
        .iter()
        .skip(paging.offset())
        .take(paging.per_page)
        .map(|(t, c)| tenant_view(t, c, workers.get(&t.tenant).copied().unwrap_or(0)))
        .collect();
    let mut body = paging.listing(items.clone(), all.len());
    body["tenants"] = Value::Array(items);
    Ok(reply(StatusCode::OK, body))
}

/// `GET /ojs/v1/admin/tenants/{id}` and `.../stats`: one tenant's counts; 404 for a
/// tenant that never had a job. A key bound to a tenant reads its own (403 naming
/// another), as do its listings.
async fn get_tenant(
    State(app): State<AppState>,
    acting: crate::extract::ListingTenant,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let unknown = || OjsError::not_found(format!("tenant {id:.64} has no jobs"));
    let named = ojs_core::tenant::TenantId::parse(&id).map_err(|_| unknown())?;
    acting.scope(Some(&id), "$.id")?;
    let tenant = named.ok_or_else(|| {
        OjsError::not_found(
            "the default tenant's jobs are its queues': see GET /ojs/v1/queues/{name}/stats",
        )
    })?;
    let config = app.store.engine().get_tenant_config(&tenant).await?;
    let stats = match app.store.derived().tenant_stats(&tenant).await? {
        Some(stats) => stats,
        None if config.is_some() => ojs_store::TenantStats {
            tenant: tenant.to_string(),
            ..Default::default()
        },
        None => return Err(unknown().into()),
    };
    let workers = workers_by_tenant(&app).await?;
    let view = tenant_view(
        &stats,
        &config.unwrap_or_default(),
        workers.get(tenant.as_str()).copied().unwrap_or(0),
    );
    Ok(reply(StatusCode::OK, view))
}

/// `GET /ojs/v1/admin/scheduling/stats` (ojs-fair-scheduling.md §10.2): FETCH takes the
/// highest priority first, then the oldest, per queue, its queues in its own order unless
/// a pool (listed) orders them; `dispatched` is each queue's jobs started and finished
/// since its counters began (active + completed + discarded + cancelled). Under `stats`
/// too, as the suite reads it.
async fn scheduling_stats(State(app): State<AppState>) -> Result<Response, ApiError> {
    let queues: Vec<Value> = queues_with_stats(&app)
        .await?
        .iter()
        .map(|(q, st)| {
            json!({
                "name": q.name,
                "dispatched": st.active + st.completed + st.discarded + st.cancelled,
                "starved": false,
            })
        })
        .collect();
    let pools: Vec<Value> = app
        .store
        .engine()
        .list_pools()
        .await?
        .iter()
        .map(|p| p.to_json())
        .collect();
    let stats = json!({"queues": queues, "pools": pools});
    Ok(reply(
        StatusCode::OK,
        json!({"strategy": "strict", "queues": queues, "pools": pools, "stats": stats}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_cursors_sort_before_every_event_of_their_millisecond() {
        let at = time::now();
        let cursor = event_cursor_at(&at);
        let ev = ojs_core::event::Event::for_job(
            ojs_core::event::EventKind::Enqueued,
            &ojs_core::Job::enqueue(
                ojs_core::job::NewJob::from_json(json!({"type": "t", "args": []}))
                    .unwrap_or_else(|e| panic!("{e}")),
                at,
            ),
            &at,
            "test",
        );
        assert!(cursor < ev.id, "{cursor} !< {}", ev.id);
        let later = event_cursor_at(&(time::now() + chrono::Duration::seconds(1)));
        assert!(later > ev.id, "{later} !> {}", ev.id);
    }
}
