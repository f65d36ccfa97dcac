//! The job envelope: enqueue parsing and validation, the stored form, and the JSON view.

use serde_json::{Map, Value};

use crate::error::OjsError;
use crate::ids::{JobId, JobType, QueueName};
use crate::retry::RetryPolicy;
use crate::state::JobState;
use crate::time::{self, Timestamp};

mod parse;

/// Lowest accepted priority.
pub const MIN_PRIORITY: i64 = -100;
/// Highest accepted priority.
pub const MAX_PRIORITY: i64 = 100;
/// Lease given to a fetched job when neither the fetch nor the job sets one.
pub const DEFAULT_VISIBILITY_TIMEOUT_MS: u64 = 30_000;

/// Fields a client may not set: the server ignores them on PUSH (ojs-core 5.3).
const SYSTEM_MANAGED: &[&str] = &[
    "state",
    "attempt",
    "max_attempts",
    "created_at",
    "enqueued_at",
    "started_at",
    "completed_at",
    "cancelled_at",
    "previous_state",
    "discarded_at",
    "next_attempt_at",
    "retry_delay_ms",
    "dead_letter",
    "workflow_id",
    "parent_results",
    "result",
    "error",
    "errors",
    "worker_id",
    PAYLOAD_VIEW_KEY,
];

/// The member a job's view carries in place of `args` and `meta` when they are kept
/// outside the job's record and were not brought back ([`JobStatus::payload`]). The
/// server's own: PUSH ignores a client's member of that name.
pub const PAYLOAD_VIEW_KEY: &str = "x-ojs-payload";

/// Where a job's `args` and `meta` are when the job as read does not hold them (the
/// store keeps large requests in an object store): the job is then incomplete, and its
/// view says so ([`PAYLOAD_VIEW_KEY`]) instead of showing empty `args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadRef {
    /// The store's own name of the object; never shown.
    pub key: String,
    /// SHA-256 of the object, lower-case hex.
    pub sha256: String,
    /// The object's length in bytes.
    pub bytes: u64,
    /// Why the object could not be brought back, once that was tried and failed.
    pub unreadable: Option<String>,
}

/// What a producer asked for: everything about a job that never changes after PUSH.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Handler routing key.
    pub job_type: JobType,
    /// Target queue.
    pub queue: QueueName,
    /// Positional arguments.
    pub args: Vec<Value>,
    /// Metadata, preserved verbatim.
    pub meta: Map<String, Value>,
    /// Higher runs first.
    pub priority: i32,
    /// Maximum execution time.
    pub timeout_ms: Option<u64>,
    /// Lease length when fetched, unless the fetch names one.
    pub visibility_timeout_ms: Option<u64>,
    /// Earliest execution time.
    pub scheduled_at: Option<Timestamp>,
    /// Discard if not started by then.
    pub expires_at: Option<Timestamp>,
    /// Effective retry policy.
    pub retry: RetryPolicy,
    /// Uniqueness policy, kept as sent.
    pub unique: Option<Value>,
    /// Rate limit policy, normalised.
    pub rate_limit: Option<Value>,
    /// Args schema URI.
    pub schema: Option<String>,
    /// Free-form tags.
    pub tags: Vec<String>,
    /// Unknown top-level fields, preserved for forward compatibility.
    pub extensions: Map<String, Value>,
}

/// A validated PUSH request.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// The client's id, if it chose one.
    pub id: Option<JobId>,
    /// The job itself.
    pub spec: JobSpec,
}

