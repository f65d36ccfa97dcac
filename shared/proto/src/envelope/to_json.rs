//! An [`Envelope`] into its JSON job object: each typed field as its member, the
//! `extensions` entries as the members they name (see the crate docs for the rules).

use std::collections::BTreeMap;

use prost_types::Timestamp;
use serde_json::{Map, Number, Value};

use super::{json_name, Envelope, Nested, STATE_FIELD, UNKNOWN_FIELDS_KEY};
use crate::v1::{JobEnvelope, JobError, JobState, RetryPolicy, UniquePolicy};
use crate::{time, value, wire, ProtoError};

impl Envelope {
    /// The JSON job object of the envelope. Fails when a value has no JSON form (NaN,
    /// a `Value` without kind, a timestamp out of range) or when an `extensions` entry
    /// collides with a set typed field.
    pub fn to_json(&self) -> Result<Value, ProtoError> {
        let mut out = Out::new(&self.message)?;
        // In field-number order, the order the members have always come in.
        self.put_job(&mut out)?;
        self.put_status(&mut out)?;
        self.put_unknown(&mut out)?;
        out.finish()
    }

    /// The fields a producer sets, `specversion` to `schema`.
    fn put_job(&self, out: &mut Out<'_>) -> Result<(), ProtoError> {
        let m = &self.message;
        out.put("specversion", string_json(&m.specversion))?;
        out.put("id", string_json(&m.id))?;
        out.put("type", string_json(&m.r#type))?;
        out.put("queue", string_json(&m.queue))?;
        let args = m
            .args
            .iter()
            .enumerate()
            .map(|(i, a)| value::to_json(a).map_err(|e| e.within(&format!("args[{i}]"))))
            .collect::<Result<Vec<_>, _>>()?;
        // args is required: an empty list is rendered unless extensions carries it.
        if args.is_empty() && out.ext.contains_key("args") {
            out.put("args", None)?;
        } else {
            out.put("args", Some(Value::Array(args)))?;
        }
        let meta = (!m.meta.is_empty())
            .then(|| value::struct_to_object(&m.meta).map_err(|e| e.within("meta")))
            .transpose()?;
        out.put("meta", meta.map(Value::Object))?;
        out.put("priority", m.priority.map(Value::from))?;
        out.put("timeout", m.timeout.map(Value::from))?;
        out.put_time("scheduled_at", m.scheduled_at.as_ref())?;
        out.put_time("expires_at", m.expires_at.as_ref())?;
        let retry = m.retry.as_ref().map(retry_json).transpose()?;
        out.put_object("retry", self.with_nested_unknown(Nested::Retry, retry))?;
        let unique = m.unique.as_ref().map(unique_json);
        out.put_object("unique", self.with_nested_unknown(Nested::Unique, unique))?;
        out.put("schema", string_json(&m.schema))?;
        Ok(())
    }

    /// The fields the server manages, `state` to `result_ttl`.
    fn put_status(&self, out: &mut Out<'_>) -> Result<(), ProtoError> {
        let m = &self.message;
        let state = JobState::try_from(m.state).ok().and_then(state_name);
        out.put("state", state.map(Value::from))?;
        out.put("attempt", m.attempt.map(Value::from))?;
        out.put_time("created_at", m.created_at.as_ref())?;
        out.put_time("enqueued_at", m.enqueued_at.as_ref())?;
        out.put_time("started_at", m.started_at.as_ref())?;
        out.put_time("completed_at", m.completed_at.as_ref())?;
        let error = m.error.as_ref().map(error_json);
        out.put_object("error", self.with_nested_unknown(Nested::Error, error))?;
        let result = m.result.as_ref().map(value::to_json).transpose();
        out.put("result", result.map_err(|e| e.within("result"))?)?;
        out.put("total_timeout", m.total_timeout.map(Value::from))?;
        out.put("enqueue_ttl", m.enqueue_ttl.map(Value::from))?;
        out.put("grace_period", m.grace_period.map(Value::from))?;
        out.put("heartbeat_timeout", m.heartbeat_timeout.map(Value::from))?;
        out.put("result_ttl", m.result_ttl.map(Value::from))?;
        Ok(())
    }

    /// The top-level unknown fields, and a `state` this schema does not name.
    fn put_unknown(&self, out: &mut Out<'_>) -> Result<(), ProtoError> {
        let m = &self.message;
        let mut blob = self.unknown_fields.clone();
        if m.state != 0 && JobState::try_from(m.state).is_err() {
            // A state from a newer schema has no JSON name: keep it as an unknown field.
            wire::write_varint(u64::from(STATE_FIELD << 3), &mut blob);
            wire::write_varint(i64::from(m.state) as u64, &mut blob);
        }
        if !blob.is_empty() {
            out.put(
                UNKNOWN_FIELDS_KEY,
                Some(wire::base64url_encode(&blob).into()),
            )?;
        }
        Ok(())
    }
}

/// The JSON object being built and the `extensions` entries not yet placed.
struct Out<'a> {
    map: Map<String, Value>,
    ext: BTreeMap<&'a str, &'a prost_types::Value>,
}

impl<'a> Out<'a> {
    /// The `extensions` of `m` by the member each names; two naming one member fail.
    fn new(m: &'a JobEnvelope) -> Result<Self, ProtoError> {
        let mut ext = BTreeMap::new();
        for (key, v) in &m.extensions {
            let name = json_name(key);
            if ext.insert(name, v).is_some() {
                return Err(ProtoError::field(
                    format!("extensions[{key:?}]"),
                    format!("names the member {name} a second time"),
                ));
            }
        }
        Ok(Self {
            map: Map::new(),
            ext,
        })
    }

