//! The scheduler Lambda function (EventBridge `rate(1 minute)`): wiring only. The sweep
//! itself is `Store::sweep`, which `make dev` also runs every second.

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
    lambda_runtime::run(service_fn(move |_event: LambdaEvent<Value>| {
        let store = store.clone();
        async move {
            let now = ojs_core::time::now();
            let report = store.sweep(now).await?;
            // Backlog metrics for the alarms; a failure here must not fail the sweep.
            if let Err(e) = store.emit_sweep_metrics(&report, now).await {
                tracing::warn!(error = %e, "sweep metrics not emitted");
            }
            tracing::info!(
                queues = report.queues,
                moved = report.moved,
                healed = report.healed,
                "sweep"
            );
            Ok::<_, lambda_runtime::Error>(
                json!({ "queues": report.queues, "moved": report.moved, "healed": report.healed }),
            )
        }
    }))
    .await
}
