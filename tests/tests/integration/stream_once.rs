//! The change stream's effects applied exactly once (`shared/store/src/derived/stream/apply.rs`):
//! the stream delivers a batch at least once (Lambda retries it from its first record;
//! a drain in a request can be dropped; a write's answer can be lost after it landed),
//! and every counter must still equal a count of the table and every event be stored once.
//!
//! The records are the table's real stream records (read from DynamoDB Local), applied by
//! hand the way the stream function applies a Lambda event's records.

use std::collections::{BTreeMap, BTreeSet};

use ojs_core::QueueName;
use ojs_store::{Applied, Change, EventQuery, Store};
use ojs_tests::fault_proxy::{
    dynamodb_endpoint, store_through, table_items, Fault, FaultProxy, Filter,
};
use ojs_tests::{fresh_store, stream_records, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

/// Every queue's job counts by state, counted in the table itself.
pub(crate) async fn table_counts(
    table: &str,
) -> anyhow::Result<BTreeMap<String, BTreeMap<String, u64>>> {
    let mut counts: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for item in table_items(table).await? {
        let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        if text("sk").as_deref() != Some("JOB") {
            continue;
        }
        if let (Some(queue), Some(state)) = (text("queue"), text("state")) {
            *counts.entry(queue).or_default().entry(state).or_default() += 1;
        }
    }
    Ok(counts)
}

/// Every counter of every queue the table holds jobs of equals a count of the table.
pub(crate) async fn counters_match_the_table(store: &Store, phase: &str) -> anyhow::Result<()> {
    let table = table_counts(store.table()).await?;
    anyhow::ensure!(!table.is_empty(), "{phase}: no jobs");
    for (queue, states) in &table {
        let q = QueueName::parse(queue).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let s = store.derived().queue_stats(&q).await?;
        let held = BTreeMap::from([
            ("available", s.available),
            ("scheduled", s.scheduled),
            ("retryable", s.retryable),
            ("active", s.active),
            ("pending", s.pending),
            ("completed", s.completed),
            ("discarded", s.discarded),
            ("cancelled", s.cancelled),
        ]);
        let counted: BTreeMap<&str, u64> = held
            .keys()
            .map(|st| (*st, states.get(*st).copied().unwrap_or(0)))
            .collect();
        assert_eq!(
            held, counted,
            "{phase}: counters of {queue} against the table"
        );
    }
    Ok(())
}

/// Every event stored for `queues`, in listing order, followed page by page along the
/// cursor.
async fn listed_event_ids(store: &Store, queues: &[String]) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .derived()
            .list_events(&EventQuery {
                queues: queues.to_vec(),
                after: after.clone(),
                limit: 25,
                ..EventQuery::default()
            })
            .await?;
        ids.extend(
            page.events
                .iter()
                .filter_map(|e| e["id"].as_str().map(str::to_owned)),
        );
        if !page.has_more {
            return Ok(ids);
        }
        after = page.cursor;
    }
}

async fn call(app: &TestApp, method: Method, path: &str, body: Value) -> anyhow::Result<Value> {
    let r = app.call(method, path, Some(body)).await?;
    anyhow::ensure!(r.status < 300, "{path}: {} {:?}", r.status, r.body);
    Ok(r.body)
}

