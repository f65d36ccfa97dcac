//! Listings as a tenant sees them (ojs-multi-tenancy.md §4: every read keeps to the
//! request's tenant): the events listing by `?tenant=` and for a key bound to a tenant,
//! and the admin job and dead letter listings for a tenant's key with `ojs:admin:read`;
//! and the operator's per-tenant metrics (§11.2), which no tenant's key reads.

use ojs_core::tenant::TenantId;
use ojs_http::auth::{issue_key, issue_tenant_key};
use ojs_tests::{Reply, TestApp};
use serde_json::{json, Value};

/// A GET of `path` with API key `key`, naming `tenant` in `X-OJS-Tenant` if given.
async fn get(app: &TestApp, key: &str, tenant: Option<&str>, path: &str) -> anyhow::Result<Reply> {
    let mut req = app
        .client
        .get(format!("{}{path}", app.base_url))
        .bearer_auth(key);
    if let Some(t) = tenant {
        req = req.header(ojs_core::tenant::TENANT_HEADER, t);
    }
    ojs_tests::reply(req).await
}

/// PUSH of `job` with `key`, for `tenant` if given; the job's id.
async fn push(
    app: &TestApp,
    key: &str,
    tenant: Option<&str>,
    job: &Value,
) -> anyhow::Result<String> {
    let mut req = app
        .client
        .post(format!("{}/ojs/v1/jobs", app.base_url))
        .bearer_auth(key)
        .header("content-type", "application/openjobspec+json")
        .body(job.to_string());
    if let Some(t) = tenant {
        req = req.header(ojs_core::tenant::TENANT_HEADER, t);
    }
    let r = ojs_tests::reply(req).await?;
    anyhow::ensure!(r.status == 201, "push: {} {}", r.status, r.body);
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

/// The jobs (subjects) of an events answer, sorted and each once, and their
/// `data.tenant_id`s.
fn subjects(r: &Reply) -> (Vec<String>, Vec<Value>) {
    let events = r.body["events"].as_array().cloned().unwrap_or_default();
    let mut jobs: Vec<String> = events
        .iter()
        .filter_map(|e| e["subject"].as_str().map(str::to_owned))
        .collect();
    jobs.sort();
    jobs.dedup();
    let tenants = events
        .iter()
        .map(|e| e["data"]["tenant_id"].clone())
        .collect();
    (jobs, tenants)
}

fn sorted(ids: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = ids.iter().map(|s| (*s).clone()).collect();
    v.sort();
    v
}

/// Spawns a server requiring API keys, with a key bound to tenant `acme` (a data key) and
/// an operator's key of every tenant (a data key: the events need `ojs:data:read`).
async fn spawn_with_keys() -> anyhow::Result<(TestApp, String, String)> {
    let app = TestApp::spawn_with_config(ojs_http::HttpConfig {
        auth: ojs_http::AuthMode::ApiKey,
        ..ojs_http::HttpConfig::default()
    })
    .await?;
    let acme = TenantId::parse("acme")?;
    let acme = issue_tenant_key(&app.store, "acme-app", None, acme.as_ref())
        .await?
        .key;
    let ops = issue_key(&app.store, "ops").await?.key;
    Ok((app, acme, ops))
}

#[tokio::test]
async fn the_events_listing_keeps_to_a_tenant() -> anyhow::Result<()> {
    let (app, acme, ops) = spawn_with_keys().await?;
    let q = "tl-events";
    let job = json!({"type": "tl.t", "args": [], "options": {"queue": q}});
    let a = push(&app, &acme, None, &job).await?;
    let b = push(&app, &ops, Some("beta"), &job).await?;
    let d = push(&app, &ops, None, &job).await?;
    let path = format!("/ojs/v1/events?queues={q}");

    // A key bound to acme lists acme's events alone, with or without ?tenant=acme, over
    // one queue or all; another tenant named is 403.
    for path in [
        path.clone(),
        format!("{path}&tenant=acme"),
        "/ojs/v1/events".to_owned(),
    ] {
        let r = get(&app, &acme, None, &path).await?;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let (jobs, tenants) = subjects(&r);
        assert_eq!(jobs, vec![a.clone()], "{path}: {}", r.body);
        assert!(tenants.iter().all(|t| t == "acme"), "{}", r.body);
    }
    for other in ["beta", "_default"] {
        let r = get(&app, &acme, None, &format!("{path}&tenant={other}")).await?;
        assert_eq!(r.status, 403, "{other}: {}", r.body);
        assert_eq!(r.body["error"]["details"]["tenant"], "acme", "{}", r.body);
    }

    // An operator lists every tenant's, or the one ?tenant= names (_default: of none).
    let listed = |tenant: Option<&'static str>, param: &'static str| {
        let (app, ops, path) = (&app, &ops, &path);
        async move {
            let r = get(app, ops, tenant, &format!("{path}{param}")).await?;
            anyhow::ensure!(r.status == 200, "{param}: {} {}", r.status, r.body);
            Ok::<_, anyhow::Error>(subjects(&r))
        }
    };
    assert_eq!(listed(None, "").await?.0, sorted(&[&a, &b, &d]));
    let (jobs, tenants) = listed(None, "&tenant=beta").await?;
    assert_eq!((jobs, tenants[0].clone()), (vec![b.clone()], json!("beta")));
    let (jobs, tenants) = listed(None, "&tenant=_default").await?;
    assert_eq!(jobs, vec![d.clone()]);
    assert!(tenants.iter().all(Value::is_null), "{tenants:?}");
    // X-OJS-Tenant keeps a request to its tenant too; naming another in ?tenant= is 400.
    assert_eq!(listed(Some("acme"), "").await?.0, vec![a.clone()]);
    assert_eq!(
        listed(Some("beta"), "&tenant=beta").await?.0,
        vec![b.clone()]
    );
    let r = get(&app, &ops, Some("acme"), &format!("{path}&tenant=beta")).await?;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = get(&app, &ops, None, &format!("{path}&tenant=no%20tenant!")).await?;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["validation_errors"][0]["path"], "$.tenant",
        "{}",
        r.body
    );
    app.teardown().await;
    Ok(())
}

