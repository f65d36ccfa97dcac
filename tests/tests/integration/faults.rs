//! Faults between the API and DynamoDB, injected by [`FaultProxy`]: throttling, 500s,
//! timeouts and dropped connections, before the request reaches DynamoDB or after it was
//! applied there (the ambiguous case). Every answer must be the success it claims or a
//! retryable `backend_error`; afterwards nothing is lost, duplicated or stuck.
//!
//! `OJS_FAULT_SEED` replays a run's random choices; `OJS_FAULT_JOBS` sizes the soak.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ojs_core::JobId;
use ojs_store::Store;
use ojs_tests::fault_proxy::{
    dynamodb_endpoint, jobs_in, raw_dynamodb_endpoint, store_through, table_items, Fault,
    FaultProxy, Filter,
};
use ojs_tests::{fresh_store, Reply, TestApp};
use serde_json::{json, Value};

/// The API over a store whose DynamoDB traffic goes through a fault proxy, plus a direct
/// store on the same table to check what was really written.
struct Rig {
    direct: Store,
    proxy: FaultProxy,
    app: Arc<TestApp>,
}

async fn rig(seed: u64) -> anyhow::Result<Rig> {
    rig_on(&dynamodb_endpoint(), seed).await
}

/// A [`rig`] whose proxy forwards to `upstream`: [`raw_dynamodb_endpoint`] for a test
/// whose scripted faults count requests, which the strict layer's random throttles
/// (retried by the SDK through the proxy) would shift.
async fn rig_on(upstream: &str, seed: u64) -> anyhow::Result<Rig> {
    let direct = fresh_store().await?;
    let proxy = FaultProxy::start(upstream, seed).await?;
    let store = store_through(&proxy.url, direct.table()).await;
    let app = Arc::new(TestApp::spawn_on_store(store).await?);
    Ok(Rig { direct, proxy, app })
}

impl Rig {
    async fn teardown(self) {
        self.proxy.heal();
        if let Ok(app) = Arc::try_unwrap(self.app) {
            app.teardown().await;
        } else {
            let _ = self.direct.delete_table().await;
        }
    }

    async fn state(&self, id: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .direct
            .engine()
            .get_job(&JobId::parse(id)?)
            .await?
            .map(|j| j.status.state.as_str().to_owned()))
    }

    /// Creates the workflow `body` and claims its first step from `queue` as worker `w`:
    /// the creation's answer and the claimed job's id.
    async fn workflow_with_step_claimed(
        &self,
        body: Value,
        queue: &str,
    ) -> anyhow::Result<(Reply, String)> {
        let created = self
            .app
            .call(reqwest::Method::POST, "/ojs/v1/workflows", Some(body))
            .await?;
        assert_eq!(created.status, 201, "{:?}", created.body);
        ojs_tests::after_index_lag().await;
        let fetched = self
            .app
            .fetch(json!({"queues": [queue], "worker_id": "w"}))
            .await?;
        let id = fetched.body["jobs"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!id.is_empty(), "{:?}", fetched.body);
        Ok((created, id))
    }

    fn attempts(&self, op: &str) -> u64 {
        self.proxy
            .report()
            .by_operation
            .get(op)
            .copied()
            .unwrap_or(0)
    }
}

