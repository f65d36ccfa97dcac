//! The admin API (ojs-admin-api.md) over HTTP against the local stack: each required
//! capability (ADM-001..008), the recommended ones, the dead letter management the
//! dashboard calls, and API key scopes (§13) with their 403s.

use std::time::Duration;

use ojs_http::auth::{issue_key, issue_scoped_key};
use ojs_http::scopes::{Scope, Scopes};
use ojs_http::{AuthMode, HttpConfig};
use ojs_tests::{after_index_lag, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

async fn push(app: &TestApp, job: Value) -> anyhow::Result<String> {
    let r = app.push(job).await?;
    anyhow::ensure!(r.status == 201, "push: {} {}", r.status, r.body);
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

async fn get(app: &TestApp, path: &str) -> anyhow::Result<Value> {
    let r = app.call(Method::GET, path, None).await?;
    anyhow::ensure!(r.status == 200, "GET {path}: {} {}", r.status, r.body);
    Ok(r.body)
}

/// The ids listed by `path`, once they are `want` (lifecycle events may arrive a moment
/// after the transition).
async fn listed(app: &TestApp, path: &str, want: usize) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for _ in 0..40 {
        let body = get(app, path).await?;
        ids = body["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|j| j["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if ids.len() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(ids)
}

/// Seeds queue `q`: 3 available, 1 scheduled, 1 active, 1 completed, 1 dead-lettered
/// (with an error). Returns (available ids, completed id, dead id).
async fn seed(app: &TestApp, q: &str) -> anyhow::Result<(Vec<String>, String, String)> {
    let mut available = Vec::new();
    for i in 0..3 {
        available.push(
            push(
                app,
                json!({"type": "mail.send", "args": [i], "options": {"queue": q}}),
            )
            .await?,
        );
    }
    push(app, json!({"type": "mail.later", "args": [], "options": {"queue": q, "delay_until": "2999-01-01T00:00:00Z"}})).await?;
    let done = push(
        app,
        json!({"type": "mail.done", "args": [], "options": {"queue": q, "priority": 10}}),
    )
    .await?;
    let dead = push(app, json!({"type": "mail.dead", "args": [], "options": {"queue": q, "priority": 9, "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}})).await?;
    let held = push(
        app,
        json!({"type": "mail.held", "args": [], "options": {"queue": q, "priority": 8}}),
    )
    .await?;
    after_index_lag().await;
    let f = app
        .fetch(json!({"queues": [q], "count": 3, "worker_id": "w1"}))
        .await?;
    let fetched: Vec<&str> = f.body["jobs"]
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["id"].as_str()).collect())
        .unwrap_or_default();
    anyhow::ensure!(
        fetched == [done.as_str(), dead.as_str(), held.as_str()],
        "fetch order: {}",
        f.body
    );
    app.ack(json!({"job_id": done, "result": {"ok": true}}))
        .await?;
    app.nack(
        json!({"job_id": dead, "error": {"type": "SmtpError", "message": "connection refused"}}),
    )
    .await?;
    Ok((available, done, dead))
}

/// The admin job listings filter by tenant (`?tenant=`, `_default` for jobs of none), for
/// an operator looking at one customer, and `/admin/tenants/{id}/jobs` lists one
/// tenant's jobs; a tenant id the rules refuse is a 400 naming it.
#[tokio::test]
async fn admin_listings_filter_by_tenant() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let mut by_tenant: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (i, tenant) in ["acme", "beta", "acme", "_default"].into_iter().enumerate() {
        let mut job = json!({"type": "tf.t", "args": [i], "queue": "tf"});
        if tenant != "_default" {
            job["meta"] = json!({"tenant_id": tenant});
        }
        let r = app.push(job).await?;
        anyhow::ensure!(r.status == 201, "{}", r.body);
        by_tenant
            .entry(tenant)
            .or_default()
            .push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    for (tenant, want) in &by_tenant {
        let path = format!("/ojs/v1/admin/jobs?queue=tf&tenant={tenant}");
        let mut got = listed(&app, &path, want.len()).await?;
        got.sort();
        let mut want = want.clone();
        want.sort();
        assert_eq!(got, want, "{tenant}");
    }
    assert_eq!(
        listed(&app, "/ojs/v1/admin/jobs?queue=tf", 4).await?.len(),
        4
    );
    // The dashboard's tenant page: the same listing under the tenant's path, whose
    // tenant stands over a `tenant` parameter.
    for (tenant, want) in &by_tenant {
        let path = format!("/ojs/v1/admin/tenants/{tenant}/jobs?per_page=10&tenant=beta");
        let mut got = listed(&app, &path, want.len()).await?;
        got.sort();
        let mut want = want.clone();
        want.sort();
        assert_eq!(got, want, "{path}");
    }
    let bad_path = app
        .call(Method::GET, "/ojs/v1/admin/tenants/no%20such!/jobs", None)
        .await?;
    assert_eq!(bad_path.status, 400, "{}", bad_path.body);
    let bad = app
        .call(Method::GET, "/ojs/v1/admin/jobs?tenant=no%20such!", None)
        .await?;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.body["error"]["code"], "invalid_request", "{}", bad.body);
    assert!(bad.body.to_string().contains("$.tenant"), "{}", bad.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn queues_stats_and_job_listing_by_state() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let (available, done, dead) = seed(&app, "adm-a").await?;

    // ADM-001: queues with counts per state.
    let body = get(&app, "/ojs/v1/admin/queues?page=1&per_page=50").await?;
    let q = &body["items"][0];
    assert_eq!(q["name"], "adm-a");
    assert_eq!(q["state"], "active");
    assert_eq!(q["paused"], false);
    let c = &q["counts"];
    assert_eq!(
        [
            &c["available"],
            &c["scheduled"],
            &c["active"],
            &c["completed"],
            &c["discarded"]
        ],
        [3, 1, 1, 1, 1],
        "{body}"
    );
    assert_eq!(
        body["pagination"],
        json!({"total": 1, "page": 1, "per_page": 50})
    );
    let detail = get(&app, "/ojs/v1/admin/queues/adm-a").await?;
    assert_eq!(detail["counts"]["available"], 3);
    assert!(detail["configuration"].is_object());
    let r = app
        .call(Method::GET, "/ojs/v1/admin/queues/nope", None)
        .await?;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );

    // ADM-005: aggregate statistics.
    let stats = get(&app, "/ojs/v1/admin/stats").await?;
    assert_eq!(stats["queues"], 1);
    assert_eq!(stats["jobs"]["available"], 3);
    assert_eq!(stats["jobs"]["completed"], 1);
    assert!(stats["throughput"]["processed_per_minute"].is_number());

    // ADM-003: listing with a state filter and pagination.
    let mut want = available.clone();
    want.sort();
    want.reverse();
    assert_eq!(
        listed(&app, "/ojs/v1/admin/jobs?queue=adm-a&state=available", 3).await?,
        want
    );
    let page2 = get(
        &app,
        "/ojs/v1/admin/jobs?queue=adm-a&state=available&per_page=2&page=2",
    )
    .await?;
    assert_eq!(page2["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        page2["pagination"],
        json!({"total": 3, "page": 2, "per_page": 2})
    );
    assert_eq!(
        listed(&app, "/ojs/v1/admin/jobs?state=completed", 1).await?,
        std::slice::from_ref(&done)
    );
    assert_eq!(
        listed(&app, "/ojs/v1/admin/jobs?queue=adm-a&state=discarded", 1).await?,
        std::slice::from_ref(&dead)
    );
    assert_eq!(
        listed(&app, "/ojs/v1/admin/jobs?queue=adm-a&state=scheduled", 1)
            .await?
            .len(),
        1
    );
    let active = get(&app, "/ojs/v1/admin/jobs?queue=adm-a&state=active").await?;
    assert_eq!(active["items"][0]["type"], "mail.held");
    // Every state of the queue, then filtered by type (exact and prefix).
    assert_eq!(
        listed(&app, "/ojs/v1/admin/jobs?queue=adm-a", 7)
            .await?
            .len(),
        7
    );
    assert_eq!(
        listed(&app, "/ojs/v1/admin/jobs?type=mail.send", 3)
            .await?
            .len(),
        3
    );
    assert_eq!(
        listed(&app, "/ojs/v1/admin/jobs?type=mail.d*", 2)
            .await?
            .len(),
        2
    );
    let by_prio = get(
        &app,
        "/ojs/v1/admin/jobs?queue=adm-a&sort=priority&order=desc&per_page=1",
    )
    .await?;
    assert_eq!(by_prio["items"][0]["id"], done.as_str());

    // ADM-004: the full envelope, with its errors.
    let job = get(&app, &format!("/ojs/v1/admin/jobs/{dead}")).await?;
    assert_eq!(job["type"], "mail.dead");
    assert_eq!(job["state"], "discarded");
    assert_eq!(job["errors"][0]["message"], "connection refused", "{job}");
    assert!(job["args"].is_array() && job["metadata"]["discarded_at"].is_string());

    for (path, status) in [
        (
            "/ojs/v1/admin/jobs/019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f",
            404,
        ),
        ("/ojs/v1/admin/jobs/not-an-id", 400),
        ("/ojs/v1/admin/jobs?state=pending", 400),
        ("/ojs/v1/admin/jobs?state=nonsense", 400),
        ("/ojs/v1/admin/jobs?per_page=101", 400),
        ("/ojs/v1/admin/jobs?since=yesterday", 400),
        ("/ojs/v1/admin/stats/history?period=2m", 400),
    ] {
        let r = app.call(Method::GET, path, None).await?;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert!(r.body["error"]["code"].is_string(), "{path}: {}", r.body);
    }

    // ADM-R002: history from the lifecycle events.
    let h = get(&app, "/ojs/v1/admin/stats/history?period=1m").await?;
    let enq: u64 = h["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|p| p["enqueued"].as_u64()).sum())
        .unwrap_or(0);
    let processed: u64 = h["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|p| p["processed"].as_u64()).sum())
        .unwrap_or(0);
    // Six pushes enqueue; the delayed one is `job.scheduled`.
    assert_eq!((enq, processed), (6, 1), "{h}");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn pause_retry_cancel_bulk_and_purge() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let (available, done, dead) = seed(&app, "adm-b").await?;

    // ADM-002: pause and resume.
    let r = app
        .call(Method::POST, "/ojs/v1/admin/queues/adm-b/pause", None)
        .await?;
    assert_eq!(
        (r.status, &r.body["paused"]),
        (200, &json!(true)),
        "{}",
        r.body
    );
    assert!(r.body["paused_at"].is_string());
    after_index_lag().await;
    let f = app.fetch(json!({"queues": ["adm-b"]})).await?;
    assert_eq!(f.body["jobs"], json!([]), "a paused queue gives nothing");
    let r = app
        .call(Method::POST, "/ojs/v1/admin/queues/adm-b/resume", None)
        .await?;
    assert_eq!((r.status, &r.body["paused"]), (200, &json!(false)));

    // Dead letter: list, stats, retry one.
    assert_eq!(
        listed(&app, "/ojs/v1/admin/dead-letter?page=1&per_page=25", 1).await?,
        std::slice::from_ref(&dead)
    );
    let st = get(&app, "/ojs/v1/admin/dead-letter/stats").await?;
    assert_eq!(
        (&st["total"], &st["by_queue"]["adm-b"]),
        (&json!(1), &json!(1)),
        "{st}"
    );
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/admin/dead-letter/{dead}/retry"),
            None,
        )
        .await?;
    assert_eq!(
        (r.status, &r.body["state"]),
        (200, &json!("available")),
        "{}",
        r.body
    );
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/admin/dead-letter/{dead}/retry"),
            None,
        )
        .await?;
    assert_eq!(r.status, 404, "no longer a dead letter: {}", r.body);
    assert_eq!(
        get(&app, "/ojs/v1/admin/dead-letter/stats").await?["total"],
        0
    );

    // Cancel one, retry it (a cancelled job goes back to available, attempt 0).
    let id = &available[0];
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/admin/jobs/{id}/cancel"),
            None,
        )
        .await?;
    assert_eq!((r.status, &r.body["state"]), (200, &json!("cancelled")));
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/admin/jobs/{id}/retry"),
            None,
        )
        .await?;
    assert_eq!(
        (r.status, &r.body["state"], &r.body["attempt"]),
        (200, &json!("available"), &json!(0)),
        "{}",
        r.body
    );
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/admin/jobs/{done}/retry"),
            None,
        )
        .await?;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("conflict")),
        "a completed job is not retried"
    );
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/jobs/019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f/retry",
            None,
        )
        .await?;
    assert_eq!(r.status, 404);

    // Bulk operations need confirm: true (ADM-007, ADM-R005).
    for body in [
        json!({"filter": {"queue": "adm-b"}}),
        json!({"filter": {"queue": "adm-b"}, "confirm": false}),
        json!({"confirm": "yes"}),
    ] {
        let r = app
            .call(
                Method::POST,
                "/ojs/v1/admin/jobs/bulk/cancel",
                Some(body.clone()),
            )
            .await?;
        assert_eq!(
            (r.status, r.body["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{body}: {}",
            r.body
        );
    }
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/jobs/bulk/explode",
            Some(json!({"confirm": true})),
        )
        .await?;
    assert_eq!(r.status, 404);
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/jobs/bulk/retry",
            Some(json!({"filter": {"state": "active"}, "confirm": true})),
        )
        .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    // A bulk action selects through the indexes, as the listing does: the job retried
    // above moved a moment ago, and within the GSI's lag (on AWS too) it is left out.
    after_index_lag().await;
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/jobs/bulk/cancel",
            Some(json!({"filter": {"queue": "adm-b", "type": "mail.send"}, "confirm": true})),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (
            &r.body["action"],
            &r.body["matched"],
            &r.body["succeeded"],
            &r.body["failed"]
        ),
        (&json!("cancel"), &json!(3), &json!(3), &json!(0)),
        "{}",
        r.body
    );
    listed(&app, "/ojs/v1/admin/jobs?queue=adm-b&state=cancelled", 3).await?;
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/jobs/bulk/retry",
            Some(json!({"filter": {"queue": "adm-b", "state": "cancelled"}, "confirm": true})),
        )
        .await?;
    assert_eq!(
        (&r.body["matched"], &r.body["succeeded"]),
        (&json!(3), &json!(3)),
        "{}",
        r.body
    );
    assert_eq!(
        app.store
            .derived()
            .queue_stats(&ojs_core::QueueName::parse("adm-b")?)
            .await?
            .available,
        4
    );

    // Purge finished jobs (ADM-R001) and bulk delete.
    let r = app
        .call(
            Method::DELETE,
            "/ojs/v1/admin/queues/adm-b/jobs",
            Some(json!({"states": ["completed"]})),
        )
        .await?;
    assert_eq!(r.status, 400, "purge without confirm: {}", r.body);
    let r = app
        .call(
            Method::DELETE,
            "/ojs/v1/admin/queues/adm-b/jobs",
            Some(json!({"states": ["available"], "confirm": true})),
        )
        .await?;
    assert_eq!(r.status, 400, "only finished jobs are purged: {}", r.body);
    let r = app.call(Method::DELETE, "/ojs/v1/admin/queues/adm-b/jobs", Some(json!({"states": ["completed"], "older_than": "2000-01-01T00:00:00Z", "confirm": true}))).await?;
    assert_eq!(r.body["purged_count"], 0, "{}", r.body);
    let r = app
        .call(
            Method::DELETE,
            "/ojs/v1/admin/queues/adm-b/jobs",
            Some(json!({"states": ["completed"], "confirm": true})),
        )
        .await?;
    assert_eq!(
        (r.status, &r.body["purged_count"]),
        (200, &json!(1)),
        "{}",
        r.body
    );
    let r = app
        .call(Method::GET, &format!("/ojs/v1/admin/jobs/{done}"), None)
        .await?;
    assert_eq!(r.status, 404, "purged for good");
    app.call(
        Method::POST,
        &format!("/ojs/v1/admin/jobs/{}/cancel", available[1]),
        None,
    )
    .await?;
    // Selected through the indexes: the job cancelled just now shows there after the lag.
    after_index_lag().await;
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/jobs/bulk/delete",
            Some(json!({"filter": {"queue": "adm-b", "state": "cancelled"}, "confirm": true})),
        )
        .await?;
    assert_eq!(
        (&r.body["matched"], &r.body["succeeded"]),
        (&json!(1), &json!(1)),
        "{}",
        r.body
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn dead_letter_bulk_workers_maintenance_and_the_rest() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let (_, _, dead) = seed(&app, "adm-c").await?;
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/dead-letter/retry",
            Some(json!({"filter": {}})),
        )
        .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/dead-letter/retry",
            Some(json!({"filter": {}, "confirm": true})),
        )
        .await?;
    assert_eq!(
        (&r.body["matched"], &r.body["succeeded"]),
        (&json!(1), &json!(1)),
        "{}",
        r.body
    );
    assert_eq!(
        get(&app, &format!("/ojs/v1/admin/jobs/{dead}")).await?["state"],
        "available"
    );
    let r = app
        .call(
            Method::DELETE,
            "/ojs/v1/admin/dead-letter",
            Some(json!({"confirm": true})),
        )
        .await?;
    assert_eq!(
        (r.status, &r.body["purged_count"]),
        (200, &json!(0)),
        "{}",
        r.body
    );

    // ADM-006 and the worker operations (ADM-R003).
    app.call(
        Method::POST,
        "/ojs/v1/workers/heartbeat",
        Some(json!({"worker_id": "w-live", "active_jobs": []})),
    )
    .await?;
    let w = get(&app, "/ojs/v1/admin/workers?page=1&per_page=50").await?;
    assert!(
        w["items"].as_array().is_some_and(|a| a
            .iter()
            .any(|x| x["id"] == "w-live" && x["state"] == "running")),
        "{w}"
    );
    assert!(w["summary"]["running"].as_u64() >= Some(1));
    let r = app
        .call(Method::POST, "/ojs/v1/admin/workers/w-live/quiet", None)
        .await?;
    assert_eq!(r.status, 200);
    let r = app
        .call(Method::DELETE, "/ojs/v1/admin/workers/w-live", None)
        .await?;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("conflict")),
        "a live worker stays: {}",
        r.body
    );
    let r = app
        .call(Method::DELETE, "/ojs/v1/admin/workers/nobody", None)
        .await?;
    assert_eq!(r.status, 404);

    // Maintenance mode (ADM-R004): every queue paused, then resumed.
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/system/maintenance",
            Some(json!({"enabled": true, "reason": "upgrade", "estimated_duration": "PT30M"})),
        )
        .await?;
    assert_eq!(
        (r.status, &r.body["enabled"], &r.body["reason"]),
        (200, &json!(true), &json!("upgrade")),
        "{}",
        r.body
    );
    assert!(r.body["ends_at"].is_string());
    assert_eq!(
        get(&app, "/ojs/v1/admin/queues/adm-c").await?["paused"],
        true
    );
    assert_eq!(
        get(&app, "/ojs/v1/admin/system/maintenance").await?["enabled"],
        true
    );
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/system/maintenance",
            Some(json!({"enabled": false})),
        )
        .await?;
    assert_eq!(r.body["enabled"], false);
    assert_eq!(
        get(&app, "/ojs/v1/admin/queues/adm-c").await?["paused"],
        false
    );
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/admin/system/maintenance",
            Some(json!({"enabled": "yes"})),
        )
        .await?;
    assert_eq!(r.status, 400);

    // Queue configuration (ADM-R006): the rate limit applies; the rest is refused.
    let r = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/queues/adm-c/config",
            Some(json!({"rate_limit": {"limit": 5, "period": "PT1M"}})),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["configuration"]["rate_limit"]["rate"]["limit"], 5,
        "{}",
        r.body
    );
    let r = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/queues/adm-c/config",
            Some(json!({"concurrency": 3})),
        )
        .await?;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (422, Some("unsupported"))
    );
    let r = app
        .call(
            Method::PATCH,
            &format!("/ojs/v1/admin/jobs/{dead}"),
            Some(json!({"priority": 3})),
        )
        .await?;
    assert_eq!(r.status, 422);

    // The dashboard's other reads answer with their documented shapes.
    assert!(get(&app, "/ojs/v1/admin/system/config").await?["backend"].is_string());
    assert!(get(&app, "/ojs/v1/admin/schemas").await?["schemas"].is_array());
    assert!(get(&app, "/ojs/v1/admin/tenants?page=1&per_page=25").await?["items"].is_array());
    assert!(get(&app, "/ojs/v1/admin/pools").await?["pools"].is_array());
    assert_eq!(
        get(&app, "/ojs/v1/admin/scheduling/stats").await?["queues"][0]["name"],
        "adm-c"
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn scopes_decide_who_may_call_what() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(HttpConfig {
        auth: AuthMode::ApiKey,
        ..HttpConfig::default()
    })
    .await?;
    let data = issue_key(&app.store, "data").await?.key;
    let reader = issue_scoped_key(
        &app.store,
        "dash",
        Some(Scopes::of(&[Scope::AdminRead, Scope::DataRead])),
    )
    .await?
    .key;
    let writer = issue_scoped_key(
        &app.store,
        "ops",
        Some(Scopes::of(&[Scope::AdminRead, Scope::AdminWrite])),
    )
    .await?
    .key;
    let purger = issue_scoped_key(&app.store, "purge", Some(Scopes::of(&[Scope::AdminPurge])))
        .await?
        .key;
    let call = |key: &str, method: Method, path: &str, body: Option<Value>| {
        let mut req = app
            .client
            .request(method, format!("{}{path}", app.base_url))
            .bearer_auth(key);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        async move {
            let res = req.send().await?;
            let status = res.status().as_u16();
            let body: Value = serde_json::from_slice(&res.bytes().await?).unwrap_or(Value::Null);
            anyhow::Ok((status, body))
        }
    };
    // A key made before scopes (none stored) is a data key: data yes, admin no.
    let (s, _) = call(
        &data,
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "s.t", "args": [], "options": {"queue": "sq"}})),
    )
    .await?;
    assert_eq!(s, 201);
    let (s, body) = call(&data, Method::GET, "/ojs/v1/admin/queues", None).await?;
    assert_eq!(s, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    assert_eq!(
        body["error"]["details"]["required_scope"], "ojs:admin:read",
        "{body}"
    );
    assert!(body["error"]["request_id"].is_string() || body["error"]["message"].is_string());
    // The dashboard's read-only key reads, and writes nothing.
    let (s, body) = call(&reader, Method::GET, "/ojs/v1/admin/queues", None).await?;
    assert_eq!(
        (s, &body["items"][0]["name"]),
        (200, &json!("sq")),
        "{body}"
    );
    let (s, _) = call(&reader, Method::GET, "/ojs/v1/admin/stats", None).await?;
    assert_eq!(s, 200);
    let (s, body) = call(&reader, Method::POST, "/ojs/v1/admin/queues/sq/pause", None).await?;
    assert_eq!(
        (s, body["error"]["details"]["required_scope"].as_str()),
        (403, Some("ojs:config:write")),
        "{body}"
    );
    let (s, _) = call(
        &reader,
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "s.t", "args": []})),
    )
    .await?;
    assert_eq!(s, 403);
    assert!(
        !app.store
            .derived()
            .queue_stats(&ojs_core::QueueName::parse("sq")?)
            .await?
            .paused
    );
    // Admin write pauses; purging needs its own scope.
    let (s, _) = call(&writer, Method::POST, "/ojs/v1/admin/queues/sq/pause", None).await?;
    assert_eq!(s, 200);
    let purge = json!({"states": ["completed"], "confirm": true});
    let (s, body) = call(
        &writer,
        Method::DELETE,
        "/ojs/v1/admin/queues/sq/jobs",
        Some(purge.clone()),
    )
    .await?;
    assert_eq!(
        (s, body["error"]["details"]["required_scope"].as_str()),
        (403, Some("ojs:admin:purge"))
    );
    let (s, body) = call(
        &purger,
        Method::DELETE,
        "/ojs/v1/admin/queues/sq/jobs",
        Some(purge),
    )
    .await?;
    assert_eq!((s, &body["purged_count"]), (200, &json!(0)), "{body}");
    let (s, _) = call(&purger, Method::GET, "/ojs/v1/admin/queues", None).await?;
    assert_eq!(s, 403);
    // Public paths stay public.
    let r = app.call(Method::GET, "/ojs/manifest", None).await?;
    assert_eq!(r.status, 200);
    app.teardown().await;
    Ok(())
}

