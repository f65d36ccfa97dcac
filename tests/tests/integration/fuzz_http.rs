//! An HTTP-level fuzzer over every route: generated and mutated OJS bodies, query
//! strings, headers, path segments and methods, from a seeded RNG. Every answer must
//! come on a live connection; no 5xx but a retryable storage `503` (`backend_error` with
//! `Retry-After`); every 4xx (and that 503) carries the OJS error body. Afterwards a
//! normal job in each queue the fuzzer used is still pushed, fetched and acknowledged.
//!
//! CI runs it for `OJS_FUZZ_HTTP_SECONDS` (default 20 s) as part of this binary;
//! `make fuzz` runs it for `OJS_FUZZ_SECONDS`. `OJS_FUZZ_SEED` fixes the seed (printed on
//! every run): case `n` of a seed is the same request whatever ran before it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ojs_tests::TestApp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Map, Value};

/// Queues the fuzzer's bodies name (checked for wedging at the end).
const QUEUES: [&str; 3] = ["fz", "fz-b", "default"];

/// Route templates: method, path with `{id}`, `{queue}`, `{name}`, `{uri}`, `{directive}`.
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/ojs/v1/jobs"),
    ("POST", "/ojs/v1/jobs/batch"),
    ("GET", "/ojs/v1/jobs/{id}"),
    ("DELETE", "/ojs/v1/jobs/{id}"),
    ("POST", "/ojs/v1/workers/fetch"),
    ("POST", "/ojs/v1/workers/ack"),
    ("POST", "/ojs/v1/workers/nack"),
    ("POST", "/ojs/v1/workers/heartbeat"),
    ("GET", "/ojs/v1/admin/workers"),
    ("POST", "/ojs/v1/admin/workers/{name}/{directive}"),
    ("GET", "/ojs/v1/queues"),
    ("GET", "/ojs/v1/queues/{queue}/stats"),
    ("POST", "/ojs/v1/queues/{queue}/pause"),
    ("POST", "/ojs/v1/queues/{queue}/resume"),
    ("PUT", "/ojs/v1/admin/queues/{queue}/rate-limit"),
    ("DELETE", "/ojs/v1/admin/queues/{queue}/rate-limit"),
    ("POST", "/ojs/v1/admin/queues/{queue}/recount"),
    ("GET", "/ojs/v1/dead-letter"),
    ("GET", "/ojs/v1/dead-letter/{id}"),
    ("DELETE", "/ojs/v1/dead-letter/{id}"),
    ("POST", "/ojs/v1/dead-letter/{id}/retry"),
    ("GET", "/ojs/v1/cron"),
    ("POST", "/ojs/v1/cron"),
    ("DELETE", "/ojs/v1/cron/{name}"),
    ("GET", "/ojs/v1/workflows/{id}"),
    ("POST", "/ojs/v1/workflows"),
    ("DELETE", "/ojs/v1/workflows/{id}"),
    ("GET", "/ojs/v1/schemas"),
    ("POST", "/ojs/v1/schemas"),
    ("GET", "/ojs/v1/schemas/{uri}"),
    ("DELETE", "/ojs/v1/schemas/{uri}"),
    ("GET", "/ojs/v1/events"),
    ("POST", "/ojs/v1/push/endpoints"),
    ("GET", "/ojs/v1/push/endpoints"),
    ("GET", "/ojs/v1/push/endpoints/{endpoint}"),
    ("DELETE", "/ojs/v1/push/endpoints/{endpoint}"),
    ("POST", "/ojs/v1/webhooks/subscriptions"),
    ("GET", "/ojs/v1/webhooks/subscriptions"),
    ("GET", "/ojs/v1/webhooks/subscriptions/{sub}"),
    ("PATCH", "/ojs/v1/webhooks/subscriptions/{sub}"),
    ("DELETE", "/ojs/v1/webhooks/subscriptions/{sub}"),
    ("POST", "/ojs/v1/webhooks/subscriptions/{sub}/rotate-secret"),
    ("POST", "/ojs/v1/webhooks/subscriptions/{sub}/test"),
    ("GET", "/ojs/v1/webhooks/subscriptions/{sub}/deliveries"),
    ("GET", "/ojs/v1/webhooks/deliveries"),
    ("GET", "/ojs/v1/webhooks/deliveries/{delivery}"),
    ("POST", "/ojs/v1/webhooks/deliveries/{delivery}/retry"),
    ("GET", "/ojs/v1/health"),
    ("GET", "/ojs/manifest"),
    ("POST", "/cloudq/{queue}"),
    ("GET", "/cloudq/{queue}"),
    ("DELETE", "/cloudq/{queue}/{id}"),
];

