//! The dead letter queue as a tenant sees it (ojs-multi-tenancy.md §4: every read keeps
//! to the request's tenant): its listing, retry and delete.

use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

async fn as_tenant(
    app: &TestApp,
    tenant: Option<&str>,
    method: Method,
    path: &str,
) -> anyhow::Result<Reply> {
    app.call_as(tenant, method, path, None).await
}

/// The ids and total of a dead letter listing.
fn listed(r: &Reply) -> (Vec<String>, Value) {
    let mut ids: Vec<String> = r.body["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|j| j["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    ids.sort();
    (ids, r.body["pagination"]["total"].clone())
}

#[tokio::test]
async fn a_tenant_lists_retries_and_deletes_only_its_own_dead_letters() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "td-dead";
    let mut ids = Vec::new();
    for tenant in [Some("da"), Some("db"), None] {
        let mut job = json!({"type": "td.t", "args": [],
            "options": {"queue": q, "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}});
        if let Some(t) = tenant {
            job["meta"] = json!({"tenant_id": t});
        }
        let r = app.push(job).await?;
        anyhow::ensure!(r.status == 201, "{}", r.body);
        ids.push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    let (a, b, plain) = (ids[0].clone(), ids[1].clone(), ids[2].clone());
    ojs_tests::after_index_lag().await;
    let got = app
        .call(
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": [q], "count": 3})),
        )
        .await?;
    assert_eq!(got.job_ids().len(), 3, "{}", got.body);
    for id in &ids {
        let nack = app
            .call(
                Method::POST,
                "/ojs/v1/workers/nack",
                Some(json!({"job_id": id, "error": {"message": "gone"}})),
            )
            .await?;
        assert_eq!(nack.status, 200, "{}", nack.body);
    }
    let list = |tenant: Option<&'static str>| {
        let app = &app;
        async move { as_tenant(app, tenant, Method::GET, "/ojs/v1/dead-letter").await }
    };
    let mut all = ids.clone();
    all.sort();
    assert_eq!(listed(&list(None).await?), (all, json!(3)));
    assert_eq!(
        listed(&list(Some("da")).await?),
        (vec![a.clone()], json!(1))
    );
    assert_eq!(
        listed(&list(Some("_default")).await?),
        (vec![plain.clone()], json!(1))
    );
    let by_queue = as_tenant(
        &app,
        Some("db"),
        Method::GET,
        &format!("/ojs/v1/dead-letter?queue={q}"),
    )
    .await?;
    assert_eq!(listed(&by_queue), (vec![b.clone()], json!(1)));
    assert_eq!(listed(&list(Some("nobody")).await?), (Vec::new(), json!(0)));

    // Another tenant's dead letter is not there for da: 404, and it stays.
    for (method, path) in [
        (Method::POST, format!("/ojs/v1/dead-letter/{b}/retry")),
        (Method::DELETE, format!("/ojs/v1/dead-letter/{b}")),
    ] {
        let r = as_tenant(&app, Some("da"), method, &path).await?;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
    }
    assert_eq!(listed(&list(Some("db")).await?).1, json!(1));
    // Its own it retries and deletes.
    let retried = as_tenant(
        &app,
        Some("da"),
        Method::POST,
        &format!("/ojs/v1/dead-letter/{a}/retry"),
    )
    .await?;
    assert_eq!(retried.status, 200, "{}", retried.body);
    let deleted = as_tenant(
        &app,
        Some("db"),
        Method::DELETE,
        &format!("/ojs/v1/dead-letter/{b}"),
    )
    .await?;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(listed(&list(None).await?), (vec![plain], json!(1)));
    app.teardown().await;
    Ok(())
}
