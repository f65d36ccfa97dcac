//! Property-based fuzzing of the envelope parser and validator (`NewJob::from_json`) and
//! the parsers it leans on, from envelope-shaped JSON, arbitrary JSON and arbitrary or
//! mutated bytes. Nothing may panic; every refusal is a 4xx OJS error with a message;
//! every accepted envelope round-trips through its stored form and its JSON view.
//!
//! CI runs `PROPTEST_CASES` inputs per property (default 1,000). `OJS_FUZZ_SECONDS=600`
//! (`make fuzz`) keeps drawing fresh inputs for that long. A failure prints the shrunk
//! input: add it to [`REGRESSIONS`] so it is checked on every run from then on.

use ojs_core::job::JobSpec;
use ojs_core::{Job, NewJob, OjsError};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use serde_json::{json, Value};

/// Inputs that once broke a property (from fuzzing or review), checked on every run.
const REGRESSIONS: &[&str] = &[
    r#"{"type":"a","args":[],"scheduled_at":"+PT0S"}"#,
    r#"{"type":"a","args":[],"options":{"timeout":18446744073709551615}}"#,
    r#"{"type":"a","args":[],"options":{"retry":{"backoff_coefficient":1e308}}}"#,
    r#"{"type":"a","args":[],"expires_at":"+P99999999999999D"}"#,
    r#"{"type":"a","args":[],"delay_until":"9999-12-31T23:59:59.999999999+14:00"}"#,
    r#"{"type":"a","args":[],"options":{"rate_limit":{"max_per_second":18446744073709551615}}}"#,
    r#"{"type":"a","args":[],"options":{"unique":{"period":18446744073709551615}}}"#,
];

#[path = "support/fuzz.rs"]
mod fuzz;

use fuzz::fuzz;

/// A round of the fuzz driver: 1,000 inputs unless `PROPTEST_CASES` says otherwise.
fn config() -> Config {
    Config {
        cases: 1_000,
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9_-]{0,8}(\\.[a-z][a-z0-9_-]{0,8}){0,2}",
        "[a-z0-9][a-z0-9.-]{0,12}",
        any::<String>(),
        "\\PC{0,40}",
        Just(String::new()),
        Just("+PT1S".to_owned()),
        Just("PT0.5S".to_owned()),
        Just("P1DT2H".to_owned()),
        Just("PT".to_owned()),
        Just("2026-01-01T00:00:00Z".to_owned()),
        Just("2026-01-01T00:00:00".to_owned()),
        Just("2099-12-31T23:59:59.123456789+05:30".to_owned()),
        Just("1970-01-01T00:00:00Z".to_owned()),
        Just(uuid::Uuid::now_v7().to_string()),
        Just("550e8400-e29b-41d4-a716-446655440000".to_owned()),
        Just("urn:ojs:schema:x:v1".to_owned()),
        Just("dead_letter".to_owned()),
        Just("exponential".to_owned()),
        Just("queue:default".to_owned()),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-200i64..200).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(i64::MIN)),
        (-1e3f64..1e3).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string().prop_map(Value::String),
    ]
}

/// Any JSON, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(string(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |v, _| json!([v]))
}

