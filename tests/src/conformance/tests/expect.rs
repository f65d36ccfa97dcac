//! `expect`, `capture` / `captures`, `${name}` / `{{name}}` references, `repeat`, and the
//! unsupported SDK-style constructs (`request`, `store`), run against a small echo
//! server: every request is answered with its own method, path, `X-Job` header and
//! body, plus fixed fields (`id`, `state`, `jobs`).

use crate::conformance::expect::to_assertions;
use crate::conformance::{run_case, Case, CaseReport};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Uri};
use axum::Json;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

type Seen = Arc<Mutex<Vec<String>>>;

/// Starts the echo server; returns its base URL and the `METHOD path` of every request.
async fn echo_server() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let router = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let log = log.clone();
            async move {
                if let Ok(mut l) = log.lock() {
                    l.push(format!("{method} {}", uri.path()));
                }
                let x_job = headers
                    .get("x-job")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                Json(json!({
                    "id": "job-123",
                    "nothing": null,
                    "method": method.as_str(),
                    "path": uri.path(),
                    "x_job": x_job,
                    "body": serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
                    "state": {"step": "second", "pipeline": {"stages": [{"name": "extract"}]}},
                    "jobs": [{"attempt": 2}]
                }))
            }
        },
    );
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => panic!("bind: {e}"),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => panic!("local_addr: {e}"),
    };
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (format!("http://{addr}"), seen)
}

async fn run(steps: Value) -> (CaseReport, Vec<String>) {
    let case = match Case::from_value(
        std::path::Path::new("ext-x/case.json"),
        &json!({"test_id": "T", "level": "ext", "steps": steps}),
    ) {
        Ok(c) => c,
        Err(e) => panic!("case should parse: {e:#}"),
    };
    let (base, seen) = echo_server().await;
    let report = run_case(&reqwest::Client::new(), &base, &case).await;
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    (report, seen)
}

#[test]
fn expect_converts_to_assertions() {
    let expect = json!({
        "status": 201,
        "status_in": [200, 201],
        "body": {"state": "available", "jobs[0].type": "t", "$.id": "string", "[0]": 1},
        "body.state.step": 2,
        "body.jobs[0].attempt": {"$gte": 1}
    });
    assert_eq!(
        to_assertions(&expect),
        Ok(json!({
            "status": 201,
            "status_in": [200, 201],
            "body": {
                "$.state": "available",
                "$.jobs[0].type": "t",
                "$.id": "string",
                "$[0]": 1,
                "$.state.step": 2,
                "$.jobs[0].attempt": {"$gte": 1}
            }
        }))
    );
    assert!(to_assertions(&json!([1])).is_err());
    assert!(to_assertions(&json!({"body": 3})).is_err());
}

#[tokio::test]
async fn expect_status_is_checked() {
    let (report, _) = run(json!([
        {"id": "s1", "action": "POST", "path": "/jobs", "body": {}, "expect": {"status": 409}}
    ]))
    .await;
    assert!(!report.passed);
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    assert!(
        report.failures[0].starts_with("s1: expect status: expected 409, got 200"),
        "{:?}",
        report.failures
    );
    // The failed case's report carries each step's answer.
    assert_eq!(report.trace.len(), 1, "{:?}", report.trace);
    assert!(
        report.trace[0].starts_with("s1: 200 {"),
        "{:?}",
        report.trace
    );

    let (report, _) = run(json!([
        {"id": "s1", "action": "GET", "path": "/x", "expect": {"status_in": [201, 409]}}
    ]))
    .await;
    assert!(!report.passed, "status_in is checked: {report:?}");
}

#[tokio::test]
async fn expect_body_paths_are_checked() {
    let pass = json!([{
        "id": "s1", "action": "GET", "path": "/j",
        "expect": {
            "status": 200,
            "body.state.step": "second",
            "body.jobs[0].attempt": 2,
            "body.state.pipeline.stages[0].name": "extract",
            "body": {"method": "GET", "jobs[0].attempt": {"$in": [1, 2]}}
        }
    }]);
    let (report, _) = run(pass).await;
    assert!(report.passed, "{:?}", report.failures);
    assert!(report.trace.is_empty(), "a passed case traces nothing");

    for (key, value) in [
        ("body.state.step", json!("initial")),
        ("body.jobs[0].attempt", json!(1)),
        ("body.missing", json!("x")),
    ] {
        let (report, _) = run(json!([{
            "id": "s1", "action": "GET", "path": "/j",
            "expect": {"status": 200, key: value}
        }]))
        .await;
        assert!(!report.passed, "{key}: {value} must fail");
        assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    }
    let (report, _) = run(json!([{
        "id": "s1", "action": "GET", "path": "/j",
        "expect": {"body": {"state.step": "first"}}
    }]))
    .await;
    assert!(!report.passed);
}

