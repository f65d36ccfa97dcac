//! Graceful shutdown (ojs-graceful-shutdown.md): a worker reports quiet, drain or
//! terminate in its heartbeat (`/workers/heartbeat`, or `/workers/beat` as the suite
//! names it), FETCH assigns such a worker nothing (§5.1) nor one an operator quieted, and
//! `GET /workers/{id}/health` answers 503 with its state until it runs again (§8).

use std::time::Duration;

use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

/// A POST retried while it answers a retryable 503 (the strict layer's throttling can
/// outlast the store's retries), as the official SDKs retry it.
async fn post(app: &TestApp, path: &str, body: Value) -> anyhow::Result<Reply> {
    let mut tries = 0;
    loop {
        let r = app.call(Method::POST, path, Some(body.clone())).await?;
        if r.status == 503 && r.body["error"]["retryable"] == true && tries < 5 {
            tries += 1;
            tokio::time::sleep(std::time::Duration::from_millis(100 << tries)).await;
            continue;
        }
        return Ok(r);
    }
}

async fn beat(app: &TestApp, path: &str, body: Value) -> anyhow::Result<Reply> {
    let r = post(app, path, body).await?;
    anyhow::ensure!(r.status == 200, "beat: {} {}", r.status, r.body);
    Ok(r)
}

async fn health(app: &TestApp, worker: &str) -> anyhow::Result<Reply> {
    app.call(
        Method::GET,
        &format!("/ojs/v1/workers/{worker}/health"),
        None,
    )
    .await
}

/// Pushes one job to `queue` and waits out the ready index's lag.
async fn push_one(app: &TestApp, queue: &str) -> anyhow::Result<String> {
    let r = app
        .push(json!({"type": "gs.t", "args": [], "options": {"queue": queue}}))
        .await?;
    anyhow::ensure!(r.status == 201, "push: {}", r.body);
    ojs_tests::after_index_lag().await;
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

/// The ids a FETCH of one job from `queue` as `worker` got.
async fn fetched(app: &TestApp, queue: &str, worker: &str) -> anyhow::Result<Vec<String>> {
    // A FETCH answered 503 claimed nothing: asked again, as a worker would.
    let r = post(
        app,
        "/ojs/v1/workers/fetch",
        json!({"queues": [queue], "count": 1, "worker_id": worker}),
    )
    .await?;
    anyhow::ensure!(r.status == 200, "fetch: {} {}", r.status, r.body);
    Ok(r.job_ids())
}

#[tokio::test]
async fn a_draining_worker_is_assigned_no_job_and_its_health_says_so() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let unknown = health(&app, "gs-nobody").await?;
    assert_eq!(
        (unknown.status, unknown.body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{}",
        unknown.body
    );

    let r = beat(
        &app,
        "/ojs/v1/workers/beat",
        json!({"worker_id": "gs-w", "active_jobs": 0}),
    )
    .await?;
    assert_eq!(
        (
            &r.body["acknowledged"],
            &r.body["worker_state"],
            &r.body["state"]
        ),
        (&json!(true), &json!("running"), &json!("running")),
        "{}",
        r.body
    );
    let h = health(&app, "gs-w").await?;
    assert_eq!(
        (
            h.status,
            &h.body["state"],
            &h.body["status"],
            &h.body["accepting_jobs"]
        ),
        (200, &json!("running"), &json!("healthy"), &json!(true)),
        "{}",
        h.body
    );

    // Draining: the job stays for another worker, and the probe says not ready.
    let first = push_one(&app, "gs-q").await?;
    let r = beat(
        &app,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "gs-w", "state": "draining", "active_jobs": 1}),
    )
    .await?;
    assert_eq!(r.body["worker_state"], "drain", "{}", r.body);
    assert!(fetched(&app, "gs-q", "gs-w").await?.is_empty());
    let h = health(&app, "gs-w").await?;
    assert_eq!(
        (
            h.status,
            &h.body["state"],
            &h.body["status"],
            &h.body["accepting_jobs"],
            &h.body["active_jobs"]
        ),
        (
            503,
            &json!("drain"),
            &json!("draining"),
            &json!(false),
            &json!(1)
        ),
        "{}",
        h.body
    );
    let listed = app.call(Method::GET, "/ojs/v1/admin/workers", None).await?;
    let row = listed.body["items"]
        .as_array()
        .and_then(|a| a.iter().find(|w| w["id"] == "gs-w"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&row["state"], &row["reported_state"], &row["directive"]),
        (&json!("drain"), &json!("drain"), &json!("running")),
        "{}",
        listed.body
    );
    assert_eq!(fetched(&app, "gs-q", "gs-other").await?, vec![first]);

    // A beat that names no state says the worker runs again (its last beat is its word).
    beat(
        &app,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "gs-w"}),
    )
    .await?;
    let second = push_one(&app, "gs-q").await?;
    assert_eq!(fetched(&app, "gs-q", "gs-w").await?, vec![second]);

    // `shutdown: true` is at least drain; terminate stays terminate.
    let r = beat(
        &app,
        "/ojs/v1/workers/beat",
        json!({"worker_id": "gs-w", "shutdown": true}),
    )
    .await?;
    assert_eq!(r.body["worker_state"], "drain", "{}", r.body);
    let r = beat(
        &app,
        "/ojs/v1/workers/beat",
        json!({"worker_id": "gs-w", "state": "terminate", "shutdown": true}),
    )
    .await?;
    assert_eq!(r.body["worker_state"], "terminate", "{}", r.body);
    let third = push_one(&app, "gs-q").await?;
    assert!(fetched(&app, "gs-q", "gs-w").await?.is_empty());
    assert_eq!(health(&app, "gs-w").await?.body["state"], "terminate");

    // An operator's quiet holds even while the worker says it runs.
    beat(
        &app,
        "/ojs/v1/workers/beat",
        json!({"worker_id": "gs-w", "state": "running"}),
    )
    .await?;
    let r = app
        .call(Method::POST, "/ojs/v1/admin/workers/gs-w/quiet", None)
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(fetched(&app, "gs-q", "gs-w").await?.is_empty());
    let h = health(&app, "gs-w").await?;
    assert_eq!(
        (h.status, &h.body["state"]),
        (503, &json!("quiet")),
        "{}",
        h.body
    );
    let r = app
        .call(Method::POST, "/ojs/v1/admin/workers/gs-w/resume", None)
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(fetched(&app, "gs-q", "gs-w").await?, vec![third]);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_beat_with_a_state_no_worker_has_is_refused() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    for (body, path) in [
        (json!({"worker_id": "gs-b", "state": "sleeping"}), "$.state"),
        (json!({"worker_id": "gs-b", "state": 2}), "$.state"),
        (
            json!({"worker_id": "gs-b", "shutdown": "yes"}),
            "$.shutdown",
        ),
        (json!({"state": "drain"}), "$.worker_id"),
    ] {
        let r = app
            .call(Method::POST, "/ojs/v1/workers/beat", Some(body.clone()))
            .await?;
        assert_eq!(
            (
                r.status,
                r.body["error"]["code"].as_str(),
                r.body["error"]["details"]["validation_errors"][0]["path"].as_str()
            ),
            (400, Some("invalid_request"), Some(path)),
            "{body}: {}",
            r.body
        );
    }
    // Nothing was recorded: the worker is unknown.
    assert_eq!(health(&app, "gs-b").await?.status, 404);
    let long = "w".repeat(257);
    assert_eq!(health(&app, &long).await?.status, 404);
    app.teardown().await;
    Ok(())
}

