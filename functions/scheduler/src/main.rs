//! The scheduler Lambda function (EventBridge `rate(1 minute)`): wiring only. The sweep
//! itself is `Store::sweep`, which `make dev` also runs every second; then the webhook
//! retries that are due (`WebhookDispatcher::redrive`) and the nudge of jobs left waiting
//! for a push endpoint (`Store::nudge_waiting_pushes`).

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use ojs_store::Store;
use serde_json::{json, Value};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_current_span(false)
        .without_time()
        .init();
    let store = Store::from_env().await;
    let webhooks =
        ojs_push::WebhookDispatcher::new(store.clone(), ojs_push::WebhookConfig::from_env())?;
    lambda_runtime::run(service_fn(move |_event: LambdaEvent<Value>| {
        let (store, webhooks) = (store.clone(), webhooks.clone());
        async move {
            let now = ojs_core::time::now();
            // Due webhook retries and push nudges alongside the sweep: none waits for the
            // others.
            let waited_since = now - ojs_store::PUSH_NUDGE_AFTER;
            let (report, retried, nudged) = futures::join!(
                store.sweep(now),
                webhooks.redrive(),
                store.nudge_waiting_pushes(now, waited_since)
            );
            let report = report?;
            let nudged = nudged.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "push nudge failed");
                0
            });
            // Backlog metrics for the alarms; a failure here must not fail the sweep.
            if let Err(e) = store.emit_sweep_metrics(&report, now).await {
                tracing::warn!(error = %e, "sweep metrics not emitted");
            }
            tracing::info!(
                queues = report.queues,
                moved = report.moved,
                healed = report.healed,
                webhook_retries = retried,
                push_nudges = nudged,
                "sweep"
            );
            Ok::<_, lambda_runtime::Error>(
                json!({ "queues": report.queues, "moved": report.moved, "healed": report.healed, "webhook_retries": retried, "push_nudges": nudged }),
            )
        }
    }))
    .await
}
