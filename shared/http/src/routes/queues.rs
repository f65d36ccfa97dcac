//! Queue listing.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use ojs_core::{ErrorCode, OjsError, QueueName};
use serde::Deserialize;
use serde_json::{json, Value};

use super::reply;
use crate::dialect::Dialect;
use crate::error::ApiError;
use crate::extract::{BodyAndPath, CheckedQuery, JsonBody, PathParam, QueryCheck, Tenant};
use crate::AppState;
use ojs_core::tenant::Scope;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/queues", get(list_queues))
        .route("/ojs/v1/queues/{name}", get(queue_info))
        .route("/ojs/v1/queues/{name}/stats", get(queue_stats))
        .route("/ojs/v1/queues/{name}/pause", post(set_paused::<true>))
        .route("/ojs/v1/queues/{name}/resume", post(set_paused::<false>))
        .route("/ojs/v1/admin/queues/{name}/recount", post(recount_queue))
        .route(
            "/ojs/v1/admin/queues/{name}/rate-limit",
            axum::routing::put(set_rate_limit).delete(clear_rate_limit),
        )
        .merge(super::rate_limits::router())
        .merge(super::pools::router())
}

async fn queue_stats(
    State(app): State<AppState>,
    dialect: Dialect,
    tenant: Tenant,
    PathParam(queue): PathParam<QueueName>,
) -> Result<Response, ApiError> {
    let st = tenant_queue_stats(&app, &tenant.0, &queue).await?;
    Ok(reply(StatusCode::OK, stats_body(&queue, &st, dialect)))
}

/// `GET /ojs/v1/queues/{name}`: the queue as an object (`queue.name`, its status and
/// counts), as the multi-tenancy suite reads it; the stats route's body otherwise.
async fn queue_info(
    State(app): State<AppState>,
    tenant: Tenant,
    PathParam(queue): PathParam<QueueName>,
) -> Result<Response, ApiError> {
    let st = tenant_queue_stats(&app, &tenant.0, &queue).await?;
    Ok(reply(
        StatusCode::OK,
        stats_body(&queue, &st, Dialect::OpenApi),
    ))
}

/// A queue's stats as the request's tenant sees them: its own jobs' counts for a request
/// acting for one tenant (the default tenant's are the queue's less every other
/// tenant's), the whole queue's for one acting for any. Pause and bound are the queue's.
async fn tenant_queue_stats(
    app: &AppState,
    scope: &Scope,
    queue: &QueueName,
) -> Result<ojs_store::QueueStats, ApiError> {
    let name = queue.as_str();
    let st = app.store.derived().queue_stats(queue).await?;
    if !st.registered {
        // No job was ever pushed to it and nothing set for it (the seed audit: 404, not
        // a queue of zeros that does not exist).
        return Err(OjsError::not_found(format!("queue {name} does not exist")).into());
    }
    let counts = match scope {
        Scope::Any => return Ok(st),
        Scope::One(Some(t)) => app
            .store
            .derived()
            .tenant_stats(t)
            .await?
            .and_then(|ts| ts.queues.get(name).cloned())
            .unwrap_or_default(),
        Scope::One(None) => {
            let mut own = st.clone();
            for ts in app.store.derived().list_tenants().await? {
                if let Some(theirs) = ts.queues.get(name) {
                    own.subtract_counts(theirs);
                }
            }
            own
        }
    };
    Ok(ojs_store::QueueStats {
        registered: st.registered,
        paused: st.paused,
        backpressure: st.backpressure,
        ..counts
    })
}

/// Sets a queue's live counters from its indexes (after counters were turned on over
/// existing jobs, or a lost counter update); answers with the counts as recounted.
async fn recount_queue(
    State(app): State<AppState>,
    dialect: Dialect,
    PathParam(queue): PathParam<QueueName>,
) -> Result<Response, ApiError> {
    let st = app.store.derived().recount_queue(&queue).await?;
    tracing::info!(queue = %queue, "queue counters recounted");
    Ok(reply(StatusCode::OK, stats_body(&queue, &st, dialect)))
}

/// The job counts of `st` by state, as stats show them.
pub(crate) fn counts_view(st: &ojs_store::QueueStats) -> serde_json::Value {
    json!({
        "available": st.available,
        "scheduled": st.scheduled,
        "retryable": st.retryable,
        "active": st.active,
        "pending": st.pending,
        "completed": st.completed,
        "discarded": st.discarded,
        "cancelled": st.cancelled,
    })
}

