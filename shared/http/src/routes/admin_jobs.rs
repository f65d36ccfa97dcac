//! Admin job endpoints (ojs-admin-api.md §7, §8, §11, §6.5): listing, detail, retry,
//! cancel, bulk actions, dead letter management and purges. Where jobs are found (and
//! what that costs) is in `ojs_store::admin` and docs/performance.md.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::time::{self, Timestamp};
use ojs_core::{ErrorCode, Job, JobId, JobState, OjsError, QueueName};
use ojs_store::{StoreError, MAX_LISTED};
use serde::Deserialize;
use serde_json::{json, Value};

use super::admin_query::{detail, older, summary, Filter, Paging, RawFilter, RawPaging};
use super::reply;
use crate::error::ApiError;
use crate::extract::{BodyAndPath, FromHead, JsonBody, ListingTenant, PathParam, Tenant};
use crate::AppState;

/// States a listing without a state filter looks in.
const LISTED_STATES: [JobState; 7] = [
    JobState::Available,
    JobState::Scheduled,
    JobState::Retryable,
    JobState::Active,
    JobState::Completed,
    JobState::Cancelled,
    JobState::Discarded,
];

/// Most jobs one bulk action or purge touches; a larger set takes several calls.
const MAX_BULK: usize = MAX_LISTED;

#[derive(Debug, Deserialize)]
pub(crate) struct ListParams {
    #[serde(flatten)]
    filter: RawFilter,
    #[serde(flatten)]
    paging: RawPaging,
}

impl ListParams {
    /// The filter and page; the filter's tenant is the `tenant` parameter within the
    /// request's tenant (a key bound to a tenant lists its own tenant's jobs alone).
    fn parse(&self, listing: &ListingTenant) -> Result<(Filter, Paging), ApiError> {
        let mut filter = self.filter.parse("$")?;
        filter.tenant = listing.scope(self.filter.tenant.as_deref(), "$.tenant")?;
        Ok((filter, self.paging.parse()?))
    }
}

/// A job listing's filter and page, as its query asks within the request's tenant
/// ([`ListParams::parse`]), checked before anything is read.
pub(crate) struct JobListing {
    filter: Filter,
    paging: Paging,
}

crate::extract::from_head!(JobListing);

impl FromHead for JobListing {
    type Rejection = Response;

    fn from_head(parts: &axum::http::request::Parts) -> Result<Self, Response> {
        use axum::response::IntoResponse;
        let tenant = ListingTenant::from_head(parts).map_err(IntoResponse::into_response)?;
        let Query(p) =
            Query::<ListParams>::try_from_uri(&parts.uri).map_err(IntoResponse::into_response)?;
        let (filter, paging) = p.parse(&tenant).map_err(IntoResponse::into_response)?;
        Ok(Self { filter, paging })
    }
}

