//! Tenants (ojs-multi-tenancy.md): a job's tenant comes from `X-OJS-Tenant` or
//! `meta.tenant_id`; a request acting for one tenant sees only that tenant's jobs (FETCH,
//! INFO, CANCEL, ACK, FAIL, queue stats), one acting for any takes the tenants of a queue
//! in turn, and each tenant's jobs are counted.

use std::time::Duration;

use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

/// A request acting for `tenant` (none: for any tenant).
async fn call_as(
    app: &TestApp,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Reply> {
    keyed_as(app, None, tenant, method, path, body).await
}

/// [`call_as`] with API key `key`, if any.
async fn keyed_as(
    app: &TestApp,
    key: Option<&str>,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Reply> {
    let mut req = app
        .client
        .request(method, format!("{}{path}", app.base_url));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(t) = tenant {
        req = req.header("X-OJS-Tenant", t);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/openjobspec+json")
            .body(b.to_string());
    }
    ojs_tests::reply(req).await
}

async fn push_as(app: &TestApp, tenant: Option<&str>, job: Value) -> anyhow::Result<String> {
    let r = call_as(app, tenant, Method::POST, "/ojs/v1/jobs", Some(job)).await?;
    anyhow::ensure!(r.status == 201, "push: {} {}", r.status, r.body);
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

/// Tenant "flood" pushes `n` jobs into `queue` in one batch.
async fn flood(app: &TestApp, queue: &str, n: usize) -> anyhow::Result<()> {
    let jobs: Vec<Value> = (0..n)
        .map(|i| json!({"type": "tn.t", "args": [i], "options": {"queue": queue}}))
        .collect();
    let r = call_as(
        app,
        Some("flood"),
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(json!({ "jobs": jobs })),
    )
    .await?;
    anyhow::ensure!(r.status == 201, "flood: {} {}", r.status, r.body);
    Ok(())
}

async fn fetch_as(
    app: &TestApp,
    tenant: Option<&str>,
    queue: &str,
    count: u32,
) -> anyhow::Result<Reply> {
    let r = call_as(
        app,
        tenant,
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some(json!({"queues": [queue], "count": count, "worker_id": "tn-w"})),
    )
    .await?;
    anyhow::ensure!(r.status == 200, "fetch: {} {}", r.status, r.body);
    Ok(r)
}

#[tokio::test]
async fn a_tenant_sees_only_its_own_jobs() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tn-iso";
    let job = json!({"type": "tn.t", "args": [1], "options": {"queue": q}});
    let a = push_as(&app, Some("acme"), job.clone()).await?;
    let b = push_as(&app, Some("beta"), job.clone()).await?;
    let plain = push_as(&app, None, job.clone()).await?;
    // The header is written into meta; a job naming its tenant in meta needs no header.
    let info = call_as(
        &app,
        Some("acme"),
        Method::GET,
        &format!("/ojs/v1/jobs/{a}"),
        None,
    )
    .await?;
    assert_eq!(
        info.body["job"]["meta"]["tenant_id"], "acme",
        "{}",
        info.body
    );
    let c = push_as(
        &app,
        None,
        json!({"type": "tn.t", "args": [2], "meta": {"tenant_id": "beta"}, "options": {"queue": q}}),
    )
    .await?;
    ojs_tests::after_index_lag().await;

    // Another tenant's job does not exist for INFO, CANCEL, ACK or FAIL.
    let peek = call_as(
        &app,
        Some("beta"),
        Method::GET,
        &format!("/ojs/v1/jobs/{a}"),
        None,
    )
    .await?;
    assert_eq!(peek.status, 404, "{}", peek.body);
    let cancel = call_as(
        &app,
        Some("beta"),
        Method::DELETE,
        &format!("/ojs/v1/jobs/{a}"),
        None,
    )
    .await?;
    assert_eq!(cancel.status, 404, "{}", cancel.body);
    assert_eq!(app.info(&a).await?.body["job"]["state"], "available");

    // FETCH for beta: beta's two jobs, never acme's nor the default tenant's.
    let got = fetch_as(&app, Some("beta"), q, 10).await?;
    let mut ids = got.job_ids();
    ids.sort();
    let mut want = vec![b.clone(), c.clone()];
    want.sort();
    assert_eq!(ids, want, "{}", got.body);
    assert!(got.body["jobs"]
        .as_array()
        .is_some_and(|jobs| jobs.iter().all(|j| j["meta"]["tenant_id"] == "beta")));
    // The default tenant's worker gets the job without a tenant only.
    let got = fetch_as(&app, Some("_default"), q, 10).await?;
    assert_eq!(got.job_ids(), vec![plain.clone()], "{}", got.body);
    // A worker for any tenant gets what is left: acme's.
    let got = fetch_as(&app, None, q, 10).await?;
    assert_eq!(got.job_ids(), vec![a.clone()], "{}", got.body);

    let ack = |t: &'static str, id: String| {
        let app = &app;
        async move {
            call_as(
                app,
                Some(t),
                Method::POST,
                "/ojs/v1/workers/ack",
                Some(json!({"job_id": id})),
            )
            .await
        }
    };
    assert_eq!(ack("beta", a.clone()).await?.status, 404);
    let nack = call_as(
        &app,
        Some("beta"),
        Method::POST,
        "/ojs/v1/workers/nack",
        Some(json!({"job_id": a, "error": {"message": "x"}})),
    )
    .await?;
    assert_eq!(nack.status, 404, "{}", nack.body);
    assert_eq!(app.info(&a).await?.body["job"]["state"], "active");
    let done = ack("acme", a.clone()).await?;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(ack("beta", b).await?.status, 200);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_tenant_header_or_meta_that_breaks_the_rules_is_refused() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let job = json!({"type": "tn.t", "args": [], "options": {"queue": "tn-bad"}});
    for bad in ["a b", "-a", "_x"] {
        let r = call_as(
            &app,
            Some(bad),
            Method::POST,
            "/ojs/v1/jobs",
            Some(job.clone()),
        )
        .await?;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    let r = app
        .push(json!({"type": "tn.t", "args": [], "meta": {"tenant_id": 7}}))
        .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    // Header and meta naming two tenants: 400, in a batch too (nothing enqueued).
    let both = json!({"type": "tn.t", "args": [], "meta": {"tenant_id": "beta"}});
    let r = call_as(
        &app,
        Some("acme"),
        Method::POST,
        "/ojs/v1/jobs",
        Some(both.clone()),
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = call_as(
        &app,
        Some("acme"),
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(json!({"jobs": [job, both]})),
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["errors"][0]["index"], 1,
        "{}",
        r.body
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_worker_for_any_tenant_takes_the_tenants_of_a_queue_in_turn() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tn-fair";
    flood(&app, q, 30).await?;
    for i in 0..3 {
        push_as(
            &app,
            Some("small"),
            json!({"type": "tn.t", "args": [i], "options": {"queue": q}}),
        )
        .await?;
    }
    ojs_tests::after_index_lag().await;
    // Behind 30 older jobs in one queue, FIFO would hand "small" nothing in six FETCHes.
    // The queue's lanes are default, flood and small: the first FETCH starts at the
    // default tenant's, finds it empty (and takes flood's job), which then stays behind
    // for its quiet turns; flood and small take the others in turn.
    let mut small = 0;
    for _ in 0..6 {
        let got = fetch_as(&app, None, q, 1).await?;
        let jobs = got.body["jobs"].as_array().cloned().unwrap_or_default();
        assert_eq!(jobs.len(), 1, "{}", got.body);
        small += usize::from(jobs[0]["meta"]["tenant_id"] == "small");
    }
    assert_eq!(small, 3, "small's jobs among the first six fetched");
    app.teardown().await;
    Ok(())
}

/// A queue's own rate limit is the queue's, whichever lane a FETCH for any tenant is
/// claiming from: once it refuses a start, the FETCH leaves the queue instead of trying
/// each of its other tenants' lanes (a ready query and a refused window transaction each).
/// Measured as the calls of a refused FETCH on a queue of six tenants against one of two:
/// equal but for the empty default lane, which a FETCH may visit first. The store
/// remembers no settings and no empty due query, so that each FETCH reads the same
/// whatever time passed since the last (a remembered read made the counts 5 and 3 when a
/// busy machine let one memory lapse and not the other).
#[tokio::test]
async fn a_queues_rate_limit_refusal_ends_the_queue_not_one_lane() -> anyhow::Result<()> {
    let app = TestApp::spawn_rules_only_on(|store| {
        store
            .with_config(|c| c.queue_settings_ttl = Duration::ZERO)
            .with_config(|c| c.quiet_due_memory = Duration::ZERO)
    })
    .await?;
    let mut refused_calls = Vec::new();
    for (q, tenants) in [("tn-rl-2", 2), ("tn-rl-6", 6)] {
        let r = app
            .call(
                Method::PUT,
                &format!("/ojs/v1/admin/queues/{q}/config"),
                Some(json!({"rate_limit": {"limit": 1, "period": "PT1M"}})),
            )
            .await?;
        assert_eq!(r.status, 200, "{}", r.body);
        for t in 0..tenants {
            for i in 0..2 {
                push_as(
                    &app,
                    Some(&format!("rl-{t}")),
                    json!({"type": "tn.t", "args": [i], "options": {"queue": q}}),
                )
                .await?;
            }
        }
        ojs_tests::after_index_lag().await;
        // The window's one start.
        let first = fetch_as(&app, None, q, 4).await?;
        assert_eq!(
            first.body["jobs"].as_array().map(Vec::len),
            Some(1),
            "{}",
            first.body
        );
        let before = app.store.usage().calls;
        let refused = call_as(
            &app,
            None,
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": [q], "count": 4, "worker_id": "tn-w"})),
        )
        .await?;
        refused_calls.push(app.store.usage().calls - before);
        assert_eq!(refused.status, 429, "{}", refused.body);
    }
    assert!(
        refused_calls[1] <= refused_calls[0] + 1,
        "a refused FETCH of six tenants made {} calls, of two {}",
        refused_calls[1],
        refused_calls[0]
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_tenants_scheduled_job_comes_due_in_its_own_lane() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tn-due";
    let at = ojs_core::time::format(&ojs_core::time::after_ms(ojs_core::time::now(), 300));
    let id = push_as(
        &app,
        Some("acme"),
        json!({"type": "tn.t", "args": [], "options": {"queue": q, "scheduled_at": at}}),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The due entry carries the tenant: the promotion (here FETCH's own) lists the job in
    // acme's lane, which another tenant's FETCH never reads.
    let other = fetch_as(&app, Some("beta"), q, 1).await?;
    assert!(other.job_ids().is_empty(), "{}", other.body);
    let got = ojs_tests::poll_until(
        Duration::from_secs(10),
        || fetch_as(&app, Some("acme"), q, 1),
        |r| !r.job_ids().is_empty(),
    )
    .await?;
    assert_eq!(got.job_ids(), vec![id], "{}", got.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_workflows_jobs_inherit_its_tenant() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tn-wf";
    let step = |n: &str| json!({"type": "tn.t", "args": [], "options": {"queue": q}, "id": n});
    let r = call_as(
        &app,
        Some("acme"),
        Method::POST,
        "/ojs/v1/workflows",
        Some(json!({"type": "chain", "steps": [step("one"), step("two")]})),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    ojs_tests::after_index_lag().await;
    assert!(fetch_as(&app, Some("beta"), q, 5)
        .await?
        .job_ids()
        .is_empty());
    let got = fetch_as(&app, Some("acme"), q, 5).await?;
    assert_eq!(got.job_ids().len(), 1, "{}", got.body);
    assert_eq!(got.body["jobs"][0]["meta"]["tenant_id"], "acme");
    // A step of another tenant: no cross-tenant workflows (§15.2).
    let mut other = step("two");
    other["meta"] = json!({"tenant_id": "beta"});
    let r = call_as(
        &app,
        Some("acme"),
        Method::POST,
        "/ojs/v1/workflows",
        Some(json!({"type": "group", "steps": [step("one"), other.clone()]})),
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "group", "jobs": [{"type": "tn.t", "args": [], "meta": {"tenant_id": "acme"}}, other]})),
        )
        .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn each_tenants_jobs_are_counted() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tn-count";
    let job = json!({"type": "tn.t", "args": [], "options": {"queue": q}});
    push_as(&app, Some("st-a"), job.clone()).await?;
    push_as(&app, Some("st-a"), job.clone()).await?;
    push_as(&app, Some("st-b"), job.clone()).await?;
    push_as(&app, None, job.clone()).await?;
    let stats = call_as(
        &app,
        None,
        Method::GET,
        "/ojs/v1/admin/tenants/st-a/stats",
        None,
    )
    .await?;
    assert_eq!(stats.status, 200, "{}", stats.body);
    assert_eq!(
        (
            &stats.body["tenant_id"],
            &stats.body["total_jobs"],
            &stats.body["jobs"]["available"]
        ),
        (&json!("st-a"), &json!(2), &json!(2)),
        "{}",
        stats.body
    );
    // A queue as each tenant sees it; the whole queue for any.
    let seen = |t: Option<&'static str>| {
        let app = &app;
        async move {
            let r = call_as(app, t, Method::GET, &format!("/ojs/v1/queues/{q}"), None).await?;
            anyhow::ensure!(r.status == 200, "{} {}", r.status, r.body);
            Ok::<_, anyhow::Error>((r.body["queue"]["name"].clone(), r.body["available"].clone()))
        }
    };
    assert_eq!(seen(Some("st-a")).await?, (json!(q), json!(2)));
    assert_eq!(seen(Some("st-b")).await?, (json!(q), json!(1)));
    assert_eq!(seen(Some("_default")).await?, (json!(q), json!(1)));
    assert_eq!(seen(None).await?, (json!(q), json!(4)));
    let list = app.call(Method::GET, "/ojs/v1/admin/tenants", None).await?;
    let names: Vec<&str> = list.body["items"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["tenant_id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["st-a", "st-b"], "{}", list.body);
    let none = app
        .call(Method::GET, "/ojs/v1/admin/tenants/st-none/stats", None)
        .await?;
    assert_eq!(none.status, 404, "{}", none.body);
    app.teardown().await;
    Ok(())
}

/// The tenant views carry what the official dashboard's tenant pages read beside the
/// spec's stats: `name`, `state`, `created_at` (its settings' first store, or its first
/// job counted), `stats` (queues, counts, live workers acting for it) and the limits as
/// plain numbers. A worker's heartbeat for a tenant counts for that tenant only.
#[tokio::test]
async fn the_tenant_views_carry_what_the_dashboard_reads() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let before = ojs_core::time::now() - chrono::Duration::seconds(1);
    let job = |q: &str| json!({"type": "tn.d", "args": [], "options": {"queue": q}});
    push_as(&app, Some("dv-a"), job("tn-d1")).await?;
    push_as(&app, Some("dv-a"), job("tn-d2")).await?;
    push_as(&app, Some("dv-b"), job("tn-d1")).await?;
    let set = call_as(
        &app,
        None,
        Method::PUT,
        "/ojs/v1/admin/tenants/dv-c",
        Some(json!({"limits": {"max_concurrency": 3, "max_enqueue_rate": {"limit": 120, "period": "PT1M"}}})),
    )
    .await?;
    assert_eq!(set.status, 201, "{}", set.body);
    for (worker, tenant) in [
        ("dv-w1", Some("dv-a")),
        ("dv-w2", Some("dv-a")),
        ("dv-w3", None),
    ] {
        let beat = call_as(
            &app,
            tenant,
            Method::POST,
            "/ojs/v1/workers/heartbeat",
            Some(json!({"worker_id": worker})),
        )
        .await?;
        assert_eq!(beat.status, 200, "{}", beat.body);
    }
    // A worker that acted for a tenant and now acts for any counts for none.
    let beat = call_as(
        &app,
        None,
        Method::POST,
        "/ojs/v1/workers/heartbeat",
        Some(json!({"worker_id": "dv-w2"})),
    )
    .await?;
    assert_eq!(beat.status, 200, "{}", beat.body);
    let after = ojs_core::time::now() + chrono::Duration::seconds(1);

    let list = app.call(Method::GET, "/ojs/v1/admin/tenants", None).await?;
    assert_eq!(list.status, 200, "{}", list.body);
    let items = list.body["items"].as_array().cloned().unwrap_or_default();
    let of = |id: &str| {
        items
            .iter()
            .find(|t| t["id"] == id)
            .cloned()
            .unwrap_or_default()
    };
    let created = |t: &Value| {
        t["created_at"]
            .as_str()
            .and_then(|c| ojs_core::time::parse(c, "$").ok())
            .is_some_and(|c| before <= c && c <= after)
    };
    let a = of("dv-a");
    assert_eq!(
        (&a["name"], &a["state"], &a["stats"]),
        (
            &json!("dv-a"),
            &json!("active"),
            &json!({"queues": 2, "workers": 1, "jobs": a["jobs"].clone()})
        ),
        "{a}"
    );
    assert_eq!(a["stats"]["jobs"]["available"], 2, "{a}");
    assert!(created(&a), "{a}");
    assert_eq!(a["limits"]["max_concurrent_jobs"], Value::Null, "{a}");
    let b = of("dv-b");
    assert_eq!(
        (&b["stats"]["queues"], &b["stats"]["workers"]),
        (&json!(1), &json!(0)),
        "{b}"
    );
    assert!(created(&b), "{b}");
    let c = of("dv-c");
    assert_eq!(
        (
            &c["stats"]["queues"],
            &c["limits"]["max_concurrent_jobs"],
            &c["limits"]["max_jobs_per_second"]
        ),
        (&json!(0), &json!(3), &json!(2.0)),
        "{c}"
    );
    assert!(created(&c), "{c}");
    // The same on the tenant's own view, and its creation time stays as settings change.
    let one = app
        .call(Method::GET, "/ojs/v1/admin/tenants/dv-c", None)
        .await?;
    assert_eq!(one.body["created_at"], c["created_at"], "{}", one.body);
    let again = call_as(
        &app,
        None,
        Method::PUT,
        "/ojs/v1/admin/tenants/dv-c/limits",
        Some(json!({"max_concurrency": 5})),
    )
    .await?;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(
        (
            &again.body["created_at"],
            &again.body["limits"]["max_concurrent_jobs"]
        ),
        (&c["created_at"], &json!(5)),
        "{}",
        again.body
    );
    let one = app
        .call(Method::GET, "/ojs/v1/admin/tenants/dv-a", None)
        .await?;
    assert_eq!(one.body["stats"]["workers"], 1, "{}", one.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_key_bound_to_a_tenant_acts_for_it_alone() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(ojs_http::HttpConfig {
        auth: ojs_http::AuthMode::ApiKey,
        push_allow_private: true,
        ..ojs_http::HttpConfig::default()
    })
    .await?;
    let created = ojs_http::key_admin::administer_keys(
        &app.store,
        &json!({"action": "create", "name": "acme-app", "tenant": "acme"}),
    )
    .await?;
    assert_eq!(created["tenant"], "acme", "{created}");
    let acme = created["key"].as_str().unwrap_or_default().to_owned();
    let ops = ojs_http::auth::issue_key(&app.store, "ops").await?.key;
    let q = "tn-key";
    let job = json!({"type": "tn.t", "args": [], "options": {"queue": q}});

    // Without the header the key's tenant is the request's; naming another is 403.
    let r = keyed_as(
        &app,
        Some(&acme),
        None,
        Method::POST,
        "/ojs/v1/jobs",
        Some(job.clone()),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["job"]["meta"]["tenant_id"], "acme");
    let mine = r.body["job"]["id"].as_str().unwrap_or_default().to_owned();
    for other in ["beta", "_default"] {
        let r = keyed_as(
            &app,
            Some(&acme),
            Some(other),
            Method::POST,
            "/ojs/v1/jobs",
            Some(job.clone()),
        )
        .await?;
        assert_eq!(r.status, 403, "{other}: {}", r.body);
    }
    let r = keyed_as(
        &app,
        Some(&acme),
        None,
        Method::POST,
        "/ojs/v1/jobs",
        Some(json!({"type": "tn.t", "args": [], "meta": {"tenant_id": "beta"}})),
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    // A key of any tenant pushes a beta job; acme's key neither sees nor fetches it.
    let r = keyed_as(
        &app,
        Some(&ops),
        Some("beta"),
        Method::POST,
        "/ojs/v1/jobs",
        Some(job.clone()),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    let theirs = r.body["job"]["id"].as_str().unwrap_or_default().to_owned();
    ojs_tests::after_index_lag().await;
    let r = keyed_as(
        &app,
        Some(&acme),
        None,
        Method::GET,
        &format!("/ojs/v1/jobs/{theirs}"),
        None,
    )
    .await?;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = keyed_as(
        &app,
        Some(&acme),
        None,
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some(json!({"queues": [q], "count": 10})),
    )
    .await?;
    assert_eq!(r.job_ids(), vec![mine], "{}", r.body);
    // Routes that do not keep to one tenant's jobs are closed to it.
    for path in [
        "/ojs/v1/queues",
        "/ojs/v1/admin/dead-letter",
        "/ojs/v1/cron",
    ] {
        let r = keyed_as(&app, Some(&acme), None, Method::GET, path, None).await?;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
    }
    // The dead letter queue keeps to its tenant's jobs (tenant_dead_letter.rs).
    let r = keyed_as(
        &app,
        Some(&acme),
        None,
        Method::GET,
        "/ojs/v1/dead-letter",
        None,
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    // A tenant's key takes no admin write (its reads: tenant_listings.rs); with
    // ojs:config:write it manages its tenant's webhook subscriptions (webhooks.rs) and no
    // other configuration.
    let refused = ojs_http::key_admin::administer_keys(
        &app.store,
        &json!({"action": "create", "name": "x", "tenant": "acme", "scopes": ["ojs:admin:write"]}),
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
    let hooks = ojs_http::key_admin::administer_keys(
        &app.store,
        &json!({"action": "create", "name": "acme-hooks", "tenant": "acme",
                "scopes": ["ojs:config:write"]}),
    )
    .await?["key"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = keyed_as(
        &app,
        Some(&hooks),
        None,
        Method::POST,
        "/ojs/v1/webhooks/subscriptions",
        Some(json!({"url": "http://127.0.0.1:9/ojs", "events": ["job.completed"]})),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["tenant_id"], "acme", "{}", r.body);
    for (method, path) in [
        (Method::GET, "/ojs/v1/cron"),
        (Method::GET, "/ojs/v1/push/endpoints"),
    ] {
        let r = keyed_as(&app, Some(&hooks), None, method, path, None).await?;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
    }
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_tenant_at_its_limit_is_refused_until_an_operator_raises_it() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tn-limit";
    let job = json!({"type": "tn.t", "args": [], "options": {"queue": q}});
    let put = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/tenants/lim",
            Some(json!({"fairness_weight": 2, "limits": {"max_queue_depth": 2}})),
        )
        .await?;
    assert_eq!(put.status, 201, "{}", put.body);
    assert_eq!(put.body["config"]["limits"]["max_queue_depth"], 2);
    push_as(&app, Some("lim"), job.clone()).await?;
    push_as(&app, Some("lim"), job.clone()).await?;
    let full = call_as(
        &app,
        Some("lim"),
        Method::POST,
        "/ojs/v1/jobs",
        Some(job.clone()),
    )
    .await?;
    assert_eq!(full.status, 429, "{}", full.body);
    assert_eq!(full.body["error"]["code"], "TENANT_LIMIT_EXCEEDED");
    assert_eq!(
        (
            &full.body["error"]["details"]["tenant_id"],
            &full.body["error"]["details"]["limit"],
            &full.body["error"]["details"]["current"],
            &full.body["error"]["details"]["maximum"],
        ),
        (
            &json!("lim"),
            &json!("max_queue_depth"),
            &json!(2),
            &json!(2)
        ),
        "{}",
        full.body
    );
    assert_eq!(
        full.headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("30")
    );
    let batch = call_as(
        &app,
        Some("lim"),
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(json!({"jobs": [job.clone()]})),
    )
    .await?;
    assert_eq!(batch.status, 429, "{}", batch.body);
    // Another tenant, and the default one, are not held back by it.
    push_as(&app, Some("other"), job.clone()).await?;
    push_as(&app, None, job.clone()).await?;
    // Raised without a restart: in force at once.
    let raised = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/tenants/lim/limits",
            Some(json!({"max_queue_depth": 3, "max_scheduled": 0, "reason": "incident over"})),
        )
        .await?;
    assert_eq!(raised.status, 200, "{}", raised.body);
    assert_eq!(
        raised.body["config"]["fairness_weight"], 2,
        "{}",
        raised.body
    );
    push_as(&app, Some("lim"), job.clone()).await?;
    // max_scheduled 0: no job for later, even with room in the depth.
    app.call(
        Method::PUT,
        "/ojs/v1/admin/tenants/lim/limits",
        Some(json!({"max_queue_depth": null})),
    )
    .await?;
    let later = ojs_core::time::format(&ojs_core::time::after_ms(ojs_core::time::now(), 3_600_000));
    let scheduled =
        json!({"type": "tn.t", "args": [], "options": {"queue": q, "scheduled_at": later}});
    let r = call_as(
        &app,
        Some("lim"),
        Method::POST,
        "/ojs/v1/jobs",
        Some(scheduled),
    )
    .await?;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.body["error"]["details"]["limit"], "max_scheduled");
    push_as(&app, Some("lim"), job.clone()).await?;
    // Settings the server does not enforce are refused, not stored.
    let r = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/tenants/lim",
            Some(json!({"priority_boost": 5})),
        )
        .await?;
    assert_eq!(r.status, 422, "{}", r.body);
    let view = app
        .call(Method::GET, "/ojs/v1/admin/tenants/lim", None)
        .await?;
    assert_eq!(view.body["total_jobs"], 4, "{}", view.body);
    assert_eq!(
        view.body["limits"]["max_scheduled"]["limit"], 0,
        "{}",
        view.body
    );
    let gone = app
        .call(Method::DELETE, "/ojs/v1/admin/tenants/lim", None)
        .await?;
    assert_eq!(gone.status, 200, "{}", gone.body);
    let later = ojs_core::time::format(&ojs_core::time::after_ms(ojs_core::time::now(), 3_600_000));
    push_as(
        &app,
        Some("lim"),
        json!({"type": "tn.t", "args": [], "options": {"queue": q, "scheduled_at": later}}),
    )
    .await?;
    let again = app
        .call(Method::DELETE, "/ojs/v1/admin/tenants/lim", None)
        .await?;
    assert_eq!(again.status, 404, "{}", again.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_heavier_tenant_comes_first_as_often_as_its_weight() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tn-weight";
    for (tenant, weight) in [("heavy", 3), ("light", 1)] {
        let r = app
            .call(
                Method::PUT,
                &format!("/ojs/v1/admin/tenants/{tenant}"),
                Some(json!({ "fairness_weight": weight })),
            )
            .await?;
        assert_eq!(r.status, 201, "{}", r.body);
        let jobs: Vec<Value> = (0..12)
            .map(|i| json!({"type": "tn.t", "args": [i], "options": {"queue": q}}))
            .collect();
        let r = call_as(
            &app,
            Some(tenant),
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({ "jobs": jobs })),
        )
        .await?;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    ojs_tests::after_index_lag().await;
    // Lanes default (1), heavy (3), light (1): the first FETCH starts at the default
    // tenant's, finds it empty (heavy serves it) and leaves it behind for its quiet
    // turns; the nine others go 3:1 by the turns' weights (6 and 3, the stride's order).
    let mut heavy = 0;
    for _ in 0..10 {
        let got = fetch_as(&app, None, q, 1).await?;
        let jobs = got.body["jobs"].as_array().cloned().unwrap_or_default();
        assert_eq!(jobs.len(), 1, "{}", got.body);
        heavy += usize::from(jobs[0]["meta"]["tenant_id"] == "heavy");
    }
    assert_eq!(heavy, 7, "heavy's FETCHes of ten");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_cron_template_takes_the_registering_tenant() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let cron = |name: &str, meta: Value| {
        json!({"name": name, "expression": "0 0 1 1 *",
               "job_template": {"type": "tn.t", "args": [], "meta": meta, "options": {"queue": "tn-cron"}}})
    };
    let r = call_as(
        &app,
        Some("acme"),
        Method::POST,
        "/ojs/v1/cron",
        Some(cron("tn-cron-a", json!({"x": 1}))),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    let listed = app.call(Method::GET, "/ojs/v1/cron", None).await?;
    let entry = listed.body.to_string();
    assert!(entry.contains("\"tenant_id\":\"acme\""), "{entry}");
    let r = call_as(
        &app,
        Some("acme"),
        Method::POST,
        "/ojs/v1/cron",
        Some(cron("tn-cron-b", json!({"tenant_id": "beta"}))),
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_tenants_large_job_kept_in_s3_stays_in_its_lane() -> anyhow::Result<()> {
    // Its args and meta go to the payload bucket; the tenant stays on the item, so the
    // reads that never fetch the object (isolation, a requeue's lane) still know it.
    let (store, _payloads) = ojs_tests::with_payloads(ojs_tests::fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let q = "tn-big";
    let big = "x".repeat(300 * 1024);
    let id = push_as(
        &app,
        Some("acme"),
        json!({"type": "tn.t", "args": [big], "meta": {"note": "n"}, "options": {"queue": q}}),
    )
    .await?;
    ojs_tests::after_index_lag().await;
    let info = call_as(
        &app,
        Some("acme"),
        Method::GET,
        &format!("/ojs/v1/jobs/{id}"),
        None,
    )
    .await?;
    assert_eq!(info.status, 200, "{}", info.body);
    assert_eq!(
        info.body["job"]["meta"],
        json!({"note": "n", "tenant_id": "acme"})
    );
    let other = call_as(
        &app,
        Some("beta"),
        Method::GET,
        &format!("/ojs/v1/jobs/{id}"),
        None,
    )
    .await?;
    assert_eq!(other.status, 404, "{}", other.body);
    assert_eq!(
        fetch_as(&app, Some("acme"), q, 1).await?.job_ids(),
        vec![id.clone()]
    );
    // Given back: into acme's lane again, not the default tenant's.
    let nack = call_as(
        &app,
        Some("acme"),
        Method::POST,
        "/ojs/v1/workers/nack",
        Some(json!({"job_id": id, "error": {"message": "again"}, "requeue": true})),
    )
    .await?;
    assert_eq!(nack.status, 200, "{}", nack.body);
    ojs_tests::after_index_lag().await;
    assert!(fetch_as(&app, Some("_default"), q, 1)
        .await?
        .job_ids()
        .is_empty());
    let again = ojs_tests::poll_until(
        Duration::from_secs(10),
        || fetch_as(&app, Some("acme"), q, 1),
        |r| !r.job_ids().is_empty(),
    )
    .await?;
    assert_eq!(again.job_ids(), vec![id], "{}", again.body);
    app.teardown().await;
    Ok(())
}

/// A small tenant's lane is empty between its jobs; a FETCH for any tenant that finds it
/// so leaves it behind for two rounds of the queue's lanes (four turns at the least), not
/// longer: a job then pushed into it through another instance (as a producer's PUSH
/// reaches another Lambda instance than the workers' FETCHes, so nothing there ends the
/// lane's quiet) is fetched within that many FETCHes and a round more, however long the
/// flood beside it. With 16 quiet turns it waited about 16 of the flood's FETCHes.
#[tokio::test]
async fn a_job_arriving_in_a_small_tenants_empty_lane_waits_two_rounds_at_most(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "tn-quiet";
    flood(&app, q, 40).await?;
    let first = push_as(
        &app,
        Some("small"),
        json!({"type": "tn.t", "args": [0], "options": {"queue": q}}),
    )
    .await?;
    ojs_tests::after_index_lag().await;
    // Lanes default, flood and small. Fetch until small's first job is taken, then a
    // round more: small's lane has its turn in it, is found empty and goes quiet.
    let fetch_one = || async {
        let got = fetch_as(&app, None, q, 1).await?;
        let jobs = got.body["jobs"].as_array().cloned().unwrap_or_default();
        anyhow::ensure!(jobs.len() == 1, "{}", got.body);
        Ok::<_, anyhow::Error>(jobs[0]["id"].as_str().unwrap_or_default().to_owned())
    };
    let mut taken = false;
    for _ in 0..6 {
        taken |= fetch_one().await? == first;
    }
    assert!(taken, "small's first job within six FETCHes");
    let producer = app.another_instance().await?;
    let second = push_as(
        &producer,
        Some("small"),
        json!({"type": "tn.t", "args": [1], "options": {"queue": q}}),
    )
    .await?;
    producer.leave();
    ojs_tests::after_index_lag().await;
    // Three lanes: quiet for six turns; small's next first place comes within a round.
    let mut fetches = 0;
    loop {
        fetches += 1;
        if fetch_one().await? == second {
            break;
        }
        assert!(fetches < 9, "small's job not fetched within 9 FETCHes");
    }
    app.teardown().await;
    Ok(())
}
