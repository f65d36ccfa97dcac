//! The local AWS environment: DynamoDB Local and moto unless the environment names
//! other endpoints (the same defaults as the tests crate).

/// The tests crate's local defaults: DynamoDB Local and moto unless `AWS_ENDPOINT_URL*`
/// is set, dummy credentials and a region. Call it before spawning threads.
///
/// And DynamoDB as it is, however the bench was started: the tests' AWS-strict layer (its
/// index lag, short pages and throttling, which the sections that spawn a `TestApp` would
/// otherwise go through) only when `OJS_STRICT_DDB` asks for it, as `bench/run.sh` does.
pub fn local_defaults() {
    ojs_tests::default_local_env();
    if std::env::var_os("OJS_STRICT_DDB").is_none() {
        std::env::set_var("OJS_STRICT_DDB", "off");
    }
}

/// Store settings for a bench table: the server's own environment settings
/// (`OJS_EVENTS`, `OJS_QUEUE_SHARDS`, retention; `StoreConfig::from_env`) over `table`, so
/// `OJS_EVENTS=off make bench` measures what a deployment with events off pays.
pub fn store_config(table: &str) -> ojs_store::StoreConfig {
    ojs_store::StoreConfig {
        table: table.to_owned(),
        ..ojs_store::StoreConfig::from_env()
    }
}

/// A store over a new table named for `what`, whose DynamoDB calls `meter` records.
pub async fn metered_store(
    what: &str,
    meter: &crate::meter::Meter,
) -> anyhow::Result<ojs_store::Store> {
    use anyhow::Context;
    let table = table_name(what);
    let store = ojs_store::Store::new(meter.dynamodb_client(&sdk().await), store_config(&table));
    store.ensure_table().await.with_context(|| {
        format!("creating table {table}: is DynamoDB Local running? (scripts/local-aws.sh start)")
    })?;
    Ok(store)
}

/// False when `OJS_BENCH_STREAM=off`: the throughput section then runs on tables whose
/// change stream is off, with no stream consumer, to measure the request path without
/// the cost DynamoDB Local's stream adds to every write (4 to 5 times the work per call
/// measured on it; `scripts/ddb-local-stream-cost.py`). Deployed, the stream is always on.
pub fn stream_on() -> bool {
    !std::env::var("OJS_BENCH_STREAM").is_ok_and(|v| v.eq_ignore_ascii_case("off"))
}

/// Turns `table`'s change stream off.
pub async fn stream_off_for(client: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    client
        .update_table()
        .table_name(table)
        .stream_specification(
            aws_sdk_dynamodb::types::StreamSpecification::builder()
                .stream_enabled(false)
                .build()?,
        )
        .send()
        .await
        .with_context(|| format!("turning off the stream of {table}"))?;
    Ok(())
}

/// The DynamoDB endpoint in use.
pub fn dynamodb_endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

/// The SDK configuration of the environment.
pub async fn sdk() -> aws_config::SdkConfig {
    ojs_store::sdk_config().await
}

/// A unique table name with a prefix that says who made it.
pub fn table_name(what: &str) -> String {
    format!("ojs-bench-{what}-{}", uuid::Uuid::now_v7().simple())
}
