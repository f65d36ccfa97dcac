//! The spec's example envelopes, the canonical forms, unknown fields, batches, and
//! garbage input.

mod common;

use anyhow::{anyhow, Result};
use ojs_proto::v1::{JobEnvelope, JobError, JobState, RetryPolicy, UniquePolicy};
use ojs_proto::{
    batch_request_to_json, batch_response_to_json, decode_delimited_jobs, encode_delimited_jobs,
    json_to_batch_request, json_to_batch_response, json_to_proto, proto_to_json, Envelope,
    ProtoError, UNKNOWN_FIELDS_KEY,
};
use prost::Message;
use prost_types::value::Kind;
use serde_json::{json, Value};

fn round_trip(v: &Value) -> Result<Value> {
    Ok(proto_to_json(&json_to_proto(v)?)?)
}

/// Why `proto_to_json` refuses `m`'s bytes, if it does.
fn json_error(m: &JobEnvelope) -> Option<String> {
    proto_to_json(&m.encode_to_vec())
        .err()
        .map(|e| e.to_string())
}

fn string_value(s: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

/// A job of the spec's required fields: version 1.0, `id`, `type`, `queue` and string
/// `args`.
fn required_fields(id: &str, job_type: &str, queue: &str, args: &[&str]) -> JobEnvelope {
    JobEnvelope {
        specversion: "1.0".into(),
        id: id.into(),
        r#type: job_type.into(),
        queue: queue.into(),
        args: args.iter().map(|a| string_value(a)).collect(),
        ..Default::default()
    }
}

/// A retry policy setting only these two fields ("" leaves the interval unset).
fn retry_policy(max_attempts: Option<i32>, initial_interval: &str) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_interval: initial_interval.into(),
        ..Default::default()
    }
}

#[test]
fn every_example_round_trips_exactly() -> Result<()> {
    for (name, job) in common::all() {
        let bytes = json_to_proto(&job)?;
        assert_eq!(proto_to_json(&bytes)?, job, "{name}");
        assert_eq!(json_to_proto(&proto_to_json(&bytes)?)?, bytes, "{name}");
    }
    Ok(())
}

#[test]
fn spec_example_14_1_has_the_spec_field_numbers() -> Result<()> {
    let bytes = json_to_proto(&common::minimal())?;
    // specversion = 1 (tag 0x0a), id = 2 (0x12), type = 3 (0x1a), queue = 4 (0x22),
    // args = 5 (0x2a).
    assert_eq!(&bytes[..5], b"\x0a\x031.0");
    let expected = required_fields(
        "019539a4-b68c-7def-8000-1a2b3c4d5e6f",
        "email.send",
        "default",
        &["user@example.com", "welcome"],
    );
    assert_eq!(bytes, expected.encode_to_vec());
    Ok(())
}

#[test]
fn spec_example_14_2_matches_its_text_format() -> Result<()> {
    let expected = JobEnvelope {
        priority: Some(5),
        timeout: Some(3600),
        retry: Some(RetryPolicy {
            max_attempts: Some(3),
            initial_interval: "PT10S".into(),
            backoff_coefficient: Some(2.0),
            jitter: Some(true),
            on_exhaustion: "dead_letter".into(),
            ..Default::default()
        }),
        total_timeout: Some(86_400),
        grace_period: Some(60),
        ..required_fields(
            "019539a4-b68c-7def-8000-2b3c4d5e6f7a",
            "video.transcode",
            "media",
            &["video_001", "1080p"],
        )
    };
    let bytes = json_to_proto(&common::with_extensions())?;
    assert_eq!(JobEnvelope::decode(bytes.as_slice())?, expected);
    assert_eq!(bytes, expected.encode_to_vec());
    // Extension fields use two-byte tags: total_timeout = 100 -> 0xa0 0x06.
    assert!(bytes.windows(2).any(|w| w == [0xa0, 0x06]));
    Ok(())
}

