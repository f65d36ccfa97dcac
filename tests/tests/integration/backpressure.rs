//! Queue depth bounds (ojs-backpressure.md) over HTTP: `PUT
//! /ojs/v1/admin/queues/{name}/config` sets a `max_depth`, an enqueue that would pass it
//! is refused whole with 429 `QUEUE_FULL` and its headers, and enqueues past the warning
//! threshold carry the pressure headers. Depth is available + scheduled + retryable.

use std::time::Duration;

use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

async fn configure(app: &TestApp, queue: &str, backpressure: Value) -> anyhow::Result<Reply> {
    app.call(
        Method::PUT,
        &format!("/ojs/v1/admin/queues/{queue}/config"),
        Some(json!({ "backpressure": backpressure })),
    )
    .await
}

fn job(queue: &str, n: u64) -> Value {
    json!({"type": "bp.job", "args": [n], "options": {"queue": queue}})
}

fn header(r: &Reply, name: &str) -> Option<String> {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn stats(app: &TestApp, queue: &str) -> anyhow::Result<Value> {
    let r = app
        .call(Method::GET, &format!("/ojs/v1/queues/{queue}/stats"), None)
        .await?;
    anyhow::ensure!(r.status == 200, "stats: {} {}", r.status, r.body);
    Ok(r.body["stats"].clone())
}

#[tokio::test]
async fn a_full_queue_refuses_pushes_with_429_until_a_job_leaves_it() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let set = configure(&app, "bpq", json!({"max_depth": 2, "strategy": "reject"})).await?;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(
        set.body["configuration"]["backpressure"],
        json!({"max_depth": 2, "strategy": "reject", "warning_threshold": 0.8})
    );

    let first = app.push(job("bpq", 1)).await?;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(
        header(&first, "x-ojs-queue-pressure"),
        None,
        "1 of 2 is below 0.8"
    );
    // A scheduled job waits in the queue too.
    let later = app
        .push(json!({"type": "bp.job", "args": [2],
            "options": {"queue": "bpq", "scheduled_at": "+PT1H"}}))
        .await?;
    assert_eq!(later.status, 201, "{}", later.body);
    assert_eq!(header(&later, "x-ojs-queue-depth").as_deref(), Some("2"));
    assert_eq!(header(&later, "x-ojs-queue-bound").as_deref(), Some("2"));
    assert_eq!(
        header(&later, "x-ojs-queue-pressure").as_deref(),
        Some("1.0")
    );

    let refused = app.push(job("bpq", 3)).await?;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "QUEUE_FULL");
    assert_eq!(refused.body["error"]["retryable"], true);
    assert_eq!(refused.body["error"]["details"]["depth"], 2);
    assert_eq!(refused.body["error"]["details"]["bound"], 2);
    assert_eq!(refused.body["error"]["details"]["queue"], "bpq");
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("5"));
    assert_eq!(header(&refused, "x-ojs-queue-depth").as_deref(), Some("2"));
    assert_eq!(header(&refused, "x-ojs-queue-bound").as_deref(), Some("2"));
    let st = stats(&app, "bpq").await?;
    assert_eq!(
        (
            &st["available"],
            &st["scheduled"],
            &st["depth"],
            &st["max_depth"]
        ),
        (&json!(1), &json!(1), &json!(2), &json!(2)),
        "the refused job was not stored: {st}"
    );
    assert_eq!(st["queue"], "bpq");

    // A running job no longer waits: the queue has room for one more.
    ojs_tests::after_index_lag().await;
    let fetched = app
        .fetch(json!({"queues": ["bpq"], "worker_id": "w"}))
        .await?;
    assert_eq!(
        fetched.job_ids(),
        [first.body["job"]["id"].as_str().unwrap_or_default()]
    );
    let admitted = app.push(job("bpq", 4)).await?;
    assert_eq!(admitted.status, 201, "{}", admitted.body);
    assert_eq!(app.push(job("bpq", 5)).await?.status, 429);

    // Another queue is not bound by this one's bound.
    let other = app.push(job("bpq-other", 1)).await?;
    assert_eq!(other.status, 201);
    assert_eq!(header(&other, "x-ojs-queue-depth"), None);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_batch_is_admitted_or_refused_whole() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    assert_eq!(
        configure(&app, "bpb", json!({"max_depth": 2}))
            .await?
            .status,
        200
    );
    let batch = |ns: &[u64], queue: &str| json!({"jobs": ns.iter().map(|n| job(queue, *n)).collect::<Vec<_>>()});
    let three = app
        .call(
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(batch(&[1, 2, 3], "bpb")),
        )
        .await?;
    assert_eq!(three.status, 429, "{}", three.body);
    assert_eq!(three.body["error"]["code"], "QUEUE_FULL");
    assert_eq!(
        stats(&app, "bpb").await?["depth"],
        0,
        "no job of it was stored"
    );
    // Jobs for an unbounded queue in the same batch are refused with it.
    let mut mixed = batch(&[1, 2], "bpb-free");
    if let Some(jobs) = mixed["jobs"].as_array_mut() {
        jobs.extend([job("bpb", 3), job("bpb", 4), job("bpb", 5)]);
    }
    let mixed = app
        .call(Method::POST, "/ojs/v1/jobs/batch", Some(mixed))
        .await?;
    assert_eq!(mixed.status, 429, "{}", mixed.body);
    // Refused whole: not even its queue came to exist.
    let free = app
        .call(Method::GET, "/ojs/v1/queues/bpb-free/stats", None)
        .await?;
    assert_eq!(free.status, 404, "{}", free.body);

    let two = app
        .call(
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(batch(&[1, 2], "bpb")),
        )
        .await?;
    assert_eq!(two.status, 201, "{}", two.body);
    assert_eq!(header(&two, "x-ojs-queue-pressure").as_deref(), Some("1.0"));
    assert_eq!(stats(&app, "bpb").await?["depth"], 2);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn pressure_headers_start_at_the_warning_threshold() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let set = configure(
        &app,
        "bpw",
        json!({"max_depth": 10, "strategy": "reject", "warning_threshold": 0.5}),
    )
    .await?;
    assert_eq!(set.status, 200, "{}", set.body);
    for n in 1..=4 {
        let r = app.push(job("bpw", n)).await?;
        assert_eq!(r.status, 201);
        assert_eq!(header(&r, "x-ojs-queue-pressure"), None, "depth {n} of 10");
    }
    for (n, pressure) in [(5, "0.5"), (6, "0.6"), (7, "0.7")] {
        let r = app.push(job("bpw", n)).await?;
        assert_eq!(r.status, 201);
        assert_eq!(
            header(&r, "x-ojs-queue-pressure").as_deref(),
            Some(pressure),
            "depth {n}"
        );
        assert_eq!(
            header(&r, "x-ojs-queue-depth").as_deref(),
            Some(n.to_string().as_str())
        );
        assert_eq!(header(&r, "x-ojs-queue-bound").as_deref(), Some("10"));
    }
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_bound_is_checked_whole_before_it_is_stored_and_can_be_removed() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    assert_eq!(
        configure(&app, "bpc", json!({"max_depth": 1}))
            .await?
            .status,
        200
    );
    for (body, status, code) in [
        (
            json!({"max_depth": 5, "strategy": "block"}),
            422,
            "unsupported",
        ),
        (
            json!({"max_depth": 5, "strategy": "drop_oldest"}),
            422,
            "unsupported",
        ),
        (
            json!({"max_depth": 5, "max_size_bytes": 1024}),
            422,
            "unsupported",
        ),
        (json!({"max_depth": -5}), 422, "validation_error"),
        (
            json!({"max_depth": 5, "warning_threshold": 2}),
            422,
            "validation_error",
        ),
        (
            json!({"max_depth": 5, "maxdepth": 5}),
            422,
            "validation_error",
        ),
        (json!("full"), 422, "validation_error"),
    ] {
        let r = configure(&app, "bpc", body.clone()).await?;
        assert_eq!(
            (r.status, r.body["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {}",
            r.body
        );
    }
    // The refused ones changed nothing: the bound is still 1.
    assert_eq!(app.push(job("bpc", 1)).await?.status, 201);
    assert_eq!(app.push(job("bpc", 2)).await?.status, 429);
    let view = app
        .call(Method::GET, "/ojs/v1/admin/queues/bpc", None)
        .await?;
    assert_eq!(view.body["configuration"]["backpressure"]["max_depth"], 1);

    // max_depth 0 is unbounded (ojs-backpressure.md §6.2), and so is null.
    let removed = configure(&app, "bpc", json!({"max_depth": 0})).await?;
    assert_eq!(removed.status, 200, "{}", removed.body);
    assert_eq!(removed.body["configuration"]["backpressure"], Value::Null);
    assert_eq!(app.push(job("bpc", 3)).await?.status, 201);
    assert_eq!(
        configure(&app, "bpc", json!({"max_depth": 2}))
            .await?
            .status,
        200
    );
    assert_eq!(app.push(job("bpc", 4)).await?.status, 429);
    assert_eq!(configure(&app, "bpc", Value::Null).await?.status, 200);
    let free = app.push(job("bpc", 5)).await?;
    assert_eq!(free.status, 201);
    assert_eq!(header(&free, "x-ojs-queue-depth"), None);
    assert_eq!(stats(&app, "bpc").await?.get("max_depth"), None);
    app.teardown().await;
    Ok(())
}

/// Two instances over one table, as two Lambda instances: a bound set through one
/// reaches the other's PUSH once that one's remembered settings expire (the queue
/// settings' TTL), not only at its next cold start.
#[tokio::test]
async fn a_bound_set_through_one_instance_reaches_another_within_the_settings_ttl(
) -> anyhow::Result<()> {
    let a = TestApp::spawn().await?;
    let ttl = Duration::from_secs(1);
    let sdk = ojs_store::sdk_config().await;
    let b = TestApp::spawn_on_store(
        ojs_store::Store::new(
            ojs_store::client_for(&sdk),
            ojs_store::StoreConfig::for_table(a.store.table()),
        )
        .with_config(|c| c.queue_settings_ttl = ttl),
    )
    .await?;
    // b remembers the queue as unbounded.
    assert_eq!(b.push(job("bpx", 1)).await?.status, 201);
    assert_eq!(
        configure(&a, "bpx", json!({"max_depth": 1})).await?.status,
        200
    );
    // Once b's memory of the settings is older than its TTL, its next PUSH reads them.
    tokio::time::sleep(ttl).await;
    let refused = b.push(job("bpx", 2)).await?;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "QUEUE_FULL");
    a.teardown().await;
    b.teardown().await;
    Ok(())
}