const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// Live ids the fuzzer may aim at (real jobs, a workflow, a cron, a schema), so that not
/// every id-taking request stops at 404.
struct Targets {
    jobs: Vec<String>,
    workflow: String,
}

/// A value chosen to hit bounds, types and parsers.
fn hostile(rng: &mut StdRng) -> Value {
    match rng.random_range(0..34) {
        0 => json!(null),
        1 => json!(true),
        2 => json!(-1),
        3 => json!(0),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!(1e300),
        7 => json!(1.5),
        8 => json!(10_000_000_000_000_000_u64),
        9 => json!(""),
        10 => json!("P100000000D"),
        11 => json!("+P100000000D"),
        12 => json!("PT0S"),
        13 => json!("PT1S"),
        14 => json!("-PT1S"),
        15 => json!("9999-12-31T23:59:59Z"),
        16 => json!("0000-01-01T00:00:00Z"),
        17 => json!("2026-11-24T00:00:00Z"),
        18 => json!("x".repeat(rng.random_range(0..20_000))),
        19 => json!("\u{0}\u{7f}\u{feff}é漢🙂"),
        20 => json!([]),
        21 => json!({}),
        22 => {
            let mut v = json!(1);
            for _ in 0..rng.random_range(1..40) {
                v = json!([v]);
            }
            v
        }
        23 => json!(uuid::Uuid::now_v7().to_string()),
        24 => json!("@every 1ms"),
        25 => json!("* * * * * * *"),
        26 => json!(["a", "a", "b"]),
        27 => json!((0..rng.random_range(0..300))
            .map(|i| format!("q{i}"))
            .collect::<Vec<_>>()),
        28 => json!("queue-limit:fz"),
        29 => json!({"limit": rng.random_range(0..3), "period": "PT1S"}),
        30 => json!(rng.random::<u32>()),
        31 => json!(-(rng.random::<u32>() as i64)),
        32 => json!("Bad Name!"),
        _ => json!(QUEUES[rng.random_range(0..QUEUES.len())]),
    }
}

fn maybe(rng: &mut StdRng, p: f64, v: impl FnOnce(&mut StdRng) -> Value) -> Option<Value> {
    rng.random_bool(p).then(|| v(rng))
}

fn obj(pairs: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
            .collect::<Map<_, _>>(),
    )
}

fn duration(rng: &mut StdRng) -> Value {
    json!(*pick(
        rng,
        &["PT0.01S", "PT1S", "PT1M", "P1D", "P30D", "P31D", "PT1H", "bogus"]
    ))
}

fn window(rng: &mut StdRng) -> Value {
    json!({"limit": rng.random_range(1..5), "period": *pick(rng, &["PT1S", "PT2S", "PT1M"])})
}

