//! The official OJS dashboard (../shared/clients/ojs-admin-ui, built unmodified by
//! `scripts/dashboard.sh build`) in headless Chromium against a seeded server: the
//! overview's counts, a queue's job list, a job's envelope and errors, the webhooks,
//! schemas, workers (a draining worker) and tenants pages, then retrying a dead letter job and
//! pausing a queue from the pages, checked on the server afterwards; with API keys
//! required and the dashboard holding the operator's scopes.
//! The browser part is tests/browser/dashboard.mjs; screenshots go to
//! artifacts/dashboard/ (gitignored; CI keeps them).
//!
//! `make test` installs Chromium and playwright-core and builds the dashboard first
//! (scripts/test.sh) and sets OJS_REQUIRE_BROWSER_TEST=1, so there a missing piece is a
//! failure; a plain `cargo test` without them skips this test, saying so.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{bail, Context};
use ojs_core::{JobId, JobState, QueueName};
use ojs_http::auth::{issue_key, issue_scoped_key};
use ojs_http::scopes::{Scope, Scopes};
use ojs_http::{AuthMode, HttpConfig};
use ojs_tests::{after_index_lag, TestApp};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn push(app: &TestApp, job: Value) -> anyhow::Result<String> {
    let r = app.push(job).await?;
    anyhow::ensure!(r.status == 201, "push: {} {}", r.status, r.body);
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn the_dashboard_shows_the_server_state_and_changes_it() -> anyhow::Result<()> {
    let root = root();
    let dist = root.join(".local/dashboard/src/dist-app");
    let playwright = root.join(".local/browser/node_modules/playwright-core");
    let chromium = std::env::var("OJS_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let missing: Vec<String> = [
        &dist.join("index.html"),
        &playwright,
        &PathBuf::from(&chromium),
    ]
    .into_iter()
    .filter(|p| !p.exists())
    .map(|p| p.display().to_string())
    .collect();
    if !missing.is_empty() {
        if std::env::var("OJS_REQUIRE_BROWSER_TEST").as_deref() == Ok("1") {
            bail!("the browser test needs {missing:?}: run scripts/dashboard.sh browser and build");
        }
        eprintln!(
            "SKIPPED: the dashboard browser test needs {missing:?} (make test installs them)"
        );
        return Ok(());
    }

    // Seed: queue `web` with 2 available, 1 completed and 1 dead-lettered job; queue
    // `other` with 1 available job (not on `web`'s page).
    // With API keys required, as deployed: the seed is pushed and worked with a data key
    // (an application's), the dashboard runs with the operator's key the README gives it
    // (README, "API keys and scopes": read everything, pause and retry).
    let mut app = TestApp::spawn_with_config(HttpConfig {
        auth: AuthMode::ApiKey,
        // As `make dev` serves: the webhook's example.com URL is not resolved here.
        push_allow_private: true,
        ..HttpConfig::default()
    })
    .await?;
    let data = issue_key(&app.store, "seed").await?.key;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {data}"))?,
    );
    app.client = reqwest::Client::builder()
        .default_headers(headers)
        .build()?;
    let operator = issue_scoped_key(
        &app.store,
        "dashboard",
        Some(Scopes::of(&[
            Scope::AdminRead,
            Scope::AdminWrite,
            Scope::DataRead,
        ])),
    )
    .await?
    .key;
    for i in 0..2 {
        push(
            &app,
            json!({"type": "report.build", "args": [i], "options": {"queue": "web"}}),
        )
        .await?;
    }
    push(
        &app,
        json!({"type": "audit.scan", "args": [], "options": {"queue": "other"}}),
    )
    .await?;
    let sent = push(
        &app,
        json!({"type": "report.sent", "args": [], "options": {"queue": "web", "priority": 10}}),
    )
    .await?;
    let failed = push(&app, json!({"type": "report.fail", "args": [{"to": "ops@example.com"}], "options": {"queue": "web", "priority": 9, "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}})).await?;
    after_index_lag().await;
    let f = app
        .fetch(json!({"queues": ["web"], "count": 2, "worker_id": "browser-test"}))
        .await?;
    anyhow::ensure!(
        f.body["jobs"].as_array().map(Vec::len) == Some(2),
        "{}",
        f.body
    );
    app.ack(json!({"job_id": sent, "result": {"pages": 3}}))
        .await?;
    app.nack(json!({"job_id": failed, "error": {"type": "SmtpTimeout", "message": "smtp timeout after 30s"}})).await?;
    // The worker says it drains; the operator registered a webhook and a job schema.
    let beat = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/workers/beat",
            Some(json!({"worker_id": "browser-test", "state": "drain", "active_jobs": 1})),
        )
        .await?;
    anyhow::ensure!(beat.status == 200, "{}", beat.body);
    let as_operator = |method: reqwest::Method, path: &str, body: Value| {
        app.client
            .request(method, format!("{}{path}", app.base_url))
            .bearer_auth(&operator)
            .json(&body)
            .send()
    };
    let hook = "https://example.com/hooks/report-ops";
    let r = as_operator(
        reqwest::Method::POST,
        "/ojs/v1/webhooks/subscriptions",
        json!({"url": hook, "events": ["job.completed"]}),
    )
    .await?;
    anyhow::ensure!(r.status() == 201, "webhook: {}", r.text().await?);
    let r = as_operator(
        reqwest::Method::PUT,
        "/ojs/v1/admin/schemas/report.build/2.1.0",
        json!({"schema": {"type": "array"}}),
    )
    .await?;
    anyhow::ensure!(r.status().is_success(), "schema: {}", r.text().await?);
    // A tenant with settings and no job yet: listed on the tenants page, which the sidebar
    // offers because the manifest claims `multi_tenancy`.
    let tenant = "acme-corp";
    let r = as_operator(
        reqwest::Method::PUT,
        &format!("/ojs/v1/admin/tenants/{tenant}"),
        json!({"fairness_weight": 2, "limits": {"max_concurrency": 4}}),
    )
    .await?;
    anyhow::ensure!(r.status().is_success(), "tenant: {}", r.text().await?);
    // Lifecycle events (which list finished jobs) may land a moment after the answer.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let mut server = tokio::process::Command::new("node")
        .arg(root.join("scripts/dashboard-server.mjs"))
        .env("OJS_DASHBOARD_DIST", &dist)
        .env("OJS_URL", &app.base_url)
        .env("OJS_ADMIN_KEY", &operator)
        .env("OJS_DASHBOARD_PORT", "0")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting node scripts/dashboard-server.mjs")?;
    let mut lines = BufReader::new(server.stdout.take().context("server stdout")?).lines();
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
        .await
        .context("the dashboard server did not start")??
        .unwrap_or_default();
    let url = first
        .strip_prefix("listening ")
        .and_then(|rest| rest.split_whitespace().next())
        .with_context(|| format!("dashboard server said {first:?}"))?
        .to_owned();

    let expect = json!({
        "overview": {"active": "3", "completed": "1", "failed": "1", "queues": "2"},
        "queue": "web",
        "queue_types": ["report.build", "report.build", "report.sent", "report.fail"],
        "failed": {"id": failed, "type": "report.fail", "arg": "ops@example.com", "error": "smtp timeout after 30s"},
        "webhook": hook,
        "schema": {"type": "report.build", "version": "v2.1.0"},
        "worker": {"id": "browser-test", "state": "drain"},
        "tenant": {"id": tenant, "max_concurrent": "4"},
    });
    let shots = root.join("artifacts/dashboard");
    let started = std::time::Instant::now();
    let out = tokio::process::Command::new("node")
        .arg(root.join("tests/browser/dashboard.mjs"))
        .env("OJS_DASHBOARD_URL", &url)
        .env("OJS_EXPECT", expect.to_string())
        .env("OJS_SCREENSHOTS", &shots)
        .env("OJS_PLAYWRIGHT", &playwright)
        .env("OJS_CHROMIUM", &chromium)
        .output()
        .await
        .context("running node tests/browser/dashboard.mjs")?;
    eprintln!(
        "browser test: {:.1} s\n{}{}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = server.kill().await;
    anyhow::ensure!(
        out.status.success(),
        "the dashboard did not show the expected data (screenshots in {})",
        shots.display()
    );

    // What the clicks did, seen by the server.
    let job = app
        .store
        .engine()
        .get_job(&JobId::parse(&failed)?)
        .await?
        .context("the retried job is gone")?;
    assert_eq!(
        job.status.state,
        JobState::Available,
        "retried from the dead letter page"
    );
    assert!(!job.status.dead_letter);
    let web = app
        .store
        .derived()
        .queue_stats(&QueueName::parse("web")?)
        .await?;
    assert!(web.paused, "paused from the queues page");
    assert!(
        !app.store
            .derived()
            .queue_stats(&QueueName::parse("other")?)
            .await?
            .paused
    );
    app.teardown().await;
    Ok(())
}
