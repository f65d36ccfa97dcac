//! Hostile and broken input, table-driven over every endpoint: malformed JSON, wrong
//! types, missing fields, bodies over the limits, deep nesting, invalid UTF-8, invalid
//! ids, wrong media types, unknown or corrupt content codings and decompression bombs,
//! unknown paths and methods. Each case gets its status and an
//! OJS error body (`{"error": {"code", "message", "retryable": false, "request_id"}}`),
//! and afterwards the table holds exactly what it held before: nothing was written.

use crate::compress::{gzip, zstd};
use ojs_tests::fault_proxy::table_items;
use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

const OJS_JSON: &str = "application/openjobspec+json";

/// One bad request and the answer it must get.
struct Case {
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    content_encoding: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
}

fn case(
    method: Method,
    path: &str,
    body: impl Into<Vec<u8>>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        method,
        path: path.to_owned(),
        content_type: Some(OJS_JSON),
        content_encoding: None,
        body: body.into(),
        status,
        code,
    }
}

fn json_case(method: Method, path: &str, body: Value, status: u16, code: &'static str) -> Case {
    case(method, path, body.to_string(), status, code)
}

/// Blanks of twice `limit`, packed with gzip and with zstd (a few KB each): one packed
/// MiB repeated (gzip members, zstd frames), since packing the whole would be slow in a
/// debug build.
fn bombs(limit: usize) -> (Vec<u8>, Vec<u8>) {
    let mib = vec![b' '; 1024 * 1024];
    let times = 2 * limit / mib.len();
    (gzip(&mib).repeat(times), zstd(&mib).repeat(times))
}

/// A body in `coding`.
fn encoded(mut c: Case, coding: &'static str) -> Case {
    c.content_encoding = Some(coding);
    c
}

/// About 870 KB of short strings: under the 1 MiB body limit, over a 400 KB item.
fn many_strings() -> Vec<String> {
    (0..9000).map(|i| format!("{i:0>94}")).collect()
}

fn nested(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = json!([v]);
    }
    v
}

/// Endpoints that read a JSON body (method, path, body size limit).
fn body_endpoints() -> Vec<(Method, String, usize)> {
    const MIB: usize = 1024 * 1024;
    vec![
        (Method::POST, "/ojs/v1/jobs".into(), MIB),
        (Method::POST, "/ojs/v1/jobs/batch".into(), 5 * MIB),
        (Method::POST, "/ojs/v1/workers/fetch".into(), MIB),
        (Method::POST, "/ojs/v1/workers/ack".into(), MIB),
        (Method::POST, "/ojs/v1/workers/nack".into(), MIB),
        (Method::POST, "/ojs/v1/workers/heartbeat".into(), MIB),
        (Method::POST, "/ojs/v1/cron".into(), MIB),
        (Method::POST, "/ojs/v1/workflows".into(), MIB),
        (Method::POST, "/ojs/v1/schemas".into(), MIB),
        (
            Method::PUT,
            "/ojs/v1/admin/queues/bad-input/rate-limit".into(),
            MIB,
        ),
    ]
}

