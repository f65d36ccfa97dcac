//! Queue counters (`shared/store/src/derived/counts.rs`): the change stream consumer adds every
//! transition's move to atomic counters, and queue stats read those counters instead of
//! counting the indexes. The indexes are the truth: after each phase of a workload that
//! makes every kind of transition, the counters must say what a count of the indexes says.

use std::time::Duration;

use futures::future::join_all;
use ojs_core::QueueName;
use ojs_store::{Change, QueueStats, Store};
use ojs_tests::{fresh_store, Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

fn id_of(reply: &Reply) -> String {
    reply.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn ids_of(reply: &Reply) -> Vec<String> {
    reply.body["jobs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|j| j["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The queue's counts as its counters hold them, checked against a count of the indexes.
async fn counted(store: &Store, queue: &str, phase: &str) -> anyhow::Result<QueueStats> {
    let q = QueueName::parse(queue).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let from_counters = store.derived().queue_stats(&q).await?;
    let mut from_indexes = from_counters.clone();
    ojs_tests::after_index_lag().await;
    store
        .derived()
        .count_from_indexes(&q, &mut from_indexes)
        .await?;
    assert_eq!(
        from_counters, from_indexes,
        "{phase}: counters of {queue} disagree with its indexes"
    );
    Ok(from_counters)
}

fn total(s: &QueueStats) -> u64 {
    s.available
        + s.scheduled
        + s.retryable
        + s.active
        + s.pending
        + s.completed
        + s.discarded
        + s.cancelled
}

async fn push(app: &TestApp, job: Value) -> anyhow::Result<String> {
    let r = app.push(job).await?;
    anyhow::ensure!(r.status == 201, "push: {:?}", r.body);
    Ok(id_of(&r))
}

#[tokio::test]
async fn counters_follow_every_kind_of_transition() -> anyhow::Result<()> {
    // Four shards, so moves land on several counter items that stats must add up.
    let app =
        TestApp::spawn_on_store(fresh_store().await?.with_config(|c| c.queue_shards = 4)).await?;
    let q = "cnt";
    let in_ten_minutes =
        ojs_core::time::format(&(ojs_core::time::now() + chrono::Duration::minutes(10)));
    let retry = json!({"max_attempts": 3, "initial_interval": "PT1M", "jitter": false});
    for i in 0..12 {
        push(
            &app,
            json!({"type": "c.now", "args": [i], "options": {"queue": q, "retry": retry}}),
        )
        .await?;
    }
    for i in 0..4 {
        push(&app, json!({"type": "c.soon", "args": [i], "options": {"queue": q}, "scheduled_at": in_ten_minutes})).await?;
    }
    let mut far = Vec::new();
    for i in 0..3 {
        far.push(push(&app, json!({"type": "c.far", "args": [i], "options": {"queue": q}, "scheduled_at": "2099-01-01T00:00:00Z"})).await?);
    }
    for i in 0..2 {
        push(&app, json!({"type": "c.expiring", "args": [i], "options": {"queue": q, "expires_at": in_ten_minutes}})).await?;
    }
    let batch: Vec<Value> = (0..5)
        .map(|i| json!({"type": "c.batch", "args": [i], "options": {"queue": q, "retry": retry}}))
        .collect();
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({"jobs": batch})),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "batch: {:?}", r.body);
    let s = counted(&app.store, q, "after pushes").await?;
    assert_eq!((s.available, s.scheduled, total(&s)), (19, 7, 26));

    // Workers: 10 claimed; 3 completed, 2 failed into retry, 1 failed for good, 1
    // cancelled while active, 3 left active under a 1-minute lease: long enough to outlast
    // the calls below on a slow machine (a lease that ran out before the count would
    // rightly be moved by the next FETCH), short enough for the sweep an hour later.
    // A FETCH may answer fewer than `count` (it stops claiming at its time budget, which a
    // loaded DynamoDB Local can use up): ask again for the rest, a few times at most.
    let mut fetched = Vec::new();
    for _ in 0..5 {
        if fetched.len() == 10 {
            break;
        }
        fetched.extend(ids_of(
            &app.fetch(
                json!({"queues": [q], "count": 10 - fetched.len(), "worker_id": "w1",
                "visibility_timeout_ms": 60_000}),
            )
            .await?,
        ));
    }
    assert_eq!(fetched.len(), 10);
    for id in &fetched[..3] {
        assert_eq!(
            app.ack(json!({"job_id": id, "worker_id": "w1"}))
                .await?
                .status,
            200
        );
    }
    for id in &fetched[3..5] {
        let r = app
            .nack(json!({"job_id": id, "worker_id": "w1", "error": {"message": "again", "retryable": true}}))
            .await?;
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    let r = app
        .nack(json!({"job_id": fetched[5], "worker_id": "w1", "error": {"message": "never", "retryable": false}}))
        .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(app.cancel(&fetched[6]).await?.status, 200);
    // Cancelled while scheduled and while available.
    assert_eq!(app.cancel(&far[0]).await?.status, 200);
    let waiting = ids_of(
        &app.fetch(json!({"queues": [q], "count": 1, "worker_id": "peek"}))
            .await?,
    );
    assert_eq!(app.nack(json!({"job_id": waiting[0], "worker_id": "peek", "error": {"message": "back"}, "requeue": true})).await?.status, 200);
    assert_eq!(app.cancel(&waiting[0]).await?.status, 200);
    let s = counted(&app.store, q, "after workers").await?;
    assert_eq!(
        (s.active, s.retryable, s.completed, s.cancelled, total(&s)),
        (3, 2, 3, 3, 26)
    );
    assert!(s.discarded >= 1);

    // An hour later: leases ran out (back to available), retries and the near schedule are
    // due, expiring jobs that never ran are discarded.
    let later = ojs_core::time::now() + chrono::Duration::hours(1);
    ojs_tests::after_index_lag().await;
    ojs_tests::sweep(&app.store, later).await?;
    let s = counted(&app.store, q, "after the sweep").await?;
    assert_eq!(
        (s.active, s.retryable, s.scheduled, total(&s)),
        (0, 0, 2, 26)
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn workflow_steps_and_dead_letter_retries_are_counted() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let created = app
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "chain", "steps": [
            {"id": "a", "type": "wf.a", "options": {"queue": "cw"}},
            {"id": "b", "type": "wf.b", "depends_on": ["a"], "options": {"queue": "cw"}},
            {"id": "c", "type": "wf.c", "depends_on": ["b"], "options": {"queue": "cw"}}]})),
        )
        .await?;
    anyhow::ensure!(created.status == 201, "{:?}", created.body);
    let s = counted(&app.store, "cw", "workflow created").await?;
    assert_eq!((s.available, s.pending), (1, 2));
    let a = ids_of(&app.fetch(json!({"queues": ["cw"]})).await?);
    assert_eq!(app.ack(json!({"job_id": a[0]})).await?.status, 200);
    let s = counted(&app.store, "cw", "first step done").await?;
    assert_eq!((s.available, s.pending, s.completed), (1, 1, 1));
    let wf = created.body["workflow"]["id"].as_str().unwrap_or_default();
    app.call(Method::DELETE, &format!("/ojs/v1/workflows/{wf}"), None)
        .await?;
    let s = counted(&app.store, "cw", "workflow cancelled").await?;
    assert_eq!((s.available, s.pending, s.cancelled), (0, 0, 2));

    let id = push(&app, json!({"type": "dl.job", "args": [], "options": {"queue": "cd", "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}})).await?;
    app.fetch(json!({"queues": ["cd"]})).await?;
    app.nack(json!({"job_id": id, "error": {"message": "no"}}))
        .await?;
    let s = counted(&app.store, "cd", "dead-lettered").await?;
    assert_eq!((s.active, s.discarded), (0, 1));
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/dead-letter/{id}/retry"),
            None,
        )
        .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let s = counted(&app.store, "cd", "retried from the dead letter queue").await?;
    // Terminal counts are transitions ever made: the retry does not take one back.
    assert_eq!((s.available, s.discarded), (1, 1));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn counters_stay_exact_under_racing_workers() -> anyhow::Result<()> {
    let app =
        TestApp::spawn_on_store(fresh_store().await?.with_config(|c| c.queue_shards = 2)).await?;
    let jobs: Vec<Value> = (0..200)
        .map(|i| json!({"type": "race.job", "args": [i], "options": {"queue": "cr"}}))
        .collect();
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({"jobs": jobs})),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "{:?}", r.body);
    let workers = (0..16).map(|w| {
        let app = &app;
        async move {
            let worker = format!("w{w}");
            let mut done = 0;
            let mut empty = 0;
            while empty < 3 {
                let got = ids_of(
                    &app.fetch(json!({"queues": ["cr"], "count": 3, "worker_id": worker}))
                        .await?,
                );
                if got.is_empty() {
                    empty += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                for id in got {
                    let r = app.ack(json!({"job_id": id, "worker_id": worker})).await?;
                    anyhow::ensure!(r.status == 200, "{:?}", r.body);
                    done += 1;
                }
            }
            anyhow::Ok(done)
        }
    });
    let done: usize = join_all(workers)
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?
        .into_iter()
        .sum();
    assert_eq!(done, 200);
    let s = counted(&app.store, "cr", "after the race").await?;
    assert_eq!((s.available, s.active, s.completed), (0, 0, 200));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn stats_read_one_batch_of_counter_items_whatever_the_backlog() -> anyhow::Result<()> {
    let app = TestApp::spawn_rules_only().await?;
    let jobs: Vec<Value> = (0..300)
        .map(|i| json!({"type": "big.job", "args": [i], "options": {"queue": "cb"}}))
        .collect();
    app.call(
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(json!({"jobs": jobs})),
    )
    .await?;
    let q = QueueName::parse("cb").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    // The stream consumer's writes are its own (the stream function's on AWS).
    let before = app.store.usage();
    let s = app.store.derived().queue_stats(&q).await?;
    let cost = app.store.usage() - before;
    assert_eq!(s.available, 300);
    assert_eq!(cost.calls, 1, "stats must be one BatchGetItem");

    app.teardown().await;
    Ok(())
}

/// A shard still for less than its quiet period is not repaired, however often the sweep
/// looks: the stream may not have applied its last moves yet, which the indexes already
/// show. The same shard with no quiet period is repaired at once.
#[tokio::test]
async fn the_sweep_leaves_a_shard_still_for_less_than_its_quiet_period() -> anyhow::Result<()> {
    let store = fresh_store()
        .await?
        .with_config(|c| c.counter_heal_quiet = Duration::from_secs(3_600));
    let app = TestApp::spawn_on_store(store).await?;
    let q = QueueName::parse("hq").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    pushed_with_one_counted_thrice(&app, "hq", 3).await?;
    assert_eq!(app.store.derived().queue_stats(&q).await?.available, 5);
    ojs_tests::after_index_lag().await;
    for _ in 0..3 {
        assert_eq!(
            app.store
                .derived()
                .heal_counters(std::slice::from_ref(&q))
                .await?,
            0
        );
    }
    assert_eq!(app.store.derived().queue_stats(&q).await?.available, 5);
    let eager = app
        .store
        .clone()
        .with_config(|c| c.counter_heal_quiet = Duration::ZERO);
    assert_eq!(
        eager
            .derived()
            .heal_counters(std::slice::from_ref(&q))
            .await?,
        1
    );
    assert_eq!(counted(&app.store, "hq", "repaired").await?.available, 3);
    app.teardown().await;
    Ok(())
}

/// Pushes `n` jobs to `queue` and replays the last one's creation twice, as a stream
/// batch delivered three times would: the counters show two jobs too many.
async fn pushed_with_one_counted_thrice(app: &TestApp, queue: &str, n: i32) -> anyhow::Result<()> {
    let job = |i: i32| json!({"type": "heal.job", "args": [i], "options": {"queue": queue}});
    for i in 0..n - 1 {
        push(app, job(i)).await?;
    }
    let replayed = push(app, job(n - 1)).await?;
    replay_creation(app, &replayed).await?;
    replay_creation(app, &replayed).await?;
    Ok(())
}

/// Replays the stream record of `id` having been created as it is now: what the stream
/// function does when AWS delivers a batch again (at least once), counting its moves twice.
async fn replay_creation(app: &TestApp, id: &str) -> anyhow::Result<()> {
    let id = ojs_core::JobId::parse(id).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let job = app
        .store
        .engine()
        .get_job(&id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no job {id}"))?;
    app.store
        .derived()
        .apply_changes(&[Change::between(None, Some(&job))])
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_recount_repairs_counters_that_drifted() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            push(
                &app,
                json!({"type": "rc.job", "args": [i], "options": {"queue": "rc"}}),
            )
            .await?,
        );
    }
    ojs_tests::after_index_lag().await;
    let claimed = ids_of(&app.fetch(json!({"queues": ["rc"], "count": 2})).await?);
    assert_eq!(claimed.len(), 2);
    // A stream batch delivered twice: two claimed jobs' records counted again.
    for id in &claimed {
        replay_creation(&app, id).await?;
    }
    let drifted = app
        .call(Method::GET, "/ojs/v1/queues/rc/stats", None)
        .await?;
    assert_eq!(drifted.body["queue"]["active"], 4);
    // A recount sets the live counts from the indexes; moves after it count as usual.
    ojs_tests::after_index_lag().await;
    let r = app
        .call(Method::POST, "/ojs/v1/admin/queues/rc/recount", None)
        .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        (
            r.body["queue"]["available"].clone(),
            r.body["queue"]["active"].clone()
        ),
        (json!(3), json!(2))
    );
    assert_eq!(app.ack(json!({"job_id": claimed[0]})).await?.status, 200);
    let s = counted(&app.store, "rc", "after the recount").await?;
    assert_eq!((s.available, s.active, s.completed), (3, 1, 1));
    let bad = app
        .call(Method::POST, "/ojs/v1/admin/queues/Bad!/recount", None)
        .await?;
    assert_eq!(bad.status, 400);
    app.teardown().await;
    Ok(())
}

/// Moves counted twice (a stream batch delivered again) are repaired by the sweep once the
/// shard has been quiet for one sweep, and only then; a checked quiet shard is not counted
/// again.
#[tokio::test]
async fn the_sweep_repairs_the_counters_of_a_quiet_shard() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = QueueName::parse("ch").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let job = |i: i32| json!({"type": "heal.job", "args": [i], "options": {"queue": "ch"}});
    pushed_with_one_counted_thrice(&app, "ch", 4).await?;
    let s = app.store.derived().queue_stats(&q).await?;
    assert_eq!(s.available, 6, "the counters took two moves twice");

    // First sight of the shard: busy as far as the sweep knows, left alone.
    let now = ojs_core::time::now();
    ojs_tests::after_index_lag().await;
    assert_eq!(ojs_tests::sweep(&app.store, now).await?.healed, 0);
    assert_eq!(app.store.derived().queue_stats(&q).await?.available, 6);
    // Quiet since: counted and repaired.
    assert_eq!(ojs_tests::sweep(&app.store, now).await?.healed, 1);
    let s = counted(&app.store, "ch", "after the repair").await?;
    assert_eq!(s.available, 4);
    // Checked at this state: the next look is one read, no count.
    let before = app.store.usage();
    assert_eq!(
        app.store
            .derived()
            .heal_counters(std::slice::from_ref(&q))
            .await?,
        0
    );
    assert_eq!((app.store.usage() - before).calls, 1);

    // Busy again (a move) with another double count: left alone while busy, repaired
    // once quiet.
    let again = push(&app, job(5)).await?;
    replay_creation(&app, &again).await?;
    assert_eq!(
        app.store
            .derived()
            .heal_counters(std::slice::from_ref(&q))
            .await?,
        0
    );
    assert_eq!(app.store.derived().queue_stats(&q).await?.available, 6);
    ojs_tests::after_index_lag().await;
    assert_eq!(
        app.store
            .derived()
            .heal_counters(std::slice::from_ref(&q))
            .await?,
        1
    );
    assert_eq!(
        counted(&app.store, "ch", "after the second repair")
            .await?
            .available,
        5
    );
    app.teardown().await;
    Ok(())
}
