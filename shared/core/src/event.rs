//! Lifecycle events (ojs-events.md): the CloudEvents-style envelope for job transitions.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::job::Job;
use crate::time::{self, Timestamp};

/// Event types this server emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The job became available.
    Enqueued,
    /// The job was pushed for a future time.
    Scheduled,
    /// A worker claimed the job.
    Started,
    /// The handler succeeded.
    Completed,
    /// An attempt failed.
    Failed,
    /// A retry is scheduled.
    Retrying,
    /// The job failed for good.
    Discarded,
    /// The job was cancelled.
    Cancelled,
}

impl EventKind {
    /// The catalogue name, e.g. `job.completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enqueued => "job.enqueued",
            Self::Scheduled => "job.scheduled",
            Self::Started => "job.started",
            Self::Completed => "job.completed",
            Self::Failed => "job.failed",
            Self::Retrying => "job.retrying",
            Self::Discarded => "job.discarded",
            Self::Cancelled => "job.cancelled",
        }
    }
}

/// A rendered event, with the fields the store indexes on.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `evt_<uuidv7>`: the event's time, then bits of its job, write and kind
    /// ([`event_id`]); every rendering of one transition gives the same id.
    pub id: String,
    /// The event type.
    pub kind: EventKind,
    /// The job's queue.
    pub queue: String,
    /// The job's tenant (`None`: the default tenant), which decides the webhook
    /// subscriptions scoped to a tenant that receive it (ojs-webhooks.md §9.3).
    pub tenant: Option<crate::tenant::TenantId>,
    /// The full event envelope.
    pub body: Value,
}

impl Event {
    /// The event for `job` having just undergone `kind` at `at`.
    pub fn for_job(kind: EventKind, job: &Job, at: &Timestamp, source: &str) -> Self {
        let mut data = Map::new();
        data.insert("job_id".into(), job.id.to_string().into());
        data.insert("job_type".into(), job.spec.job_type.as_str().into());
        data.insert("queue".into(), job.spec.queue.as_str().into());
        // A tenant's job names its tenant (the default tenant's names none, as before), so
        // the events listing can keep to a tenant and a receiver can tell whose job it is.
        let tenant = job.tenant();
        if let Some(t) = &tenant {
            data.insert(crate::tenant::META_KEY.into(), t.as_str().into());
        }
        add_kind_data(&mut data, kind, job, at);
        let id = event_id(job, kind, at);
        let mut body = json!({
            "specversion": "1.0",
            "id": id,
            "type": kind.as_str(),
            "source": source,
            "time": time::format(at),
            "subject": job.id.to_string(),
            "datacontenttype": "application/json",
            "data": data,
        });
        add_trace(&mut body, job);
        Self {
            id,
            kind,
            queue: job.spec.queue.as_str().to_owned(),
            tenant,
            body,
        }
    }
}

/// The members of an event's `data` that its kind adds.
fn add_kind_data(data: &mut Map<String, Value>, kind: EventKind, job: &Job, at: &Timestamp) {
    let s = &job.status;
    let mut put = |k: &str, v: Value| {
        data.insert(k.into(), v);
    };
    match kind {
        EventKind::Enqueued => put("priority", job.spec.priority.into()),
        EventKind::Scheduled => {
            if let Some(t) = &job.spec.scheduled_at {
                put("scheduled_at", time::format(t).into());
            }
        }
        EventKind::Started => {
            put("attempt", s.attempt.into());
            put(
                "worker_id",
                s.worker_id.clone().map_or(Value::Null, Value::from),
            );
        }
        EventKind::Completed => {
            put("attempt", s.attempt.into());
            let ms = s
                .started_at
                .map(|st| (*at - st).num_milliseconds().max(0))
                .unwrap_or(0);
            put("duration_ms", ms.into());
            put("result", s.result.clone().unwrap_or(Value::Null));
        }
        EventKind::Failed => {
            put("attempt", s.attempt.into());
            put("error", s.error.clone().unwrap_or(Value::Null));
        }
        EventKind::Retrying => {
            put("attempt", s.attempt.into());
            put("max_attempts", job.spec.retry.max_attempts.into());
            if let Some(t) = &s.next_attempt_at {
                put("next_retry_at", time::format(t).into());
            }
            put("error", s.error.clone().unwrap_or(Value::Null));
        }
        EventKind::Discarded => {
            put("total_attempts", s.attempt.into());
            put("last_error", s.error.clone().unwrap_or(Value::Null));
        }
        EventKind::Cancelled => {
            put("cancelled_by", "api".into());
            put("reason", Value::Null);
        }
    }
}

