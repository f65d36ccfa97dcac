//! One module per endpoint group.

pub(crate) mod admin;
mod admin_jobs;
mod admin_query;
mod admin_stats;
mod admin_tenants;
mod checkpoints;
pub(crate) mod cloudq;
pub(crate) mod cron;
pub(crate) mod dead_letter;
mod heartbeat;
pub(crate) mod idempotency;
pub(crate) mod jobs;
mod metrics;
pub(crate) mod path_ids;
mod pools;
mod progress;
pub(crate) mod push;
pub(crate) mod queues;
mod rate_limits;
pub(crate) mod schema_versions;
pub(crate) mod schemas;
pub(crate) mod system;
pub(crate) mod webhooks;
pub(crate) mod workers;
pub(crate) mod workflows;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// A one-job answer (INFO, CANCEL, dead letter retry): the binding's `{"job": {...}}`, with
/// the job's fields also at the top level, where the Rust SDK reads them (README, "Client
/// compatibility").
pub(crate) fn job_and_bare_job(job: &ojs_core::Job) -> Value {
    wrapped_and_bare("job", job.to_json())
}

/// A one-thing answer: `{key: view}`, with `view`'s fields also at the top level, where
/// SDKs and the conformance suite read them (a job, a workflow, a checkpoint, a webhook
/// subscription).
pub(crate) fn wrapped_and_bare(key: &str, view: Value) -> Value {
    let mut body = view.as_object().cloned().unwrap_or_default();
    body.insert(key.into(), view);
    Value::Object(body)
}

/// For a request acting for one tenant, the 404 of job `id` unless it is that
/// tenant's job (one strongly consistent read: a job's tenant never changes, so what the
/// request then does to the job is done to that tenant's). A request for any tenant
/// reads nothing.
pub(crate) async fn tenant_owns(
    app: &crate::AppState,
    tenant: &crate::extract::Tenant,
    id: &ojs_core::JobId,
) -> Result<(), crate::error::ApiError> {
    if tenant.0 == ojs_core::tenant::Scope::Any {
        return Ok(());
    }
    visible_job(app, tenant, id).await.map(|_| ())
}

/// The stored job `id` (one strongly consistent read), or its 404.
pub(crate) async fn stored_job(
    app: &crate::AppState,
    id: &ojs_core::JobId,
) -> Result<ojs_core::Job, crate::error::ApiError> {
    path_ids::found(id, app.store.engine().get_job(id).await?)
}

/// The stored job `id` (one strongly consistent read) if the request's tenant may see it
/// ([`seen_job`]).
pub(crate) async fn visible_job(
    app: &crate::AppState,
    tenant: &crate::extract::Tenant,
    id: &ojs_core::JobId,
) -> Result<ojs_core::Job, crate::error::ApiError> {
    seen_job(tenant, id, app.store.engine().get_job(id).await?)
}

/// `job`, what a read of job `id` found, if the request's tenant may see it: another
/// tenant's job answers as one that is not stored (the 404 of `id`).
pub(crate) fn seen_job(
    tenant: &crate::extract::Tenant,
    id: &ojs_core::JobId,
    job: Option<ojs_core::Job>,
) -> Result<ojs_core::Job, crate::error::ApiError> {
    path_ids::found(id, job.filter(|job| tenant.sees(job)))
}

/// A store error as answered, with `NotFound` as `missing`: for a path that names what
/// the store looked up differently (a schema by type and version, stored by URI).
pub(crate) fn not_found_as(
    missing: impl FnOnce() -> crate::error::ApiError,
) -> impl FnOnce(ojs_store::StoreError) -> crate::error::ApiError {
    move |e| match e {
        ojs_store::StoreError::NotFound(_) => missing(),
        other => other.into(),
    }
}

/// Ok when `id` is `prefix` and a UUID, the form of the ids this server hands out for
/// push endpoints, webhook subscriptions and deliveries; anything else is not looked up
/// but answered at once with `unknown(id)`, its 404.
pub(crate) fn check_prefixed_uuid(
    id: &str,
    prefix: &str,
    unknown: fn(&str) -> crate::error::ApiError,
) -> Result<(), crate::error::ApiError> {
    if path_ids::is_prefixed_uuid(id, prefix) {
        Ok(())
    } else {
        Err(unknown(id))
    }
}

/// Every item of `all` (a listing read whole) as `view` shows it.
pub(crate) fn views<T>(all: &[T], view: impl FnMut(&T) -> Value) -> Vec<Value> {
    all.iter().map(view).collect()
}

/// A JSON response with a status, tagged with the job it is about (for the request log).
pub(crate) fn reply(status: StatusCode, body: Value) -> Response {
    let subject = crate::layer::LogSubject::of(&body);
    let mut res = (status, body.to_string()).into_response();
    if let Some(subject) = subject {
        res.extensions_mut().insert(subject);
    }
    res
}
