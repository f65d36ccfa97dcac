//! A tenant's `max_concurrency` and `max_enqueue_rate` (ojs-multi-tenancy.md §8.1-8.2):
//! hard limits set through the admin API, in force at once, over every queue.

use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

/// A job of `tenant` in `queue` that a FAIL discards (no retry to wait for).
fn job(tenant: &str, queue: &str, i: usize) -> Value {
    json!({"type": "tl.t", "args": [i],
           "options": {"queue": queue, "retry": {"max_attempts": 1}},
           "meta": {"tenant_id": tenant}})
}

async fn set_limits(app: &TestApp, tenant: &str, limits: Value) -> anyhow::Result<Reply> {
    let r = app
        .call(
            Method::PUT,
            &format!("/ojs/v1/admin/tenants/{tenant}/limits"),
            Some(limits),
        )
        .await?;
    anyhow::ensure!(
        r.status == 200 || r.status == 201,
        "limits: {} {}",
        r.status,
        r.body
    );
    Ok(r)
}

async fn push(app: &TestApp, body: Value) -> anyhow::Result<String> {
    let r = app.push(body).await?;
    anyhow::ensure!(r.status == 201, "push: {} {}", r.status, r.body);
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

/// The jobs one FETCH for any tenant hands out, as (id, tenant).
async fn fetch(
    app: &TestApp,
    queues: &[&str],
    count: u32,
) -> anyhow::Result<Vec<(String, String)>> {
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": queues, "count": count, "worker_id": "tl-w"})),
        )
        .await?;
    anyhow::ensure!(r.status == 200, "fetch: {} {}", r.status, r.body);
    Ok(r.body["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap_or_default().to_owned(),
                j["meta"]["tenant_id"]
                    .as_str()
                    .unwrap_or("_default")
                    .to_owned(),
            )
        })
        .collect())
}

fn of(jobs: &[(String, String)], tenant: &str) -> Vec<String> {
    jobs.iter()
        .filter(|(_, t)| t == tenant)
        .map(|(id, _)| id.clone())
        .collect()
}

#[tokio::test]
async fn a_tenants_max_concurrency_holds_its_active_jobs_across_queues() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let (q1, q2) = ("tl-c1", "tl-c2");
    let set = set_limits(&app, "tc", json!({"max_concurrency": 2})).await?;
    assert_eq!(
        set.body["config"]["limits"]["max_concurrency"], 2,
        "{}",
        set.body
    );
    for i in 0..4 {
        push(&app, job("tc", q1, i)).await?;
    }
    for i in 0..2 {
        push(&app, job("tc", q2, i)).await?;
        push(&app, job("free", q1, i)).await?;
    }
    ojs_tests::after_index_lag().await;
    // Two of tc's six start, over both queues; the other tenant is not held back.
    let first = fetch(&app, &[q1, q2], 10).await?;
    let active = of(&first, "tc");
    assert_eq!(active.len(), 2, "{first:?}");
    assert_eq!(of(&first, "free").len(), 2, "{first:?}");
    assert!(fetch(&app, &[q1, q2], 10).await?.is_empty());

    // Each way out of `active` gives its slot back: ACK, FAIL and CANCEL.
    let ack = app
        .call(
            Method::POST,
            "/ojs/v1/workers/ack",
            Some(json!({"job_id": active[0]})),
        )
        .await?;
    assert_eq!(ack.status, 200, "{}", ack.body);
    let third = of(&fetch(&app, &[q1, q2], 10).await?, "tc");
    assert_eq!(third.len(), 1, "after an ACK");
    assert!(fetch(&app, &[q1, q2], 10).await?.is_empty());
    let nack = app
        .call(
            Method::POST,
            "/ojs/v1/workers/nack",
            Some(json!({"job_id": active[1], "error": {"message": "boom"}})),
        )
        .await?;
    assert_eq!(nack.status, 200, "{}", nack.body);
    let fourth = of(&fetch(&app, &[q1, q2], 10).await?, "tc");
    assert_eq!(fourth.len(), 1, "after a FAIL");
    let cancel = app
        .call(Method::DELETE, &format!("/ojs/v1/jobs/{}", third[0]), None)
        .await?;
    assert_eq!(cancel.status, 200, "{}", cancel.body);
    let fifth = of(&fetch(&app, &[q1, q2], 10).await?, "tc");
    assert_eq!(fifth.len(), 1, "after a CANCEL");
    assert!(fetch(&app, &[q1, q2], 10).await?.is_empty());

    // Shown with what it is judged on, and lifted without a restart.
    let view = app
        .call(Method::GET, "/ojs/v1/admin/tenants/tc", None)
        .await?;
    assert_eq!(
        view.body["limits"]["max_concurrency"]["limit"], 2,
        "{}",
        view.body
    );
    set_limits(&app, "tc", json!({"max_concurrency": null})).await?;
    let rest = of(&fetch(&app, &[q1, q2], 10).await?, "tc");
    assert_eq!(
        rest.len(),
        1,
        "the last of tc's six, once the limit is gone"
    );
    app.teardown().await;
    Ok(())
}

