//! Manifest, health, readiness, metrics and events.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use ojs_core::OjsError;
use ojs_store::EventQuery;
use serde::Deserialize;
use serde_json::{json, Value};

use super::reply;
use crate::conformance::{CONFORMANCE_EXCEPTIONS, CONFORMANCE_LEVEL};
use crate::error::ApiError;
use crate::extract::ListingTenant;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/manifest", get(get_manifest))
        .route("/ojs/v1/health", get(get_health))
        .route("/health", get(get_health))
        .route("/ready", get(get_ready))
        .route("/metrics", get(super::metrics::get_metrics))
        .route("/ojs/v1/events", get(list_events))
}

async fn get_manifest(State(app): State<AppState>) -> Response {
    reply(
        StatusCode::OK,
        json!({
            "specversion": ojs_core::SPEC_VERSION,
            "ojs_version": ojs_core::SPEC_VERSION,
            "implementation": {
                "name": "ojs-serverless",
                "version": env!("CARGO_PKG_VERSION"),
                "language": "rust",
                "homepage": "https://github.com/openjobspec",
            },
            "conformance_level": CONFORMANCE_LEVEL,
            "conformance_exceptions": CONFORMANCE_EXCEPTIONS
                .iter()
                .map(|e| json!({"test_id": e.test_id, "reason": e.reason}))
                .collect::<Vec<_>>(),
            // What the claim means for the whole release (its extension cases declare
            // levels too): README, "What is implemented".
            "conformance_scope": "ojs-conformance v0.4.0: every case of levels 0-4 passes but \
                the conformance_exceptions; every extension case passes but those listed in \
                conformance_not_implemented (extensions not built yet) and the \
                conformance_exceptions",
            "conformance_not_implemented": crate::conformance::NOT_IMPLEMENTED
                .iter()
                .map(|g| g.case)
                .collect::<Vec<_>>(),
            "protocols": ["http"],
            "formats": [
                "application/openjobspec+json",
                "application/openjobspec+proto",
                "application/openjobspec+proto; delimited=true",
            ],
            "backend": "dynamodb",
            "extensions": EXTENSIONS.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
            // The same extensions by URI (ojs-extension-lifecycle.md §5), which the
            // Protobuf encoding's capability negotiation asks for (ojs-protobuf-format.md
            // §8.3), and how the Protobuf form carries what has no field of its own.
            "extension_uris": extension_uris(),
            "protobuf": {
                "schema": "openjobspec.v1",
                "extension_uris": extension_uris(),
                "custom_extensions_prefix": "x-ojs-",
                "unknown_fields": "preserved in a JobEnvelope: top-level and inside retry, unique and error",
            },
            "authentication": authentication(app.auth.mode() == crate::AuthMode::ApiKey),
            "capabilities": capabilities(),
            "limits": limits(app.store.engine().payloads().is_some()),
        }),
    )
}

fn extension_uris() -> Vec<&'static str> {
    EXTENSIONS.iter().map(|(_, uri)| *uri).collect()
}

/// The manifest's `authentication`: whether a key is needed, and where it is not.
fn authentication(required: bool) -> Value {
    json!({
        "required": required,
        "schemes": if required { json!(["bearer"]) } else { json!([]) },
        "public_paths": ["/ojs/manifest", "/ojs/v1/health", "/health", "/ready"],
    })
}

/// The manifest's `capabilities`: the features SDKs and the dashboard look for by name.
fn capabilities() -> Value {
    json!({
        "batch_enqueue": true,
        "cron_jobs": true,
        "dead_letter": true,
        "delayed_jobs": true,
        "job_ttl": true,
        "priority_queues": true,
        "rate_limiting": true,
        "schema_validation": true,
        "unique_jobs": true,
        "workflows": true,
        "events": true,
        "heartbeat": true,
        "visibility_timeout": true,
        "execution_timeout": true,
        "pause_resume": true,
        // The dashboard shows its webhooks and schemas pages by these names.
        "webhooks": true,
        "job_versioning": true,
        // Depth bounds with the reject strategy (ojs-backpressure.md).
        "backpressure": true,
        // Tenants kept apart, limited and listed (ojs-multi-tenancy.md; README,
        // "Multi-tenancy"): the dashboard shows its tenants page by this name. Not
        // the extension's claim (`extensions`): tenant events and per-tenant
        // metric labels (its §11, MT-006) are not built.
        "multi_tenancy": true,
    })
}

/// The extensions the manifest declares, each fully implemented (its official suite
/// passes but for the cases `conformance.rs` lists), by name and by the URI
/// ojs-extension-lifecycle.md §11 gives it. Not here: bulk operations (only batch enqueue
/// and idempotency keys of it), encryption and middleware (client-side), tenancy and fair
/// scheduling (built but for their events and per-tenant metrics; the tenants page's
/// capability is claimed), serverless (push delivery is built, but its draft names no URI).
const EXTENSIONS: [(&str, &str); 13] = [
    ("admin-api", "urn:ojs:ext:admin-api"),
    ("backpressure", "urn:ojs:ext:backpressure"),
    ("dead-letter", "urn:ojs:ext:dead-letter"),
    ("durable-execution", "urn:ojs:ext:durable-execution"),
    // A core document (ojs-events.md), listed since the first manifest: the dashboard
    // shows its events page by this name.
    ("events", "urn:ojs:spec:events"),
    ("graceful-shutdown", "urn:ojs:ext:graceful-shutdown"),
    ("job-versioning", "urn:ojs:ext:experimental:job-versioning"),
    ("observability", "urn:ojs:ext:observability"),
    ("payload-limits", "urn:ojs:ext:payload-limits"),
    ("progress", "urn:ojs:ext:progress"),
    ("rate-limiting", "urn:ojs:ext:rate-limiting"),
    ("schema-registry", "urn:ojs:ext:schema-registry"),
    ("webhooks", "urn:ojs:ext:webhooks"),
];

