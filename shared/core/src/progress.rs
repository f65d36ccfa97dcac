//! Job progress (ojs-progress.md): what a worker reports of its attempt, and how a
//! report combines with the one before it.
//!
//! Two request shapes, one model: the spec's `PUT /ojs/v1/jobs/{id}/progress`
//! (`progress` 0.0-1.0) and the SDKs' `POST /ojs/v1/workers/progress` (`job_id`,
//! `percentage` 0-100). Values out of range are clamped, never refused (§5.1); within one
//! attempt the value never goes down (§5.1); a later attempt starts without progress
//! (§5.3); a completed job reads 1.0 when it reported any (§8.1).

use serde_json::{json, Map, Value};

use crate::error::OjsError;
use crate::fields::Fields;
use crate::ids::JobId;
use crate::state::JobState;
use crate::time::{self, Timestamp};

/// Largest `data` object accepted, serialized: the spec recommends 4 KB; the job item
/// (400 KB in all, rewritten by every transition) must keep room.
pub const MAX_PROGRESS_DATA_BYTES: usize = 16 * 1024;
/// Longest `message` accepted, in characters.
pub const MAX_PROGRESS_MESSAGE_CHARS: usize = 1024;

/// The progress of one attempt, as stored with the job.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// 0.0-1.0, if a value was reported.
    pub value: Option<f64>,
    /// The last message reported.
    pub message: Option<String>,
    /// The last structured details reported.
    pub data: Option<Value>,
    /// The attempt that reported it.
    pub attempt: u32,
    /// When it was last reported.
    pub updated_at: Timestamp,
}

/// One report from a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressReport {
    /// 0.0-1.0 after clamping.
    pub value: Option<f64>,
    /// A message for people.
    pub message: Option<String>,
    /// Structured details.
    pub data: Option<Value>,
    /// The worker sending it; when given, it must hold the job (fenced like ACK).
    pub worker_id: Option<String>,
    /// The attempt it is about; when given, it must be the job's current one.
    pub attempt: Option<u32>,
}

fn invalid(path: &str, message: impl Into<String>) -> OjsError {
    OjsError::invalid_request(message).with_path(path)
}

fn object(body: &Value) -> Result<&Map<String, Value>, OjsError> {
    body.as_object()
        .ok_or_else(|| invalid("$", "the request body must be a JSON object"))
}

/// A number clamped to `[0, scale]` and divided by `scale`; NaN cannot come from JSON.
fn fraction(v: &Value, path: &str, scale: f64) -> Result<f64, OjsError> {
    let x = v
        .as_f64()
        .ok_or_else(|| invalid(path, format!("{} must be a number", &path[2..])))?;
    Ok((x / scale).clamp(0.0, 1.0))
}

impl ProgressReport {
    /// `PUT /ojs/v1/jobs/{id}/progress`: `progress` (0.0-1.0, clamped), `message`,
    /// `data`, and optionally `worker_id` and `attempt`; at least one of the first three.
    pub fn from_spec_body(body: &Value) -> Result<Self, OjsError> {
        let o = object(body)?;
        let value = match o.get("progress") {
            None | Some(Value::Null) => None,
            Some(v) => Some(fraction(v, "$.progress", 1.0)?),
        };
        Self::with_value(o, value)
    }

    /// `POST /ojs/v1/workers/progress` (the Python and JavaScript SDKs): `job_id`,
    /// `percentage` (0-100, clamped), `message`, `data`, optionally `worker_id`.
    pub fn from_sdk_body(body: &Value) -> Result<(JobId, Self), OjsError> {
        let o = object(body)?;
        let f = Fields::new(o, "$");
        // A null job_id is refused as not a string.
        let id = f
            .member("job_id")
            .ok_or_else(|| f.refuse("job_id", "is required"))?;
        let id = JobId::parse(id.str()?).map_err(|e| e.with_path("$.job_id"))?;
        let value = match (o.get("percentage"), o.get("progress")) {
            (Some(v), _) if !v.is_null() => Some(fraction(v, "$.percentage", 100.0)?),
            (_, Some(v)) if !v.is_null() => Some(fraction(v, "$.progress", 1.0)?),
            _ => None,
        };
        Ok((id, Self::with_value(o, value)?))
    }

    fn with_value(o: &Map<String, Value>, value: Option<f64>) -> Result<Self, OjsError> {
        let f = Fields::new(o, "$");
        let message = f.get("message").map(|m| {
            let s = m.str()?;
            if s.chars().count() > MAX_PROGRESS_MESSAGE_CHARS {
                return Err(m.refuse(&format!(
                    "is longer than {MAX_PROGRESS_MESSAGE_CHARS} characters"
                )));
            }
            Ok(s.to_owned())
        });
        let message = message.transpose()?;
        let data = f.get("data").map(|d| {
            d.expect(Value::as_object, "must be a JSON object")?;
            if d.value().to_string().len() > MAX_PROGRESS_DATA_BYTES {
                return Err(d.refuse(&format!("is larger than {MAX_PROGRESS_DATA_BYTES} bytes")));
            }
            Ok(d.value().clone())
        });
        let data = data.transpose()?;
        if value.is_none() && message.is_none() && data.is_none() {
            return Err(invalid(
                "$",
                "a progress report needs progress (or percentage), message or data",
            ));
        }
        let worker_id = f.get("worker_id").map(|w| {
            w.expect(
                |v| v.as_str().filter(|s| !s.is_empty() && s.len() <= 256),
                "must be a non-empty string of at most 256 characters",
            )
            .map(str::to_owned)
        });
        let attempt = f.get("attempt").map(|a| {
            a.expect(
                |v| v.as_u64().and_then(|a| u32::try_from(a).ok()),
                "must be a positive integer",
            )
        });
        Ok(Self {
            value,
            message,
            data,
            worker_id: worker_id.transpose()?,
            attempt: attempt.transpose()?,
        })
    }

