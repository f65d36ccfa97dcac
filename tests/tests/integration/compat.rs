//! The shapes the official SDKs read where they differ from the spec or the conformance
//! suite (README, "Client compatibility"): each is served next to the spec's, and the
//! suite's shape stays what it reads.

use ojs_http::HttpConfig;
use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

async fn get(
    app: &TestApp,
    path: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<(String, Value)> {
    let mut req = app.client.get(format!("{}{path}", app.base_url));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = req.send().await?;
    let ct = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok((ct, res.json().await?))
}

#[tokio::test]
async fn the_python_sdk_gets_a_content_type_it_parses() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let (plain, _) = get(&app, "/ojs/v1/health", &[]).await?;
    assert_eq!(plain, ojs_http::JSON_CONTENT_TYPE);
    let (python, _) = get(
        &app,
        "/ojs/v1/health",
        &[("user-agent", "python-httpx/0.28.1")],
    )
    .await?;
    assert_eq!(python, ojs_http::JSON_CONTENT_TYPE_ALIASED);
    assert!(python.contains("application/json"));
    let (other, _) = get(
        &app,
        "/ojs/v1/health",
        &[("user-agent", "Go-http-client/1.1")],
    )
    .await?;
    assert_eq!(other, ojs_http::JSON_CONTENT_TYPE);
    // A Python client with its own User-Agent still sends what the SDK always sends.
    let sdk_headers = [
        ("user-agent", "billing/2.3"),
        ("ojs-version", "1.0"),
        ("x-request-id", "5f0c0a1e-2d1b-4b8e-9a55-0b0f1c2d3e4f"),
    ];
    let (custom, _) = get(&app, "/ojs/v1/health", &sdk_headers).await?;
    assert_eq!(custom, ojs_http::JSON_CONTENT_TYPE_ALIASED);
    // Either header alone (the conformance suite sends OJS-Version) keeps the plain type.
    let (suite, _) = get(&app, "/ojs/v1/health", &[("ojs-version", "1.0")]).await?;
    assert_eq!(suite, ojs_http::JSON_CONTENT_TYPE);
    app.teardown().await;

    let all = TestApp::spawn_with_config(HttpConfig {
        json_alias_for_all: true,
        ..HttpConfig::default()
    })
    .await?;
    let (ct, _) = get(&all, "/ojs/v1/health", &[("user-agent", "billing/2.3")]).await?;
    assert_eq!(ct, ojs_http::JSON_CONTENT_TYPE_ALIASED);
    all.teardown().await;
    Ok(())
}

#[tokio::test]
async fn info_cancel_and_stats_serve_both_shapes() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let pushed = app
        .push(json!({"type": "compat.x", "args": [1], "options": {"queue": "compat-q"}}))
        .await?;
    let id = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let info = app
        .call(Method::GET, &format!("/ojs/v1/jobs/{id}"), None)
        .await?;
    assert_eq!(info.body["job"]["id"], id.as_str());
    assert_eq!(info.body["id"], id.as_str(), "the bare job beside `job`");
    assert_eq!(info.body["state"], "available");

    // Stats: the suite's `queue` object without OJS-Version, the binding's name with it.
    let (_, suite) = get(&app, "/ojs/v1/queues/compat-q/stats", &[]).await?;
    assert_eq!(suite["queue"]["name"], "compat-q");
    assert_eq!(suite["queue"]["available"], 1);
    let (_, sdk) = get(
        &app,
        "/ojs/v1/queues/compat-q/stats",
        &[("ojs-version", "1.0")],
    )
    .await?;
    assert_eq!(sdk["queue"], "compat-q");
    assert_eq!(sdk["status"], "active");
    assert_eq!(sdk["stats"]["available"], 1);
    for body in [&suite, &sdk] {
        assert_eq!(
            body["available"], 1,
            "flat counts for the JavaScript SDK: {body}"
        );
        assert_eq!(body["name"], "compat-q");
    }

    let cancelled = app
        .call(Method::DELETE, &format!("/ojs/v1/jobs/{id}"), None)
        .await?;
    assert_eq!(cancelled.body["state"], "cancelled");
    assert_eq!(cancelled.body["job"]["previous_state"], "available");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn cron_registrations_serve_both_wrappers() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let body = json!({"name": "compat-cron", "cron": "0 9 * * *", "type": "compat.cron",
        "args": [{"k": 1}], "options": {"queue": "compat-q"}});
    let suite = app
        .call(Method::POST, "/ojs/v1/cron", Some(body.clone()))
        .await?;
    assert_eq!(suite.status, 201);
    assert_eq!(suite.body["cron"]["name"], "compat-cron");
    assert_eq!(suite.body["cron_job"]["type"], "compat.cron");
    let res = app
        .client
        .post(format!("{}/ojs/v1/cron", app.base_url))
        .header("content-type", "application/openjobspec+json")
        .header("ojs-version", "1.0")
        .body(json!({"name": "compat-cron", "cron": "*/5 * * * *", "type": "compat.cron", "options": {"queue": "compat-q"}}).to_string())
        .send()
        .await?;
    assert_eq!(
        res.status(),
        200,
        "a second registration updates (ojs-cron 8.1)"
    );
    let sdk: Value = res.json().await?;
    assert_eq!(
        sdk["cron"], "*/5 * * * *",
        "the bare registration: cron is the expression"
    );
    assert_eq!(sdk["type"], "compat.cron");
    assert_eq!(sdk["status"], "active");
    let list = app.call(Method::GET, "/ojs/v1/cron", None).await?;
    assert_eq!(list.body["crons"], list.body["cron_jobs"]);
    assert_eq!(list.body["cron_jobs"][0]["options"]["queue"], "compat-q");
    let deleted = app
        .call(Method::DELETE, "/ojs/v1/cron/compat-cron", None)
        .await?;
    assert_eq!(deleted.body["deleted"], true);
    assert_eq!(deleted.body["cron"]["name"], "compat-cron");
    app.teardown().await;
    Ok(())
}
