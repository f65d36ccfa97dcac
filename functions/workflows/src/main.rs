//! Lambda function for the OJS workflows endpoint group: wiring only.

use ojs_http::{app, AppState, Group, HttpConfig};
use ojs_store::Store;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    ojs_runtime::init_logging();
    let store = Store::from_env().await;
    let router = app(
        AppState::new(store, HttpConfig::from_env()),
        &[Group::Workflows],
    );
    ojs_gateway::run_lambda(router).await
}