fn options(rng: &mut StdRng) -> Value {
    obj(vec![
        ("queue", Some(json!(*pick(rng, &QUEUES)))),
        (
            "priority",
            maybe(rng, 0.3, |r| json!(r.random_range(-5..105))),
        ),
        (
            "timeout_ms",
            maybe(rng, 0.2, |r| json!(r.random_range(1..100_000))),
        ),
        (
            "visibility_timeout_ms",
            maybe(rng, 0.2, |r| json!(r.random_range(1..100_000))),
        ),
        (
            "delay_until",
            maybe(rng, 0.1, |_| json!("2026-01-01T00:00:00Z")),
        ),
        ("scheduled_at", maybe(rng, 0.1, |_| json!("+PT1S"))),
        ("tags", maybe(rng, 0.2, |_| json!(["a", "b"]))),
        (
            "retry",
            maybe(rng, 0.3, |r| {
                obj(vec![
                    (
                        "max_attempts",
                        maybe(r, 0.7, |r| json!(r.random_range(0..30))),
                    ),
                    ("initial_interval", maybe(r, 0.5, duration)),
                    ("max_interval", maybe(r, 0.5, duration)),
                    (
                        "backoff_coefficient",
                        maybe(r, 0.5, |r| json!(r.random_range(0.5..20.0))),
                    ),
                    ("jitter", maybe(r, 0.3, |r| json!(r.random_bool(0.5)))),
                    ("non_retryable_errors", maybe(r, 0.2, |_| json!(["x.y"]))),
                ])
            }),
        ),
        (
            "unique",
            maybe(rng, 0.2, |r| {
                obj(vec![
                    ("keys", maybe(r, 0.6, |_| json!(["type", "args"]))),
                    ("period", maybe(r, 0.5, duration)),
                    (
                        "on_conflict",
                        maybe(r, 0.5, |r| {
                            json!(*pick(r, &["reject", "ignore", "replace"]))
                        }),
                    ),
                ])
            }),
        ),
        (
            "rate_limit",
            maybe(rng, 0.2, |r| {
                obj(vec![
                    (
                        "key",
                        maybe(r, 0.5, |r| json!(*pick(r, &["k1", "k2", "queue:fz"]))),
                    ),
                    (
                        "concurrency",
                        maybe(r, 0.3, |r| json!(r.random_range(0..4))),
                    ),
                    ("rate", maybe(r, 0.5, window)),
                    ("throttle", maybe(r, 0.5, window)),
                    (
                        "on_limit",
                        maybe(r, 0.3, |r| json!(*pick(r, &["wait", "drop", "reschedule"]))),
                    ),
                ])
            }),
        ),
    ])
}

fn envelope(rng: &mut StdRng) -> Value {
    obj(vec![
        (
            "type",
            Some(json!(*pick(rng, &["fz.job", "email.send", "a"]))),
        ),
        ("args", Some(json!([rng.random::<u16>(), "x"]))),
        ("options", maybe(rng, 0.8, options)),
        ("meta", maybe(rng, 0.2, |_| json!({"trace": "t"}))),
    ])
}