/// CloudEvents' distributed tracing extension: the job's trace, so a webhook receiver
/// (and the event listing) can join the producer's trace.
fn add_trace(body: &mut Value, job: &Job) {
    if let Some(parent) = crate::trace::of_meta(&job.spec.meta) {
        body["traceparent"] = parent.header().into();
        if let Some(state) = job
            .spec
            .meta
            .get(crate::trace::TRACESTATE)
            .and_then(Value::as_str)
        {
            body["tracestate"] = state.into();
        }
    }
}

/// The id of the `kind` event of `job`'s write (its `version`) at `at`: a UUIDv7 whose
/// time is `at` and whose other bits hash the job's id, the version and the kind. A
/// stream batch delivered twice, the stored copy and the webhook delivery all carry one
/// id, so a consumer can tell duplicates apart (ojs-events.md §2, at-least-once).
pub fn event_id(job: &Job, kind: EventKind, at: &Timestamp) -> String {
    let digest = Sha256::new()
        .chain_update(job.id.to_string().as_bytes())
        .chain_update([0])
        .chain_update(job.status.version.to_be_bytes())
        .chain_update(kind.as_str().as_bytes())
        .finalize();
    let mut bits = [0u8; 10];
    bits.copy_from_slice(&digest[..10]);
    let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    format!(
        "evt_{}",
        uuid::Builder::from_unix_timestamp_millis(ms, &bits).into_uuid()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::NewJob;

    #[test]
    fn completed_event_carries_the_required_data() {
        let new =
            NewJob::from_json(json!({"type": "test.echo", "args": [], "options": {"queue": "q1"}}));
        let mut job = Job::enqueue(new.unwrap_or_else(|e| panic!("{e}")), time::now());
        job.status.attempt = 1;
        job.status.started_at = Some(time::now());
        let e = Event::for_job(EventKind::Completed, &job, &time::now(), "ojs://test/api");
        assert_eq!(e.body["type"], "job.completed");
        assert_eq!(e.body["data"]["job_type"], "test.echo");
        assert_eq!(e.body["data"]["queue"], "q1");
        assert!(e.body["data"]["duration_ms"].is_i64());
        assert_eq!(e.body["data"]["attempt"], 1);
        assert!(e.id.starts_with("evt_"));
    }

    #[test]
    fn a_tenants_job_names_its_tenant_in_the_event_data() {
        let of = |meta: Value| {
            let new = NewJob::from_json(json!({"type": "t", "args": [], "meta": meta}));
            Job::enqueue(new.unwrap_or_else(|e| panic!("{e}")), time::now())
        };
        let e = Event::for_job(
            EventKind::Enqueued,
            &of(json!({"tenant_id": "acme"})),
            &time::now(),
            "ojs://test/api",
        );
        assert_eq!(e.body["data"]["tenant_id"], "acme");
        assert_eq!(e.tenant.as_ref().map(|t| t.as_str()), Some("acme"));
        let e = Event::for_job(EventKind::Enqueued, &of(json!({})), &time::now(), "ojs://t");
        assert!(e.body["data"].get("tenant_id").is_none(), "{}", e.body);
        assert_eq!(e.tenant, None);
    }

    #[test]
    fn an_events_id_is_its_time_job_write_and_kind() {
        let new = NewJob::from_json(json!({"type": "t", "args": []}));
        let job = Job::enqueue(new.unwrap_or_else(|e| panic!("{e}")), time::now());
        let at = time::now();
        let id = event_id(&job, EventKind::Enqueued, &at);
        assert_eq!(id, event_id(&job, EventKind::Enqueued, &at));
        let uuid =
            uuid::Uuid::parse_str(id.trim_start_matches("evt_")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(uuid.get_version_num(), 7);
        let (secs, nanos) = uuid
            .get_timestamp()
            .map(|t| t.to_unix())
            .unwrap_or_default();
        assert_eq!(
            secs as i64 * 1000 + i64::from(nanos / 1_000_000),
            at.timestamp_millis()
        );
        assert_ne!(id, event_id(&job, EventKind::Started, &at));
        let mut next_write = job.clone();
        next_write.status.version += 1;
        assert_ne!(id, event_id(&next_write, EventKind::Enqueued, &at));
        let later = at + chrono::Duration::milliseconds(1);
        assert!(event_id(&job, EventKind::Enqueued, &later) > id);
        let other = Job::enqueue(
            NewJob::from_json(json!({"type": "t", "args": []})).unwrap_or_else(|e| panic!("{e}")),
            at,
        );
        assert_ne!(id, event_id(&other, EventKind::Enqueued, &at));
    }
}