/// A workload that makes every kind of move, over a table nobody consumes the stream of:
/// jobs made available, scheduled, claimed, completed, retried, discarded and cancelled,
/// a workflow with pending steps, and one job in each of 60 queues (so a batch touches
/// more counter items and event pages than one transaction holds). Returns the queues.
pub(crate) async fn workload(app: &TestApp) -> anyhow::Result<Vec<String>> {
    let q = "once";
    let later = ojs_core::time::format(&(ojs_core::time::now() + chrono::Duration::minutes(10)));
    let retry = json!({"max_attempts": 2, "initial_interval": "PT1M", "jitter": false});
    let once = json!({"max_attempts": 1});
    let mut ids = Vec::new();
    for i in 0..8 {
        let r = app
            .push(json!({"type": "once.job", "args": [i], "options": {"queue": q, "retry": if i < 4 { &retry } else { &once }}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
        ids.push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    let scheduled = app
        .push(json!({"type": "once.later", "args": [], "options": {"queue": q}, "scheduled_at": later}))
        .await?;
    ojs_tests::after_index_lag().await;
    let claimed = call(
        app,
        Method::POST,
        "/ojs/v1/workers/fetch",
        json!({"queues": [q], "count": 6}),
    )
    .await?;
    let claimed: Vec<String> = claimed["jobs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|j| j["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    anyhow::ensure!(claimed.len() == 6, "claimed {claimed:?}");
    for id in &claimed[..2] {
        call(
            app,
            Method::POST,
            "/ojs/v1/workers/ack",
            json!({"job_id": id}),
        )
        .await?;
    }
    for id in &claimed[2..5] {
        let failed = json!({"job_id": id, "error": {"message": "no"}});
        call(app, Method::POST, "/ojs/v1/workers/nack", failed).await?;
    }
    let waiting = ids
        .iter()
        .find(|id| !claimed.contains(id))
        .cloned()
        .unwrap_or_default();
    call(
        app,
        Method::DELETE,
        &format!("/ojs/v1/jobs/{waiting}"),
        json!({}),
    )
    .await?;
    let scheduled = scheduled.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    call(
        app,
        Method::DELETE,
        &format!("/ojs/v1/jobs/{scheduled}"),
        json!({}),
    )
    .await?;
    call(
        app,
        Method::POST,
        "/ojs/v1/workflows",
        json!({"type": "chain", "steps": [
            {"id": "a", "type": "wf.a", "options": {"queue": "once-wf"}},
            {"id": "b", "type": "wf.b", "depends_on": ["a"], "options": {"queue": "once-wf"}},
            {"id": "c", "type": "wf.c", "depends_on": ["b"], "options": {"queue": "once-wf"}}]}),
    )
    .await?;
    let mut queues = vec![q.to_owned(), "once-wf".to_owned()];
    for i in 0..60 {
        let queue = format!("once-{i:02}");
        let r = app
            .push(json!({"type": "once.wide", "args": [i], "options": {"queue": queue}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
        queues.push(queue);
    }
    Ok(queues)
}

/// The table's stream records so far, as the stream function reads a Lambda event's.
async fn changes_of(store: &Store) -> anyhow::Result<Vec<Change>> {
    let (_, records) = stream_records(store.table()).await?;
    records
        .iter()
        .map(|r| Change::from_lambda_record(r).map_err(|e| anyhow::anyhow!(e)))
        .collect()
}

/// A batch applied, applied again, and delivered again grown by later records (Lambda
/// retries from the batch's first record, with at least its records): every counter,
/// `completed` and `pending` included, equals a count of the table, and the events listed
/// along a cursor are each listed once.
#[tokio::test]
async fn a_stream_batch_delivered_again_changes_nothing_twice() -> anyhow::Result<()> {
    let app = TestApp::spawn_on_store_without_stream(fresh_store().await?).await?;
    let queues = workload(&app).await?;
    let changes = changes_of(&app.store).await?;
    let half = changes.len() / 2;
    let store = &app.store;

    let first = store.derived().apply_changes(&changes[..half]).await?;
    assert_eq!(first.replayed, 0);
    let again = store.derived().apply_changes(&changes[..half]).await?;
    assert_eq!((again.replayed, again.events), (first.jobs, 0), "{again:?}");
    // Grown: the first half is skipped, the rest applied.
    let grown = store.derived().apply_changes(&changes).await?;
    assert_eq!(grown.replayed, first.jobs, "{grown:?}");
    assert!(grown.events > 0);
    let last = store.derived().apply_changes(&changes).await?;
    assert_eq!(
        last,
        Applied {
            jobs: grown.jobs,
            events: 0,
            replayed: grown.jobs,
            unreadable: 0
        }
    );
    counters_match_the_table(store, "after four deliveries").await?;

    // Each event once, the same ones a single rendering of the records gives.
    let listed = listed_event_ids(store, &queues).await?;
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "an event listed twice");
    let now = ojs_core::time::now();
    let rendered: BTreeSet<String> = changes
        .iter()
        .flat_map(|c| c.events(now))
        .map(|e| e.id)
        .collect();
    assert_eq!(
        unique.into_iter().cloned().collect::<BTreeSet<_>>(),
        rendered
    );
    assert_eq!(first.events + grown.events, rendered.len());
    app.teardown().await;
    Ok(())
}

/// A run's transaction that landed but whose answer was lost (a 500, a dropped
/// connection, a timeout after the write) and is sent again by the SDK, or a batch that
/// failed after some of its runs landed and is delivered again: nothing counts twice. A
/// conflict with another transaction is tried again, not failed.
#[tokio::test]
async fn writes_whose_answers_were_lost_are_not_applied_twice() -> anyhow::Result<()> {
    let app = TestApp::spawn_on_store_without_stream(fresh_store().await?).await?;
    workload(&app).await?;
    let changes = changes_of(&app.store).await?;
    let proxy = FaultProxy::start(&dynamodb_endpoint(), 33).await?;
    let faulty = store_through(&proxy.url, app.store.table()).await;
    let transactions = Filter::op("TransactWriteItems");

    // Batches one after another, as Lambda hands them over; each one's first write lands
    // and its answer is lost.
    let step = changes.len() / 6;
    let mut from = 0;
    for fault in [Fault::ServerErrorAfter, Fault::DropAfter, Fault::HangAfter] {
        proxy.script(transactions.clone(), &[fault]);
        let batch = &changes[from..from + step];
        faulty.derived().apply_changes(batch).await?;
        assert_eq!(proxy.scripted_left(), 0, "{fault:?} was not met");
        from += step;
    }
    // Conflicts with another transaction, then the write: tried again within the batch.
    proxy.script(
        transactions.clone(),
        &[Fault::TransactionConflict, Fault::TransactionConflict],
    );
    faulty
        .derived()
        .apply_changes(&changes[from..from + step])
        .await?;
    assert_eq!(proxy.scripted_left(), 0);
    from += step;
    // The rest: its first run lands, every answer after it fails (the SDK's three
    // attempts), so the batch fails, and Lambda delivers it again from its start.
    let rest = &changes[from..];
    proxy.script(
        transactions,
        &[
            Fault::ServerErrorAfter,
            Fault::ServerError,
            Fault::ServerError,
        ],
    );
    assert!(
        faulty.derived().apply_changes(rest).await.is_err(),
        "the batch should fail"
    );
    proxy.heal();
    let redelivered = faulty.derived().apply_changes(rest).await?;
    assert!(redelivered.replayed > 0, "{redelivered:?}");
    counters_match_the_table(&app.store, "after lost answers and a failed batch").await?;
    app.teardown().await;
    Ok(())
}

/// A stats request that drains the stream in process, dropped by its client while its
/// drain's write has landed but not answered (the write forwarded, its answer held back):
/// the counters end equal to a count of the table.
#[tokio::test]
async fn a_stats_request_dropped_mid_drain_counts_nothing_twice() -> anyhow::Result<()> {
    let direct = fresh_store().await?;
    let proxy = FaultProxy::start(&dynamodb_endpoint(), 34).await?;
    let store =
        ojs_tests::with_change_stream(store_through(&proxy.url, direct.table()).await).await?;
    let app = TestApp::spawn_on_store_without_stream(direct).await?;
    let q = QueueName::parse("once-drop").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let jobs: Vec<Value> = (0..20)
        .map(|i| json!({"type": "drop.job", "args": [i], "options": {"queue": q.as_str()}}))
        .collect();
    call(
        &app,
        Method::POST,
        "/ojs/v1/jobs/batch",
        json!({"jobs": jobs}),
    )
    .await?;
    proxy.script(Filter::op("TransactWriteItems"), &[Fault::HangAfter]);
    let mut stats = Box::pin(store.derived().queue_stats(&q));
    // Dropped once the drain's transaction landed (the queue's counter item is in the
    // table), so while its answer is held back.
    let landed = || async {
        let items = table_items(store.table()).await?;
        anyhow::Ok(items.iter().any(|i| {
            i.get("sk")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|sk| sk.starts_with("~COUNTS#"))
        }))
    };
    let dropped = loop {
        tokio::select! {
            _ = &mut stats => break false,
            () = tokio::time::sleep(std::time::Duration::from_millis(10)) => {
                if proxy.scripted_left() == 0 && landed().await? {
                    break true;
                }
            }
        }
    };
    assert!(dropped, "the stats request ended before its write was held");
    drop(stats);
    counters_match_the_table(&store, "after a dropped stats request").await?;
    assert_eq!(store.derived().queue_stats(&q).await?.available, 20);
    app.teardown().await;
    Ok(())
}
