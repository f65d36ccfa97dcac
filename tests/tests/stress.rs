//! Load: 32 workers FETCH, ACK and FAIL while 8 producers PUSH and CANCEL, over
//! `OJS_STRESS_JOBS` jobs (default 600; `make stress` runs 20,000) in two queues with
//! mixed priorities. Some jobs fail and are retried, some fail for good (discarded or
//! dead-lettered), some are cancelled while scheduled and some while workers race for
//! them. The test tracks who holds every job: a job delivered while another worker's lease
//! on it is live, an attempt delivered twice, a job lost or ending in the wrong state, or
//! an attempt count that disagrees with the deliveries seen, fails it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ojs_tests::fault_proxy::{jobs_in, table_items};
use ojs_tests::TestApp;
use serde_json::{json, Value};

const WORKERS: usize = 32;
const PRODUCERS: usize = 8;
/// Long enough never to run out while a worker holds a job here; a lease that did run out
/// would show as a `visibility_timeout` error, which the test refuses.
const LEASE_MS: u64 = 20_000;
const QUEUES: [&str; 2] = ["stress-a", "stress-b"];

/// What a job is meant to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Plan {
    /// ACKed at its first attempt.
    Succeed,
    /// FAILs this many attempts, then is ACKed.
    Flaky(u64),
    /// FAILs every attempt; discarded after 2 (into the dead letter queue or not).
    Doomed { dead_letter: bool },
    /// Pushed for later, cancelled before it runs.
    CancelScheduled,
    /// Pushed available and cancelled at once, while workers race for it.
    CancelRacing,
}

impl Plan {
    fn of(i: usize) -> Self {
        match i % 20 {
            0..=11 => Plan::Succeed,
            12..=13 => Plan::Flaky(1),
            14 => Plan::Flaky(2),
            15 => Plan::Doomed { dead_letter: false },
            16 => Plan::Doomed { dead_letter: true },
            17 => Plan::CancelScheduled,
            _ => Plan::CancelRacing,
        }
    }

    fn fail_times(self) -> u64 {
        match self {
            Plan::Flaky(k) => k,
            Plan::Doomed { .. } => u64::MAX,
            _ => 0,
        }
    }

    fn envelope(self, i: usize, id: &str) -> Value {
        let queue = QUEUES[i % 2];
        let priority = (i * 7 % 11) as i64 - 5;
        let mut options = json!({"queue": queue, "priority": priority,
            "retry": {"max_attempts": 4, "initial_interval": "PT0.05S", "backoff_coefficient": 1.0, "jitter": false}});
        match self {
            Plan::Doomed { dead_letter } => {
                options["retry"]["max_attempts"] = json!(2);
                options["retry"]["on_exhaustion"] = json!(if dead_letter {
                    "dead_letter"
                } else {
                    "discard"
                });
            }
            Plan::CancelScheduled => options["delay_until"] = json!("+PT1H"),
            _ => {}
        }
        json!({"id": id, "type": "stress.job", "args": [i, self.fail_times().min(99)], "options": options})
    }
}

struct Hold {
    worker: usize,
    attempt: u64,
    since: Instant,
    /// The holder sent its ACK/FAIL: the job may legitimately move on before the answer.
    releasing: bool,
}

struct Record {
    plan: Plan,
    holder: Option<Hold>,
    /// Attempts delivered, in order, with the worker.
    deliveries: Vec<(u64, usize)>,
    /// The terminal state the answers so far promise, and when that answer arrived.
    outcome: Option<&'static str>,
    settled_at: Option<Instant>,
    cancel_lost_race: bool,
}

#[derive(Default)]
struct Ledger {
    jobs: HashMap<String, Record>,
    violations: Vec<String>,
    counts: HashMap<&'static str, u64>,
    settled: usize,
}

impl Ledger {
    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    /// Records the terminal state an answer promised; a second promise is a violation.
    fn settle(&mut self, id: &str, state: &'static str) {
        let Some(rec) = self.jobs.get_mut(id) else {
            self.violations
                .push(format!("{id}: settled but never pushed"));
            return;
        };
        if let Some(before) = rec.outcome {
            self.violations
                .push(format!("{id}: answered {before} and then {state}"));
            return;
        }
        rec.outcome = Some(state);
        rec.settled_at = Some(Instant::now());
        self.settled += 1;
    }
}

type Shared = Arc<Mutex<Ledger>>;

