//! A JSON job envelope <-> `JobEnvelope`, losslessly (see the crate docs for the rules).

use std::collections::BTreeMap;

use prost::Message;
use prost_types::Timestamp;
use serde_json::{Map, Number, Value};

use crate::v1::{JobEnvelope, JobError, JobState, RetryPolicy, UniquePolicy};
use crate::{time, value, wire, ProtoError};

/// The JSON member that carries the Protobuf fields this schema does not know, as
/// base64url (no padding) of their exact wire bytes: a member of the envelope for its
/// own fields, of `retry`, `unique` or `error` for that message's.
pub const UNKNOWN_FIELDS_KEY: &str = "x-ojs-proto-unknown-fields";

/// The JSON names of `JobEnvelope`'s typed fields. An `extensions` entry under one of
/// these names carries what the typed field could not (see the crate docs).
pub const TYPED_FIELDS: [&str; 26] = [
    "specversion",
    "id",
    "type",
    "queue",
    "args",
    "meta",
    "priority",
    "timeout",
    "scheduled_at",
    "expires_at",
    "retry",
    "unique",
    "schema",
    "state",
    "attempt",
    "created_at",
    "enqueued_at",
    "started_at",
    "completed_at",
    "error",
    "result",
    "total_timeout",
    "enqueue_ttl",
    "grace_period",
    "heartbeat_timeout",
    "result_ttl",
];

/// The `extensions` key a JSON member travels under. Spec 8.2 asks for `x-{vendor}-{name}`
/// keys, so a member not already named so (the server's own `timeout_ms`, the members a
/// typed field carries, such as `retry`, a producer's `x_custom`) is prefixed `x-ojs-`,
/// and so is one already starting with `x-ojs-`, which makes [`json_name`] its exact
/// inverse. Another vendor's `x-acme-gpu-tier` keeps its name.
pub fn extension_key(json_name: &str) -> String {
    let other_vendor = json_name
        .strip_prefix("x-")
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(vendor, name)| !vendor.is_empty() && !name.is_empty() && vendor != "ojs");
    if other_vendor {
        json_name.to_owned()
    } else {
        format!("{OWN_PREFIX}{json_name}")
    }
}

/// The JSON member an `extensions` key names: [`extension_key`] undone. A key without
/// the `x-ojs-` prefix (another vendor's, or an older client's bare `timeout_ms`) names
/// the member of its own name.
pub fn json_name(key: &str) -> &str {
    key.strip_prefix(OWN_PREFIX).unwrap_or(key)
}

/// The prefix of the server's own `extensions` keys (spec 8.2's `x-{vendor}-`).
const OWN_PREFIX: &str = "x-ojs-";

/// Field number of `JobEnvelope.state`.
const STATE_FIELD: u32 = 14;

fn is_known_field(number: u32) -> bool {
    matches!(number, 1..=21 | 100..=104 | 200)
}

/// A submessage of `JobEnvelope` whose unknown fields are kept like the envelope's own
/// (spec 9.2 asks for all of them; prost keeps none, so they are split off by hand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nested {
    Retry,
    Unique,
    Error,
}

impl Nested {
    /// In field-number order, the order [`Envelope::encode`] writes them in.
    const ALL: [Self; 3] = [Self::Retry, Self::Unique, Self::Error];

    /// Its field number in `JobEnvelope`.
    fn field(self) -> u32 {
        match self {
            Self::Retry => 11,
            Self::Unique => 12,
            Self::Error => 20,
        }
    }

    fn of_field(number: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|n| n.field() == number)
    }

    /// Its JSON member.
    fn name(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Unique => "unique",
            Self::Error => "error",
        }
    }

    fn message_name(self) -> &'static str {
        match self {
            Self::Retry => "RetryPolicy",
            Self::Unique => "UniquePolicy",
            Self::Error => "JobError",
        }
    }

    /// Whether its own schema knows field `number`: each numbers its fields from 1
    /// without gaps (RetryPolicy 1-7, UniquePolicy 1-3, JobError 1-6).
    fn knows(self, number: u32) -> bool {
        let last = match self {
            Self::Retry => 7,
            Self::Unique => 3,
            Self::Error => 6,
        };
        (1..=last).contains(&number)
    }
}

