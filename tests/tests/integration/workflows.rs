//! Workflows under concurrency: the last one out fires the batch callbacks exactly once,
//! and counters never lose an update.

use std::sync::Arc;

use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

/// Claims every job of `queue`, once the jobs just written are in the ready index (on
/// AWS, as under the strict layer's lag, a new index entry shows a moment after its write).
/// Every job FETCH finds on `queue`: FETCHes of 100 until one comes back short (a FETCH
/// past its time budget on a slow table answers with fewer than are there).
async fn drain(app: &TestApp, queue: &str) -> anyhow::Result<Vec<Value>> {
    ojs_tests::after_index_lag().await;
    let mut all = Vec::new();
    loop {
        let r = app.fetch(json!({"queues": [queue], "count": 100})).await?;
        let jobs = r.body["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            return Ok(all);
        }
        all.extend(jobs);
    }
}

/// 50 jobs acked by 16 concurrent workers, 20 times over: `on_complete` and `on_success`
/// each fire exactly once per batch and the batch counts all 50 completions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_callbacks_fire_exactly_once_under_16_concurrent_ackers() -> anyhow::Result<()> {
    let app = Arc::new(TestApp::spawn().await?);
    for round in 0..20 {
        let queue = format!("wf-race-{round}");
        let jobs: Vec<Value> = (0..50)
            .map(|i| json!({"type": "race.step", "args": [i], "options": {"queue": queue}}))
            .collect();
        let created = app
            .call(Method::POST, "/ojs/v1/workflows", Some(json!({"type": "batch", "jobs": jobs, "callbacks": {
                "on_complete": {"type": "race.done", "options": {"queue": format!("{queue}-cb")}},
                "on_success": {"type": "race.ok", "options": {"queue": format!("{queue}-cb")}},
                "on_failure": {"type": "race.failed", "options": {"queue": format!("{queue}-cb")}}}})))
            .await?;
        anyhow::ensure!(created.status == 201, "{:?}", created.body);
        let wf = created.body["workflow"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let claimed = drain(&app, &queue).await?;
        assert_eq!(claimed.len(), 50);
        let ids: Arc<Vec<String>> = Arc::new(
            claimed
                .iter()
                .filter_map(|j| j["id"].as_str().map(str::to_owned))
                .collect(),
        );
        let ackers: Vec<_> = (0..16)
            .map(|w| {
                let (app, ids) = (Arc::clone(&app), Arc::clone(&ids));
                tokio::spawn(async move {
                    for id in ids.iter().skip(w).step_by(16) {
                        let r = app.ack(json!({"job_id": id, "result": {"by": w}})).await?;
                        anyhow::ensure!(r.status == 200, "{:?}", r.body);
                    }
                    Ok(())
                })
            })
            .collect();
        for a in ackers {
            a.await??;
        }
        let callbacks = drain(&app, &format!("{queue}-cb")).await?;
        let mut kinds: Vec<&str> = callbacks
            .iter()
            .filter_map(|j| j["type"].as_str())
            .collect();
        kinds.sort_unstable();
        assert_eq!(kinds, ["race.done", "race.ok"], "round {round}");
        // A batch runs until its callbacks are done (ojs-workflows §8.3).
        let running = app
            .call(Method::GET, &format!("/ojs/v1/workflows/{wf}"), None)
            .await?
            .body;
        assert_eq!(running["workflow"]["state"], "running", "round {round}");
        for cb in &callbacks {
            let r = app.ack(json!({"job_id": cb["id"]})).await?;
            anyhow::ensure!(r.status == 200, "{:?}", r.body);
        }
        let view = app
            .call(Method::GET, &format!("/ojs/v1/workflows/{wf}"), None)
            .await?
            .body;
        assert_eq!(view["workflow"]["state"], "completed", "round {round}");
        assert_eq!(
            view["workflow"]["jobs_completed"], 50,
            "round {round}: no lost count"
        );
    }
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    Ok(())
}

