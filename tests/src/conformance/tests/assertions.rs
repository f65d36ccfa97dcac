use crate::conformance::assertions::{
    check_body, check_status, check_status_in, evaluate, Response,
};
use crate::conformance::template::StepContext;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use serde_json::{json, Map, Value};

fn response(status: u16, body: &str) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/openjobspec+json"),
    );
    Response {
        status,
        headers,
        raw: body.to_string(),
        parsed: serde_json::from_str(body).ok(),
        duration_ms: 120,
    }
}

fn ctx_with(id: &str, body: Value) -> StepContext {
    let mut ctx = StepContext::default();
    ctx.record(id, Some(200), Map::new(), Some(body));
    ctx
}

#[test]
fn status_forms() {
    assert!(check_status(&json!(201), 201).is_ok());
    assert!(check_status(&json!(201), 200).is_err());
    assert!(check_status(&json!("number:range(400,422)"), 400).is_ok());
    assert!(check_status(&json!("number:range(400,422)"), 422).is_ok());
    assert!(check_status(&json!("number:range(400,422)"), 500).is_err());
    assert!(check_status(&json!("one_of:400,422"), 422).is_ok());
    assert!(check_status(&json!("one_of:200, 201,409"), 201).is_ok());
    assert!(check_status(&json!("one_of:400,422"), 404).is_err());
    assert!(check_status(&json!("one_of:400,abc"), 400).is_err());
    assert!(check_status(&json!({"$in": [200, 409]}), 409).is_ok());
    assert!(check_status(&json!({"$in": [200, 409]}), 201).is_err());
    assert!(check_status(&json!(true), 200).is_err());
    assert!(check_status_in(&json!([200, 201]), 201).is_ok());
    assert!(check_status_in(&json!([200, 201]), 204).is_err());
    assert!(check_status_in(&json!(200), 200).is_err());
}

#[test]
fn body_paths_matchers_and_templates() {
    let ctx = ctx_with("step-1", json!({"job": {"id": "j-1"}}));
    let root =
        json!({"job": {"id": "j-1", "state": "available"}, "jobs": [{"id": "j-1", "state": "x"}]});
    let spec = json!({
        "$.job.id": "{{steps.step-1.response.body.job.id}}",
        "$.job.state": "available",
        "$.jobs[?(@.id=='{{steps.step-1.response.body.job.id}}')].state": "x",
        "$.job.error": "absent"
    });
    assert_eq!(
        check_body(&spec, Some(&root), false, &ctx),
        Vec::<String>::new()
    );
    let bad = json!({"$.job.state": "active", "$.job.id": "string:uuidv7"});
    assert_eq!(check_body(&bad, Some(&root), false, &ctx).len(), 2);
    // No JSON body: nothing resolves, so only absent-style matchers pass.
    assert_eq!(
        check_body(&json!({"$.job.id": "any"}), None, true, &ctx).len(),
        1
    );
    assert!(check_body(&json!({"$.job.id": "absent"}), None, true, &ctx).is_empty());
    assert_eq!(
        check_body(&json!({"$bogus": 1}), Some(&root), false, &ctx).len(),
        1
    );
}

#[test]
fn top_level_or_in_body() {
    let ctx = StepContext::default();
    let spec = json!({"$or": [{"$.jobs": {"$size": 0}}, {"$empty": true}]});
    assert!(check_body(&spec, Some(&json!({"jobs": []})), false, &ctx).is_empty());
    assert!(
        check_body(&spec, None, true, &ctx).is_empty(),
        "204 with no body"
    );
    assert_eq!(
        check_body(&spec, Some(&json!({"jobs": [1]})), false, &ctx).len(),
        1
    );
    let multi = json!({"$or": [
        {"$.job.state": {"$in": ["completed", "cancelled"]}},
        {"$.error.code": {"$in": ["invalid_request", "conflict"]}, "$.error.message": {"$exists": true}}
    ]});
    assert!(check_body(
        &multi,
        Some(&json!({"job": {"state": "cancelled"}})),
        false,
        &ctx
    )
    .is_empty());
    assert!(check_body(
        &multi,
        Some(&json!({"error": {"code": "conflict", "message": "m"}})),
        false,
        &ctx
    )
    .is_empty());
    assert_eq!(
        check_body(
            &multi,
            Some(&json!({"error": {"code": "conflict"}})),
            false,
            &ctx
        )
        .len(),
        1
    );
}