#[tokio::test]
async fn captures_substitute_in_paths_headers_bodies_and_expectations() {
    let (report, seen) = run(json!([
        {"id": "s1", "action": "POST", "path": "/jobs", "body": {}, "expect": {"status": 200},
         "capture": {"job_id": "$.id"}},
        {"id": "s2", "action": "POST", "path": "/jobs/${job_id}/x",
         "headers": {"X-Job": "${job_id}"},
         "body": {"ref": "${job_id}", "nested": ["a-{{job_id}}"]},
         "expect": {
            "status": 200,
            "body.path": "/jobs/job-123/x",
            "body.x_job": "job-123",
            "body.body.ref": "${job_id}",
            "body.body.nested[0]": "a-job-123"
         }},
        {"id": "s3", "action": "GET", "path": "/admin/{{job_id}}",
         "captures": {"other": "$.path"},
         "assertions": {"status": 200, "body": {"$.path": "/admin/job-123"}}},
        {"id": "s4", "action": "GET", "path": "/again${other}",
         "assertions": {"body": {"$.path": "/again/admin/job-123"}}}
    ]))
    .await;
    assert!(report.passed, "{:?}", report.failures);
    assert_eq!(
        seen,
        vec![
            "POST /jobs",
            "POST /jobs/job-123/x",
            "GET /admin/job-123",
            "GET /again/admin/job-123"
        ]
    );
}

#[tokio::test]
async fn a_reference_never_captured_fails_the_step_without_a_request() {
    let (report, seen) = run(json!([
        {"id": "s1", "action": "POST", "path": "/jobs", "body": {}, "capture": {"job_id": "$.id"}},
        {"id": "s2", "action": "GET", "path": "/jobs/${jobid}", "expect": {"status": 200}}
    ]))
    .await;
    assert!(!report.passed);
    assert_eq!(
        report.failures,
        vec!["s2: ${jobid} refers to a value no earlier step captured"]
    );
    assert_eq!(
        seen,
        vec!["POST /jobs"],
        "the unresolved request is not sent"
    );

    let (report, _) = run(json!([
        {"id": "s1", "action": "GET", "path": "/x", "expect": {"body.x_job": "{{job_id}}"}}
    ]))
    .await;
    assert_eq!(
        report.failures,
        vec!["s1: {{job_id}} refers to a value no earlier step captured"]
    );
}

#[tokio::test]
async fn a_capture_that_resolves_nothing_fails() {
    for path in ["$.job.id", "$.nothing"] {
        let (report, _) = run(json!([
            {"id": "s1", "action": "POST", "path": "/jobs", "body": {},
             "expect": {"status": 200}, "capture": {"job_id": path}}
        ]))
        .await;
        assert!(!report.passed, "{path}");
        assert!(
            report.failures[0].starts_with("s1: capture \"job_id\": "),
            "{:?}",
            report.failures
        );
    }
}

#[tokio::test]
async fn repeat_sends_and_checks_every_request() {
    let (report, seen) = run(json!([
        {"id": "s1", "action": "POST", "path": "/jobs", "body": {}, "repeat": 3,
         "assertions": {"status": 200}},
        {"id": "s2", "action": "GET", "path": "/done", "assertions": {"status": 200}}
    ]))
    .await;
    assert!(report.passed, "{:?}", report.failures);
    assert_eq!(
        seen,
        vec!["POST /jobs", "POST /jobs", "POST /jobs", "GET /done"]
    );

    let (report, seen) = run(json!([
        {"id": "s1", "action": "POST", "path": "/jobs", "body": {}, "repeat": 2,
         "assertions": {"status": 201}}
    ]))
    .await;
    assert_eq!(seen.len(), 2);
    assert_eq!(
        report.failures,
        vec![
            "s1: repeat 1/2: status: expected 201, got 200",
            "s1: repeat 2/2: status: expected 201, got 200"
        ]
    );

    let (report, seen) = run(json!([
        {"id": "s1", "action": "POST", "path": "/jobs", "repeat": 0}
    ]))
    .await;
    assert!(seen.is_empty());
    assert!(report.failures[0].contains("unsupported construct \"repeat\""));
}

#[tokio::test]
async fn sdk_style_request_and_store_are_reported_unsupported() {
    let (report, seen) = run(json!([
        {"action": "push", "request": {"type": "t", "args": [], "queue": "q"},
         "expect": {"status": 201, "body": {"state": "available"}},
         "store": {"job_id": "id"}}
    ]))
    .await;
    assert!(seen.is_empty(), "nothing is sent: {seen:?}");
    assert!(!report.passed);
    assert_eq!(report.failures.len(), 2, "{:?}", report.failures);
    assert!(report.failures[0].starts_with("step#1: unsupported construct \"request\""));
    assert!(report.failures[1].starts_with("step#1: unsupported construct \"store\""));
}