    /// The progress of `attempt` after this report, on top of what it reported before
    /// (`before`, when it is the same attempt's): the value never goes down; a message or
    /// data left out keeps the previous one.
    pub fn applied_to(&self, before: Option<&Progress>, attempt: u32, now: Timestamp) -> Progress {
        let before = before.filter(|p| p.attempt == attempt);
        let value = match (self.value, before.and_then(|p| p.value)) {
            (Some(new), Some(old)) => Some(new.max(old)),
            (new, old) => new.or(old),
        };
        Progress {
            value,
            message: self
                .message
                .clone()
                .or_else(|| before.and_then(|p| p.message.clone())),
            data: self
                .data
                .clone()
                .or_else(|| before.and_then(|p| p.data.clone())),
            attempt,
            updated_at: now,
        }
    }
}

impl Progress {
    /// The stored form (one JSON attribute of the job item).
    pub fn to_stored(&self) -> Value {
        json!({
            "value": self.value,
            "message": self.message,
            "data": self.data,
            "attempt": self.attempt,
            "at": time::format(&self.updated_at),
        })
    }

    /// Reads back [`Progress::to_stored`]; None for anything else.
    pub fn from_stored(v: &Value) -> Option<Self> {
        Some(Self {
            value: v["value"].as_f64(),
            message: v["message"].as_str().map(str::to_owned),
            data: v.get("data").filter(|d| d.is_object()).cloned(),
            attempt: u32::try_from(v["attempt"].as_u64()?).ok()?,
            updated_at: time::parse(v["at"].as_str()?, "at").ok()?,
        })
    }
}

