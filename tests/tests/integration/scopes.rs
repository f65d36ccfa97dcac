//! Least privilege over HTTP (README, "API keys and scopes"): the data keys every
//! producer and worker holds cannot decide where a queue's jobs or the events go, nor
//! change how a queue runs; producers and workers can be given only their side; what a
//! key registers records the key, an operator lists it by key, and a revocation can
//! disable it.

use ojs_http::auth::{issue_key, issue_scoped_key};
use ojs_http::scopes::{Scope, Scopes};
use ojs_http::{AuthMode, HttpConfig};
use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

fn keyed() -> HttpConfig {
    HttpConfig {
        auth: AuthMode::ApiKey,
        push_allow_private: true,
        ..HttpConfig::default()
    }
}

async fn call(
    app: &TestApp,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    let mut req = app
        .client
        .request(method, format!("{}{path}", app.base_url))
        .bearer_auth(key);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let res = req.send().await?;
    let status = res.status().as_u16();
    let body: Value = serde_json::from_slice(&res.bytes().await?).unwrap_or(Value::Null);
    Ok((status, body))
}

fn push_endpoint(queue: &str) -> Value {
    json!({"endpoint": "http://127.0.0.1:9/steal", "queues": [queue], "job_types": ["p.t"],
        "config": {"signing_secret": "whsec_chosen_by_the_caller"}})
}

fn subscription() -> Value {
    json!({"url": "http://127.0.0.1:9/every-event", "events": ["*"]})
}

fn cron(name: &str) -> Value {
    json!({"name": name, "expression": "0 0 1 1 *", "job_template": {"type": "c.t", "args": []}})
}

fn schema(uri: &str) -> Value {
    json!({"uri": uri, "schema": {"type": "array"}})
}

