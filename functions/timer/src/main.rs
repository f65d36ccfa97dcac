//! The timer Lambda function (SQS event source on the timer queue): wiring only.

mod handler;

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use ojs_store::Store;
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    ojs_runtime::init_logging();
    let store = Store::from_env().await;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>| {
            let store = store.clone();
            let span = ojs_runtime::invocation_span(
                &event.context.request_id,
                event.context.xray_trace_id.as_deref(),
            );
            async move {
                Ok::<_, lambda_runtime::Error>(handler::promote_due(&store, event.payload).await)
            }
            .instrument(span)
        },
    ))
    .await
}
