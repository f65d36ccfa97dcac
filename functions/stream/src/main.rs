//! The stream Lambda function (event source: the table's DynamoDB stream): wiring only.

mod handler;

use std::sync::Arc;

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use ojs_push::{Deliverer, DeliveryQueue, Planner};
use ojs_store::Store;
use serde_json::Value;
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    ojs_runtime::init_logging();
    let store = Store::from_env().await;
    let sdk = ojs_store::sdk_config().await;
    let (push, webhooks) = ojs_push::dispatchers_from_env(store.clone(), &sdk)?;
    let planner = Planner::new(push.clone(), webhooks.clone());
    let queue = DeliveryQueue::from_env(&sdk).unwrap_or_else(|| {
        tracing::warn!("no OJS_DELIVERY_QUEUE_URL: deliveries are made inside the stream batch");
        DeliveryQueue::Inline(Arc::new(Deliverer::new(push, webhooks)))
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let (store, planner, queue) = (store.clone(), planner.clone(), queue.clone());
        let span = ojs_runtime::invocation_span(
            &event.context.request_id,
            event.context.xray_trace_id.as_deref(),
        );
        async move {
            Ok::<_, lambda_runtime::Error>(
                handler::apply_batch(&store, &planner, &queue, &event.payload).await,
            )
        }
        .instrument(span)
    }))
    .await
}
