//! Job progress (ojs-progress.md) over HTTP: reported by the worker holding the attempt,
//! clamped and never lower within an attempt, a heartbeat too, cleared by a retry, 1.0
//! once completed, and readable by INFO and `GET .../progress`.

use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

fn id_of(reply: &Reply) -> String {
    reply.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn push_and_fetch(app: &TestApp, queue: &str, worker: &str) -> anyhow::Result<String> {
    let r = app
        .push(
            json!({"type": "p.t", "args": [], "options": {"queue": queue,
            "retry": {"max_attempts": 3, "initial_interval": "PT0.1S", "jitter": false}}}),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "{:?}", r.body);
    let id = id_of(&r);
    ojs_tests::after_index_lag().await;
    let f = app
        .fetch(json!({"queues": [queue], "worker_id": worker}))
        .await?;
    anyhow::ensure!(f.body["jobs"][0]["id"] == json!(id), "{:?}", f.body);
    Ok(id)
}

async fn put(app: &TestApp, id: &str, body: Value) -> anyhow::Result<Reply> {
    app.call(
        Method::PUT,
        &format!("/ojs/v1/jobs/{id}/progress"),
        Some(body),
    )
    .await
}

async fn get(app: &TestApp, id: &str) -> anyhow::Result<Reply> {
    app.call(Method::GET, &format!("/ojs/v1/jobs/{id}/progress"), None)
        .await
}

#[tokio::test]
async fn the_holder_reports_progress_that_never_goes_down_and_extends_its_lease(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = push_and_fetch(&app, "prog-a", "w1").await?;
    let before = app.info(&id).await?;
    assert_eq!(before.body["job"]["progress"], Value::Null, "none yet");
    let r = get(&app, &id).await?;
    assert_eq!(
        (
            r.status,
            r.body["progress"].clone(),
            r.body["state"].clone()
        ),
        (200, Value::Null, json!("active")),
        "{:?}",
        r.body
    );
    let lease_before = app
        .store
        .engine()
        .get_job(&ojs_core::JobId::parse(&id)?)
        .await?
        .and_then(|j| j.status.lease_until);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let r = put(
        &app,
        &id,
        json!({"progress": 0.5, "message": "half", "data": {"rows": 5}, "worker_id": "w1"}),
    )
    .await?;
    assert_eq!(
        (r.status, r.body["progress"].clone()),
        (200, json!(0.5)),
        "{:?}",
        r.body
    );
    let lease_after = app
        .store
        .engine()
        .get_job(&ojs_core::JobId::parse(&id)?)
        .await?
        .and_then(|j| j.status.lease_until);
    assert!(lease_after > lease_before, "a report is a heartbeat");
    // Lower values are kept at the higher one; out of range is clamped; a message or
    // data left out keeps the last one.
    let r = put(&app, &id, json!({"progress": 0.2})).await?;
    assert_eq!(r.body["progress"], json!(0.5));
    assert_eq!(r.body["message"], "half");
    let r = put(&app, &id, json!({"progress": 7, "message": "over"})).await?;
    assert_eq!(r.body["progress"], json!(1.0));
    let r = get(&app, &id).await?;
    assert_eq!(
        (
            r.body["progress"].clone(),
            r.body["message"].clone(),
            r.body["data"].clone()
        ),
        (json!(1.0), json!("over"), json!({"rows": 5}))
    );
    assert!(r.body["updated_at"].is_string(), "{:?}", r.body);
    assert_eq!(
        r.headers.get("cache-control").map(|v| v.as_bytes()),
        Some(&b"no-cache"[..])
    );
    let info = app.info(&id).await?;
    assert_eq!(
        info.body["job"]["progress"]["progress"],
        json!(1.0),
        "INFO shows it"
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn reports_of_another_worker_or_an_inactive_job_are_ignored() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = push_and_fetch(&app, "prog-b", "w1").await?;
    let r = put(&app, &id, json!({"progress": 0.3, "worker_id": "w1"})).await?;
    assert_eq!(r.body["progress"], json!(0.3));
    // Another worker, or an attempt that is not the current one: ignored, not refused.
    let r = put(&app, &id, json!({"progress": 0.9, "worker_id": "intruder"})).await?;
    assert_eq!((r.status, r.body["progress"].clone()), (200, json!(0.3)));
    let r = put(&app, &id, json!({"progress": 0.9, "attempt": 2})).await?;
    assert_eq!(r.body["progress"], json!(0.3));
    // A job that is not active takes no report.
    let waiting = app
        .push(json!({"type": "p.t", "args": [], "options": {"queue": "prog-b2"}}))
        .await?;
    let waiting = id_of(&waiting);
    let r = put(&app, &waiting, json!({"progress": 0.9})).await?;
    assert_eq!(
        (
            r.status,
            r.body["progress"].clone(),
            r.body["state"].clone()
        ),
        (200, Value::Null, json!("available"))
    );
    // No such job: 404; a bad report: 400 naming the field.
    let missing = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        put(&app, &missing, json!({"progress": 0.1})).await?.status,
        404
    );
    assert_eq!(get(&app, &missing).await?.status, 404);
    let r = put(&app, &id, json!({"progress": "most"})).await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    let r = put(&app, &id, json!({})).await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_retry_starts_without_progress_and_completion_reads_one() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = push_and_fetch(&app, "prog-c", "w1").await?;
    // The SDKs' shape: percentage 0-100.
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/workers/progress",
            Some(json!({"job_id": id, "percentage": 40, "message": "m"})),
        )
        .await?;
    assert_eq!(
        (r.status, r.body["progress"].clone()),
        (200, json!(0.4)),
        "{:?}",
        r.body
    );
    let n = app
        .nack(json!({"job_id": id, "worker_id": "w1", "error": {"message": "again"}}))
        .await?;
    assert_eq!(n.status, 200, "{:?}", n.body);
    let r = get(&app, &id).await?;
    assert_eq!(
        r.body["progress"],
        json!(0.4),
        "a failed attempt keeps its progress"
    );
    // The retry (after its 0.1 s backoff) starts afresh.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let fetched = loop {
        let _ = ojs_tests::sweep(&app.store, ojs_core::time::now()).await;
        let f = app
            .fetch(json!({"queues": ["prog-c"], "worker_id": "w2"}))
            .await?;
        if f.body["jobs"][0]["id"] == json!(id) {
            break f;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the retry never came"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(fetched.body["jobs"][0]["attempt"], json!(2));
    assert_eq!(get(&app, &id).await?.body["progress"], Value::Null);
    let r = put(&app, &id, json!({"progress": 0.1, "worker_id": "w2"})).await?;
    assert_eq!(
        r.body["progress"],
        json!(0.1),
        "not held at the last attempt's 0.4"
    );
    let a = app.ack(json!({"job_id": id, "worker_id": "w2"})).await?;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let r = get(&app, &id).await?;
    assert_eq!(
        (r.body["progress"].clone(), r.body["state"].clone()),
        (json!(1.0), json!("completed"))
    );
    app.teardown().await;
    Ok(())
}