/// Everything the server manages about a job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobStatus {
    /// Lifecycle state.
    pub state: JobState,
    /// Executions started so far.
    pub attempt: u32,
    /// When PUSH was received.
    pub created_at: Timestamp,
    /// When the job last became available.
    pub enqueued_at: Option<Timestamp>,
    /// When the current/last attempt started.
    pub started_at: Option<Timestamp>,
    /// When the job completed or was discarded.
    pub completed_at: Option<Timestamp>,
    /// When the job was cancelled.
    pub cancelled_at: Option<Timestamp>,
    /// The state a cancelled job was cancelled from (`previous_state`, binding §9.4).
    pub cancelled_from: Option<JobState>,
    /// When the job was discarded.
    pub discarded_at: Option<Timestamp>,
    /// When a retryable job becomes available again.
    pub next_attempt_at: Option<Timestamp>,
    /// The backoff applied before the current/next attempt.
    pub retry_delay_ms: Option<u64>,
    /// When the running attempt exceeds its execution timeout.
    pub deadline: Option<Timestamp>,
    /// Whether the job was discarded into the dead letter queue.
    pub dead_letter: bool,
    /// The workflow the job is a step (or a batch callback) of.
    pub workflow_id: Option<String>,
    /// Its step's index in the workflow.
    pub workflow_step: Option<u32>,
    /// The batch callback it runs (`on_complete`, `on_success`, `on_failure`).
    pub workflow_callback: Option<String>,
    /// Results of the steps it depended on, in completion order.
    pub parent_results: Vec<Value>,
    /// A job waiting (pending) for this one to finish: the next occurrence of a cron
    /// registration with `overlap_policy: enqueue`.
    pub successor: Option<String>,
    /// The worker holding the lease.
    pub worker_id: Option<String>,
    /// When the worker's lease ends.
    pub lease_until: Option<Timestamp>,
    /// Handler result.
    pub result: Option<Value>,
    /// Most recent error.
    pub error: Option<Value>,
    /// Every error, oldest first.
    pub errors: Vec<Value>,
    /// What a worker last reported of its progress (ojs-progress.md), with the attempt
    /// that reported it.
    pub progress: Option<crate::progress::Progress>,
    /// The latest checkpoint a worker saved (ojs-durable-execution.md); none once the
    /// job is terminal.
    pub checkpoint: Option<crate::checkpoint::Checkpoint>,
    /// Incremented by every write; guards compare-and-set.
    pub version: u64,
    /// Set while the job's `args` and `meta` are elsewhere (see [`PayloadRef`]): `spec`
    /// then holds empty ones.
    pub payload: Option<PayloadRef>,
}

/// A job: its id, what was asked, and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The id.
    pub id: JobId,
    /// Immutable request.
    pub spec: JobSpec,
    /// Server-managed status.
    pub status: JobStatus,
}

impl NewJob {
    /// Parses and validates a PUSH body. Options may come at the top level (JSON wire
    /// format) or in `options` (HTTP binding); `options` wins.
    pub fn from_json(value: Value) -> Result<Self, OjsError> {
        Self::parse(value, false)
    }
}

impl JobSpec {
    /// The stored/canonical envelope of the request: parseable again by
    /// [`NewJob::from_json`] into an equal spec.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut out = self.extensions.clone();
        out.insert("type".into(), self.job_type.as_str().into());
        out.insert("queue".into(), self.queue.as_str().into());
        out.insert("args".into(), Value::Array(self.args.clone()));
        out.insert("meta".into(), Value::Object(self.meta.clone()));
        out.insert("priority".into(), self.priority.into());
        if let Some(ms) = self.timeout_ms {
            out.insert("timeout_ms".into(), ms.into());
        }
        if let Some(ms) = self.visibility_timeout_ms {
            out.insert("visibility_timeout_ms".into(), ms.into());
        }
        if let Some(t) = &self.scheduled_at {
            out.insert("scheduled_at".into(), time::format(t).into());
        }
        if let Some(t) = &self.expires_at {
            out.insert("expires_at".into(), time::format(t).into());
        }
        out.insert("retry".into(), self.retry.to_json());
        if let Some(u) = &self.unique {
            out.insert("unique".into(), u.clone());
        }
        if let Some(s) = &self.schema {
            out.insert("schema".into(), s.clone().into());
        }
        if let Some(r) = &self.rate_limit {
            out.insert("rate_limit".into(), r.clone());
        }
        if !self.tags.is_empty() {
            out.insert("tags".into(), self.tags.clone().into());
        }
        out
    }

    /// Reads back the form written by [`JobSpec::to_json`].
    pub fn from_stored(stored: Value) -> Result<Self, OjsError> {
        NewJob::parse(stored, true).map(|n| n.spec)
    }

    /// The execution timeout, if the job has one.
    pub fn execution_timeout(&self) -> Option<chrono::Duration> {
        self.timeout_ms
            .filter(|ms| *ms > 0)
            .and_then(|ms| i64::try_from(ms).ok())
            .map(chrono::Duration::milliseconds)
    }

    /// The lease a fetch grants when it names none.
    pub fn visibility_timeout_ms(&self) -> u64 {
        self.visibility_timeout_ms
            .unwrap_or(DEFAULT_VISIBILITY_TIMEOUT_MS)
    }
}

impl Job {
    /// The job's tenant (`None`: the default tenant), from `meta.tenant_id`.
    pub fn tenant(&self) -> Option<crate::tenant::TenantId> {
        crate::tenant::of_meta(&self.spec.meta)
    }

