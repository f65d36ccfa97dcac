//! Cron registrations: register, list, remove.

use crate::entry_views::EntryView;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{delete, get};
use axum::Router;
use ojs_core::cron_job::CronJob;
use ojs_core::time;
use serde_json::{json, Map, Value};

use super::path_ids::CronName;
use super::queues::Paged;
use super::reply;
use crate::dialect::Dialect;
use crate::error::ApiError;
use crate::extract::{Caller, JsonBody, PathParam};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/cron", get(list_crons).post(register_cron))
        .route("/ojs/v1/cron/{name}", delete(delete_cron))
}

async fn register_cron(
    State(app): State<AppState>,
    dialect: Dialect,
    Caller(by): Caller,
    tenant: crate::extract::Tenant,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let mut cron = CronJob::from_json(body)?;
    cron.adopt_tenant(&tenant.0)?;
    cron.check_new()?;
    super::schemas::check_template(&app, &cron).await?;
    let (entry, created) = app
        .store
        .cron()
        .put(&cron, by.as_deref(), time::now())
        .await?;
    tracing::info!(cron = %cron.name, created, "cron registered");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let entry = entry.view();
    // The binding (§13.2) wraps the registration in `cron_job` and the SDKs read its fields
    // bare, where `cron` is the expression; the OpenAPI document wraps it in `cron`.
    let mut body = match dialect {
        Dialect::Binding => entry.as_object().cloned().unwrap_or_default(),
        Dialect::OpenApi => Map::from_iter([("cron".to_owned(), entry.clone())]),
    };
    body.insert("cron_job".into(), entry);
    Ok(reply(status, Value::Object(body)))
}

async fn list_crons(State(app): State<AppState>, paged: Paged) -> Result<Response, ApiError> {
    let all = app.store.cron().list().await?;
    Ok(paged.reply(&all, &["crons", "cron_jobs"], EntryView::view))
}

async fn delete_cron(
    State(app): State<AppState>,
    PathParam(CronName(name)): PathParam<CronName>,
) -> Result<Response, ApiError> {
    let entry = app.store.cron().delete(&name).await?;
    let entry = entry.view();
    Ok(reply(
        StatusCode::OK,
        json!({ "deleted": true, "name": name, "cron": entry, "cron_job": entry }),
    ))
}
