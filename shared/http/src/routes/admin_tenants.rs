//! The admin API's tenants (ojs-multi-tenancy.md §10): their settings, set, read and
//! removed, and their jobs' counts.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::{time, OjsError};
use serde_json::{json, Value};

use super::reply;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::AppState;

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
pub(super) async fn put_tenant(
    State(app): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    set_tenant(&app, &id, &body, false).await
}

/// `PUT /ojs/v1/admin/tenants/{id}/limits` (§9.3): its limits only; a `reason` is logged.
pub(super) async fn put_tenant_limits(
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
pub(super) async fn delete_tenant(
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

/// `GET /ojs/v1/admin/tenants`: every tenant that had a job or has settings, with its
/// counts (the default tenant, whose jobs are the queues' own, is not listed); for a key
/// bound to a tenant, or a request naming one in `X-OJS-Tenant`, that tenant alone (the
/// dashboard's tenants page, on a tenant's own key).
pub(super) async fn list_tenants(
    State(app): State<AppState>,
    acting: crate::extract::ListingTenant,
    Query(p): Query<super::admin_query::RawPaging>,
) -> Result<Response, ApiError> {
    let paging = p.parse()?;
    let scope = acting.scope(None, "$.tenant")?;
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
    all.retain(
        |(t, _)| match ojs_core::tenant::TenantId::parse(&t.tenant) {
            Ok(id) => scope.sees(id.as_ref()),
            Err(_) => scope == ojs_core::tenant::Scope::Any,
        },
    );
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
pub(super) async fn get_tenant(
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
