//! The scheduler Lambda function (EventBridge `rate(1 minute)`): wiring only. Each
//! invocation is one `ojs_runtime::Scheduler::tick`, the same composition `make dev` runs
//! every second: the sweep, the webhook retries that are due, the nudge of jobs left
//! waiting for a push endpoint, the redrive of the stream batches the stream function
//! gave up on (`OJS_STREAM_FAILURES_QUEUE_URL`; their deliveries planned onto
//! `OJS_DELIVERY_QUEUE_URL` as the stream function plans them), and the backlog metrics.

use std::sync::Arc;

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use ojs_push::{Deliverer, DeliveryQueue, PlannedDeliveries, Planner};
use ojs_runtime::Scheduler;
use ojs_store::{Store, StreamRedrive};
use serde_json::{json, Value};
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    ojs_runtime::init_logging();
    let store = Store::from_env().await;
    let sdk = ojs_store::sdk_config().await;
    let (push, webhooks) = ojs_push::dispatchers_from_env(store.clone(), &sdk)?;
    let mut scheduler = Scheduler::new(store).with_webhooks(webhooks.clone());
    match StreamRedrive::from_env(&sdk) {
        Some(redrive) => {
            // A redriven batch's push offers and webhook first attempts go where the
            // stream function sends them.
            let queue = DeliveryQueue::from_env(&sdk).unwrap_or_else(|| {
                tracing::warn!("no OJS_DELIVERY_QUEUE_URL: a redriven batch's deliveries are made inside the tick");
                DeliveryQueue::Inline(Arc::new(Deliverer::new(push.clone(), webhooks.clone())))
            });
            let deliveries = PlannedDeliveries::new(Planner::new(push, webhooks), queue);
            scheduler =
                scheduler.with_stream_redrive(redrive.with_deliveries(Arc::new(deliveries)));
        }
        None => tracing::warn!(
            "no OJS_STREAM_FAILURES_QUEUE_URL: given-up stream batches are not redriven"
        ),
    }
    let scheduler = Arc::new(scheduler);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let scheduler = Arc::clone(&scheduler);
        let span = ojs_runtime::invocation_span(
            &event.context.request_id,
            event.context.xray_trace_id.as_deref(),
        );
        // Boxed: the tick's future is deep enough that its layout, nested in the span's
        // and the runtime's, passes the compiler's query depth limit.
        Box::pin(
            async move {
                let r = scheduler.tick(ojs_core::time::now()).await?;
                let redrive = r.stream_redrive;
                tracing::info!(
                    queues = r.sweep.queues,
                    moved = r.sweep.moved,
                    healed = r.sweep.healed,
                    webhook_retries = r.webhook_retries,
                    push_nudges = r.push_nudges,
                    stream_batches_redriven = redrive.batches,
                    stream_batches_lost = redrive.lost,
                    stream_batches_left = redrive.failed,
                    "tick"
                );
                Ok::<_, lambda_runtime::Error>(json!({
                    "queues": r.sweep.queues,
                    "moved": r.sweep.moved,
                    "healed": r.sweep.healed,
                    "webhook_retries": r.webhook_retries,
                    "push_nudges": r.push_nudges,
                    "stream_batches_redriven": redrive.batches,
                    "stream_batches_lost": redrive.lost,
                    "stream_batches_left": redrive.failed,
                }))
            }
            .instrument(span),
        )
    }))
    .await
}