#[tokio::test]
async fn a_producers_or_workers_key_cannot_reroute_jobs_or_change_a_queue() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(keyed()).await?;
    // A key made before scopes (none stored) is what every producer and worker held.
    let data = issue_key(&app.store, "worker").await?.key;
    let admin = issue_scoped_key(
        &app.store,
        "ops",
        Some(Scopes::of(&[Scope::AdminRead, Scope::AdminWrite])),
    )
    .await?
    .key;
    let (s, _) = call(
        &app,
        &data,
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "p.t", "args": [], "options": {"queue": "payments"}})),
    )
    .await?;
    assert_eq!(s, 201, "a data key still enqueues");
    let (s, body) = call(
        &app,
        &data,
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some(json!({"queues": ["payments"]})),
    )
    .await?;
    assert_eq!(
        (s, body["jobs"].as_array().map(Vec::len)),
        (200, Some(1)),
        "and works: {body}"
    );
    let attempts: Vec<(Method, String, Option<Value>)> = vec![
        (
            Method::POST,
            "/ojs/v1/push/endpoints".into(),
            Some(push_endpoint("payments")),
        ),
        (Method::GET, "/ojs/v1/push/endpoints".into(), None),
        (
            Method::POST,
            "/ojs/v1/webhooks/subscriptions".into(),
            Some(subscription()),
        ),
        (Method::GET, "/ojs/v1/webhooks/subscriptions".into(), None),
        (Method::GET, "/ojs/v1/webhooks/deliveries".into(), None),
        (Method::POST, "/ojs/v1/cron".into(), Some(cron("sneaky"))),
        (Method::DELETE, "/ojs/v1/cron/nightly".into(), None),
        (
            Method::POST,
            "/ojs/v1/schemas".into(),
            Some(schema("urn:x:sneaky")),
        ),
        (Method::DELETE, "/ojs/v1/schemas/urn%3Ax%3Aa".into(), None),
        (Method::POST, "/ojs/v1/queues/payments/pause".into(), None),
        (Method::POST, "/ojs/v1/queues/payments/resume".into(), None),
        (
            Method::PUT,
            "/ojs/v1/admin/queues/payments/rate-limit".into(),
            Some(json!({"rate": {"limit": 1, "period": "PT1S"}})),
        ),
        (
            Method::PUT,
            "/ojs/v1/admin/queues/payments/config".into(),
            Some(json!({"paused": true})),
        ),
        (
            Method::POST,
            "/ojs/v1/admin/workers/w1/terminate".into(),
            None,
        ),
        (
            Method::GET,
            "/ojs/v1/admin/keys/0123456789ab/registrations".into(),
            None,
        ),
    ];
    for (method, path, body) in attempts {
        let (s, answer) = call(&app, &data, method.clone(), &path, body).await?;
        assert_eq!(
            (s, answer["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{method} {path}: {answer}"
        );
    }
    // Nothing was written by the refused calls.
    let (s, listed) = call(&app, &admin, Method::GET, "/ojs/v1/push/endpoints", None).await?;
    assert_eq!(s, 200, "{listed}");
    assert_eq!(listed["endpoints"], json!([]), "{listed}");
    let (_, subs) = call(
        &app,
        &admin,
        Method::GET,
        "/ojs/v1/webhooks/subscriptions",
        None,
    )
    .await?;
    assert_eq!(subs["subscriptions"], json!([]), "{subs}");
    assert!(app.store.cron().list().await?.is_empty());
    assert!(app.store.schemas().list().await?.is_empty());
    assert!(
        !app.store
            .derived()
            .queue_stats(&ojs_core::QueueName::parse("payments")?)
            .await?
            .paused
    );
    // The 403 names the scope to ask for and every scope that would do.
    let (_, body) = call(
        &app,
        &data,
        Method::POST,
        "/ojs/v1/push/endpoints",
        Some(push_endpoint("payments")),
    )
    .await?;
    assert_eq!(
        body["error"]["details"]["required_scope"], "ojs:config:write",
        "{body}"
    );
    assert_eq!(
        body["error"]["details"]["granted_by"],
        json!(["ojs:admin:write", "ojs:config:write"])
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn producers_and_workers_can_be_given_only_their_side() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(keyed()).await?;
    let producer = issue_scoped_key(
        &app.store,
        "producer",
        Some(Scopes::of(&[Scope::DataEnqueue, Scope::DataRead])),
    )
    .await?
    .key;
    let worker = issue_scoped_key(
        &app.store,
        "worker",
        Some(Scopes::of(&[Scope::DataProcess])),
    )
    .await?
    .key;
    let job = json!({"type": "p.t", "args": [1], "options": {"queue": "sides"}});
    let (s, body) = call(
        &app,
        &producer,
        Method::POST,
        "/ojs/v1/jobs",
        Some(job.clone()),
    )
    .await?;
    assert_eq!(s, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap_or_default().to_owned();
    let (s, _) = call(&app, &worker, Method::POST, "/ojs/v1/jobs", Some(job)).await?;
    assert_eq!(s, 403, "a worker's key does not enqueue");
    let fetch = json!({"queues": ["sides"], "worker_id": "w1"});
    let (s, _) = call(
        &app,
        &producer,
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some(fetch.clone()),
    )
    .await?;
    assert_eq!(s, 403, "a producer's key does not fetch");
    let (s, body) = call(
        &app,
        &worker,
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some(fetch),
    )
    .await?;
    assert_eq!(
        (s, body["jobs"][0]["id"].as_str()),
        (200, Some(id.as_str())),
        "{body}"
    );
    let (s, body) = call(
        &app,
        &worker,
        Method::POST,
        "/ojs/v1/workers/ack",
        Some(json!({"job_id": id, "worker_id": "w1"})),
    )
    .await?;
    assert_eq!(s, 200, "{body}");
    let (s, _) = call(
        &app,
        &worker,
        Method::GET,
        &format!("/ojs/v1/jobs/{id}"),
        None,
    )
    .await?;
    assert_eq!(s, 403, "a worker's key reads no job by id");
    let (s, body) = call(
        &app,
        &producer,
        Method::GET,
        &format!("/ojs/v1/jobs/{id}"),
        None,
    )
    .await?;
    assert_eq!((s, body["job"]["state"].as_str()), (200, Some("completed")));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn registrations_record_their_key_and_a_revocation_can_disable_them() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(keyed()).await?;
    let deployer = issue_scoped_key(
        &app.store,
        "deployer",
        Some(Scopes::of(&[Scope::ConfigWrite])),
    )
    .await?;
    let other =
        issue_scoped_key(&app.store, "other", Some(Scopes::of(&[Scope::ConfigWrite]))).await?;
    let admin = issue_scoped_key(
        &app.store,
        "ops",
        Some(Scopes::of(&[Scope::AdminRead, Scope::AdminWrite])),
    )
    .await?
    .key;
    let key_id = deployer.record.id.clone();
    let made = [
        ("/ojs/v1/push/endpoints", push_endpoint("reg-q")),
        ("/ojs/v1/webhooks/subscriptions", subscription()),
        ("/ojs/v1/cron", cron("reg-nightly")),
        ("/ojs/v1/schemas", schema("urn:reg:v1")),
    ];
    for (path, body) in &made {
        let (s, answer) = call(&app, &deployer.key, Method::POST, path, Some(body.clone())).await?;
        assert_eq!(s, 201, "{path}: {answer}");
        let view = answer
            .get("endpoint")
            .or_else(|| answer.get("cron_job"))
            .or_else(|| answer.get("schema"))
            .unwrap_or(&answer);
        assert_eq!(view["created_by"], json!(key_id), "{path}: {answer}");
    }
    // Another key's registration is not the deployer's.
    let (s, _) = call(
        &app,
        &other.key,
        Method::POST,
        "/ojs/v1/cron",
        Some(cron("reg-other")),
    )
    .await?;
    assert_eq!(s, 201);
    let path = format!("/ojs/v1/admin/keys/{key_id}/registrations");
    let (s, listed) = call(&app, &admin, Method::GET, &path, None).await?;
    assert_eq!(s, 200, "{listed}");
    assert_eq!(listed["key_id"], json!(key_id));
    assert_eq!(
        listed["push_endpoints"][0]["queues"],
        json!(["reg-q"]),
        "{listed}"
    );
    assert_eq!(
        listed["webhook_subscriptions"][0]["url"],
        "http://127.0.0.1:9/every-event"
    );
    let crons: Vec<&str> = listed["cron_jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(crons, ["reg-nightly"], "{listed}");
    assert_eq!(listed["schemas"][0]["uri"], "urn:reg:v1", "{listed}");
    let (s, _) = call(
        &app,
        &admin,
        Method::GET,
        "/ojs/v1/admin/keys/nope/registrations",
        None,
    )
    .await?;
    assert_eq!(s, 400);

    // Revoked without the flag, what the other key registered stays in force.
    ojs_http::key_admin::administer_keys(
        &app.store,
        &json!({"action": "revoke", "id": other.record.id}),
    )
    .await?;
    let crons = app.store.cron().list().await?;
    assert!(crons.iter().all(|c| c.cron.enabled), "{crons:?}");
    // Revoked with it, the deployer's push endpoint, subscription and cron job stop.
    let revoked = ojs_http::key_admin::administer_keys(
        &app.store,
        &json!({"action": "revoke", "id": key_id, "disable_registrations": true}),
    )
    .await?;
    assert_eq!(
        revoked["disabled"]["cron_jobs"],
        json!(["reg-nightly"]),
        "{revoked}"
    );
    let (_, listed) = call(&app, &admin, Method::GET, &path, None).await?;
    assert_eq!(
        listed["push_endpoints"][0]["status"], "disabled",
        "{listed}"
    );
    assert_eq!(
        listed["webhook_subscriptions"][0]["active"], false,
        "{listed}"
    );
    assert_eq!(listed["cron_jobs"][0]["enabled"], false, "{listed}");
    assert_eq!(listed["schemas"][0]["uri"], "urn:reg:v1", "schemas stay");
    let other_cron = app
        .store
        .cron()
        .list()
        .await?
        .into_iter()
        .find(|c| c.cron.name == "reg-other");
    assert!(
        other_cron.is_some_and(|c| c.cron.enabled),
        "another key's cron runs on"
    );
    app.teardown().await;
    Ok(())
}