fn seed() -> u64 {
    let seed = std::env::var("OJS_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("fault seed {seed} (replay with OJS_FAULT_SEED={seed})");
    seed
}

fn backend_error(r: &Reply) -> bool {
    matches!(r.status, 500 | 503)
        && r.body["error"]["code"] == "backend_error"
        && r.body["error"]["retryable"] == true
}

fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

fn job(id: &str, queue: &str) -> Value {
    json!({"id": id, "type": "fault.job", "args": [id], "options": {"queue": queue,
        "retry": {"max_attempts": 25, "initial_interval": "PT0.1S", "backoff_coefficient": 1.0, "jitter": false}}})
}

/// One fault before the request reaches DynamoDB is absorbed by the SDK's retries; three
/// in a row exhaust them and the API answers a retryable 503 having written nothing; a
/// hanging DynamoDB is cut off by the timeouts, not by the client's patience.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sdk_retries_absorb_a_fault_and_give_up_after_three_attempts_with_a_503(
) -> anyhow::Result<()> {
    let rig = rig(1).await?;
    let app = &rig.app;
    assert_eq!(app.push(job(&new_id(), "sdk")).await?.status, 201);
    let isolated: [&[Fault]; 5] = [
        &[Fault::Throughput],
        &[Fault::Throttling],
        &[Fault::ServerError],
        &[Fault::Drop],
        &[Fault::Throttling, Fault::Throughput],
    ];
    for faults in isolated {
        let id = new_id();
        let before = rig.attempts("PutItem");
        rig.proxy.script(Filter::op("PutItem"), faults);
        let r = app.push(job(&id, "sdk")).await?;
        assert_eq!(r.status, 201, "{faults:?}: {:?}", r.body);
        assert_eq!(
            rig.attempts("PutItem") - before,
            faults.len() as u64 + 1,
            "{faults:?}: one attempt per fault, then the one that worked"
        );
        assert_eq!(rig.state(&id).await?.as_deref(), Some("available"));
    }
    for fault in [
        Fault::Throughput,
        Fault::Throttling,
        Fault::ServerError,
        Fault::Drop,
    ] {
        let id = new_id();
        let before = rig.attempts("PutItem");
        rig.proxy.script(Filter::op("PutItem"), &[fault; 3]);
        let r = app.push(job(&id, "sdk")).await?;
        assert!(backend_error(&r), "{fault:?}: {} {:?}", r.status, r.body);
        assert_eq!(r.status, 503, "{fault:?}");
        assert!(r.headers.contains_key("retry-after"), "{fault:?}");
        assert_eq!(
            rig.attempts("PutItem") - before,
            3,
            "{fault:?}: the SDK makes 3 attempts"
        );
        assert_eq!(
            rig.state(&id).await?,
            None,
            "{fault:?}: nothing reached DynamoDB"
        );
    }
    let id = new_id();
    assert_eq!(app.push(job(&id, "sdk")).await?.status, 201);
    // Each hang lasts 20 s (the client waits 30 s): an answer sooner than one hang can only
    // come from the store's timeouts, whatever the machine's speed (cut off, it comes at
    // the 8 s operation timeout).
    let hang = Duration::from_secs(20);
    rig.proxy.set_hang(hang);
    rig.proxy.script(Filter::op("GetItem"), &[Fault::Hang; 3]);
    let started = Instant::now();
    let r = app.info(&id).await?;
    let took = started.elapsed();
    rig.proxy.heal();
    assert!(backend_error(&r), "{} {:?}", r.status, r.body);
    assert!(
        took >= Duration::from_millis(2_900) && took < hang,
        "a hanging DynamoDB is cut off by the 3 s attempt / 8 s operation timeouts: {took:?}"
    );
    println!("hung INFO answered 503 after {took:?}");
    assert_eq!(app.info(&id).await?.status, 200);
    println!("{}", rig.proxy.report().summary());
    rig.teardown().await;
    Ok(())
}

/// A write that DynamoDB applied but whose answer was lost is retried by the SDK; the
/// retry's failed condition must be recognised as our own write, not reported as a
/// duplicate or a conflict (nor, for FETCH, silently leave the job leased to nobody).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_that_landed_but_lost_its_answer_is_reported_as_the_success_it_was(
) -> anyhow::Result<()> {
    let rig = rig(2).await?;
    let app = &rig.app;
    let update = Filter::op("UpdateItem");
    for (round, fault) in [Fault::ServerErrorAfter, Fault::DropAfter, Fault::HangAfter]
        .into_iter()
        .enumerate()
    {
        let queue = format!("amb{round}");
        let (x, y) = (new_id(), new_id());
        assert_eq!(app.push(job(&y, &queue)).await?.status, 201);

        rig.proxy.script(Filter::op("PutItem"), &[fault]);
        let pushed = app.push(job(&x, &queue)).await?;
        assert_eq!(pushed.status, 201, "{fault:?} PUSH: {:?}", pushed.body);

        rig.proxy.script(update.clone(), &[fault]);
        let fetched = app
            .fetch(json!({"queues": [queue], "worker_id": "w", "count": 1}))
            .await?;
        assert_eq!(fetched.status, 200, "{fault:?} FETCH: {:?}", fetched.body);
        assert_eq!(
            fetched.body["jobs"][0]["id"],
            y.as_str(),
            "{fault:?}: the claimed job is delivered, not left leased to nobody"
        );
        assert_eq!(fetched.body["jobs"][0]["attempt"], 1);

        rig.proxy.script(update.clone(), &[fault]);
        let acked = app.ack(json!({"job_id": y, "worker_id": "w"})).await?;
        assert_eq!(acked.status, 200, "{fault:?} ACK: {:?}", acked.body);
        assert_eq!(acked.body["state"], "completed");

        let fetched = app
            .fetch(json!({"queues": [queue], "worker_id": "w"}))
            .await?;
        assert_eq!(fetched.body["jobs"][0]["id"], x.as_str());
        rig.proxy.script(update.clone(), &[fault]);
        let failed = app
            .nack(json!({"job_id": x, "worker_id": "w", "error": {"message": "once"}}))
            .await?;
        assert_eq!(failed.status, 200, "{fault:?} FAIL: {:?}", failed.body);
        assert_eq!(failed.body["state"], "retryable");
        let info = app.info(&x).await?;
        assert_eq!(
            info.body["job"]["errors"].as_array().map(Vec::len),
            Some(1),
            "{fault:?}: one failure recorded once"
        );

        rig.proxy.script(update.clone(), &[fault]);
        let cancelled = app.cancel(&x).await?;
        assert_eq!(
            cancelled.status, 200,
            "{fault:?} CANCEL: {:?}",
            cancelled.body
        );
        assert_eq!(rig.state(&x).await?.as_deref(), Some("cancelled"));
        assert_eq!(rig.state(&y).await?.as_deref(), Some("completed"));
        assert_eq!(
            rig.proxy.scripted_left(),
            0,
            "{fault:?}: every fault was hit"
        );

        // Transactions (unique jobs, batches) carry an idempotency token the SDK reuses
        // on its retries, so DynamoDB itself answers the retry with the first outcome.
        let tx = Filter::op("TransactWriteItems");
        let unique = new_id();
        rig.proxy.script(tx.clone(), &[fault]);
        let mut body = job(&unique, &queue);
        body["options"]["unique"] = json!({"keys": ["type", "args"]});
        let pushed = app.push(body).await?;
        assert_eq!(
            pushed.status, 201,
            "{fault:?} unique PUSH: {:?}",
            pushed.body
        );
        let batch = [new_id(), new_id()];
        rig.proxy.script(tx, &[fault]);
        let pushed = app
            .call(
                reqwest::Method::POST,
                "/ojs/v1/jobs/batch",
                Some(json!({"jobs": [job(&batch[0], &queue), job(&batch[1], &queue)]})),
            )
            .await?;
        assert_eq!(
            pushed.status, 201,
            "{fault:?} batch PUSH: {:?}",
            pushed.body
        );
        for id in [&unique, &batch[0], &batch[1]] {
            assert_eq!(rig.state(id).await?.as_deref(), Some("available"));
        }
    }
    let report = rig.proxy.report();
    println!("{}", report.summary());
    rig.teardown().await;
    Ok(())
}

