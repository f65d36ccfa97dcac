//! Property tests: JSON -> proto -> JSON and proto -> JSON -> proto over generated
//! envelopes, including members the typed fields cannot hold and unknown fields (top-level
//! and inside `retry`, `unique` and `error`).

use chrono::{DateTime, SecondsFormat};
use ojs_proto::v1::{JobEnvelope, JobError, RetryPolicy, UniquePolicy};
use ojs_proto::{json_to_proto, proto_to_json, Envelope, TYPED_FIELDS, UNKNOWN_FIELDS_KEY};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use prost_types::value::Kind;
use serde_json::{Map, Number, Value};

const MAX_SAFE: i64 = (1 << 53) - 1;
const MIN_SECONDS: i64 = -62_135_596_800;
const MAX_SECONDS: i64 = 253_402_300_799;

// ---------- JSON side: envelopes in canonical form ----------

/// Doubles whose canonical JSON form is a double (not an integral value in the safe
/// range, which is the same JSON number as an integer).
fn canonical_double() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        (-1e6f64..1e6),
        Just(-0.0),
        Just(9_007_199_254_740_992.0),
        Just(1e300),
    ]
    .prop_filter("finite, not a safe integer", |f| {
        f.is_finite()
            && !(f.fract() == 0.0
                && f.abs() <= MAX_SAFE as f64
                && !(*f == 0.0 && f.is_sign_negative()))
    })
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        vec(prop::sample::select(&b"abcxyz_.-0123456789"[..]), 0..12)
            .prop_map(|b| b.into_iter().map(char::from).collect()),
        vec(any::<char>(), 0..8).prop_map(String::from_iter),
        Just(String::new()),
        Just("9007199254740993".to_owned()),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => vec(prop::sample::select(&b"abcdefghijklmnopqrstuvwxyz_"[..]), 1..10)
            .prop_map(|b| b.into_iter().map(char::from).collect()),
        1 => vec(any::<char>(), 0..6).prop_map(String::from_iter),
        1 => prop::sample::select(&TYPED_FIELDS[..]).prop_map(str::to_owned),
    ]
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-MAX_SAFE..=MAX_SAFE).prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        canonical_double().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        text().prop_map(Value::String),
    ]
}

fn json_value() -> BoxedStrategy<Value> {
    json_leaf()
        .boxed()
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..4).prop_map(Value::Array),
                btree_map(key(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
        .boxed()
}

/// A canonical timestamp rendered by chrono the way the server renders it.
fn timestamp_text() -> impl Strategy<Value = String> {
    let nanos = prop_oneof![
        Just(0u32),
        (0u32..1000).prop_map(|ms| ms * 1_000_000),
        (0u32..1_000_000).prop_map(|us| us * 1000),
        0u32..1_000_000_000,
    ];
    (MIN_SECONDS..=MAX_SECONDS, nanos).prop_filter_map("not the epoch", |(s, n)| {
        if s == 0 && n == 0 {
            return None;
        }
        DateTime::from_timestamp(s, n).map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    })
}

fn string_member() -> impl Strategy<Value = Value> {
    prop_oneof![4 => text().prop_map(Value::String), 1 => json_leaf()]
}

fn int_member() -> impl Strategy<Value = Value> {
    prop_oneof![4 => any::<i32>().prop_map(Value::from), 1 => json_leaf()]
}

fn time_member() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => timestamp_text().prop_map(Value::String),
        1 => Just(Value::from("1970-01-01T00:00:00Z")),
        1 => Just(Value::from("+PT30S")),
        1 => json_leaf(),
    ]
}

fn strings_member() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => vec(text(), 0..3).prop_map(Value::from),
        1 => json_value(),
    ]
}