#[test]
fn evaluate_all_response_assertions() {
    let ctx = StepContext::default();
    let resp = response(200, r#"{"state":"completed","job":{"result":null}}"#);
    let ok = json!({
        "status": 200,
        "body": {"$.state": "completed"},
        "body_absent": ["$.job.result", "$.job.error"],
        "body_contains": ["\"state\":\"completed\""],
        "headers": {"content-type": "application/openjobspec+json", "Content-Type": {"$match": "application/(openjobspec\\+)?json"}},
        "timing_ms": {"less_than": 500, "greater_than": 100, "approximate": 150},
        "body_raw": "ignored"
    });
    assert_eq!(evaluate(&ok, Some(&resp), &ctx), Vec::<String>::new());
    let bad = json!({
        "status": 201,
        "body_absent": ["$.state"],
        "body_contains": ["nope"],
        "headers": {"X-Missing": "v", "Content-Type": "application/json"},
        "timing_ms": {"less_than": 120, "greater_than": 120, "approximate": 1000},
        "mystery": 1
    });
    assert_eq!(evaluate(&bad, Some(&resp), &ctx).len(), 9);
    assert_eq!(evaluate(&json!({"status": 200}), None, &ctx).len(), 1);
    assert_eq!(evaluate(&json!([1]), Some(&resp), &ctx).len(), 1);
}

fn fetch_ctx(first: Value, second: Value) -> StepContext {
    let mut ctx = StepContext::default();
    ctx.record(
        "step-1",
        Some(201),
        Map::new(),
        Some(json!({"job": {"id": "job-1"}})),
    );
    ctx.record(
        "step-2",
        Some(200),
        Map::new(),
        Some(json!({"jobs": first})),
    );
    ctx.record(
        "step-3",
        Some(200),
        Map::new(),
        Some(json!({"jobs": second})),
    );
    ctx
}

fn claim_spec() -> Value {
    json!({"exclusive_claim": {
        "job_id": "{{steps.step-1.response.body.job.id}}",
        "fetches": ["{{steps.step-2.response.body.jobs}}", "{{steps.step-3.response.body.jobs}}"],
        "exactly_one_has_job": true,
        "exactly_one_empty": true
    }})
}

#[test]
fn exclusive_claim() {
    let job = json!([{"id": "job-1", "state": "active"}]);
    assert!(evaluate(&claim_spec(), None, &fetch_ctx(job.clone(), json!([]))).is_empty());
    assert!(evaluate(&claim_spec(), None, &fetch_ctx(json!([]), job.clone())).is_empty());
    assert_eq!(
        evaluate(&claim_spec(), None, &fetch_ctx(job.clone(), job.clone())).len(),
        2
    );
    assert_eq!(
        evaluate(&claim_spec(), None, &fetch_ctx(json!([]), json!([]))).len(),
        2
    );
    let other = json!([{"id": "job-2"}]);
    assert_eq!(
        evaluate(&claim_spec(), None, &fetch_ctx(other, json!([]))).len(),
        1
    );
    // A fetch without a `jobs` array cannot be judged.
    assert_eq!(
        evaluate(&claim_spec(), None, &fetch_ctx(json!(null), json!([]))).len(),
        1
    );
}

#[test]
fn equality() {
    let mut ctx = StepContext::default();
    for id in ["step-2", "step-3"] {
        ctx.record(
            id,
            Some(200),
            Map::new(),
            Some(json!({"job": {"id": "j", "attempt": 0}})),
        );
    }
    ctx.record(
        "step-4",
        Some(200),
        Map::new(),
        Some(json!({"job": {"attempt": 0.0, "id": "j"}})),
    );
    let spec = json!({"equality": {
        "$.steps.step-2.response.body": "{{steps.step-3.response.body}}",
        "$.steps.step-3.response.body": "{{steps.step-4.response.body}}"
    }});
    assert!(evaluate(&spec, None, &ctx).is_empty());
    ctx.record(
        "step-4",
        Some(200),
        Map::new(),
        Some(json!({"job": {"id": "j", "attempt": 1}})),
    );
    assert_eq!(evaluate(&spec, None, &ctx).len(), 1);
    let missing =
        json!({"equality": {"$.steps.step-9.response.body": "{{steps.step-2.response.body}}"}});
    assert_eq!(evaluate(&missing, None, &ctx).len(), 1);
}