/// A key record whose PutItem landed but lost its answer: the SDK's retry finds the
/// record and must recognise it as its own (same hash), not refuse the key as a duplicate
/// id; a record of another secret under the same id stays a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_record_that_landed_but_lost_its_answer_is_the_success_it_was() -> anyhow::Result<()>
{
    let rig = rig(5).await?;
    let store = &rig.app.store;
    let now = ojs_core::time::now();
    for (round, fault) in [Fault::ServerErrorAfter, Fault::DropAfter]
        .into_iter()
        .enumerate()
    {
        let id = format!("k{round}{}", new_id().replace('-', ""));
        rig.proxy.script(Filter::op("PutItem"), &[fault]);
        let stored = store.api_keys().put(&id, "worker", "hash-a", now).await;
        assert!(stored.is_ok(), "{fault:?}: {stored:?}");
        assert_eq!(rig.proxy.scripted_left(), 0, "{fault:?} was injected");
        let other = store.api_keys().put(&id, "worker", "hash-b", now).await;
        assert!(
            matches!(other, Err(ojs_store::StoreError::Duplicate)),
            "another secret under a taken id: {other:?}"
        );
    }
    rig.teardown().await;
    Ok(())
}

/// When every attempt's answer is lost, the API cannot know the write landed: it answers
/// 503. A client that retries then learns it from the 409 (`duplicate` for a PUSH with
/// its own id, `conflict` with `current_state: completed` for an ACK).
#[tokio::test]
async fn when_every_answer_is_lost_the_503_is_resolved_by_the_retry() -> anyhow::Result<()> {
    let rig = rig(3).await?;
    let app = &rig.app;
    let id = new_id();
    assert_eq!(app.push(job(&new_id(), "lost")).await?.status, 201);
    rig.proxy
        .script(Filter::op("PutItem"), &[Fault::ServerErrorAfter; 3]);
    let first = app.push(job(&id, "lost")).await?;
    assert!(backend_error(&first), "{} {:?}", first.status, first.body);
    assert_eq!(
        rig.state(&id).await?.as_deref(),
        Some("available"),
        "the write landed"
    );
    let again = app.push(job(&id, "lost")).await?;
    assert_eq!(again.status, 409, "{:?}", again.body);
    assert_eq!(again.body["error"]["code"], "duplicate");

    let mut held = Vec::new();
    for _ in 0..2 {
        let f = app
            .fetch(json!({"queues": ["lost"], "worker_id": "w"}))
            .await?;
        held.push(
            f.body["jobs"][0]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert!(held.contains(&id), "{held:?}");
    rig.proxy
        .script(Filter::op("UpdateItem"), &[Fault::ServerErrorAfter; 3]);
    let ack = app.ack(json!({"job_id": id, "worker_id": "w"})).await?;
    assert!(backend_error(&ack), "{} {:?}", ack.status, ack.body);
    assert_eq!(rig.state(&id).await?.as_deref(), Some("completed"));
    let again = app.ack(json!({"job_id": id, "worker_id": "w"})).await?;
    assert_eq!(again.status, 409);
    assert_eq!(again.body["error"]["details"]["current_state"], "completed");
    rig.teardown().await;
    Ok(())
}

async fn poll_for_reclaim(app: &Arc<TestApp>, queue: &str) -> anyhow::Result<Vec<(String, Value)>> {
    let pollers = (0..8).map(|w| {
        let app = Arc::clone(app);
        let queue = queue.to_owned();
        tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..40 {
                // A lease longer than any polling can take (40 FETCHes each, however slow
                // the machine): a second claim can then only be a double delivery, never
                // the reclaim of an expired lease.
                let r = app
                    .fetch(json!({"queues": [queue], "worker_id": format!("p{w}"), "visibility_timeout_ms": 3_600_000}))
                    .await?;
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
    Ok(claims)
}

/// Crash points: the function "dies" between the claim and the answer, once on the HTTP
/// side (the FETCH answer never reaches the worker) and once on the DynamoDB side (the
/// claim landed but every answer to it was lost). Either way the job is reclaimed after
/// its lease, by exactly one other worker, and the first worker's late ACK is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_whose_answer_is_lost_is_reclaimed_once_after_its_lease() -> anyhow::Result<()> {
    let rig = rig(4).await?;
    let app = &rig.app;
    let api = FaultProxy::start(&app.base_url, 4).await?;
    let fetch_path = "/ojs/v1/workers/fetch";
    for side in ["http", "dynamodb"] {
        let queue = format!("crash-{side}");
        let id = new_id();
        assert_eq!(app.push(job(&id, &queue)).await?.status, 201);
        let body = json!({"queues": [queue], "worker_id": "doomed", "visibility_timeout_ms": 800});
        if side == "http" {
            api.script(Filter::Path(fetch_path.into()), &[Fault::DropAfter]);
            let lost = app
                .client
                .post(format!("{}{fetch_path}", api.url))
                .header("content-type", "application/openjobspec+json")
                .body(body.to_string())
                .send()
                .await;
            assert!(lost.is_err(), "the answer was dropped: {lost:?}");
        } else {
            rig.proxy
                .script(Filter::op("UpdateItem"), &[Fault::DropAfter; 3]);
            let lost = app.fetch(body).await?;
            assert!(backend_error(&lost), "{} {:?}", lost.status, lost.body);
        }
        let held = rig.direct.engine().get_job(&JobId::parse(&id)?).await?;
        let held = held.map(|j| (j.status.state.as_str(), j.status.worker_id));
        assert_eq!(
            held,
            Some(("active", Some("doomed".to_owned()))),
            "{side}: claimed by the worker that never heard of it"
        );
        let claims = poll_for_reclaim(app, &queue).await?;
        assert_eq!(
            claims.len(),
            1,
            "{side}: reclaimed exactly once: {claims:?}"
        );
        let (winner, got) = &claims[0];
        assert_eq!(got["id"], id.as_str());
        assert_eq!(got["attempt"], 2);
        assert_eq!(got["errors"][0]["type"], "visibility_timeout");
        let late = app
            .ack(json!({"job_id": id, "worker_id": "doomed"}))
            .await?;
        assert_eq!(late.status, 409, "{side}: the late ACK is refused");
        let ack = app.ack(json!({"job_id": id, "worker_id": winner})).await?;
        assert_eq!(ack.status, 200, "{side}");
    }
    drop(api);
    rig.teardown().await;
    Ok(())
}

#[derive(Default)]
struct Ledger {
    /// Jobs whose PUSH answered 201 (or 409 `duplicate` on a retry after a 503).
    created: HashSet<String>,
    /// Jobs whose PUSH only ever answered 503: they may or may not exist.
    unknown: HashSet<String>,
    /// (job, attempt) -> worker, for every job a FETCH delivered.
    deliveries: HashMap<(String, u64), String>,
    /// Job -> attempt, for every ACK answered 200.
    acked: HashMap<String, u64>,
    /// (job, attempt), for every FAIL answered 200.
    failed: Vec<(String, u64)>,
    violations: Vec<String>,
    outcomes: HashMap<String, u64>,
}

impl Ledger {
    fn count(&mut self, what: impl Into<String>) {
        *self.outcomes.entry(what.into()).or_default() += 1;
    }
}

type Shared = Arc<Mutex<Ledger>>;

fn with<T>(ledger: &Shared, f: impl FnOnce(&mut Ledger) -> T) -> T {
    let mut l = ledger
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&mut l)
}

async fn produce(app: Arc<TestApp>, ledger: Shared, ids: Vec<String>) -> anyhow::Result<()> {
    for id in ids {
        let mut retried = false;
        let mut fate = None;
        for _ in 0..10 {
            let r = app.push(job(&id, "soak")).await?;
            let outcome = match (r.status, retried) {
                (201, _) => {
                    fate = Some(true);
                    "push 201"
                }
                (409, true) if r.body["error"]["code"] == "duplicate" => {
                    fate = Some(true);
                    "push 409 after 503 (landed)"
                }
                _ if backend_error(&r) => {
                    retried = true;
                    "push 503"
                }
                _ => {
                    with(&ledger, |l| {
                        l.violations
                            .push(format!("PUSH {id}: {} {}", r.status, r.body))
                    });
                    fate = Some(false);
                    "push violation"
                }
            };
            with(&ledger, |l| l.count(outcome));
            if fate.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        with(&ledger, |l| match fate {
            Some(true) => {
                l.created.insert(id);
            }
            Some(false) => {}
            None => {
                l.unknown.insert(id);
            }
        });
    }
    Ok(())
}

const SOAK_LEASE_MS: u64 = 10_000;

/// ACK or FAIL of a held job, retried on 503. A 409 is accepted only when it can be
/// explained without the faults lying: the lease had run out (a late ACK), or an
/// earlier attempt of this very request got a 503 and may have landed.
async fn settle(
    app: &TestApp,
    ledger: &Shared,
    worker: &str,
    job: &Value,
    fetched_at: Instant,
) -> anyhow::Result<()> {
    let id = job["id"].as_str().unwrap_or_default().to_owned();
    let attempt = job["attempt"].as_u64().unwrap_or(0);
    let fail = attempt == 1 && id.bytes().last().is_some_and(|b| b % 4 == 0);
    let verb = if fail { "fail" } else { "ack" };
    let mut retried = false;
    for _ in 0..10 {
        let r = if fail {
            app.nack(json!({"job_id": id, "worker_id": worker,
                "error": {"type": "soak", "message": format!("{worker} attempt {attempt}")}}))
                .await?
        } else {
            app.ack(json!({"job_id": id, "worker_id": worker, "result": {"by": worker}}))
                .await?
        };
        let late = fetched_at.elapsed() >= Duration::from_millis(SOAK_LEASE_MS);
        let outcome = match r.status {
            200 => {
                with(ledger, |l| {
                    if fail {
                        l.failed.push((id.clone(), attempt));
                    } else if let Some(before) = l.acked.insert(id.clone(), attempt) {
                        l.violations
                            .push(format!("{id} acked twice (attempts {before}, {attempt})"));
                    }
                });
                format!("{verb} 200")
            }
            409 if late => format!("{verb} 409 (lease ran out)"),
            409 if retried => format!("{verb} 409 after 503 (landed)"),
            _ if backend_error(&r) => {
                retried = true;
                with(ledger, |l| l.count(format!("{verb} 503")));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            _ => {
                with(ledger, |l| {
                    l.violations.push(format!(
                        "{verb} {id} attempt {attempt} by {worker}: {} {}",
                        r.status, r.body
                    ))
                });
                format!("{verb} violation")
            }
        };
        with(ledger, |l| l.count(outcome));
        return Ok(());
    }
    Ok(())
}

async fn work(
    app: Arc<TestApp>,
    ledger: Shared,
    w: usize,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let worker = format!("w{w}");
    while !stop.load(Ordering::Relaxed) {
        let fetched_at = Instant::now();
        let r = app
            .fetch(
                json!({"queues": ["soak"], "count": 1 + w % 2, "worker_id": worker,
                "visibility_timeout_ms": SOAK_LEASE_MS}),
            )
            .await?;
        if backend_error(&r) {
            with(&ledger, |l| l.count("fetch 503"));
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        if r.status != 200 {
            with(&ledger, |l| {
                l.count("fetch violation");
                l.violations.push(format!("FETCH: {} {}", r.status, r.body));
            });
            continue;
        }
        let jobs = r.body["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            tokio::time::sleep(Duration::from_millis(40)).await;
            continue;
        }
        for job in &jobs {
            let key = (
                job["id"].as_str().unwrap_or_default().to_owned(),
                job["attempt"].as_u64().unwrap_or(0),
            );
            with(&ledger, |l| {
                l.count("delivered");
                if let Some(other) = l.deliveries.insert(key.clone(), worker.clone()) {
                    l.violations.push(format!(
                        "{key:?} delivered to {other} and {worker}: two owners of one lease"
                    ));
                }
            });
        }
        for job in &jobs {
            settle(&app, &ledger, &worker, job, fetched_at).await?;
        }
    }
    Ok(())
}

/// 10% of DynamoDB calls fail, in every way the proxy knows, while producers push and
/// workers fetch, ACK and FAIL. Every answer is the success it claims or a retryable
/// `backend_error`; once the faults stop, the same workers drain the queue and the table
/// holds exactly the jobs pushed, every one completed, with consistent attempt counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_ten_percent_faults_answers_are_true_and_nothing_is_lost_duplicated_or_stuck(
) -> anyhow::Result<()> {
    let jobs: usize = std::env::var("OJS_FAULT_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let rig = rig(seed()).await?;
    let app = &rig.app;
    assert_eq!(app.push(job(&new_id(), "soak")).await?.status, 201);
    // The sweep runs through the faulty store too; its failures are retried next tick.
    let sweep_store = app.store.clone();
    let sweeper = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = ojs_tests::sweep(&sweep_store, ojs_core::time::now()).await;
        }
    });
    rig.proxy.set_rate(0.10, &Fault::ALL, Filter::Any);
    let started = Instant::now();
    let ledger: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..16)
        .map(|w| {
            tokio::spawn(work(
                Arc::clone(app),
                Arc::clone(&ledger),
                w,
                Arc::clone(&stop),
            ))
        })
        .collect();
    let ids: Vec<String> = (0..jobs).map(|_| new_id()).collect();
    let producers: Vec<_> = ids
        .chunks(jobs.div_ceil(4).max(1))
        .map(|chunk| {
            tokio::spawn(produce(
                Arc::clone(app),
                Arc::clone(&ledger),
                chunk.to_vec(),
            ))
        })
        .collect();
    for p in producers {
        p.await??;
    }
    let produced = started.elapsed();
    // Keep the faults on while the workers catch up, then heal and drain.
    let fault_phase_end = Instant::now() + Duration::from_secs(15);
    while Instant::now() < fault_phase_end && with(&ledger, |l| l.acked.len() < l.created.len()) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rig.proxy.heal();
    let report = rig.proxy.report();
    let healed = started.elapsed();
    let (created, unknown) = with(&ledger, |l| (l.created.clone(), l.unknown.clone()));
    let mut expected: HashSet<String> = created.clone();
    for id in &unknown {
        if rig.state(id).await?.is_some() {
            expected.insert(id.clone());
        }
    }
    // Drain: a job whose FETCH answer was lost comes back after its 10 s lease.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending: HashSet<String> = expected.clone();
    while !pending.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut done = Vec::new();
        for id in &pending {
            if rig.state(id).await?.as_deref() == Some("completed") {
                done.push(id.clone());
            }
        }
        for id in done {
            pending.remove(&id);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await??;
    }
    sweeper.abort();
    let elapsed = started.elapsed();

    let ledger = with(&ledger, std::mem::take);
    let mut problems = ledger.violations.clone();
    if !pending.is_empty() {
        problems.push(format!(
            "{} jobs stuck after the faults stopped: {pending:?}",
            pending.len()
        ));
    }
    let items = table_items(rig.direct.table()).await?;
    let stored = jobs_in(&items);
    let stored_ids: HashSet<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    let pushed: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let lost: Vec<_> = created
        .iter()
        .filter(|id| !stored_ids.contains(id.as_str()))
        .collect();
    if !lost.is_empty() {
        problems.push(format!("lost (PUSH said 201): {lost:?}"));
    }
    // The warm-up job is the one stored job nobody in the ledger pushed.
    let strays = stored
        .iter()
        .filter(|(id, _)| !pushed.contains(id.as_str()))
        .count();
    if strays != 1 || stored.len() != stored_ids.len() {
        problems.push(format!(
            "{strays} stray jobs, {} items for {} ids",
            stored.len(),
            stored_ids.len()
        ));
    }
    let mut lost_claims = 0;
    for (id, state) in &stored {
        if !pushed.contains(id.as_str()) {
            continue;
        }
        if state != "completed" {
            problems.push(format!("{id} ended {state}"));
            continue;
        }
        let Some(job) = rig.direct.engine().get_job(&JobId::parse(id)?).await? else {
            continue;
        };
        let attempt = u64::from(job.status.attempt);
        let mut error_attempts: Vec<u64> = job
            .status
            .errors
            .iter()
            .filter_map(|e| e["attempt"].as_u64())
            .collect();
        error_attempts.sort_unstable();
        if error_attempts != (1..attempt).collect::<Vec<_>>() {
            problems.push(format!(
                "{id}: attempt {attempt} but errors for attempts {error_attempts:?}"
            ));
        }
        if let Some(a) = ledger.acked.get(id) {
            if *a != attempt {
                problems.push(format!("{id}: ACK of attempt {a} answered 200 but the job completed at attempt {attempt}"));
            }
        }
        for a in 1..=attempt {
            if !ledger.deliveries.contains_key(&(id.clone(), a)) {
                lost_claims += 1;
                let reclaimed =
                    job.status.errors.iter().any(|e| {
                        e["attempt"].as_u64() == Some(a) && e["type"] == "visibility_timeout"
                    });
                if a == attempt || !reclaimed {
                    problems.push(format!(
                        "{id}: attempt {a} never reached a worker and was not reclaimed"
                    ));
                }
            }
        }
    }
    for (id, a) in &ledger.failed {
        let job = rig.direct.engine().get_job(&JobId::parse(id)?).await?;
        let recorded = job.is_some_and(|j| {
            j.status
                .errors
                .iter()
                .any(|e| e["attempt"].as_u64() == Some(*a) && e["type"] == "soak")
        });
        if !recorded {
            problems.push(format!(
                "FAIL of {id} attempt {a} answered 200 but is not in its errors"
            ));
        }
    }

    let mut outcomes: Vec<_> = ledger.outcomes.iter().collect();
    outcomes.sort();
    println!(
        "{jobs} jobs ({} created, {} unknown after 503s of which {} exist), pushed in {produced:?}, faults healed at {healed:?}, done in {elapsed:?}",
        created.len(),
        unknown.len(),
        expected.len() - created.len(),
    );
    println!("{}", report.summary());
    println!("outcomes: {outcomes:?}");
    println!("claims whose FETCH answer was lost, then reclaimed: {lost_claims}");
    rig.teardown().await;
    for kind in Fault::ALL {
        assert!(
            report.injected.get(&kind).copied().unwrap_or(0) > 0,
            "no {} fault was injected: the test did not test it",
            kind.name()
        );
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    Ok(())
}

/// A batch transaction that landed but whose answers were all lost is rolled back with the
/// rest (review #8: it stayed, so the client's retry met `duplicate` or duplicated it), and
/// the same batch sent again lands whole. When a later chunk's answer is lost, the
/// earlier chunks go too.
#[tokio::test]
async fn a_batch_chunk_whose_answer_was_lost_is_rolled_back() -> anyhow::Result<()> {
    let rig = rig(4).await?;
    let app = &rig.app;
    let ids: Vec<String> = (0..3).map(|_| new_id()).collect();
    let jobs: Vec<Value> = ids.iter().map(|id| job(id, "lostbatch")).collect();
    rig.proxy.script(
        Filter::op("TransactWriteItems"),
        &[Fault::ServerErrorAfter; 3],
    );
    let first = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({ "jobs": jobs })),
        )
        .await?;
    assert!(backend_error(&first), "{} {:?}", first.status, first.body);
    for id in &ids {
        assert_eq!(rig.state(id).await?, None, "{id} was rolled back");
    }
    let again = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({ "jobs": jobs })),
        )
        .await?;
    assert_eq!(again.status, 201, "{:?}", again.body);
    for id in &ids {
        assert_eq!(rig.state(id).await?.as_deref(), Some("available"));
    }
    // 120 jobs are two transactions; the first lands, the second lands unanswered: both
    // are undone.
    let ids: Vec<String> = (0..120).map(|_| new_id()).collect();
    let jobs: Vec<Value> = ids.iter().map(|id| job(id, "lostbatch")).collect();
    rig.proxy.script(
        Filter::op("TransactWriteItems"),
        &[
            Fault::Pass,
            Fault::DropAfter,
            Fault::DropAfter,
            Fault::DropAfter,
        ],
    );
    let r = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({ "jobs": jobs })),
        )
        .await?;
    assert!(backend_error(&r), "{} {:?}", r.status, r.body);
    for id in &ids {
        assert_eq!(rig.state(id).await?, None, "{id} was rolled back");
    }
    rig.teardown().await;
    Ok(())
}

