//! Throughput of this build beside another (`--cpu-baseline`): each build's release
//! `ojs-local` in turn, each run on a fresh DynamoDB Local when `OJS_BENCH_FRESH_DYNAMODB`
//! is set; W producers PUSH the jobs, then W consumers loop FETCH (1 job) + ACK, over
//! HTTP, as the throughput section does in-process. A figure measured on another machine
//! says nothing about this one; the other build measured here, minutes apart, does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::Serialize;
use serde_json::json;

use crate::cpu::{Baseline, Server};
use crate::stats;

/// One build's run.
#[derive(Debug, Clone, Serialize)]
pub struct BuildRun {
    /// `this build` or the baseline's label.
    pub build: String,
    /// Whether it started on a fresh DynamoDB Local.
    pub fresh_dynamodb: bool,
    /// Seconds to PUSH the jobs.
    pub push_seconds: f64,
    /// Seconds to FETCH and ACK them.
    pub consume_seconds: f64,
    /// Jobs / (push + consume seconds).
    pub lifecycle_jobs_per_s: f64,
}

/// This build against the baseline, at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct Versus {
    /// The method, in words.
    pub method: String,
    /// The baseline's label.
    pub baseline: String,
    /// Producers, then consumers.
    pub workers: usize,
    /// Jobs per run.
    pub jobs: usize,
    /// Every run, in the order made (the builds take turns, the first alternating).
    pub runs: Vec<BuildRun>,
    /// Median lifecycles per second of this build's runs.
    pub this_build: f64,
    /// Median lifecycles per second of the baseline's runs.
    pub before: f64,
}

/// The method as printed with the results.
pub const METHOD: &str =
    "Each build's release ojs-local (as `make dev` runs it: its stream consumer on, \
API keys required) on its own table, the builds taking turns, each run on a fresh DynamoDB Local \
warmed by an unmeasured pass; W producers PUSH the jobs (1 KiB args, one queue), then W consumers \
loop FETCH (1 job) + ACK over HTTP until all are acknowledged; lifecycles/s = jobs / both phases' \
seconds; the median of each build's runs.";

/// Runs `rounds` runs of each build at `workers`.
pub async fn run(
    baseline: &Baseline,
    workers: usize,
    jobs: usize,
    args_bytes: usize,
    rounds: usize,
) -> anyhow::Result<Versus> {
    let this = (crate::cold_start::release_dir(), "this build".to_owned());
    let before = (baseline.dir.clone(), baseline.label.clone());
    let mut runs = Vec::new();
    for round in 0..rounds.max(1) {
        let order = if round % 2 == 0 {
            [&this, &before]
        } else {
            [&before, &this]
        };
        for (dir, label) in order {
            let fresh = crate::throughput::fresh_dynamodb(workers, args_bytes).await?;
            let table = crate::env::table_name("versus");
            let result = async {
                let server = Arc::new(Server::start(dir, &table, true).await?);
                phases(&server, workers, jobs, args_bytes).await
            }
            .await;
            let sdk = crate::env::sdk().await;
            let store = ojs_store::Store::new(
                ojs_store::client_for(&sdk),
                ojs_store::StoreConfig::for_table(&table),
            );
            let _ = store.delete_table().await;
            let (push_seconds, consume_seconds) = result?;
            runs.push(BuildRun {
                build: label.clone(),
                fresh_dynamodb: fresh,
                push_seconds,
                consume_seconds,
                lifecycle_jobs_per_s: jobs as f64 / (push_seconds + consume_seconds).max(1e-9),
            });
        }
    }
    let median_of = |label: &str| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.build == label)
            .map(|r| r.lifecycle_jobs_per_s)
            .collect();
        stats::median(&v).unwrap_or(f64::NAN)
    };
    Ok(Versus {
        method: METHOD.into(),
        baseline: baseline.label.clone(),
        workers,
        jobs,
        this_build: median_of(&this.1),
        before: median_of(&before.1),
        runs,
    })
}

/// Seconds to PUSH `jobs` with `workers` producers, then to FETCH and ACK them all with
/// `workers` consumers.
async fn phases(
    server: &Arc<Server>,
    workers: usize,
    jobs: usize,
    args_bytes: usize,
) -> anyhow::Result<(f64, f64)> {
    let queue = "bench-versus";
    // The queue registered first, so the PUSH phase measures the steady state.
    server
        .post(
            "/ojs/v1/jobs",
            &json!({"type": "bench.warm", "args": [], "options": {"queue": queue}}),
        )
        .await?;
    let f = server
        .post("/ojs/v1/workers/fetch", &json!({"queues": [queue]}))
        .await?;
    for id in crate::cpu::ids(&f) {
        server
            .post("/ojs/v1/workers/ack", &json!({"job_id": id}))
            .await?;
    }
    let job = json!({"type": "bench.job", "args": crate::capacity::args_of(args_bytes), "options": {"queue": queue}});
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let producers: Vec<_> = (0..workers)
        .map(|_| {
            let (server, next, job) = (Arc::clone(server), Arc::clone(&next), job.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < jobs {
                    server.post("/ojs/v1/jobs", &job).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for p in producers {
        p.await??;
    }
    let push_seconds = started.elapsed().as_secs_f64();
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let consumers: Vec<_> = (0..workers)
        .map(|w| {
            let (server, done) = (Arc::clone(server), Arc::clone(&done));
            tokio::spawn(async move {
                let worker = format!("bench-{w}");
                while done.load(Ordering::Relaxed) < jobs {
                    if Instant::now() > deadline {
                        bail!("consumers did not finish within 10 minutes");
                    }
                    let f = server
                        .post(
                            "/ojs/v1/workers/fetch",
                            &json!({"queues": [queue], "worker_id": worker}),
                        )
                        .await?;
                    for id in crate::cpu::ids(&f) {
                        server
                            .post(
                                "/ojs/v1/workers/ack",
                                &json!({"job_id": id, "worker_id": worker, "result": {"ok": true}}),
                            )
                            .await?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for c in consumers {
        c.await??;
    }
    Ok((push_seconds, started.elapsed().as_secs_f64()))
}
