//! The admin API's figures (ojs-admin-api.md §10): the counts summed over every queue,
//! their history per period, counted from the lifecycle events, and the scheduling stats.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use ojs_core::{time, OjsError, QueueName};
use ojs_store::{EventQuery, QueueInfo, QueueStats};
use serde::Deserialize;
use serde_json::{json, Value};

use super::reply;
use crate::error::ApiError;
use crate::AppState;

pub(super) fn counts(st: &QueueStats) -> Value {
    json!({
        "available": st.available,
        "active": st.active,
        "scheduled": st.scheduled,
        "retryable": st.retryable,
        "pending": st.pending,
        "completed": st.completed,
        "discarded": st.discarded,
        "cancelled": st.cancelled,
    })
}

fn add(total: &mut QueueStats, st: &QueueStats) {
    total.available += st.available;
    total.active += st.active;
    total.scheduled += st.scheduled;
    total.retryable += st.retryable;
    total.pending += st.pending;
    total.completed += st.completed;
    total.discarded += st.discarded;
    total.cancelled += st.cancelled;
}

/// Every queue with its counts (one counter read per queue).
async fn queues_with_stats(app: &AppState) -> Result<Vec<(QueueInfo, QueueStats)>, ApiError> {
    with_stats(app, app.store.engine().list_queues().await?).await
}

/// Each of `queues` with its counts (one counter read per queue).
pub(super) async fn with_stats(
    app: &AppState,
    queues: impl IntoIterator<Item = QueueInfo>,
) -> Result<Vec<(QueueInfo, QueueStats)>, ApiError> {
    let mut out = Vec::new();
    for q in queues {
        let Ok(name) = QueueName::parse(&q.name) else {
            continue;
        };
        let st = app.store.derived().queue_stats(&name).await?;
        out.push((q, st));
    }
    Ok(out)
}

/// The event id every event of `at` or later sorts after (event ids are `evt_` and a
/// UUIDv7, whose first 48 bits are the Unix time in milliseconds).
fn event_cursor_at(at: &time::Timestamp) -> String {
    let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    let hex = format!("{ms:012x}");
    format!("evt_{}-{}-0000-0000-000000000000", &hex[..8], &hex[8..])
}

/// Lifecycle events of `types` since `since` for `queues` (all when empty).
async fn events_since(
    app: &AppState,
    types: &[&str],
    queues: Vec<String>,
    since: &time::Timestamp,
) -> Result<Vec<Value>, ApiError> {
    let q = EventQuery {
        types: types.iter().map(|t| (*t).to_owned()).collect(),
        queues,
        after: Some(event_cursor_at(since)),
        limit: 10_000,
        tenant: ojs_core::tenant::Scope::Any,
    };
    Ok(app.store.derived().list_events(&q).await?.events)
}

/// Jobs finished and failed in the last minute, from the lifecycle events.
async fn throughput(app: &AppState, queues: Vec<String>) -> Result<Value, ApiError> {
    let since = time::now() - chrono::Duration::minutes(1);
    let events = events_since(app, &["job.completed", "job.failed"], queues, &since).await?;
    let done = events
        .iter()
        .filter(|e| e["type"] == "job.completed")
        .count();
    Ok(json!({
        "processed_per_minute": done,
        "failed_per_minute": events.len() - done,
    }))
}

/// `GET /ojs/v1/admin/stats` (§10.1).
pub(super) async fn get_stats(State(app): State<AppState>) -> Result<Response, ApiError> {
    let queues = queues_with_stats(&app).await?;
    let mut total = QueueStats::default();
    for (_, st) in &queues {
        add(&mut total, st);
    }
    let names = queues.iter().map(|(q, _)| q.name.clone()).collect();
    let workers = app.store.workers().list_workers().await?.len();
    Ok(reply(
        StatusCode::OK,
        json!({
            "queues": queues.len(),
            "workers": workers,
            "jobs": counts(&total),
            "throughput": throughput(&app, names).await?,
            "uptime_seconds": app.started.elapsed().as_secs(),
        }),
    ))
}

#[derive(Debug, Deserialize)]
pub(super) struct HistoryParams {
    period: Option<String>,
    since: Option<String>,
    until: Option<String>,
    queue: Option<String>,
}

/// `GET /ojs/v1/admin/stats/history` (§10.2): enqueued, processed and failed jobs per
/// period, counted from the lifecycle events (kept for the event retention; latency is
/// not recorded).
pub(super) async fn get_history(
    State(app): State<AppState>,
    Query(p): Query<HistoryParams>,
) -> Result<Response, ApiError> {
    let period = p.period.as_deref().unwrap_or("5m");
    let secs = period_seconds(period)?;
    let (since, until) = history_range(&p, secs)?;
    let queues = match p.queue.as_deref().filter(|q| !q.is_empty()) {
        Some(q) => vec![QueueName::parse(q)?.as_str().to_owned()],
        None => Vec::new(),
    };
    let events = events_since(
        &app,
        &["job.enqueued", "job.completed", "job.failed"],
        queues,
        &since,
    )
    .await?;
    let data = history_points(count_per_period(&events, since, until, secs));
    Ok(reply(
        StatusCode::OK,
        json!({"period": period, "data": data}),
    ))
}