fn body_for(rng: &mut StdRng, method: &str, path: &str, t: &Targets) -> Option<Value> {
    let job_id = |rng: &mut StdRng| -> Value {
        if rng.random_bool(0.7) {
            json!(pick(rng, &t.jobs))
        } else {
            json!(uuid::Uuid::now_v7().to_string())
        }
    };
    let worker = |rng: &mut StdRng| json!(*pick(rng, &["w1", "w2", "fuzzer"]));
    Some(match (method, path) {
        ("POST", "/ojs/v1/jobs") => envelope(rng),
        ("POST", "/ojs/v1/jobs/batch") => {
            let n = rng.random_range(0..6);
            json!({"jobs": (0..n).map(|_| envelope(rng)).collect::<Vec<_>>()})
        }
        ("POST", "/ojs/v1/workers/fetch") => obj(vec![
            (
                "queues",
                Some(json!([*pick(rng, &QUEUES), *pick(rng, &QUEUES)])),
            ),
            ("count", maybe(rng, 0.5, |r| json!(r.random_range(0..120)))),
            ("worker_id", maybe(rng, 0.7, worker)),
            (
                "visibility_timeout_ms",
                maybe(rng, 0.3, |r| json!(r.random_range(0..100_000))),
            ),
        ]),
        ("POST", "/ojs/v1/workers/ack") => obj(vec![
            ("job_id", Some(job_id(rng))),
            ("worker_id", maybe(rng, 0.5, worker)),
            ("result", maybe(rng, 0.5, |_| json!({"ok": true}))),
        ]),
        ("POST", "/ojs/v1/workers/nack") => obj(vec![
            ("job_id", Some(job_id(rng))),
            ("worker_id", maybe(rng, 0.5, worker)),
            (
                "error",
                Some(json!({"type": "fz.err", "message": "m", "retryable": rng.random_bool(0.5)})),
            ),
            ("requeue", maybe(rng, 0.2, |r| json!(r.random_bool(0.5)))),
        ]),
        ("POST", "/ojs/v1/workers/heartbeat") => obj(vec![
            ("worker_id", Some(worker(rng))),
            ("job_id", maybe(rng, 0.4, job_id)),
            ("active_jobs", maybe(rng, 0.4, |r| json!([job_id(r)]))),
            (
                "visibility_timeout_ms",
                maybe(rng, 0.3, |r| json!(r.random_range(0..100_000))),
            ),
        ]),
        ("PUT", _) => obj(vec![
            ("rate", maybe(rng, 0.6, window)),
            ("throttle", maybe(rng, 0.3, window)),
            (
                "max_per_second",
                maybe(rng, 0.2, |r| json!(r.random_range(0..5))),
            ),
            (
                "on_limit",
                maybe(rng, 0.2, |r| {
                    json!(*pick(r, &["wait", "drop", "reschedule"]))
                }),
            ),
        ]),
        ("POST", "/ojs/v1/cron") => obj(vec![
            (
                "name",
                Some(json!(format!("fz-cron-{}", rng.random_range(0..4)))),
            ),
            (
                "expression",
                Some(json!(*pick(
                    rng,
                    &[
                        "*/5 * * * *",
                        "@every 1s",
                        "@hourly",
                        "0 9 * * *",
                        "@every 1ms"
                    ]
                ))),
            ),
            (
                "timezone",
                maybe(rng, 0.3, |r| {
                    json!(*pick(r, &["UTC", "Europe/Paris", "Mars/Olympus"]))
                }),
            ),
            ("job_template", Some(envelope(rng))),
            (
                "overlap_policy",
                maybe(rng, 0.3, |r| json!(*pick(r, &["skip", "allow", "x"]))),
            ),
        ]),
        ("POST", "/ojs/v1/workflows") => {
            let kind = *pick(rng, &["chain", "group", "batch"]);
            let n = rng.random_range(0..5);
            let steps: Vec<Value> = (0..n)
                .map(|i| {
                    let mut s = envelope(rng);
                    s["id"] = json!(format!("s{i}"));
                    if i > 0 && rng.random_bool(0.3) {
                        s["depends_on"] = json!([format!("s{}", i - 1)]);
                    }
                    s
                })
                .collect();
            obj(vec![
                ("type", Some(json!(kind))),
                ("name", maybe(rng, 0.5, |_| json!("fz-flow"))),
                (
                    if kind == "chain" { "steps" } else { "jobs" },
                    Some(json!(steps)),
                ),
                (
                    "callbacks",
                    maybe(
                        rng,
                        0.3,
                        |r| json!({"on_complete": envelope(r), "on_failure": envelope(r)}),
                    ),
                ),
            ])
        }
        ("POST", "/ojs/v1/schemas") => json!({
            "uri": format!("urn:fz:{}", rng.random_range(0..3)),
            "type": "fz.job", "version": "1.0.0",
            "schema": {"type": "array", "items": {"type": *pick(rng, &["integer", "string", "nope"])}}
        }),
        ("POST", "/ojs/v1/push/endpoints") => obj(vec![
            ("endpoint", Some(target_url(rng))),
            ("job_types", maybe(rng, 0.8, |_| json!(["fz.job"]))),
            ("queues", maybe(rng, 0.8, |r| json!([*pick(r, &QUEUES)]))),
            (
                "config",
                maybe(rng, 0.6, |r| {
                    json!({"max_concurrency": r.random_range(0..200), "timeout_ms": r.random_range(0..1_000_000),
                        "signing_secret": *pick(r, &["s3cret", ""])})
                }),
            ),
        ]),
        ("POST", "/ojs/v1/webhooks/subscriptions")
        | ("PATCH", "/ojs/v1/webhooks/subscriptions/{sub}") => obj(vec![
            ("url", maybe(rng, 0.9, target_url)),
            (
                "events",
                maybe(rng, 0.8, |r| {
                    json!(*pick(
                        r,
                        &[&["job.completed"][..], &["*"], &["job.*"], &["nope"], &[]]
                    ))
                }),
            ),
            ("active", maybe(rng, 0.3, |r| json!(r.random_bool(0.5)))),
            (
                "filter",
                maybe(rng, 0.3, |r| json!({"queues": [*pick(r, &QUEUES)]})),
            ),
            ("metadata", maybe(rng, 0.2, |_| json!({"team": "fz"}))),
        ]),
        ("POST", p) if p.starts_with("/cloudq/") => {
            json!({"job": {"klass": *pick(rng, &["Archive", "Mail::SendDigest", "bad klass"]), "args": [1]}})
        }
        _ => return None,
    })
}

