//! PUSH, INFO and CANCEL.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use ojs_core::{time, Job, JobId, NewJob, OjsError};
use serde_json::json;

use super::reply;
use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/jobs", post(enqueue_job))
        .route("/ojs/v1/jobs/{id}", get(get_job).delete(cancel_job))
}

async fn enqueue_job(
    State(app): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let new = NewJob::from_json(body)?;
    let job = Job::enqueue(new, time::now());
    app.store.put_job(&job).await?;
    tracing::info!(job_id = %job.id, queue = %job.spec.queue, "job pushed");
    let mut res = reply(StatusCode::CREATED, json!({ "job": job.to_json() }));
    if let Ok(loc) = HeaderValue::from_str(&format!("/ojs/v1/jobs/{}", job.id)) {
        res.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(res)
}

async fn get_job(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = JobId::parse(&id)?;
    let job = app
        .store
        .get_job_settled(&id, time::now())
        .await?
        .ok_or_else(|| OjsError::not_found(format!("job {id} not found")))?;
    Ok(reply(StatusCode::OK, json!({ "job": job.to_json() })))
}

async fn cancel_job(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = JobId::parse(&id)?;
    let job = app.store.cancel_job(&id, time::now()).await?;
    tracing::info!(job_id = %job.id, "job cancelled");
    Ok(reply(StatusCode::OK, json!({ "job": job.to_json() })))
}
