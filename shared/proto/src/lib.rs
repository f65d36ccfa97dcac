//! The OJS Protobuf wire format (`application/openjobspec+proto`, package
//! `openjobspec.v1`): the generated message types and a lossless conversion between
//! them and the JSON job envelope the server renders and accepts.
//!
//! The `.proto` sources are in `proto/openjobspec/v1/` at the repository root, written
//! from the normative "Protobuf Wire Format Encoding" 1.0.0-rc.1 (field numbers 1-21
//! core, 100-104 known extensions, the `extensions` map at 200). `build.rs` compiles
//! them with protox (a Rust protobuf compiler) and prost-build: no system `protoc`.
//!
//! # API
//!
//! - One envelope: [`json_to_proto`], [`proto_to_json`]; [`Envelope`] when the
//!   generated message and its unknown fields are wanted (`TryFrom` both ways).
//! - Batches: [`batch_request_to_json`] / [`json_to_batch_request`],
//!   [`json_to_batch_response`] / [`batch_response_to_json`].
//! - Delimited streams (`application/openjobspec+proto; delimited=true`):
//!   [`decode_delimited_jobs`] / [`encode_delimited_jobs`].
//!
//! # Representation decisions
//!
//! The guarantee: for every JSON object `j`, `proto_to_json(json_to_proto(j))` equals
//! `j` up to the canonical forms listed here (numbers and timestamps; `args` always
//! present), and for every envelope in the form `json_to_proto` produces,
//! `json_to_proto(proto_to_json(p)) == p` byte for byte. Both are property-tested.
//!
//! 1. **Typed when exact, carried otherwise.** A known member goes into its typed field
//!    only when the typed field gives back exactly the same JSON. Otherwise it travels
//!    verbatim as a `google.protobuf.Value` in `extensions` under its JSON name
//!    prefixed `x-ojs-` (see 3; `"priority": "high"`, `"scheduled_at": "+PT30S"`, `"meta": {}`, `"id": ""`).
//!    For the object fields `retry`, `unique` and `error` this is per member: the
//!    typed message holds the members it can, and `extensions["x-ojs-retry"]` (etc.) holds an
//!    object with the others (`backoff_strategy`, `non_retryable_errors: []`, an
//!    error's `retryable`/`details`/`occurred_at`...). Decoding merges them back; an
//!    `extensions` entry that collides with a set typed field (or member) is an error.
//! 2. **Presence** (spec 6.2). Integer, double and bool fields are declared `optional`
//!    (explicit presence, wire-compatible with the spec's schema), so `priority: 0` and
//!    no priority stay distinct. An empty string is "not set", so a JSON `""` is
//!    carried in `extensions`; an empty `meta` map or empty `keys` list likewise. A
//!    zero `Timestamp` (the epoch) is "not set": a JSON timestamp at the epoch is
//!    carried as its string. `args` is required: an envelope without it comes back
//!    with `"args": []`. `result: null` is kept (a `Value` with `null_value`).
//! 3. **Unknown JSON members** (including `x-{vendor}-{name}` custom extensions and the
//!    server's own members the schema has no field for, such as `timeout_ms`, `tags`,
//!    `max_attempts`, `errors`) go into the `extensions` map: spec 8.2 names that map for
//!    custom extensions, keyed `x-{vendor}-{name}`, and the JSON format requires unknown
//!    members to survive (ojs-json-format 14.3). A member already named `x-{vendor}-...`
//!    keeps its name; any other travels as `x-ojs-{name}` (`x-ojs-timeout_ms`), and so
//!    does one named `x-ojs-...` itself, so that every name comes back exactly
//!    ([`extension_key`], [`json_name`]). A key without the prefix names its member.
//! 4. **Unknown Protobuf fields** (spec 9.2): fields whose numbers this schema does not
//!    know are kept as raw bytes, top-level ones ([`Envelope::unknown_fields`]) and
//!    those inside `retry`, `unique` and `error` ([`Envelope::retry_unknown_fields`]
//!    etc.; prost keeps none, so they are split off by hand). In JSON they are the
//!    member [`UNKNOWN_FIELDS_KEY`] (`x-ojs-proto-unknown-fields`) of the envelope or of
//!    that object: the base64url text (no padding, the JSON format's binary encoding)
//!    of their exact wire bytes. Converting back appends them after the known fields of
//!    their message (a submessage stays in its field-number place). A submessage sent
//!    more than once (the occurrences merge) keeps every occurrence's unknown fields, in
//!    order, and comes back as one. A `state` enum value this schema does not know is
//!    kept the same way. A member of that name that is not such a blob (not base64url,
//!    empty, naming a field its message knows) is an ordinary member (see 3). A bare
//!    `JobEnvelope` cannot hold unknown fields: `JobEnvelope::try_from(&json)` fails on
//!    any, nested ones included. Unknown fields inside the well-known types are dropped,
//!    and so are those of a `BatchEnqueueRequest` itself and of a `BatchEnqueueResponse`.
//! 5. **Numbers** in `args`, `meta`, `result` and `extensions` are
//!    `google.protobuf.Value` doubles (spec 10.1). Integers within +-(2^53 - 1) are exact
//!    and come back as JSON integers. Integers beyond that cannot be doubles without
//!    loss, and the JSON format says they MUST be strings (ojs-json-format 4.2, 13.4):
//!    they are carried as their exact decimal string (`string_value`) and come back as
//!    that string, the JSON format's required form. A double with an integral value in
//!    the safe range comes back as a JSON integer (`3.0` -> `3`, the same JSON number);
//!    other doubles (fractions, `-0.0`, `1e300`) come back as doubles. NaN and
//!    infinities have no JSON form and fail the conversion to JSON.
//!    `retry.backoff_coefficient` is a typed double only when the JSON sent a double
//!    (`2.0`); an integer `2` is carried in `extensions["x-ojs-retry"]`.
//! 6. **Timestamps**: RFC 3339 with a zone (`Z`, `+hh:mm`) and up to 9 fraction digits
//!    become `google.protobuf.Timestamp`; they come back in UTC with `Z` and as many
//!    fraction digits as needed (0, 3, 6 or 9), the server's own rendering, so
//!    microseconds are exact. A string that is not such a timestamp (no zone, `+PT30S`,
//!    a leap second) is carried verbatim. A `Timestamp` with nanos outside
//!    0..999,999,999 or seconds outside years 0001-9999 fails the conversion to JSON.
//! 7. **Enums**: `state` uses the JSON names (`available`, ...) and `JOB_STATE_*` on the
//!    wire; `JOB_STATE_UNSPECIFIED` means no state.
//! 8. **Object member order** is not kept (JSON objects are unordered); maps encode in
//!    key order, so equal envelopes encode to equal bytes.
//! 9. **Delimited streams** use the standard Protobuf delimited framing: each message
//!    is preceded by its length as a varint (what `writeDelimitedTo` and
//!    `protodelim` produce). The spec's figure says "4-byte length" but its text names
//!    the standard format; the varint form is the one protobuf libraries read.

mod batch;
mod envelope;
mod error;
mod time;
mod value;
mod wire;

/// The generated `openjobspec.v1` types.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/openjobspec.v1.rs"));
}

pub use batch::{
    batch_request_to_json, batch_response_to_json, decode_delimited_jobs, encode_delimited_jobs,
    json_to_batch_request, json_to_batch_response,
};
pub use envelope::{extension_key, json_name, Envelope, TYPED_FIELDS, UNKNOWN_FIELDS_KEY};
pub use error::ProtoError;
pub use v1::{BatchEnqueueRequest, BatchEnqueueResponse, BatchResult, JobEnvelope, JobState};

/// The media type of a Protobuf job envelope.
pub const MEDIA_TYPE: &str = "application/openjobspec+proto";

/// Encodes one JSON job object as a `JobEnvelope`.
pub fn json_to_proto(job: &serde_json::Value) -> Result<Vec<u8>, ProtoError> {
    Ok(Envelope::from_json(job)?.encode())
}

/// Decodes one `JobEnvelope` as a JSON job object.
pub fn proto_to_json(bytes: &[u8]) -> Result<serde_json::Value, ProtoError> {
    Envelope::decode(bytes)?.to_json()
}
