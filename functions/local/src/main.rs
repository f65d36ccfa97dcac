//! Local development server: every endpoint group on one port, against the DynamoDB
//! endpoint named by the standard AWS environment, with the timer consumer and the
//! scheduler's sweep in process. Creates the table if it is missing.

mod preflight;

use anyhow::Context;
use ojs_http::{app, AppState, Group, HttpConfig};
use ojs_store::Store;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let host = std::env::var("OJS_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("OJS_PORT").unwrap_or_else(|_| "8080".into());
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    if let Some(why) = preflight::missing_aws_settings(|k| std::env::var(k).ok(), home.as_deref()) {
        eprintln!("ojs-local: {why}");
        std::process::exit(2);
    }
    let mut store = Store::from_env().await;
    if let Err(e) = store.ensure_table().await {
        eprintln!(
            "ojs-local: cannot create or read table {}: {e}",
            store.table()
        );
        std::process::exit(1);
    }
    // The timer queue: the one named by OJS_TIMER_QUEUE_URL, else one created on the local
    // SQS endpoint; consumed in-process as the timer function would be on AWS.
    if store.timer().is_none() && std::env::var_os("AWS_ENDPOINT_URL_SQS").is_some() {
        let sdk = aws_config::load_from_env().await;
        let name = format!("{}-timer", store.table());
        store = store
            .with_local_timer_queue(&sdk, &name)
            .await
            .context("creating the local timer queue")?;
    }
    if store.timer().is_some() {
        let consumer = store.clone();
        tokio::spawn(async move { consumer.consume_timer_queue().await });
    }
    // The scheduler function's sweep (EventBridge, every minute on AWS), every second here.
    let sweeper = store.clone();
    tokio::spawn(async move { sweeper.sweep_every(std::time::Duration::from_secs(1)).await });
    let router = app(
        AppState::new(store.clone(), HttpConfig::from_env()),
        &Group::ALL,
    );
    let addr = format!("{host}:{port}");
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    tracing::info!(%addr, table = store.table(), "OJS API listening");
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