/// A rate-limited claim is a transaction, which returns no item: when its answers are all
/// lost although it landed, the claimed job is read back and delivered (review #19d: the
/// FETCH failed and the job sat leased to nobody until its lease ended, losing an
/// attempt).
#[tokio::test]
async fn a_rate_limited_claim_whose_answer_was_lost_is_still_delivered() -> anyhow::Result<()> {
    let rig = rig(5).await?;
    let app = &rig.app;
    let id = new_id();
    let mut body = job(&id, "rlamb");
    body["options"]["rate_limit"] = json!({"key": "amb-partner", "concurrency": 1});
    assert_eq!(app.push(body).await?.status, 201);
    ojs_tests::after_index_lag().await;
    rig.proxy.script(
        Filter::op("TransactWriteItems"),
        &[Fault::ServerErrorAfter; 3],
    );
    let fetched = app
        .fetch(json!({"queues": ["rlamb"], "worker_id": "w", "visibility_timeout_ms": 60000}))
        .await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    assert_eq!(
        fetched.body["jobs"][0]["id"],
        id.as_str(),
        "{:?}",
        fetched.body
    );
    assert_eq!(fetched.body["jobs"][0]["attempt"], 1);
    assert_eq!(rig.proxy.scripted_left(), 0);
    let ack = app.ack(json!({"job_id": id, "worker_id": "w"})).await?;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    rig.teardown().await;
    Ok(())
}

