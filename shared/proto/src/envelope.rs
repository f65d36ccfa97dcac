//! A JSON job envelope <-> `JobEnvelope`, losslessly (see the crate docs for the rules).

use prost::Message;
use serde_json::{Map, Value};

use crate::v1::{JobEnvelope, JobState};
use crate::{wire, ProtoError};

mod from_json;
mod to_json;

pub(crate) use from_json::fit_error_member;
pub(crate) use to_json::error_json;

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