fn cases(held: &str) -> Vec<Case> {
    let v4 = "550e8400-e29b-41d4-a716-446655440000";
    let unknown = uuid::Uuid::now_v7().to_string();
    let mut cases = Vec::new();

    // Every body-reading endpoint: the same syntactic failures get the same answers.
    for (method, path, limit) in body_endpoints() {
        let syntax: [(&[u8], u16, &str); 6] = [
            (b"{ invalid json }", 400, "invalid_payload"),
            (b"", 400, "invalid_payload"),
            (
                b"{\"type\": \"a\", \"args\": [\"\xff\xfe\"]}",
                400,
                "invalid_payload",
            ),
            (b"{\"type\": \"a\"", 400, "invalid_payload"),
            (b"\xef\xbb\xbf{}", 400, "invalid_payload"),
            (b"{\"a\":1}{\"b\":2}", 400, "invalid_payload"),
        ];
        for (body, status, code) in syntax {
            cases.push(case(method.clone(), &path, body, status, code));
        }
        // 100,000 levels: refused by the parser's recursion limit, not by a stack overflow.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        cases.push(case(method.clone(), &path, deep, 400, "invalid_payload"));
        for ct in [
            "text/plain",
            "application/xml",
            "application/x-www-form-urlencoded",
            "json",
        ] {
            let mut c = case(method.clone(), &path, "{}", 415, "unsupported_media_type");
            c.content_type = Some(ct);
            cases.push(c);
        }
        let huge = format!(
            "{{\"type\":\"a\",\"args\":[\"{}\"]}}",
            "x".repeat(limit + 10)
        );
        cases.push(case(method.clone(), &path, huge, 413, "envelope_too_large"));
        // Compressed: the limit applies to the body inflated, which is never inflated past
        // it (a few KB that inflate to twice the limit); a coding the server does not
        // decode is 415, a body that is not what its coding says 400.
        let (gz, zst) = bombs(limit);
        cases.push(encoded(
            case(method.clone(), &path, gz, 413, "envelope_too_large"),
            "gzip",
        ));
        cases.push(encoded(
            case(method.clone(), &path, zst, 413, "envelope_too_large"),
            "zstd",
        ));
        for coding in ["gzip", "zstd"] {
            let c = case(method.clone(), &path, "{}", 400, "invalid_payload");
            cases.push(encoded(c, coding));
        }
        for coding in ["br", "deflate", "gzip, zstd"] {
            let c = case(
                method.clone(),
                &path,
                gzip(b"{}"),
                415,
                "unsupported_compression",
            );
            cases.push(encoded(c, coding));
        }
        // The admin rate-limit endpoint (not part of the binding) answers any invalid
        // policy, whatever its shape, with the rate-limit parser's 422 validation_error.
        let (status, code) = if path.ends_with("/rate-limit") {
            (422, "validation_error")
        } else {
            (400, "invalid_request")
        };
        for scalar in [json!(42), json!("x"), json!(null), json!(true)] {
            cases.push(json_case(method.clone(), &path, scalar, status, code));
        }
        if path != "/ojs/v1/workers/heartbeat" {
            // An empty object misses required fields everywhere but a heartbeat.
            cases.push(json_case(method.clone(), &path, json!({}), status, code));
        }
    }

    // PUSH: missing fields, wrong types, out-of-range values, limits.
    let push = |body: Value, status: u16, code: &'static str| {
        json_case(Method::POST, "/ojs/v1/jobs", body, status, code)
    };
    // `args` has no limit of its own; a job must fit the request the store keeps.
    let big_args = json!({"type": "a", "args": ["x".repeat(ojs_store::MAX_STORED_REQUEST_BYTES)]});
    let big_meta = json!({"type": "a", "args": [], "meta": {"m": "x".repeat(64 * 1024)}});
    for (body, status, code) in [
        (json!([1, 2]), 400, "invalid_request"),
        (json!({"args": []}), 400, "invalid_request"),
        (json!({"type": "a"}), 400, "invalid_request"),
        (json!({"type": 3, "args": []}), 400, "invalid_request"),
        (json!({"type": "", "args": []}), 400, "invalid_request"),
        (
            json!({"type": "Bad Type!", "args": []}),
            400,
            "invalid_request",
        ),
        (json!({"type": "a", "args": "x"}), 400, "invalid_request"),
        (
            json!({"type": "a", "args": {"k": 1}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [nested(10)]}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "id": v4}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "id": "not-a-uuid"}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "id": 7}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": "fast"}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"queue": "Bad Queue"}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"queue": 5}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"priority": 101}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"priority": "high"}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"priority": 1.5}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"timeout_ms": -1}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"delay_until": "tomorrow"}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"delay_until": "2026-01-01T00:00:00"}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"retry": "often"}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"tags": [1]}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "options": {"unique": "yes"}}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "meta": []}),
            400,
            "invalid_request",
        ),
        (
            json!({"type": "a", "args": [], "specversion": "2.0"}),
            400,
            "invalid_request",
        ),
        (big_args, 413, "envelope_too_large"),
        (big_meta, 413, "envelope_too_large"),
        // Fields without a limit of their own still cannot outgrow the job's item.
        (
            json!({"type": "a", "args": [], "options": {"tags": many_strings()}}),
            413,
            "envelope_too_large",
        ),
        (
            json!({"type": "a", "args": [], "options": {"retry": {"non_retryable_errors": many_strings()}}}),
            413,
            "envelope_too_large",
        ),
        (
            json!({"type": "a", "args": [], "options": {"unique": {"keys": ["type"], "x": many_strings()}}}),
            413,
            "envelope_too_large",
        ),
    ] {
        cases.push(push(body, status, code));
    }

    // Batch: the whole batch is refused when any job is.
    let batch = |body: Value, status: u16, code: &'static str| {
        json_case(Method::POST, "/ojs/v1/jobs/batch", body, status, code)
    };
    let good = json!({"type": "a", "args": []});
    let many: Vec<Value> = (0..1001).map(|_| good.clone()).collect();
    for (body, status, code) in [
        (json!({"jobs": []}), 400, "invalid_request"),
        (json!({"jobs": "x"}), 400, "invalid_request"),
        (json!([]), 400, "invalid_request"),
        (
            json!({"jobs": [good, {"type": "a"}]}),
            400,
            "invalid_request",
        ),
        (
            json!({"jobs": [good, {"type": "a", "args": [nested(11)]}]}),
            400,
            "invalid_request",
        ),
        (json!({"jobs": many}), 422, "validation_error"),
        (
            json!({"jobs": [good, {"type": "a", "args": [], "tags": many_strings()}]}),
            413,
            "envelope_too_large",
        ),
    ] {
        cases.push(batch(body, status, code));
    }

    // Workers: types, ranges and ids. `held` is a real active job: none of this may touch it.
    let w = |path: &str, body: Value, status: u16, code: &'static str| {
        json_case(Method::POST, path, body, status, code)
    };
    let (fetch, ack, nack, beat) = (
        "/ojs/v1/workers/fetch",
        "/ojs/v1/workers/ack",
        "/ojs/v1/workers/nack",
        "/ojs/v1/workers/heartbeat",
    );
    let huge_result = json!({"job_id": held, "result": "x".repeat(1024 * 1024)});
    // Under the 1 MiB body limit, over the 400 KB storage item.
    let big_result = json!({"job_id": held, "result": many_strings()});
    for c in [
        w(fetch, json!({"queues": []}), 400, "invalid_request"),
        w(
            fetch,
            json!({"queues": "bad-input"}),
            400,
            "invalid_request",
        ),
        w(
            fetch,
            json!({"queues": ["Bad Queue"]}),
            400,
            "invalid_request",
        ),
        w(fetch, json!({"queues": [7]}), 400, "invalid_request"),
        w(
            fetch,
            json!({"queues": ["bad-input"], "count": 0}),
            400,
            "invalid_request",
        ),
        w(
            fetch,
            json!({"queues": ["bad-input"], "count": 101}),
            400,
            "invalid_request",
        ),
        w(
            fetch,
            json!({"queues": ["bad-input"], "count": "3"}),
            400,
            "invalid_request",
        ),
        w(
            fetch,
            json!({"queues": ["bad-input"], "visibility_timeout_ms": -5}),
            400,
            "invalid_request",
        ),
        w(
            fetch,
            json!({"queues": ["bad-input"], "worker_id": 7}),
            400,
            "invalid_request",
        ),
        w(
            fetch,
            json!({"queues": ["bad-input"], "worker_id": "x".repeat(300)}),
            400,
            "invalid_request",
        ),
        w(ack, json!({"job_id": 42}), 400, "invalid_request"),
        w(ack, json!({"job_id": "not-a-uuid"}), 400, "invalid_request"),
        w(ack, json!({"job_id": v4}), 400, "invalid_request"),
        w(
            ack,
            json!({"job_id": held, "worker_id": ""}),
            400,
            "invalid_request",
        ),
        w(ack, json!({"job_id": unknown}), 404, "not_found"),
        w(
            ack,
            json!({"job_id": held, "attempt": 0}),
            400,
            "invalid_request",
        ),
        w(
            ack,
            json!({"job_id": held, "attempt": "1"}),
            400,
            "invalid_request",
        ),
        // Fenced: another attempt or another worker than the holder's.
        w(ack, json!({"job_id": held, "attempt": 9}), 409, "conflict"),
        w(
            ack,
            json!({"job_id": held, "worker_id": "intruder"}),
            409,
            "conflict",
        ),
        w(
            nack,
            json!({"job_id": held, "attempt": 2, "error": {"message": "x"}}),
            409,
            "conflict",
        ),
        w(
            nack,
            json!({"job_id": held, "attempt": -1, "error": {"message": "x"}}),
            400,
            "invalid_request",
        ),
        w(ack, huge_result, 413, "envelope_too_large"),
        w(ack, big_result, 413, "envelope_too_large"),
        w(
            nack,
            json!({"job_id": held, "error": 7}),
            400,
            "invalid_request",
        ),
        w(
            nack,
            json!({"job_id": held, "error": {"retryable": "yes"}}),
            400,
            "invalid_request",
        ),
        w(
            nack,
            json!({"job_id": held, "requeue": "yes"}),
            400,
            "invalid_request",
        ),
        w(
            nack,
            json!({"error": {"message": "x"}}),
            400,
            "invalid_request",
        ),
        w(
            nack,
            json!({"job_id": unknown, "error": {"message": "x"}}),
            404,
            "not_found",
        ),
        w(beat, json!({"active_jobs": [held]}), 400, "invalid_request"),
        w(
            beat,
            json!({"worker_id": "w", "active_jobs": ["nope"]}),
            400,
            "invalid_request",
        ),
        w(
            beat,
            json!({"worker_id": "w", "active_jobs": "x"}),
            400,
            "invalid_request",
        ),
        w(
            beat,
            json!({"worker_id": "w", "active_jobs": [{"job_id": held, "attempt": 1.5}]}),
            400,
            "invalid_request",
        ),
        w(
            beat,
            json!({"worker_id": "w", "active_jobs": [{"attempt": 1}]}),
            400,
            "invalid_request",
        ),
        w(
            beat,
            json!({"worker_id": "w", "visibility_timeout_ms": 0}),
            400,
            "invalid_request",
        ),
    ] {
        cases.push(c);
    }

    // Ids and names in paths.
    for (method, path, status, code) in [
        (
            Method::GET,
            "/ojs/v1/jobs/not-a-uuid".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            format!("/ojs/v1/jobs/{v4}"),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/jobs/%FF%FE".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/jobs/%00".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            format!("/ojs/v1/jobs/{}", "a".repeat(5000)),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            format!("/ojs/v1/jobs/{unknown}"),
            404,
            "not_found",
        ),
        (
            Method::DELETE,
            "/ojs/v1/jobs/not-a-uuid".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            format!("/ojs/v1/jobs/{unknown}"),
            404,
            "not_found",
        ),
        (
            Method::POST,
            "/ojs/v1/dead-letter/nope/retry".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            format!("/ojs/v1/dead-letter/{held}/retry"),
            404,
            "not_found",
        ),
        (
            Method::DELETE,
            "/ojs/v1/dead-letter/nope".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            format!("/ojs/v1/dead-letter/{held}"),
            404,
            "not_found",
        ),
        (
            Method::GET,
            "/ojs/v1/workflows/nope".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            "/ojs/v1/workflows/nope".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            format!("/ojs/v1/workflows/{unknown}"),
            404,
            "not_found",
        ),
        (
            Method::GET,
            "/ojs/v1/queues/Bad%20Queue/stats".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/ojs/v1/queues/Bad!/pause".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/ojs/v1/queues/Bad!/resume".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            "/ojs/v1/admin/queues/Bad!/rate-limit".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::DELETE,
            "/ojs/v1/cron/nobody".to_owned(),
            404,
            "not_found",
        ),
        (
            Method::GET,
            "/ojs/v1/schemas/not%20a%20uri".to_owned(),
            404,
            "not_found",
        ),
        (
            Method::DELETE,
            "/ojs/v1/schemas/urn:ojs:schema:nobody:v1".to_owned(),
            404,
            "not_found",
        ),
        (
            Method::POST,
            "/ojs/v1/admin/workers/w/explode".to_owned(),
            404,
            "not_found",
        ),
        (
            Method::POST,
            "/ojs/v1/admin/workers/nobody/quiet".to_owned(),
            404,
            "not_found",
        ),
        // Query parameters.
        (
            Method::GET,
            "/ojs/v1/queues?limit=abc".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/queues?limit=1000".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/queues?offset=-1".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/queues?limit=1&limit=2".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/dead-letter?queue=Bad!".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/dead-letter?limit=x".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/cron?offset=x".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/schemas?limit=-1".to_owned(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/events?limit=x".to_owned(),
            400,
            "invalid_request",
        ),
        // Unknown paths and methods.
        (Method::GET, "/".to_owned(), 404, "not_found"),
        (Method::GET, "/ojs/v1/nope".to_owned(), 404, "not_found"),
        (Method::GET, "/ojs/v2/jobs".to_owned(), 404, "not_found"),
        (
            Method::POST,
            "/ojs/v1/jobs/batch/extra".to_owned(),
            404,
            "not_found",
        ),
        (Method::GET, "/ojs/v1/jobs/".to_owned(), 404, "not_found"),
        (
            Method::PUT,
            "/ojs/v1/jobs".to_owned(),
            405,
            "method_not_allowed",
        ),
        (
            Method::GET,
            "/ojs/v1/jobs".to_owned(),
            405,
            "method_not_allowed",
        ),
        (
            Method::PATCH,
            format!("/ojs/v1/jobs/{held}"),
            405,
            "method_not_allowed",
        ),
        (
            Method::DELETE,
            "/ojs/v1/workers/fetch".to_owned(),
            405,
            "method_not_allowed",
        ),
        (
            Method::GET,
            "/ojs/v1/workers/ack".to_owned(),
            405,
            "method_not_allowed",
        ),
        (
            Method::POST,
            "/ojs/v1/health".to_owned(),
            405,
            "method_not_allowed",
        ),
        (
            Method::DELETE,
            "/ojs/manifest".to_owned(),
            405,
            "method_not_allowed",
        ),
        (
            Method::PUT,
            "/ojs/v1/queues".to_owned(),
            405,
            "method_not_allowed",
        ),
    ] {
        let mut c = case(method, &path, Vec::new(), status, code);
        c.content_type = None;
        cases.push(c);
    }
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_bad_input_with_an_ojs_error_and_writes_nothing(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let pushed = app
        .push(json!({"type": "held.job", "args": [], "options": {"queue": "bad-input", "visibility_timeout_ms": 600000}}))
        .await?;
    let held = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let fetched = app
        .fetch(json!({"queues": ["bad-input"], "worker_id": "holder"}))
        .await?;
    anyhow::ensure!(
        fetched.body["jobs"][0]["id"] == held.as_str(),
        "{:?}",
        fetched.body
    );
    let before = table_items(app.store.table()).await?;

    let cases = cases(&held);
    // A server may answer an oversized body before reading it and then close the
    // connection: one connection per case keeps that from failing the next case.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let mut failures = Vec::new();
    for (n, c) in cases.iter().enumerate() {
        let request_id = format!("req_bad-input-{n}");
        let mut req = client
            .request(c.method.clone(), format!("{}{}", app.base_url, c.path))
            .header("x-request-id", &request_id)
            .body(c.body.clone());
        if let Some(ct) = c.content_type {
            req = req.header("content-type", ct);
        }
        if let Some(coding) = c.content_encoding {
            req = req.header("content-encoding", coding);
        }
        let res = req.send().await?;
        let status = res.status().as_u16();
        let content_type = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let version = res.headers().get("ojs-version").cloned();
        let raw = res.bytes().await?;
        let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        let shown = String::from_utf8_lossy(&c.body);
        let label = format!(
            "#{n} {} {} [{} {}] {:.80}",
            c.method,
            c.path.chars().take(80).collect::<String>(),
            c.content_type.unwrap_or("-"),
            c.content_encoding.unwrap_or("-"),
            shown
        );
        let err = &body["error"];
        let mut wrong = Vec::new();
        if status != c.status {
            wrong.push(format!("status {status}, want {}", c.status));
        }
        if err["code"] != c.code {
            wrong.push(format!("code {}, want {}", err["code"], c.code));
        }
        if err["retryable"] != false {
            wrong.push("retryable is not false".to_owned());
        }
        if err["message"].as_str().is_none_or(str::is_empty) {
            wrong.push("no message".to_owned());
        }
        if err["request_id"] != request_id.as_str() {
            wrong.push(format!("request_id {}", err["request_id"]));
        }
        if content_type != ojs_http::JSON_CONTENT_TYPE || version.is_none() {
            wrong.push(format!(
                "content-type {content_type:?}, OJS-Version {version:?}"
            ));
        }
        if !wrong.is_empty() {
            let text = String::from_utf8_lossy(&raw);
            failures.push(format!(
                "{label}\n    {}\n    body: {:.300}",
                wrong.join("; "),
                text
            ));
        }
    }

    let after = table_items(app.store.table()).await?;
    let key = |i: &ojs_tests::fault_proxy::RawItem| format!("{:?}/{:?}", i.get("pk"), i.get("sk"));
    let sorted = |i: &ojs_tests::fault_proxy::RawItem| {
        format!(
            "{:?}",
            i.iter().collect::<std::collections::BTreeMap<_, _>>()
        )
    };
    // The in-process stream consumer's catch-up mark (reads of stats raise it) is the
    // test rig's, not the API's: it is never written on AWS.
    let ours = |i: &&ojs_tests::fault_proxy::RawItem| {
        i.get("pk").and_then(|v| v.as_s().ok()).map(String::as_str) != Some("LOCAL#CATCHUP")
    };
    let mut b: Vec<_> = before
        .iter()
        .filter(ours)
        .map(|i| (key(i), sorted(i)))
        .collect();
    let mut a: Vec<_> = after
        .iter()
        .filter(ours)
        .map(|i| (key(i), sorted(i)))
        .collect();
    b.sort();
    a.sort();
    if a != b {
        let added: Vec<_> = a.iter().filter(|x| !b.contains(x)).map(|x| &x.0).collect();
        let removed: Vec<_> = b.iter().filter(|x| !a.contains(x)).map(|x| &x.0).collect();
        failures.push(format!(
            "the table changed: added or changed {added:?}, removed or changed {removed:?}"
        ));
    }
    let info = app.info(&held).await?;
    if info.body["job"]["state"] != "active" || info.body["job"]["worker_id"] != "holder" {
        failures.push(format!("the held job changed: {}", info.body["job"]));
    }
    println!(
        "{} bad-input cases, {} failures",
        cases.len(),
        failures.len()
    );
    app.teardown().await;
    anyhow::ensure!(
        failures.is_empty(),
        "{} of {} cases answered wrongly:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    Ok(())
}

/// A hostile worker cannot wedge a job with its error reports: an oversized error is cut
/// down to its type and message, and the history keeps the latest 20, so a job failed 25
/// times with 60 KB reports (1.5 MB in all, four times the 400 KB item limit) can still be
/// failed, fetched and completed.
#[tokio::test]
async fn oversized_error_reports_cannot_wedge_a_job() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let pushed = app
        .push(json!({"type": "wedge.job", "args": [], "options": {"queue": "wedge",
            "retry": {"max_attempts": 30, "initial_interval": "PT0.01S", "backoff_coefficient": 1.0, "jitter": false}}}))
        .await?;
    let id = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let details = json!({"dump": "x".repeat(60 * 1024)});
    for attempt in 1..=26 {
        let mut got = Value::Null;
        for _ in 0..50 {
            let f = app
                .fetch(json!({"queues": ["wedge"], "worker_id": "w"}))
                .await?;
            got = f.body["jobs"][0].clone();
            if !got.is_null() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        anyhow::ensure!(got["attempt"] == attempt, "attempt {attempt}: {got}");
        if attempt == 26 {
            break;
        }
        let failed = app
            .nack(json!({"job_id": id, "worker_id": "w",
                "error": {"type": "big", "message": format!("failure {attempt}"), "details": details}}))
            .await?;
        anyhow::ensure!(
            failed.status == 200 && failed.body["state"] == "retryable",
            "FAIL {attempt}: {} {}",
            failed.status,
            failed.body
        );
    }
    let info = app.info(&id).await?.body;
    let errors = info["job"]["errors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(errors.len(), 20, "the latest 20 errors are kept");
    assert_eq!(errors[0]["message"], "failure 6");
    assert_eq!(errors[19]["message"], "failure 25");
    assert!(errors.iter().all(|e| e["details"]["truncated"].is_string()));
    let ack = app.ack(json!({"job_id": id, "worker_id": "w"})).await?;
    assert_eq!(ack.status, 200, "{}", ack.body);
    app.teardown().await;
    Ok(())
}
