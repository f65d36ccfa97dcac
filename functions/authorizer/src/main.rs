//! The HTTP API's Lambda authorizer (payload 2.0, simple responses): wiring only. The
//! check is `ojs_http::authorizer::authorize_request`.

use std::sync::Arc;

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use ojs_http::authorizer::authorize_request;
use ojs_http::{AuthMode, Authenticator};
use ojs_store::Store;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    ojs_runtime::init_logging();
    let mode = AuthMode::parse(std::env::var("OJS_AUTH").ok().as_deref());
    let auth = Arc::new(Authenticator::new(mode, Store::from_env().await));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let auth = Arc::clone(&auth);
        async move {
            authorize_request(&auth, &event.payload)
                .await
                .map_err(|e| lambda_runtime::Error::from(e.message))
        }
    }))
    .await
}
