//! Section 8: fairness between tenants (issue #35). Tenant A floods one queue with
//! `flood` jobs; tenant B then pushes `small` jobs into the same queue; `workers` workers
//! serving every tenant FETCH one job at a time and ACK it. B's wait is, per job, the
//! instant its FETCH answered less the instant its PUSH answered (both at the client).
//! Three runs, each on a fresh table: B alone (no flood), B beside the flood in its own
//! lane (the tenants' model), and the same jobs without tenants (one lane: FIFO, what
//! jobs without tenants get, and what B got before tenants existed).
//!
//! Then the DynamoDB cost of one FETCH for any tenant with 1, 10 and 100 tenants having a
//! job ready in the queue (calls and read units, as the store meters them).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ojs_tests::TestApp;
use reqwest::Method;
use serde::Serialize;
use serde_json::{json, Value};

use crate::stats::{ms, percentile};

/// Longest a run may take before the section reports a failure.
const GIVE_UP: Duration = Duration::from_secs(1_800);

/// B's pace in the paced runs: a job every 200 ms (5 a second), a small tenant's trickle:
/// about a quarter of what 8 workers drain beside the flood on DynamoDB Local (some 20
/// lifecycles a second), so half the FETCHes (its fair share) is more than it asks for.
/// Back to back, B's one producer asks for about its whole share there, and a fair
/// scheduler then bounds nothing: its lane backs up.
const PACE: Duration = Duration::from_millis(200);

/// How long the FIFO run may drain A's flood before it stops: B's jobs queue behind all
/// of A's there, so on DynamoDB Local a full flood takes many minutes to reach them. A
/// run stopped here counts each of B's jobs not yet fetched as waiting until the stop: its
/// figures are then lower bounds (`Waits::unfetched` says how many).
const FIFO_CAP: Duration = Duration::from_secs(300);

/// B's waits in one run, ms.
#[derive(Debug, Clone, Serialize)]
pub struct Waits {
    /// What ran: `alone`, `tenants` or `fifo`.
    pub run: String,
    /// Median wait.
    pub p50_ms: f64,
    /// 99th percentile wait.
    pub p99_ms: f64,
    /// Longest wait.
    pub max_ms: f64,
    /// Jobs the workers fetched in all (A's and B's) until B's last was, or until the
    /// run stopped.
    pub fetched: usize,
    /// B's jobs not fetched when the run stopped at its cap (only the FIFO run has one):
    /// each counts as waiting until the stop, so the figures above are lower bounds.
    pub unfetched: usize,
    /// Whether the run started on a fresh DynamoDB Local (`OJS_BENCH_FRESH_DYNAMODB`, as
    /// `make bench` sets it). Without, each run is slower than the one before: DynamoDB
    /// Local's writes slow down as the change stream records of earlier floods pile up.
    pub fresh_dynamodb: bool,
}

/// One FETCH's cost with `tenants` tenants ready.
#[derive(Debug, Clone, Serialize)]
pub struct FetchCost {
    /// Tenants with a job ready in the queue.
    pub tenants: usize,
    /// DynamoDB calls per FETCH (mean of the FETCHes measured).
    pub calls: f64,
    /// Read units per FETCH.
    pub read_units: f64,
    /// Write units per FETCH.
    pub write_units: f64,
}

/// Section 8.
#[derive(Debug, Clone, Serialize)]
pub struct TenantReport {
    /// A's jobs.
    pub flood: usize,
    /// B's jobs.
    pub small: usize,
    /// Workers.
    pub workers: usize,
    /// B's waits: alone, beside the flood with tenants, and without tenants (FIFO).
    pub waits: Vec<Waits>,
    /// B's p99 beside the flood over its p99 alone (the bound: 2).
    pub p99_ratio: f64,
    /// The same with B's jobs pushed one every [`PACE`] (`paced-alone`, `paced-tenants`).
    pub paced_p99_ratio: f64,
    /// [`PACE`], ms.
    pub pace_ms: u64,
    /// FETCH cost with 1, 10 and 100 tenants ready.
    pub fetch_cost: Vec<FetchCost>,
}

