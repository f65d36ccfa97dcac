//! Sharded queues (`OJS_QUEUE_SHARDS`, docs/performance.md "Scale on paper"): a queue's
//! ready and due entries are spread over several index partitions, FETCH walks them from a
//! random shard, and every job is still delivered exactly once per attempt.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ojs_tests::fault_proxy::table_items;
use ojs_tests::{fresh_store, Reply, TestApp};
use reqwest::Method;
use serde_json::json;

const SHARDS: u16 = 4;

/// Sends a call until it is answered otherwise than 503 `retryable` (at most 6 tries, with
/// backoff, as the official SDKs' workers retry): DynamoDB Local on a busy 2-core machine
/// can stall past the store's 8 s budget. Also says whether a try went unanswered.
async fn retrying<F, Fut>(mut call: F) -> anyhow::Result<(Reply, bool)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Reply>>,
{
    let mut unanswered = false;
    let mut retry = 0;
    loop {
        let r = call().await?;
        if r.status == 503 && r.body["error"]["retryable"] == true && retry < 5 {
            unanswered = true;
            tokio::time::sleep(Duration::from_millis(200 << retry)).await;
            retry += 1;
            continue;
        }
        return Ok((r, unanswered));
    }
}

fn id_of(reply: &Reply) -> String {
    reply.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The distinct values of `attr` over the table's job items.
async fn partitions(table: &str, attr: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(table_items(table)
        .await?
        .iter()
        .filter(|i| i.get("sk").and_then(|v| v.as_s().ok()).map(String::as_str) == Some("JOB"))
        .filter_map(|i| i.get(attr)?.as_s().ok().cloned())
        .collect())
}

#[tokio::test]
async fn entries_spread_over_every_shard_and_stats_add_them_up() -> anyhow::Result<()> {
    let app = TestApp::spawn_on_store(
        fresh_store()
            .await?
            .with_config(|c| c.queue_shards = SHARDS),
    )
    .await?;
    // 40 of each: a shard left empty by chance has odds of 4 x (3/4)^40, about 1 in 25,000.
    for i in 0..40 {
        let r = app
            .push(json!({"type": "s.now", "args": [i], "options": {"queue": "sharded"}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
        let r = app
            .push(
                json!({"type": "s.later", "args": [i], "options": {"queue": "sharded"},
                "scheduled_at": "2099-01-01T00:00:00Z"}),
            )
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
    }
    let want = |prefix: &str| -> BTreeSet<String> {
        std::iter::once(format!("{prefix}#sharded"))
            .chain((1..SHARDS).map(|s| format!("{prefix}#sharded#{s}")))
            .collect()
    };
    assert_eq!(
        partitions(app.store.table(), "gsi1pk").await?,
        want("READY")
    );
    assert_eq!(partitions(app.store.table(), "gsi2pk").await?, want("DUE"));
    let stats = app
        .call(Method::GET, "/ojs/v1/queues/sharded/stats", None)
        .await?
        .body;
    assert_eq!(stats["queue"]["available"], 40, "{stats}");
    assert_eq!(stats["queue"]["scheduled"], 40, "{stats}");
    // FETCH finds jobs in every shard: all 40 come out, then the queue is empty.
    let mut fetched = BTreeSet::new();
    for _ in 0..40 {
        let r = app
            .fetch(json!({"queues": ["sharded"], "count": 5}))
            .await?;
        anyhow::ensure!(r.status == 200, "{:?}", r.body);
        let jobs = r.body["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            break;
        }
        for j in jobs {
            anyhow::ensure!(
                fetched.insert(j["id"].as_str().unwrap_or_default().to_owned()),
                "fetched twice: {j}"
            );
        }
    }
    assert_eq!(fetched.len(), 40);
    let stats = app
        .call(Method::GET, "/ojs/v1/queues/sharded/stats", None)
        .await?
        .body;
    assert_eq!(stats["queue"]["available"], 0, "{stats}");
    assert_eq!(stats["queue"]["active"], 40, "{stats}");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn growing_the_shard_count_strands_nothing() -> anyhow::Result<()> {
    // Jobs written with one shard, then served by a store with four over the same table.
    let before = TestApp::spawn_on_store(fresh_store().await?).await?;
    let mut pushed = BTreeSet::new();
    for i in 0..30 {
        let r = before
            .push(json!({"type": "s.grow", "args": [i], "options": {"queue": "grow"}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
        pushed.insert(id_of(&r));
    }
    let after = TestApp::spawn_on_store(
        before
            .store
            .clone()
            .with_config(|c| c.queue_shards = SHARDS),
    )
    .await?;
    let mut fetched = BTreeSet::new();
    for _ in 0..30 {
        let r = after.fetch(json!({"queues": ["grow"], "count": 4})).await?;
        anyhow::ensure!(r.status == 200, "{:?}", r.body);
        let jobs = r.body["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            break;
        }
        for j in jobs {
            let id = j["id"].as_str().unwrap_or_default().to_owned();
            // Its lease now sits in the shard the new count gives it; ACK clears it there.
            let ack = after.ack(json!({"job_id": id})).await?;
            anyhow::ensure!(ack.status == 200, "{:?}", ack.body);
            fetched.insert(id);
        }
    }
    assert_eq!(fetched, pushed);
    after.teardown().await;
    before.teardown().await;
    Ok(())
}

/// What a racing worker saw: every (job, attempt) it was handed.
type Deliveries = Arc<Mutex<HashMap<(String, u64), usize>>>;

#[tokio::test]
async fn sharded_queue_delivers_every_job_exactly_once_to_32_racing_fetchers() -> anyhow::Result<()>
{
    const JOBS: usize = 200;
    let app = Arc::new(
        TestApp::spawn_on_store(
            fresh_store()
                .await?
                .with_config(|c| c.queue_shards = SHARDS),
        )
        .await?,
    );
    // Every fifth job fails its first attempt and comes back through its shard of the due
    // index, so both sharded indexes are raced over.
    let mut retried = BTreeSet::new();
    let mut pushed = Vec::new();
    for i in 0..JOBS {
        let r = app
            .push(json!({"type": "s.race", "args": [i], "options": {"queue": "race", "priority": i % 3,
                "retry": {"max_attempts": 3, "initial_interval": "PT0.2S", "jitter": false}}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
        let id = id_of(&r);
        if i % 5 == 0 {
            retried.insert(id.clone());
        }
        pushed.push(id);
    }
    let retried = Arc::new(retried);
    let deliveries: Deliveries = Arc::default();
    // The jobs acknowledged, by id: an ACK retried after a lost answer counts once.
    let completed: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    // Set when a FETCH went unanswered (503 after DynamoDB Local stalled past the store's
    // budget on a busy machine): the jobs it may have claimed come back after their lease.
    let lost = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(120);
    let workers = (0..32)
        .map(|w| {
            let (app, retried, deliveries, completed, lost) = (
                Arc::clone(&app),
                Arc::clone(&retried),
                Arc::clone(&deliveries),
                Arc::clone(&completed),
                Arc::clone(&lost),
            );
            tokio::spawn(async move {
                let worker = format!("w{w}");
                let done = |c: &Mutex<BTreeSet<String>>| c.lock().map_or(JOBS, |c| c.len());
                while done(&completed) < JOBS && Instant::now() < deadline {
                    let fetch =
                        json!({"queues": ["race"], "count": 1 + w % 3, "worker_id": worker});
                    let (r, unanswered) = retrying(|| app.fetch(fetch.clone())).await?;
                    if unanswered {
                        lost.store(true, Ordering::SeqCst);
                    }
                    anyhow::ensure!(r.status == 200, "fetch failed: {:?}", r.body);
                    let jobs = r.body["jobs"].as_array().cloned().unwrap_or_default();
                    if jobs.is_empty() {
                        if w == 0 && lost.load(Ordering::SeqCst) {
                            // This app runs no scheduler: the sweep ends the leases.
                            let _ = ojs_tests::sweep(&app.store, ojs_core::time::now()).await;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    for j in jobs {
                        let id = j["id"].as_str().unwrap_or_default().to_owned();
                        let attempt = j["attempt"].as_u64().unwrap_or_default();
                        anyhow::ensure!(j["state"] == "active", "bad claim {j}");
                        if let Ok(mut seen) = deliveries.lock() {
                            *seen.entry((id.clone(), attempt)).or_default() += 1;
                        }
                        // An ACK or FAIL answered 409 after an unanswered try landed then.
                        if attempt == 1 && retried.contains(&id) {
                            let nack = json!({"job_id": id, "worker_id": worker,
                                "error": {"type": "test.retry", "message": "first attempt fails"}});
                            let (r, unanswered) = retrying(|| app.nack(nack.clone())).await?;
                            anyhow::ensure!(
                                r.status == 200 || (unanswered && r.status == 409),
                                "nack refused: {:?}",
                                r.body
                            );
                        } else {
                            let ack = json!({"job_id": id, "worker_id": worker});
                            let (r, unanswered) = retrying(|| app.ack(ack.clone())).await?;
                            anyhow::ensure!(
                                r.status == 200 || (unanswered && r.status == 409),
                                "ack of own job refused: {:?}",
                                r.body
                            );
                            if let Ok(mut c) = completed.lock() {
                                c.insert(id);
                            }
                        }
                    }
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        // Spawn all 32 before awaiting any, so they really race.
        .collect::<Vec<_>>();
    for w in workers {
        w.await??;
    }
    let seen = deliveries
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    anyhow::ensure!(twice.is_empty(), "attempts delivered twice: {twice:?}");
    let lost = lost.load(Ordering::SeqCst);
    for id in &pushed {
        let attempts = if retried.contains(id) { 2 } else { 1 };
        // A claim whose answer was lost ends with its lease, which uses up its attempt:
        // the job then comes back once, one attempt later.
        let last = (1..=3).rev().find(|a| seen.contains_key(&(id.clone(), *a)));
        anyhow::ensure!(last.is_some(), "job {id} was never delivered");
        if !lost {
            for a in 1..=attempts {
                anyhow::ensure!(
                    seen.contains_key(&(id.clone(), a)),
                    "job {id} attempt {a} was never delivered"
                );
            }
            anyhow::ensure!(
                last == Some(attempts),
                "job {id} was delivered after it finished"
            );
        }
        let info = app.info(id).await?;
        anyhow::ensure!(
            info.body["job"]["state"] == "completed",
            "{id}: {:?}",
            info.body
        );
    }
    let completed = completed.lock().map(|c| c.len()).unwrap_or_default();
    assert_eq!(completed, JOBS);
    if !lost {
        assert_eq!(seen.len(), JOBS + retried.len());
    }
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    Ok(())
}

#[tokio::test]
async fn a_fetch_stops_claiming_when_its_time_budget_is_spent() -> anyhow::Result<()> {
    // A spent budget (here from the start) ends the FETCH after its first claim attempt,
    // across the shards and queues it had left: 32 racing workers or a slow table cannot
    // hold a FETCH past API Gateway's 29 s.
    let store = fresh_store()
        .await?
        .with_config(|c| c.queue_shards = SHARDS);
    let app = TestApp::spawn_on_store(
        store
            .clone()
            .with_config(|c| c.fetch_budget = Duration::ZERO),
    )
    .await?;
    let mut pushed = BTreeSet::new();
    for i in 0..8 {
        let queue = if i % 2 == 0 { "budget-a" } else { "budget-b" };
        let r = app
            .push(json!({"type": "s.budget", "args": [i], "options": {"queue": queue}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
        pushed.insert(id_of(&r));
    }
    let r = app
        .fetch(json!({"queues": ["budget-a", "budget-b"], "count": 8, "worker_id": "w"}))
        .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let first: Vec<String> = r.body["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|j| j["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(first.len(), 1, "{:?}", r.body);
    // With time to spend, the rest are claimed by one FETCH.
    let rest = store
        .with_config(|c| c.fetch_budget = Duration::from_secs(5))
        .workers()
        .fetch(
            &ojs_store::FetchRequest {
                queues: vec![
                    ojs_core::QueueName::parse("budget-a")?,
                    ojs_core::QueueName::parse("budget-b")?,
                ],
                count: 8,
                worker_id: Some("w2".into()),
                visibility_timeout_ms: None,
                tenant: Default::default(),
                scheduling: None,
            },
            ojs_core::time::now(),
        )
        .await?;
    let mut all: BTreeSet<String> = rest.jobs.iter().map(|j| j.id.to_string()).collect();
    assert_eq!(all.len(), 7);
    all.extend(first);
    assert_eq!(all, pushed);
    app.teardown().await;
    Ok(())
}

/// A FETCH that other workers beat to its candidates leaves the queue after three lost
/// claims and goes on to its next queue, instead of losing one claim (one failed write)
/// per job left on its page: with fewer jobs waiting than workers racing, every loser
/// walked the whole page before.
#[tokio::test]
async fn a_fetch_leaves_a_queue_after_three_claims_lost_to_other_workers() -> anyhow::Result<()> {
    use ojs_tests::fault_proxy::{raw_dynamodb_endpoint, Fault, FaultProxy, Filter};
    let rival = fresh_store().await?;
    let app = TestApp::spawn_on_store(rival.clone()).await?;
    let mut contended = BTreeSet::new();
    for i in 0..10 {
        let r = app
            .push(json!({"type": "s.lost", "args": [i], "options": {"queue": "lost-a"}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{:?}", r.body);
        contended.insert(id_of(&r));
    }
    let r = app
        .push(json!({"type": "s.lost", "args": [], "options": {"queue": "lost-b"}}))
        .await?;
    let other_queue_job = id_of(&r);
    ojs_tests::after_index_lag().await;

    // The slow worker's store talks to DynamoDB Local straight through the proxy (no
    // strict layer, whose throttling could make the SDK send a claim twice), with one
    // attempt per call and time to spare (a slow machine must not turn the held claim
    // into a timeout and a retry), and a FETCH budget to match.
    let proxy = FaultProxy::start(&raw_dynamodb_endpoint(), 1).await?;
    proxy.set_hang(Duration::from_secs(20));
    let sdk = ojs_store::sdk_loader()
        .endpoint_url(&proxy.url)
        .load()
        .await;
    let slow = ojs_tests::fault_proxy::patient_store_through(&sdk, rival.table())
        .with_config(|c| c.fetch_budget = Duration::from_secs(60));
    let request = |queues: &[&str], worker: &str| -> anyhow::Result<ojs_store::FetchRequest> {
        Ok(ojs_store::FetchRequest {
            queues: queues
                .iter()
                .map(|q| ojs_core::QueueName::parse(q))
                .collect::<Result<_, _>>()?,
            count: 1,
            worker_id: Some(worker.into()),
            visibility_timeout_ms: None,
            tenant: Default::default(),
            scheduling: None,
        })
    };
    // The slow worker reads its page of lost-a, then its first claim is held while the
    // rival claims every job of lost-a.
    proxy.script(Filter::op("UpdateItem"), &[Fault::Hold]);
    let slow_req = request(&["lost-a", "lost-b"], "slow")?;
    let slow_fetch =
        tokio::spawn(async move { slow.workers().fetch(&slow_req, ojs_core::time::now()).await });
    let held_by = Instant::now() + Duration::from_secs(15);
    while proxy.scripted_left() > 0 {
        anyhow::ensure!(Instant::now() < held_by, "the slow FETCH never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut taken = BTreeSet::new();
    let rival_req = request(&["lost-a"], "rival")?;
    while taken.len() < contended.len() {
        anyhow::ensure!(Instant::now() < held_by, "the rival took only {taken:?}");
        let out = rival
            .workers()
            .fetch(&rival_req, ojs_core::time::now())
            .await?;
        taken.extend(out.jobs.iter().map(|j| j.id.to_string()));
    }
    assert_eq!(taken, contended);
    proxy.release(1);

    let out = slow_fetch.await??;
    let got: Vec<String> = out.jobs.iter().map(|j| j.id.to_string()).collect();
    assert_eq!(got, [other_queue_job]);
    // Three lost claims on lost-a, then the one that won on lost-b.
    let report = proxy.report();
    assert_eq!(
        report.by_operation.get("UpdateItem").copied(),
        Some(4),
        "{report:?}"
    );
    app.teardown().await;
    Ok(())
}
