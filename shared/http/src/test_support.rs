//! Helpers of the unit tests.

use ojs_store::{Store, StoreConfig};

/// A store whose endpoint refuses connections: a case decided before any lookup passes,
/// one that looked fails with a backend error.
pub(crate) fn unreachable_store() -> Store {
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .endpoint_url("http://127.0.0.1:9")
        .http_client(ojs_store::https_client())
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "x", "x", None, None, "test",
        ))
        .build();
    Store::new(
        aws_sdk_dynamodb::Client::from_conf(conf),
        StoreConfig::for_table("none"),
    )
}
