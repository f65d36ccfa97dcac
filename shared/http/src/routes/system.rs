//! Manifest, health and events.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use ojs_core::OjsError;
use ojs_store::EventQuery;
use serde::Deserialize;
use serde_json::json;

use super::reply;
use crate::conformance::{CONFORMANCE_EXCEPTIONS, CONFORMANCE_LEVEL};
use crate::error::ApiError;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/manifest", get(get_manifest))
        .route("/ojs/v1/health", get(get_health))
        .route("/ojs/v1/events", get(list_events))
}

async fn get_manifest(State(app): State<AppState>) -> Response {
    let auth_required = app.auth.mode() == crate::AuthMode::ApiKey;
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
            "extensions": ["events", "progress"],
            "authentication": {
                "required": auth_required,
                "schemes": if auth_required { json!(["bearer"]) } else { json!([]) },
                "public_paths": ["/ojs/manifest", "/ojs/v1/health"],
            },
            "capabilities": {
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
            },
            "limits": {
                "max_envelope_bytes": ojs_core::validate::MAX_ENVELOPE_BYTES,
                "max_args_bytes": ojs_core::validate::MAX_ARGS_BYTES,
                "max_meta_bytes": ojs_core::validate::MAX_META_BYTES,
                "max_fetch_count": 100,
            },
        }),
    )
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

#[derive(Debug, Deserialize)]
struct EventParams {
    types: Option<String>,
    queues: Option<String>,
    after: Option<String>,
    limit: Option<String>,
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

async fn list_events(
    State(app): State<AppState>,
    Query(p): Query<EventParams>,
) -> Result<Response, ApiError> {
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
    };
    let page = app.store.list_events(&query).await?;
    Ok(reply(
        StatusCode::OK,
        json!({ "events": page.events, "cursor": page.cursor, "has_more": page.has_more }),
    ))
}
