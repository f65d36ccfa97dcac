//! The schema registry (ojs-http-binding.md §15): list, register, get, delete. The
//! `:uri` path parameter is URL-encoded by the client and decoded here; a wildcard
//! segment also accepts URIs whose `/` were sent unencoded.

use crate::entry_views::{schema_summary, EntryView};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use ojs_core::schema_registry::{self, SchemaDoc};
use ojs_core::{time, ErrorCode, NewJob, OjsError};
use ojs_store::{SchemaPut, StoreError};
use serde_json::{json, Value};

use super::path_ids::{found, SchemaUri};
use super::queues::Paged;
use super::reply;
use crate::error::ApiError;
use crate::extract::{Caller, JsonBody, PathParam};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/schemas", get(list_schemas).post(register_schema))
        .route(
            "/ojs/v1/schemas/{*uri}",
            get(get_schema).delete(delete_schema),
        )
        // Served with the registry they show (the function that owns its partition).
        .merge(super::schema_versions::router())
}

async fn register_schema(
    State(app): State<AppState>,
    Caller(by): Caller,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let doc = SchemaDoc::from_json(body)?;
    let taken = |uri: &str| {
        OjsError::new(
            ErrorCode::Duplicate,
            format!(
                "schema {uri} is already registered with a different document; register it under a new URI (e.g. the next version)"
            ),
        )
        .with_detail("uri", uri)
    };
    match app
        .store
        .schemas()
        .put(&doc, by.as_deref(), time::now())
        .await
    {
        Ok(SchemaPut::Created(entry)) => {
            tracing::info!(uri = %doc.uri, "schema registered");
            Ok(answer(StatusCode::CREATED, schema_summary(&entry)))
        }
        Ok(SchemaPut::Unchanged(entry)) => Ok(answer(StatusCode::OK, schema_summary(&entry))),
        Ok(SchemaPut::Taken(_)) | Err(StoreError::Conflict { .. }) => {
            Err(ApiError(taken(&doc.uri)))
        }
        Err(e) => Err(e.into()),
    }
}

/// A schema's answer: `view` (its summary, or its whole view) under `schema`.
fn answer(status: StatusCode, view: Value) -> Response {
    reply(status, json!({ "schema": view }))
}

async fn list_schemas(State(app): State<AppState>, paged: Paged) -> Result<Response, ApiError> {
    let all = app.store.schemas().list().await?;
    Ok(paged.reply(&all, &["schemas"], schema_summary))
}

async fn get_schema(
    State(app): State<AppState>,
    PathParam(uri): PathParam<SchemaUri>,
) -> Result<Response, ApiError> {
    let entry = found(&uri, app.store.schemas().get(&uri.0).await?)?;
    Ok(answer(StatusCode::OK, entry.view()))
}

async fn delete_schema(
    State(app): State<AppState>,
    PathParam(uri): PathParam<SchemaUri>,
) -> Result<Response, ApiError> {
    let entry = app.store.schemas().delete(&uri.0).await?;
    tracing::info!(uri = %entry.doc.uri, "schema deleted");
    Ok(reply(
        StatusCode::OK,
        json!({ "deleted": true, "uri": entry.doc.uri }),
    ))
}

/// PUSH enforcement: when the job names a schema, loads it (one strongly consistent
/// GetItem, only for such jobs) and validates `args` against it. An unregistered schema
/// is rejected too: ojs-core.md requires args be validated "against the referenced
/// schema before enqueueing", which cannot happen without it.
///
/// A job naming no schema but carrying a `version` (ojs-job-versioning.md §5.2) is
/// checked against that version of its type in the versioned registry, when one is
/// registered (§6.2: one GetItem, only for versioned jobs); with none registered it is
/// accepted, as versioning works without a registry (§15.2). An unversioned job is not
/// checked against the type's latest version: it is "unversioned" (§15.4), and its
/// producer never said which version its args follow.
pub(crate) async fn check_args(app: &AppState, job: &NewJob) -> Result<(), ApiError> {
    let Some(uri) = job.spec.schema.as_deref() else {
        return check_version(app, job).await;
    };
    if !schema_registry::is_valid_uri(uri) {
        return Err(schema_registry::unregistered_error(uri).into());
    }
    let entry = app
        .store
        .schemas()
        .get(uri)
        .await?
        .ok_or_else(|| schema_registry::unregistered_error(uri))?;
    entry
        .doc
        .validate_args(&job.spec.args)
        .map_err(|violations| schema_registry::violation_error(uri, &violations))?;
    Ok(())
}

/// [`check_args`] of a job naming no schema: the registered schema of its `version`.
async fn check_version(app: &AppState, job: &NewJob) -> Result<(), ApiError> {
    let Some(version) = schema_registry::job_version(&job.spec.extensions) else {
        return Ok(());
    };
    let job_type = job.spec.job_type.as_str();
    let Some(uri) = schema_registry::versioned_uri(job_type, &version) else {
        return Ok(());
    };
    let Some(entry) = app.store.schemas().get(&uri).await? else {
        return Ok(());
    };
    if entry.doc.registry_version(job_type).is_none() {
        return Ok(());
    }
    entry
        .doc
        .validate_args(&job.spec.args)
        .map_err(|violations| schema_registry::violation_error(&uri, &violations))?;
    Ok(())
}

/// [`check_args`] for every job a workflow creates, each error under its step's path:
/// its steps now, its callbacks as they will be pushed. A workflow is created whole or
/// not at all, so a step whose args its schema refuses refuses the workflow.
pub(crate) async fn check_workflow(
    app: &AppState,
    spec: &ojs_core::workflow::WorkflowSpec,
) -> Result<(), ApiError> {
    for (i, step) in spec.steps.iter().enumerate() {
        under(check_args(app, &step.job).await, &format!("$.steps[{i}]"))?;
    }
    let c = &spec.callbacks;
    for (name, body) in [
        ("on_complete", &c.on_complete),
        ("on_success", &c.on_success),
        ("on_failure", &c.on_failure),
    ] {
        let Some(body) = body else { continue };
        let job = NewJob::from_json(serde_json::Value::Object(body.clone()))?;
        under(check_args(app, &job).await, &format!("$.callbacks.{name}"))?;
    }
    Ok(())
}

/// [`check_args`] for a cron template, once at registration: every occurrence pushes the
/// same args (a schema registered again later is not checked against them until then).
pub(crate) async fn check_template(
    app: &AppState,
    cron: &ojs_core::cron_job::CronJob,
) -> Result<(), ApiError> {
    let job = cron.job_for(&ojs_core::time::now())?;
    under(check_args(app, &job).await, "$.job_template")
}

/// A job's schema error as the error of the job at `path` in a larger request: its
/// message says where, its details (the schema's violations) stay as they are.
fn under(checked: Result<(), ApiError>, path: &str) -> Result<(), ApiError> {
    checked.map_err(|ApiError(e)| {
        let mut nested = OjsError::new(e.code, format!("{path}: {}", e.message));
        nested.details = e.details;
        ApiError(nested)
    })
}