/// Workers racing for one tenant's jobs never hold more than its limit between them: the
/// slots are one item, taken in each claim's transaction on the version read.
#[tokio::test]
async fn racing_workers_never_pass_a_tenants_max_concurrency() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tl-race";
    set_limits(&app, "tr", json!({"max_concurrency": 3})).await?;
    for i in 0..12 {
        push(&app, job("tr", q, i)).await?;
    }
    ojs_tests::after_index_lag().await;
    let queues = [q];
    let racing = (0..8).map(|_| fetch(&app, &queues, 2));
    let mut held = 0;
    for got in futures::future::join_all(racing).await {
        held += got?.len();
    }
    assert!(held <= 3, "{held} jobs active under a limit of 3");
    // A FETCH that lost a race leaves its slot to the next one: the limit fills, exactly.
    for _ in 0..4 {
        if held < 3 {
            held += fetch(&app, &[q], 2).await?.len();
        }
    }
    assert_eq!(held, 3);
    assert!(fetch(&app, &[q], 2).await?.is_empty());
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_tenants_enqueue_rate_refuses_what_its_window_has_no_room_for() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tl-rate";
    let set = set_limits(
        &app,
        "te",
        json!({"max_enqueue_rate": {"limit": 3, "period": "PT1H"}}),
    )
    .await?;
    assert_eq!(
        set.body["config"]["limits"]["max_enqueue_rate"],
        json!({"limit": 3, "period": "PT3600S"}),
        "{}",
        set.body
    );
    push(&app, job("te", q, 0)).await?;
    push(&app, job("te", q, 1)).await?;
    // A batch counts each of its jobs, and is refused whole.
    let batch = app
        .call(
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({"jobs": [job("te", q, 2), job("te", q, 3)]})),
        )
        .await?;
    assert_eq!(batch.status, 429, "{}", batch.body);
    let details = &batch.body["error"]["details"];
    assert_eq!(batch.body["error"]["code"], "TENANT_LIMIT_EXCEEDED");
    assert_eq!(
        (&details["limit"], &details["current"], &details["maximum"]),
        (&json!("max_enqueue_rate"), &json!(2), &json!(3)),
        "{}",
        batch.body
    );
    // Told when the window has room again: the first enqueue's bucket leaves it within
    // the hour and a tenth.
    let after: u64 = batch
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    assert!((3_000..=3_960).contains(&after), "Retry-After: {after}");
    // Nothing of the refused batch was counted: the third enqueue still fits.
    push(&app, job("te", q, 4)).await?;
    let over = app.push(job("te", q, 5)).await?;
    assert_eq!(over.status, 429, "{}", over.body);
    // Other tenants and the default one are not held back.
    push(&app, job("other", q, 0)).await?;
    push(
        &app,
        json!({"type": "tl.t", "args": [], "options": {"queue": q}}),
    )
    .await?;
    set_limits(&app, "te", json!({"max_enqueue_rate": null})).await?;
    push(&app, job("te", q, 6)).await?;
    app.teardown().await;
    Ok(())
}