/// The length in seconds of a history `period`.
fn period_seconds(period: &str) -> Result<i64, ApiError> {
    match period {
        "1m" => Ok(60),
        "5m" => Ok(300),
        "1h" => Ok(3600),
        "1d" => Ok(86_400),
        other => Err(OjsError::invalid_request(format!(
            "period must be 1m, 5m, 1h or 1d (got {other:?})"
        ))
        .with_path("$.period")
        .into()),
    }
}

/// The history's `since` and `until` (the last hour up to now by default): `since`
/// first, and at most 2000 periods of `secs` between them.
fn history_range(
    p: &HistoryParams,
    secs: i64,
) -> Result<(time::Timestamp, time::Timestamp), ApiError> {
    let until = match p.until.as_deref() {
        Some(raw) => time::parse(raw, "$.until")?,
        None => time::now(),
    };
    let since = match p.since.as_deref() {
        Some(raw) => time::parse(raw, "$.since")?,
        None => until - chrono::Duration::hours(1),
    };
    if since >= until || (until - since).num_seconds() / secs > 2000 {
        return Err(OjsError::invalid_request(
            "since must be before until, and the range at most 2000 periods",
        )
        .with_path("$.since")
        .into());
    }
    Ok((since, until))
}

/// The enqueued, completed and failed `events` counted per period of `secs` (periods
/// start on multiples of it), every period from `since` to `until` listed.
fn count_per_period(
    events: &[Value],
    since: time::Timestamp,
    until: time::Timestamp,
    secs: i64,
) -> BTreeMap<i64, [u64; 3]> {
    let bucket = |t: i64| t - t.rem_euclid(secs);
    let mut data: BTreeMap<i64, [u64; 3]> = BTreeMap::new();
    let mut t = bucket(since.timestamp());
    while t <= until.timestamp() {
        data.insert(t, [0; 3]);
        t += secs;
    }
    for e in events {
        let Some(at) = e["time"]
            .as_str()
            .and_then(|raw| time::parse(raw, "$").ok())
        else {
            continue;
        };
        if at > until {
            continue;
        }
        let slot = match e["type"].as_str() {
            Some("job.enqueued") => 0,
            Some("job.completed") => 1,
            _ => 2,
        };
        if let Some(b) = data.get_mut(&bucket(at.timestamp())) {
            b[slot] += 1;
        }
    }
    data
}

/// The history's points as the dashboard reads them.
fn history_points(counts: BTreeMap<i64, [u64; 3]>) -> Vec<Value> {
    counts
        .into_iter()
        .filter_map(|(t, [enqueued, processed, failed])| {
            let at = chrono::DateTime::<chrono::Utc>::from_timestamp(t, 0)?;
            Some(json!({
                "timestamp": time::format(&at),
                "enqueued": enqueued,
                "processed": processed,
                "failed": failed,
            }))
        })
        .collect()
}

/// `GET /ojs/v1/admin/scheduling/stats` (ojs-fair-scheduling.md §10.2): FETCH takes the
/// highest priority first, then the oldest, per queue, its queues in its own order unless
/// a pool (listed) orders them; `dispatched` is each queue's jobs started and finished
/// since its counters began (active + completed + discarded + cancelled). Under `stats`
/// too, as the suite reads it.
pub(super) async fn scheduling_stats(State(app): State<AppState>) -> Result<Response, ApiError> {
    let queues: Vec<Value> = queues_with_stats(&app)
        .await?
        .iter()
        .map(|(q, st)| {
            json!({
                "name": q.name,
                "dispatched": st.active + st.completed + st.discarded + st.cancelled,
                "starved": false,
            })
        })
        .collect();
    let pools = super::pools::pool_views(&app).await?;
    let stats = json!({"queues": queues, "pools": pools});
    Ok(reply(
        StatusCode::OK,
        json!({"strategy": "strict", "queues": queues, "pools": pools, "stats": stats}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_cursors_sort_before_every_event_of_their_millisecond() {
        let at = time::now();
        let cursor = event_cursor_at(&at);
        let ev = ojs_core::event::Event::for_job(
            ojs_core::event::EventKind::Enqueued,
            &ojs_core::Job::enqueue(
                ojs_core::job::NewJob::from_json(json!({"type": "t", "args": []}))
                    .unwrap_or_else(|e| panic!("{e}")),
                at,
            ),
            &at,
            "test",
        );
        assert!(cursor < ev.id, "{cursor} !< {}", ev.id);
        let later = event_cursor_at(&(time::now() + chrono::Duration::seconds(1)));
        assert!(later > ev.id, "{later} !> {}", ev.id);
    }
}