/// A job envelope as the generated message plus the fields the generated messages do
/// not know, top-level and inside `retry`, `unique` and `error` (spec 9.2 requires
/// keeping them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Envelope {
    /// The fields this schema knows.
    pub message: JobEnvelope,
    /// Unknown top-level fields, exactly as they were on the wire, in wire order.
    pub unknown_fields: Vec<u8>,
    /// Unknown fields of `message.retry` (a `RetryPolicy`), as they were on the wire, in
    /// wire order. Encoded inside the `retry` field, which is then written even if
    /// `message.retry` is `None`.
    pub retry_unknown_fields: Vec<u8>,
    /// Unknown fields of `message.unique` (a `UniquePolicy`), likewise.
    pub unique_unknown_fields: Vec<u8>,
    /// Unknown fields of `message.error` (a `JobError`), likewise.
    pub error_unknown_fields: Vec<u8>,
}

impl From<JobEnvelope> for Envelope {
    fn from(message: JobEnvelope) -> Self {
        Self {
            message,
            ..Self::default()
        }
    }
}

impl Envelope {
    /// Decodes one `JobEnvelope`, keeping its unknown fields and those of its `retry`,
    /// `unique` and `error`.
    pub fn decode(bytes: &[u8]) -> Result<Self, ProtoError> {
        let fields = wire::split_fields(bytes).map_err(|r| ProtoError::decode("JobEnvelope", r))?;
        let message =
            JobEnvelope::decode(bytes).map_err(|e| ProtoError::decode("JobEnvelope", e))?;
        let mut envelope = Self::from(message);
        for field in &fields {
            if !is_known_field(field.number) {
                envelope.unknown_fields.extend_from_slice(field.raw);
                continue;
            }
            // prost has checked that the field is length-delimited. A submessage may
            // occur more than once (the occurrences merge): every occurrence's unknown
            // fields are kept, in wire order.
            let Some(nested) = Nested::of_field(field.number) else {
                continue;
            };
            let inner = wire::split_fields(field.payload).map_err(|r| {
                ProtoError::decode(
                    "JobEnvelope",
                    format!("{} (field {}): {r}", nested.name(), nested.field()),
                )
            })?;
            let unknown = envelope.nested_unknown_mut(nested);
            for f in inner.iter().filter(|f| !nested.knows(f.number)) {
                unknown.extend_from_slice(f.raw);
            }
        }
        Ok(envelope)
    }

    /// Encodes the envelope: the known fields in field-number order, the submessages
    /// with their unknown fields after their known ones, then the top-level unknown
    /// fields.
    pub fn encode(&self) -> Vec<u8> {
        let nested: Vec<Nested> = Nested::ALL
            .into_iter()
            .filter(|n| !self.nested_unknown(*n).is_empty())
            .collect();
        let mut out = if nested.is_empty() {
            self.message.encode_to_vec()
        } else {
            self.encode_with_nested_unknown(&nested)
        };
        out.extend_from_slice(&self.unknown_fields);
        out
    }

    /// The known fields, with the submessages `nested` written by hand: prost cannot put
    /// unknown fields inside them.
    fn encode_with_nested_unknown(&self, nested: &[Nested]) -> Vec<u8> {
        let mut rest = self.message.clone();
        let mut written = Vec::new();
        for &n in nested {
            let mut payload = match n {
                Nested::Retry => rest.retry.take().unwrap_or_default().encode_to_vec(),
                Nested::Unique => rest.unique.take().unwrap_or_default().encode_to_vec(),
                Nested::Error => rest.error.take().unwrap_or_default().encode_to_vec(),
            };
            payload.extend_from_slice(self.nested_unknown(n));
            let mut field = Vec::new();
            wire::write_varint(u64::from(n.field() << 3 | 2), &mut field);
            wire::push_delimited(&payload, &mut field);
            written.push((n.field(), field));
        }
        insert_in_order(&rest.encode_to_vec(), written)
    }

    fn nested_unknown(&self, nested: Nested) -> &[u8] {
        match nested {
            Nested::Retry => &self.retry_unknown_fields,
            Nested::Unique => &self.unique_unknown_fields,
            Nested::Error => &self.error_unknown_fields,
        }
    }

    fn nested_unknown_mut(&mut self, nested: Nested) -> &mut Vec<u8> {
        match nested {
            Nested::Retry => &mut self.retry_unknown_fields,
            Nested::Unique => &mut self.unique_unknown_fields,
            Nested::Error => &mut self.error_unknown_fields,
        }
    }