    /// The job PUSH creates at `now`: `scheduled` if its time is in the future, else
    /// `available`.
    pub fn enqueue(new: NewJob, now: Timestamp) -> Self {
        let future = new.spec.scheduled_at.filter(|t| *t > now);
        let state = if future.is_some() {
            JobState::Scheduled
        } else {
            JobState::Available
        };
        Self {
            id: new.id.unwrap_or_else(JobId::generate),
            status: JobStatus {
                state,
                attempt: 0,
                created_at: now,
                enqueued_at: future.is_none().then_some(now),
                started_at: None,
                completed_at: None,
                cancelled_at: None,
                cancelled_from: None,
                discarded_at: None,
                next_attempt_at: None,
                retry_delay_ms: None,
                deadline: None,
                dead_letter: false,
                workflow_id: None,
                workflow_step: None,
                workflow_callback: None,
                parent_results: Vec::new(),
                successor: None,
                worker_id: None,
                lease_until: None,
                result: None,
                error: None,
                errors: Vec::new(),
                progress: None,
                checkpoint: None,
                version: 1,
                payload: None,
            },
            spec: new.spec,
        }
    }

    /// This not-yet-stored job rescheduled to `at` (scheduled if `at` is after `now`,
    /// else available now): unique `replace_except_schedule` keeps the replaced job's time.
    pub fn rescheduled(&self, at: Timestamp, now: Timestamp) -> Self {
        let mut job = self.clone();
        job.spec.scheduled_at = Some(at);
        if at > now {
            job.status.state = JobState::Scheduled;
            job.status.enqueued_at = None;
        } else {
            job.status.state = JobState::Available;
            job.status.enqueued_at = Some(job.status.enqueued_at.unwrap_or(now));
        }
        job
    }

    /// The full envelope as clients see it (INFO, FETCH, PUSH responses).
    pub fn to_json(&self) -> Value {
        let s = &self.status;
        let mut out = self.spec.to_json();
        out.insert("specversion".into(), crate::SPEC_VERSION.into());
        out.insert("id".into(), self.id.to_string().into());
        out.insert("state".into(), s.state.as_str().into());
        out.insert("attempt".into(), s.attempt.into());
        out.insert("max_attempts".into(), self.spec.retry.max_attempts.into());
        let stamps = [
            ("created_at", Some(&s.created_at)),
            ("enqueued_at", s.enqueued_at.as_ref()),
            ("started_at", s.started_at.as_ref()),
            ("completed_at", s.completed_at.as_ref()),
            ("cancelled_at", s.cancelled_at.as_ref()),
            ("discarded_at", s.discarded_at.as_ref()),
            ("next_attempt_at", s.next_attempt_at.as_ref()),
        ];
        for (key, t) in stamps {
            if let Some(t) = t {
                out.insert(key.into(), time::format(t).into());
            }
        }
        if let Some(w) = &s.worker_id {
            out.insert("worker_id".into(), w.clone().into());
        }
        if let Some(from) = s.cancelled_from.filter(|_| s.state == JobState::Cancelled) {
            out.insert("previous_state".into(), from.as_str().into());
        }
        if let Some(ms) = s.retry_delay_ms {
            out.insert("retry_delay_ms".into(), ms.into());
        }
        if s.dead_letter {
            out.insert("dead_letter".into(), true.into());
        }
        if let Some(w) = &s.workflow_id {
            out.insert("workflow_id".into(), w.clone().into());
        }
        if !s.parent_results.is_empty() {
            out.insert(
                "parent_results".into(),
                Value::Array(s.parent_results.clone()),
            );
        }
        if let Some(r) = &s.result {
            out.insert("result".into(), r.clone());
        }
        if let Some(e) = &s.error {
            out.insert("error".into(), e.clone());
        }
        if !s.errors.is_empty() {
            out.insert("errors".into(), Value::Array(s.errors.clone()));
        }
        if s.progress.as_ref().is_some_and(|p| p.attempt == s.attempt) {
            out.insert("progress".into(), self.progress_view());
        }
        if let Some(c) = &s.checkpoint {
            // ojs-durable-execution.md §6.1: present only when one exists.
            out.insert("checkpoint".into(), c.envelope_view());
        }
        if let Some(p) = &s.payload {
            // Incomplete, and shown so: no `args` or `meta` a reader could take for the
            // job's own.
            out.remove("args");
            out.remove("meta");
            let mut note = Map::new();
            note.insert("resolved".into(), false.into());
            note.insert("bytes".into(), p.bytes.into());
            note.insert("sha256".into(), p.sha256.clone().into());
            if let Some(why) = &p.unreadable {
                note.insert("error".into(), why.clone().into());
            }
            out.insert(PAYLOAD_VIEW_KEY.into(), Value::Object(note));
        }
        Value::Object(out)
    }

