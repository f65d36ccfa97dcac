//! Job progress (ojs-progress.md): reported by the worker holding the job, in the spec's
//! form or the SDKs', and read by anyone who may see the job.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{post, put};
use axum::Router;
use ojs_core::progress::ProgressReport;
use ojs_core::{time, JobId};

use super::reply;
use crate::error::ApiError;
use crate::extract::{BodyAndPath, JsonBody, PathParam, Tenant};
use crate::AppState;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/workers/progress", post(report_progress))
        .route(
            "/ojs/v1/jobs/{id}/progress",
            put(put_progress).get(get_progress),
        )
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
    let job = app
        .store
        .workers()
        .report_progress(id, report, time::now())
        .await?;
    Ok(reply(StatusCode::OK, job.progress_view()))
}

/// `PUT /ojs/v1/jobs/{id}/progress` (ojs-progress.md §6.1): `progress` 0.0-1.0
/// (clamped), `message`, `data`; `worker_id`/`attempt` fence it like ACK when given.
async fn put_progress(
    State(app): State<AppState>,
    tenant: Tenant,
    BodyAndPath(JsonBody(body), id): BodyAndPath<JsonBody, JobId>,
) -> Result<Response, ApiError> {
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
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    let job = super::visible_job(&app, &tenant, &id).await?;
    let mut res = reply(StatusCode::OK, job.progress_view());
    res.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    Ok(res)
}