/// An unknown-fields member for a message whose schema knows fields 1 to `last_known`
/// (`None` for the envelope): mostly base64url of fields it does not know, else what is
/// not such a blob and stays an ordinary member (a blob naming a known field, mixed
/// ones, an empty blob, text that is not base64url, a non-string).
fn unknown_fields_member(last_known: Option<u64>) -> impl Strategy<Value = Value> {
    let unknown = match last_known {
        Some(last) => nested_unknown_fields(last).boxed(),
        None => unknown_fields().boxed(),
    };
    // At the top level up to 13: a state (14) the schema does not know is kept as an
    // unknown field, but re-encoded from its int32 value.
    let known = fields_numbered(1..=last_known.unwrap_or(13));
    prop_oneof![
        6 => unknown.clone().prop_filter("not empty", |b| !b.is_empty())
            .prop_map(|b| Value::from(base64url(&b))),
        1 => (known, unknown).prop_map(|(k, u)| Value::from(base64url(&[u, k].concat()))),
        1 => Just(Value::from("")),
        1 => Just(Value::from("CAE=")),
        1 => json_leaf(),
    ]
}

type Member = (&'static str, BoxedStrategy<Value>);

/// An object with some of `members` and maybe an unknown member, an unknown-fields member
/// for a schema knowing fields 1 to `last_known`, or a non-object.
fn object_member(members: Vec<Member>, last_known: u64) -> impl Strategy<Value = Value> {
    let fields: Vec<_> = members
        .into_iter()
        .map(|(name, s)| option::of(s).prop_map(move |v| v.map(|v| (name.to_owned(), v))))
        .collect();
    let object = (
        fields,
        option::of((key(), json_value())),
        option::of(unknown_fields_member(Some(last_known))),
    )
        .prop_map(|(fields, extra, blob)| {
            let mut o: Map<String, Value> = fields.into_iter().flatten().collect();
            if let Some((k, v)) = extra {
                o.entry(k).or_insert(v);
            }
            if let Some(blob) = blob {
                o.insert(UNKNOWN_FIELDS_KEY.into(), blob);
            }
            Value::Object(o)
        });
    prop_oneof![6 => object, 1 => json_leaf()]
}

fn retry_member() -> impl Strategy<Value = Value> {
    let backoff = prop_oneof![
        3 => any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
        1 => Just(serde_json::json!(2.0)),
        1 => int_member(),
    ];
    object_member(
        vec![
            ("max_attempts", int_member().boxed()),
            ("initial_interval", string_member().boxed()),
            ("backoff_coefficient", backoff.boxed()),
            ("max_interval", string_member().boxed()),
            ("jitter", json_leaf().boxed()),
            ("non_retryable_errors", strings_member().boxed()),
            ("on_exhaustion", string_member().boxed()),
        ],
        7,
    )
}

fn state_member() -> impl Strategy<Value = Value> {
    const NAMES: [&str; 9] = [
        "scheduled",
        "available",
        "pending",
        "active",
        "completed",
        "retryable",
        "cancelled",
        "discarded",
        "waiting",
    ];
    prop_oneof![4 => prop::sample::select(&NAMES[..]).prop_map(Value::from), 1 => json_leaf()]
}

fn canonical_envelope() -> impl Strategy<Value = Value> {
    let args = prop_oneof![8 => vec(json_value(), 0..5).prop_map(Value::Array), 1 => json_value()];
    let meta = prop_oneof![
        4 => btree_map(key(), json_value(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => json_value(),
    ];
    let core = (
        option::of(string_member()),
        option::of(string_member()),
        option::of(string_member()),
        option::of(string_member()),
        args,
        option::of(meta),
        option::of(int_member()),
        option::of(int_member()),
        option::of(time_member()),
        option::of(time_member()),
        option::of(retry_member()),
    )
        .boxed();
    let unique = object_member(
        vec![
            ("keys", strings_member().boxed()),
            ("period", string_member().boxed()),
            ("on_conflict", string_member().boxed()),
        ],
        3,
    );
    let error = object_member(
        vec![
            ("type", string_member().boxed()),
            ("message", string_member().boxed()),
            ("backtrace", string_member().boxed()),
            ("timeout_kind", string_member().boxed()),
            ("limit_seconds", int_member().boxed()),
            ("elapsed_seconds", int_member().boxed()),
        ],
        6,
    );
    let system = (
        option::of(unique),
        option::of(string_member()),
        option::of(state_member()),
        option::of(int_member()),
        vec(option::of(time_member()), 4),
        option::of(error),
        option::of(json_value()),
        vec(option::of(int_member()), 5),
        btree_map(key(), json_value(), 0..4),
        option::of(unknown_fields_member(None)),
    )
        .boxed();
    (core, system).prop_map(|(core, system)| {
        let mut o = Map::new();
        let mut put = |name: &str, v: Option<Value>| {
            if let Some(v) = v {
                o.insert(name.to_owned(), v);
            }
        };
        let (
            specversion,
            id,
            kind,
            queue,
            args,
            meta,
            priority,
            timeout,
            scheduled,
            expires,
            retry,
        ) = core;
        put("specversion", specversion);
        put("id", id);
        put("type", kind);
        put("queue", queue);
        put("args", Some(args));
        put("meta", meta);
        put("priority", priority);
        put("timeout", timeout);
        put("scheduled_at", scheduled);
        put("expires_at", expires);
        put("retry", retry);
        let (unique, schema, state, attempt, stamps, error, result, known_ext, extra, blob) =
            system;
        put("unique", unique);
        put("schema", schema);
        put("state", state);
        put("attempt", attempt);
        for (name, v) in ["created_at", "enqueued_at", "started_at", "completed_at"]
            .into_iter()
            .zip(stamps)
        {
            put(name, v);
        }
        put("error", error);
        put("result", result);
        let ext_names = [
            "total_timeout",
            "enqueue_ttl",
            "grace_period",
            "heartbeat_timeout",
            "result_ttl",
        ];
        for (name, v) in ext_names.into_iter().zip(known_ext) {
            put(name, v);
        }
        put(UNKNOWN_FIELDS_KEY, blob);
        for (k, v) in extra {
            if !TYPED_FIELDS.contains(&k.as_str()) && k != UNKNOWN_FIELDS_KEY {
                o.insert(k, v);
            }
        }
        Value::Object(o)
    })
}

// ---------- proto side: envelopes as json_to_proto produces them ----------

fn proto_value() -> impl Strategy<Value = prost_types::Value> {
    let leaf = prop_oneof![
        Just(Kind::NullValue(0)),
        any::<bool>().prop_map(Kind::BoolValue),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Kind::NumberValue),
        (-1000i32..1000).prop_map(|n| Kind::NumberValue(f64::from(n))),
        text().prop_map(Kind::StringValue),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(|values| Kind::ListValue(prost_types::ListValue {
                values: values
                    .into_iter()
                    .map(|k| prost_types::Value { kind: Some(k) })
                    .collect()
            })),
            btree_map(key(), inner, 0..4).prop_map(|fields| Kind::StructValue(
                prost_types::Struct {
                    fields: fields
                        .into_iter()
                        .map(|(k, v)| (k, prost_types::Value { kind: Some(v) }))
                        .collect()
                }
            )),
        ]
    })
    .prop_map(|k| prost_types::Value { kind: Some(k) })
}