/// A batch callback transaction cancelled by a conflicting transaction (not by its
/// guard) is tried again and fires once (review #10: any cancellation was taken as
/// "fired already" and the callback was lost).
#[tokio::test]
async fn a_callback_transaction_lost_to_a_conflict_is_retried_and_fires_once() -> anyhow::Result<()>
{
    let rig = rig(6).await?;
    let app = &rig.app;
    let (_, id) = rig
        .workflow_with_step_claimed(
            json!({"type": "batch", "jobs": [{"type": "cb.step", "args": [], "options": {"queue": "cbq"}}],
                "callbacks": {"on_complete": {"type": "cb.done", "args": [], "options": {"queue": "cbq-done"}}}}),
            "cbq",
        )
        .await?;
    rig.proxy.script(
        Filter::op("TransactWriteItems"),
        &[Fault::TransactionConflict, Fault::TransactionConflict],
    );
    let ack = app.ack(json!({"job_id": id, "worker_id": "w"})).await?;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    assert_eq!(rig.proxy.scripted_left(), 0, "both conflicts were met");
    ojs_tests::after_index_lag().await;
    let done = app
        .fetch(json!({"queues": ["cbq-done"], "count": 10}))
        .await?;
    let jobs = done.body["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 1, "{:?}", done.body);
    assert_eq!(jobs[0]["type"], "cb.done");
    rig.teardown().await;
    Ok(())
}

/// A change stream batch that keeps failing is given up after its attempts (as the
/// stream function's event source mapping does), so every later change still applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_batch_that_keeps_failing_is_given_up_not_retried_forever() -> anyhow::Result<()> {
    async fn push(rig: &Rig) -> anyhow::Result<u16> {
        let r = rig
            .app
            .push(json!({"type": "t", "args": [], "options": {"queue": "stuck-stream"}}))
            .await?;
        Ok(r.status)
    }
    async fn failing(rig: &Rig, attempts: usize) {
        // The batch's transaction (counter ADD, event page, marker) fails every time
        // (PUSH itself is a PutItem).
        rig.proxy
            .set_rate(1.0, &[Fault::ServerError], Filter::op("TransactWriteItems"));
        for _ in 0..attempts {
            rig.app.store.catch_up().await;
        }
        rig.proxy.heal();
    }
    let rig = rig(7).await?;
    let queue = ojs_core::QueueName::parse("stuck-stream").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    // Nine failed attempts: the batch is still there, and the next one applies it.
    assert_eq!(push(&rig).await?, 201);
    failing(&rig, 9).await;
    assert_eq!(
        rig.app.store.derived().queue_stats(&queue).await?.available,
        1
    );
    // Ten: it is given up, and what comes after applies.
    assert_eq!(push(&rig).await?, 201);
    failing(&rig, 10).await;
    assert_eq!(push(&rig).await?, 201);
    let available = rig.app.store.derived().queue_stats(&queue).await?.available;
    assert_eq!(available, 2, "the second job's batch was given up");
    rig.teardown().await;
    Ok(())
}