/// A push or webhook target: refused ones (loopback, plain HTTP, other schemes), one
/// whose host does not resolve, a Lambda ARN, and hostile values.
fn target_url(rng: &mut StdRng) -> Value {
    match rng.random_range(0..7) {
        0 => json!("https://127.0.0.1/hook"),
        1 => json!("http://example.invalid/hook"),
        2 => json!("https://example.invalid/hook"),
        3 => json!("ftp://example.invalid/"),
        4 => json!("arn:aws:lambda:us-east-1:123456789012:function:fz"),
        5 => json!("https://169.254.169.254/latest/meta-data"),
        _ => hostile(rng),
    }
}

/// Replaces, removes or adds one value somewhere in `v`.
fn mutate_json(rng: &mut StdRng, v: &mut Value, depth: usize) {
    match v {
        Value::Object(map) if !map.is_empty() && depth < 6 => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = pick(rng, &keys).clone();
            match rng.random_range(0..10) {
                0 => {
                    map.remove(&key);
                }
                1 => {
                    let extra = *pick(
                        rng,
                        &[
                            "id",
                            "queue",
                            "queues",
                            "timeout_ms",
                            "offset",
                            "period",
                            "meta",
                            "args",
                            "x",
                        ],
                    );
                    map.insert(extra.to_owned(), hostile(rng));
                }
                2 | 3 => {
                    map.insert(key, hostile(rng));
                }
                _ => {
                    if let Some(inner) = map.get_mut(&key) {
                        mutate_json(rng, inner, depth + 1);
                    }
                }
            }
        }
        Value::Array(list) if !list.is_empty() && depth < 6 => {
            let i = rng.random_range(0..list.len());
            match rng.random_range(0..6) {
                0 => {
                    list.remove(i);
                }
                1 => {
                    let copy = list[i].clone();
                    list.push(copy);
                }
                2 => list[i] = hostile(rng),
                _ => mutate_json(rng, &mut list[i], depth + 1),
            }
        }
        _ => *v = hostile(rng),
    }
}

fn mutate_bytes(rng: &mut StdRng, bytes: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..6) {
        if bytes.is_empty() {
            bytes.push(rng.random());
            continue;
        }
        let i = rng.random_range(0..bytes.len());
        match rng.random_range(0..5) {
            0 => bytes[i] = rng.random(),
            1 => bytes.insert(i, *pick(rng, b"{}[]\",:\\\x00\xff")),
            2 => bytes.truncate(i),
            3 => {
                bytes.remove(i);
            }
            _ => bytes
                .splice(i..i, b"\xc3\x28".iter().copied())
                .for_each(drop),
        }
    }
}

