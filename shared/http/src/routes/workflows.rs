//! Workflows: create, inspect, cancel.

use crate::entry_views;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use ojs_core::workflow::WorkflowSpec;
use ojs_core::{time, OjsError};
use ojs_store::StoreError;

use super::path_ids::WorkflowId;
use super::{reply, wrapped_and_bare};
use crate::error::ApiError;
use crate::extract::{JsonBody, PathParam};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/workflows", post(create_workflow))
        .route(
            "/ojs/v1/workflows/{id}",
            get(get_workflow).delete(cancel_workflow),
        )
}

/// A workflow's 409 when it has finished (its 404 is the store's own, naming it).
fn finished(id: &str) -> impl Fn(StoreError) -> ApiError + '_ {
    move |e| match e {
        StoreError::Conflict { .. } => ApiError(OjsError::conflict(format!(
            "workflow {id} has already finished"
        ))),
        other => other.into(),
    }
}

async fn create_workflow(
    State(app): State<AppState>,
    tenant: crate::extract::Tenant,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let mut spec = WorkflowSpec::from_json(body)?;
    spec.adopt_tenant(&tenant.0)?;
    super::schemas::check_workflow(&app, &spec).await?;
    let workflow = entry_views::workflow(&app.store.workflows().create(&spec, time::now()).await?);
    tracing::info!(workflow_id = %workflow["id"], kind = spec.kind.as_str(), steps = spec.steps.len(), "workflow created");
    Ok(reply(
        StatusCode::CREATED,
        wrapped_and_bare("workflow", workflow),
    ))
}

async fn get_workflow(
    State(app): State<AppState>,
    PathParam(WorkflowId(id)): PathParam<WorkflowId>,
) -> Result<Response, ApiError> {
    workflow_answer(&id, app.store.workflows().get(&id).await)
}

async fn cancel_workflow(
    State(app): State<AppState>,
    PathParam(WorkflowId(id)): PathParam<WorkflowId>,
) -> Result<Response, ApiError> {
    workflow_answer(&id, app.store.workflows().cancel(&id, time::now()).await)
}

/// The answer to a workflow read or cancelled: its view under `workflow` and at the top
/// level, as for one just created; the store's error otherwise, a finished one's 409.
fn workflow_answer(
    id: &str,
    outcome: Result<ojs_store::WorkflowRecord, StoreError>,
) -> Result<Response, ApiError> {
    let workflow = outcome.map_err(finished(id))?;
    Ok(reply(
        StatusCode::OK,
        wrapped_and_bare("workflow", entry_views::workflow(&workflow)),
    ))
}