fn with<T>(ledger: &Shared, f: impl FnOnce(&mut Ledger) -> T) -> T {
    let mut l = ledger
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&mut l)
}

async fn produce(app: Arc<TestApp>, ledger: Shared, items: Vec<usize>) -> anyhow::Result<()> {
    for i in items {
        let plan = Plan::of(i);
        let id = uuid::Uuid::now_v7().to_string();
        with(&ledger, |l| {
            l.jobs.insert(
                id.clone(),
                Record {
                    plan,
                    holder: None,
                    deliveries: Vec::new(),
                    outcome: None,
                    settled_at: None,
                    cancel_lost_race: false,
                },
            )
        });
        let pushed = app.push(plan.envelope(i, &id)).await?;
        with(&ledger, |l| l.count("push"));
        anyhow::ensure!(pushed.status == 201, "PUSH {i}: {:?}", pushed.body);
        if !matches!(plan, Plan::CancelScheduled | Plan::CancelRacing) {
            continue;
        }
        if i.is_multiple_of(3) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let r = app.cancel(&id).await?;
        with(&ledger, |l| match (r.status, plan) {
            (200, _) => {
                l.count("cancel");
                l.settle(&id, "cancelled");
            }
            (409, Plan::CancelRacing)
                if r.body["error"]["details"]["current_state"] == "completed" =>
            {
                // A worker finished it first: its ACK's answer settles it.
                l.count("cancel lost the race");
                if let Some(rec) = l.jobs.get_mut(&id) {
                    rec.cancel_lost_race = true;
                }
            }
            _ => l
                .violations
                .push(format!("CANCEL {id}: {} {}", r.status, r.body)),
        });
    }
    Ok(())
}

/// Checks and records a delivery of `job` to `worker` by a FETCH sent at `sent`.
fn deliver(l: &mut Ledger, worker: usize, job: &Value, sent: Instant) {
    l.count("delivered");
    let id = job["id"].as_str().unwrap_or_default().to_owned();
    let attempt = job["attempt"].as_u64().unwrap_or(0);
    let Some(rec) = l.jobs.get_mut(&id) else {
        l.violations
            .push(format!("{id}: delivered but never pushed"));
        return;
    };
    let mut problems = Vec::new();
    if let Some(h) = &rec.holder {
        if !h.releasing && h.since.elapsed() < Duration::from_millis(LEASE_MS) {
            problems.push(format!(
                "{id}: attempt {attempt} delivered to w{worker} while w{} holds attempt {} under a live lease",
                h.worker, h.attempt
            ));
        }
    }
    if rec.deliveries.iter().any(|(a, _)| *a == attempt) {
        problems.push(format!("{id}: attempt {attempt} delivered twice"));
    }
    if attempt != rec.deliveries.len() as u64 + 1 {
        problems.push(format!(
            "{id}: attempt {attempt} delivered after {} deliveries",
            rec.deliveries.len()
        ));
    }
    // A FETCH answered after the CANCEL may still have claimed before it; one sent after
    // the job was known terminal may not.
    if let (Some(state), Some(at)) = (rec.outcome, rec.settled_at) {
        if at < sent {
            problems.push(format!("{id}: delivered after it was {state}"));
        }
    }
    rec.holder = Some(Hold {
        worker,
        attempt,
        // The lease began between the FETCH's sending and its answer: from the sending,
        // a lease judged live still is, however long the answer took.
        since: sent,
        releasing: false,
    });
    rec.deliveries.push((attempt, worker));
    l.violations.extend(problems);
}

fn release(l: &mut Ledger, id: &str, worker: usize, attempt: u64, done: bool) {
    if let Some(h) = l.jobs.get_mut(id).and_then(|r| r.holder.as_mut()) {
        if h.worker == worker && h.attempt == attempt {
            h.releasing = true;
            if done {
                if let Some(rec) = l.jobs.get_mut(id) {
                    rec.holder = None;
                }
            }
        }
    }
}

