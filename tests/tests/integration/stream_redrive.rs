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
use std::time::{Duration, Instant};

use anyhow::Context;
use ojs_core::tenant::TenantId;
use ojs_store::{Change, RedriveReport, StreamRedrive};
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

/// A failure queue of this test on the local SQS, and the redrive of it.
async fn failure_queue() -> anyhow::Result<(aws_sdk_sqs::Client, String, StreamRedrive)> {
    let sdk = aws_config::load_from_env().await;
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
    let (arn, records) = stream_records(&table).await?;
    let streams =
        ojs_store::streams_client_for(&aws_config::load_from_env().await, &raw_dynamodb_endpoint());
    let shard = only_shard(&streams, &arn).await?;
    let jobs: Vec<Value> = records.into_iter().filter(is_job_record).collect();

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
            failed: 0
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
    let (arn, records) = stream_records(&table).await?;
    let streams =
        ojs_store::streams_client_for(&aws_config::load_from_env().await, &raw_dynamodb_endpoint());
    let shard = only_shard(&streams, &arn).await?;
    let jobs: Vec<Value> = records.into_iter().filter(is_job_record).collect();
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
