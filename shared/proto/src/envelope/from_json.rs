//! A JSON job object into an [`Envelope`]: each member into its typed field when it
//! fits there exactly, else into `extensions` (see the crate docs for the rules).

use std::collections::BTreeMap;

use prost_types::Timestamp;
use serde_json::{Map, Value};

use super::{
    extension_key, is_unknown_top_level, unknown_blob, Envelope, Nested, UNKNOWN_FIELDS_KEY,
};
use crate::v1::{JobEnvelope, JobError, JobState, RetryPolicy, UniquePolicy};
use crate::{time, value, ProtoError};

impl Envelope {
    /// The envelope of a JSON job object. Fails only when `json` is not an object:
    /// whatever a typed field cannot hold exactly is carried in `extensions`.
    pub fn from_json(json: &Value) -> Result<Self, ProtoError> {
        let Value::Object(members) = json else {
            return Err(ProtoError::Shape {
                what: "the job envelope".into(),
                expected: "a JSON object",
            });
        };
        let mut envelope = Self::default();
        let mut ext = BTreeMap::new();
        let mut blob = None;
        for (key, v) in members {
            let fits = if key == UNKNOWN_FIELDS_KEY {
                blob = Some(v);
                true
            } else {
                envelope.fit_member(key, v, &mut ext)
            };
            if !fits {
                ext.insert(key.clone(), value::to_proto(v));
            }
        }
        if let Some(v) = blob {
            let state_set = envelope.message.state != 0;
            match unknown_blob(v, |f| is_unknown_top_level(f, state_set)) {
                Some(bytes) => envelope.unknown_fields = bytes,
                // Not ours after all: an ordinary unknown member.
                None => {
                    ext.insert(UNKNOWN_FIELDS_KEY.into(), value::to_proto(v));
                }
            }
        }
        envelope.message.extensions = ext
            .into_iter()
            .map(|(name, v)| (extension_key(&name), v))
            .collect();
        Ok(envelope)
    }

    /// Puts member `key` into its typed field when it fits there exactly; the members of
    /// `retry`, `unique` and `error` that do not fit go to `ext`.
    fn fit_member(
        &mut self,
        key: &str,
        v: &Value,
        ext: &mut BTreeMap<String, prost_types::Value>,
    ) -> bool {
        let m = &mut self.message;
        match key {
            "retry" => fit_object(
                v,
                Nested::Retry,
                &mut m.retry,
                &mut self.retry_unknown_fields,
                ext,
                fit_retry_member,
            ),
            "unique" => fit_object(
                v,
                Nested::Unique,
                &mut m.unique,
                &mut self.unique_unknown_fields,
                ext,
                fit_unique_member,
            ),
            "error" => fit_object(
                v,
                Nested::Error,
                &mut m.error,
                &mut self.error_unknown_fields,
                ext,
                fit_error_member,
            ),
            _ => fit_scalar(m, key, v),
        }
    }
}