async fn work(
    app: Arc<TestApp>,
    ledger: Shared,
    worker: usize,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let name = format!("w{worker}");
    let queues = if worker.is_multiple_of(2) {
        [QUEUES[0], QUEUES[1]]
    } else {
        [QUEUES[1], QUEUES[0]]
    };
    let mut idle = 0;
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let r = app
            .fetch(
                json!({"queues": queues, "count": 1 + worker % 3, "worker_id": name,
                "visibility_timeout_ms": LEASE_MS}),
            )
            .await?;
        anyhow::ensure!(r.status == 200, "FETCH: {} {}", r.status, r.body);
        let jobs = r.body["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            // Idle workers back off (up to 400 ms) so polling does not starve the rest.
            idle = (idle + 1).min(8);
            with(&ledger, |l| l.count("empty fetch"));
            tokio::time::sleep(Duration::from_millis(50 * idle)).await;
            continue;
        }
        idle = 0;
        with(&ledger, |l| {
            l.count("fetch");
            for job in &jobs {
                deliver(l, worker, job, sent);
            }
        });
        for job in &jobs {
            let id = job["id"].as_str().unwrap_or_default().to_owned();
            let attempt = job["attempt"].as_u64().unwrap_or(0);
            let fail = attempt <= job["args"][1].as_u64().unwrap_or(0);
            with(&ledger, |l| release(l, &id, worker, attempt, false));
            let r = if fail {
                app.nack(json!({"job_id": id, "worker_id": name,
                    "error": {"type": "stress.failure", "message": format!("attempt {attempt}")}}))
                    .await?
            } else {
                app.ack(json!({"job_id": id, "worker_id": name, "result": {"attempt": attempt}}))
                    .await?
            };
            with(&ledger, |l| {
                release(l, &id, worker, attempt, true);
                match (r.status, fail, r.body["state"].as_str()) {
                    (200, false, Some("completed")) => {
                        l.count("ack");
                        l.settle(&id, "completed");
                    }
                    (200, true, Some("retryable")) => l.count("fail, retried"),
                    (200, true, Some("discarded")) => {
                        l.count("fail, discarded");
                        l.settle(&id, "discarded");
                    }
                    (409, _, _) if r.body["error"]["details"]["current_state"] == "cancelled" => {
                        l.count("ack/fail of a job cancelled meanwhile");
                    }
                    _ => l.violations.push(format!(
                        "{} {id} attempt {attempt} by {name}: {} {}",
                        if fail { "FAIL" } else { "ACK" },
                        r.status,
                        r.body
                    )),
                }
            });
        }
    }
    Ok(())
}