fn proto_timestamp() -> impl Strategy<Value = Option<prost_types::Timestamp>> {
    option::of(
        (MIN_SECONDS..=MAX_SECONDS, 0i32..1_000_000_000)
            .prop_filter("not the epoch", |(s, n)| *s != 0 || *n != 0)
            .prop_map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
    )
}

/// An `extensions` key as `json_to_proto` writes them (spec 8.2's `x-{vendor}-{name}`).
fn extension_key() -> impl Strategy<Value = String> {
    key()
        .prop_filter("not a typed field", |k| {
            !TYPED_FIELDS.contains(&k.as_str()) && k != UNKNOWN_FIELDS_KEY
        })
        .prop_map(|k| ojs_proto::extension_key(&k))
}

/// Top-level fields with numbers this schema does not know.
fn unknown_fields() -> impl Strategy<Value = Vec<u8>> {
    vec(
        fields_numbered(prop_oneof![22u64..100, 105u64..200, 201u64..100_000]),
        0..3,
    )
    .prop_map(|fields| fields.concat())
}

/// Fields of a submessage whose schema knows fields 1 to `last_known`, with numbers it
/// does not know, up to the largest valid one.
fn nested_unknown_fields(last_known: u64) -> impl Strategy<Value = Vec<u8>> {
    let number = prop_oneof![
        4 => last_known + 1..40,
        2 => 40u64..100_000,
        1 => Just((1u64 << 29) - 1),
    ];
    vec(fields_numbered(number), 0..3).prop_map(|fields| fields.concat())
}

