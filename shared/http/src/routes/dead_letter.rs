//! The dead letter queue: list, retry, delete.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Router};
use ojs_core::{time, Job, JobId, QueueName};
use serde::Deserialize;
use serde_json::json;

use super::queues::Page;
use super::reply;
use crate::error::ApiError;
use crate::extract::Tenant;
use crate::negotiate::Format;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/dead-letter", get(list_dead_letter))
        .route("/ojs/v1/dead-letter/{id}/retry", post(retry_dead_letter))
        .route("/ojs/v1/dead-letter/{id}", delete(delete_dead_letter))
}

#[derive(Debug, Deserialize)]
struct DeadLetterParams {
    queue: Option<String>,
    #[serde(flatten)]
    page: Page,
}

/// `GET /ojs/v1/dead-letter`: the dead-lettered jobs of the request's tenant (all of
/// them for a request naming none).
async fn list_dead_letter(
    State(app): State<AppState>,
    tenant: Tenant,
    format: Option<Extension<Format>>,
    Query(p): Query<DeadLetterParams>,
) -> Result<Response, ApiError> {
    let (limit, offset) = p.page.parse()?;
    let queue = p
        .queue
        .as_deref()
        .filter(|q| !q.is_empty())
        .map(QueueName::parse)
        .transpose()?;
    let page = app
        .store
        .dead_letter()
        .list(queue.as_ref(), &tenant.0, limit, offset)
        .await?;
    // Whole envelopes: the args and meta of those that keep them in the payload bucket
    // are brought back (one that cannot be read is shown incomplete, and says so).
    let jobs = app.store.engine().shown_jobs(page.jobs).await;
    let format = format.map_or(Format::Json, |Extension(f)| f);
    let jobs = crate::views::bounded_views(&jobs, app.store.engine().answer_bound().bytes, format);
    // The total is counted from the index before the page is read, and the index may lag:
    // a short page ends the list, and a full one never reports fewer than it listed.
    let listed = offset.saturating_add(jobs.len());
    let total = if jobs.len() < limit {
        listed
    } else {
        page.total.max(listed)
    };
    Ok(reply(
        StatusCode::OK,
        json!({
            "jobs": jobs,
            "pagination": {"total": total, "limit": limit, "offset": offset, "has_more": offset.saturating_add(jobs.len()) < total},
        }),
    ))
}

/// Retries the dead-lettered job a path names (a 404 when it is not in the dead letter
/// queue, or is another tenant's), for this group's endpoint and the admin API's, which
/// answer it each in its own shape.
pub(crate) async fn retry(app: &AppState, tenant: &Tenant, id: &str) -> Result<Job, ApiError> {
    let id = JobId::parse(id)?;
    super::tenant_owns(app, tenant, &id).await?;
    Ok(app.store.dead_letter().retry(&id, time::now()).await?)
}

async fn retry_dead_letter(
    State(app): State<AppState>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = retry(&app, &tenant, &id).await?;
    Ok(reply(StatusCode::OK, super::job_and_bare_job(&job)))
}

/// `DELETE /ojs/v1/dead-letter/{id}`: `200` with `{deleted, job_id}`, as the HTTP
/// binding's endpoint table gives it.
pub(crate) async fn delete_dead_letter(
    State(app): State<AppState>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = discard(&app, &tenant, &id).await?;
    Ok(reply(
        StatusCode::OK,
        json!({ "deleted": true, "job_id": id.to_string() }),
    ))
}

/// The admin API's `DELETE /ojs/v1/admin/dead-letter/{id}`: `204 No Content` (the
/// dead letter suite's EXT-DLQ-004; ojs-admin-api.md gives no body, and the dashboard's
/// `deleteDeadLetter` reads none).
pub(crate) async fn delete_dead_letter_admin(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    discard(&app, &Tenant(ojs_core::tenant::Scope::Any), &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Deletes dead letter job `id` (one transaction of the job and its entry), when
/// `tenant` sees it.
async fn discard(app: &AppState, tenant: &Tenant, id: &str) -> Result<JobId, ApiError> {
    let id = JobId::parse(id)?;
    super::tenant_owns(app, tenant, &id).await?;
    app.store.dead_letter().delete(&id).await?;
    Ok(id)
}