    /// The object, with the `extensions` entries no typed field took as members.
    fn finish(self) -> Result<Value, ProtoError> {
        let Out { mut map, ext } = self;
        for (key, v) in ext {
            let v = value::to_json(v).map_err(|e| e.within(&format!("extensions[{key:?}]")))?;
            map.insert(key.to_owned(), v);
        }
        Ok(Value::Object(map))
    }

    /// Places timestamp field `name`.
    fn put_time(&mut self, name: &str, t: Option<&Timestamp>) -> Result<(), ProtoError> {
        self.put(name, time_json(t, name)?)
    }

    /// Places field `name`: its typed value, else what `extensions` carries for it.
    fn put(&mut self, name: &str, typed: Option<Value>) -> Result<(), ProtoError> {
        let v = match (typed, self.ext.remove(name)) {
            (Some(_), Some(_)) => return Err(collision(name)),
            (Some(v), None) => v,
            (None, Some(carried)) => {
                value::to_json(carried).map_err(|e| e.within(&format!("extensions[{name:?}]")))?
            }
            (None, None) => return Ok(()),
        };
        self.map.insert(name.to_owned(), v);
        Ok(())
    }

    /// Places an object field: its typed members plus the members `extensions` carries.
    fn put_object(
        &mut self,
        name: &str,
        typed: Option<Map<String, Value>>,
    ) -> Result<(), ProtoError> {
        let Some(mut members) = typed else {
            return self.put(name, None);
        };
        if let Some(carried) = self.ext.remove(name) {
            let Value::Object(rest) =
                value::to_json(carried).map_err(|e| e.within(&format!("extensions[{name:?}]")))?
            else {
                return Err(collision(name));
            };
            for (k, v) in rest {
                if members.contains_key(&k) {
                    return Err(collision(&format!("{name}.{k}")));
                }
                members.insert(k, v);
            }
        }
        self.map.insert(name.to_owned(), Value::Object(members));
        Ok(())
    }
}

fn collision(name: &str) -> ProtoError {
    ProtoError::field(
        format!("extensions[{name:?}]"),
        format!("duplicates the typed field {name}, which is set"),
    )
}

fn string_json(s: &str) -> Option<Value> {
    (!s.is_empty()).then(|| Value::String(s.to_owned()))
}

fn put_string(o: &mut Map<String, Value>, key: &str, s: &str) {
    if !s.is_empty() {
        o.insert(key.to_owned(), s.into());
    }
}

fn put_strings(o: &mut Map<String, Value>, key: &str, s: &[String]) {
    if !s.is_empty() {
        o.insert(key.to_owned(), s.into());
    }
}

fn time_json(t: Option<&Timestamp>, name: &str) -> Result<Option<Value>, ProtoError> {
    match t {
        None => Ok(None),
        Some(t) => Ok(time::format(t)
            .map_err(|e| e.within(name))?
            .map(Value::from)),
    }
}

fn retry_json(p: &RetryPolicy) -> Result<Map<String, Value>, ProtoError> {
    let mut o = Map::new();
    if let Some(n) = p.max_attempts {
        o.insert("max_attempts".into(), n.into());
    }
    put_string(&mut o, "initial_interval", &p.initial_interval);
    if let Some(f) = p.backoff_coefficient {
        // Always a JSON double, as it was sent.
        let n = Number::from_f64(f).ok_or_else(|| {
            ProtoError::field(
                "retry.backoff_coefficient",
                format!("{f} is not a JSON number"),
            )
        })?;
        o.insert("backoff_coefficient".into(), Value::Number(n));
    }
    put_string(&mut o, "max_interval", &p.max_interval);
    if let Some(b) = p.jitter {
        o.insert("jitter".into(), b.into());
    }
    put_strings(&mut o, "non_retryable_errors", &p.non_retryable_errors);
    put_string(&mut o, "on_exhaustion", &p.on_exhaustion);
    Ok(o)
}

fn unique_json(u: &UniquePolicy) -> Map<String, Value> {
    let mut o = Map::new();
    put_strings(&mut o, "keys", &u.keys);
    put_string(&mut o, "period", &u.period);
    put_string(&mut o, "on_conflict", &u.on_conflict);
    o
}

pub(crate) fn error_json(e: &JobError) -> Map<String, Value> {
    let mut o = Map::new();
    put_string(&mut o, "type", &e.r#type);
    put_string(&mut o, "message", &e.message);
    put_string(&mut o, "backtrace", &e.backtrace);
    put_string(&mut o, "timeout_kind", &e.timeout_kind);
    if let Some(n) = e.limit_seconds {
        o.insert("limit_seconds".into(), n.into());
    }
    if let Some(n) = e.elapsed_seconds {
        o.insert("elapsed_seconds".into(), n.into());
    }
    o
}

fn state_name(state: JobState) -> Option<&'static str> {
    Some(match state {
        JobState::Unspecified => return None,
        JobState::Scheduled => "scheduled",
        JobState::Available => "available",
        JobState::Pending => "pending",
        JobState::Active => "active",
        JobState::Completed => "completed",
        JobState::Retryable => "retryable",
        JobState::Cancelled => "cancelled",
        JobState::Discarded => "discarded",
    })
}
