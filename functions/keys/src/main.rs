//! API key administration on a deployed stack, without a local Rust build: wiring only.
//! Invoke it with a command (`ojs_http::key_admin`):
//!
//! ```text
//! aws lambda invoke --function-name <KeysFunctionName> --cli-binary-format raw-in-base64-out \
//!     --payload '{"action":"create","name":"admin"}' key.json
//! ```
//!
//! It has no HTTP route: only principals allowed `lambda:InvokeFunction` on it can call it.

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use ojs_http::key_admin::administer_keys;
use ojs_store::Store;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    ojs_runtime::init_logging();
    let store = Store::from_env().await;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let store = store.clone();
        async move {
            administer_keys(&store, &event.payload)
                .await
                .map_err(|e| lambda_runtime::Error::from(e.to_string()))
        }
    }))
    .await
}