/// Producers racing on one tenant's window are admitted one after another: exactly the
/// limit gets in, the rest are refused (none answered 503).
#[tokio::test]
async fn racing_producers_get_exactly_a_tenants_enqueue_rate() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tl-rate-race";
    set_limits(
        &app,
        "tp",
        json!({"max_enqueue_rate": {"limit": 5, "period": "PT1H"}}),
    )
    .await?;
    let racing = (0..10).map(|i| app.push(job("tp", q, i)));
    let mut statuses = Vec::new();
    for r in futures::future::join_all(racing).await {
        statuses.push(r?.status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 201, 201, 201, 201, 429, 429, 429, 429, 429]);
    app.teardown().await;
    Ok(())
}

/// A heartbeat extends the tenant's slot with the lease: a job kept past its first lease
/// by beats still holds its slot, so no other job of the tenant starts meanwhile.
#[tokio::test]
async fn heartbeats_keep_a_tenants_slot_with_the_lease() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tl-beat";
    let lease = std::time::Duration::from_millis(2000);
    set_limits(&app, "tb", json!({"max_concurrency": 1})).await?;
    let mut long = job("tb", q, 0);
    long["options"]["visibility_timeout_ms"] = json!(lease.as_millis() as u64);
    let id = push(&app, long).await?;
    push(&app, job("tb", q, 1)).await?;
    ojs_tests::after_index_lag().await;
    let fetched_at = std::time::Instant::now();
    let got = fetch(&app, &[q], 1).await?;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, id, "FIFO: the long job first");
    // Beats every 300 ms until the first lease is long over: each lands within the lease
    // the one before extended unless the machine stalls for 1.7 s, which would leave the
    // job (and its slot) to expire and prove nothing; then the test says so and stops.
    let mut last = fetched_at;
    while fetched_at.elapsed() < lease * 3 / 2 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let beat = app
            .call(
                Method::POST,
                "/ojs/v1/workers/heartbeat",
                Some(json!({"worker_id": "tl-w", "active_jobs": [id]})),
            )
            .await?;
        if last.elapsed() >= lease {
            eprintln!(
                "a beat {:?} after the last: nothing to conclude",
                last.elapsed()
            );
            app.teardown().await;
            return Ok(());
        }
        last = std::time::Instant::now();
        assert_eq!(beat.body["jobs_extended"], json!([id]), "{}", beat.body);
    }
    let during = fetch(&app, &[q], 1).await?;
    assert!(
        during.is_empty(),
        "{during:?} started past the first lease of a job kept by beats"
    );
    app.teardown().await;
    Ok(())
}

/// A FETCH that finds a tenant at its limit leaves its lane at once: one due and one
/// ready query for each of the queue's two lanes (the default tenant's, empty, and the
/// limited tenant's), however many of its jobs wait; a FETCH that went on past the
/// refusal read the tenant's lane again for each of its claim rounds (7 queries). On a
/// store that remembers nothing, so that each FETCH reads the same whatever the time
/// between them.
#[tokio::test]
async fn a_fetch_leaves_a_tenant_at_its_limit_at_once() -> anyhow::Result<()> {
    let app = TestApp::spawn_rules_only_on(|store| {
        store
            .with_config(|c| c.queue_settings_ttl = std::time::Duration::ZERO)
            .with_config(|c| c.quiet_due_memory = std::time::Duration::ZERO)
    })
    .await?;
    let queries = |app: &TestApp| {
        app.strict_report()
            .and_then(|r| r.by_operation.get("Query").copied())
            .unwrap_or_default()
    };
    let mut calls = Vec::new();
    for (q, waiting) in [("tl-few", 2), ("tl-many", 40)] {
        let tenant = format!("tf-{waiting}");
        set_limits(&app, &tenant, json!({"max_concurrency": 1})).await?;
        for i in 0..waiting {
            push(&app, job(&tenant, q, i)).await?;
        }
        ojs_tests::after_index_lag().await;
        assert_eq!(fetch(&app, &[q], 1).await?.len(), 1);
        let (before, queried) = (app.store.usage().calls, queries(&app));
        assert!(fetch(&app, &[q], 10).await?.is_empty());
        assert_eq!(
            queries(&app) - queried,
            4,
            "queries of a refused FETCH, {waiting} jobs of the tenant"
        );
        calls.push(app.store.usage().calls - before);
    }
    assert_eq!(
        calls[0], calls[1],
        "a refused FETCH's calls with 1 job waiting, then 39"
    );
    app.teardown().await;
    Ok(())
}