async fn call(
    app: &TestApp,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: Value,
) -> anyhow::Result<Value> {
    let mut req = app
        .client
        .request(method, format!("{}{path}", app.base_url))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(t) = tenant {
        req = req.header("X-OJS-Tenant", t);
    }
    let res = req.send().await?;
    let status = res.status().as_u16();
    let body: Value = serde_json::from_slice(&res.bytes().await?).unwrap_or(Value::Null);
    if status >= 300 {
        bail!("{path}: {status} {body}");
    }
    Ok(body)
}

/// One run: A's flood (unless `flood` is 0), then B's jobs while the workers run.
async fn run_once(
    label: &str,
    flood: usize,
    small: usize,
    workers: usize,
    tenants: bool,
    cap: Duration,
    pace: Option<Duration>,
) -> anyhow::Result<Waits> {
    let app = Arc::new(TestApp::spawn().await?);
    let queue = "bench-tenants";
    let (a, b) = if tenants {
        (Some("tenant-a"), Some("tenant-b"))
    } else {
        (None, None)
    };
    for chunk in (0..flood).collect::<Vec<_>>().chunks(100) {
        let jobs: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"type": "bench.flood", "args": [i], "options": {"queue": queue}}))
            .collect();
        call(
            &app,
            a,
            Method::POST,
            "/ojs/v1/jobs/batch",
            json!({ "jobs": jobs }),
        )
        .await?;
    }
    ojs_tests::after_index_lag().await;
    let pushed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let fetched: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (app, fetched, seen) = (app.clone(), fetched.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let worker = format!("bench-w{w}");
            loop {
                let done = fetched.lock().map(|f| f.len()).unwrap_or(0) >= small;
                if done || started.elapsed() > cap {
                    return Ok::<_, anyhow::Error>(());
                }
                let got = call(
                    &app,
                    None,
                    Method::POST,
                    "/ojs/v1/workers/fetch",
                    json!({"queues": [queue], "count": 1, "worker_id": worker}),
                )
                .await?;
                let at = Instant::now();
                for job in got["jobs"].as_array().cloned().unwrap_or_default() {
                    let id = job["id"].as_str().unwrap_or_default().to_owned();
                    seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if job["type"] == "bench.small" {
                        if let Ok(mut f) = fetched.lock() {
                            f.insert(id.clone(), at);
                        }
                    }
                    call(
                        &app,
                        None,
                        Method::POST,
                        "/ojs/v1/workers/ack",
                        json!({"job_id": id}),
                    )
                    .await?;
                }
                if got["jobs"].as_array().is_none_or(Vec::is_empty) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    let began = tokio::time::Instant::now();
    for i in 0..small {
        if let Some(pace) = pace {
            tokio::time::sleep_until(began + pace * u32::try_from(i).unwrap_or(u32::MAX)).await;
        }
        let body = call(
            &app,
            b,
            Method::POST,
            "/ojs/v1/jobs",
            json!({"type": "bench.small", "args": [i], "options": {"queue": queue}}),
        )
        .await?;
        let id = body["job"]["id"].as_str().unwrap_or_default().to_owned();
        if let Ok(mut p) = pushed.lock() {
            p.insert(id, Instant::now());
        }
    }
    for t in tasks {
        t.await.context("a worker panicked")??;
    }
    let stopped = Instant::now();
    let before_last = seen.load(std::sync::atomic::Ordering::Relaxed);
    let pushed = pushed.lock().map(|p| p.clone()).unwrap_or_default();
    let fetched = fetched.lock().map(|f| f.clone()).unwrap_or_default();
    let unfetched = small.saturating_sub(fetched.len());
    if unfetched > 0 && cap >= GIVE_UP {
        bail!(
            "{label}: {} of B's {small} jobs fetched within {GIVE_UP:?}",
            fetched.len()
        );
    }
    // A FETCH may answer before this task recorded the PUSH's answer: a wait of 0. A job
    // not fetched when a capped run stopped waited at least until the stop.
    let waits: Vec<f64> = pushed
        .iter()
        .map(|(id, p)| {
            ms(fetched
                .get(id)
                .unwrap_or(&stopped)
                .saturating_duration_since(*p))
        })
        .collect();
    let p = |q: f64| percentile(&waits, q).unwrap_or(f64::NAN);
    Ok(Waits {
        run: label.to_owned(),
        p50_ms: p(50.0),
        p99_ms: p(99.0),
        max_ms: waits.iter().copied().fold(0.0, f64::max),
        fetched: before_last,
        unfetched,
        fresh_dynamodb: false,
    })
}

/// The cost of a FETCH for any tenant with `tenants` tenants each having jobs ready.
async fn fetch_cost(tenants: usize) -> anyhow::Result<FetchCost> {
    let app = TestApp::spawn().await?;
    let queue = "bench-tenant-cost";
    let fetches: usize = 20;
    for t in 0..tenants {
        let tenant = format!("t{t}");
        let per = fetches.div_ceil(tenants) + 1;
        let jobs: Vec<Value> = (0..per)
            .map(|i| json!({"type": "bench.cost", "args": [i], "options": {"queue": queue}}))
            .collect();
        call(
            &app,
            Some(&tenant),
            Method::POST,
            "/ojs/v1/jobs/batch",
            json!({ "jobs": jobs }),
        )
        .await?;
    }
    ojs_tests::after_index_lag().await;
    // The queue's settings (its tenants) are read once per instance per second or so:
    // one FETCH first, unmeasured, as a warm instance has them.
    call(
        &app,
        None,
        Method::POST,
        "/ojs/v1/workers/fetch",
        json!({"queues": [queue], "count": 1}),
    )
    .await?;
    let before = app.store.usage();
    for _ in 0..fetches {
        let got = call(
            &app,
            None,
            Method::POST,
            "/ojs/v1/workers/fetch",
            json!({"queues": [queue], "count": 1}),
        )
        .await?;
        if got["jobs"].as_array().is_none_or(Vec::is_empty) {
            bail!("a FETCH with {tenants} tenants ready found nothing");
        }
    }
    let used = app.store.usage() - before;
    let per = |x: f64| x / fetches as f64;
    Ok(FetchCost {
        tenants,
        calls: per(used.calls as f64),
        read_units: per(used.read_units),
        write_units: per(used.write_units),
    })
}

/// Section 8 with A's `flood`, B's `small` jobs and `workers` workers.
pub async fn run(flood: usize, small: usize, workers: usize) -> anyhow::Result<TenantReport> {
    if small == 0 || workers == 0 {
        bail!("the tenants section needs jobs of B's and workers");
    }
    // Each run on a fresh DynamoDB Local when the bench may restart it: a run after a
    // 20,000-job flood was otherwise measured on an emulator several times slower (B
    // alone, paced, after two runs: p99 401 ms, against 117 ms back to back on a fresh
    // one), so whichever ran later looked worse.
    let leg = |label: &'static str,
               flood: usize,
               tenants: bool,
               cap: Duration,
               pace: Option<Duration>| async move {
        let fresh = crate::throughput::fresh_dynamodb(workers, 64).await?;
        let mut waits = run_once(label, flood, small, workers, tenants, cap, pace).await?;
        waits.fresh_dynamodb = fresh;
        Ok::<_, anyhow::Error>(waits)
    };
    let alone = leg("alone", 0, true, GIVE_UP, None).await?;
    let fair = leg("tenants", flood, true, GIVE_UP, None).await?;
    let paced_alone = leg("paced-alone", 0, true, GIVE_UP, Some(PACE)).await?;
    let paced_fair = leg("paced-tenants", flood, true, GIVE_UP, Some(PACE)).await?;
    let fifo = leg("fifo", flood, false, FIFO_CAP, None).await?;
    let mut fetch_costs = Vec::new();
    for n in [1, 10, 100] {
        fetch_costs.push(fetch_cost(n).await?);
    }
    Ok(TenantReport {
        flood,
        small,
        workers,
        p99_ratio: fair.p99_ms / alone.p99_ms.max(1.0),
        paced_p99_ratio: paced_fair.p99_ms / paced_alone.p99_ms.max(1.0),
        pace_ms: u64::try_from(PACE.as_millis()).unwrap_or(u64::MAX),
        waits: vec![alone, fair, paced_alone, paced_fair, fifo],
        fetch_cost: fetch_costs,
    })
}
