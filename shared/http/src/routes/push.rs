//! Push endpoint registrations (ojs-serverless.md §2.1): register, list, get, delete.
//! The signing secret goes in and never comes out. An endpoint's address is checked when
//! it is registered (its host must resolve, and only to public addresses unless
//! `OJS_PUSH_ALLOW_PRIVATE=on`) and again at every delivery.

use crate::entry_views::EntryView;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use ojs_core::push::PushEndpoint;
use ojs_core::{time, ErrorCode, OjsError};
use serde_json::json;

use super::path_ids::{found, PushEndpointId};
use super::reply;
use crate::error::ApiError;
use crate::extract::{Caller, JsonBody, PathParam};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/ojs/v1/push/endpoints",
            get(list_push_endpoints).post(register_push_endpoint),
        )
        .route(
            "/ojs/v1/push/endpoints/{id}",
            get(get_push_endpoint).delete(delete_push_endpoint),
        )
}

async fn register_push_endpoint(
    State(app): State<AppState>,
    Caller(by): Caller,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let allow_private = app.config.push_allow_private;
    let endpoint = PushEndpoint::from_json(&body, allow_private)?;
    ojs_push::guard::check_target(endpoint.target.as_str(), allow_private)
        .await
        .map_err(|why| {
            ApiError(OjsError::new(ErrorCode::ValidationError, why).with_path("$.endpoint"))
        })?;
    let entry = app
        .store
        .push_endpoints()
        .put(&endpoint, by.as_deref(), time::now())
        .await?;
    tracing::info!(id = %entry.id, "push endpoint registered");
    Ok(reply(
        StatusCode::CREATED,
        json!({ "endpoint": entry.view() }),
    ))
}

async fn list_push_endpoints(State(app): State<AppState>) -> Result<Response, ApiError> {
    let all = app.store.push_endpoints().list().await?;
    let endpoints = super::views(&all, EntryView::view);
    Ok(reply(StatusCode::OK, json!({ "endpoints": endpoints })))
}

async fn get_push_endpoint(
    State(app): State<AppState>,
    PathParam(id): PathParam<PushEndpointId>,
) -> Result<Response, ApiError> {
    let entry = found(&id, app.store.push_endpoints().get(&id.0).await?)?;
    Ok(reply(StatusCode::OK, json!({ "endpoint": entry.view() })))
}

async fn delete_push_endpoint(
    State(app): State<AppState>,
    PathParam(id): PathParam<PushEndpointId>,
) -> Result<Response, ApiError> {
    let entry = app.store.push_endpoints().delete(&id.0).await?;
    tracing::info!(id = %entry.id, "push endpoint deleted");
    Ok(reply(
        StatusCode::OK,
        json!({ "deleted": true, "id": entry.id }),
    ))
}
