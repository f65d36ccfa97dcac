//! Unique jobs (ojs-unique-jobs.md): the policy, and the SHA-256 fingerprint of the
//! dimensions it names.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::{ErrorCode, OjsError};
use crate::fields::Fields;
use crate::job::JobSpec;
use crate::state::JobState;

/// What PUSH does when a live duplicate exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// 409 `duplicate` (the default).
    Reject,
    /// Answer with the existing job.
    Ignore,
    /// Cancel the existing job, enqueue the new one.
    Replace,
    /// Like `Replace`, but when the existing job is scheduled the new one takes its
    /// `scheduled_at` (ojs-unique-jobs.md §5.3).
    ReplaceExceptSchedule,
}

/// A validated uniqueness policy.
#[derive(Debug, Clone, PartialEq)]
pub struct UniquePolicy {
    /// Dimensions: `type` (always), `queue`, `args`, `meta`.
    pub keys: Vec<String>,
    /// Keys kept from object elements of `args` (all of `args` when None).
    pub args_keys: Option<Vec<String>>,
    /// Keys kept from `meta` (required when `meta` is a dimension).
    pub meta_keys: Vec<String>,
    /// How long the key stays claimed after enqueue, whatever the job's state.
    pub period: Option<Duration>,
    /// States in which an existing job counts as a duplicate.
    pub states: Vec<JobState>,
    /// Conflict handling.
    pub on_conflict: OnConflict,
}

/// The dimensions a uniqueness key can span.
const DIMENSIONS: [&str; 4] = ["type", "queue", "args", "meta"];

fn bad(message: impl Into<String>, field: &str) -> OjsError {
    // ojs-unique-jobs §2.2: an invalid policy is `invalid_request`.
    OjsError::new(ErrorCode::InvalidRequest, message)
        .with_path(&format!("$.options.unique.{field}"))
}

/// The policy's members: paths are under `$.options.unique` wherever the policy came
/// from, and a member is named by its key alone.
fn fields(obj: &Map<String, Value>) -> Fields<'_> {
    Fields::new(obj, "$.options.unique")
}

/// `keys` (or the SDKs' `key`), sorted, with `type` always among them; and the argument
/// fields `key` names when it names no dimension.
fn keys_of(f: &Fields) -> Result<(Vec<String>, Option<Vec<String>>), OjsError> {
    // `key` is what the Go and JavaScript SDKs send: argument fields to compare
    // (ojs-json-format §3.5), unless every entry names a dimension.
    let mut args_fields = None;
    let mut keys = match (f.get("keys"), f.get("key")) {
        (Some(v), _) => v.strings()?,
        (_, Some(v)) => {
            let named = v.strings()?;
            if named.iter().all(|k| DIMENSIONS.contains(&k.as_str())) {
                named
            } else {
                args_fields = Some(named);
                vec!["args".to_owned()]
            }
        }
        _ => vec!["type".to_owned()],
    };
    for k in &keys {
        if !DIMENSIONS.contains(&k.as_str()) {
            return Err(bad(
                format!("unknown uniqueness dimension {k:?}: use type, queue, args or meta"),
                "keys",
            ));
        }
    }
    if !keys.iter().any(|k| k == "type") {
        keys.push("type".into());
    }
    keys.sort();
    keys.dedup();
    Ok((keys, args_fields))
}

/// `period` (an ISO 8601 duration) or `period_ms`; a `null` period hides `period_ms`.
fn period_of(obj: &Map<String, Value>) -> Result<Option<Duration>, OjsError> {
    let period = match obj.get("period").or_else(|| obj.get("period_ms")) {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) => Some(
            crate::duration::parse(p)
                .ok_or_else(|| bad("period must be an ISO 8601 duration such as PT1H", "period"))?,
        ),
        Some(Value::Number(ms)) => {
            Some(ms.as_u64().map(Duration::from_millis).ok_or_else(|| {
                bad(
                    "period must be a non-negative number of milliseconds",
                    "period",
                )
            })?)
        }
        Some(_) => return Err(bad("period must be an ISO 8601 duration", "period")),
    };
    if period.is_some_and(|p| p > crate::validate::MAX_UNIQUE_PERIOD) {
        return Err(bad("period must be at most 366 days (P366D)", "period"));
    }
    Ok(period)
}

/// `states`, by default every state a job waits or runs in.
fn states_of(f: &Fields) -> Result<Vec<JobState>, OjsError> {
    let Some(named) = f.strings("states")? else {
        return Ok(vec![
            JobState::Available,
            JobState::Active,
            JobState::Scheduled,
            JobState::Retryable,
            JobState::Pending,
        ]);
    };
    named
        .iter()
        .map(|s| {
            s.parse::<JobState>()
                .map_err(|_| bad(format!("unknown state {s:?}"), "states"))
        })
        .collect()
}

/// `on_conflict`; one that is not a string reads as not given.
fn on_conflict_of(obj: &Map<String, Value>) -> Result<OnConflict, OjsError> {
    match obj.get("on_conflict").and_then(Value::as_str) {
        None | Some("reject") => Ok(OnConflict::Reject),
        Some("ignore") => Ok(OnConflict::Ignore),
        Some("replace") => Ok(OnConflict::Replace),
        Some("replace_except_schedule") => Ok(OnConflict::ReplaceExceptSchedule),
        // Named only in a comment of the protobuf seed; ojs-unique-jobs.md defines no
        // such strategy, so there is nothing faithful to implement.
        Some("reschedule") => Err(OjsError::new(
            ErrorCode::Unsupported,
            "on_conflict \"reschedule\" is not defined by ojs-unique-jobs.md; use \
             replace_except_schedule to keep the existing job's schedule",
        )
        .with_path("$.options.unique.on_conflict")),
        Some(other) => Err(bad(
            format!(
                "on_conflict must be reject, ignore, replace or \
                 replace_except_schedule, got {other:?}"
            ),
            "on_conflict",
        )),
    }
}