/// Queue stats: the counts at the top level (the JavaScript SDK), under `stats` (the
/// binding, §11.2), and `queue` as the binding's name or the OpenAPI document's object
/// (see [`Dialect`]).
fn stats_body(
    queue: &QueueName,
    st: &ojs_store::QueueStats,
    dialect: Dialect,
) -> serde_json::Value {
    let name = queue.as_str();
    let status = if st.paused { "paused" } else { "active" };
    let counts = counts_view(st);
    let mut body = counts.as_object().cloned().unwrap_or_default();
    let mut queue = body.clone();
    // The depth a bound is judged on, and the bound (ojs-backpressure.md §3, §6): in
    // `stats` with the queue's name, as the backpressure suite reads them.
    let mut stats = body.clone();
    stats.insert("queue".into(), json!(name));
    stats.insert("depth".into(), json!(st.depth()));
    if let Some(bound) = st.backpressure {
        stats.insert("max_depth".into(), json!(bound.max_depth));
        stats.insert("backpressure".into(), bound.to_json());
    }
    for (k, v) in [
        ("name", json!(name)),
        ("status", json!(status)),
        ("paused", json!(st.paused)),
    ] {
        queue.insert(k.into(), v.clone());
        body.insert(k.into(), v);
    }
    body.insert("stats".into(), serde_json::Value::Object(stats));
    body.insert(
        "queue".into(),
        match dialect {
            Dialect::Binding => json!(name),
            Dialect::OpenApi => serde_json::Value::Object(queue),
        },
    );
    body.insert(
        "computed_at".into(),
        json!(ojs_core::time::format(&ojs_core::time::now())),
    );
    serde_json::Value::Object(body)
}

/// `POST …/{name}/pause` (`PAUSED`) and `…/resume`: they answer with the queue's new
/// state, where `queue` is the binding's name (§11.3, §11.4) or the OpenAPI document's
/// object (see [`Dialect`]), and `status` is at the top level either way (the Python SDK
/// reads it there).
pub(crate) async fn set_paused<const PAUSED: bool>(
    State(app): State<AppState>,
    dialect: Dialect,
    PathParam(queue): PathParam<QueueName>,
) -> Result<Response, ApiError> {
    let q = app
        .store
        .engine()
        .set_paused(queue.as_str(), PAUSED)
        .await?;
    tracing::info!(queue = %q.name, paused = PAUSED, "queue state changed");
    if !PAUSED {
        // Best effort: what this misses, the scheduler's nudge delivers later.
        if let Err(e) = app
            .store
            .push_endpoints()
            .nudge_resumed_queue(&queue, ojs_core::time::now())
            .await
        {
            tracing::warn!(queue = %queue, error = %e, "resumed queue's pushed jobs not nudged");
        }
    }
    let status = if q.paused { "paused" } else { "active" };
    let object =
        json!({"name": q.name, "paused": q.paused, "status": status, "created_at": q.created_at});
    let now = json!(ojs_core::time::format(&ojs_core::time::now()));
    let mut body = json!({
        "name": q.name,
        "status": status,
        "paused": q.paused,
        "queue": match dialect {
            Dialect::Binding => json!(q.name),
            Dialect::OpenApi => object,
        },
    });
    body[if q.paused { "paused_at" } else { "resumed_at" }] = now;
    Ok(reply(StatusCode::OK, body))
}

/// `limit`/`offset` as the binding defines them, or `per_page`/`page` (1-based), which the
/// JavaScript SDK sends for cron.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Page {
    limit: Option<String>,
    offset: Option<String>,
    per_page: Option<String>,
    page: Option<String>,
}

impl Page {
    /// Validated (limit, offset): limit 1..=100 (default 50), offset >= 0.
    pub(crate) fn parse(&self) -> Result<(usize, usize), OjsError> {
        let num = |raw: &Option<String>, name: &str, default: usize, max: usize| match raw {
            None => Ok(default),
            Some(s) => s
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| {
                    OjsError::invalid_request(format!("{name} must be an integer from 0 to {max}"))
                }),
        };
        let max_offset = ojs_core::validate::MAX_LIST_OFFSET;
        let limit = match &self.limit {
            Some(_) => num(&self.limit, "limit", 50, 100)?,
            None => num(&self.per_page, "per_page", 50, 100)?,
        }
        .max(1);
        let offset = match (&self.offset, &self.page) {
            (None, Some(_)) => num(&self.page, "page", 1, max_offset / 100)?
                .saturating_sub(1)
                .saturating_mul(limit),
            _ => num(&self.offset, "offset", 0, max_offset)?,
        };
        Ok((limit, offset))
    }
}

