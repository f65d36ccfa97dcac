//! Section 3: throughput and latency through an in-process server on DynamoDB Local,
//! with 1, 8 and 32 concurrent clients, and the ratio to the raw DynamoDB Local ceiling.
//!
//! Method: a fresh table per run; phase 1, `workers` producers PUSH `jobs` jobs (1 KiB
//! args) to one queue as fast as they can; phase 2, `workers` consumers loop FETCH (1 job)
//! and ACK until every job is acknowledged. Every DynamoDB call of both phases is
//! recorded, then replayed raw (see [`crate::ceiling`]) with the same concurrency.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ojs_tests::TestApp;
use serde::Serialize;
use serde_json::json;

use crate::ceiling::{self, Ceiling};
use crate::meter::{self, Meter};
use crate::stats;

/// Latency summary of one kind of request, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Requests timed.
    pub n: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank).
    pub p99_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

impl Latency {
    fn of(samples: &[f64]) -> Self {
        Self {
            n: samples.len(),
            p50_ms: stats::percentile(samples, 50.0).unwrap_or(0.0),
            p99_ms: stats::percentile(samples, 99.0).unwrap_or(0.0),
            mean_ms: stats::mean(samples).unwrap_or(0.0),
        }
    }
}

/// One run at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Concurrent clients (producers in phase 1, consumers in phase 2).
    pub workers: usize,
    /// Jobs pushed and consumed.
    pub jobs: usize,
    /// Args size of each job.
    pub args_bytes: usize,
    /// Whether the run started on a fresh DynamoDB Local (see [`fresh_dynamodb`]).
    pub fresh_dynamodb: bool,
    /// Whether the tables had their change stream (always, but with `OJS_BENCH_STREAM=off`).
    pub stream: bool,
    /// Phase 1 wall time.
    pub push_seconds: f64,
    /// Phase 2 wall time.
    pub consume_seconds: f64,
    /// PUSH jobs per second (phase 1).
    pub push_jobs_per_s: f64,
    /// FETCH+ACK jobs per second (phase 2).
    pub consume_jobs_per_s: f64,
    /// Whole lifecycles per second: jobs / (phase 1 + phase 2 time).
    pub lifecycle_jobs_per_s: f64,
    /// PUSH latency.
    pub push: Latency,
    /// FETCH latency (requests that returned a job).
    pub fetch: Latency,
    /// ACK latency.
    pub ack: Latency,
    /// FETCHes that found nothing (another consumer won every candidate).
    pub empty_fetches: usize,
    /// Claims lost to another consumer (failed conditional writes).
    pub lost_claims: usize,
    /// DynamoDB calls of both phases.
    pub dynamodb_calls: usize,
    /// DynamoDB calls per job.
    pub calls_per_job: f64,
    /// DynamoDB calls per second the product achieved over both phases.
    pub product_calls_per_s: f64,
    /// The raw replay of the same calls.
    pub ceiling: Ceiling,
    /// Jobs per second the ceiling would allow: ceiling calls/s / calls per job.
    pub ceiling_jobs_per_s: f64,
    /// `lifecycle_jobs_per_s / ceiling_jobs_per_s`.
    pub ratio: f64,
}

/// Section 3 result.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputReport {
    /// The method, in words.
    pub method: String,
    /// One run per concurrency.
    pub runs: Vec<Run>,
    /// This build against another, measured in the same run (`--cpu-baseline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versus: Option<crate::versus::Versus>,
}

/// The method as printed with the results.
pub const METHOD: &str = "In-process server (all endpoint groups, one tokio runtime, no timer) over a fresh table \
on DynamoDB Local; phase 1: W producers PUSH the jobs (1 KiB args, one queue); phase 2: W consumers \
loop FETCH (1 job) + ACK until all are acknowledged. Latency is client-side per request. Ceiling: \
every DynamoDB call of both phases replayed raw (same operations, similar sizes, same indexes touched) \
with W concurrent SDK callers on a fresh table; ratio = product calls/s / raw calls/s. Server, \
clients, replay and DynamoDB Local share this machine's cores.";

/// Runs the benchmark at each concurrency in `workers`.
pub async fn run(
    workers: &[usize],
    jobs: usize,
    args_bytes: usize,
) -> anyhow::Result<ThroughputReport> {
    let mut runs = Vec::new();
    for &w in workers {
        let fresh = fresh_dynamodb(w, args_bytes).await?;
        let mut run = run_one(w, jobs, args_bytes).await?;
        run.fresh_dynamodb = fresh;
        runs.push(run);
    }
    Ok(ThroughputReport {
        method: METHOD.into(),
        runs,
        versus: None,
    })
}