/// What `GET /ojs/v1/jobs/{id}/progress` answers for a job in `state` at `attempt`
/// with `progress` stored (§7.1): the current attempt's only, 1.0 once completed (§8.1),
/// nulls when none was reported.
pub fn view(id: &JobId, state: JobState, attempt: u32, progress: Option<&Progress>) -> Value {
    let current = progress.filter(|p| p.attempt == attempt);
    let value = match (state, current) {
        (JobState::Completed, Some(_)) => Some(1.0),
        (_, p) => p.and_then(|p| p.value),
    };
    json!({
        "job_id": id.to_string(),
        "state": state.as_str(),
        "progress": value,
        "message": current.and_then(|p| p.message.clone()),
        "data": current.and_then(|p| p.data.clone()),
        "updated_at": current.map(|p| time::format(&p.updated_at)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(body: Value) -> ProgressReport {
        ProgressReport::from_spec_body(&body).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    #[test]
    fn values_are_clamped_not_refused() {
        assert_eq!(report(json!({"progress": 1.5})).value, Some(1.0));
        assert_eq!(report(json!({"progress": -0.2})).value, Some(0.0));
        assert_eq!(report(json!({"progress": 0.25})).value, Some(0.25));
        let (_, r) = ProgressReport::from_sdk_body(
            &json!({"job_id": "019539a4-b68c-7def-8000-1a2b3c4d5e6f", "percentage": 150}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.value, Some(1.0));
        let (_, r) = ProgressReport::from_sdk_body(
            &json!({"job_id": "019539a4-b68c-7def-8000-1a2b3c4d5e6f", "percentage": 40, "message": "m"}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.value, r.message.as_deref()), (Some(0.4), Some("m")));
    }

    #[test]
    fn bad_reports_name_their_field() {
        let path = |body: Value| {
            ProgressReport::from_spec_body(&body)
                .err()
                .and_then(|e| e.details.get("validation_errors").cloned())
                .map(|v| v[0]["path"].clone())
        };
        assert_eq!(path(json!({"progress": "half"})), Some(json!("$.progress")));
        assert_eq!(path(json!({"message": 7})), Some(json!("$.message")));
        assert_eq!(path(json!({"data": [1]})), Some(json!("$.data")));
        assert_eq!(path(json!({})), Some(json!("$")));
        assert_eq!(
            path(json!({"progress": 0.1, "attempt": -1})),
            Some(json!("$.attempt"))
        );
        let big = "x".repeat(MAX_PROGRESS_DATA_BYTES);
        assert_eq!(path(json!({"data": {"big": big}})), Some(json!("$.data")));
        assert!(ProgressReport::from_spec_body(&json!([1])).is_err());
        assert!(ProgressReport::from_sdk_body(&json!({"percentage": 1})).is_err());
        assert!(ProgressReport::from_sdk_body(&json!({"job_id": 3, "percentage": 1})).is_err());
    }

    #[test]
    fn the_sdk_shape_falls_back_to_progress_and_optional_fields_have_limits() {
        let sdk = |body: Value| ProgressReport::from_sdk_body(&body).map(|(_, r)| r);
        let id = "019539a4-b68c-7def-8000-1a2b3c4d5e6f";
        let r = sdk(json!({"job_id": id, "percentage": null, "progress": 0.5}));
        assert_eq!(r.map(|r| r.value).ok(), Some(Some(0.5)));
        let r = sdk(json!({"job_id": id, "progress": 0.3}));
        assert_eq!(r.map(|r| r.value).ok(), Some(Some(0.3)));
        let r = sdk(json!({"job_id": id, "percentage": 30, "progress": 0.9}));
        assert_eq!(r.map(|r| r.value).ok(), Some(Some(0.3)), "percentage first");
        let r = sdk(json!({"job_id": id, "percentage": null, "progress": null, "message": "m"}));
        assert_eq!(r.map(|r| r.value).ok(), Some(None));
        // Limits: message characters, data bytes, worker id length.
        let at = "é".repeat(MAX_PROGRESS_MESSAGE_CHARS);
        assert!(ProgressReport::from_spec_body(&json!({"message": at})).is_ok());
        let over = "é".repeat(MAX_PROGRESS_MESSAGE_CHARS + 1);
        assert!(ProgressReport::from_spec_body(&json!({"message": over})).is_err());
        let fits = "x".repeat(MAX_PROGRESS_DATA_BYTES - 20);
        assert!(ProgressReport::from_spec_body(&json!({"data": {"d": fits}})).is_ok());
        // The spec's recommended 4 KB, twice over, fits.
        let eight_kib = "x".repeat(8 * 1024);
        assert!(ProgressReport::from_spec_body(&json!({"data": {"d": eight_kib}})).is_ok());
        let worker =
            |w: Value| ProgressReport::from_spec_body(&json!({"progress": 0.1, "worker_id": w}));
        assert_eq!(
            worker(json!("w-1"))
                .ok()
                .and_then(|r| r.worker_id)
                .as_deref(),
            Some("w-1")
        );
        assert!(worker(json!("w".repeat(256))).is_ok());
        assert!(worker(json!("w".repeat(257))).is_err());
        assert!(worker(json!("")).is_err());
        assert!(worker(json!(5)).is_err());
        assert_eq!(
            ProgressReport::from_spec_body(&json!({"progress": 0.1, "attempt": 2}))
                .ok()
                .and_then(|r| r.attempt),
            Some(2)
        );
    }

    #[test]
    fn within_an_attempt_progress_never_goes_down_and_a_new_attempt_starts_afresh() {
        let t0 = time::now();
        let first = report(json!({"progress": 0.6, "message": "a", "data": {"k": 1}}))
            .applied_to(None, 1, t0);
        let lower = report(json!({"progress": 0.4})).applied_to(Some(&first), 1, t0);
        assert_eq!(lower.value, Some(0.6));
        assert_eq!(lower.message.as_deref(), Some("a"), "kept when left out");
        assert_eq!(lower.data, Some(json!({"k": 1})));
        let higher =
            report(json!({"progress": 0.9, "message": "b"})).applied_to(Some(&lower), 1, t0);
        assert_eq!(
            (higher.value, higher.message.as_deref()),
            (Some(0.9), Some("b"))
        );
        let retried = report(json!({"progress": 0.1})).applied_to(Some(&higher), 2, t0);
        assert_eq!(
            (retried.value, retried.message, retried.attempt),
            (Some(0.1), None, 2)
        );
        let only_data = report(json!({"data": {"k": 2}})).applied_to(Some(&higher), 1, t0);
        assert_eq!(only_data.value, Some(0.9));
    }

    #[test]
    fn the_view_shows_the_current_attempt_and_one_for_a_completed_job() {
        let id = JobId::generate();
        let p = Progress {
            value: Some(0.3),
            message: Some("m".into()),
            data: None,
            attempt: 1,
            updated_at: time::now(),
        };
        assert_eq!(
            view(&id, JobState::Active, 1, Some(&p))["progress"],
            json!(0.3)
        );
        assert_eq!(
            view(&id, JobState::Completed, 1, Some(&p))["progress"],
            json!(1.0)
        );
        assert_eq!(
            view(&id, JobState::Discarded, 1, Some(&p))["progress"],
            json!(0.3)
        );
        let next = view(&id, JobState::Active, 2, Some(&p));
        assert_eq!(
            (next["progress"].clone(), next["message"].clone()),
            (Value::Null, Value::Null)
        );
        assert_eq!(
            view(&id, JobState::Completed, 1, None)["progress"],
            Value::Null
        );
        let back = Progress::from_stored(&p.to_stored());
        assert_eq!(back.map(|b| (b.value, b.attempt)), Some((Some(0.3), 1)));
        assert_eq!(Progress::from_stored(&json!({"value": 1})), None);
    }
}