fn object(fields: Vec<(&'static str, Value)>) -> Value {
    Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// A value for a known field: usually plausible, sometimes anything.
fn field(plausible: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
    prop_oneof![4 => plausible, 1 => any_json()].boxed()
}

/// Keeps a random subset of `fields` (a dropped field's value is never generated).
fn some_of(fields: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let fields: Vec<_> = fields
        .into_iter()
        .map(|(name, value)| prop::option::weighted(0.4, value.prop_map(move |v| (name, v))))
        .collect();
    fields
        .prop_map(|kept| object(kept.into_iter().flatten().collect()))
        .boxed()
}

fn duration() -> impl Strategy<Value = Value> {
    prop_oneof![
        "P(T[0-9]{1,3}(\\.[0-9]{1,3})?[HMS]){0,1}",
        "PT[0-9]{1,2}[HMS]",
        "P[0-9]{1,3}D",
        string(),
    ]
    .prop_map(Value::String)
}

fn retry() -> BoxedStrategy<Value> {
    some_of(vec![
        ("max_attempts", field((0u64..12).prop_map(Value::from))),
        ("initial_interval", field(duration())),
        ("max_interval", field(duration())),
        ("initial_interval_ms", field(number())),
        (
            "backoff_coefficient",
            field((0.5f64..5.0).prop_map(Value::from)),
        ),
        ("jitter", field(any::<bool>().prop_map(Value::Bool))),
        (
            "backoff_strategy",
            field(
                prop::sample::select(vec!["exponential", "linear", "none", "polynomial", "x"])
                    .prop_map(Value::from),
            ),
        ),
        (
            "non_retryable_errors",
            field(prop::collection::vec(string(), 0..3).prop_map(Value::from)),
        ),
        (
            "on_exhaustion",
            field(prop::sample::select(vec!["discard", "dead_letter", "x"]).prop_map(Value::from)),
        ),
    ])
}

fn unique() -> BoxedStrategy<Value> {
    some_of(vec![
        (
            "keys",
            field(
                prop::collection::vec(
                    prop::sample::select(vec!["type", "queue", "args", "meta", "x"]),
                    0..4,
                )
                .prop_map(Value::from),
            ),
        ),
        (
            "args_keys",
            field(prop::collection::vec(string(), 0..2).prop_map(Value::from)),
        ),
        (
            "meta_keys",
            field(prop::collection::vec(string(), 0..2).prop_map(Value::from)),
        ),
        ("period", field(duration())),
        (
            "states",
            field(
                prop::collection::vec(
                    prop::sample::select(vec![
                        "available",
                        "active",
                        "scheduled",
                        "completed",
                        "x",
                    ]),
                    0..3,
                )
                .prop_map(Value::from),
            ),
        ),
        (
            "on_conflict",
            field(
                prop::sample::select(vec![
                    "reject",
                    "ignore",
                    "replace",
                    "replace_except_schedule",
                    "x",
                ])
                .prop_map(Value::from),
            ),
        ),
    ])
}

fn window() -> BoxedStrategy<Value> {
    some_of(vec![
        ("limit", field((0u64..20).prop_map(Value::from))),
        ("period", field(duration())),
    ])
}

fn rate_limit() -> BoxedStrategy<Value> {
    some_of(vec![
        (
            "key",
            field("[a-zA-Z0-9][a-zA-Z0-9._:-]{0,10}".prop_map(Value::from)),
        ),
        ("rate", field(window())),
        ("throttle", field(window())),
        ("max_per_second", field((0u64..50).prop_map(Value::from))),
        ("concurrency", field((0u64..50).prop_map(Value::from))),
        (
            "on_limit",
            field(prop::sample::select(vec!["wait", "drop", "x"]).prop_map(Value::from)),
        ),
    ])
}

fn timestamp() -> impl Strategy<Value = Value> {
    prop_oneof![
        "\\+PT[0-9]{1,4}(\\.[0-9]{1,3})?S",
        "20[0-9]{2}-(0[1-9]|1[0-2])-([0-2][0-9])T[0-2][0-9]:[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-][01][0-9]:[0-5][0-9])?",
        string(),
    ]
    .prop_map(Value::String)
}

/// Options, at the top level or under `options`.
fn options() -> Vec<(&'static str, BoxedStrategy<Value>)> {
    vec![
        (
            "queue",
            field("[a-z0-9][a-z0-9.-]{0,12}".prop_map(Value::from)),
        ),
        ("priority", field((-120i64..120).prop_map(Value::from))),
        ("timeout_ms", field(number())),
        ("timeout", field(number())),
        ("visibility_timeout_ms", field(number())),
        ("delay_until", field(timestamp())),
        ("scheduled_at", field(timestamp())),
        ("expires_at", field(timestamp())),
        ("retry", field(retry())),
        ("unique", field(unique())),
        ("rate_limit", field(rate_limit())),
        (
            "tags",
            field(prop::collection::vec(string(), 0..3).prop_map(Value::from)),
        ),
    ]
}

/// Envelope-shaped JSON: the known fields, each usually plausible, plus unknown ones.
fn envelope() -> BoxedStrategy<Value> {
    let mut top = vec![
        (
            "type",
            field("[a-z][a-z0-9_-]{0,8}(\\.[a-z][a-z0-9_-]{0,8}){0,2}".prop_map(Value::from)),
        ),
        (
            "args",
            field(prop_oneof![
                prop::collection::vec(any_json(), 0..4).prop_map(Value::Array),
                (0usize..14).prop_map(|d| json!([nested(d)])),
            ]),
        ),
        (
            "id",
            field(prop_oneof![
                Just(()).prop_map(|()| Value::from(uuid::Uuid::now_v7().to_string())),
                string().prop_map(Value::from),
            ]),
        ),
        ("specversion", field(Just(Value::from("1.0")))),
        (
            "meta",
            field(
                prop::collection::btree_map(string(), any_json(), 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ),
        ),
        ("schema", field(string().prop_map(Value::from))),
        ("x_ext", any_json().boxed()),
        ("state", field(Just(Value::from("completed")))),
        ("attempt", field(number())),
    ];
    top.extend(options());
    (some_of(top), some_of(options()), any::<bool>())
        .prop_map(|(mut env, opts, nest)| {
            if nest {
                if let Value::Object(o) = &mut env {
                    o.insert("options".into(), opts);
                }
            }
            env
        })
        .boxed()
}

/// The properties of one parse: a refusal is a 4xx with a message, an acceptance
/// round-trips through the stored form and through the job's JSON view.
fn check(input: Value) -> Result<(), TestCaseError> {
    match NewJob::from_json(input) {
        Err(e) => refusal(&e),
        Ok(new) => {
            let stored = Value::Object(new.spec.to_json());
            let back = JobSpec::from_stored(stored.clone()).map_err(|e| {
                TestCaseError::fail(format!("stored form refused: {e}\nstored: {stored}"))
            })?;
            prop_assert_eq!(&back, &new.spec, "stored form: {}", stored);
            prop_assert_eq!(Value::Object(back.to_json()), stored);
            let job = Job::enqueue(new.clone(), ojs_core::time::now());
            let view = job.to_json();
            let again = NewJob::from_json(view.clone())
                .map_err(|e| TestCaseError::fail(format!("job view refused: {e}\nview: {view}")))?;
            prop_assert_eq!(&again.spec, &new.spec, "view: {}", view);
            prop_assert_eq!(again.id, Some(job.id));
            Ok(())
        }
    }
}

fn refusal(e: &OjsError) -> Result<(), TestCaseError> {
    let status = e.code.http_status();
    prop_assert!((400..500).contains(&status), "refused with {status}: {e}");
    prop_assert!(!e.message.is_empty());
    Ok(())
}

fn run(name: &str, tried: Result<u64, String>) -> Result<u64, String> {
    tried.map_err(|e| format!("{name} failed.\n{e}"))
}

#[test]
fn regressions_still_hold() -> Result<(), String> {
    for raw in REGRESSIONS {
        let v: Value = serde_json::from_str(raw).map_err(|e| format!("{raw}: {e}"))?;
        check(v).map_err(|e| format!("{raw}: {e}"))?;
    }
    Ok(())
}

#[test]
fn envelope_shaped_json_is_refused_cleanly_or_round_trips() -> Result<(), String> {
    let tried = fuzz("envelope-shaped JSON", &config(), envelope(), check);
    run("envelopes", tried).map(drop)
}

#[test]
fn arbitrary_json_is_refused_cleanly_or_round_trips() -> Result<(), String> {
    let tried = fuzz("arbitrary JSON", &config(), any_json(), check);
    run("any JSON", tried).map(drop)
}

/// Bytes: valid envelopes with random byte edits (flips, inserts, cuts), plus noise.
#[test]
fn arbitrary_and_mutated_bytes_never_panic() -> Result<(), String> {
    let mutated = (
        envelope(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    )
        .prop_map(|(env, edits)| {
            let mut bytes = env.to_string().into_bytes();
            for (at, byte, op) in edits {
                if bytes.is_empty() {
                    bytes.push(byte);
                    continue;
                }
                let i = at.index(bytes.len());
                match op {
                    0 => bytes[i] = byte,
                    1 => bytes.insert(i, byte),
                    _ => bytes.truncate(i),
                }
            }
            bytes
        });
    let bytes = prop_oneof![mutated, prop::collection::vec(any::<u8>(), 0..256)];
    let tried = fuzz("arbitrary and mutated bytes", &config(), bytes, |raw| {
        if let Ok(v) = serde_json::from_slice::<Value>(&raw) {
            check(v)?;
        }
        Ok(())
    });
    run("bytes", tried).map(drop)
}

/// The parsers behind the envelope, and those of other request bodies, on any JSON.
#[test]
fn the_other_parsers_never_panic() -> Result<(), String> {
    let tried = fuzz(
        "retry/unique/rate_limit/failure/cron/workflow/schema parsers",
        &config(),
        (any_json(), retry(), unique(), rate_limit(), string()),
        |(any, retry, unique, rate, text)| {
            for v in [&any, &retry] {
                if let Ok(p) = ojs_core::RetryPolicy::from_json(v, "$.retry") {
                    let again = ojs_core::RetryPolicy::from_json(&p.to_json(), "$.retry")
                        .map_err(|e| TestCaseError::fail(format!("retry round trip: {e}")))?;
                    prop_assert_eq!(again, p);
                } else if let Err(e) = ojs_core::RetryPolicy::from_json(v, "$.retry") {
                    refusal(&e)?;
                }
            }
            for v in [&any, &unique] {
                if let Err(e) = ojs_core::unique::UniquePolicy::from_json(v) {
                    refusal(&e)?;
                }
            }
            for v in [&any, &rate] {
                match ojs_core::rate_limit::RateLimitPolicy::from_json(v, "q") {
                    Ok(p) => {
                        let again =
                            ojs_core::rate_limit::RateLimitPolicy::from_json(&p.to_json(), "q")
                                .map_err(|e| {
                                    TestCaseError::fail(format!("rate_limit round trip: {e}"))
                                })?;
                        prop_assert_eq!(again.to_json(), p.to_json());
                    }
                    Err(e) => refusal(&e)?,
                }
            }
            if let Err(e) = ojs_core::failure::Failure::from_json(Some(&any)) {
                refusal(&e)?;
            }
            for body in [any.clone(), json!({"name": text, "cron": text, "job": any})] {
                if let Err(e) = ojs_core::cron_job::CronJob::from_json(body) {
                    refusal(&e)?;
                }
            }
            let steps = json!([{"type": "a.b", "args": []}, any]);
            for body in [any.clone(), json!({"type": text, "steps": steps})] {
                if let Err(e) = ojs_core::workflow::WorkflowSpec::from_json(body) {
                    refusal(&e)?;
                }
            }
            if let Err(e) =
                ojs_core::schema_registry::SchemaDoc::from_json(json!({"uri": text, "schema": any}))
            {
                refusal(&e)?;
            }
            let _ = ojs_core::duration::parse(&text);
            let _ = ojs_core::time::parse_at(&text, "$.t", ojs_core::time::now());
            let _ = ojs_core::JobId::parse(&text);
            let _ = ojs_core::QueueName::parse(&text);
            let _ = ojs_core::JobType::parse(&text);
            let _ = ojs_core::cron::CronSchedule::parse(&text, Some(&text));
            Ok(())
        },
    );
    run("parsers", tried).map(drop)
}
