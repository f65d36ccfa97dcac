//! Section 6: a pushed job next to a polled one (ojs-serverless.md §2). The same server
//! (a metered store, the change stream read every 50 ms, as `make dev` runs it) takes
//! jobs one at a time on a queue with one registered HTTPS-style endpoint (a local sink
//! answering `completed`), then the same jobs on a queue without one, which a worker
//! fetches and acknowledges. Every DynamoDB call in the window counts, the stream's
//! (events, counters) and the dispatcher's (endpoints, slot, claim, settle) included.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ojs_tests::TestApp;
use serde::Serialize;
use serde_json::{json, Value};

use crate::meter::{self, Meter, Totals};

/// How long after the last answer the stream's writes are waited for.
const SETTLE: Duration = Duration::from_secs(2);

/// One side of the comparison, per job.
#[derive(Debug, Clone, Serialize)]
pub struct PerJob {
    /// DynamoDB calls.
    pub calls: f64,
    /// Read capacity units.
    pub read_units: f64,
    /// Write capacity units.
    pub write_units: f64,
    /// HTTP requests to the API (producer and worker).
    pub api_requests: f64,
    /// Median from PUSH to the endpoint's answer (pushed) or to the ACK's (polled), ms.
    pub median_ms: f64,
}

/// Section 6.
#[derive(Debug, Clone, Serialize)]
pub struct PushReport {
    /// Jobs per side.
    pub jobs: usize,
    /// Pushed to the endpoint.
    pub pushed: PerJob,
    /// Fetched and acknowledged by a polling worker.
    pub polled: PerJob,
}

/// A local endpoint that completes every delivery, counting them.
async fn sink() -> anyhow::Result<(String, Arc<AtomicUsize>)> {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let router = axum::Router::new().route(
        "/",
        axum::routing::post(move || {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                axum::Json(json!({"status": "completed", "result": {"ok": true}}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok((url, seen))
}

fn per_job(t: &Totals, jobs: usize, api_requests: usize, mut latencies: Vec<f64>) -> PerJob {
    let n = jobs.max(1) as f64;
    latencies.sort_by(f64::total_cmp);
    PerJob {
        calls: t.calls as f64 / n,
        read_units: t.read_units / n,
        write_units: t.write_units / n,
        api_requests: api_requests as f64 / n,
        median_ms: latencies.get(latencies.len() / 2).copied().unwrap_or(0.0),
    }
}

fn id_of(r: &Value) -> String {
    r["job"]["id"].as_str().unwrap_or_default().to_owned()
}

/// Runs section 6 with `jobs` jobs per side, args of `args_bytes`.
pub async fn run(jobs: usize, args_bytes: usize) -> anyhow::Result<PushReport> {
    let meter = Meter::default();
    let store = crate::env::metered_store("push", &meter).await?;
    let app = TestApp::spawn_with_push_on(store, ojs_push::PushConfig::local(true), None).await?;
    let result = compare(&app, &meter, jobs, args_bytes).await;
    app.teardown().await;
    result
}

async fn compare(
    app: &TestApp,
    meter: &Meter,
    jobs: usize,
    args_bytes: usize,
) -> anyhow::Result<PushReport> {
    let (url, seen) = sink().await?;
    let registered = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/push/endpoints",
            Some(
                json!({"endpoint": url, "job_types": ["bench.pushed"], "queues": ["bench-push"],
                "config": {"max_concurrency": 4, "timeout_ms": 10_000, "signing_secret": "bench-signing-secret"}}),
            ),
        )
        .await?;
    if registered.status != 201 {
        bail!(
            "registration answered {}: {}",
            registered.status,
            registered.body
        );
    }
    let args = crate::capacity::args_of(args_bytes);
    let job =
        |kind: &str, queue: &str| json!({"type": kind, "args": args, "options": {"queue": queue}});
    // Warm both queues (registries, settings) so the window is the steady state.
    let warm = app.push(job("bench.pushed", "bench-push")).await?;
    wait_for(&seen, 1).await?;
    let warm_polled = app.push(job("bench.polled", "bench-polled")).await?;
    ojs_tests::after_index_lag().await;
    let f = app
        .fetch(json!({"queues": ["bench-polled"], "worker_id": "bench"}))
        .await?;
    app.ack(json!({"job_id": f.body["jobs"][0]["id"], "worker_id": "bench"}))
        .await?;
    tokio::time::sleep(SETTLE).await;

    // Pushed: one job at a time, each waited for at the sink; no API call but PUSH.
    let mark = meter.len();
    let mut pushed_ids = Vec::new();
    let mut latencies = Vec::new();
    for i in 0..jobs {
        let t = Instant::now();
        let r = app.push(job("bench.pushed", "bench-push")).await?;
        if r.status != 201 {
            bail!("PUSH answered {}: {}", r.status, r.body);
        }
        pushed_ids.push(id_of(&r.body));
        wait_for(&seen, i + 2).await?;
        latencies.push(crate::stats::ms(t.elapsed()));
    }
    tokio::time::sleep(SETTLE).await;
    let pushed = per_job(&meter::totals(&meter.since(mark)), jobs, jobs, latencies);

    // Polled: PUSH, then a worker's FETCH and ACK.
    let mark = meter.len();
    let mut latencies = Vec::new();
    let mut api = 0;
    for _ in 0..jobs {
        let t = Instant::now();
        let r = app.push(job("bench.polled", "bench-polled")).await?;
        api += 1;
        let id = id_of(&r.body);
        loop {
            let f = app
                .fetch(json!({"queues": ["bench-polled"], "worker_id": "bench"}))
                .await?;
            api += 1;
            if f.body["jobs"][0]["id"] == id.as_str() {
                break;
            }
            if t.elapsed() > Duration::from_secs(10) {
                bail!("the polled job {id} was not fetched: {}", f.body);
            }
        }
        let a = app.ack(json!({"job_id": id, "worker_id": "bench"})).await?;
        api += 1;
        if a.status != 200 {
            bail!("ACK answered {}: {}", a.status, a.body);
        }
        latencies.push(crate::stats::ms(t.elapsed()));
    }
    tokio::time::sleep(SETTLE).await;
    let polled = per_job(&meter::totals(&meter.since(mark)), jobs, api, latencies);

    // Checked after the windows, so its reads are not counted.
    for id in pushed_ids
        .iter()
        .chain([&id_of(&warm.body), &id_of(&warm_polled.body)])
    {
        let state = app.info(id).await?.body["job"]["state"].clone();
        if state != "completed" {
            bail!("job {id} ended {state}, not completed");
        }
    }
    Ok(PushReport {
        jobs,
        pushed,
        polled,
    })
}

/// Waits until the sink has answered `n` deliveries.
async fn wait_for(seen: &AtomicUsize, n: usize) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(10);
    while seen.load(Ordering::SeqCst) < n {
        if Instant::now() > until {
            return Err(anyhow::anyhow!(
                "the endpoint got {} deliveries",
                seen.load(Ordering::SeqCst)
            ))
            .context(format!("waiting for delivery {n}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}
