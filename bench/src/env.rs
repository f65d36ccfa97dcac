//! The local AWS environment: DynamoDB Local and moto unless the environment names
//! other endpoints (the same defaults as the tests crate).

/// Points the SDK at DynamoDB Local (127.0.0.1:8000) and moto (127.0.0.1:5000) unless
/// `AWS_ENDPOINT_URL*` is set, with dummy credentials and a region. Call it before
/// spawning threads.
pub fn local_defaults() {
    let set = |k: &str, v: &str| {
        if std::env::var_os(k).is_none() {
            std::env::set_var(k, v);
        }
    };
    if std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_none()
        && std::env::var_os("AWS_ENDPOINT_URL").is_none()
    {
        set("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000");
    }
    if std::env::var_os("AWS_ENDPOINT_URL_SQS").is_none()
        && std::env::var_os("AWS_ENDPOINT_URL").is_none()
    {
        set("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:5000");
    }
    set("AWS_REGION", "us-east-1");
    set("AWS_ACCESS_KEY_ID", "local");
    set("AWS_SECRET_ACCESS_KEY", "local");
    set("AWS_EC2_METADATA_DISABLED", "true");
}

/// The DynamoDB endpoint in use.
pub fn dynamodb_endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

/// The SDK configuration of the environment.
pub async fn sdk() -> aws_config::SdkConfig {
    aws_config::load_from_env().await
}

/// A unique table name with a prefix that says who made it.
pub fn table_name(what: &str) -> String {
    format!("ojs-bench-{what}-{}", uuid::Uuid::now_v7().simple())
}
