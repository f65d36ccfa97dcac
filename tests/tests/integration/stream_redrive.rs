//! The redrive of stream batches the stream function gave up on
//! (`shared/store/src/derived/stream/redrive.rs`): after its retries the event source
//! mapping sends a batch's shard and sequence numbers, not its records, to
//! `StreamFailuresQueue`; the scheduler's tick reads them again from the stream and
//! applies them exactly once. Without it `pending`, the terminal counts and the tenants'
//! counts (in no index, so never healed by the sweep) stay wrong for good.
//!
//! The records are the table's real stream records (DynamoDB Local), applied as the stream
//! function applies a Lambda event's; the failure queue is moto's SQS, its messages in the
//! format AWS documents for a DynamoDB stream's on-failure destination.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::Bytes;
use axum::routing::post;
use axum::{Json, Router};
use ojs_core::tenant::TenantId;
use ojs_store::{Change, FailureQueue, RedriveReport, StreamRedrive};
use ojs_tests::fault_proxy::{
    dynamodb_endpoint, raw_dynamodb_endpoint, store_through, table_items, Fault, FaultProxy, Filter,
};
use ojs_tests::{fresh_store, stream_records, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

use super::stream_once::{counters_match_the_table, workload};

/// The stream function's event source mapping's `BatchSize`.
const BATCH_SIZE: usize = 100;

/// One job in each of 90 new queues, in one request: with the rest of the workload, two
/// batches each touching more counter items and event pages than one transaction holds,
/// so each is applied in runs and a given-up one is left half applied.
async fn wide_batch(app: &TestApp) -> anyhow::Result<()> {
    let jobs: Vec<Value> = (0..90)
        .map(|i| json!({"type": "rd.wide", "args": [i], "options": {"queue": format!("redrive-w-{i:02}")}}))
        .collect();
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({"jobs": jobs})),
        )
        .await?;
    anyhow::ensure!(r.status < 300, "batch: {} {}", r.status, r.body);
    Ok(())
}

/// Pushes `job` for `tenant`; its id.
async fn push_as(app: &TestApp, tenant: &str, job: Value) -> anyhow::Result<String> {
    let r = app
        .call_as(Some(tenant), Method::POST, "/ojs/v1/jobs", Some(job))
        .await?;
    anyhow::ensure!(r.status == 201, "{:?}", r.body);
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

/// The tenants' part of the workload, in queue `redrive-t`: acme's three jobs (one
/// completed, one discarded, one left available) and beta's scheduled one. Returns each
/// job's tenant by id.
async fn tenant_workload(app: &TestApp) -> anyhow::Result<BTreeMap<String, &'static str>> {
    let q = "redrive-t";
    let later = ojs_core::time::format(&(ojs_core::time::now() + chrono::Duration::minutes(10)));
    let mut tenants = BTreeMap::new();
    for i in 0..3 {
        let job = json!({"type": "rd.t", "args": [i], "options": {"queue": q, "retry": {"max_attempts": 1}}});
        tenants.insert(push_as(app, "acme", job).await?, "acme");
    }
    let job = json!({"type": "rd.t", "args": [], "options": {"queue": q}, "scheduled_at": later});
    tenants.insert(push_as(app, "beta", job).await?, "beta");
    ojs_tests::after_index_lag().await;
    let fetch = json!({"queues": [q], "count": 2, "worker_id": "rd-w"});
    let got = app
        .call_as(
            Some("acme"),
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(fetch),
        )
        .await?;
    let ids = got.job_ids();
    anyhow::ensure!(ids.len() == 2, "fetched {}", got.body);
    for (path, body) in [
        ("/ojs/v1/workers/ack", json!({"job_id": ids[0]})),
        (
            "/ojs/v1/workers/nack",
            json!({"job_id": ids[1], "error": {"message": "no"}}),
        ),
    ] {
        let r = app
            .call_as(Some("acme"), Method::POST, path, Some(body))
            .await?;
        anyhow::ensure!(r.status < 300, "{path}: {} {}", r.status, r.body);
    }
    Ok(tenants)
}