impl UniquePolicy {
    /// Parses the envelope's `unique` object.
    pub fn from_json(v: &Value) -> Result<Self, OjsError> {
        let obj = v
            .as_object()
            .ok_or_else(|| bad("unique must be an object", "keys"))?;
        let f = fields(obj);
        let (keys, args_fields) = keys_of(&f)?;
        let args_keys = match f.strings("args_keys")? {
            None => args_fields,
            named => named,
        };
        let meta_keys = f.strings("meta_keys")?.unwrap_or_default();
        if keys.iter().any(|k| k == "meta") && meta_keys.is_empty() {
            return Err(bad(
                "meta_keys must name the meta keys when keys contains \"meta\"",
                "meta_keys",
            ));
        }
        Ok(Self {
            keys,
            args_keys,
            period: period_of(obj)?,
            states: states_of(&f)?,
            on_conflict: on_conflict_of(obj)?,
            meta_keys,
        })
    }

    /// Hex SHA-256 of the canonical JSON of the chosen dimensions.
    pub fn fingerprint(&self, spec: &JobSpec) -> String {
        let mut dims = Map::new();
        for k in &self.keys {
            let v = match k.as_str() {
                "type" => Value::from(spec.job_type.as_str()),
                "queue" => Value::from(spec.queue.as_str()),
                "args" => Value::Array(
                    spec.args
                        .iter()
                        .map(|a| match (&self.args_keys, a) {
                            (Some(keep), Value::Object(o)) => Value::Object(
                                o.iter()
                                    .filter(|(k, _)| keep.contains(k))
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect(),
                            ),
                            _ => a.clone(),
                        })
                        .collect(),
                ),
                _ => Value::Object(
                    spec.meta
                        .iter()
                        .filter(|(k, _)| self.meta_keys.contains(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
            };
            dims.insert(k.clone(), v);
        }
        let canonical = canonical(&Value::Object(dims));
        let digest = Sha256::digest(canonical.as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether an existing job in `state` counts as a duplicate.
    pub fn covers(&self, state: JobState) -> bool {
        self.states.contains(&state)
    }
}

/// JSON with object keys sorted at every level.
fn canonical(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let sorted: BTreeMap<&String, Value> =
                    o.iter().map(|(k, v)| (k, sort(v))).collect();
                Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::NewJob;
    use serde_json::json;

    fn spec(v: Value) -> JobSpec {
        NewJob::from_json(v)
            .map(|n| n.spec)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn fingerprint_depends_only_on_the_chosen_dimensions() {
        let p = UniquePolicy::from_json(&json!({"keys": ["type", "args"], "args_keys": ["user"]}))
            .unwrap_or_else(|e| panic!("{e}"));
        let a = spec(
            json!({"type": "x", "args": [{"user": 1, "noise": 1}], "options": {"queue": "q1"}}),
        );
        let b = spec(
            json!({"type": "x", "args": [{"noise": 2, "user": 1}], "options": {"queue": "q2"}}),
        );
        let c = spec(json!({"type": "x", "args": [{"user": 2}]}));
        assert_eq!(p.fingerprint(&a), p.fingerprint(&b));
        assert_ne!(p.fingerprint(&a), p.fingerprint(&c));
        let by_type = UniquePolicy::from_json(&json!({})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(by_type.fingerprint(&a), by_type.fingerprint(&c));
        assert_eq!(by_type.fingerprint(&a).len(), 64);
    }

    #[test]
    fn policy_rules() {
        let d =
            UniquePolicy::from_json(&json!({"keys": ["args"]})).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            d.keys.contains(&"type".to_owned()),
            "type is always a dimension"
        );
        assert!(d.covers(JobState::Retryable) && !d.covers(JobState::Completed));
        assert_eq!(d.on_conflict, OnConflict::Reject);
        for bad in [
            json!({"keys": ["argz"]}),
            json!({"keys": ["meta"]}),
            json!({"period": "1h"}),
            json!({"states": ["done"]}),
            json!({"on_conflict": "merge"}),
        ] {
            assert!(UniquePolicy::from_json(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sdk_key_names_argument_fields() {
        // {"key": ["user"]} (Go, JavaScript) compares the `user` field of the args.
        let p = UniquePolicy::from_json(&json!({"key": ["user"], "period_ms": 3000}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(p.keys.contains(&"args".to_owned()));
        assert_eq!(p.period, Some(std::time::Duration::from_millis(3000)));
        let a = spec(json!({"type": "x", "args": [{"user": 1, "n": 1}]}));
        let b = spec(json!({"type": "x", "args": [{"user": 1, "n": 2}]}));
        let c = spec(json!({"type": "x", "args": [{"user": 2, "n": 1}]}));
        assert_eq!(p.fingerprint(&a), p.fingerprint(&b));
        assert_ne!(p.fingerprint(&a), p.fingerprint(&c));
        // Dimension names keep their meaning.
        let d = UniquePolicy::from_json(&json!({"key": ["type", "queue"]}))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(d.keys.contains(&"queue".to_owned()) && !d.keys.contains(&"args".to_owned()));
        // A bad policy is invalid_request (ojs-unique-jobs §2.2).
        let e = UniquePolicy::from_json(&json!({"on_conflict": "merge"}))
            .err()
            .map(|e| e.code);
        assert_eq!(e, Some(ErrorCode::InvalidRequest));
        assert!(UniquePolicy::from_json(&json!({"period": "P400D"})).is_err());
    }
}