/// Runs `OJS_BENCH_FRESH_DYNAMODB`, a shell command that restarts DynamoDB Local empty,
/// if set, then warms the new instance up ([`warm_up`]); true if it ran. On DynamoDB Local
/// a write to a table with a stream costs more the more records older streams hold,
/// deleted tables' included (about 20 times slower after 25,000 of them;
/// `scripts/ddb-local-stream-cost.py`), so without it a later level, or a replay after a
/// run, is measured on a slower emulator.
pub(crate) async fn fresh_dynamodb(workers: usize, args_bytes: usize) -> anyhow::Result<bool> {
    let restarted = restart_with(std::env::var("OJS_BENCH_FRESH_DYNAMODB").ok().as_deref())?;
    if restarted {
        warm_up(workers, args_bytes).await?;
    }
    Ok(restarted)
}

/// Lifecycles of a warm-up pass.
const WARM_UP_JOBS: usize = 500;

/// A pass of [`WARM_UP_JOBS`] lifecycles at `workers` on a table without a stream, not
/// measured: a restarted DynamoDB Local is a new JVM that has compiled nothing yet, and
/// the first seconds of calls on it ran at half speed (the same 1,000 jobs at 1 worker:
/// 41.8 lifecycles/s on a new instance, 69.6 right after on the same one). Without a
/// stream it leaves no records behind to slow what follows.
async fn warm_up(workers: usize, args_bytes: usize) -> anyhow::Result<()> {
    let meter = Meter::default();
    let store = crate::env::metered_store("warm-up", &meter).await?;
    let sdk = crate::env::sdk().await;
    crate::env::stream_off_for(&ojs_store::client_for(&sdk), store.table()).await?;
    let app = Arc::new(TestApp::spawn_on_store_without_stream(store).await?);
    let result = phases(&app, &meter, workers, WARM_UP_JOBS, args_bytes).await;
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    result.map(|_| ()).context("warming DynamoDB Local up")
}

fn restart_with(command: Option<&str>) -> anyhow::Result<bool> {
    let Some(command) = command.filter(|c| !c.trim().is_empty()) else {
        return Ok(false);
    };
    let status = std::process::Command::new("bash")
        .arg("-c")
        .arg(command)
        .status()
        .with_context(|| format!("running OJS_BENCH_FRESH_DYNAMODB ({command})"))?;
    if !status.success() {
        bail!("OJS_BENCH_FRESH_DYNAMODB ({command}) failed: {status}");
    }
    Ok(true)
}

async fn run_one(workers: usize, jobs: usize, args_bytes: usize) -> anyhow::Result<Run> {
    let meter = Meter::default();
    let store = crate::env::metered_store("throughput", &meter).await?;
    let app = Arc::new(if crate::env::stream_on() {
        TestApp::spawn_on_store(store).await?
    } else {
        let sdk = crate::env::sdk().await;
        crate::env::stream_off_for(&ojs_store::client_for(&sdk), store.table()).await?;
        TestApp::spawn_on_store_without_stream(store).await?
    });
    let result = phases(&app, &meter, workers, jobs, args_bytes).await;
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    let (mut run, calls) = result?;
    // The replay's table on an emulator that holds the run's stream records would be
    // slowed by them (a new stream's writes pay for the records of older ones), and the
    // ratio would flatter the product: it gets a fresh DynamoDB Local too.
    fresh_dynamodb(workers, args_bytes).await?;
    let ceiling = ceiling::replay(&calls, workers).await?;
    run.ceiling_jobs_per_s = ceiling.calls_per_s / run.calls_per_job.max(1e-9);
    run.ratio = run.lifecycle_jobs_per_s / run.ceiling_jobs_per_s.max(1e-9);
    run.ceiling = ceiling;
    Ok(run)
}

