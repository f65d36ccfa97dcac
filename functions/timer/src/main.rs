//! The timer Lambda function (SQS event source on the timer queue): wiring only.

mod handler;

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use ojs_store::Store;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_current_span(false)
        .without_time()
        .init();
    let store = Store::from_env().await;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>| {
            let store = store.clone();
            async move {
                Ok::<_, lambda_runtime::Error>(handler::promote_due(&store, event.payload).await)
            }
        },
    ))
    .await
}
