//! Checkpoints (ojs-durable-execution.md §4, §7): `PUT` (and the spec's `POST`), `GET`
//! and `DELETE /ojs/v1/jobs/{id}/checkpoint`.
//!
//! Who may save: any caller with the processing scope while the job is not terminal (the
//! conformance suite saves for jobs not yet fetched, and the Rust SDK names no worker);
//! a save that names `worker_id` and/or `attempt` is fenced like ACK: only the active
//! attempt it names may write (409 otherwise). `sequence`, when given, makes the save a
//! compare-and-set on the stored sequence (409 for a stale one).
//!
//! Answers: the save `{"checkpoint": {job_id, sequence, created_at}}` (§4.1) with the
//! same fields at the top level; GET `{"checkpoint": {...}}` (§4.3) with its fields also
//! at the top level, where the conformance suite and the Rust SDK read `state`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::put;
use axum::Router;
use ojs_core::checkpoint::{Checkpoint, CheckpointSave};
use ojs_core::{time, JobId, OjsError};
use serde_json::json;

use super::{reply, wrapped_and_bare};
use crate::error::ApiError;
use crate::extract::{BodyAndPath, JsonBody, PathParam};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route(
        "/ojs/v1/jobs/{id}/checkpoint",
        put(save_checkpoint)
            .post(save_checkpoint)
            .get(get_checkpoint)
            .delete(delete_checkpoint),
    )
}

/// `PUT`/`POST /ojs/v1/jobs/{id}/checkpoint` (§4.1): `{"state": any}`, optionally
/// `worker_id`, `attempt`, `sequence`.
async fn save_checkpoint(
    State(app): State<AppState>,
    BodyAndPath(JsonBody(body), id): BodyAndPath<JsonBody, JobId>,
) -> Result<Response, ApiError> {
    let save = CheckpointSave::from_body(&body)?;
    let saved = app
        .store
        .checkpoints()
        .save(&id, &save, time::now())
        .await?;
    let mut view = saved.view(&id);
    if let Some(o) = view.as_object_mut() {
        // The save's answer does not echo the state back (§4.1).
        o.remove("state");
    }
    Ok(reply(StatusCode::OK, wrapped_and_bare("checkpoint", view)))
}

/// `GET /ojs/v1/jobs/{id}/checkpoint` (§4.3): 404 when there is no job or no checkpoint.
async fn get_checkpoint(
    State(app): State<AppState>,
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    let job = super::stored_job(&app, &id).await?;
    let checkpoint: &Checkpoint = job.status.checkpoint.as_ref().ok_or_else(|| {
        OjsError::not_found(format!("job {id} has no checkpoint"))
            .with_detail("job_id", id.to_string())
    })?;
    Ok(reply(
        StatusCode::OK,
        wrapped_and_bare("checkpoint", checkpoint.view(&id)),
    ))
}

/// `DELETE /ojs/v1/jobs/{id}/checkpoint` (§4.4): 200 whether there was one or not
/// (idempotent); 404 only when there is no job.
async fn delete_checkpoint(
    State(app): State<AppState>,
    PathParam(id): PathParam<JobId>,
) -> Result<Response, ApiError> {
    app.store.checkpoints().delete(&id).await?;
    Ok(reply(
        StatusCode::OK,
        json!({"deleted": true, "job_id": id.to_string()}),
    ))
}