/// The manifest's `limits`: the fields of ojs-payload-limits.md §8.1 (here rather than
/// under `extensions`, which the HTTP binding's §21.2 makes a list of names), and what
/// else a client may plan on. `offloading`: the store keeps large requests in the payload
/// bucket (`OJS_PAYLOAD_BUCKET`), so a job pushed alone or in a batch may be as large as
/// the body read.
fn limits(offloading: bool) -> Value {
    let stored = ojs_store::MAX_STORED_REQUEST_BYTES;
    let (max_envelope, note) = if offloading {
        (
            ojs_core::validate::MAX_ENVELOPE_BYTES,
            format!(
                "a job pushed alone or in a batch may be as large as the body read: its                  args and meta go to the payload bucket past {stored} bytes; a unique job,                  and a job inside a workflow or cron template, must fit {stored} bytes as                  JSON"
            ),
        )
    } else {
        (
            stored,
            format!(
                "the largest job stored without a payload bucket: its request as JSON                  (before it is deflated) must fit {stored} bytes of its DynamoDB item;                  bodies up to max_request_body_bytes are read, and a larger job in one is                  refused with 413 envelope_too_large"
            ),
        )
    };
    json!({
        "max_envelope_bytes": max_envelope,
        "max_envelope_note": note,
        "max_request_body_bytes": ojs_core::validate::MAX_ENVELOPE_BYTES,
        "max_batch_body_bytes": crate::extract::MAX_BATCH_BYTES,
        "max_meta_bytes": ojs_core::validate::MAX_META_BYTES,
        "max_queue_name_bytes": ojs_core::QueueName::MAX_LEN,
        "max_job_type_bytes": ojs_core::JobType::MAX_LEN,
        "supported_compression": crate::decompress::SUPPORTED_COMPRESSION,
        "external_references": true,
        "chunking": false,
        "per_queue_limits": false,
        "max_fetch_count": 100,
        // ojs-durable-execution.md §9.1 caps a checkpoint at 1 MB; this server keeps it
        // on the job's item, so at most this (413 above).
        "max_checkpoint_bytes": ojs_core::checkpoint::MAX_CHECKPOINT_BYTES,
    })
}

async fn get_health(State(app): State<AppState>) -> Response {
    let started = std::time::Instant::now();
    let backend = app.store.ping().await;
    let latency_ms = started.elapsed().as_millis() as u64;
    let (status, word, backend_status) = match &backend {
        Ok(()) => (StatusCode::OK, "ok", "ok"),
        Err(e) => {
            tracing::error!(error = %e, "health check: storage unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "unhealthy", "unreachable")
        }
    };
    reply(
        status,
        json!({
            "status": word,
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_seconds": app.started.elapsed().as_secs(),
            "backend": { "type": "dynamodb", "status": backend_status, "latency_ms": latency_ms },
        }),
    )
}

/// `GET /ready` (ojs-observability.md): whether this instance can serve, that is reach
/// its table (the health check's one GetItem): 200 `ready` or 503 `not_ready`.
async fn get_ready(State(app): State<AppState>) -> Response {
    match app.store.ping().await {
        Ok(()) => reply(StatusCode::OK, json!({"status": "ready"})),
        Err(e) => {
            tracing::error!(error = %e, "readiness check: storage unreachable");
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"status": "not_ready", "backend": {"type": "dynamodb", "status": "unreachable"}}),
            )
        }
    }
}

#[derive(Debug, Deserialize)]
struct EventParams {
    types: Option<String>,
    queues: Option<String>,
    after: Option<String>,
    limit: Option<String>,
    tenant: Option<String>,
}

fn list(raw: &Option<String>) -> Vec<String> {
    raw.as_deref()
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// `GET /ojs/v1/events` (ojs-events.md §6.4): the lifecycle events stored, by `types`,
/// `queues`, `tenant` (`_default`: the jobs of none; a key bound to a tenant, or an
/// `X-OJS-Tenant` header, lists that tenant's alone: crate::extract::ListingTenant) and
/// `after`, at most `limit`. A tenant's filter applies to the page items the listing reads
/// anyway, as `types` does: no read more.
async fn list_events(
    State(app): State<AppState>,
    listing: ListingTenant,
    Query(p): Query<EventParams>,
) -> Result<Response, ApiError> {
    let tenant = listing.scope(p.tenant.as_deref(), "$.tenant")?;
    let limit = match &p.limit {
        None => 100,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| OjsError::invalid_request("limit must be an integer from 1 to 1000"))?,
    };
    let queues = list(&p.queues);
    for q in &queues {
        ojs_core::QueueName::parse(q)?;
    }
    let query = EventQuery {
        types: list(&p.types),
        queues,
        after: p.after.clone().filter(|a| !a.is_empty()),
        limit,
        tenant,
    };
    let page = app.store.derived().list_events(&query).await?;
    Ok(reply(
        StatusCode::OK,
        json!({ "events": page.events, "cursor": page.cursor, "has_more": page.has_more }),
    ))
}
