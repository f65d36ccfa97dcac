//! Checkpoints (ojs-durable-execution.md): the one saved state of a job's work, kept
//! across attempts so that the next attempt resumes from it, and dropped when the job
//! finishes.

use serde_json::{Map, Value};

use crate::time::{self, Timestamp};
use crate::{JobId, OjsError};

/// The largest checkpoint state kept, as JSON: it is kept on the job's own item (which
/// also holds the request, up to 256 KiB, within DynamoDB's 400 KB), and every write of
/// the job (claim, heartbeat, ACK) is billed for the whole item, so this stays well below
/// the spec's 1 MB cap (§9.1); a larger one is refused with 413.
pub const MAX_CHECKPOINT_BYTES: usize = 64 * 1024;

/// A job's latest checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The state the worker saved (any JSON value).
    pub state: Value,
    /// Saves since the job had none (1 for the first).
    pub sequence: u64,
    /// When it was saved.
    pub created_at: Timestamp,
}

impl Checkpoint {
    /// The checkpoint as the job envelope carries it (§6.1): `state` and `sequence`.
    pub fn envelope_view(&self) -> Value {
        let mut out = Map::new();
        out.insert("state".into(), self.state.clone());
        out.insert("sequence".into(), self.sequence.into());
        out.insert("created_at".into(), time::format(&self.created_at).into());
        Value::Object(out)
    }

    /// The checkpoint of job `id` as GET answers it (§4.3): `job_id`, `state`,
    /// `sequence`, `created_at`.
    pub fn view(&self, id: &JobId) -> Value {
        let mut out = match self.envelope_view() {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        out.insert("job_id".into(), id.to_string().into());
        Value::Object(out)
    }
}

/// A save request (§4.1): the state as the JSON text to store, and what fences it.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointSave {
    /// `state` as compact JSON.
    pub state_json: String,
    /// `worker_id`: when given, only the worker holding the job's active attempt may save.
    pub worker_id: Option<String>,
    /// `attempt`: when given, only that attempt (active) may save.
    pub attempt: Option<u32>,
    /// `sequence`: when given, the save is the one that number names and is refused
    /// unless the checkpoint stored is the one before it (none for 1): a stale or
    /// repeated save does not overwrite a newer one.
    pub sequence: Option<u64>,
}

impl CheckpointSave {
    /// Parses a save body `{"state": ..., "worker_id"?, "attempt"?, "sequence"?}`.
    pub fn from_body(body: &Value) -> Result<Self, OjsError> {
        let Value::Object(o) = body else {
            return Err(OjsError::invalid_request(
                "the request body must be a JSON object",
            ));
        };
        let state = o.get("state").ok_or_else(|| {
            OjsError::invalid_request("state is required (any JSON value)").with_path("$.state")
        })?;
        let state_json = state.to_string();
        if state_json.len() > MAX_CHECKPOINT_BYTES {
            return Err(too_large(state_json.len()));
        }
        let worker_id = match o.get("worker_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => Some(s.clone()),
            Some(_) => {
                return Err(OjsError::invalid_request(
                    "worker_id must be a non-empty string of at most 256 characters",
                )
                .with_path("$.worker_id"))
            }
        };
        let attempt = match o.get("attempt") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|a| *a >= 1)
                    .and_then(|a| u32::try_from(a).ok())
                    .ok_or_else(|| {
                        OjsError::invalid_request("attempt must be a positive integer")
                            .with_path("$.attempt")
                    })?,
            ),
        };
        let sequence = match o.get("sequence") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|s| *s >= 1).ok_or_else(|| {
                OjsError::invalid_request("sequence must be a positive integer")
                    .with_path("$.sequence")
            })?),
        };
        Ok(Self {
            state_json,
            worker_id,
            attempt,
            sequence,
        })
    }
}

/// The 413 for a checkpoint state of `bytes` bytes.
pub fn too_large(bytes: usize) -> OjsError {
    OjsError::new(
        crate::ErrorCode::EnvelopeTooLarge,
        format!(
            "the checkpoint state is {bytes} bytes as JSON; this server keeps at most \
             {MAX_CHECKPOINT_BYTES} (store large state elsewhere and checkpoint a reference, \
             ojs-durable-execution.md §9.1)"
        ),
    )
    .with_detail("size_bytes", bytes)
    .with_detail("max_bytes", MAX_CHECKPOINT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_save_body_is_parsed_and_checked() {
        let s = CheckpointSave::from_body(&json!({"state": {"a": [1, null]}}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.state_json, r#"{"a":[1,null]}"#);
        assert_eq!((s.worker_id, s.attempt, s.sequence), (None, None, None));
        let s = CheckpointSave::from_body(
            &json!({"state": null, "worker_id": "w", "attempt": 2, "sequence": 3}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.state_json, "null");
        assert_eq!(
            (s.worker_id.as_deref(), s.attempt, s.sequence),
            (Some("w"), Some(2), Some(3))
        );
        for bad in [
            json!({}),
            json!([1]),
            json!({"state": 1, "worker_id": ""}),
            json!({"state": 1, "attempt": 0}),
            json!({"state": 1, "attempt": "1"}),
            json!({"state": 1, "sequence": 0}),
            json!({"state": 1, "sequence": -2}),
        ] {
            assert!(CheckpointSave::from_body(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_state_over_the_limit_is_413_and_at_it_is_kept() {
        // `"` + n characters + `"` is n + 2 bytes.
        let at = json!({"state": "x".repeat(MAX_CHECKPOINT_BYTES - 2)});
        assert!(CheckpointSave::from_body(&at).is_ok());
        let over = json!({"state": "x".repeat(MAX_CHECKPOINT_BYTES - 1)});
        let err = CheckpointSave::from_body(&over)
            .err()
            .unwrap_or_else(|| panic!("over the limit accepted"));
        assert_eq!(err.code, crate::ErrorCode::EnvelopeTooLarge);
        assert_eq!(err.details["max_bytes"], MAX_CHECKPOINT_BYTES);
    }

    #[test]
    fn views_carry_state_and_sequence() {
        let id = JobId::generate();
        let c = Checkpoint {
            state: json!({"k": 1}),
            sequence: 4,
            created_at: time::now(),
        };
        let v = c.view(&id);
        assert_eq!(v["job_id"], id.to_string());
        assert_eq!(v["state"]["k"], 1);
        assert_eq!(v["sequence"], 4);
        assert!(v["created_at"].is_string());
        assert_eq!(c.envelope_view()["sequence"], 4);
        assert!(c.envelope_view().get("job_id").is_none());
    }
}