/// The envelope's typed fields other than its submessages.
fn fit_scalar(m: &mut JobEnvelope, key: &str, v: &Value) -> bool {
    match key {
        "specversion" => fit_string(v, &mut m.specversion),
        "id" => fit_string(v, &mut m.id),
        "type" => fit_string(v, &mut m.r#type),
        "queue" => fit_string(v, &mut m.queue),
        "args" => fit(
            v.as_array()
                .map(|items| items.iter().map(value::to_proto).collect()),
            &mut m.args,
        ),
        "meta" => fit(
            v.as_object()
                .filter(|o| !o.is_empty())
                .map(|o| value::object_to_struct(o).fields),
            &mut m.meta,
        ),
        "priority" => fit_i32(v, &mut m.priority),
        "timeout" => fit_i32(v, &mut m.timeout),
        "scheduled_at" => fit_time(v, &mut m.scheduled_at),
        "expires_at" => fit_time(v, &mut m.expires_at),
        "schema" => fit_string(v, &mut m.schema),
        "state" => fit(
            v.as_str().and_then(state_from_name).map(|s| s as i32),
            &mut m.state,
        ),
        "attempt" => fit_i32(v, &mut m.attempt),
        "created_at" => fit_time(v, &mut m.created_at),
        "enqueued_at" => fit_time(v, &mut m.enqueued_at),
        "started_at" => fit_time(v, &mut m.started_at),
        "completed_at" => fit_time(v, &mut m.completed_at),
        "result" => {
            m.result = Some(value::to_proto(v));
            true
        }
        "total_timeout" => fit_i32(v, &mut m.total_timeout),
        "enqueue_ttl" => fit_i32(v, &mut m.enqueue_ttl),
        "grace_period" => fit_i32(v, &mut m.grace_period),
        "heartbeat_timeout" => fit_i32(v, &mut m.heartbeat_timeout),
        "result_ttl" => fit_i32(v, &mut m.result_ttl),
        _ => false,
    }
}

fn fit_string(v: &Value, slot: &mut String) -> bool {
    match v {
        // Spec 6.2: the empty string means "not set", so "" cannot be typed.
        Value::String(s) if !s.is_empty() => {
            slot.clone_from(s);
            true
        }
        _ => false,
    }
}

fn fit_strings(v: &Value, slot: &mut Vec<String>) -> bool {
    let Value::Array(items) = v else {
        return false;
    };
    // An empty repeated field is indistinguishable from an absent one.
    let strings: Option<Vec<String>> = items
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect();
    match strings {
        Some(s) if !s.is_empty() => {
            *slot = s;
            true
        }
        _ => false,
    }
}

/// Sets `slot` to what the member came to, when it came to something.
fn fit<T>(fitted: Option<T>, slot: &mut T) -> bool {
    match fitted {
        Some(v) => {
            *slot = v;
            true
        }
        None => false,
    }
}

fn fit_i32(v: &Value, slot: &mut Option<i32>) -> bool {
    // as_i64 is None for a JSON double such as 5.0, which then travels as a Value.
    fit(
        v.as_i64().and_then(|n| i32::try_from(n).ok()).map(Some),
        slot,
    )
}

fn fit_time(v: &Value, slot: &mut Option<Timestamp>) -> bool {
    fit(v.as_str().and_then(time::parse).map(Some), slot)
}

/// Puts an object's members that fit into `slot`'s message, its unknown-fields member
/// (when it holds fields unknown to that message) into `unknown`, and the others into
/// `extensions[nested.name()]`; a non-object does not fit at all.
fn fit_object<T: Default>(
    v: &Value,
    nested: Nested,
    slot: &mut Option<T>,
    unknown: &mut Vec<u8>,
    ext: &mut BTreeMap<String, prost_types::Value>,
    fit_member: fn(&str, &Value, &mut T) -> bool,
) -> bool {
    let Value::Object(members) = v else {
        return false;
    };
    let mut message = T::default();
    let mut rest = Map::new();
    for (k, member) in members {
        if k == UNKNOWN_FIELDS_KEY {
            if let Some(bytes) = unknown_blob(member, |f| !nested.knows(f.number)) {
                *unknown = bytes;
                continue;
            }
        }
        if !fit_member(k, member, &mut message) {
            rest.insert(k.clone(), member.clone());
        }
    }
    *slot = Some(message);
    if !rest.is_empty() {
        ext.insert(
            nested.name().to_owned(),
            value::to_proto(&Value::Object(rest)),
        );
    }
    true
}

fn fit_retry_member(key: &str, v: &Value, p: &mut RetryPolicy) -> bool {
    match key {
        "max_attempts" => fit_i32(v, &mut p.max_attempts),
        "initial_interval" => fit_string(v, &mut p.initial_interval),
        "backoff_coefficient" => match v {
            // A JSON integer (2) would come back as a double (2.0): it stays a Value.
            Value::Number(n) if n.is_f64() => {
                p.backoff_coefficient = n.as_f64();
                true
            }
            _ => false,
        },
        "max_interval" => fit_string(v, &mut p.max_interval),
        "jitter" => fit(v.as_bool().map(Some), &mut p.jitter),
        "non_retryable_errors" => fit_strings(v, &mut p.non_retryable_errors),
        "on_exhaustion" => fit_string(v, &mut p.on_exhaustion),
        _ => false,
    }
}

fn fit_unique_member(key: &str, v: &Value, u: &mut UniquePolicy) -> bool {
    match key {
        "keys" => fit_strings(v, &mut u.keys),
        "period" => fit_string(v, &mut u.period),
        "on_conflict" => fit_string(v, &mut u.on_conflict),
        _ => false,
    }
}

pub(crate) fn fit_error_member(key: &str, v: &Value, e: &mut JobError) -> bool {
    match key {
        "type" => fit_string(v, &mut e.r#type),
        "message" => fit_string(v, &mut e.message),
        "backtrace" => fit_string(v, &mut e.backtrace),
        "timeout_kind" => fit_string(v, &mut e.timeout_kind),
        "limit_seconds" => fit_i32(v, &mut e.limit_seconds),
        "elapsed_seconds" => fit_i32(v, &mut e.elapsed_seconds),
        _ => false,
    }
}

fn state_from_name(name: &str) -> Option<JobState> {
    Some(match name {
        "scheduled" => JobState::Scheduled,
        "available" => JobState::Available,
        "pending" => JobState::Pending,
        "active" => JobState::Active,
        "completed" => JobState::Completed,
        "retryable" => JobState::Retryable,
        "cancelled" => JobState::Cancelled,
        "discarded" => JobState::Discarded,
        _ => return None,
    })
}
