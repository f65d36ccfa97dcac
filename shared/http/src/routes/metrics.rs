//! `GET /metrics`: Prometheus text (ojs-observability.md §8), per queue and per tenant
//! (ojs-multi-tenancy.md §11.2, MT-006), from the counters the change stream keeps.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ojs_store::QueueStats;

use crate::error::ApiError;
use crate::AppState;

/// Most queues `/metrics` reports (one counter read each).
const MAX_METRIC_QUEUES: usize = 500;

/// Most tenants `/metrics` reports (their counters come in one Query whatever their
/// number; this bounds the answer's size: a few lines per tenant and queue).
const MAX_METRIC_TENANTS: usize = 1_000;

/// A Prometheus label value (`\`, `"` and new lines escaped).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The live states' counts (gauges).
fn live(st: &QueueStats) -> [(&'static str, u64); 5] {
    [
        ("available", st.available),
        ("scheduled", st.scheduled),
        ("retryable", st.retryable),
        ("active", st.active),
        ("pending", st.pending),
    ]
}

/// The final states' counts (transitions since the counter began).
fn finished(st: &QueueStats) -> [(&'static str, u64); 3] {
    [
        ("completed", st.completed),
        ("discarded", st.discarded),
        ("cancelled", st.cancelled),
    ]
}

/// One metric: its help and type lines, then its samples.
fn metric(text: &mut String, name: &str, kind: &str, help: &str, samples: &str) {
    let _ = writeln!(text, "# HELP {name} {help}");
    let _ = writeln!(text, "# TYPE {name} {kind}");
    text.push_str(samples);
}

/// `GET /metrics`: one Query of the queue registry and one counter read per queue (at
/// most [`MAX_METRIC_QUEUES`]), and one Query of the tenants' counter items (at most
/// [`MAX_METRIC_TENANTS`] tenants reported), never a Scan. Live states are gauges;
/// finished ones count transitions since the counter began. The default tenant's jobs
/// have no tenant counters (jobs without tenants cost what they did): they are in the
/// queue metrics only. Behind `ojs:admin:read`, and not for keys bound to a tenant (queue
/// names, tenants and volumes are an operator's view); a scraper sends the key as a
/// bearer token.
pub(crate) async fn get_metrics(State(app): State<AppState>) -> Result<Response, ApiError> {
    let queues = app.store.engine().list_queues().await?;
    let (mut jobs, mut ended, mut paused) = (String::new(), String::new(), String::new());
    for q in queues.iter().take(MAX_METRIC_QUEUES) {
        let Ok(name) = ojs_core::QueueName::parse(&q.name) else {
            continue;
        };
        let st = app.store.derived().queue_stats(&name).await?;
        let queue = label(&q.name);
        for (state, n) in live(&st) {
            let _ = writeln!(
                jobs,
                "ojs_queue_jobs{{queue=\"{queue}\",state=\"{state}\"}} {n}"
            );
        }
        for (state, n) in finished(&st) {
            let _ = writeln!(
                ended,
                "ojs_jobs_finished_total{{queue=\"{queue}\",state=\"{state}\"}} {n}"
            );
        }
        let _ = writeln!(
            paused,
            "ojs_queue_paused{{queue=\"{queue}\"}} {}",
            u8::from(st.paused)
        );
    }
    let mut text = String::new();
    metric(
        &mut text,
        "ojs_queue_jobs",
        "gauge",
        "Jobs in a live state, per queue.",
        &jobs,
    );
    metric(
        &mut text,
        "ojs_jobs_finished_total",
        "counter",
        "Jobs that reached a final state, per queue, since its counter began.",
        &ended,
    );
    metric(
        &mut text,
        "ojs_queue_paused",
        "gauge",
        "Whether the queue is paused (1) or not (0).",
        &paused,
    );
    metric(
        &mut text,
        "ojs_queues",
        "gauge",
        "Queues known to the server.",
        &format!("ojs_queues {}\n", queues.len()),
    );
    tenant_metrics(&app, &mut text).await?;
    let mut res = (StatusCode::OK, text).into_response();
    // `text/plain` is the Prometheus text format (0.0.4 when no version is named).
    res.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain"),
    );
    res.extensions_mut().insert(crate::layer::OwnContentType);
    Ok(res)
}

/// The per-tenant metrics of ojs-multi-tenancy.md §11.2, labelled `tenant_id` and
/// `queue`: every state (`ojs_tenant_jobs`, as `ojs_queue_jobs`), and the spec's own
/// names for what the counters hold: `ojs_tenant_jobs_active`, `ojs_tenant_queue_depth`
/// (available, scheduled and retryable: the depth `max_queue_depth` bounds),
/// `ojs_tenant_jobs_processed_total` (completed) and `ojs_tenant_jobs_failed_total`
/// (discarded: failed for good), and `ojs_tenants`. The counters keep no count of enqueues or of shares, so
/// `enqueued_total` and `fairness.share` are not reported.
async fn tenant_metrics(app: &AppState, text: &mut String) -> Result<(), ApiError> {
    let tenants = app.store.derived().list_tenants().await?;
    let mut lines: [String; 6] = Default::default();
    for t in tenants.iter().take(MAX_METRIC_TENANTS) {
        for (queue, st) in &t.queues {
            let at = format!(
                "tenant_id=\"{}\",queue=\"{}\"",
                label(&t.tenant),
                label(queue)
            );
            for (state, n) in live(st) {
                let _ = writeln!(lines[0], "ojs_tenant_jobs{{{at},state=\"{state}\"}} {n}");
            }
            for (state, n) in finished(st) {
                let _ = writeln!(
                    lines[1],
                    "ojs_tenant_jobs_finished_total{{{at},state=\"{state}\"}} {n}"
                );
            }
            for (i, name, n) in [
                (2, "ojs_tenant_jobs_active", st.active),
                (3, "ojs_tenant_queue_depth", st.depth()),
                (4, "ojs_tenant_jobs_processed_total", st.completed),
                (5, "ojs_tenant_jobs_failed_total", st.discarded),
            ] {
                let _ = writeln!(lines[i], "{name}{{{at}}} {n}");
            }
        }
    }
    let [all, ended, active, depth, processed, failed] = lines;
    for (name, kind, help, samples) in [
        (
            "ojs_tenant_jobs",
            "gauge",
            "A tenant's jobs in a live state, per queue.",
            all,
        ),
        (
            "ojs_tenant_jobs_finished_total",
            "counter",
            "A tenant's jobs that reached a final state, per queue, since its counter began.",
            ended,
        ),
        (
            "ojs_tenant_jobs_active",
            "gauge",
            "A tenant's active jobs, per queue.",
            active,
        ),
        (
            "ojs_tenant_queue_depth",
            "gauge",
            "A tenant's jobs waiting to run (available, scheduled, retryable), per queue.",
            depth,
        ),
        (
            "ojs_tenant_jobs_processed_total",
            "counter",
            "A tenant's jobs completed, per queue, since its counter began.",
            processed,
        ),
        (
            "ojs_tenant_jobs_failed_total",
            "counter",
            "A tenant's jobs failed for good, per queue, since its counter began.",
            failed,
        ),
    ] {
        metric(text, name, kind, help, &samples);
    }
    metric(
        text,
        "ojs_tenants",
        "gauge",
        "Tenants that had a job.",
        &format!("ojs_tenants {}\n", tenants.len()),
    );
    Ok(())
}
