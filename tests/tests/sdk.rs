//! The official OJS SDKs (Python, JavaScript, Go, Rust; unmodified, in
//! `../shared/clients`) driven against the real server: each language's suite
//! (`tests/sdk/<lang>/run.sh`, installed by `scripts/sdk-clients.sh setup`) runs its
//! producer and worker scenarios against a fresh server and table of its own.
//!
//! The suites run two at a time: several of their checks are about timing (a delayed job
//! neither early nor late), which a machine busy with all five at once would blur, while
//! most of a suite's time is its own sleeps (leases, back-offs, delays), so one at a time
//! left the machine idle (135 s for the five in a row on 2 cores, about 70 s in pairs).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use ojs_tests::TestApp;
use tokio::sync::Semaphore;

/// Two suites at a time (see the module docs).
static TURN: Semaphore = Semaphore::const_new(2);

macro_rules! report {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// The server the suites drive: every endpoint group, the sweep every second, and large
/// jobs kept in the payload bucket (as the template's stack keeps them).
async fn suite_server(config: ojs_http::HttpConfig) -> anyhow::Result<TestApp> {
    let (store, _) = ojs_tests::with_payloads(ojs_tests::fresh_store().await?).await?;
    TestApp::spawn_with_sweeper_on(store, config).await
}

async fn run_suite(lang: &str) -> anyhow::Result<()> {
    let app = suite_server(ojs_http::HttpConfig::default()).await?;
    run_suite_on(lang, app, &[]).await
}

/// Runs `lang`'s suite against `app`, with `env` added to the suite's environment.
async fn run_suite_on(lang: &str, app: TestApp, env: &[(&str, String)]) -> anyhow::Result<()> {
    let _turn = TURN.acquire().await?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = root.join(format!("tests/sdk/{lang}/run.sh"));
    let started = std::time::Instant::now();
    let out = tokio::process::Command::new("bash")
        .arg(&script)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("OJS_URL", &app.base_url)
        // Jobs pushed a moment ago show in the ready index only after the strict layer's
        // lag (as on AWS): a suite that must see them all at once waits this long first.
        .env(
            "OJS_INDEX_LAG_MS",
            ojs_tests::strict_proxy::fetch_recheck()
                .as_millis()
                .to_string(),
        )
        .output()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    app.teardown().await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or("").to_owned();
    if !out.status.success() {
        report!("{stdout}");
        report!("{}", String::from_utf8_lossy(&out.stderr));
    }
    report!(
        "sdk {lang}: {summary} ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(
        out.status.success(),
        "the {lang} SDK suite failed ({summary}); install with scripts/sdk-clients.sh setup"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk() -> anyhow::Result<()> {
    run_suite("python").await
}

/// The Python suite with API keys required and the keys README ("API keys and scopes")
/// tells users to give: its producer side (the client: enqueue, read, and the cron jobs
/// it registers) holds `ojs:data:enqueue,ojs:data:read,ojs:config:write`, its workers
/// only `ojs:data:process`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_with_least_privilege_keys() -> anyhow::Result<()> {
    use ojs_http::scopes::{Scope, Scopes};
    let app = suite_server(ojs_http::HttpConfig {
        auth: ojs_http::AuthMode::ApiKey,
        ..ojs_http::HttpConfig::default()
    })
    .await?;
    let key = |name: &'static str, scopes: &'static [Scope]| {
        let store = app.store.clone();
        async move {
            ojs_http::auth::issue_scoped_key(&store, name, Some(Scopes::of(scopes)))
                .await
                .map(|k| k.key)
        }
    };
    let producer = key(
        "sdk-producer",
        &[Scope::DataEnqueue, Scope::DataRead, Scope::ConfigWrite],
    )
    .await?;
    let worker = key("sdk-worker", &[Scope::DataProcess]).await?;
    run_suite_on(
        "python",
        app,
        &[("OJS_API_KEY", producer), ("OJS_WORKER_API_KEY", worker)],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_sdk() -> anyhow::Result<()> {
    run_suite("js").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_sdk() -> anyhow::Result<()> {
    run_suite("go").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_sdk() -> anyhow::Result<()> {
    run_suite("rust").await
}