/// One field numbered by `number`, of any wire type: varint, fixed64, length-delimited,
/// a group (holding a varint and a length-delimited field) or fixed32.
fn fields_numbered(number: impl Strategy<Value = u64>) -> impl Strategy<Value = Vec<u8>> {
    (number, 0u8..5, vec(any::<u8>(), 0..12), any::<u64>()).prop_map(
        |(number, kind, bytes, varint)| {
            let delimited = |bytes: Vec<u8>| [encode_varint(bytes.len() as u64), bytes].concat();
            let (wire_type, payload): (u64, Vec<u8>) = match kind {
                0 => (0, encode_varint(varint)),
                1 => (1, varint.to_le_bytes().to_vec()),
                2 => (2, delimited(bytes)),
                3 => {
                    let inner = [
                        vec![0x08],
                        encode_varint(varint),
                        vec![0x12],
                        delimited(bytes),
                        encode_varint(number << 3 | 4),
                    ];
                    (3, inner.concat())
                }
                _ => (5, (varint as u32).to_le_bytes().to_vec()),
            };
            [encode_varint(number << 3 | wire_type), payload].concat()
        },
    )
}

/// base64url without padding, written independently of the crate's.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits: Vec<bool> = bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1 == 1))
        .collect();
    bits.chunks(6)
        .map(|six| {
            let n = (0..6).fold(0, |n, i| n << 1 | usize::from(six.get(i) == Some(&true)));
            char::from(ALPHABET[n])
        })
        .collect()
}

fn encode_varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A strategy for the struct `$name`: each field drawn from the strategy written beside it.
macro_rules! struct_of {
    ($name:ident { $($field:ident: $strategy:expr),+ $(,)? }) => {
        ($($strategy,)+).prop_map(|($($field,)+)| $name { $($field),+ })
    };
}