/// Checks the final job (INFO) against its record; returns problems.
fn check_final(id: &str, rec: &Record, job: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let state = job["state"].as_str().unwrap_or("?");
    let attempt = job["attempt"].as_u64().unwrap_or(u64::MAX);
    let errors = job["errors"].as_array().map_or(0, Vec::len) as u64;
    if rec.outcome != Some(state) {
        problems.push(format!(
            "{id}: INFO says {state}, answers said {:?}",
            rec.outcome
        ));
    }
    if attempt != rec.deliveries.len() as u64 {
        problems.push(format!(
            "{id}: attempt {attempt} but {} deliveries seen",
            rec.deliveries.len()
        ));
    }
    let (want_state, want_attempt, want_errors) = match rec.plan {
        Plan::Succeed => ("completed", 1, 0),
        Plan::Flaky(k) => ("completed", k + 1, k),
        Plan::Doomed { .. } => ("discarded", 2, 2),
        Plan::CancelScheduled => ("cancelled", 0, 0),
        Plan::CancelRacing if rec.cancel_lost_race => ("completed", 1, 0),
        // Cancelled before or while a worker held it.
        Plan::CancelRacing => ("cancelled", attempt.min(1), 0),
    };
    if (state, attempt, errors) != (want_state, want_attempt, want_errors) {
        problems.push(format!(
            "{id} ({:?}): {state} at attempt {attempt} with {errors} errors, expected {want_state} at {want_attempt} with {want_errors}",
            rec.plan
        ));
    }
    if let Plan::Doomed { dead_letter } = rec.plan {
        if job["dead_letter"].as_bool().unwrap_or(false) != dead_letter {
            problems.push(format!("{id}: dead_letter should be {dead_letter}"));
        }
    }
    let foreign = job["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] != "stress.failure")
        .count();
    if foreign > 0 {
        problems.push(format!(
            "{id}: {foreign} errors the workers did not report (a lease ran out?)"
        ));
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_workers_and_eight_producers_lose_nothing_and_never_share_a_lease(
) -> anyhow::Result<()> {
    let jobs: usize = std::env::var("OJS_STRESS_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let app = Arc::new(TestApp::spawn_with_sweeper().await?);
    let ledger: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            tokio::spawn(work(
                Arc::clone(&app),
                Arc::clone(&ledger),
                w,
                Arc::clone(&stop),
            ))
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let items: Vec<usize> = (p..jobs).step_by(PRODUCERS).collect();
            tokio::spawn(produce(Arc::clone(&app), Arc::clone(&ledger), items))
        })
        .collect();
    for p in producers {
        p.await??;
    }
    let pushed_in = started.elapsed();
    // Generous (8 jobs/s passes; a debug build on a busy 2-core machine does ~15-25): a
    // stuck job fails the test instead of hanging it. A machine so loaded that the pushes
    // alone took long gets as much more: settling a job takes a FETCH and an ACK (and
    // retries) where pushing took one request, so four times the push phase, plus a minute.
    let deadline = started
        + Duration::from_secs(60 + jobs as u64 / 8).max(pushed_in * 4 + Duration::from_secs(60));
    while with(&ledger, |l| l.settled < jobs) && Instant::now() < deadline {
        if workers.iter().any(|w| w.is_finished()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained_in = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await??;
    }
    let ledger = with(&ledger, std::mem::take);
    let mut problems = ledger.violations.clone();
    if ledger.settled < jobs {
        let open: Vec<_> = ledger
            .jobs
            .iter()
            .filter(|(_, r)| r.outcome.is_none())
            .map(|(id, r)| format!("{id} {:?} deliveries {:?}", r.plan, r.deliveries))
            .take(20)
            .collect();
        problems.push(format!(
            "{} of {jobs} jobs never settled, e.g. {open:#?}",
            jobs - ledger.settled
        ));
    }

    // Read every job back through INFO, 32 at a time.
    let ids: Vec<String> = ledger.jobs.keys().cloned().collect();
    let mut infos = HashMap::new();
    for chunk in ids.chunks(32) {
        let replies = futures::future::join_all(chunk.iter().map(|id| app.info(id))).await;
        for (id, r) in chunk.iter().zip(replies) {
            let r = r?;
            anyhow::ensure!(r.status == 200, "INFO {id}: {} {}", r.status, r.body);
            infos.insert(id.clone(), r.body["job"].clone());
        }
    }
    for (id, rec) in &ledger.jobs {
        if let Some(job) = infos.get(id) {
            problems.extend(check_final(id, rec, job));
        }
    }
    let items = table_items(app.store.table()).await?;
    let stored = jobs_in(&items);
    let lost = ids
        .iter()
        .filter(|id| !stored.iter().any(|(s, _)| s == *id))
        .count();
    if stored.len() != jobs || lost > 0 {
        problems.push(format!(
            "the table holds {} jobs for {jobs} pushed; {lost} pushed jobs missing",
            stored.len()
        ));
    }
    let duplicates = ledger
        .violations
        .iter()
        .filter(|v| v.contains("live lease") || v.contains("twice"))
        .count();
    let deliveries: u64 = ledger.counts.get("delivered").copied().unwrap_or(0);
    let mut by_plan: HashMap<Plan, usize> = HashMap::new();
    for rec in ledger.jobs.values() {
        *by_plan.entry(rec.plan).or_default() += 1;
    }
    let mut by_plan: Vec<_> = by_plan.into_iter().collect();
    by_plan.sort();
    let mut counts: Vec<_> = ledger.counts.iter().collect();
    counts.sort();
    let secs = drained_in.as_secs_f64();
    println!(
        "stress: {jobs} jobs, {WORKERS} workers, {PRODUCERS} producers: pushed in {pushed_in:.1?}, all settled in {drained_in:.1?} ({:.0} jobs/s, {:.0} deliveries/s)",
        jobs as f64 / secs,
        deliveries as f64 / secs
    );
    let usage = app.store.usage();
    println!(
        "DynamoDB: {} calls ({:.1} per job), {:.0} RCU, {:.0} WCU",
        usage.calls,
        usage.calls as f64 / jobs as f64,
        usage.read_units,
        usage.write_units
    );
    println!("plans: {by_plan:?}");
    println!("counts: {counts:?}");
    println!(
        "duplicates (two owners of one lease or one attempt delivered twice): {duplicates}; lost: {lost}; problems: {}",
        problems.len()
    );
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    if let Some(strict) = ojs_tests::strict_proxy::process_report() {
        println!("strict DynamoDB layer: {}", strict.summary());
    }
    anyhow::ensure!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems
            .iter()
            .take(50)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}