#[test]
fn server_members_without_a_field_travel_in_extensions() -> Result<()> {
    let envelope = Envelope::from_json(&common::server_rendered())?;
    let m = &envelope.message;
    assert_eq!(m.state, JobState::Active as i32);
    assert_eq!(m.priority, Some(0));
    assert_eq!(m.attempt, Some(1));
    assert_eq!(
        m.created_at,
        Some(prost_types::Timestamp {
            seconds: 1_771_496_130,
            nanos: 123_456_000
        })
    );
    let keys: Vec<&str> = m.extensions.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "x-acme-gpu-tier",
            "x-ojs-max_attempts",
            "x-ojs-retry",
            "x-ojs-timeout_ms",
            "x-ojs-worker_id"
        ]
    );
    // The retry members the message cannot hold exactly, and only those.
    let carried = Value::try_from(&Envelope::from(JobEnvelope {
        extensions: m.extensions.clone(),
        ..Default::default()
    }))?;
    assert_eq!(
        carried["retry"],
        json!({"non_retryable_errors": [], "backoff_strategy": "exponential"})
    );
    assert_eq!(m.retry.as_ref().and_then(|r| r.max_attempts), Some(3));
    Ok(())
}

#[test]
fn canonical_forms() -> Result<()> {
    let cases = [
        // Timestamps come back in UTC with the digits they need.
        (
            json!({"args": [], "scheduled_at": "2025-06-01T11:00:00+02:00"}),
            json!({"args": [], "scheduled_at": "2025-06-01T09:00:00Z"}),
        ),
        (
            json!({"args": [], "created_at": "2025-06-01T09:00:00.000000Z"}),
            json!({"args": [], "created_at": "2025-06-01T09:00:00Z"}),
        ),
        (
            json!({"args": [], "created_at": "2025-06-01T09:00:00.120Z"}),
            json!({"args": [], "created_at": "2025-06-01T09:00:00.120Z"}),
        ),
        // Integral doubles are the same JSON numbers as integers.
        (
            json!({"args": [3.0, -7.0, 0.5]}),
            json!({"args": [3, -7, 0.5]}),
        ),
        // ...also where a typed integer field could not take the double.
        (
            json!({"args": [], "attempt": 5.0}),
            json!({"args": [], "attempt": 5}),
        ),
        // Integers beyond 2^53 - 1 take the JSON format's string form.
        (
            json!({"args": [9_007_199_254_740_992_u64, -9_007_199_254_740_993_i64, u64::MAX], "meta": {"big": 12_345_678_901_234_567_890_u64}}),
            json!({"args": ["9007199254740992", "-9007199254740993", "18446744073709551615"], "meta": {"big": "12345678901234567890"}}),
        ),
        // args is required: it is always rendered.
        (json!({"type": "a.b"}), json!({"type": "a.b", "args": []})),
    ];
    for (input, canonical) in cases {
        assert_eq!(round_trip(&input)?, canonical, "{input}");
        assert_eq!(round_trip(&canonical)?, canonical, "{canonical}");
    }
    Ok(())
}

#[test]
fn what_a_typed_field_cannot_hold_is_kept_verbatim() -> Result<()> {
    let kept = [
        json!({"args": [], "id": "", "schema": ""}),
        json!({"args": [], "meta": {}}),
        json!({"args": [], "priority": "high", "timeout": 1.5, "attempt": 5.5}),
        json!({"args": [], "priority": 3_000_000_000_i64, "total_timeout": -1}),
        json!({"args": [], "scheduled_at": "+PT30S", "expires_at": "2025-06-01T09:00:00"}),
        json!({"args": [], "created_at": "1970-01-01T00:00:00Z", "started_at": null}),
        json!({"args": [], "completed_at": "2025-06-01T09:00:60Z", "enqueued_at": 17}),
        json!({"args": {"not": "an array"}, "meta": ["x"], "state": "waiting"}),
        json!({"args": [], "retry": {"backoff_coefficient": 2, "jitter": "yes", "max_attempts": 0}}),
        json!({"args": [], "retry": "none", "unique": {"keys": [], "period": "PT1H", "x": 1}}),
        json!({"args": [], "error": {"type": "Timeout", "retryable": true, "details": {"a": [1]}}}),
        json!({"args": [], "result": null}),
        json!({"args": [], "result": {"rows": [1, 2.5, "x", true, null, {}, []]}}),
        json!({"args": [], "x-acme-gpu-tier": "a100", "extensions": {"x": 1}, "": 0}),
        json!({"args": [], "retry": {}, "unique": {}, "error": {}}),
        json!({"args": [], "x-ojs-proto-unknown-fields": "not base64 at all!"}),
        json!({"args": [], "x-ojs-proto-unknown-fields": "EgJoaQ"}),
        // Names no field at all: not an unknown-fields blob either.
        json!({"args": [], "x-ojs-proto-unknown-fields": ""}),
    ];
    for job in kept {
        assert_eq!(round_trip(&job)?, job, "{job}");
    }
    let envelope = Envelope::from_json(&json!({"args": [], "retry": {"max_attempts": 0}}))?;
    assert_eq!(
        envelope.message.retry.and_then(|r| r.max_attempts),
        Some(0),
        "optional fields keep an explicit zero"
    );
    Ok(())
}