    /// A submessage's JSON members with its unknown fields as [`UNKNOWN_FIELDS_KEY`];
    /// present when either is (as the encoding writes the field).
    fn with_nested_unknown(
        &self,
        nested: Nested,
        typed: Option<Map<String, Value>>,
    ) -> Option<Map<String, Value>> {
        let unknown = self.nested_unknown(nested);
        if unknown.is_empty() {
            return typed;
        }
        let mut members = typed.unwrap_or_default();
        members.insert(
            UNKNOWN_FIELDS_KEY.into(),
            wire::base64url_encode(unknown).into(),
        );
        Some(members)
    }

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
        let m = &mut envelope.message;
        let mut ext = BTreeMap::new();
        let mut blob = None;
        for (key, v) in members {
            let fits = match key.as_str() {
                "specversion" => fit_string(v, &mut m.specversion),
                "id" => fit_string(v, &mut m.id),
                "type" => fit_string(v, &mut m.r#type),
                "queue" => fit_string(v, &mut m.queue),
                "args" => match v {
                    Value::Array(items) => {
                        m.args = items.iter().map(value::to_proto).collect();
                        true
                    }
                    _ => false,
                },
                "meta" => match v {
                    Value::Object(o) if !o.is_empty() => {
                        m.meta = value::object_to_struct(o).fields;
                        true
                    }
                    _ => false,
                },
                "priority" => fit_i32(v, &mut m.priority),
                "timeout" => fit_i32(v, &mut m.timeout),
                "scheduled_at" => fit_time(v, &mut m.scheduled_at),
                "expires_at" => fit_time(v, &mut m.expires_at),
                "retry" => fit_object(
                    v,
                    Nested::Retry,
                    &mut m.retry,
                    &mut envelope.retry_unknown_fields,
                    &mut ext,
                    fit_retry_member,
                ),
                "unique" => fit_object(
                    v,
                    Nested::Unique,
                    &mut m.unique,
                    &mut envelope.unique_unknown_fields,
                    &mut ext,
                    fit_unique_member,
                ),
                "schema" => fit_string(v, &mut m.schema),
                "state" => match v.as_str().and_then(state_from_name) {
                    Some(s) => {
                        m.state = s as i32;
                        true
                    }
                    None => false,
                },
                "attempt" => fit_i32(v, &mut m.attempt),
                "created_at" => fit_time(v, &mut m.created_at),
                "enqueued_at" => fit_time(v, &mut m.enqueued_at),
                "started_at" => fit_time(v, &mut m.started_at),
                "completed_at" => fit_time(v, &mut m.completed_at),
                "error" => fit_object(
                    v,
                    Nested::Error,
                    &mut m.error,
                    &mut envelope.error_unknown_fields,
                    &mut ext,
                    fit_error_member,
                ),
                "result" => {
                    m.result = Some(value::to_proto(v));
                    true
                }
                "total_timeout" => fit_i32(v, &mut m.total_timeout),
                "enqueue_ttl" => fit_i32(v, &mut m.enqueue_ttl),
                "grace_period" => fit_i32(v, &mut m.grace_period),
                "heartbeat_timeout" => fit_i32(v, &mut m.heartbeat_timeout),
                "result_ttl" => fit_i32(v, &mut m.result_ttl),
                UNKNOWN_FIELDS_KEY => {
                    blob = Some(v);
                    true
                }
                _ => false,
            };
            if !fits {
                ext.insert(key.clone(), value::to_proto(v));
            }
        }
        if let Some(v) = blob {
            let state_set = m.state != 0;
            match unknown_blob(v, |f| is_unknown_top_level(f, state_set)) {
                Some(bytes) => envelope.unknown_fields = bytes,
                // Not ours after all: an ordinary unknown member.
                None => {
                    ext.insert(UNKNOWN_FIELDS_KEY.into(), value::to_proto(v));
                }
            }
        }
        m.extensions = ext
            .into_iter()
            .map(|(name, v)| (extension_key(&name), v))
            .collect();
        Ok(envelope)
    }

