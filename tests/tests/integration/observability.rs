//! Observability endpoints (ojs-observability.md): liveness and readiness without a key,
//! Prometheus text from the queue counters behind `ojs:admin:read`.

use ojs_http::auth::{issue_key, issue_scoped_key};
use ojs_http::scopes::{Scope, Scopes};
use ojs_http::{AuthMode, HttpConfig};
use ojs_tests::TestApp;
use serde_json::json;

#[tokio::test]
async fn probes_are_public_and_metrics_count_the_queues() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(HttpConfig {
        auth: AuthMode::ApiKey,
        ..HttpConfig::default()
    })
    .await?;
    let data = issue_key(&app.store, "app").await?.key;
    let ops = issue_scoped_key(
        &app.store,
        "prometheus",
        Some(Scopes::of(&[Scope::AdminRead])),
    )
    .await?
    .key;
    for path in ["/health", "/ready", "/ojs/v1/health"] {
        let r = app
            .client
            .get(format!("{}{path}", app.base_url))
            .send()
            .await?;
        assert_eq!(r.status(), 200, "{path} needs no key");
        let body: serde_json::Value = r.json().await?;
        assert!(body["status"].is_string(), "{path}: {body}");
    }
    let r = app
        .client
        .get(format!("{}/health", app.base_url))
        .header("x-request-id", "req-obs-1")
        .send()
        .await?;
    assert_eq!(
        r.headers().get("x-request-id").map(|v| v.as_bytes()),
        Some(&b"req-obs-1"[..])
    );

    for i in 0..3 {
        let r = app
            .client
            .post(format!("{}/ojs/v1/jobs", app.base_url))
            .bearer_auth(&data)
            .header("content-type", "application/openjobspec+json")
            .body(json!({"type": "o.t", "args": [i], "options": {"queue": "obs-q"}}).to_string())
            .send()
            .await?;
        assert_eq!(r.status(), 201);
    }
    let metrics = |key: Option<&str>| {
        let mut req = app.client.get(format!("{}/metrics", app.base_url)).header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        );
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send()
    };
    assert_eq!(metrics(None).await?.status(), 401);
    assert_eq!(
        metrics(Some(&data)).await?.status(),
        403,
        "queue volumes are an operator's"
    );
    let r = metrics(Some(&ops)).await?;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"text/plain"[..])
    );
    let text = r.text().await?;
    assert!(text.contains("# TYPE ojs_queue_jobs gauge"), "{text}");
    assert!(
        text.contains("ojs_queue_jobs{queue=\"obs-q\",state=\"available\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("ojs_queue_paused{queue=\"obs-q\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("ojs_jobs_finished_total{queue=\"obs-q\",state=\"completed\"} 0"),
        "{text}"
    );
    assert!(text.contains("ojs_queues 1"), "{text}");
    app.teardown().await;
    Ok(())
}
