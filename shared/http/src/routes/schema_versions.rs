//! The versioned schema registry (ojs-job-versioning.md §6.1, §11; ojs-schema-registry.md
//! §4): `PUT`/`GET`/`DELETE /ojs/v1/admin/schemas/{type}/{version}`, the versions of a type
//! (`…/{type}/versions`) and its latest (`GET …/{type}`, in `admin.rs`). Admin-only.
//!
//! It is the registry of `/ojs/v1/schemas` seen by type and version: version `v` of type
//! `t` is the registration under URI `urn:ojs:schema:t:v{v}` (the form ojs-core.md
//! recommends), so a schema registered either way is the one both show and PUSH checks.

use crate::entry_views::EntryView;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ojs_core::schema_registry::{self, SchemaDoc};
use ojs_core::{time, ErrorCode, JobType, OjsError};
use ojs_store::{SchemaEntry, SchemaPut, StoreError};
use serde_json::{json, Value};

use super::path_ids::{found, PathId};
use super::reply;
use crate::error::ApiError;
use crate::extract::{Caller, JsonBody};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/ojs/v1/admin/schemas/{type}/versions",
            get(list_schema_versions),
        )
        .route(
            "/ojs/v1/admin/schemas/{type}/{version}",
            get(get_schema_version)
                .put(register_schema_version)
                .delete(delete_schema_version),
        )
}

fn no_version(job_type: &str, version: &str) -> ApiError {
    ApiError(
        OjsError::not_found(format!(
            "no schema registered for {job_type:.255} version {version:.64}"
        ))
        .with_detail("type", job_type)
        .with_detail("version", version),
    )
}

/// The 404 of a type with no version registered.
pub(crate) fn no_versions(job_type: &str) -> ApiError {
    ApiError(
        OjsError::not_found(format!("no schema registered for {job_type:.255}"))
            .with_detail("type", job_type),
    )
}

/// The `(type, version)` a path names, with the URI it is registered under; their 404
/// when either is not one a schema can be registered under (then it names nothing and is
/// not looked up).
struct VersionKey {
    job_type: String,
    version: String,
    uri: String,
}

impl<S: Send + Sync> FromRequestParts<S> for VersionKey {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Path((job_type, version)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let uri = || {
            let parsed_type = JobType::parse(&job_type).ok()?;
            let parsed_version = schema_registry::parse_version(&version).ok()?;
            schema_registry::versioned_uri(parsed_type.as_str(), &parsed_version)
        };
        match uri() {
            Some(uri) => Ok(Self {
                job_type,
                version,
                uri,
            }),
            None => Err(no_version(&job_type, &version).into_response()),
        }
    }
}

impl PathId for VersionKey {
    fn missing(&self) -> ApiError {
        no_version(&self.job_type, &self.version)
    }
}

/// A version as the versioned registry shows it: the registration with its document.
pub(crate) fn version_view(e: &SchemaEntry) -> Value {
    e.view()
}

/// `PUT /ojs/v1/admin/schemas/{type}/{version}`: registers version `version` of `type`
/// (one conditional PutItem). A version is registered once: the same registration again
/// answers 200, another document under a taken version 409 (ojs-schema-registry.md §4.1,
/// SR-006); a new version is a new path.
async fn register_schema_version(
    State(app): State<AppState>,
    Caller(by): Caller,
    Path((job_type, version)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let job_type = JobType::parse(&job_type)?;
    let version = schema_registry::parse_version(&version)?;
    let doc = SchemaDoc::versioned(&job_type, version, body)?;
    match app.store.schemas().put(&doc, by.as_deref(), time::now()).await {
        Ok(SchemaPut::Created(entry)) => {
            tracing::info!(uri = %doc.uri, "schema version registered");
            Ok(reply(StatusCode::CREATED, version_view(&entry)))
        }
        Ok(SchemaPut::Unchanged(entry)) => Ok(reply(StatusCode::OK, version_view(&entry))),
        Ok(SchemaPut::Taken(_)) | Err(StoreError::Conflict { .. }) => Err(ApiError(
            OjsError::new(
                ErrorCode::Duplicate,
                format!(
                    "{job_type} already has a schema registered as this version with a different document; register the new one as a new version"
                ),
            )
            .with_detail("type", job_type.as_str())
            .with_detail("uri", doc.uri.as_str()),
        )),
        Err(e) => Err(e.into()),
    }
}

/// `GET /ojs/v1/admin/schemas/{type}/{version}` (one strongly consistent GetItem).
async fn get_schema_version(
    State(app): State<AppState>,
    key: VersionKey,
) -> Result<Response, ApiError> {
    let entry = app.store.schemas().get(&key.uri).await?;
    let entry = entry.filter(|e| e.doc.registry_version(&key.job_type).is_some());
    Ok(reply(StatusCode::OK, version_view(&found(&key, entry)?)))
}

/// `DELETE /ojs/v1/admin/schemas/{type}/{version}` (one DeleteItem returning the old
/// item). The type's latest version is then the highest one left.
async fn delete_schema_version(
    State(app): State<AppState>,
    key: VersionKey,
) -> Result<Response, ApiError> {
    let entry = app
        .store
        .schemas()
        .delete(&key.uri)
        .await
        .map_err(super::not_found_as(|| key.missing()))?;
    tracing::info!(uri = %entry.doc.uri, "schema version deleted");
    Ok(reply(
        StatusCode::OK,
        json!({
            "deleted": true,
            "type": key.job_type,
            "version": entry.doc.version,
            "uri": entry.doc.uri,
        }),
    ))
}

/// `GET /ojs/v1/admin/schemas/{type}/versions`: every version of `type`, highest first
/// (ojs-schema-registry.md §4.3), or 404 when it has none (as its latest answers).
async fn list_schema_versions(
    State(app): State<AppState>,
    Path(job_type): Path<String>,
) -> Result<Response, ApiError> {
    if JobType::parse(&job_type).is_err() {
        return Err(no_versions(&job_type));
    }
    let versions = app.store.schemas().list_versions(&job_type).await?;
    if versions.is_empty() {
        return Err(no_versions(&job_type));
    }
    let listed: Vec<Value> = versions
        .iter()
        .enumerate()
        .map(|(i, e)| {
            json!({
                "version": e.doc.version,
                "uri": e.doc.uri,
                "description": e.doc.description,
                "created_at": e.created_at,
                "created_by": e.created_by,
                "is_latest": i == 0,
            })
        })
        .collect();
    Ok(reply(
        StatusCode::OK,
        json!({ "type": job_type, "versions": listed }),
    ))
}
