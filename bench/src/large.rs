//! Section 9: what a large job costs in time (issue #32). Jobs of 1 KiB, 300 KiB (just
//! over the size kept in the item: args and meta go to the payload bucket) and 1 MB of
//! args go through PUSH, FETCH (one job) and ACK, one lifecycle at a time, against an
//! in-process server whose large jobs go to the local S3 (moto). Each request is timed at
//! the client (HTTP over loopback, JSON both ways), so a row is the request's whole time
//! here: DynamoDB Local, moto's S3, and the server's work on the body. On AWS the S3 calls
//! take what S3 takes (tens of ms for a 1 MB PUT or GET in the same region); the figures
//! here compare sizes on one machine, they are not AWS latencies.

use std::time::Instant;

use anyhow::{bail, Context};
use ojs_tests::TestApp;
use serde::Serialize;
use serde_json::json;

use crate::capacity::args_of;
use crate::stats::{ms, percentile};

/// Args sizes measured, bytes of their JSON form.
pub const SIZES: [usize; 3] = [1_024, 300 * 1_024, 1_000_000];

/// One size's lifecycles.
#[derive(Debug, Clone, Serialize)]
pub struct LargeRow {
    /// Bytes of the serialized `args`.
    pub args_bytes: usize,
    /// Lifecycles measured.
    pub samples: usize,
    /// PUSH time, median and largest, ms.
    pub push_p50_ms: f64,
    /// Largest PUSH time, ms.
    pub push_max_ms: f64,
    /// FETCH (one job) time, median, ms.
    pub fetch_p50_ms: f64,
    /// Largest FETCH time, ms.
    pub fetch_max_ms: f64,
    /// ACK time, median, ms.
    pub ack_p50_ms: f64,
    /// Largest ACK time, ms.
    pub ack_max_ms: f64,
    /// DynamoDB calls per lifecycle (the request path; the stream's work is not here).
    pub calls: f64,
    /// Read units per lifecycle.
    pub read_units: f64,
    /// Write units per lifecycle.
    pub write_units: f64,
}

/// Section 9.
#[derive(Debug, Clone, Serialize)]
pub struct LargeReport {
    /// One row per size of [`SIZES`].
    pub rows: Vec<LargeRow>,
}

/// Section 9 with `samples` lifecycles per size.
pub async fn run(samples: usize) -> anyhow::Result<LargeReport> {
    let store = ojs_tests::fresh_store().await?;
    let (store, _payloads) = ojs_tests::with_payloads(store).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let result = measure(&app, samples.max(1)).await;
    app.teardown().await;
    Ok(LargeReport { rows: result? })
}

async fn measure(app: &TestApp, samples: usize) -> anyhow::Result<Vec<LargeRow>> {
    let mut rows = Vec::new();
    for size in SIZES {
        let queue = format!("large-{size}");
        let job =
            json!({"type": "bench.large", "args": args_of(size), "options": {"queue": queue}});
        // Warm up: the queue's first PUSH also registers it.
        lifecycle(app, &job, &queue).await?;
        let (mut push, mut fetch, mut ack) = (Vec::new(), Vec::new(), Vec::new());
        let before = app.store.usage();
        for _ in 0..samples {
            let [p, f, a] = lifecycle(app, &job, &queue).await?;
            push.push(p);
            fetch.push(f);
            ack.push(a);
        }
        let used = app.store.usage() - before;
        let per = |x: f64| x / samples as f64;
        let p50 = |v: &[f64]| percentile(v, 50.0).unwrap_or(0.0);
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        rows.push(LargeRow {
            args_bytes: size,
            samples,
            push_p50_ms: p50(&push),
            push_max_ms: max(&push),
            fetch_p50_ms: p50(&fetch),
            fetch_max_ms: max(&fetch),
            ack_p50_ms: p50(&ack),
            ack_max_ms: max(&ack),
            calls: per(used.calls as f64),
            read_units: per(used.read_units),
            write_units: per(used.write_units),
        });
    }
    Ok(rows)
}

/// PUSH of `job`, FETCH of it, ACK: each request's time at the client, ms. Checks that
/// the job came back whole.
async fn lifecycle(
    app: &TestApp,
    job: &serde_json::Value,
    queue: &str,
) -> anyhow::Result<[f64; 3]> {
    let t = Instant::now();
    let r = app.push(job.clone()).await?;
    let push_ms = ms(t.elapsed());
    if r.status != 201 {
        bail!("PUSH answered {}: {}", r.status, r.body);
    }
    let id = r.body["job"]["id"]
        .as_str()
        .context("PUSH reply without job.id")?
        .to_owned();
    let t = Instant::now();
    let r = app
        .fetch(json!({"queues": [queue], "worker_id": "bench-large"}))
        .await?;
    let fetch_ms = ms(t.elapsed());
    let got = r.body["jobs"]
        .as_array()
        .and_then(|j| j.first())
        .context("FETCH found nothing")?;
    if got["id"] != id.as_str() || got["args"] != job["args"] {
        bail!(
            "FETCH did not return the pushed job whole ({} bytes of args)",
            job["args"].to_string().len()
        );
    }
    let t = Instant::now();
    let r = app
        .ack(json!({"job_id": id, "worker_id": "bench-large", "result": {"ok": true}}))
        .await?;
    let ack_ms = ms(t.elapsed());
    if r.status != 200 {
        bail!("ACK answered {}: {}", r.status, r.body);
    }
    Ok([push_ms, fetch_ms, ack_ms])
}