/// Ids of the jobs in `states` of the filter's queue (or every queue), without repeats.
async fn find_ids(
    app: &AppState,
    filter: &Filter,
    states: &[JobState],
) -> Result<Vec<JobId>, ApiError> {
    let queues: Vec<QueueName> = match &filter.queue {
        Some(q) => vec![q.clone()],
        None => app
            .store
            .engine()
            .list_queues()
            .await?
            .into_iter()
            .filter_map(|q| QueueName::parse(&q.name).ok())
            .collect(),
    };
    let mut ids = Vec::new();
    for q in &queues {
        for s in states {
            ids.extend(app.store.admin().admin_job_ids(q, *s, MAX_LISTED).await?);
        }
    }
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// The jobs matching `filter` in `states` (read by id; those that moved out of the filter
/// since the index or event was read are left out).
async fn find_jobs(
    app: &AppState,
    filter: &Filter,
    states: &[JobState],
) -> Result<Vec<Job>, ApiError> {
    let ids = find_ids(app, filter, states).await?;
    let mut jobs = app.store.admin().get_jobs(&ids).await?;
    jobs.retain(|j| filter.matches(j) && states.contains(&j.status.state));
    Ok(jobs)
}

fn states_of(filter: &Filter, default: &[JobState]) -> Vec<JobState> {
    filter.state.map_or_else(|| default.to_vec(), |s| vec![s])
}

/// `GET /ojs/v1/admin/jobs`.
pub(crate) async fn list_jobs(
    State(app): State<AppState>,
    jobs: JobListing,
) -> Result<Response, ApiError> {
    listing(&app, &jobs.filter, &jobs.paging).await
}

/// `GET /ojs/v1/admin/tenants/{id}/jobs` (the dashboard's tenant page): the job listing
/// of one tenant (`_default`: the jobs of none), with the same query parameters; the
/// path's tenant stands over a `tenant` parameter (a key bound to another tenant: 403).
pub(crate) async fn list_tenant_jobs(
    State(app): State<AppState>,
    tenant: ListingTenant,
    Path(id): Path<String>,
    Query(p): Query<ListParams>,
) -> Result<Response, ApiError> {
    let (mut filter, paging) = p.parse(&tenant)?;
    filter.tenant = tenant.scope(Some(&id), "$.id")?;
    listing(&app, &filter, &paging).await
}

async fn listing(app: &AppState, filter: &Filter, paging: &Paging) -> Result<Response, ApiError> {
    let states = states_of(filter, &LISTED_STATES);
    let (items, total) = if filter.needs_jobs() || paging.needs_jobs() {
        let mut jobs = find_jobs(app, filter, &states).await?;
        paging.page_of(&mut jobs, summary)
    } else {
        let mut ids = find_ids(app, filter, &states).await?;
        paging.sort_ids(&mut ids);
        let total = ids.len();
        let page: Vec<JobId> = ids
            .into_iter()
            .skip(paging.offset())
            .take(paging.per_page)
            .collect();
        let mut jobs = app.store.admin().get_jobs(&page).await?;
        // A job that moved since its index entry or event was read is left out.
        jobs.retain(|j| filter.matches(j) && states.contains(&j.status.state));
        (jobs.iter().map(summary).collect(), total)
    };
    Ok(reply(StatusCode::OK, paging.listing(items, total)))
}

/// `GET /ojs/v1/admin/jobs/{id}`: the job whole, or, when its payload cannot be read,
/// shown incomplete and saying so (an operator looks at such a job too). Another
/// tenant's job is 404 to a request acting for one tenant (a key bound to it).
pub(crate) async fn get_job(
    State(app): State<AppState>,
    tenant: Tenant,
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    let job = super::visible_job(&app, &tenant, &id).await?;
    let job = app.store.engine().shown_job(job).await;
    Ok(reply(StatusCode::OK, detail(&job)))
}

/// `PATCH /ojs/v1/admin/jobs/{id}`: changing a stored job's priority is not offered (the
/// priority is part of the ready and due index keys of a job that may be claimed at the
/// same moment); answered with the OJS `unsupported` error.
pub(crate) async fn patch_job(
    State(app): State<AppState>,
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    super::stored_job(&app, &id).await?;
    Err(OjsError::new(
        ErrorCode::Unsupported,
        "changing the priority of an enqueued job is not supported; cancel it and push it again",
    )
    .into())
}

/// `POST /ojs/v1/admin/jobs/{id}/retry`.
pub(crate) async fn retry_job(
    State(app): State<AppState>,
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    let job = app.store.admin().admin_retry_job(&id, time::now()).await?;
    tracing::info!(job_id = %id, "job retried by an operator");
    Ok(reply(StatusCode::OK, detail(&job)))
}

/// `POST /ojs/v1/admin/jobs/{id}/cancel`.
pub(crate) async fn cancel_job(
    State(app): State<AppState>,
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    let job = app.store.lifecycle().cancel_job(&id, time::now()).await?;
    Ok(reply(StatusCode::OK, detail(&job)))
}

/// A bulk body: `{"filter": {...}, "confirm": true}`.
#[derive(Debug, Deserialize)]
struct BulkBody {
    #[serde(default)]
    filter: RawFilter,
}

/// Parses a destructive request's body, refusing it without `confirm: true` (§4.4).
fn confirmed<T: serde::de::DeserializeOwned>(body: Value) -> Result<T, ApiError> {
    if body.get("confirm").and_then(Value::as_bool) != Some(true) {
        return Err(OjsError::invalid_request(
            "this operation changes many jobs: send \"confirm\": true to carry it out",
        )
        .with_path("$.confirm")
        .into());
    }
    serde_json::from_value(body).map_err(|e| {
        OjsError::invalid_request(format!(
            "the request body does not have the documented shape: {e}"
        ))
        .into()
    })
}

/// A bulk body's filter; the body is refused without `confirm: true`.
fn bulk_filter(body: Value) -> Result<Filter, ApiError> {
    let body: BulkBody = confirmed(body)?;
    body.filter.parse("$.filter").map_err(ApiError)
}

/// What a bulk action did (§8.1).
#[derive(Debug, Default)]
struct BulkReport {
    matched: usize,
    succeeded: usize,
    errors: Vec<Value>,
}

impl BulkReport {
    fn record(&mut self, id: &JobId, outcome: Result<(), StoreError>) {
        match outcome {
            Ok(()) => self.succeeded += 1,
            Err(e) => {
                let message = ApiError::from(e).0.message;
                self.errors
                    .push(json!({"job_id": id.to_string(), "error": message}));
            }
        }
    }

    fn body(&self, action: &str) -> Value {
        json!({
            "action": action,
            "matched": self.matched,
            "succeeded": self.succeeded,
            "failed": self.errors.len(),
            "errors": self.errors,
        })
    }
}

/// Carries out `action` on each job; returns the report.
async fn apply(app: &AppState, action: &str, jobs: &[Job]) -> BulkReport {
    let mut report = BulkReport {
        matched: jobs.len(),
        ..Default::default()
    };
    let now = time::now();
    let (admin, lifecycle) = (app.store.admin(), app.store.lifecycle());
    for job in jobs {
        let outcome = match action {
            "retry" => admin.admin_retry_job(&job.id, now).await.map(drop),
            "cancel" => lifecycle.cancel_job(&job.id, now).await.map(drop),
            _ => admin.admin_delete_job(&job.id).await,
        };
        report.record(&job.id, outcome);
    }
    report
}

/// `POST /ojs/v1/admin/jobs/bulk/{action}`: retry (discarded and cancelled jobs), cancel
/// (jobs not finished) or delete (finished jobs) every job the filter matches, up to
/// [`MAX_BULK`] a call.
pub(crate) async fn bulk_jobs(
    State(app): State<AppState>,
    Path(action): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let allowed: &[JobState] = match action.as_str() {
        "retry" => &[JobState::Discarded, JobState::Cancelled],
        "cancel" => &[
            JobState::Available,
            JobState::Scheduled,
            JobState::Retryable,
            JobState::Active,
        ],
        "delete" => &[
            JobState::Completed,
            JobState::Cancelled,
            JobState::Discarded,
        ],
        other => {
            return Err(OjsError::not_found(format!(
                "no bulk action {other:?}; use retry, cancel or delete"
            ))
            .into())
        }
    };
    let filter = bulk_filter(body)?;
    if let Some(s) = filter.state.filter(|s| !allowed.contains(s)) {
        return Err(OjsError::invalid_request(format!(
            "bulk {action} applies to jobs that are {}; not to {s} jobs",
            allowed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .with_path("$.filter.state")
        .into());
    }
    let mut jobs = find_jobs(&app, &filter, &states_of(&filter, allowed)).await?;
    jobs.truncate(MAX_BULK);
    let report = apply(&app, &action, &jobs).await;
    tracing::info!(
        action,
        matched = report.matched,
        succeeded = report.succeeded,
        "bulk action"
    );
    Ok(reply(StatusCode::OK, report.body(&action)))
}

/// `GET /ojs/v1/admin/dead-letter` (§11.1): dead-lettered jobs, filterable by queue,
/// type and tenant, paginated as the job listing.
pub(crate) async fn list_dead_letter(
    State(app): State<AppState>,
    JobListing { filter, paging }: JobListing,
) -> Result<Response, ApiError> {
    let (items, total) = if filter.needs_jobs() || paging.needs_jobs() {
        let mut jobs = dead_jobs(&app, &filter).await?;
        paging.page_of(&mut jobs, dead_view)
    } else {
        let page = app
            .store
            .dead_letter()
            .list(
                filter.queue.as_ref(),
                &ojs_core::tenant::Scope::Any,
                paging.per_page,
                paging.offset(),
            )
            .await?;
        let mut jobs = page.jobs;
        paging.sort(&mut jobs);
        let listed = paging.offset() + jobs.len();
        (jobs.iter().map(dead_view).collect(), page.total.max(listed))
    };
    let items = within_answer_bound(items, app.store.engine().answer_bound().bytes);
    Ok(reply(StatusCode::OK, paging.listing(items, total)))
}

/// A page of dead letter entries within `bound` bytes: a job keeps up to 20 errors of
/// 6 KiB each, so a page of 100 could pass Lambda's 6 MB answer. Entries keep their
/// history while the rest fit without theirs; the others show their last `error` and
/// how many were left out (`errors_omitted`; the job's detail shows them all).
fn within_answer_bound(items: Vec<Value>, bound: usize) -> Vec<Value> {
    let sized = items
        .into_iter()
        .map(|v| {
            let bytes = crate::views::json_bytes(&v);
            (v, bytes)
        })
        .collect();
    crate::views::fit(sized, bound, crate::views::json_bytes, |v| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            let errors = o.insert("errors".into(), Value::Array(Vec::new()));
            o.insert(
                "errors_omitted".into(),
                errors
                    .as_ref()
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
                    .into(),
            );
        }
        v
    })
}

/// A dead letter entry: the job summary with its last error and discard time.
fn dead_view(job: &Job) -> Value {
    let mut v = summary(job);
    let d = detail(job);
    v["errors"] = d["errors"].clone();
    v["error"] = d.get("error").cloned().unwrap_or(Value::Null);
    v
}

/// Every dead-lettered job (up to [`MAX_LISTED`]) passing `filter`.
async fn dead_jobs(app: &AppState, filter: &Filter) -> Result<Vec<Job>, ApiError> {
    let page = app
        .store
        .dead_letter()
        .list(filter.queue.as_ref(), &filter.tenant, MAX_LISTED, 0)
        .await?;
    Ok(page
        .jobs
        .into_iter()
        .filter(|j| filter.matches(j))
        .collect())
}

/// `GET /ojs/v1/admin/dead-letter/stats`.
pub(crate) async fn dead_letter_stats(State(app): State<AppState>) -> Result<Response, ApiError> {
    let st = app.store.admin().dead_letter_stats().await?;
    Ok(reply(
        StatusCode::OK,
        json!({
            "total": st.total,
            "by_queue": st.by_queue,
            "oldest_at": st.oldest_at,
            "newest_at": st.newest_at,
        }),
    ))
}

/// `POST /ojs/v1/admin/dead-letter/{id}/retry` (§11.2).
pub(crate) async fn retry_dead_letter(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = super::dead_letter::retry(
        &app,
        &crate::extract::Tenant(ojs_core::tenant::Scope::Any),
        &id,
    )
    .await?;
    Ok(reply(StatusCode::OK, detail(&job)))
}

/// `POST /ojs/v1/admin/dead-letter/retry`: retries every dead-lettered job the filter
/// matches (`{"filter": {...}, "confirm": true}`).
pub(crate) async fn bulk_retry_dead_letter(
    State(app): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let filter = bulk_filter(body)?;
    let jobs = dead_jobs(&app, &filter).await?;
    let report = apply(&app, "retry", &jobs).await;
    Ok(reply(StatusCode::OK, report.body("retry")))
}

#[derive(Debug, Deserialize)]
struct PurgeBody {
    states: Option<Vec<String>>,
    older_than: Option<String>,
}

impl PurgeBody {
    /// The time only jobs finished before are purged, when `older_than` gives one.
    fn before(&self) -> Result<Option<Timestamp>, OjsError> {
        self.older_than
            .as_deref()
            .map(|raw| time::parse(raw, "$.older_than"))
            .transpose()
    }
}

/// `DELETE /ojs/v1/admin/dead-letter` (§11.3): deletes dead-lettered jobs discarded
/// before `older_than` (all when absent).
pub(crate) async fn purge_dead_letter(
    State(app): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body: PurgeBody = confirmed(body)?;
    let before = body.before()?;
    let jobs = dead_jobs(&app, &Filter::default()).await?;
    let mut purged = 0usize;
    for job in jobs {
        if before.is_some_and(|b| !older(job.status.discarded_at, b)) {
            continue;
        }
        match app.store.dead_letter().delete(&job.id).await {
            Ok(()) | Err(StoreError::NotFound(_)) => purged += 1,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(reply(StatusCode::OK, json!({"purged_count": purged})))
}

/// `DELETE /ojs/v1/admin/queues/{name}/jobs` (§6.5): deletes the queue's finished jobs in
/// `states` (completed, cancelled, discarded), optionally only those finished before
/// `older_than`.
pub(crate) async fn purge_queue(
    State(app): State<AppState>,
    BodyAndPath(JsonBody(body), queue): BodyAndPath<JsonBody, QueueName>,
) -> Result<Response, ApiError> {
    let mut body: PurgeBody = confirmed(body)?;
    let names = body.states.take().unwrap_or_default();
    if names.is_empty() {
        return Err(
            OjsError::invalid_request("states must list the states to purge")
                .with_path("$.states")
                .into(),
        );
    }
    let mut states = Vec::new();
    for (i, n) in names.iter().enumerate() {
        match n.parse::<JobState>() {
            Ok(s) if s.is_terminal() => states.push(s),
            _ => {
                return Err(OjsError::invalid_request(format!(
                    "only finished jobs can be purged (completed, cancelled, discarded); got {n:?}"
                ))
                .with_path(&format!("$.states[{i}]"))
                .into())
            }
        }
    }
    let before = body.before()?;
    let filter = Filter {
        queue: Some(queue.clone()),
        ..Default::default()
    };
    let mut jobs = find_jobs(&app, &filter, &states).await?;
    jobs.truncate(MAX_BULK);
    let mut purged = 0usize;
    for job in jobs {
        let s = &job.status;
        let finished = s.completed_at.or(s.cancelled_at).or(s.discarded_at);
        if before.is_some_and(|b| !older(finished, b)) {
            continue;
        }
        match app.store.admin().admin_delete_job(&job.id).await {
            Ok(()) | Err(StoreError::NotFound(_)) => purged += 1,
            // Retried or changed meanwhile: not purged.
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    tracing::info!(queue = %queue, purged, "queue purged");
    Ok(reply(
        StatusCode::OK,
        json!({"purged_count": purged, "states": names}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: usize, errors: usize) -> Value {
        let error = json!({"type": "boom", "message": "x".repeat(6_000)});
        json!({"id": id, "errors": vec![error.clone(); errors], "error": error})
    }

    #[test]
    fn a_dead_letter_page_leaves_out_error_histories_past_the_bound() {
        // 20 errors of 6 KB: about 120 KB an entry.
        let page: Vec<Value> = (0..5).map(|i| entry(i, 20)).collect();
        let whole = crate::views::json_bytes(&page[0]);
        assert!(whole > 120_000, "{whole}");
        let all = within_answer_bound(page.clone(), 5 * whole);
        assert_eq!(all, page, "a page that fits is whole");

        let bound = 2 * whole + 3 * 7_000;
        let out = within_answer_bound(page.clone(), bound);
        assert_eq!(out.len(), 5);
        let kept: Vec<usize> = out
            .iter()
            .map(|v| v["errors"].as_array().map_or(0, Vec::len))
            .collect();
        assert_eq!(kept, [20, 20, 0, 0, 0], "whole first, in order");
        assert!(out.iter().map(crate::views::json_bytes).sum::<usize>() <= bound);
        assert_eq!(out[4]["errors_omitted"], 20);
        assert_eq!(out[4]["error"], page[4]["error"], "the last error stays");
        assert_eq!(out[4]["id"], 4);
        assert!(out[0].get("errors_omitted").is_none());
    }
}