#[test]
fn unknown_protobuf_fields_survive_json() -> Result<()> {
    let mut bytes = json_to_proto(&common::minimal())?;
    // field 22 (string "future"), field 150 (varint 7), field 14 with state 42.
    let unknown = [
        &[0xb2, 0x01, 0x06][..],
        b"future",
        &[0xb0, 0x09, 0x07],
        &[0x70, 0x2a],
    ]
    .concat();
    bytes.extend_from_slice(&unknown);
    let json = proto_to_json(&bytes)?;
    assert!(json.get("state").is_none());
    let carried = json[UNKNOWN_FIELDS_KEY]
        .as_str()
        .ok_or_else(|| anyhow!("no unknown fields member in {json}"))?;
    assert!(!carried.contains('=') && !carried.contains('+') && !carried.contains('/'));
    let back = json_to_proto(&json)?;
    assert_eq!(back, bytes);
    let decoded = JobEnvelope::decode(back.as_slice())?;
    assert_eq!(decoded.state, 42);
    assert_eq!(proto_to_json(&back)?, json);
    Ok(())
}

/// Field 9 (varint 7) and field 15 (length-delimited "abc"): unknown to `RetryPolicy`
/// (1-7), `UniquePolicy` (1-3) and `JobError` (1-6) alike.
const NESTED_UNKNOWN: &[u8] = &[0x48, 0x07, 0x7a, 0x03, b'a', b'b', b'c'];
/// base64url of [`NESTED_UNKNOWN`].
const NESTED_UNKNOWN_TEXT: &str = "SAd6A2FiYw";