/// The admin API's `DELETE /admin/dead-letter/{id}` answers `204` with no body (the dead
/// letter suite's EXT-DLQ-004), and the job is gone; the binding's
/// `DELETE /dead-letter/{id}` keeps its `200 {deleted, job_id}`.
#[tokio::test]
async fn admin_dead_letter_delete_is_204_and_the_binding_one_200() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let job = json!({"type": "dl.del", "args": [], "options": {"queue": "dl-del",
        "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}});
    let a = push(&app, job.clone()).await?;
    let b = push(&app, job).await?;
    after_index_lag().await;
    let f = app
        .fetch(json!({"queues": ["dl-del"], "count": 2, "worker_id": "w"}))
        .await?;
    assert_eq!(f.job_ids().len(), 2, "{}", f.body);
    for id in [&a, &b] {
        let r = app
            .nack(json!({"job_id": id, "error": {"message": "no"}}))
            .await?;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let admin = format!("/ojs/v1/admin/dead-letter/{a}");
    let r = app.call(Method::DELETE, &admin, None).await?;
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(r.body.is_null(), "no body: {}", r.body);
    let r = app.call(Method::DELETE, &admin, None).await?;
    assert_eq!(r.status, 404, "gone: {}", r.body);
    let r = app
        .call(Method::GET, &format!("/ojs/v1/jobs/{a}"), None)
        .await?;
    assert_eq!(
        r.status, 404,
        "the job is deleted with its entry: {}",
        r.body
    );
    let r = app
        .call(Method::DELETE, &format!("/ojs/v1/dead-letter/{b}"), None)
        .await?;
    assert_eq!(
        (r.status, &r.body["deleted"]),
        (200, &json!(true)),
        "{}",
        r.body
    );
    app.teardown().await;
    Ok(())
}
