//! Every path that names something the server does not hold answers 404 with the OJS
//! error body naming what was missing (the store's `NotFound` carries the entity; the one
//! HTTP mapping in `shared/http/src/error.rs` words it).

use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

/// Asserts a 404 `not_found` whose message contains `names`.
fn missing(what: &str, status: u16, body: &Value, names: &str) {
    assert_eq!(status, 404, "{what}: {body}");
    let error = &body["error"];
    assert_eq!(error["code"], "not_found", "{what}: {body}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(names),
        "{what}: {message:?} should name {names:?}"
    );
}

#[tokio::test]
async fn each_404_names_what_it_did_not_find() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let job = uuid::Uuid::now_v7().to_string();
    let workflow = uuid::Uuid::new_v4().to_string();
    let sub = format!("sub_{}", uuid::Uuid::new_v4());
    let endpoint = format!("pe_{}", uuid::Uuid::new_v4());
    let cases: Vec<(Method, String, Option<Value>, String)> = vec![
        (
            Method::POST,
            format!("/ojs/v1/admin/jobs/{job}/retry"),
            None,
            format!("job {job} not found"),
        ),
        (
            Method::POST,
            format!("/ojs/v1/admin/jobs/{job}/cancel"),
            None,
            format!("job {job} not found"),
        ),
        (
            Method::DELETE,
            format!("/ojs/v1/jobs/{job}"),
            None,
            format!("job {job} not found"),
        ),
        (
            Method::PUT,
            format!("/ojs/v1/jobs/{job}/checkpoint"),
            Some(json!({"state": {"at": 1}})),
            format!("job {job} not found"),
        ),
        (
            Method::DELETE,
            format!("/ojs/v1/jobs/{job}/checkpoint"),
            None,
            format!("job {job} not found"),
        ),
        (
            Method::POST,
            format!("/ojs/v1/dead-letter/{job}/retry"),
            None,
            format!("job {job} is not in the dead letter queue"),
        ),
        (
            Method::GET,
            format!("/ojs/v1/workflows/{workflow}"),
            None,
            format!("workflow {workflow} not found"),
        ),
        (
            Method::DELETE,
            format!("/ojs/v1/workflows/{workflow}"),
            None,
            format!("workflow {workflow} not found"),
        ),
        (
            Method::DELETE,
            "/ojs/v1/cron/nightly-nothing".to_owned(),
            None,
            "no cron job named \"nightly-nothing\"".to_owned(),
        ),
        (
            Method::DELETE,
            format!("/ojs/v1/webhooks/subscriptions/{sub}"),
            None,
            format!("no webhook subscription with id {sub:?}"),
        ),
        (
            Method::DELETE,
            format!("/ojs/v1/push/endpoints/{endpoint}"),
            None,
            format!("no push endpoint with id {endpoint:?}"),
        ),
        (
            Method::DELETE,
            "/ojs/v1/schemas/urn%3Aojs%3Aschema%3Anothing%3Av1".to_owned(),
            None,
            "no schema registered with URI \"urn:ojs:schema:nothing:v1\"".to_owned(),
        ),
        (
            Method::POST,
            "/ojs/v1/admin/workers/w-nobody/quiet".to_owned(),
            None,
            "worker w-nobody not found".to_owned(),
        ),
        (
            Method::DELETE,
            "/ojs/v1/admin/workers/w-nobody".to_owned(),
            None,
            "worker w-nobody not found".to_owned(),
        ),
    ];
    for (method, path, body, names) in cases {
        let what = format!("{method} {path}");
        let r = app.call(method, &path, body).await?;
        missing(&what, r.status, &r.body, &names);
    }
    Ok(())
}

#[tokio::test]
async fn a_job_out_of_the_dead_letter_queue_is_not_in_it() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let pushed = app
        .call(
            Method::POST,
            "/ojs/v1/jobs",
            Some(json!({"type": "nf.live", "args": [], "options": {"queue": "nf"}})),
        )
        .await?;
    assert_eq!(pushed.status, 201, "{:?}", pushed.body);
    let id = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for (method, path) in [
        (Method::POST, format!("/ojs/v1/dead-letter/{id}/retry")),
        (Method::DELETE, format!("/ojs/v1/dead-letter/{id}")),
        (
            Method::POST,
            format!("/ojs/v1/admin/dead-letter/{id}/retry"),
        ),
    ] {
        let what = format!("{method} {path}");
        let r = app.call(method, &path, None).await?;
        missing(
            &what,
            r.status,
            &r.body,
            &format!("job {id} is not in the dead letter queue"),
        );
    }
    Ok(())
}