    /// The job's progress as `GET /ojs/v1/jobs/{id}/progress` answers it.
    pub fn progress_view(&self) -> Value {
        crate::progress::view(
            &self.id,
            self.status.state,
            self.status.attempt,
            self.status.progress.as_ref(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate;
    use serde_json::json;

    fn parse(v: Value) -> Result<NewJob, OjsError> {
        NewJob::from_json(v)
    }

    #[test]
    fn a_job_without_its_payload_is_shown_incomplete_and_a_client_cannot_fake_that() {
        let n = parse(json!({"type": "a.b", "args": [], "x-ojs-payload": {"resolved": true}}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!n.spec.extensions.contains_key(PAYLOAD_VIEW_KEY));
        let mut job = Job::enqueue(n, time::now());
        assert!(job.to_json().get(PAYLOAD_VIEW_KEY).is_none());
        assert_eq!(job.to_json()["args"], json!([]));
        job.status.payload = Some(PayloadRef {
            key: "secret/key".into(),
            sha256: "ab".into(),
            bytes: 9,
            unreadable: Some("gone".into()),
        });
        let v = job.to_json();
        assert!(v.get("args").is_none() && v.get("meta").is_none());
        assert_eq!(
            v[PAYLOAD_VIEW_KEY],
            json!({"resolved": false, "bytes": 9, "sha256": "ab", "error": "gone"})
        );
        assert!(!v.to_string().contains("secret/key"));
    }

    #[test]
    fn minimal_job_gets_defaults() {
        let n =
            parse(json!({"type": "email.send", "args": ["a"]})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(n.spec.queue.as_str(), "default");
        assert_eq!(n.spec.priority, 0);
        assert_eq!(n.spec.retry, RetryPolicy::default());
        let job = Job::enqueue(n, time::now());
        let v = job.to_json();
        assert_eq!(v["state"], "available");
        assert_eq!(v["attempt"], 0);
        assert_eq!(v["specversion"], "1.0");
        assert!(
            v.get("started_at").is_none() && v.get("result").is_none() && v.get("error").is_none()
        );
        assert_eq!(v["created_at"], v["enqueued_at"]);
    }

    #[test]
    fn options_override_top_level_and_unknown_fields_survive() {
        let n = parse(json!({
            "type": "a.b", "args": [], "queue": "top", "priority": 1,
            "options": {"queue": "inner", "priority": 10, "timeout_ms": 5000, "retry": {"max_attempts": 5}},
            "x_custom": {"nested": true}, "state": "completed", "attempt": 9
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(n.spec.queue.as_str(), "inner");
        assert_eq!(n.spec.priority, 10);
        assert_eq!(n.spec.timeout_ms, Some(5000));
        assert_eq!(n.spec.retry.max_attempts, 5);
        assert_eq!(
            n.spec.extensions.get("x_custom"),
            Some(&json!({"nested": true}))
        );
        assert!(!n.spec.extensions.contains_key("state"));
        let job = Job::enqueue(n, time::now());
        assert_eq!(job.to_json()["state"], "available");
        assert_eq!(job.to_json()["attempt"], 0);
    }

    /// The JSON view names a job's timeouts only `timeout_ms` and `visibility_timeout_ms`
    /// (the HTTP binding's): the official JavaScript SDK reads a job's `timeout` as
    /// milliseconds and would abort a job pushed with 5 s at 5 ms. The JSON format's
    /// `timeout` (seconds) is still read, and the Protobuf form carries it (field 8).
    #[test]
    fn the_view_names_timeouts_in_milliseconds_only() {
        let view = |body: Value| {
            let n = parse(body).unwrap_or_else(|e| panic!("{e}"));
            Job::enqueue(n, time::now()).to_json()
        };
        let v = view(json!({"type": "a", "args": [], "timeout": 60, "visibility_timeout": 30}));
        assert_eq!(v["timeout_ms"], 60_000);
        assert_eq!(v["visibility_timeout_ms"], 30_000);
        assert!(
            v.get("timeout").is_none() && v.get("visibility_timeout").is_none(),
            "{v}"
        );
        let again = view(v.clone());
        assert_eq!(
            (
                again["timeout_ms"].clone(),
                again["visibility_timeout_ms"].clone()
            ),
            (json!(60_000), json!(30_000))
        );
    }

    /// Integers beyond 2^53-1 must travel as strings (JSON format): a PUSH carrying one as
    /// a number in `args` or `meta` is refused where it is; a stored job is read as it is.
    #[test]
    fn unsafe_integers_are_refused_in_args_and_meta_but_not_in_stored_jobs() {
        let big = 9_007_199_254_740_993_u64;
        for (body, at) in [
            (json!({"type": "a", "args": [big]}), "$.args[0]"),
            (
                json!({"type": "a", "args": [], "meta": {"n": big}}),
                "$.meta.n",
            ),
            (
                json!({"type": "a", "args": [], "options": {"meta": {"n": [big]}}}),
                "$.options.meta.n[0]",
            ),
        ] {
            let err = parse(body)
                .err()
                .map(|e| e.details["validation_errors"][0]["path"].clone());
            assert_eq!(err, Some(json!(at)));
        }
        assert!(
            parse(json!({"type": "a", "args": [big.to_string(), 9_007_199_254_740_991_u64]}))
                .is_ok()
        );
        let stored = json!({"type": "a", "queue": "default", "args": [big], "meta": {"n": big}});
        let spec = JobSpec::from_stored(stored).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.args, vec![json!(big)]);
    }

    /// ojs-payload-limits.md §4.2-4.3: `meta` up to 65,536 bytes of JSON, refused with
    /// `envelope_too_large` beyond; `args` bounded only by the envelope.
    #[test]
    fn meta_is_limited_to_64_kib_and_args_only_by_the_envelope() {
        // `{"m":"..."}` is 8 bytes of JSON around the string.
        let meta = |len: usize| json!({"type": "a", "args": [], "meta": {"m": "x".repeat(len)}});
        assert!(parse(meta(65_536 - 8)).is_ok());
        let over = parse(meta(65_536 - 7)).err();
        assert_eq!(
            over.as_ref().map(|e| e.code),
            Some(crate::ErrorCode::EnvelopeTooLarge)
        );
        assert!(over.is_some_and(|e| e.message.contains("65536")));
        let args = json!({"type": "a", "args": ["x".repeat(validate::MAX_ENVELOPE_BYTES)]});
        assert!(parse(args).is_ok());
    }

    #[test]
    fn future_schedule_means_scheduled() {
        let n = parse(
            json!({"type": "a", "args": [], "options": {"delay_until": "2099-12-31T23:59:59Z"}}),
        );
        let job = Job::enqueue(n.unwrap_or_else(|e| panic!("{e}")), time::now());
        assert_eq!(job.status.state, JobState::Scheduled);
        assert_eq!(job.status.enqueued_at, None);
        let past = parse(json!({"type": "a", "args": [], "scheduled_at": "2020-01-01T00:00:00Z"}));
        let job = Job::enqueue(past.unwrap_or_else(|e| panic!("{e}")), time::now());
        assert_eq!(job.status.state, JobState::Available);
    }

    #[test]
    fn invalid_envelopes_are_rejected() {
        let bad = [
            json!([]),
            json!({"args": []}),
            json!({"type": "a"}),
            json!({"type": "a", "args": {}}),
            json!({"type": "a", "args": null}),
            json!({"type": 3, "args": []}),
            json!({"type": "A", "args": []}),
            json!({"type": "a", "args": [], "id": "550e8400-e29b-41d4-a716-446655440000"}),
            json!({"type": "a", "args": [], "options": {"priority": 101}}),
            json!({"type": "a", "args": [], "options": {"priority": 1.5}}),
            json!({"type": "a", "args": [], "options": {"queue": "Default"}}),
            json!({"type": "a", "args": [], "scheduled_at": "2025-06-01T09:00:00"}),
            json!({"type": "a", "args": [], "specversion": "2.0"}),
            json!({"type": "a", "args": [], "meta": []}),
            json!({"type": "a", "args": [], "options": "fast"}),
            json!({"type": "a", "args": [], "timeout": -1}),
        ];
        for v in bad {
            assert!(parse(v.clone()).is_err(), "{v}");
        }
    }

    /// Each member's refusal word for word, with its path (under `options` when sent
    /// there): clients and the conformance suite read them.
    #[test]
    fn each_member_is_refused_in_its_own_words_at_its_path() {
        let with = |extra: Value| {
            let mut body = json!({"type": "a", "args": []});
            if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
                b.extend(e);
            }
            body
        };
        let cases = [
            (with(json!({"id": 5})), "id must be a string", "$.id"),
            (with(json!({"options": {"id": 5}})), "id must be a string", "$.options.id"),
            (with(json!({"specversion": "2.0"})), "specversion must be \"1.0\"", "$.specversion"),
            (json!({"args": []}), "type is required", "$.type"),
            (json!({"type": 3, "args": []}), "type must be a string", "$.type"),
            (json!({"type": "a"}), "args is required", "$.args"),
            (with(json!({"args": {}})), "args must be a JSON array", "$.args"),
            (with(json!({"queue": 1})), "queue must be a string", "$.queue"),
            (with(json!({"options": {"metadata": 1}})), "meta must be an object", "$.options.metadata"),
            (with(json!({"priority": 101})), "priority must be an integer from -100 to 100", "$.priority"),
            (with(json!({"timeout": -1})), "$.timeout must be a non-negative integer of at most 604800000 ms", "$.timeout"),
            (
                with(json!({"options": {"visibility_timeout_ms": 1.5}})),
                "$.options.visibility_timeout_ms must be a non-negative integer of at most 43200000 ms",
                "$.options.visibility_timeout_ms",
            ),
            (with(json!({"expires_at": 5})), "$.expires_at must be an RFC 3339 string", "$.expires_at"),
            (with(json!({"unique": []})), "unique must be an object", "$.unique"),
            (with(json!({"schema": ""})), "schema must be a URI string", "$.schema"),
            (with(json!({"tags": ["x", 1]})), "tags must be an array of strings", "$.tags"),
            (with(json!({"options": []})), "options must be an object", "$.options"),
        ];
        for (body, message, path) in cases {
            let e = match parse(body.clone()) {
                Ok(_) => panic!("{body} was accepted"),
                Err(e) => e,
            };
            assert_eq!(e.code, crate::error::ErrorCode::InvalidRequest, "{body}");
            assert_eq!(e.message, message, "{body}");
            assert_eq!(e.details["validation_errors"][0]["path"], path, "{body}");
        }
    }

    /// A `null` member reads as left out, and of two spellings at the top level the
    /// first (`meta` before `metadata`, `delay_until` before `scheduled_at`) is read.
    #[test]
    fn a_null_member_is_left_out_and_the_first_spelling_wins() {
        let n = parse(json!({
            "type": "a", "args": [], "queue": null, "priority": null, "options": {"queue": null},
            "meta": {"a": 1}, "metadata": {"b": 2},
            "delay_until": "2030-01-01T00:00:00Z", "scheduled_at": "2031-01-01T00:00:00Z"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(n.spec.queue, QueueName::default_queue());
        assert_eq!(n.spec.priority, 0);
        assert_eq!(Value::Object(n.spec.meta.clone()), json!({"a": 1}));
        assert_eq!(
            n.spec.scheduled_at.map(|t| time::format(&t)),
            Some("2030-01-01T00:00:00Z".to_owned())
        );
        // Every spelling leaves the top level, read or not.
        for key in ["metadata", "scheduled_at", "queue"] {
            assert!(!n.spec.extensions.contains_key(key), "{key}");
        }
    }

    #[test]
    fn stored_spec_round_trips() {
        let n = parse(json!({
            "type": "report.generate", "args": [42, "q", {"c": true}], "meta": {"trace_id": "t"},
            "options": {"queue": "reports", "priority": -5, "timeout_ms": 300000, "expires_at": "2030-01-01T00:00:00+02:00",
                        "retry": {"max_attempts": 5, "initial_interval": "PT1S", "jitter": false}, "unique": {"keys": ["type"]}, "tags": ["x"]},
            "schema": "urn:ojs:schema:x:v1", "x_ext": 1
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let back =
            JobSpec::from_stored(Value::Object(n.spec.to_json())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, n.spec);
    }

    #[test]
    fn a_stored_job_with_a_since_reserved_rate_limit_key_still_reads_back() {
        let job = json!({"type": "a", "args": [], "options": {"queue": "q",
            "rate_limit": {"key": "queue-limit:q", "max_per_second": 1}}});
        assert!(parse(job.clone()).is_err(), "refused at PUSH");
        let spec = JobSpec::from_stored(job).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            spec.rate_limit.map(|r| r["key"].clone()),
            Some(json!("queue-limit:q"))
        );
    }
}
