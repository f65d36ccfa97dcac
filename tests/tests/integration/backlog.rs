//! The sweep's backlog metrics against DynamoDB Local: `OldestReadyJobAge` per queue is
//! the wait of the job the next FETCH takes (oldest of the highest priority, over every
//! shard), none for a queue with nothing ready, and the EMF documents carry those values
//! (and nothing for what is empty or zero, which CloudWatch would bill as a metric).

use std::time::Duration;

use ojs_core::time;
use ojs_core::QueueName;
use ojs_store::{SweepReport, OLDEST_READY_JOB_AGE};
use ojs_tests::{fresh_store, TestApp};
use serde_json::{json, Value};

async fn push(app: &TestApp, job: Value) -> anyhow::Result<String> {
    let r = app.push(job).await?;
    anyhow::ensure!(r.status == 201, "push: {:?}", r.body);
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

async fn enqueued_at(app: &TestApp, id: &str) -> anyhow::Result<time::Timestamp> {
    let r = app.info(id).await?;
    let raw = r.body["job"]["enqueued_at"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no enqueued_at: {}", r.body))?;
    Ok(chrono::DateTime::parse_from_rfc3339(raw)?.with_timezone(&chrono::Utc))
}

#[tokio::test]
async fn oldest_ready_job_age_is_the_wait_of_the_next_job_per_queue() -> anyhow::Result<()> {
    let namespace = "OJS/backlog-test";
    let store = fresh_store()
        .await?
        .with_config(|c| c.queue_shards = 3)
        .with_config(|c| c.metrics_namespace = Some(namespace.to_owned()));
    let app = TestApp::spawn_on_store(store.clone()).await?;

    // Queue "bl-fifo": five jobs of one priority spread over three shards; the first is
    // the oldest whatever shard it landed in.
    let first = push(
        &app,
        json!({"type": "bl.job", "queue": "bl-fifo", "args": [0]}),
    )
    .await?;
    for i in 1..5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        push(
            &app,
            json!({"type": "bl.job", "queue": "bl-fifo", "args": [i]}),
        )
        .await?;
    }
    // Queue "bl-prio", pushed through an unsharded server on the same table (one shard:
    // strict order): an old low-priority job, then a newer high-priority one. The head
    // (what FETCH takes next, and what the metric reports) is the newer one.
    let unsharded =
        TestApp::spawn_on_store(store.clone().with_config(|c| c.queue_shards = 1)).await?;
    push(
        &unsharded,
        json!({"type": "bl.job", "queue": "bl-prio", "args": [], "priority": -5}),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let urgent = push(
        &unsharded,
        json!({"type": "bl.job", "queue": "bl-prio", "args": [], "priority": 9}),
    )
    .await?;
    // Queue "bl-done": its only job was fetched: nothing ready.
    push(
        &app,
        json!({"type": "bl.job", "queue": "bl-done", "args": []}),
    )
    .await?;
    let fetched = app
        .fetch(json!({"queues": ["bl-done"], "worker_id": "bl"}))
        .await?;
    anyhow::ensure!(
        fetched.body["jobs"].as_array().map(Vec::len) == Some(1),
        "{:?}",
        fetched.body
    );

    let now = time::now() + chrono::Duration::seconds(100);
    let queues: Vec<QueueName> = ["bl-fifo", "bl-prio", "bl-done"]
        .iter()
        .map(|q| QueueName::parse(q))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!(e.message))?;
    // The ages are read from the ready index: once it shows the FETCH above.
    ojs_tests::after_index_lag().await;
    let ages = store.engine().ready_head_ages(&queues, now).await?;
    let expect_fifo = (now - enqueued_at(&app, &first).await?).to_std()?;
    let expect_prio = (now - enqueued_at(&app, &urgent).await?).to_std()?;
    assert_eq!(ages[0], (queues[0].clone(), Some(expect_fifo)));
    assert_eq!(ages[1], (queues[1].clone(), Some(expect_prio)));
    assert_eq!(ages[2], (queues[2].clone(), None));

    // The EMF lines the scheduler prints carry the same values, one per queue of the
    // table, plus the sweep's counts.
    let report = SweepReport {
        failures: 1,
        ..SweepReport::default()
    };
    let docs = store.engine().emit_sweep_metrics(&report, now).await?;
    let age_of = |q: &str| {
        docs.iter()
            .find(|d| d["Queue"] == q)
            .and_then(|d| d[OLDEST_READY_JOB_AGE].as_f64())
    };
    let close = |got: Option<f64>, want: Duration| {
        got.is_some_and(|g| (g - want.as_secs_f64()).abs() < 0.002)
    };
    assert!(close(age_of("bl-fifo"), expect_fifo), "{docs:#?}");
    assert!(close(age_of("bl-prio"), expect_prio), "{docs:#?}");
    assert!(docs.iter().all(|d| d["Queue"] != "bl-done"), "{docs:#?}");
    let sweep = docs
        .iter()
        .find(|d| d.get("SweepFailures").is_some())
        .ok_or_else(|| anyhow::anyhow!("no sweep document: {docs:#?}"))?;
    assert_eq!(sweep["SweepFailures"], 1);
    for d in &docs {
        assert_eq!(d["_aws"]["CloudWatchMetrics"][0]["Namespace"], namespace);
    }
    // A clean sweep adds no sweep document.
    let clean = store
        .engine()
        .emit_sweep_metrics(&SweepReport::default(), now)
        .await?;
    assert!(clean.iter().all(|d| d.get("SweepFailures").is_none()));
    // Metrics off: nothing printed, nothing read.
    assert!(store
        .with_config(|c| c.metrics_namespace = None)
        .engine()
        .emit_sweep_metrics(&report, now)
        .await?
        .is_empty());
    app.teardown().await;
    Ok(())
}