/// A workflow follow-up throttled past the SDK's own retries is tried again within the
/// request that finished the step: the ACK of a group's last job leaves the group
/// finished, not `running` until the sweep's check a minute later.
#[tokio::test]
async fn a_throttled_workflow_follow_up_is_retried_within_the_ack() -> anyhow::Result<()> {
    let rig = rig_on(&raw_dynamodb_endpoint(), seed()).await?;
    let app = &rig.app;
    let (created, id) = rig
        .workflow_with_step_claimed(
            json!({"type": "group", "name": "throttled",
                "jobs": [{"type": "g.step", "args": [], "options": {"queue": "wf-throttled"}}]}),
            "wf-throttled",
        )
        .await?;
    let wf = created.body["workflow"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The ACK's own write passes; the follow-up's first write (the step recorded on the
    // workflow) is throttled as often as the SDK tries it.
    rig.proxy.script(
        Filter::op("UpdateItem"),
        &[
            Fault::Pass,
            Fault::Throttling,
            Fault::Throttling,
            Fault::Throttling,
        ],
    );
    let ack = app.ack(json!({"job_id": id, "worker_id": "w"})).await?;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    assert_eq!(rig.proxy.scripted_left(), 0, "every throttle was met");
    let got = app.workflow(&wf).await?;
    assert_eq!(got.body["workflow"]["state"], "completed", "{:?}", got.body);
    rig.teardown().await;
    Ok(())
}

/// A FETCH that fails after it finished a job on its way (an expired workflow step,
/// discarded where it was found) still moves that job's workflow on before it answers
/// the error: the workflow is failed at once, not `running` until the sweep's check.
#[tokio::test]
async fn a_fetch_that_fails_after_finishing_a_step_still_moves_its_workflow_on(
) -> anyhow::Result<()> {
    let rig = rig_on(&raw_dynamodb_endpoint(), seed()).await?;
    let app = &rig.app;
    let queue = "wf-fetch-fails";
    let created = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "chain", "name": "expiring", "steps": [
                {"type": "e.step", "args": [],
                    "options": {"queue": queue, "expires_at": "2000-01-01T00:00:00Z"}},
                {"type": "e.next", "args": [], "options": {"queue": queue}}]})),
        )
        .await?;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let wf = created.body["workflow"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let other = app.push(job(&new_id(), queue)).await?;
    assert_eq!(other.status, 201, "{:?}", other.body);
    ojs_tests::after_index_lag().await;
    // The FETCH first moves the queue's due jobs on: the expired step is discarded (its
    // write passes); the claim of the job behind it then fails as often as the SDK tries.
    rig.proxy.script(
        Filter::op("UpdateItem"),
        &[
            Fault::Pass,
            Fault::ServerError,
            Fault::ServerError,
            Fault::ServerError,
        ],
    );
    let fetched = app
        .fetch(json!({"queues": [queue], "worker_id": "w"}))
        .await?;
    assert!(backend_error(&fetched), "{:?}", fetched.body);
    assert_eq!(rig.proxy.scripted_left(), 0, "every fault was met");
    let got = app.workflow(&wf).await?;
    assert_eq!(got.body["workflow"]["state"], "failed", "{:?}", got.body);
    rig.teardown().await;
    Ok(())
}