    /// The JSON job object of the envelope. Fails when a value has no JSON form (NaN,
    /// a `Value` without kind, a timestamp out of range) or when an `extensions` entry
    /// collides with a set typed field.
    pub fn to_json(&self) -> Result<Value, ProtoError> {
        let m = &self.message;
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
        let mut out = Out {
            map: Map::new(),
            ext,
        };
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
        out.put(
            "scheduled_at",
            time_json(m.scheduled_at.as_ref(), "scheduled_at")?,
        )?;
        out.put(
            "expires_at",
            time_json(m.expires_at.as_ref(), "expires_at")?,
        )?;
        let retry = m.retry.as_ref().map(retry_json).transpose()?;
        out.put_object("retry", self.with_nested_unknown(Nested::Retry, retry))?;
        let unique = m.unique.as_ref().map(unique_json);
        out.put_object("unique", self.with_nested_unknown(Nested::Unique, unique))?;
        out.put("schema", string_json(&m.schema))?;
        let state = JobState::try_from(m.state).ok().and_then(state_name);
        out.put("state", state.map(Value::from))?;
        out.put("attempt", m.attempt.map(Value::from))?;
        out.put(
            "created_at",
            time_json(m.created_at.as_ref(), "created_at")?,
        )?;
        out.put(
            "enqueued_at",
            time_json(m.enqueued_at.as_ref(), "enqueued_at")?,
        )?;
        out.put(
            "started_at",
            time_json(m.started_at.as_ref(), "started_at")?,
        )?;
        out.put(
            "completed_at",
            time_json(m.completed_at.as_ref(), "completed_at")?,
        )?;
        let error = m.error.as_ref().map(error_json);
        out.put_object("error", self.with_nested_unknown(Nested::Error, error))?;
        let result = m.result.as_ref().map(value::to_json).transpose();
        out.put("result", result.map_err(|e| e.within("result"))?)?;
        out.put("total_timeout", m.total_timeout.map(Value::from))?;
        out.put("enqueue_ttl", m.enqueue_ttl.map(Value::from))?;
        out.put("grace_period", m.grace_period.map(Value::from))?;
        out.put("heartbeat_timeout", m.heartbeat_timeout.map(Value::from))?;
        out.put("result_ttl", m.result_ttl.map(Value::from))?;

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
        let Out { mut map, ext } = out;
        for (key, v) in ext {
            let v = value::to_json(v).map_err(|e| e.within(&format!("extensions[{key:?}]")))?;
            map.insert(key.to_owned(), v);
        }
        Ok(Value::Object(map))
    }
}

impl TryFrom<&Value> for Envelope {
    type Error = ProtoError;

    fn try_from(json: &Value) -> Result<Self, ProtoError> {
        Self::from_json(json)
    }
}

impl TryFrom<&Envelope> for Value {
    type Error = ProtoError;

    fn try_from(envelope: &Envelope) -> Result<Self, ProtoError> {
        envelope.to_json()
    }
}

impl TryFrom<&JobEnvelope> for Value {
    type Error = ProtoError;

    fn try_from(message: &JobEnvelope) -> Result<Self, ProtoError> {
        Envelope::from(message.clone()).to_json()
    }
}

impl TryFrom<&Value> for JobEnvelope {
    type Error = ProtoError;

    /// Fails when the JSON carries unknown Protobuf fields, top-level or inside `retry`,
    /// `unique` or `error`, which `JobEnvelope` cannot hold: use [`Envelope`] to keep
    /// them.
    fn try_from(json: &Value) -> Result<Self, ProtoError> {
        let envelope = Envelope::from_json(json)?;
        if !envelope.unknown_fields.is_empty() {
            return Err(ProtoError::field(
                UNKNOWN_FIELDS_KEY,
                "JobEnvelope cannot hold unknown fields; convert to Envelope instead",
            ));
        }
        if let Some(n) = Nested::ALL
            .into_iter()
            .find(|n| !envelope.nested_unknown(*n).is_empty())
        {
            return Err(ProtoError::field(
                format!("{}.{UNKNOWN_FIELDS_KEY}", n.name()),
                format!(
                    "{} cannot hold unknown fields; convert to Envelope instead",
                    n.message_name()
                ),
            ));
        }
        Ok(envelope.message)
    }
}

/// The JSON object being built and the `extensions` entries not yet placed.
struct Out<'a> {
    map: Map<String, Value>,
    ext: BTreeMap<&'a str, &'a prost_types::Value>,
}

impl Out<'_> {
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