/// JobEnvelope field `number` (length-delimited) holding `payload`.
fn submessage(number: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = if number < 16 {
        vec![number << 3 | 2]
    } else {
        vec![(number << 3 | 2) | 0x80, number >> 4]
    };
    out.push(u8::try_from(payload.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(payload);
    out
}

/// Spec 9.2 inside `retry`, `unique` and `error`: their unknown fields come back as the
/// object's `x-ojs-proto-unknown-fields` and are re-encoded after the message's known
/// fields, the submessage in its field-number place, so the bytes are the same.
#[test]
fn unknown_fields_inside_retry_unique_and_error_survive_json() -> Result<()> {
    let retry = retry_policy(Some(3), "");
    let unique = UniquePolicy {
        period: "PT1H".into(),
        ..Default::default()
    };
    let error = JobError {
        r#type: "Timeout".into(),
        ..Default::default()
    };
    let cases = [
        (
            11,
            "retry",
            retry.encode_to_vec(),
            json!({"max_attempts": 3}),
        ),
        (
            12,
            "unique",
            unique.encode_to_vec(),
            json!({"period": "PT1H"}),
        ),
        (
            20,
            "error",
            error.encode_to_vec(),
            json!({"type": "Timeout"}),
        ),
    ];
    // Fields on both sides of 11, 12 and 20: type (3), result (21), total_timeout (100).
    let before = JobEnvelope {
        r#type: "t".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let after = JobEnvelope {
        result: Some(string_value("r")),
        total_timeout: Some(5),
        ..Default::default()
    }
    .encode_to_vec();
    for (number, name, known, members) in cases {
        let bytes = [
            &before[..],
            &submessage(number, &[&known[..], NESTED_UNKNOWN].concat()),
            &after,
        ]
        .concat();
        let json = proto_to_json(&bytes)?;
        let mut expected = members.clone();
        expected[UNKNOWN_FIELDS_KEY] = NESTED_UNKNOWN_TEXT.into();
        assert_eq!(json[name], expected, "{name}");
        assert!(json.get(UNKNOWN_FIELDS_KEY).is_none(), "{json}");
        assert_eq!(json_to_proto(&json)?, bytes, "{name}");
        // prost alone reads the known fields and skips the others.
        let decoded = JobEnvelope::decode(bytes.as_slice())?;
        assert_eq!(Value::try_from(&decoded)?[name], members, "{name}");
    }

    // All three at once, with top-level unknown fields too (field 22, "future").
    let schema = JobEnvelope {
        schema: "s".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let top_unknown = [&[0xb2, 0x01, 0x06][..], b"future"].concat();
    let bytes = [
        &before[..],
        &submessage(11, &[&retry.encode_to_vec(), NESTED_UNKNOWN].concat()),
        &submessage(12, NESTED_UNKNOWN),
        &schema,
        &submessage(20, &[&error.encode_to_vec(), &NESTED_UNKNOWN[..2]].concat()),
        &after,
        &top_unknown,
    ]
    .concat();
    let envelope = Envelope::decode(&bytes)?;
    assert_eq!(envelope.retry_unknown_fields, NESTED_UNKNOWN);
    assert_eq!(envelope.unique_unknown_fields, NESTED_UNKNOWN);
    assert_eq!(envelope.error_unknown_fields, &NESTED_UNKNOWN[..2]);
    assert_eq!(envelope.unknown_fields, top_unknown);
    assert_eq!(envelope.encode(), bytes);
    let json = envelope.to_json()?;
    assert_eq!(
        json["unique"],
        json!({ UNKNOWN_FIELDS_KEY: NESTED_UNKNOWN_TEXT })
    );
    assert_eq!(json["error"][UNKNOWN_FIELDS_KEY], "SAc");
    assert_eq!(json[UNKNOWN_FIELDS_KEY], "sgEGZnV0dXJl");
    assert_eq!(Envelope::from_json(&json)?, envelope);
    assert_eq!(json_to_proto(&json)?, bytes);
    Ok(())
}

/// A submessage may occur more than once on the wire (the occurrences merge): the
/// unknown fields of every occurrence are kept, in order, and come back in one field.
#[test]
fn a_repeated_submessage_keeps_every_occurrences_unknown_fields() -> Result<()> {
    let first = retry_policy(Some(3), "");
    let second = retry_policy(None, "PT1S");
    let bytes = [
        submessage(
            11,
            &[&first.encode_to_vec()[..], &NESTED_UNKNOWN[..2]].concat(),
        ),
        submessage(
            11,
            &[&second.encode_to_vec()[..], &NESTED_UNKNOWN[2..]].concat(),
        ),
    ]
    .concat();
    let json = proto_to_json(&bytes)?;
    assert_eq!(
        json["retry"],
        json!({"max_attempts": 3, "initial_interval": "PT1S", UNKNOWN_FIELDS_KEY: NESTED_UNKNOWN_TEXT})
    );
    let merged = retry_policy(Some(3), "PT1S");
    assert_eq!(
        json_to_proto(&json)?,
        submessage(11, &[&merged.encode_to_vec()[..], NESTED_UNKNOWN].concat())
    );
    Ok(())
}

/// A nested `x-ojs-proto-unknown-fields` is only bytes again when it is base64url of
/// fields unknown to that message; anything else is an ordinary member, carried as today.
#[test]
fn a_nested_unknown_fields_member_naming_known_fields_stays_a_member() -> Result<()> {
    // (member, last field number its schema knows: varint 1 as that field, then the next)
    let cases = [
        ("retry", "OAE", "QAE"),
        ("unique", "GAE", "IAE"),
        ("error", "MAE", "OAE"),
    ];
    for (name, last_known, first_unknown) in cases {
        for kept in [
            json!(last_known),
            json!("CAU"),    // field 1
            json!("SAcIBQ"), // field 9, then field 1
            json!(""),
            json!("SAd6A2FiYw=="),
            json!("not base64!"),
            json!(42),
            json!({"a": 1}),
        ] {
            let job = json!({"args": [], name: { "x": 1, UNKNOWN_FIELDS_KEY: kept }});
            let envelope = Envelope::from_json(&job)?;
            assert!(
                envelope.retry_unknown_fields.is_empty()
                    && envelope.unique_unknown_fields.is_empty()
                    && envelope.error_unknown_fields.is_empty(),
                "{job}"
            );
            let keys: Vec<_> = envelope.message.extensions.keys().collect();
            assert_eq!(keys, [&format!("x-ojs-{name}")], "{job}");
            assert_eq!(round_trip(&job)?, job);
        }
        let job = json!({"args": [], name: { UNKNOWN_FIELDS_KEY: first_unknown }});
        let envelope = Envelope::from_json(&job)?;
        assert!(envelope.message.extensions.is_empty(), "{job}");
        assert_eq!(round_trip(&job)?, job);
    }
    Ok(())
}

/// `JobEnvelope` alone has no place for unknown fields, nested ones included: converting
/// JSON that carries some is an error naming them, not a silent loss.
#[test]
fn a_job_envelope_cannot_take_json_with_unknown_fields() -> Result<()> {
    for (job, field, message) in [
        (
            json!({"args": [], UNKNOWN_FIELDS_KEY: "sgEGZnV0dXJl"}),
            "x-ojs-proto-unknown-fields",
            "JobEnvelope",
        ),
        (
            json!({"args": [], "retry": {"max_attempts": 3, UNKNOWN_FIELDS_KEY: NESTED_UNKNOWN_TEXT}}),
            "retry.x-ojs-proto-unknown-fields",
            "RetryPolicy",
        ),
        (
            json!({"args": [], "unique": {UNKNOWN_FIELDS_KEY: NESTED_UNKNOWN_TEXT}}),
            "unique.x-ojs-proto-unknown-fields",
            "UniquePolicy",
        ),
        (
            json!({"args": [], "error": {"type": "E", UNKNOWN_FIELDS_KEY: NESTED_UNKNOWN_TEXT}}),
            "error.x-ojs-proto-unknown-fields",
            "JobError",
        ),
    ] {
        let err = JobEnvelope::try_from(&job).err().map(|e| e.to_string());
        assert_eq!(
            err,
            Some(format!(
                "{field}: {message} cannot hold unknown fields; convert to Envelope instead"
            ))
        );
        assert!(Envelope::try_from(&job).is_ok());
    }
    let plain = json!({"args": [], "retry": {"max_attempts": 3, UNKNOWN_FIELDS_KEY: "CAU"}});
    assert_eq!(
        JobEnvelope::try_from(&plain)?,
        Envelope::from_json(&plain)?.message
    );
    Ok(())
}

/// Unknown fields set for a submessage the message lacks still travel: the field is
/// written with them alone, and reads back as present.
#[test]
fn nested_unknown_fields_without_their_message_are_written_anyway() -> Result<()> {
    let envelope = Envelope {
        unique_unknown_fields: NESTED_UNKNOWN.to_vec(),
        ..Default::default()
    };
    let bytes = envelope.encode();
    assert_eq!(
        bytes,
        [
            JobEnvelope::default().encode_to_vec(),
            submessage(12, NESTED_UNKNOWN)
        ]
        .concat()
    );
    let json = envelope.to_json()?;
    assert_eq!(
        json,
        json!({"args": [], "unique": { UNKNOWN_FIELDS_KEY: NESTED_UNKNOWN_TEXT }})
    );
    assert_eq!(json_to_proto(&json)?, bytes);
    Ok(())
}

/// Spec 8.2: `extensions` keys are `x-{vendor}-{name}`. The server's members go under
/// `x-ojs-`, another vendor's keep their names, and every name comes back exactly.
#[test]
fn extension_keys_follow_the_vendor_convention_and_come_back_exactly() -> Result<()> {
    for (json_name, key) in [
        ("timeout_ms", "x-ojs-timeout_ms"),
        ("x_custom", "x-ojs-x_custom"),
        ("x-acme-gpu-tier", "x-acme-gpu-tier"),
        ("x-ojs-own", "x-ojs-x-ojs-own"),
        ("x-", "x-ojs-x-"),
        ("x-acme", "x-ojs-x-acme"),
        ("", "x-ojs-"),
    ] {
        assert_eq!(ojs_proto::extension_key(json_name), key);
        assert_eq!(ojs_proto::json_name(key), json_name);
        let job = json!({"args": [], json_name: 1});
        let m = JobEnvelope::decode(json_to_proto(&job)?.as_slice())?;
        assert_eq!(m.extensions.keys().collect::<Vec<_>>(), [key]);
        assert_eq!(proto_to_json(&m.encode_to_vec())?, job);
    }
    // An older client's bare key still names its member; naming one twice is an error.
    let mut m = JobEnvelope::default();
    m.extensions.insert("timeout_ms".into(), string_value("5"));
    assert_eq!(proto_to_json(&m.encode_to_vec())?["timeout_ms"], "5");
    m.extensions
        .insert("x-ojs-timeout_ms".into(), string_value("6"));
    assert_eq!(
        json_error(&m).as_deref(),
        Some("extensions[\"x-ojs-timeout_ms\"]: names the member timeout_ms a second time")
    );
    Ok(())
}

#[test]
fn extensions_colliding_with_set_fields_are_errors() -> Result<()> {
    let mut m = JobEnvelope {
        id: "019539a4-b68c-7def-8000-1a2b3c4d5e6f".into(),
        ..Default::default()
    };
    m.extensions.insert("id".into(), string_value("other"));
    assert_eq!(
        json_error(&m).as_deref(),
        Some("extensions[\"id\"]: duplicates the typed field id, which is set")
    );
    let mut m = JobEnvelope {
        retry: Some(retry_policy(Some(3), "")),
        ..Default::default()
    };
    // A carried retry that is not an object cannot merge with the typed one.
    m.extensions.insert("retry".into(), string_value("x"));
    assert_eq!(
        json_error(&m).as_deref(),
        Some("extensions[\"retry\"]: duplicates the typed field retry, which is set")
    );
    m.extensions.insert(
        "retry".into(),
        prost_types::Value {
            kind: Some(Kind::StructValue(prost_types::Struct {
                fields: [("max_attempts".to_owned(), string_value("5"))].into(),
            })),
        },
    );
    assert_eq!(
        json_error(&m).as_deref(),
        Some("extensions[\"retry.max_attempts\"]: duplicates the typed field retry.max_attempts, which is set")
    );
    // Set but unset-looking: an extensions entry for an empty field is the value.
    let mut m = JobEnvelope::default();
    m.extensions.insert("queue".into(), string_value("q"));
    assert_eq!(
        proto_to_json(&m.encode_to_vec())?,
        json!({"queue": "q", "args": []})
    );
    Ok(())
}

#[test]
fn values_json_cannot_hold_are_errors_with_a_path() {
    let nan = prost_types::Value {
        kind: Some(Kind::NumberValue(f64::NAN)),
    };
    let list = prost_types::Value {
        kind: Some(Kind::ListValue(prost_types::ListValue {
            values: vec![string_value("ok"), nan],
        })),
    };
    let m = JobEnvelope {
        args: vec![string_value("a"), list],
        ..Default::default()
    };
    assert_eq!(
        json_error(&m).as_deref(),
        Some("args[1][1]: the number NaN has no JSON representation")
    );
    let mut m = JobEnvelope::default();
    m.meta.insert("k".into(), prost_types::Value { kind: None });
    assert_eq!(
        json_error(&m).as_deref(),
        Some("meta.k: google.protobuf.Value has no kind set (null must be null_value)")
    );
    let m = JobEnvelope {
        created_at: Some(prost_types::Timestamp {
            seconds: 1,
            nanos: -5,
        }),
        ..Default::default()
    };
    assert_eq!(
        json_error(&m).as_deref(),
        Some("created_at: Timestamp nanos -5 is outside 0..999999999")
    );
    let m = JobEnvelope {
        retry: Some(RetryPolicy {
            backoff_coefficient: Some(f64::INFINITY),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(proto_to_json(&m.encode_to_vec()).is_err());
    // The epoch means "unset".
    let m = JobEnvelope {
        created_at: Some(prost_types::Timestamp::default()),
        ..Default::default()
    };
    assert_eq!(
        proto_to_json(&m.encode_to_vec()).ok(),
        Some(json!({"args": []}))
    );
}

#[test]
fn non_objects_are_rejected_with_a_message() {
    for v in [json!([]), json!("job"), json!(null), json!(1)] {
        let err = json_to_proto(&v).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("the job envelope must be a JSON object")
        );
    }
}

#[test]
fn garbage_never_panics() {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let valid = json_to_proto(&common::server_rendered()).unwrap_or_default();
    assert!(!valid.is_empty());
    for round in 0..20_000 {
        let len = (next() % 300) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 2 == 0 && !valid.is_empty() {
            // Mutations of a valid envelope reach deeper than random bytes.
            bytes = valid.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
            bytes.truncate((next() as usize) % (bytes.len() + 1));
        }
        let _ = proto_to_json(&bytes);
        let _ = batch_request_to_json(&bytes);
        let _ = batch_response_to_json(&bytes);
        let _ = decode_delimited_jobs(&bytes);
    }
    for bytes in [
        &b"\x0a\xff\xff\xff\xff\x0f"[..],
        b"\x08",
        b"\x0b\x0b\x0b\x0b",
        b"\x0c",
        b"\x2a\x00",
        b"\x72\x00",
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    ] {
        assert!(proto_to_json(bytes).is_err(), "{bytes:?}");
    }
    let err = proto_to_json(b"\x12\x05ab").err();
    assert!(
        matches!(&err, Some(ProtoError::Decode { message: "JobEnvelope", reason }) if reason.contains("field 2")),
        "{err:?}"
    );
}

#[test]
fn batches_and_delimited_streams() -> Result<()> {
    let jobs: Vec<Value> = common::all().into_iter().map(|(_, j)| j).collect();
    let batch = json!({ "jobs": jobs });
    let bytes = json_to_batch_request(&batch)?;
    let request = ojs_proto::BatchEnqueueRequest::decode(bytes.as_slice())?;
    assert_eq!(request.jobs.len(), 3);
    assert_eq!(batch_request_to_json(&bytes)?, batch);
    assert_eq!(json_to_batch_request(&Value::Array(jobs.clone()))?, bytes);

    let stream = encode_delimited_jobs(&jobs)?;
    assert_eq!(decode_delimited_jobs(&stream)?, jobs);
    assert_eq!(decode_delimited_jobs(&[])?, Vec::<Value>::new());
    let err = decode_delimited_jobs(&stream[..stream.len() - 1]).err();
    assert_eq!(
        err.map(|e| e.to_string()),
        Some(format!(
            "invalid protobuf delimited stream: message 2: length {} runs past the end of the stream",
            json_to_proto(&jobs[2])?.len()
        ))
    );
    let mut broken = encode_delimited_jobs(&jobs[..1])?;
    broken.extend_from_slice(b"\x02\x08\xff");
    let err = decode_delimited_jobs(&broken).err().map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("jobs[1]")),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn batch_responses() -> Result<()> {
    let ok = json!({"jobs": [{"id": "a", "type": "x"}, {"id": "b", "type": "x"}], "count": 2});
    let bytes = json_to_batch_response(&ok)?;
    assert_eq!(
        batch_response_to_json(&bytes)?,
        json!({"results": [{"index": 0, "id": "a", "success": true}, {"index": 1, "id": "b", "success": true}]})
    );
    let failed = json!({"error": {"code": "invalid_request", "message": "2 of the batch's jobs are invalid",
        "details": {"errors": [
            {"index": 3, "code": "invalid_request", "message": "type is required", "details": null},
            {"index": 7, "code": "invalid_request", "message": "args is required"}]}}});
    let response =
        ojs_proto::BatchEnqueueResponse::decode(json_to_batch_response(&failed)?.as_slice())?;
    assert_eq!(response.results.len(), 2);
    assert_eq!(response.results[1].index, 7);
    assert!(!response.results[1].success);
    assert_eq!(
        response.results[1].error,
        Some(JobError {
            r#type: "invalid_request".into(),
            message: "args is required".into(),
            ..Default::default()
        })
    );
    let conflict = json!({"error": {"code": "duplicate", "message": "job 4 duplicates", "details": {"index": 4}}});
    let response =
        ojs_proto::BatchEnqueueResponse::decode(json_to_batch_response(&conflict)?.as_slice())?;
    assert_eq!(response.results.len(), 1);
    assert_eq!(response.results[0].index, 4);
    let generic = json!({"results": [{"index": 0, "id": "a", "success": true}, {"index": 1, "success": false, "error": {"type": "duplicate", "message": "m"}}]});
    assert_eq!(
        batch_response_to_json(&json_to_batch_response(&generic)?)?,
        generic
    );
    for bad in [
        json!([]),
        json!({"count": 1}),
        json!({"error": {"message": "too many"}}),
        json!({"results": [{"id": "x"}]}),
    ] {
        assert!(json_to_batch_response(&bad).is_err(), "{bad}");
    }
    Ok(())
}