/// Every tenant counter equals a count of that tenant's jobs by their states.
async fn tenant_counters_match(
    app: &TestApp,
    tenants: &BTreeMap<String, &'static str>,
    phase: &str,
) -> anyhow::Result<()> {
    let mut counted: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    for (id, tenant) in tenants {
        let info = app.info(id).await?;
        let state = info.body["job"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        *counted.entry(tenant).or_default().entry(state).or_default() += 1;
    }
    for (tenant, states) in &counted {
        let id = TenantId::parse(tenant)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .context("a tenant")?;
        let stats = app
            .store
            .derived()
            .tenant_stats(&id)
            .await?
            .unwrap_or_default();
        let s = stats.queues.get("redrive-t").cloned().unwrap_or_default();
        let held = BTreeMap::from([
            ("available", s.available),
            ("scheduled", s.scheduled),
            ("active", s.active),
            ("completed", s.completed),
            ("discarded", s.discarded),
        ]);
        let want: BTreeMap<&str, u64> = held
            .keys()
            .map(|st| (*st, states.get(*st).copied().unwrap_or(0)))
            .collect();
        assert_eq!(held, want, "{phase}: {tenant}'s counters against its jobs");
    }
    Ok(())
}

/// Whether a stream record (Lambda's JSON) is of a job's own item: what the event source
/// mapping's filter lets through (`infra/template.yaml`, `FilterCriteria`).
pub(crate) fn is_job_record(record: &Value) -> bool {
    let keys = &record["dynamodb"]["Keys"];
    keys["pk"]["S"]
        .as_str()
        .is_some_and(|pk| pk.starts_with("JOB#"))
        && keys["sk"]["S"] == "JOB"
}

/// The invocation record the event source mapping sends to its on-failure destination
/// for a batch it gave up on (the AWS Lambda developer guide's example, this batch's
/// position in it).
pub(crate) fn invocation_record(stream_arn: &str, shard: &str, batch: &[Value]) -> String {
    let seq = |r: Option<&Value>| r.map(|r| r["dynamodb"]["SequenceNumber"].clone());
    json!({
        "requestContext": {
            "requestId": uuid::Uuid::new_v4().to_string(),
            "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:ojs-stream",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": 11
        },
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "version": "1.0",
        "timestamp": ojs_core::time::format(&ojs_core::time::now()),
        "DDBStreamBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": seq(batch.first()),
            "endSequenceNumber": seq(batch.last()),
            "approximateArrivalOfFirstRecord": "2026-01-01T00:00:00Z",
            "approximateArrivalOfLastRecord": "2026-01-01T00:00:01Z",
            "batchSize": batch.len(),
            "streamArn": stream_arn
        }
    })
    .to_string()
}

