//! Level 1 behaviour over HTTP: leases, reclaim, execution timeouts, backoff schedules,
//! heartbeats, the dead letter queue and the scheduler sweep.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::DateTime;
use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

fn id_of(reply: &ojs_tests::Reply) -> String {
    reply.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn millis_between(a: &Value, b: &Value) -> i64 {
    let t = |v: &Value| {
        DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default()).map(|t| t.timestamp_millis())
    };
    match (t(a), t(b)) {
        (Ok(a), Ok(b)) => b - a,
        _ => i64::MIN,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_workers_job_goes_to_exactly_one_other_worker_and_its_late_ack_is_refused(
) -> anyhow::Result<()> {
    let app = Arc::new(TestApp::spawn().await?);
    let id = id_of(&app.push(json!({"type": "crash.job", "args": [], "options": {"queue": "crash", "visibility_timeout_ms": 800}})).await?);
    let first = app
        .fetch(json!({"queues": ["crash"], "worker_id": "doomed"}))
        .await?;
    assert_eq!(first.body["jobs"][0]["id"], id.as_str());
    // "doomed" dies here. Eight workers poll until one of them gets the job back.
    let pollers = (0..8).map(|w| {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..30 {
                // A lease longer than any polling can take: a second claim can then only
                // be a double delivery, not the reclaim of an expired lease.
                let r = app.fetch(json!({"queues": ["crash"], "worker_id": format!("p{w}"), "visibility_timeout_ms": 3_600_000})).await?;
                for j in r.body["jobs"].as_array().cloned().unwrap_or_default() {
                    got.push((format!("p{w}"), j));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, anyhow::Error>(got)
        })
    })
    .collect::<Vec<_>>();
    let mut claims = Vec::new();
    for p in pollers {
        claims.extend(p.await??);
    }
    assert_eq!(claims.len(), 1, "reclaimed exactly once: {claims:?}");
    let (winner, job) = &claims[0];
    assert_eq!(job["id"], id.as_str());
    assert_eq!(job["attempt"], 2);
    assert_eq!(job["errors"][0]["type"], "visibility_timeout");
    let late = app
        .ack(json!({"job_id": id, "worker_id": "doomed"}))
        .await?;
    assert_eq!(
        late.status, 409,
        "the worker that lost the lease cannot ack"
    );
    let info = app.info(&id).await?;
    assert_eq!(info.body["job"]["state"], "active");
    assert_eq!(info.body["job"]["worker_id"], winner.as_str());
    assert_eq!(
        app.ack(json!({"job_id": id, "worker_id": winner}))
            .await?
            .status,
        200
    );
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    Ok(())
}

/// Each policy's delay matches the spec's formula (no jitter), the job is not fetchable
/// before its time and is fetchable right after it.
#[tokio::test]
async fn backoff_schedules_follow_the_spec_formulas() -> anyhow::Result<()> {
    let app = TestApp::spawn_rules_only().await?;
    let cases = [
        ("exponential", 2.0, [200, 400, 800]),
        ("linear", 1.0, [200, 400, 600]),
        ("none", 1.0, [200, 200, 200]),
        ("polynomial", 2.0, [200, 800, 1800]),
    ];
    for (strategy, coefficient, expected) in cases {
        let queue = format!("backoff-{strategy}");
        let id = id_of(
            &app.push(
                json!({"type": "b.job", "args": [], "options": {"queue": queue, "retry": {
                "max_attempts": 4, "initial_interval": "PT0.2S", "backoff_coefficient": coefficient,
                "backoff_strategy": strategy, "max_interval": "PT5S", "jitter": false}}}),
            )
            .await?,
        );
        // A FETCH made right after a NACK that found the retry already due (a slow
        // machine) is the next attempt's.
        let mut claimed_early = None;
        for want in expected {
            let mut fetched = match claimed_early.take() {
                Some(early) => early,
                None => app.fetch(json!({"queues": [queue]})).await?,
            };
            for _ in 0..60 {
                if fetched.body["jobs"]
                    .as_array()
                    .is_some_and(|j| !j.is_empty())
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
                fetched = app.fetch(json!({"queues": [queue]})).await?;
            }
            assert_eq!(fetched.body["jobs"][0]["id"], id.as_str(), "{strategy}");
            // The retry is due `want` ms after the server took the NACK, which is after
            // this instant: a FETCH answered sooner than that was decided before it.
            let before_nack = std::time::Instant::now();
            let nack = app
                .nack(json!({"job_id": id, "error": {"code": "x", "message": "again"}}))
                .await?;
            assert_eq!(nack.body["state"], "retryable", "{strategy}");
            let delay = millis_between(
                &nack.body["error"]["occurred_at"],
                &nack.body["next_attempt_at"],
            );
            assert!(
                (delay - want).abs() <= 100,
                "{strategy}: delay {delay} ms, formula {want} ms"
            );
            assert_eq!(nack.body["job"]["retry_delay_ms"], want, "{strategy}");
            if want >= 400 {
                let early = app.fetch(json!({"queues": [queue]})).await?;
                if early.body["jobs"].as_array().is_some_and(|j| !j.is_empty()) {
                    assert!(
                        before_nack.elapsed() >= Duration::from_millis(want.unsigned_abs()),
                        "{strategy}: fetched before its time"
                    );
                    claimed_early = Some(early);
                }
            }
        }
    }
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn an_attempt_past_its_timeout_fails_with_a_timeout_error() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = id_of(
        &app.push(
            json!({"type": "slow.job", "args": [], "options": {"queue": "slow", "timeout_ms": 300,
        "retry": {"max_attempts": 2, "initial_interval": "PT5S", "jitter": false}}}),
        )
        .await?,
    );
    app.fetch(json!({"queues": ["slow"], "worker_id": "w"}))
        .await?;
    tokio::time::sleep(Duration::from_millis(450)).await;
    let info = app.info(&id).await?.body;
    assert_eq!(info["job"]["state"], "retryable");
    assert_eq!(info["job"]["error"]["type"], "timeout");
    let late = app.ack(json!({"job_id": id, "worker_id": "w"})).await?;
    assert_eq!(
        late.status, 409,
        "an attempt that timed out cannot complete"
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn heartbeats_extend_the_lease_and_report_directives_and_cancellations() -> anyhow::Result<()>
{
    let app = TestApp::spawn().await?;
    let lease = Duration::from_millis(2000);
    let id = id_of(&app.push(json!({"type": "long.job", "args": [], "options": {"queue": "long", "visibility_timeout_ms": lease.as_millis() as u64}})).await?);
    let other = id_of(
        &app.push(json!({"type": "long.job", "args": [], "options": {"queue": "long"}}))
            .await?,
    );
    // Sent before the FETCH: the lease began after it.
    let fetched_at = Instant::now();
    app.fetch(json!({"queues": ["long"], "worker_id": "w1", "count": 2}))
        .await?;
    // A beat every 300 ms until the job has outlived its lease by half: each beat lands
    // within the lease the one before extended unless the machine stalls for 1.7 s (the
    // gap is in the message).
    let mut last = fetched_at;
    while fetched_at.elapsed() < lease * 3 / 2 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let beat = app
            .call(
                Method::POST,
                "/ojs/v1/workers/heartbeat",
                Some(json!({"worker_id": "w1", "active_jobs": [id]})),
            )
            .await?;
        let gap = last.elapsed();
        last = Instant::now();
        assert_eq!(beat.status, 200);
        assert_eq!(beat.body["state"], "running");
        assert_eq!(
            beat.body["jobs_extended"],
            json!([id]),
            "a beat {gap:?} after the last extension, on a {lease:?} lease"
        );
    }
    assert_eq!(
        app.info(&id).await?.body["job"]["state"],
        "active",
        "{:?} on a {lease:?} lease, kept by heartbeats",
        fetched_at.elapsed()
    );
    let q = app
        .call(Method::POST, "/ojs/v1/admin/workers/w1/quiet", None)
        .await?;
    assert_eq!(q.status, 200);
    assert_eq!(app.cancel(&other).await?.status, 200);
    let beat = app
        .call(
            Method::POST,
            "/ojs/v1/workers/heartbeat",
            Some(json!({"worker_id": "w1", "active_jobs": [id, other]})),
        )
        .await?;
    assert_eq!(beat.body["state"], "quiet");
    assert_eq!(beat.body["jobs_cancelled"], json!([other]));
    let intruder = app
        .call(
            Method::POST,
            "/ojs/v1/workers/heartbeat",
            Some(json!({"worker_id": "w2", "active_jobs": [id]})),
        )
        .await?;
    assert_eq!(
        intruder.body["jobs_extended"],
        json!([]),
        "only the holder extends a lease"
    );
    assert_eq!(
        app.call(Method::POST, "/ojs/v1/admin/workers/nobody/quiet", None)
            .await?
            .status,
        404
    );
    let workers = app.call(Method::GET, "/ojs/v1/admin/workers", None).await?;
    assert_eq!(workers.body["workers"].as_array().map(Vec::len), Some(2));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn dead_letter_queue_lists_by_queue_with_pagination_and_retries_and_deletes(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let dead = |queue: &str| json!({"type": "d.job", "args": [], "options": {"queue": queue, "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}});
    let mut ids = Vec::new();
    for queue in ["dq1", "dq1", "dq1", "dq2"] {
        let id = id_of(&app.push(dead(queue)).await?);
        app.fetch(json!({"queues": [queue]})).await?;
        let n = app
            .nack(json!({"job_id": id, "error": {"code": "boom", "message": "x"}}))
            .await?;
        assert_eq!(n.body["state"], "discarded");
        ids.push(id);
    }
    // A plain discard is not dead-lettered.
    let plain = id_of(&app.push(json!({"type": "d.job", "args": [], "options": {"queue": "dq1", "retry": {"max_attempts": 1}}})).await?);
    app.fetch(json!({"queues": ["dq1"]})).await?;
    app.nack(json!({"job_id": plain, "error": {"message": "x"}}))
        .await?;

    let page = app
        .call(Method::GET, "/ojs/v1/dead-letter?queue=dq1&limit=2", None)
        .await?
        .body;
    assert_eq!(page["jobs"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["pagination"]["total"], 3);
    assert_eq!(page["pagination"]["has_more"], true);
    assert_eq!(page["jobs"][0]["id"], ids[0].as_str());
    let rest = app
        .call(
            Method::GET,
            "/ojs/v1/dead-letter?queue=dq1&limit=2&offset=2",
            None,
        )
        .await?
        .body;
    assert_eq!(rest["jobs"][0]["id"], ids[2].as_str());
    assert_eq!(rest["pagination"]["has_more"], false);
    let all = app
        .call(Method::GET, "/ojs/v1/dead-letter", None)
        .await?
        .body;
    assert_eq!(all["pagination"]["total"], 4);

    let retried = app
        .call(
            Method::POST,
            &format!("/ojs/v1/dead-letter/{}/retry", ids[0]),
            None,
        )
        .await?;
    assert_eq!(retried.body["job"]["state"], "available");
    assert_eq!(retried.body["job"]["attempt"], 0);
    assert!(retried.body["job"].get("errors").is_none());
    let again = app
        .call(
            Method::POST,
            &format!("/ojs/v1/dead-letter/{}/retry", ids[0]),
            None,
        )
        .await?;
    assert_eq!(again.status, 404, "no longer dead-lettered");
    let gone = app
        .call(
            Method::DELETE,
            &format!("/ojs/v1/dead-letter/{}", ids[1]),
            None,
        )
        .await?;
    assert_eq!(gone.body, json!({"deleted": true, "job_id": ids[1]}));
    assert_eq!(app.info(&ids[1]).await?.status, 404);
    assert_eq!(
        app.call(
            Method::DELETE,
            &format!("/ojs/v1/dead-letter/{plain}"),
            None
        )
        .await?
        .status,
        404
    );
    let after = app
        .call(Method::GET, "/ojs/v1/dead-letter?queue=dq1", None)
        .await?
        .body;
    assert_eq!(after["pagination"]["total"], 1);
    app.teardown().await;
    Ok(())
}

/// The scheduler's sweep reclaims leases and promotes retries on queues nobody fetches,
/// and an idle sweep is cheap. Prints the DynamoDB calls of FAIL, a reclaim and a sweep.
#[tokio::test]
async fn the_sweep_moves_due_jobs_without_any_fetch() -> anyhow::Result<()> {
    // The DynamoDB calls are counted exactly: AWS's rules, nothing random.
    let app = TestApp::spawn_rules_only().await?;
    let store = &app.store;
    let leased = id_of(&app.push(json!({"type": "s.job", "args": [], "options": {"queue": "sw1", "visibility_timeout_ms": 200}})).await?);
    let failing = id_of(&app.push(json!({"type": "s.job", "args": [], "options": {"queue": "sw2", "retry": {"initial_interval": "PT0.2S", "jitter": false}}})).await?);
    app.fetch(json!({"queues": ["sw1"]})).await?;
    app.fetch(json!({"queues": ["sw2"]})).await?;
    let u0 = store.usage();
    app.nack(json!({"job_id": failing, "error": {"message": "x"}}))
        .await?;
    let fail_cost = store.usage() - u0;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let u1 = store.usage();
    ojs_tests::after_index_lag().await;
    let report = ojs_tests::sweep(store, ojs_core::time::now()).await?;
    let sweep_cost = store.usage() - u1;
    assert_eq!(report.moved, 2, "{report:?}");
    let raw = store
        .engine()
        .get_job(&ojs_core::JobId::parse(&leased)?)
        .await?
        .map(|j| j.status.state);
    assert_eq!(
        raw,
        Some(ojs_core::JobState::Available),
        "reclaimed by the sweep itself"
    );
    let raw = store
        .engine()
        .get_job(&ojs_core::JobId::parse(&failing)?)
        .await?
        .map(|j| j.status.state);
    assert_eq!(
        raw,
        Some(ojs_core::JobState::Available),
        "promoted by the sweep itself"
    );
    // The first quiet sweep also checks each queue's counters against its indexes once
    // (`Store::heal_counters`); from then on an idle sweep only reads them.
    ojs_tests::after_index_lag().await;
    ojs_tests::sweep(store, ojs_core::time::now()).await?;
    let u2 = store.usage();
    ojs_tests::after_index_lag().await;
    let idle = ojs_tests::sweep(store, ojs_core::time::now()).await?;
    let idle_cost = store.usage() - u2;
    assert_eq!((idle.moved, idle.healed), (0, 0));
    assert_eq!(
        idle_cost.calls,
        1 + 1 + 1 + 2 + 4 + 1,
        "one cron query, one read of the resume point, one queue listing, one due query per \
         queue, one query per workflow-check partition, one read of every queue's counters"
    );
    println!(
        "FAIL (retry): {} calls, {:.1} RCU, {:.1} WCU\nsweep moving 2 jobs over 2 queues: {} calls\nidle sweep of 2 queues: {} calls, {:.1} RCU",
        fail_cost.calls, fail_cost.read_units, fail_cost.write_units, sweep_cost.calls, idle_cost.calls, idle_cost.read_units
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_job_the_server_cannot_read_is_set_aside_and_never_blocks_its_queue() -> anyhow::Result<()>
{
    let app = TestApp::spawn().await?;
    let poison = app
        .push(json!({"type": "poison.job", "args": [], "options": {"queue": "aside", "priority": 10}}))
        .await?;
    let poison = poison.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // An item that no longer validates (written by an older version with looser rules,
    // say): its stored request has a timeout beyond today's bound.
    poison_stored_request(&app, &poison, "aside").await?;
    let normal = app
        .push(json!({"type": "normal.job", "args": [], "options": {"queue": "aside"}}))
        .await?;
    let normal = normal.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The poisoned job sorts first (priority 10): FETCH sets it aside and delivers the next.
    let fetched = app.fetch(json!({"queues": ["aside"], "count": 2})).await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    let ids: Vec<&str> = fetched.body["jobs"]
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec![normal.as_str()]);
    let items = ojs_tests::fault_proxy::table_items(app.store.table()).await?;
    let aside = items
        .iter()
        .find(|i| i.get("pk").and_then(|v| v.as_s().ok()) == Some(&format!("JOB#{poison}")))
        .ok_or_else(|| anyhow::anyhow!("the poisoned item is gone"))?;
    assert!(aside.contains_key("set_aside"), "the reason is recorded");
    assert!(
        !aside.contains_key("gsi1pk") && !aside.contains_key("gsi2pk"),
        "out of the indexes"
    );
    // Later FETCHes and the sweep go on.
    assert_eq!(app.fetch(json!({"queues": ["aside"]})).await?.status, 200);
    ojs_tests::sweep(&app.store, ojs_core::time::now()).await?;
    app.teardown().await;
    Ok(())
}

/// Rewrites job `id`'s stored request straight in the table so that it no longer
/// validates (as an item written by an older version with looser rules would): a
/// timeout beyond today's bound.
async fn poison_stored_request(app: &TestApp, id: &str, queue: &str) -> anyhow::Result<()> {
    use aws_sdk_dynamodb::types::AttributeValue as Av;
    let spec = json!({"type": "poison.job", "args": [], "queue": queue,
        "timeout_ms": 10_000_000_000_000_000u64});
    let sdk = ojs_store::sdk_config().await;
    ojs_store::client_for(&sdk)
        .update_item()
        .table_name(app.store.table())
        .key("pk", Av::S(format!("JOB#{id}")))
        .key("sk", Av::S("JOB".into()))
        .update_expression("SET spec = :spec REMOVE specz")
        .expression_attribute_values(":spec", Av::S(spec.to_string()))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
    Ok(())
}

/// A FETCH whose index shows only a job the server cannot read (set aside) has not been
/// answered: it looks again after the index lag like a FETCH that saw nothing, and
/// delivers the job pushed a moment before instead of an empty list (found under the
/// strict layer's index lag: the set-aside job counted as a ready job seen, so the FETCH
/// answered `[]` while a job was available).
#[tokio::test]
async fn a_fetch_that_sees_only_a_job_it_sets_aside_looks_again() -> anyhow::Result<()> {
    let mut config = ojs_tests::strict_proxy::StrictConfig::rules_only();
    config.index_lag = Duration::from_millis(300);
    let app = TestApp::spawn_behind(config).await?;
    let poison = id_of(
        &app.push(json!({"type": "poison.job", "args": [], "options": {"queue": "aside2", "priority": 10}}))
            .await?,
    );
    // The poisoned job's index entry is visible; then it stops validating.
    tokio::time::sleep(Duration::from_millis(400)).await;
    poison_stored_request(&app, &poison, "aside2").await?;
    // Pushed just before the FETCH: not in the lagging index yet.
    let normal = id_of(
        &app.push(json!({"type": "normal.job", "args": [], "options": {"queue": "aside2"}}))
            .await?,
    );
    let fetched = app.fetch(json!({"queues": ["aside2"], "count": 2})).await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    let ids: Vec<&str> = fetched.body["jobs"]
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec![normal.as_str()], "{}", fetched.body);
    app.teardown().await;
    Ok(())
}

/// A stored rate limit that no longer reads (stored under looser rules) never becomes "no
/// limit": the job is set aside with the reason, and the queue goes on (review #19h: the
/// claim parsed it with `.ok()` and ran the job unlimited).
#[tokio::test]
async fn a_job_whose_stored_rate_limit_no_longer_reads_is_set_aside_not_run_unlimited(
) -> anyhow::Result<()> {
    use aws_sdk_dynamodb::types::AttributeValue as Av;
    let app = TestApp::spawn().await?;
    let limited = app
        .push(
            json!({"type": "rl.old", "args": [], "queue": "rlaside", "priority": 10,
            "rate_limit": {"key": "partner", "concurrency": 1}}),
        )
        .await?;
    let limited = limited.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let sdk = ojs_store::sdk_config().await;
    ojs_store::client_for(&sdk)
        .update_item()
        .table_name(app.store.table())
        .key("pk", Av::S(format!("JOB#{limited}")))
        .key("sk", Av::S("JOB".into()))
        .update_expression("SET rl = :rl")
        .expression_attribute_values(
            ":rl",
            Av::S(json!({"key": "not a valid key!", "concurrency": 1}).to_string()),
        )
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
    let normal = app
        .push(json!({"type": "rl.normal", "args": [], "queue": "rlaside"}))
        .await?;
    let normal = normal.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ojs_tests::after_index_lag().await;
    let fetched = app
        .fetch(json!({"queues": ["rlaside"], "count": 2}))
        .await?;
    let ids: Vec<&str> = fetched.body["jobs"]
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec![normal.as_str()], "{}", fetched.body);
    let items = ojs_tests::fault_proxy::table_items(app.store.table()).await?;
    let aside = items
        .iter()
        .find(|i| i.get("pk").and_then(|v| v.as_s().ok()) == Some(&format!("JOB#{limited}")))
        .ok_or_else(|| anyhow::anyhow!("the job is gone"))?;
    let why = aside
        .get("set_aside")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    assert!(why.contains("rate_limit"), "{why}");
    app.teardown().await;
    Ok(())
}

/// The dead letter queue reads its writes: a job is listed the moment the FAIL that
/// dead-lettered it has answered, and gone the moment its retry or deletion has, even
/// while the table's indexes lag (the conformance case L1-RTR-007 lists right after the
/// FAIL; with the listing on a GSI it failed under the strict layer's index lag).
#[tokio::test]
async fn the_dead_letter_queue_lists_a_job_as_soon_as_the_fail_answers() -> anyhow::Result<()> {
    let mut config = ojs_tests::strict_proxy::StrictConfig::rules_only();
    config.index_lag = std::time::Duration::from_millis(500);
    let app = TestApp::spawn_behind(config).await?;
    let mut ids = Vec::new();
    for i in 0..2 {
        let job = json!({"type": "dl.now", "args": [i], "queue": "dlnow",
            "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}});
        let pushed = app.push(job).await?;
        ids.push(
            pushed.body["job"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    for id in &ids {
        let f = app.fetch(json!({"queues": ["dlnow"]})).await?;
        assert_eq!(f.body["jobs"][0]["id"], id.as_str(), "{}", f.body);
        let nack = app
            .nack(json!({"job_id": id, "error": {"message": "no"}}))
            .await?;
        assert_eq!(nack.body["state"], "discarded", "{}", nack.body);
    }
    let (now_listed, total) = dead_listed(&app).await?;
    assert_eq!(now_listed, ids, "listed at once, oldest first");
    assert_eq!(total, 2);
    let retry = app
        .call(
            reqwest::Method::POST,
            &format!("/ojs/v1/dead-letter/{}/retry", ids[0]),
            None,
        )
        .await?;
    assert_eq!(retry.status, 200, "{}", retry.body);
    let delete = app
        .call(
            reqwest::Method::DELETE,
            &format!("/ojs/v1/dead-letter/{}", ids[1]),
            None,
        )
        .await?;
    assert!(matches!(delete.status, 200 | 204), "{}", delete.body);
    let (after, total) = dead_listed(&app).await?;
    assert!(after.is_empty(), "{after:?}");
    assert_eq!(total, 0);
    // A second delete or retry finds nothing.
    let again = app
        .call(
            reqwest::Method::DELETE,
            &format!("/ojs/v1/dead-letter/{}", ids[1]),
            None,
        )
        .await?;
    assert_eq!(again.status, 404, "{}", again.body);
    app.teardown().await;
    Ok(())
}

/// The ids and total of the `dlnow` dead letter listing.
async fn dead_listed(app: &TestApp) -> anyhow::Result<(Vec<String>, Value)> {
    let r = app
        .call(
            reqwest::Method::GET,
            "/ojs/v1/dead-letter?queue=dlnow",
            None,
        )
        .await?;
    anyhow::ensure!(r.status == 200, "{}", r.body);
    let ids = r.body["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["id"].as_str().map(str::to_owned))
        .collect();
    Ok((ids, r.body["pagination"]["total"].clone()))
}