fn segment(rng: &mut StdRng, kind: &str, t: &Targets) -> String {
    let hostile_segment = |rng: &mut StdRng| -> String {
        match rng.random_range(0..9) {
            0 => "%FF%FE".to_owned(),
            1 => "x".repeat(rng.random_range(200..5000)),
            2 => "..".to_owned(),
            3 => "%00".to_owned(),
            4 => "%E6%BC%A2%F0%9F%99%82".to_owned(),
            5 => "Bad%20Name".to_owned(),
            6 => "not-a-uuid".to_owned(),
            7 => "550e8400-e29b-41d4-a716-446655440000".to_owned(),
            _ => "%2F%2E%2E".to_owned(),
        }
    };
    if rng.random_bool(0.25) {
        return hostile_segment(rng);
    }
    match kind {
        "id" => {
            if rng.random_bool(0.5) {
                pick(rng, &t.jobs).clone()
            } else if rng.random_bool(0.3) {
                t.workflow.clone()
            } else {
                uuid::Uuid::now_v7().to_string()
            }
        }
        "queue" => (*pick(rng, &QUEUES)).to_owned(),
        "directive" => (*pick(rng, &["quiet", "terminate", "resume", "explode"])).to_owned(),
        "uri" => format!("urn:fz:{}", rng.random_range(0..3)),
        "endpoint" => format!("pe_{}", uuid::Uuid::new_v4()),
        "sub" => format!("sub_{}", uuid::Uuid::new_v4()),
        "delivery" => uuid::Uuid::now_v7().to_string(),
        _ => (*pick(rng, &["fz-cron-0", "fz-cron-1", "w1", "nobody"])).to_owned(),
    }
}

fn query(rng: &mut StdRng) -> String {
    if rng.random_bool(0.6) {
        return String::new();
    }
    let keys = [
        "limit",
        "offset",
        "per_page",
        "page",
        "queue",
        "queues",
        "types",
        "after",
        "state",
        "subscription_id",
        "before",
    ];
    let values = [
        "0",
        "1",
        "50",
        "100",
        "101",
        "-1",
        "abc",
        "18446744073709551615",
        "1000001",
        "99999999999999999999999",
        "fz",
        "Bad!",
        "%FF",
        "",
        "1e3",
        "1.5",
    ];
    let n = rng.random_range(1..4);
    let pairs: Vec<String> = (0..n)
        .map(|_| format!("{}={}", pick(rng, &keys), pick(rng, &values)))
        .collect();
    format!("?{}", pairs.join("&"))
}

/// One request of case `n`: (method, path and query, headers, body).
type Request = (Method, String, Vec<(String, String)>, Option<Vec<u8>>);

fn generate(seed: u64, n: u64, t: &Targets) -> Request {
    let mut rng = StdRng::seed_from_u64(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let (route_method, template) = *pick(&mut rng, ROUTES);
    let method = if rng.random_bool(0.1) {
        *pick(&mut rng, &METHODS)
    } else {
        route_method
    };
    let mut path = String::new();
    for part in template.split('/').skip(1) {
        path.push('/');
        match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            Some(kind) => path.push_str(&segment(&mut rng, kind, t)),
            None => path.push_str(part),
        }
    }
    if rng.random_bool(0.03) {
        path.push_str("/extra");
    }
    path.push_str(&query(&mut rng));

    let mut headers = Vec::new();
    let content_type = if rng.random_bool(0.9) {
        *pick(
            &mut rng,
            &["application/openjobspec+json", "application/json"],
        )
    } else {
        *pick(
            &mut rng,
            &[
                "text/plain",
                "application/json; charset=latin1",
                "",
                "application/x-protobuf",
                "multipart/form-data; boundary=x",
            ],
        )
    };
    if rng.random_bool(0.15) {
        let accept = *pick(
            &mut rng,
            &[
                "text/html",
                "*/*",
                "application/json;q=0",
                "application/x-protobuf",
                "application/*;q=abc",
            ],
        );
        headers.push(("accept".to_owned(), accept.to_owned()));
    }
    if rng.random_bool(0.1) {
        let version = *pick(&mut rng, &["1.0", "0.9", "1.0.0-rc.1", "banana", ""]);
        headers.push(("ojs-version".to_owned(), version.to_owned()));
    }
    if rng.random_bool(0.05) {
        headers.push((
            "x-request-id".to_owned(),
            "r".repeat(rng.random_range(1..9000)),
        ));
    }
    if rng.random_bool(0.05) {
        headers.push((
            "x-fuzz-padding".to_owned(),
            "p".repeat(rng.random_range(1..16_000)),
        ));
    }
    if rng.random_bool(0.05) {
        headers.push(("authorization".to_owned(), "Bearer ojs_garbage".to_owned()));
    }
    if rng.random_bool(0.03) {
        headers.push(("content-encoding".to_owned(), "gzip".to_owned()));
    }

    let mut body = body_for(&mut rng, route_method, template, t).map(|mut v| {
        for _ in 0..rng.random_range(0..4) {
            mutate_json(&mut rng, &mut v, 0);
        }
        v.to_string().into_bytes()
    });
    match rng.random_range(0..20) {
        0 => body = Some(Vec::new()),
        1 => body = Some(hostile(&mut rng).to_string().into_bytes()),
        2 | 3 => {
            if let Some(b) = body.as_mut() {
                mutate_bytes(&mut rng, b);
            }
        }
        _ => {}
    }
    if body.is_some() && !content_type.is_empty() {
        headers.push(("content-type".to_owned(), content_type.to_owned()));
    }
    let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
    (method, path, headers, body)
}