/// The ids of an admin listing's `items`, sorted, once `want` of them are listed (the
/// indexes lag a little), or as last listed.
async fn admin_ids(
    app: &TestApp,
    key: &str,
    path: &str,
    want: usize,
) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for _ in 0..40 {
        let r = get(app, key, None, path).await?;
        anyhow::ensure!(r.status == 200, "{path}: {} {}", r.status, r.body);
        ids = r.body["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|j| j["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        if ids.len() == want {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(ids)
}

#[tokio::test]
async fn a_tenants_key_lists_its_own_jobs_in_the_admin_listings() -> anyhow::Result<()> {
    let (app, _, ops) = spawn_with_keys().await?;
    // A tenant's key may hold ojs:admin:read (not the admin writes).
    let created = ojs_http::key_admin::administer_keys(
        &app.store,
        &json!({"action": "create", "name": "acme-dash", "tenant": "acme",
                "scopes": ["ojs:admin:read", "ojs:data:write"]}),
    )
    .await?;
    let acme = created["key"].as_str().unwrap_or_default().to_owned();
    let admin = ojs_http::auth::issue_scoped_key(
        &app.store,
        "ops-admin",
        Some(ojs_http::scopes::Scopes::of(&[
            ojs_http::scopes::Scope::AdminRead,
        ])),
    )
    .await?
    .key;
    let (q, dq) = ("tl-admin", "tl-dead");
    let job = json!({"type": "tl.t", "args": [], "options": {"queue": q}});
    let dying = json!({"type": "tl.t", "args": [], "options": {"queue": dq,
        "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}});
    let a1 = push(&app, &acme, None, &job).await?;
    let a2 = push(&app, &acme, None, &job).await?;
    let b = push(&app, &ops, Some("beta"), &job).await?;
    let d = push(&app, &ops, None, &job).await?;
    let a_dead = push(&app, &acme, None, &dying).await?;
    let b_dead = push(&app, &ops, Some("beta"), &dying).await?;
    ojs_tests::after_index_lag().await;
    let fetched = app
        .client
        .post(format!("{}/ojs/v1/workers/fetch", app.base_url))
        .bearer_auth(&ops)
        .json(&json!({"queues": [dq], "count": 2, "worker_id": "tl-w"}));
    let fetched = ojs_tests::reply(fetched).await?;
    assert_eq!(fetched.job_ids().len(), 2, "{}", fetched.body);
    for id in [&a_dead, &b_dead] {
        let nack = app
            .client
            .post(format!("{}/ojs/v1/workers/nack", app.base_url))
            .bearer_auth(&ops)
            .json(&json!({"job_id": id, "error": {"message": "no"}}));
        let r = ojs_tests::reply(nack).await?;
        assert_eq!(r.status, 200, "{}", r.body);
    }

    // acme's key lists acme's jobs alone: of a queue, of every queue, by its tenant's page.
    let mine = sorted(&[&a1, &a2]);
    for path in [
        format!("/ojs/v1/admin/jobs?queue={q}"),
        format!("/ojs/v1/admin/jobs?queue={q}&tenant=acme"),
        format!("/ojs/v1/admin/tenants/acme/jobs?queue={q}"),
    ] {
        assert_eq!(admin_ids(&app, &acme, &path, 2).await?, mine, "{path}");
    }
    let all_mine = sorted(&[&a1, &a2, &a_dead]);
    let path = "/ojs/v1/admin/jobs";
    assert_eq!(admin_ids(&app, &acme, path, 3).await?, all_mine, "{path}");
    let path = "/ojs/v1/admin/dead-letter";
    assert_eq!(admin_ids(&app, &acme, path, 1).await?, vec![a_dead.clone()]);
    let r = get(&app, &acme, None, &format!("/ojs/v1/admin/jobs/{a1}")).await?;
    assert_eq!((r.status, &r.body["id"]), (200, &json!(a1)), "{}", r.body);
    // Another tenant's jobs: 403 to name, 404 to look at.
    for path in [
        format!("/ojs/v1/admin/jobs?queue={q}&tenant=beta"),
        "/ojs/v1/admin/jobs?tenant=_default".to_owned(),
        "/ojs/v1/admin/dead-letter?tenant=beta".to_owned(),
        "/ojs/v1/admin/tenants/beta/jobs".to_owned(),
        "/ojs/v1/admin/tenants/_default/jobs".to_owned(),
    ] {
        let r = get(&app, &acme, None, &path).await?;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert_eq!(r.body["error"]["details"]["tenant"], "acme", "{}", r.body);
    }
    for id in [&b, &d, &b_dead] {
        let r = get(&app, &acme, None, &format!("/ojs/v1/admin/jobs/{id}")).await?;
        assert_eq!(r.status, 404, "{id}: {}", r.body);
    }
    // Its own tenant's view and stats (the dashboard's tenant page); another's is 403.
    for path in [
        "/ojs/v1/admin/tenants/acme",
        "/ojs/v1/admin/tenants/acme/stats",
    ] {
        let r = get(&app, &acme, None, path).await?;
        assert_eq!(
            (r.status, &r.body["tenant_id"], &r.body["total_jobs"]),
            (200, &json!("acme"), &json!(3)),
            "{path}: {}",
            r.body
        );
    }
    for path in [
        "/ojs/v1/admin/tenants/beta",
        "/ojs/v1/admin/tenants/beta/stats",
        "/ojs/v1/admin/tenants/_default",
    ] {
        let r = get(&app, &acme, None, path).await?;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert_eq!(r.body["error"]["details"]["tenant"], "acme", "{}", r.body);
    }
    let r = get(&app, &admin, None, "/ojs/v1/admin/tenants/beta").await?;
    assert_eq!(
        (r.status, &r.body["total_jobs"]),
        (200, &json!(2)),
        "{}",
        r.body
    );
    // The tenants listing: its own tenant alone for its key, every tenant for an operator.
    let listed = |r: &Reply| -> Vec<Value> {
        r.body["tenants"]
            .as_array()
            .map(|a| a.iter().map(|t| t["tenant_id"].clone()).collect())
            .unwrap_or_default()
    };
    let r = get(&app, &acme, None, "/ojs/v1/admin/tenants").await?;
    assert_eq!(
        (r.status, listed(&r)),
        (200, vec![json!("acme")]),
        "{}",
        r.body
    );
    assert_eq!(r.body["pagination"]["total"], 1, "{}", r.body);
    let r = get(&app, &admin, None, "/ojs/v1/admin/tenants").await?;
    assert_eq!(
        (r.status, listed(&r)),
        (200, vec![json!("acme"), json!("beta")]),
        "{}",
        r.body
    );
    let r = get(&app, &admin, Some("beta"), "/ojs/v1/admin/tenants").await?;
    assert_eq!(
        (r.status, listed(&r)),
        (200, vec![json!("beta")]),
        "{}",
        r.body
    );
    // The rest of the admin API is not kept to a tenant: closed to its key.
    for path in [
        "/ojs/v1/admin/queues",
        "/ojs/v1/admin/stats",
        "/ojs/v1/admin/dead-letter/stats",
        "/ojs/v1/admin/workers",
    ] {
        let r = get(&app, &acme, None, path).await?;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
    }

    // An operator's listings are every tenant's, as before.
    let path = format!("/ojs/v1/admin/jobs?queue={q}");
    let all = sorted(&[&a1, &a2, &b, &d]);
    assert_eq!(admin_ids(&app, &admin, &path, 4).await?, all);
    let path = "/ojs/v1/admin/dead-letter";
    let dead = sorted(&[&a_dead, &b_dead]);
    assert_eq!(admin_ids(&app, &admin, path, 2).await?, dead);
    let r = get(&app, &admin, None, &format!("/ojs/v1/admin/jobs/{b}")).await?;
    assert_eq!(r.status, 200, "{}", r.body);
    app.teardown().await;
    Ok(())
}

/// The samples of `text` (a Prometheus answer) whose name and labels start with `prefix`.
fn samples<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

#[tokio::test]
async fn the_metrics_count_each_tenants_jobs_per_queue_for_operators_only() -> anyhow::Result<()> {
    let (app, acme, _) = spawn_with_keys().await?;
    let admin = ojs_http::auth::issue_scoped_key(
        &app.store,
        "ops-metrics",
        Some(ojs_http::scopes::Scopes::of(&[
            ojs_http::scopes::Scope::AdminRead,
            ojs_http::scopes::Scope::DataWrite,
        ])),
    )
    .await?
    .key;
    let q = "tl-metrics";
    let job = json!({"type": "tl.m", "args": [], "options": {"queue": q}});
    let done = push(&app, &acme, None, &job).await?;
    push(&app, &acme, None, &job).await?;
    push(&app, &admin, Some("beta"), &job).await?;
    push(&app, &admin, None, &job).await?;
    ojs_tests::after_index_lag().await;
    let fetched = app
        .client
        .post(format!("{}/ojs/v1/workers/fetch", app.base_url))
        .bearer_auth(&acme)
        .json(&json!({"queues": [q], "count": 1, "worker_id": "tl-m"}));
    let fetched = ojs_tests::reply(fetched).await?;
    assert_eq!(fetched.job_ids(), vec![done.clone()], "{}", fetched.body);
    let ack = app
        .client
        .post(format!("{}/ojs/v1/workers/ack", app.base_url))
        .bearer_auth(&acme)
        .json(&json!({"job_id": done}));
    assert_eq!(ojs_tests::reply(ack).await?.status, 200);

    assert_eq!(
        get(&app, &acme, None, "/metrics").await?.status,
        403,
        "a tenant's key sees no other tenant's volumes"
    );
    let r = app
        .client
        .get(format!("{}/metrics", app.base_url))
        .bearer_auth(&admin)
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let text = r.text().await?;
    let acme_at = format!("tenant_id=\"acme\",queue=\"{q}\"");
    let beta_at = format!("tenant_id=\"beta\",queue=\"{q}\"");
    assert_eq!(
        samples(&text, &format!("ojs_tenant_jobs{{{acme_at},")),
        vec![
            format!("ojs_tenant_jobs{{{acme_at},state=\"available\"}} 1"),
            format!("ojs_tenant_jobs{{{acme_at},state=\"scheduled\"}} 0"),
            format!("ojs_tenant_jobs{{{acme_at},state=\"retryable\"}} 0"),
            format!("ojs_tenant_jobs{{{acme_at},state=\"active\"}} 0"),
            format!("ojs_tenant_jobs{{{acme_at},state=\"pending\"}} 0"),
        ],
        "{text}"
    );
    for line in [
        format!("ojs_tenant_jobs_finished_total{{{acme_at},state=\"completed\"}} 1"),
        format!("ojs_tenant_jobs_processed_total{{{acme_at}}} 1"),
        format!("ojs_tenant_jobs_failed_total{{{acme_at}}} 0"),
        format!("ojs_tenant_queue_depth{{{acme_at}}} 1"),
        format!("ojs_tenant_queue_depth{{{beta_at}}} 1"),
        format!("ojs_tenant_jobs_active{{{beta_at}}} 0"),
        "# TYPE ojs_tenant_jobs gauge".to_owned(),
        "# TYPE ojs_tenant_jobs_processed_total counter".to_owned(),
        "ojs_tenants 2".to_owned(),
        // The queue's own metrics count every tenant's jobs, the default one's too.
        format!("ojs_queue_jobs{{queue=\"{q}\",state=\"available\"}} 3"),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from:\n{text}"
        );
    }
    assert!(
        !text.contains("tenant_id=\"_default\""),
        "jobs without a tenant have no tenant counters:\n{text}"
    );
    app.teardown().await;
    Ok(())
}