#[tokio::test]
async fn graph_steps_wait_for_all_parents_and_a_failure_cancels_the_rest() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let created = app
        .call(Method::POST, "/ojs/v1/workflows", Some(json!({"type": "chain", "steps": [
            {"id": "a", "type": "g.a", "options": {"queue": "g"}},
            {"id": "b", "type": "g.b", "options": {"queue": "g"}},
            {"id": "c", "type": "g.c", "depends_on": ["a", "b"], "options": {"queue": "g"}},
            {"id": "d", "type": "g.d", "depends_on": ["c"], "options": {"queue": "g", "retry": {"max_attempts": 1}}},
            {"id": "e", "type": "g.e", "depends_on": ["d"], "options": {"queue": "g"}}]})))
        .await?;
    let wf = created.body["workflow"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let first = drain(&app, "g").await?;
    assert_eq!(first.len(), 2, "a and b run in parallel");
    app.ack(json!({"job_id": first[0]["id"], "result": {"from": "a"}}))
        .await?;
    assert!(
        drain(&app, "g").await?.is_empty(),
        "c waits for both parents"
    );
    app.ack(json!({"job_id": first[1]["id"], "result": {"from": "b"}}))
        .await?;
    let c = drain(&app, "g").await?;
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["type"], "g.c");
    assert_eq!(c[0]["parent_results"].as_array().map(Vec::len), Some(2));
    app.ack(json!({"job_id": c[0]["id"]})).await?;
    let d = drain(&app, "g").await?;
    let failed = app
        .nack(json!({"job_id": d[0]["id"], "error": {"message": "boom"}}))
        .await?;
    assert_eq!(failed.body["state"], "discarded");
    let view = app
        .call(Method::GET, &format!("/ojs/v1/workflows/{wf}"), None)
        .await?
        .body;
    assert_eq!(view["workflow"]["state"], "failed");
    assert_eq!(view["workflow"]["steps_completed"], 3);
    assert_eq!(view["workflow"]["steps_cancelled"], 1, "e can never run");
    assert!(drain(&app, "g").await?.is_empty());
    assert_eq!(
        app.call(Method::DELETE, &format!("/ojs/v1/workflows/{wf}"), None)
            .await?
            .status,
        409
    );
    app.teardown().await;
    Ok(())
}

/// Completes a job in DynamoDB directly, as a request that died right after its terminal
/// write would have left it: the workflow never heard of it.
async fn complete_behind_the_workflows_back(app: &TestApp, id: &str) -> anyhow::Result<()> {
    use aws_sdk_dynamodb::types::AttributeValue as Av;
    let sdk = ojs_store::sdk_config().await;
    let client = ojs_store::client_for(&sdk);
    client
        .update_item()
        .table_name(app.store.table())
        .key("pk", Av::S(format!("JOB#{id}")))
        .key("sk", Av::S("JOB".into()))
        .update_expression("SET #s = :done, completed_at = :now, #r = :r REMOVE gsi1pk, gsi1sk, gsi2pk, gsi2sk, lease_until")
        .expression_attribute_names("#s", "state")
        .expression_attribute_names("#r", "result")
        .expression_attribute_values(":done", Av::S("completed".into()))
        .expression_attribute_values(":now", Av::S(ojs_core::time::format(&ojs_core::time::now())))
        .expression_attribute_values(":r", Av::S("{\"n\":1}".into()))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
    Ok(())
}

#[tokio::test]
async fn the_sweep_finishes_follow_ups_a_dying_request_left_undone_exactly_once(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let created = app
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "chain", "steps": [
            {"type": "wf.a", "options": {"queue": "wf-repair"}},
            {"type": "wf.b", "options": {"queue": "wf-repair"}}]})),
        )
        .await?;
    anyhow::ensure!(created.status == 201, "{:?}", created.body);
    let wf = created.body["workflow"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let first = drain(&app, "wf-repair").await?;
    assert_eq!(first.len(), 1, "only the first step runs");
    let a = first[0]["id"].as_str().unwrap_or_default().to_owned();
    complete_behind_the_workflows_back(&app, &a).await?;
    assert_eq!(view(&app, &wf).await?["steps_completed"], 0);
    assert!(drain(&app, "wf-repair").await?.is_empty(), "b still waits");

    // The sweep's check (due a minute after creation) records a and releases b, once.
    let later = ojs_core::time::after(ojs_core::time::now(), std::time::Duration::from_secs(120));
    let budget = std::time::Instant::now() + std::time::Duration::from_secs(20);
    assert_eq!(
        app.store.workflows().check_workflows(later, budget).await?,
        1
    );
    let checked = view(&app, &wf).await?;
    assert_eq!(checked["steps_completed"], 1, "{checked}");
    assert_eq!(checked["state"], "running");
    // Checking again changes nothing: the next check is further out, and a forced one is
    // idempotent.
    let much_later = ojs_core::time::after(later, std::time::Duration::from_secs(3600));
    app.store
        .workflows()
        .check_workflows(much_later, budget)
        .await?;
    assert_eq!(
        view(&app, &wf).await?["steps_completed"],
        1,
        "not counted twice"
    );
    let second = drain(&app, "wf-repair").await?;
    assert_eq!(second.len(), 1, "b released exactly once");
    assert_eq!(second[0]["type"], "wf.b");
    assert_eq!(second[0]["parent_results"], json!([{"n": 1}]));
    let ack = app.ack(json!({"job_id": second[0]["id"]})).await?;
    assert_eq!(ack.status, 200);
    let done = view(&app, &wf).await?;
    assert_eq!(
        (done["state"].as_str(), done["steps_completed"].as_u64()),
        (Some("completed"), Some(2))
    );
    app.teardown().await;
    Ok(())
}

async fn view(app: &TestApp, wf: &str) -> anyhow::Result<Value> {
    let path = format!("/ojs/v1/workflows/{wf}");
    Ok(app.call(Method::GET, &path, None).await?.body)
}