async fn phases(
    app: &Arc<TestApp>,
    meter: &Meter,
    workers: usize,
    jobs: usize,
    args_bytes: usize,
) -> anyhow::Result<(Run, Vec<meter::CallRecord>)> {
    let queue = "bench-tp";
    // Register the queue first so phase 1 measures the steady state.
    let warm = app
        .push(json!({"type": "bench.warm", "args": [], "options": {"queue": queue}}))
        .await?;
    let warm_id = warm.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    app.fetch(json!({"queues": [queue]})).await?;
    app.ack(json!({"job_id": warm_id})).await?;
    let mark = meter.len();

    let args = crate::capacity::args_of(args_bytes);
    let next = Arc::new(AtomicUsize::new(0));
    let push_lat = Arc::new(Mutex::new(Vec::with_capacity(jobs)));
    let started = Instant::now();
    let producers: Vec<_> = (0..workers)
        .map(|_| {
            let (app, next, lat, args) = (
                Arc::clone(app),
                Arc::clone(&next),
                Arc::clone(&push_lat),
                args.clone(),
            );
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < jobs {
                    let t = Instant::now();
                    let r = app
                        .push(
                            json!({"type": "bench.job", "args": args, "options": {"queue": queue}}),
                        )
                        .await?;
                    if r.status != 201 {
                        bail!("PUSH answered {}: {}", r.status, r.body);
                    }
                    if let Ok(mut l) = lat.lock() {
                        l.push(stats::ms(t.elapsed()));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for p in producers {
        p.await??;
    }
    let push_seconds = started.elapsed().as_secs_f64();

    let done = Arc::new(AtomicUsize::new(0));
    let empty = Arc::new(AtomicUsize::new(0));
    let fetch_lat = Arc::new(Mutex::new(Vec::with_capacity(jobs)));
    let ack_lat = Arc::new(Mutex::new(Vec::with_capacity(jobs)));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let consumers: Vec<_> = (0..workers)
        .map(|w| {
            let (app, done, empty) = (Arc::clone(app), Arc::clone(&done), Arc::clone(&empty));
            let (fl, al) = (Arc::clone(&fetch_lat), Arc::clone(&ack_lat));
            tokio::spawn(async move {
                let worker = format!("bench-{w}");
                while done.load(Ordering::Relaxed) < jobs {
                    if Instant::now() > deadline {
                        bail!("consumers did not finish within 10 minutes");
                    }
                    let t = Instant::now();
                    let r = app
                        .fetch(json!({"queues": [queue], "worker_id": worker}))
                        .await?;
                    let elapsed = stats::ms(t.elapsed());
                    let Some(id) = r.body["jobs"][0]["id"].as_str().map(str::to_owned) else {
                        if r.status != 200 {
                            bail!("FETCH answered {}: {}", r.status, r.body);
                        }
                        empty.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    if let Ok(mut l) = fl.lock() {
                        l.push(elapsed);
                    }
                    let t = Instant::now();
                    let r = app
                        .ack(json!({"job_id": id, "worker_id": worker, "result": {"ok": true}}))
                        .await?;
                    if r.status != 200 {
                        bail!("ACK answered {}: {}", r.status, r.body);
                    }
                    if let Ok(mut l) = al.lock() {
                        l.push(stats::ms(t.elapsed()));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    for c in consumers {
        c.await??;
    }
    let consume_seconds = started.elapsed().as_secs_f64();
    let calls = meter.since(mark);
    let ddb: Vec<_> = calls
        .iter()
        .filter(|c| c.service != "sqs")
        .cloned()
        .collect();
    let lost_claims = ddb.iter().filter(|c| !c.ok && c.op == "UpdateItem").count();
    let lat = |m: &Arc<Mutex<Vec<f64>>>| {
        m.lock()
            .map(|v| Latency::of(&v))
            .unwrap_or_else(|_| Latency::of(&[]))
    };
    let total = push_seconds + consume_seconds;
    let run = Run {
        workers,
        jobs,
        args_bytes,
        fresh_dynamodb: false,
        stream: crate::env::stream_on(),
        push_seconds,
        consume_seconds,
        push_jobs_per_s: jobs as f64 / push_seconds.max(1e-9),
        consume_jobs_per_s: jobs as f64 / consume_seconds.max(1e-9),
        lifecycle_jobs_per_s: jobs as f64 / total.max(1e-9),
        push: lat(&push_lat),
        fetch: lat(&fetch_lat),
        ack: lat(&ack_lat),
        empty_fetches: empty.load(Ordering::Relaxed),
        lost_claims,
        dynamodb_calls: ddb.len(),
        calls_per_job: ddb.len() as f64 / jobs.max(1) as f64,
        product_calls_per_s: ddb.len() as f64 / total.max(1e-9),
        ceiling: Ceiling::not_replayed(workers),
        ceiling_jobs_per_s: 0.0,
        ratio: 0.0,
    };
    Ok((run, ddb))
}

#[cfg(test)]
mod tests {
    use super::restart_with;

    #[test]
    fn a_restart_runs_only_when_named_and_its_failure_stops_the_bench() -> anyhow::Result<()> {
        assert!(!restart_with(None)?);
        assert!(!restart_with(Some("  "))?);
        assert!(restart_with(Some("true"))?);
        assert!(restart_with(Some("exit 3")).is_err());
        Ok(())
    }
}