/// The only shard of `stream_arn` (DynamoDB Local opens one per new table).
pub(crate) async fn only_shard(
    streams: &aws_sdk_dynamodbstreams::Client,
    arn: &str,
) -> anyhow::Result<String> {
    let out = streams.describe_stream().stream_arn(arn).send().await?;
    let shards: Vec<String> = out
        .stream_description()
        .map(|d| {
            d.shards()
                .iter()
                .filter_map(|s| s.shard_id().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    anyhow::ensure!(shards.len() == 1, "shards: {shards:?}");
    Ok(shards[0].clone())
}

/// The job records `table`'s stream holds (what the event source mapping's filter lets
/// through), with the stream's ARN and its only shard.
async fn job_records(table: &str) -> anyhow::Result<(String, String, Vec<Value>)> {
    let (arn, records) = stream_records(table).await?;
    let streams =
        ojs_store::streams_client_for(&ojs_store::sdk_config().await, &raw_dynamodb_endpoint());
    let shard = only_shard(&streams, &arn).await?;
    Ok((
        arn,
        shard,
        records.into_iter().filter(is_job_record).collect(),
    ))
}

/// A failure queue of this test on the local SQS, and the redrive of it.
async fn failure_queue() -> anyhow::Result<(aws_sdk_sqs::Client, String, StreamRedrive)> {
    let sdk = ojs_store::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let name = format!("ojs-stream-failures-{}", uuid::Uuid::now_v7().simple());
    let url = sqs
        .create_queue()
        .queue_name(name)
        .send()
        .await?
        .queue_url()
        .context("queue URL")?
        .to_owned();
    let streams = ojs_store::streams_client_for(&sdk, &raw_dynamodb_endpoint());
    // A failed batch is visible again at once, so the test's next run sees it.
    let redrive =
        StreamRedrive::new(sqs.clone(), streams, url.clone()).with_visibility(Duration::ZERO);
    Ok((sqs, url, redrive))
}

async fn send_all(sqs: &aws_sdk_sqs::Client, url: &str, bodies: &[String]) -> anyhow::Result<()> {
    for body in bodies {
        sqs.send_message()
            .queue_url(url)
            .message_body(body)
            .send()
            .await?;
    }
    Ok(())
}

/// How many messages the queue holds (visible or taken).
async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<u64> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await?;
    let attrs = out.attributes().cloned().unwrap_or_default();
    let get = |a: A| {
        attrs
            .get(&a)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(get(A::ApproximateNumberOfMessages) + get(A::ApproximateNumberOfMessagesNotVisible))
}

/// What the stream's application derived: every counter item and event page, as stored.
async fn derived_items(table: &str) -> anyhow::Result<Vec<String>> {
    let mut out: Vec<String> = table_items(table)
        .await?
        .into_iter()
        .filter(|i| {
            let text = |k: &str| {
                i.get(k)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            text("sk").starts_with("~COUNTS#")
                || text("sk").starts_with("~TCOUNTS#")
                || text("pk").starts_with("EVT#")
        })
        .map(|i| {
            let sorted: BTreeMap<_, _> = i.into_iter().filter(|(k, _)| k != "ttl").collect();
            format!("{sorted:?}")
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Every batch of the table's stream is given up the way the stream function gives one
/// up: its first run's transaction lands but its answer is lost, and every attempt after
/// it fails, so the batch fails after a part of it was applied. Each batch's position goes
/// to the failure queue; the redrive applies the rest of each, and nothing twice: every
/// queue counter, `completed` and `pending` included, and every tenant counter equals a
/// count of the table. A second redrive of the same messages changes nothing.
#[tokio::test]
async fn a_given_up_stream_batch_is_redriven_exactly_once() -> anyhow::Result<()> {
    let app = TestApp::spawn_on_store_without_stream(fresh_store().await?).await?;
    workload(&app).await?;
    // The tenants' completed and discarded jobs after the wide batch: in a batch's later
    // run, which a given-up delivery left unapplied.
    wide_batch(&app).await?;
    let tenants = tenant_workload(&app).await?;
    let table = app.store.table().to_owned();
    let (sqs, url, redrive) = failure_queue().await?;
    let (arn, shard, jobs) = job_records(&table).await?;

    let proxy = FaultProxy::start(&dynamodb_endpoint(), 35).await?;
    let faulty = store_through(&proxy.url, &table).await;
    let mut messages = Vec::new();
    for batch in jobs.chunks(BATCH_SIZE) {
        let changes = batch
            .iter()
            .map(|r| Change::from_lambda_record(r).map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<Vec<_>>>()?;
        proxy.script(
            Filter::op("TransactWriteItems"),
            &[
                Fault::ServerErrorAfter,
                Fault::ServerError,
                Fault::ServerError,
            ],
        );
        assert!(
            faulty.derived().apply_changes(&changes).await.is_err(),
            "the batch should fail"
        );
        assert_eq!(proxy.scripted_left(), 0);
        messages.push(invocation_record(&arn, &shard, batch));
    }
    proxy.heal();
    assert!(messages.len() >= 2, "{} batches", messages.len());
    send_all(&sqs, &url, &messages).await?;

    let far = Instant::now() + Duration::from_secs(600);
    let report = redrive.run(app.store.derived(), far).await;
    assert_eq!(
        (report.batches, report.records, report.lost, report.failed),
        (messages.len(), jobs.len(), 0, 0),
        "{report:?}"
    );
    // Each batch's first run had landed: skipped, not applied again; the rest applied.
    assert!(report.replayed >= messages.len(), "{report:?}");
    assert!(
        report.replayed < report.records,
        "no batch was left half applied: {report:?}"
    );
    assert_eq!(
        queue_depth(&sqs, &url).await?,
        0,
        "the redriven messages are deleted"
    );
    counters_match_the_table(&app.store, "after the redrive").await?;
    tenant_counters_match(&app, &tenants, "after the redrive").await?;

    // The same messages again (SQS delivers at least once): nothing changes.
    let derived = derived_items(&table).await?;
    send_all(&sqs, &url, &messages).await?;
    let again = redrive.run(app.store.derived(), far).await;
    assert_eq!(
        again,
        RedriveReport {
            batches: messages.len(),
            records: jobs.len(),
            replayed: jobs.len(),
            lost: 0,
            failed: 0,
            deliveries: 0,
        }
    );
    assert_eq!(
        derived_items(&table).await?,
        derived,
        "a second redrive changed derived items"
    );
    assert_eq!(queue_depth(&sqs, &url).await?, 0);
    app.teardown().await;
    Ok(())
}

/// A redrive that cannot write (DynamoDB failing) leaves the message for a later run,
/// which applies it; a batch whose records the stream no longer holds (its shard gone
/// after the 24 hours' retention) and a message naming no batch are logged, counted as
/// lost and deleted, never tried again.
#[tokio::test]
async fn a_failed_redrive_is_retried_and_a_lost_batch_is_dropped() -> anyhow::Result<()> {
    let app = TestApp::spawn_on_store_without_stream(fresh_store().await?).await?;
    let q = "redrive-retry";
    for i in 0..3 {
        let r = app
            .push(json!({"type": "rd.r", "args": [i], "options": {"queue": q}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
    }
    let table = app.store.table().to_owned();
    let (sqs, url, redrive) = failure_queue().await?;
    let (arn, shard, jobs) = job_records(&table).await?;
    anyhow::ensure!(jobs.len() == 3, "{} job records", jobs.len());
    send_all(&sqs, &url, &[invocation_record(&arn, &shard, &jobs)]).await?;

    // Every write fails (the SDK's three attempts): the message stays.
    let proxy = FaultProxy::start(&dynamodb_endpoint(), 36).await?;
    let faulty = store_through(&proxy.url, &table).await;
    proxy.script(
        Filter::op("TransactWriteItems"),
        &[Fault::ServerError, Fault::ServerError, Fault::ServerError],
    );
    let far = Instant::now() + Duration::from_secs(600);
    let report = redrive.run(faulty.derived(), far).await;
    assert_eq!((report.batches, report.failed), (0, 1), "{report:?}");
    assert_eq!(queue_depth(&sqs, &url).await?, 1, "the message is kept");
    let stats = app
        .store
        .derived()
        .queue_stats(&ojs_core::QueueName::parse(q).map_err(|e| anyhow::anyhow!("{e:?}"))?)
        .await?;
    assert_eq!(stats.available, 0, "nothing was applied");

    let report = redrive.run(app.store.derived(), far).await;
    assert_eq!(
        (report.batches, report.records, report.failed),
        (1, 3, 0),
        "{report:?}"
    );
    assert_eq!(queue_depth(&sqs, &url).await?, 0);
    let stats = app
        .store
        .derived()
        .queue_stats(&ojs_core::QueueName::parse(q).map_err(|e| anyhow::anyhow!("{e:?}"))?)
        .await?;
    assert_eq!(stats.available, 3);

    // Past the retention: the shard is gone. Not a batch at all: a message of another kind.
    let mut gone: Value = serde_json::from_str(&invocation_record(&arn, &shard, &jobs))?;
    gone["DDBStreamBatchInfo"]["shardId"] = json!("shardId-00000001573689847184-864758bb");
    send_all(
        &sqs,
        &url,
        &[gone.to_string(), json!({"hello": 1}).to_string()],
    )
    .await?;
    let report = redrive.run(app.store.derived(), far).await;
    assert_eq!(
        (report.batches, report.lost, report.failed),
        (0, 2, 0),
        "{report:?}"
    );
    assert_eq!(
        queue_depth(&sqs, &url).await?,
        0,
        "lost batches are not tried again"
    );
    let stats = app
        .store
        .derived()
        .queue_stats(&ojs_core::QueueName::parse(q).map_err(|e| anyhow::anyhow!("{e:?}"))?)
        .await?;
    assert_eq!(stats.available, 3, "a lost batch changes nothing");
    app.teardown().await;
    Ok(())
}

/// A receiver on loopback that records each request's JSON body and answers `answer`.
async fn receiver(answer: Value) -> anyhow::Result<(String, Arc<Mutex<Vec<Value>>>)> {
    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = Arc::clone(&got);
    let router = Router::new().route(
        "/",
        post(move |body: Bytes| {
            let (seen, answer) = (Arc::clone(&seen), answer.clone());
            async move {
                if let Ok(mut g) = seen.lock() {
                    g.push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                }
                Json(answer)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok((url, got))
}

fn got(of: &Arc<Mutex<Vec<Value>>>) -> Vec<Value> {
    of.lock().map(|g| g.clone()).unwrap_or_default()
}

/// A given-up batch was never planned either: the redrive hands its deliveries over as
/// the stream function would have. A job completed in the batch reaches the webhook
/// subscribed to `job.completed` (and no other event does), and a job enqueued in it for
/// a push endpoint is offered to the endpoint, which completes it. Without a redrive of
/// the deliveries neither receiver hears anything and the pushed job waits for ever.
#[tokio::test]
async fn a_redriven_batch_makes_its_deliveries() -> anyhow::Result<()> {
    let app = TestApp::spawn_on_store_without_stream(fresh_store().await?).await?;
    let now = ojs_core::time::now();
    let (hook_url, hooked) = receiver(json!({})).await?;
    let subscription = ojs_core::webhook::Subscription::from_json(
        &json!({"url": hook_url, "events": ["job.completed"]}),
        true,
    )?;
    app.store
        .webhooks()
        .put(
            &subscription,
            "whsec_redrive".into(),
            None,
            &Default::default(),
            now,
        )
        .await?;
    let (push_url, pushed) = receiver(json!({"status": "completed"})).await?;
    let endpoint = ojs_core::push::PushEndpoint::from_json(
        &json!({"endpoint": push_url, "job_types": ["rd.push"], "queues": ["redrive-push"],
            "config": {"signing_secret": "whsec_redrive_0123456789"}}),
        true,
    )?;
    app.store.push_endpoints().put(&endpoint, None, now).await?;

    let q = "redrive-hook";
    let done = push_as(
        &app,
        "acme",
        json!({"type": "rd.hook", "args": [], "options": {"queue": q}}),
    )
    .await?;
    ojs_tests::after_index_lag().await;
    let fetched = app
        .call_as(
            Some("acme"),
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": [q], "worker_id": "rd-w"})),
        )
        .await?;
    anyhow::ensure!(fetched.job_ids() == [done.clone()], "{}", fetched.body);
    let acked = app
        .call_as(
            Some("acme"),
            Method::POST,
            "/ojs/v1/workers/ack",
            Some(json!({"job_id": done})),
        )
        .await?;
    anyhow::ensure!(acked.status == 200, "{}", acked.body);
    let offered = push_as(
        &app,
        "acme",
        json!({"type": "rd.push", "args": [7], "options": {"queue": "redrive-push"}}),
    )
    .await?;

    let table = app.store.table().to_owned();
    let (sqs, url, redrive) = failure_queue().await?;
    let (arn, shard, jobs) = job_records(&table).await?;
    send_all(&sqs, &url, &[invocation_record(&arn, &shard, &jobs)]).await?;

    // Made where the stream function's deliveries are made, waited for here.
    let sdk = ojs_store::sdk_config().await;
    let push = ojs_push::Dispatcher::new(
        app.store.clone(),
        ojs_push::lambda_client(&sdk),
        ojs_push::PushConfig::local(true),
    )
    .map_err(anyhow::Error::msg)?;
    let webhooks = ojs_push::WebhookDispatcher::new(
        app.store.clone(),
        ojs_push::WebhookConfig::local(true, vec![Duration::from_secs(60)]),
    )
    .map_err(anyhow::Error::msg)?;
    let deliveries = ojs_push::PlannedDeliveries::new(
        ojs_push::Planner::new(push.clone(), webhooks.clone()),
        ojs_push::DeliveryQueue::Inline(Arc::new(ojs_push::Deliverer::new(push, webhooks))),
    );
    let far = Instant::now() + Duration::from_secs(600);
    let report = redrive
        .with_deliveries(Arc::new(deliveries))
        .run(app.store.derived(), far)
        .await;
    assert_eq!(
        (
            report.batches,
            report.records,
            report.deliveries,
            report.failed
        ),
        (1, jobs.len(), 2, 0),
        "{report:?}"
    );
    assert_eq!(queue_depth(&sqs, &url).await?, 0);
    let hooks = got(&hooked);
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["type"], "job.completed");
    assert_eq!(hooks[0]["data"]["job_id"], done.as_str());
    let offers = got(&pushed);
    assert_eq!(offers.len(), 1, "{offers:?}");
    assert_eq!(offers[0]["job"]["id"], offered.as_str());
    let info = app.info(&offered).await?;
    assert_eq!(info.body["job"]["state"], "completed", "{}", info.body);
    app.teardown().await;
    Ok(())
}

/// `make dev`'s consumer gives a batch up as the event source mapping does, after its
/// attempts, and reports it to its failure queue in the on-failure destination's format;
/// the redrive of that queue applies it. Without the report the batch's counter moves
/// are lost: the queue's stats read 0 available for the 3 jobs.
#[tokio::test]
async fn a_batch_the_local_consumer_gives_up_is_reported_and_redriven() -> anyhow::Result<()> {
    let app = TestApp::spawn_on_store_without_stream(fresh_store().await?).await?;
    let table = app.store.table().to_owned();
    let sdk = ojs_store::sdk_config().await;
    let name = format!("ojs-local-failures-{}", uuid::Uuid::now_v7().simple());
    let failures = FailureQueue::create(&sdk, &name).await?;
    let streams = ojs_store::streams_client_for(&sdk, &raw_dynamodb_endpoint());
    let proxy = FaultProxy::start(&dynamodb_endpoint(), 37).await?;
    let consumer = store_through(&proxy.url, &table)
        .await
        .with_stream_failures(failures.clone())
        .with_local_stream(streams.clone(), true, None)
        .await?;
    let q = "redrive-local";
    for i in 0..3 {
        let r = app
            .push(json!({"type": "rd.l", "args": [i], "options": {"queue": q}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
    }
    // Every application fails: each catch-up is one more attempt at the batch, until the
    // consumer gives it up and reports it.
    proxy.set_rate(1.0, &[Fault::ServerError], Filter::op("TransactWriteItems"));
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut catch_ups = 0;
    while queue_depth(&sqs, failures.url()).await? == 0 {
        anyhow::ensure!(
            catch_ups < 40,
            "no batch reported after {catch_ups} catch-ups"
        );
        consumer.catch_up().await;
        catch_ups += 1;
    }
    proxy.heal();
    let stats = |app: &TestApp| {
        let store = app.store.clone();
        async move {
            let queue = ojs_core::QueueName::parse(q).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            anyhow::Ok(store.derived().queue_stats(&queue).await?)
        }
    };
    assert_eq!(stats(&app).await?.available, 0, "the batch was not applied");

    let far = Instant::now() + Duration::from_secs(600);
    let report = failures
        .redrive(streams)
        .run(app.store.derived(), far)
        .await;
    assert_eq!(
        (report.batches, report.records, report.lost, report.failed),
        (1, 3, 0, 0),
        "{report:?}"
    );
    assert_eq!(queue_depth(&sqs, failures.url()).await?, 0);
    assert_eq!(stats(&app).await?.available, 3);
    counters_match_the_table(&app.store, "after the local redrive").await?;
    app.teardown().await;
    Ok(())
}