/// What was wrong with one answer, if anything.
fn judge(
    status: u16,
    headers: &reqwest::header::HeaderMap,
    raw: &[u8],
    head: bool,
    cloudq: bool,
) -> Option<String> {
    let body: Value = serde_json::from_slice(raw).unwrap_or(Value::Null);
    // The Cloudq compatibility routes answer their own errors in Cloudq's shape (what
    // the server refuses before a route, e.g. a method or an Accept, is in the OJS shape).
    let cloudq_error =
        body["status"] == "error" && body["message"].as_str().is_some_and(|m| !m.is_empty());
    if cloudq && cloudq_error {
        if status >= 500 && !(status == 503 && headers.contains_key("retry-after")) {
            return Some(format!("{status} that is not a retryable storage 503"));
        }
        return None;
    }
    let err = &body["error"];
    if status >= 500 {
        let retry_after = headers.contains_key("retry-after");
        if !(status == 503
            && err["code"] == "backend_error"
            && err["retryable"] == true
            && retry_after)
        {
            return Some(format!("{status} that is not a retryable storage 503"));
        }
    }
    let ojs_error = err["code"].as_str().is_some_and(|c| !c.is_empty())
        && err["message"].as_str().is_some_and(|m| !m.is_empty())
        && err["retryable"].is_boolean()
        && err["request_id"].as_str().is_some_and(|r| !r.is_empty());
    if status >= 400 && !head && !ojs_error {
        return Some(format!("{status} without an OJS error body"));
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_survives_generated_and_mutated_requests() -> anyhow::Result<()> {
    let seconds: u64 = std::env::var("OJS_FUZZ_HTTP_SECONDS")
        .or_else(|_| std::env::var("OJS_FUZZ_SECONDS"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("OJS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    let only_case: Option<u64> = std::env::var("OJS_FUZZ_CASE")
        .ok()
        .and_then(|s| s.parse().ok());
    println!("fuzz_http: seed {seed}, {seconds} s (OJS_FUZZ_SEED={seed} replays it)");

    let app = TestApp::spawn().await?;
    let mut jobs = Vec::new();
    for i in 0..4 {
        let r = app
            .push(json!({"type": "fz.job", "args": [i], "options": {"queue": QUEUES[i % 2]}}))
            .await?;
        jobs.push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    app.fetch(json!({"queues": ["fz"], "worker_id": "w1"}))
        .await?;
    let flow = app
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "chain", "steps": [{"id": "a", "type": "fz.job", "args": [], "options": {"queue": "fz-b"}}]})),
        )
        .await?;
    let workflow = flow.body["workflow"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let targets = Targets { jobs, workflow };

    // One connection per case: a server may answer before reading a body and close.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(0)
        .build()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    let mut failures: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut n: u64 = only_case.unwrap_or(0);
    let mut cases = 0_u64;
    let workers = 4;
    while Instant::now() < deadline {
        let batch: Vec<u64> = (n..n + workers).collect();
        n += workers;
        let answers = futures::future::join_all(batch.into_iter().map(|case| {
            let (method, path, headers, body) = generate(seed, case, &targets);
            let head = method == Method::HEAD;
            let cloudq = path.starts_with("/cloudq/");
            let label = format!(
                "{method} {:.120} {:.200}",
                path,
                body.as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default()
            );
            let mut req = client
                .request(method, format!("{}{path}", app.base_url))
                .header("x-request-id", format!("req_fz-{case}"));
            for (k, v) in headers {
                req = req.header(k, v);
            }
            if let Some(b) = body {
                req = req.body(b);
            }
            async move {
                let verdict = match req.send().await {
                    Err(e) => Err(format!("no answer: {e}")),
                    Ok(res) => {
                        let status = res.status().as_u16();
                        let headers = res.headers().clone();
                        match res.bytes().await {
                            Err(e) => Err(format!("{status}, body cut: {e}")),
                            Ok(raw) => match judge(status, &headers, &raw, head, cloudq) {
                                Some(wrong) => {
                                    Err(format!("{wrong}: {:.300}", String::from_utf8_lossy(&raw)))
                                }
                                None => Ok(status),
                            },
                        }
                    }
                };
                (case, label, verdict)
            }
        }))
        .await;
        for (case, label, verdict) in answers {
            cases += 1;
            match verdict {
                Ok(status) => *statuses.entry(status).or_default() += 1,
                Err(wrong) => {
                    *statuses.entry(0).or_default() += 1;
                    let kind = wrong.chars().take(60).collect::<String>();
                    failures
                        .entry(kind)
                        .or_insert((case, format!("{label}\n      -> {wrong}")));
                }
            }
        }
        if only_case.is_some() {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "fuzz_http: {cases} cases in {elapsed:.1} s ({:.0} cases/s), statuses {statuses:?}",
        cases as f64 / elapsed
    );

    // No queue is wedged: a normal job in each is still delivered and acknowledged.
    for q in QUEUES {
        let _ = app
            .call(Method::POST, &format!("/ojs/v1/queues/{q}/resume"), None)
            .await?;
        let _ = app
            .call(
                Method::DELETE,
                &format!("/ojs/v1/admin/queues/{q}/rate-limit"),
                None,
            )
            .await?;
        let pushed = app
            .push(
                json!({"type": "after.fuzz", "args": [], "options": {"queue": q, "priority": 100}}),
            )
            .await?;
        anyhow::ensure!(
            pushed.status == 201,
            "PUSH to {q} after fuzzing: {:?}",
            pushed.body
        );
        let id = pushed.body["job"]["id"].clone();
        let mut got = false;
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            let f = app
                .fetch(json!({"queues": [q], "count": 100, "worker_id": "after"}))
                .await?;
            anyhow::ensure!(
                f.status == 200 || f.status == 429,
                "FETCH {q}: {} {:?}",
                f.status,
                f.body
            );
            let delivered = f.body["jobs"].as_array().cloned().unwrap_or_default();
            for j in &delivered {
                let _ = app
                    .ack(json!({"job_id": j["id"], "worker_id": "after"}))
                    .await?;
            }
            if delivered.iter().any(|j| j["id"] == id) {
                got = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::ensure!(got, "queue {q} is wedged after fuzzing");
    }
    app.teardown().await;
    let report: Vec<String> = failures
        .values()
        .map(|(case, what)| {
            format!("  case {case} (OJS_FUZZ_SEED={seed} OJS_FUZZ_CASE={case}): {what}")
        })
        .collect();
    anyhow::ensure!(
        failures.is_empty(),
        "{} kinds of wrong answer:\n{}",
        failures.len(),
        report.join("\n")
    );
    Ok(())
}