/// Several Lambda instances: what one instance recorded reaches FETCH through another
/// as soon as that one reads the worker (here on every FETCH that finds a job: no TTL),
/// and on the instance that recorded it at once, whatever it remembered before.
#[tokio::test]
async fn a_drain_reported_through_one_instance_holds_on_another() -> anyhow::Result<()> {
    let a = TestApp::spawn().await?;
    let sdk = ojs_store::sdk_config().await;
    let over_table = |ttl: Duration| {
        ojs_store::Store::new(
            ojs_store::client_for(&sdk),
            ojs_store::StoreConfig {
                queue_settings_ttl: ttl,
                // Every FETCH queries the due index: two FETCHes cost alike.
                quiet_due_memory: Duration::ZERO,
                ..ojs_store::StoreConfig::for_table(a.store.table())
            },
        )
    };
    let fresh = TestApp::spawn_on_store_without_stream(over_table(Duration::ZERO)).await?;
    let remembering =
        TestApp::spawn_on_store_without_stream(over_table(Duration::from_secs(600))).await?;
    let job = push_one(&a, "gs-x").await?;
    // Both other instances have seen the worker take jobs (the queue is empty for them
    // as it is for `a`'s worker there: an empty FETCH of another queue).
    assert!(fetched(&fresh, "gs-none", "gs-x").await?.is_empty());
    assert!(fetched(&remembering, "gs-none", "gs-x").await?.is_empty());
    beat(
        &a,
        "/ojs/v1/workers/beat",
        json!({"worker_id": "gs-x", "state": "drain"}),
    )
    .await?;
    let before = fresh.store.usage();
    assert!(fetched(&fresh, "gs-x", "gs-x").await?.is_empty());
    let refused = fresh.store.usage() - before;
    assert_eq!(
        refused.write_units, 0.0,
        "a refused FETCH writes nothing: {refused:?}"
    );
    // A poll that finds no job reads no worker: it costs what an anonymous one does.
    let cost = |body: Value| async {
        let before = fresh.store.usage();
        let r = fresh.fetch(body).await?;
        anyhow::ensure!(r.body["jobs"] == json!([]), "{}", r.body);
        Ok::<_, anyhow::Error>(fresh.store.usage() - before)
    };
    let named = cost(json!({"queues": ["gs-none"], "worker_id": "gs-x"})).await?;
    let anonymous = cost(json!({"queues": ["gs-none"]})).await?;
    assert_eq!(
        (named.calls, named.read_units),
        (anonymous.calls, anonymous.read_units),
        "an empty poll as gs-x {named:?}, anonymous {anonymous:?}"
    );
    // The remembering instance learns it from a beat it records itself.
    beat(
        &remembering,
        "/ojs/v1/workers/beat",
        json!({"worker_id": "gs-x", "state": "quiet"}),
    )
    .await?;
    assert!(fetched(&remembering, "gs-x", "gs-x").await?.is_empty());
    beat(
        &remembering,
        "/ojs/v1/workers/beat",
        json!({"worker_id": "gs-x", "state": "running"}),
    )
    .await?;
    assert_eq!(fetched(&remembering, "gs-x", "gs-x").await?, vec![job]);
    remembering.teardown().await;
    fresh.teardown().await;
    a.teardown().await;
    Ok(())
}