/// The bytes of an unknown-fields member: base64url text of one or more complete
/// fields, each of which `unknown` accepts. `None` for anything else, which is then an
/// ordinary member (a blob naming no field would not come back).
fn unknown_blob(v: &Value, unknown: impl Fn(&wire::RawField<'_>) -> bool) -> Option<Vec<u8>> {
    let bytes = wire::base64url_decode(v.as_str()?)?;
    let fields = wire::split_fields(&bytes).ok()?;
    (!fields.is_empty() && fields.iter().all(unknown)).then_some(bytes)
}

/// Whether a top-level field belongs in the envelope's unknown fields: one this schema
/// does not know, or a `state` (14) with an enum value it does not know (only when the
/// JSON set no state itself).
fn is_unknown_top_level(f: &wire::RawField<'_>, state_set: bool) -> bool {
    if !is_known_field(f.number) {
        return true;
    }
    f.number == STATE_FIELD
        && f.wire_type == 0
        && !state_set
        && wire::read_varint(f.payload).is_ok_and(|(v, _)| JobState::try_from(v as i32).is_err())
}

/// `known` (prost's encoding, its fields in number order) with each of `fields`
/// (number, encoded field; in number order) before the first known field of a higher
/// number, as a protobuf encoder writing them itself would place them.
fn insert_in_order(known: &[u8], fields: Vec<(u32, Vec<u8>)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(known.len() + fields.iter().map(|f| f.1.len()).sum::<usize>());
    let known_fields = match wire::split_fields(known) {
        Ok(known_fields) => known_fields,
        // Never for prost's own output; appending would still be valid protobuf.
        Err(_) => {
            out.extend_from_slice(known);
            Vec::new()
        }
    };
    let mut fields = fields.into_iter().peekable();
    for k in known_fields {
        while let Some((_, field)) = fields.next_if(|(number, _)| *number < k.number) {
            out.extend_from_slice(&field);
        }
        out.extend_from_slice(k.raw);
    }
    for (_, field) in fields {
        out.extend_from_slice(&field);
    }
    out
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

fn fit_i32(v: &Value, slot: &mut Option<i32>) -> bool {
    // as_i64 is None for a JSON double such as 5.0, which then travels as a Value.
    match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
        Some(n) => {
            *slot = Some(n);
            true
        }
        None => false,
    }
}

fn fit_time(v: &Value, slot: &mut Option<Timestamp>) -> bool {
    match v.as_str().and_then(time::parse) {
        Some(t) => {
            *slot = Some(t);
            true
        }
        None => false,
    }
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
        "jitter" => match v {
            Value::Bool(b) => {
                p.jitter = Some(*b);
                true
            }
            _ => false,
        },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::{JobError, RetryPolicy, UniquePolicy};

    /// [`Nested::knows`] names exactly the fields of the generated messages: each set
    /// in full encodes to exactly the numbers it claims to know.
    #[test]
    fn nested_schemas_know_the_generated_fields() -> Result<(), String> {
        let s = || "x".to_owned();
        let retry = RetryPolicy {
            max_attempts: Some(1),
            initial_interval: s(),
            backoff_coefficient: Some(1.5),
            max_interval: s(),
            jitter: Some(true),
            non_retryable_errors: vec![s()],
            on_exhaustion: s(),
        };
        let unique = UniquePolicy {
            keys: vec![s()],
            period: s(),
            on_conflict: s(),
        };
        let error = JobError {
            r#type: s(),
            message: s(),
            backtrace: s(),
            timeout_kind: s(),
            limit_seconds: Some(1),
            elapsed_seconds: Some(1),
        };
        for (nested, bytes) in [
            (Nested::Retry, retry.encode_to_vec()),
            (Nested::Unique, unique.encode_to_vec()),
            (Nested::Error, error.encode_to_vec()),
        ] {
            let numbers: Vec<u32> = wire::split_fields(&bytes)?
                .iter()
                .map(|f| f.number)
                .collect();
            let known: Vec<u32> = (0..64).filter(|n| nested.knows(*n)).collect();
            assert_eq!(numbers, known, "{nested:?}");
            assert_eq!(Nested::of_field(nested.field()), Some(nested));
        }
        for number in [0, 1, 10, 13, 19, 21, 200] {
            assert_eq!(Nested::of_field(number), None, "{number}");
        }
        Ok(())
    }
}
