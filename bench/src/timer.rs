//! Section 7: how late the timer queue promotes a delayed job (ojs-serverless.md: a
//! scheduled job leaves `scheduled` through an SQS message delayed to its time, not a
//! poll). Jobs are pushed with `scheduled_at` spread over three seconds onto a server
//! whose only mover is the timer consumer: no FETCH, no INFO, no sweep. Lateness is
//! the job's `enqueued_at` minus its `scheduled_at`, as the store recorded them.
//!
//! This was a test's assertion ("within a second") until the tests stopped asserting on
//! this machine's speed (issue #31); the integration test keeps what does not depend on
//! it: the timer alone promotes every job, and never early.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::DateTime;
use ojs_core::{JobId, JobState};
use ojs_tests::TestApp;
use serde::Serialize;
use serde_json::{json, Value};

/// How long the section waits for the last promotion before it reports a failure: far
/// beyond the slowest lateness worth measuring.
const GIVE_UP: Duration = Duration::from_secs(60);

/// Section 7.
#[derive(Debug, Clone, Serialize)]
pub struct TimerReport {
    /// Delayed jobs measured.
    pub jobs: usize,
    /// Median lateness, ms.
    pub p50_ms: i64,
    /// 99th percentile lateness, ms.
    pub p99_ms: i64,
    /// Largest lateness, ms.
    pub max_ms: i64,
    /// Smallest lateness, ms (negative would be a job promoted early).
    pub min_ms: i64,
}

fn millis(v: &Value) -> Option<i64> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// `jobs` delayed jobs, due 3 to 6 s after their PUSH, promoted by the timer alone.
pub async fn run(jobs: usize) -> anyhow::Result<TimerReport> {
    if jobs == 0 {
        bail!("the timer section needs at least one job");
    }
    let app = TestApp::spawn_with_timer().await?;
    let mut ids = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let at = format!("+PT{}.{:03}S", 3 + i % 3, (i * 37) % 1000);
        let pushed = app
            .push(json!({"type": "bench.timer", "args": [i], "options": {"queue": "timed", "scheduled_at": at}}))
            .await?;
        if pushed.body["job"]["state"] != "scheduled" {
            bail!("PUSH answered {} {}", pushed.status, pushed.body);
        }
        let id = pushed.body["job"]["id"].as_str().unwrap_or_default();
        ids.push(JobId::parse(id).with_context(|| format!("PUSH answered {}", pushed.body))?);
    }
    let started = Instant::now();
    let mut lateness = Vec::with_capacity(jobs);
    while lateness.len() < ids.len() {
        if started.elapsed() > GIVE_UP {
            bail!(
                "{} of {} delayed jobs still scheduled after {GIVE_UP:?}",
                ids.len() - lateness.len(),
                ids.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        lateness.clear();
        for id in &ids {
            let Some(job) = app.store.engine().get_job(id).await? else {
                bail!("job {id} vanished");
            };
            if job.status.state == JobState::Available {
                let j = job.to_json();
                match (millis(&j["enqueued_at"]), millis(&j["scheduled_at"])) {
                    (Some(e), Some(s)) => lateness.push(e - s),
                    _ => bail!("job {id} has no enqueued_at or scheduled_at: {j}"),
                }
            }
        }
    }
    app.teardown().await;
    lateness.sort_unstable();
    let at = |q: f64| lateness[((lateness.len() - 1) as f64 * q).round() as usize];
    Ok(TimerReport {
        jobs,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        min_ms: at(0.0),
    })
}
