//! The delivery Lambda function (SQS event source on the delivery queue): wiring only.

mod handler;

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use ojs_store::Store;
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    ojs_runtime::init_logging();
    let store = Store::from_env().await;
    let sdk = ojs_store::sdk_config().await;
    let (push, webhooks) = ojs_push::dispatchers_from_env(store, &sdk)?;
    let deliverer = ojs_push::Deliverer::new(push, webhooks);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>| {
            let deliverer = deliverer.clone();
            let span = ojs_runtime::invocation_span(
                &event.context.request_id,
                event.context.xray_trace_id.as_deref(),
            );
            async move {
                Ok::<_, lambda_runtime::Error>(handler::deliver(&deliverer, event.payload).await)
            }
            .instrument(span)
        },
    ))
    .await
}
