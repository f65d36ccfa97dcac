//! Local development server: every endpoint group on one port, against the DynamoDB
//! endpoint named by the standard AWS environment, with the timer consumer, the
//! change stream consumer (its given-up batches on a local failure queue, redriven by
//! the tick) and the scheduler's tick in process. Creates the table if it
//! is missing.

mod preflight;

use anyhow::Context;
use ojs_http::{app, AppState, Group, HttpConfig};
use ojs_store::Store;

/// How often the change stream is read in the background (reads of derived data also
/// catch up first).
const STREAM_POLL: std::time::Duration = std::time::Duration::from_millis(250);

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
    let created = match store.ensure_table().await {
        Ok(created) => created,
        Err(e) => {
            eprintln!(
                "ojs-local: cannot create or read table {}: {e}",
                store.table()
            );
            std::process::exit(1);
        }
    };
    // The bucket of large job requests (OJS_PAYLOAD_BUCKET), made here as the table is.
    if let Some(payloads) = store.engine().payloads() {
        if let Err(e) = payloads.ensure_bucket().await {
            eprintln!(
                "ojs-local: cannot create or read bucket {}: {e}",
                payloads.bucket()
            );
            std::process::exit(1);
        }
    }
    // The stream function's work (events, counters, metrics), in process: read from the
    // stream's start on a table just created, else from now on (the sweep repairs the
    // counters of changes made while nothing read the stream). Off when a deployed
    // stream function already consumes this table.
    let mut webhooks = None;
    let mut stream_redrive = None;
    if std::env::var("OJS_LOCAL_STREAM").as_deref() != Ok("off") {
        let sdk = ojs_store::sdk_config().await;
        let client = ojs_store::streams_client_from_env(&sdk);
        // Push delivery, fed by the same consumer (the stream function's job on AWS).
        let dispatcher = ojs_push::Dispatcher::new(
            store.clone(),
            ojs_push::lambda_client(&sdk),
            ojs_push::PushConfig::from_env(),
        )
        .map_err(anyhow::Error::msg)
        .context("building the push dispatcher")?;
        // Jobs no delivery's end picks up (a queue resumed after a pause), every 2 s.
        dispatcher.catch_up_every(std::time::Duration::from_secs(2));
        // Webhook deliveries from the same batches; due retries are the scheduler's.
        let dispatcher_of_webhooks =
            ojs_push::WebhookDispatcher::new(store.clone(), ojs_push::WebhookConfig::from_env())
                .map_err(anyhow::Error::msg)
                .context("building the webhook dispatcher")?;
        webhooks = Some(dispatcher_of_webhooks.clone());
        // Planned as the stream function plans them, made as the delivery function makes
        // them, a task each instead of an SQS message each.
        let deliverer =
            ojs_push::Deliverer::new(dispatcher.clone(), dispatcher_of_webhooks.clone());
        let deliveries = std::sync::Arc::new(ojs_push::PlannedDeliveries::new(
            ojs_push::Planner::new(dispatcher, dispatcher_of_webhooks),
            ojs_push::DeliveryQueue::InProcess(std::sync::Arc::new(deliverer)),
        ));
        // A batch the consumer gives up on goes to a failure queue on the local SQS, and
        // the scheduler's tick redrives it (its counters, events and deliveries), as the
        // event source mapping and the scheduler function do on AWS.
        if std::env::var_os("AWS_ENDPOINT_URL_SQS").is_some() {
            let name = format!("{}-stream-failures", store.table());
            let failures = ojs_store::FailureQueue::create(&sdk, &name)
                .await
                .context("creating the local stream failure queue")?;
            stream_redrive = Some(
                failures
                    .redrive(client.clone())
                    .with_deliveries(deliveries.clone()),
            );
            store = store.with_stream_failures(failures);
        }
        store = store
            .with_change_observer(deliveries)
            .with_local_stream(client, created, Some(STREAM_POLL))
            .await
            .context("reading the table's change stream")?;
    }
    // The timer queue: the one named by OJS_TIMER_QUEUE_URL, else one created on the local
    // SQS endpoint; consumed in-process as the timer function would be on AWS.
    if store.engine().timer().is_none() && std::env::var_os("AWS_ENDPOINT_URL_SQS").is_some() {
        let sdk = ojs_store::sdk_config().await;
        let name = format!("{}-timer", store.table());
        store = store
            .with_local_timer_queue(&sdk, &name)
            .await
            .context("creating the local timer queue")?;
    }
    if store.engine().timer().is_some() {
        let consumer = store.clone();
        tokio::spawn(async move { consumer.wakeups().consume_timer_queue().await });
    }
    // The scheduler function's tick (EventBridge, every minute on AWS), every second here.
    let mut scheduler = ojs_runtime::Scheduler::new(store.clone());
    if let Some(w) = webhooks {
        scheduler = scheduler.with_webhooks(w);
    }
    if let Some(r) = stream_redrive {
        scheduler = scheduler.with_stream_redrive(r);
    }
    tokio::spawn(async move {
        scheduler
            .tick_every(std::time::Duration::from_secs(1))
            .await
    });
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