fn proto_envelope() -> impl Strategy<Value = Envelope> {
    let retry = struct_of!(RetryPolicy {
        max_attempts: option::of(any::<i32>()),
        initial_interval: text(),
        backoff_coefficient: option::of(any::<f64>().prop_filter("finite", |f| f.is_finite())),
        max_interval: text(),
        jitter: option::of(any::<bool>()),
        non_retryable_errors: vec(text(), 0..3),
        on_exhaustion: text(),
    });
    let unique = struct_of!(UniquePolicy {
        keys: vec(text(), 0..3),
        period: text(),
        on_conflict: text(),
    });
    let error = struct_of!(JobError {
        r#type: text(),
        message: text(),
        backtrace: text(),
        timeout_kind: text(),
        limit_seconds: option::of(any::<i32>()),
        elapsed_seconds: option::of(any::<i32>()),
    });
    // Unknown fields only inside a submessage that is there: JSON can only send them so.
    let core = (
        (text(), text(), text(), text()),
        vec(proto_value(), 0..5),
        btree_map(key(), proto_value(), 0..3),
        (option::of(any::<i32>()), option::of(any::<i32>())),
        (proto_timestamp(), proto_timestamp()),
        option::of((retry, nested_unknown_fields(7))),
        option::of((unique, nested_unknown_fields(3))),
        text(),
    )
        .boxed();
    let system = (
        prop_oneof![8 => 0i32..=8, 1 => any::<i32>()],
        option::of(any::<i32>()),
        vec(proto_timestamp(), 4),
        option::of((error, nested_unknown_fields(6))),
        option::of(proto_value()),
        vec(option::of(any::<i32>()), 5),
        btree_map(extension_key(), proto_value(), 0..3),
        unknown_fields(),
    )
        .boxed();
    (core, system).prop_map(|(core, system)| {
        let (
            (specversion, id, kind, queue),
            args,
            meta,
            (priority, timeout),
            (scheduled_at, expires_at),
            retry,
            unique,
            schema,
        ) = core;
        let (state, attempt, stamps, error, result, known_ext, extensions, unknown) = system;
        let [created_at, enqueued_at, started_at, completed_at]: [Option<prost_types::Timestamp>;
            4] = stamps.try_into().unwrap_or_default();
        let [total_timeout, enqueue_ttl, grace_period, heartbeat_timeout, result_ttl]: [Option<i32>;
            5] = known_ext.try_into().unwrap_or_default();
        let (retry, retry_unknown_fields) = retry.unzip();
        let (unique, unique_unknown_fields) = unique.unzip();
        let (error, error_unknown_fields) = error.unzip();
        Envelope {
            message: JobEnvelope {
                specversion,
                id,
                r#type: kind,
                queue,
                args,
                meta,
                priority,
                timeout,
                scheduled_at,
                expires_at,
                retry,
                unique,
                schema,
                state,
                attempt,
                created_at,
                enqueued_at,
                started_at,
                completed_at,
                error,
                result,
                total_timeout,
                enqueue_ttl,
                grace_period,
                heartbeat_timeout,
                result_ttl,
                extensions,
            },
            unknown_fields: unknown,
            retry_unknown_fields: retry_unknown_fields.unwrap_or_default(),
            unique_unknown_fields: unique_unknown_fields.unwrap_or_default(),
            error_unknown_fields: error_unknown_fields.unwrap_or_default(),
        }
    })
}

proptest! {
    // The main property: 10,000 cases.
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// JSON -> proto -> JSON is the identity on canonical envelopes, and converting
    /// again gives the same bytes.
    #[test]
    fn json_proto_json_is_lossless(job in canonical_envelope()) {
        let bytes = json_to_proto(&job).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = proto_to_json(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &job);
        let again = json_to_proto(&back).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again, bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    /// proto -> JSON -> proto gives the same envelope, unknown fields included, and the
    /// same bytes (a state from a newer schema moves after the known fields).
    #[test]
    fn proto_json_proto_is_lossless(envelope in proto_envelope()) {
        let bytes = envelope.encode();
        let json = proto_to_json(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = json_to_proto(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let decoded = Envelope::decode(&back).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let original = Envelope::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&decoded, &original);
        if (0..=8).contains(&envelope.message.state) {
            prop_assert_eq!(back, bytes);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Any JSON object at all (numbers and timestamps in any form) converts, and its
    /// JSON form is a fixed point: converting that again changes nothing.
    #[test]
    fn any_json_object_reaches_a_fixed_point(
        members in btree_map(key(), json_value(), 0..8),
        doubles in vec(any::<f64>(), 0..3),
        big in any::<u64>(),
    ) {
        let mut o: Map<String, Value> = members.into_iter().collect();
        let mut extra: Vec<Value> = doubles.into_iter().filter_map(Number::from_f64).map(Value::Number).collect();
        extra.push(Value::from(big));
        extra.push(Value::from(3.0));
        o.insert("args".into(), Value::Array(extra));
        o.insert("created_at".into(), Value::from("2025-06-01T11:00:00.000+02:00"));
        let job = Value::Object(o);
        let once = proto_to_json(&json_to_proto(&job).map_err(|e| TestCaseError::fail(e.to_string()))?)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let twice = proto_to_json(&json_to_proto(&once).map_err(|e| TestCaseError::fail(e.to_string()))?)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(twice, once);
    }
}
