//! Scheduling pools (ojs-fair-scheduling.md): a FETCH over several queues follows the
//! strategy of the pool that holds them (round robin or weighted), or its own, instead of
//! draining its first queue before the next; without either, its own order, as before.

use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

async fn fill(app: &TestApp, queue: &str, n: usize) -> anyhow::Result<()> {
    let jobs: Vec<Value> = (0..n)
        .map(|i| json!({"type": "fs.t", "args": [i], "options": {"queue": queue}}))
        .collect();
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({ "jobs": jobs })),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "batch: {}", r.body);
    Ok(())
}

/// How many of one FETCH's jobs came from each of `queues`.
async fn split(app: &TestApp, body: Value, queues: &[&str]) -> anyhow::Result<Vec<usize>> {
    let r = app.fetch(body).await?;
    anyhow::ensure!(r.status == 200, "fetch: {}", r.body);
    let jobs = r.body["jobs"].as_array().cloned().unwrap_or_default();
    Ok(queues
        .iter()
        .map(|q| jobs.iter().filter(|j| j["queue"] == *q).count())
        .collect())
}

#[tokio::test]
async fn a_pool_mixes_the_queues_of_a_fetch() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let (a, b) = ("fs-a", "fs-b");
    fill(&app, a, 8).await?;
    fill(&app, b, 8).await?;
    ojs_tests::after_index_lag().await;
    // Without a pool: the FETCH's own order, its first queue first.
    let both = |count: u32| json!({"queues": [a, b], "count": count, "worker_id": "fs-w"});
    assert_eq!(split(&app, both(2), &[a, b]).await?, vec![2, 0]);
    // Its own strategy (§5.2): shared.
    let own = json!({"queues": [a, b], "count": 2, "strategy": "round_robin"});
    assert_eq!(split(&app, own, &[a, b]).await?, vec![1, 1]);

    let r = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/pools/fs-pool",
            Some(json!({"strategy": "round_robin", "queues": [a, b]})),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["pool"]["strategy"], "round_robin");
    assert_eq!(split(&app, both(2), &[a, b]).await?, vec![1, 1]);
    // One job a FETCH: the queues take turns.
    let mut firsts = vec![0, 0];
    for _ in 0..2 {
        let got = split(&app, both(1), &[a, b]).await?;
        firsts[0] += got[0];
        firsts[1] += got[1];
    }
    assert_eq!(firsts, vec![1, 1]);

    // Weighted 3:1, replacing it at once.
    let r = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/pools/fs-pool",
            Some(json!({"strategy": "weighted", "queues": {a: {"weight": 3}, b: {"weight": 1}}})),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(split(&app, both(4), &[a, b]).await?, vec![3, 1]);
    let list = app.call(Method::GET, "/ojs/v1/admin/pools", None).await?;
    assert_eq!(list.body["items"][0]["weights"][a], 3, "{}", list.body);
    let one = app
        .call(Method::GET, "/ojs/v1/admin/pools/fs-pool", None)
        .await?;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.body["pool"], list.body["items"][0], "{}", one.body);
    let stats = app
        .call(Method::GET, "/ojs/v1/admin/scheduling/stats", None)
        .await?;
    assert_eq!(
        stats.body["stats"]["pools"][0]["name"], "fs-pool",
        "{}",
        stats.body
    );
    // What a pool here does not do is refused.
    let r = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/pools/other",
            Some(json!({"queues": [a], "concurrency": 4})),
        )
        .await?;
    assert_eq!(r.status, 422, "{}", r.body);
    let r = app
        .call(Method::DELETE, "/ojs/v1/admin/pools/fs-pool", None)
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    // Gone: the FETCH's own order again (a is empty now: 2 + 1 + 1 + 1 + 3 of its 8
    // were fetched; refilled, it goes first).
    assert_eq!(split(&app, both(2), &[a, b]).await?, vec![0, 2]);
    fill(&app, a, 2).await?;
    ojs_tests::after_index_lag().await;
    assert_eq!(split(&app, both(2), &[a, b]).await?, vec![2, 0]);
    let r = app
        .call(Method::GET, "/ojs/v1/admin/pools/fs-pool", None)
        .await?;
    assert_eq!(r.status, 404, "{}", r.body);
    // A name no pool can have (past DynamoDB's key size, or not of a pool name's
    // characters) is not looked up: the same 404 as a name not defined, never a 500.
    let long = "p".repeat(2_000);
    for name in [long.as_str(), "no%20such", "fs-pool"] {
        for method in [Method::GET, Method::DELETE] {
            let path = format!("/ojs/v1/admin/pools/{name}");
            let r = app.call(method.clone(), &path, None).await?;
            assert_eq!(r.status, 404, "{method} {name:.20}: {}", r.body);
            assert_eq!(r.body["error"]["code"], "not_found", "{}", r.body);
            let message = r.body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.starts_with("no pool named "), "{message}");
        }
    }
    app.teardown().await;
    Ok(())
}