/// One page of a listing read whole: the items from `offset` on (at most `limit`), each as
/// `view` shows it, and the listing's `pagination` object: the HTTP binding's `limit`,
/// `offset`, `has_more`, and the admin API's `page`, `per_page` (§6.1) that the dashboard
/// pages by, with `total` for both.
pub(crate) fn page_of<T>(
    all: &[T],
    (limit, offset): (usize, usize),
    view: impl FnMut(&T) -> Value,
) -> (Vec<Value>, Value) {
    let total = all.len();
    let items = all.iter().skip(offset).take(limit).map(view).collect();
    let pagination = json!({"total": total, "limit": limit, "offset": offset,
        "has_more": offset.saturating_add(limit) < total,
        "page": offset / limit.max(1) + 1, "per_page": limit});
    (items, pagination)
}

impl QueryCheck for Page {
    type Checked = (usize, usize);

    fn check(self) -> Result<(usize, usize), ApiError> {
        Ok(self.parse()?)
    }
}

/// The page a listing's query asks for ([`Page`]), checked before the listing is read.
pub(crate) type Paged = CheckedQuery<Page>;

impl Paged {
    /// The answer of this page of `all` (a listing read whole): its items, each as `view`
    /// shows it, under each of `keys`, and its `pagination` (see [`page_of`]).
    pub(crate) fn reply<T>(
        &self,
        all: &[T],
        keys: &[&str],
        view: impl FnMut(&T) -> Value,
    ) -> Response {
        let (items, pagination) = page_of(all, self.0, view);
        let mut body: serde_json::Map<String, Value> = keys
            .iter()
            .map(|k| ((*k).to_owned(), json!(items)))
            .collect();
        body.insert("pagination".into(), pagination);
        reply(StatusCode::OK, Value::Object(body))
    }
}

async fn list_queues(State(app): State<AppState>, paged: Paged) -> Result<Response, ApiError> {
    let queues = app.store.engine().list_queues().await?;
    Ok(paged.reply(&queues, &["queues"], |q| {
        json!({
            "name": q.name,
            "state": if q.paused { "paused" } else { "active" },
            "status": if q.paused { "paused" } else { "active" },
            "paused": q.paused,
            "created_at": q.created_at,
        })
    }))
}

/// `PUT /ojs/v1/admin/queues/{name}/rate-limit`: a limit every job start of the queue must
/// fit, on top of each job's own (`{rate: {limit, period}, throttle: {...}}`).
async fn set_rate_limit(
    State(app): State<AppState>,
    BodyAndPath(JsonBody(body), queue): BodyAndPath<JsonBody, QueueName>,
) -> Result<Response, ApiError> {
    // One partition per queue, whatever the body says.
    let policy = ojs_core::rate_limit::RateLimitPolicy::for_queue(&body, queue.as_str())?;
    // A queue-wide limit is checked at claim time only; concurrency also needs every
    // release to know the limit, which only the job's own rate_limit carries.
    if policy.concurrency.is_some() || policy.on_limit == ojs_core::rate_limit::OnLimit::Reschedule
    {
        return Err(OjsError::new(
            ErrorCode::ValidationError,
            "a queue-level rate limit takes rate, throttle or max_per_second; put concurrency \
             and on_limit reschedule in the job's options.rate_limit",
        )
        .with_path("$.concurrency")
        .into());
    }
    app.store
        .engine()
        .set_queue_rate_limit(queue.as_str(), Some(&policy))
        .await?;
    Ok(reply(
        StatusCode::OK,
        json!({"queue": {"name": queue.as_str(), "rate_limit": policy.to_json()}}),
    ))
}

async fn clear_rate_limit(
    State(app): State<AppState>,
    PathParam(queue): PathParam<QueueName>,
) -> Result<Response, ApiError> {
    app.store
        .engine()
        .set_queue_rate_limit(queue.as_str(), None)
        .await?;
    Ok(reply(
        StatusCode::OK,
        json!({"queue": {"name": queue.as_str(), "rate_limit": null}}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_named_both_ways_and_knows_what_follows() {
        let all: Vec<u32> = (0..60).collect();
        let (items, p) = page_of(&all, (25, 50), |n| json!(n));
        assert_eq!(items, (50..60).map(|n| json!(n)).collect::<Vec<_>>());
        assert_eq!(
            p,
            json!({"total": 60, "limit": 25, "offset": 50, "has_more": false, "page": 3, "per_page": 25})
        );
        let (items, p) = page_of(&all, (25, 25), |n| json!(n));
        assert_eq!(items.len(), 25);
        assert_eq!((&p["page"], &p["has_more"]), (&json!(2), &json!(true)));
        let (items, p) = page_of(&all, (10, 55), |n| json!(n));
        assert_eq!(items.len(), 5);
        assert_eq!(p["page"], 6, "an offset inside a page is that page");
    }
}
