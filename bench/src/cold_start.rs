//! Section 4: cold starts. Every Lambda function package of the workspace (found under
//! `functions/`, those depending on `lambda_http` or `lambda_runtime`) is built in
//! release mode, sized (bytes, and zipped as a Lambda deployment package), and started
//! several times against the fake Runtime API with one event already queued.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ojs_store::{Store, StoreConfig};
use serde::Serialize;
use serde_json::{json, Value};

use crate::lambda_runtime::{events, FakeRuntime, FunctionSpec, LambdaProcess, Outcome};
use crate::stats;

/// A Lambda function package of the workspace.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionPackage {
    /// Cargo package name, e.g. `ojs-fn-jobs`.
    pub package: String,
    /// Binary name, e.g. `jobs`.
    pub bin: String,
}

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The release output directory (`CARGO_TARGET_DIR` or `<root>/target`) + `release`.
pub fn release_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("release")
}

/// The Lambda function packages under `functions/`, sorted by binary name.
pub fn discover() -> anyhow::Result<Vec<FunctionPackage>> {
    let dir = workspace_root().join("functions");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let manifest = entry?.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let doc: toml_edit::DocumentMut = text
            .parse()
            .with_context(|| format!("parsing {}", manifest.display()))?;
        let Some(package) = doc
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
        else {
            continue;
        };
        let deps = doc.get("dependencies").and_then(|d| d.as_table_like());
        let is_lambda =
            deps.is_some_and(|d| d.contains_key("lambda_http") || d.contains_key("lambda_runtime"));
        if !is_lambda {
            continue;
        }
        let bin = doc
            .get("bin")
            .and_then(|b| b.as_array_of_tables())
            .and_then(|a| a.iter().next())
            .and_then(|t| t.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or(package);
        found.push(FunctionPackage {
            package: package.to_owned(),
            bin: bin.to_owned(),
        });
    }
    found.sort_by(|a, b| a.bin.cmp(&b.bin));
    Ok(found)
}

/// `cargo build --release -p <each package>` in the workspace root.
pub fn build(packages: &[String]) -> anyhow::Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--release"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    eprintln!("bench: cargo build --release -p {}", packages.join(" -p "));
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build of the function binaries failed ({status})");
    }
    Ok(())
}

/// Cold start figures of one function.
#[derive(Debug, Clone, Serialize)]
pub struct ColdStart {
    /// Binary name.
    pub function: String,
    /// Cargo package.
    pub package: String,
    /// Size of the release binary.
    pub binary_bytes: u64,
    /// Size of the deployment zip (`bootstrap` only), when `zip` is installed.
    pub zip_bytes: Option<u64>,
    /// The event used.
    pub event: String,
    /// Cold starts measured.
    pub runs: usize,
    /// Median time from spawn to the first `next` poll (Lambda's Init Duration).
    pub init_ms: f64,
    /// Median time from spawn to the response POST of the first event (for HTTP
    /// functions with an API key, the deployed default).
    pub first_event_ms: f64,
    /// The same with `OJS_AUTH=off` (HTTP functions only): the difference is the
    /// first request's key check (one GetItem and one Argon2id verification).
    pub first_event_auth_off_ms: Option<f64>,
    /// Median time from delivery of the first event to its response (includes the
    /// first DynamoDB call: a new connection).
    pub handle_ms: f64,
    /// Largest spawn-to-response time seen.
    pub first_event_max_ms: f64,
    /// Peak resident memory after the first event, KiB (median).
    pub peak_rss_kib: Option<u64>,
    /// Status code (HTTP functions) or a short description of the answer.
    pub answer: String,
    /// Why this function could not be measured (the figures are then NaN/null).
    pub error: Option<String>,
}

impl ColdStart {
    fn failed(f: &FunctionPackage, error: String) -> Self {
        Self {
            function: f.bin.clone(),
            package: f.package.clone(),
            binary_bytes: 0,
            zip_bytes: None,
            event: String::new(),
            runs: 0,
            init_ms: f64::NAN,
            first_event_ms: f64::NAN,
            first_event_auth_off_ms: None,
            handle_ms: f64::NAN,
            first_event_max_ms: f64::NAN,
            peak_rss_kib: None,
            answer: String::new(),
            error: Some(error),
        }
    }
}

/// The event a function is cold-started with.
fn event_for(bin: &str) -> (String, Value) {
    let id = uuid::Uuid::now_v7().to_string();
    let http = |m: &str, p: &str, body: Option<Value>| {
        (format!("{m} {p}"), events::http_api(m, p, body.as_ref()))
    };
    match bin {
        "jobs" => http("GET", &format!("/ojs/v1/jobs/{id}"), None),
        "workers" => http(
            "POST",
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": ["cold"], "worker_id": "cold"})),
        ),
        "queues" => http("GET", "/ojs/v1/queues", None),
        "dead-letter" => http("GET", "/ojs/v1/dead-letter", None),
        "cron" => http("GET", "/ojs/v1/cron", None),
        "workflows" => http("GET", &format!("/ojs/v1/workflows/{id}"), None),
        "schemas" => http("GET", "/ojs/v1/schemas", None),
        "cloudq" => http("GET", "/cloudq/cold", None),
        "scheduler" => (
            "EventBridge scheduled event".into(),
            events::eventbridge_scheduled(),
        ),
        "timer" => {
            let body = json!({"kind": "job", "job_id": id, "due_us": chrono::Utc::now().timestamp_micros()});
            (
                "SQS timer message (unknown job)".into(),
                events::sqs(&[body.to_string()]),
            )
        }
        "authorizer" => (
            "authorizer request (malformed key)".into(),
            json!({"version": "2.0", "type": "REQUEST", "routeKey": "GET /ojs/v1/queues",
                   "headers": {"authorization": "Bearer ojs_cold"}}),
        ),
        "keys" => ("key command: list".into(), json!({"action": "list"})),
        // system, and any function added later: the health endpoint.
        _ => http("GET", "/ojs/v1/health", None),
    }
}

fn zip_size(binary: &Path) -> Option<u64> {
    let dir = std::env::temp_dir().join(format!("ojs-bench-zip-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).ok()?;
    let result = (|| {
        std::fs::copy(binary, dir.join("bootstrap")).ok()?;
        let status = std::process::Command::new("zip")
            .current_dir(&dir)
            .args(["-q", "-9", "-X", "bootstrap.zip", "bootstrap"])
            .status()
            .ok()?;
        status.success().then_some(())?;
        std::fs::metadata(dir.join("bootstrap.zip"))
            .ok()
            .map(|m| m.len())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The environment a function runs with: the template's settings, the local endpoints.
fn function_env(table: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("OJS_TABLE".to_owned(), table.to_owned()),
        ("OJS_EVENTS".to_owned(), "on".to_owned()),
        ("RUST_LOG".to_owned(), "info".to_owned()),
        // Cold starts: no instance metadata service here (nor on Lambda).
        ("AWS_EC2_METADATA_DISABLED".to_owned(), "true".to_owned()),
        (
            "AWS_ENDPOINT_URL_DYNAMODB".to_owned(),
            crate::env::dynamodb_endpoint(),
        ),
        // Building the SQS client is part of init on AWS; the events used send nothing.
        (
            "OJS_TIMER_QUEUE_URL".to_owned(),
            "http://127.0.0.1:5000/000000000000/ojs-bench-cold".to_owned(),
        ),
        (
            "AWS_ENDPOINT_URL_SQS".to_owned(),
            "http://127.0.0.1:5000".to_owned(),
        ),
    ];
    for key in [
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ] {
        if let Ok(v) = std::env::var(key) {
            env.push((key.to_owned(), v.clone()));
            if key == "AWS_REGION" {
                env.push(("AWS_DEFAULT_REGION".to_owned(), v));
            }
        }
    }
    env
}

/// Cold-starts every function `runs` times.
pub async fn run(functions: &[FunctionPackage], runs: usize) -> anyhow::Result<Vec<ColdStart>> {
    let sdk = crate::env::sdk().await;
    let table = crate::env::table_name("cold");
    let store = Store::new(ojs_store::client_for(&sdk), StoreConfig::for_table(&table));
    store
        .ensure_table()
        .await
        .context("creating the cold-start table")?;
    let key = ojs_http::auth::issue_key(&store, "ojs-bench").await?.key;
    let mut out = Vec::new();
    for f in functions {
        match one(f, &table, &key, runs.max(1)).await {
            Ok(c) => out.push(c),
            Err(e) => {
                eprintln!("bench: cold start of {} not measured: {e:#}", f.bin);
                out.push(ColdStart::failed(f, format!("{e:#}")));
            }
        }
    }
    let _ = store.delete_table().await;
    Ok(out)
}

/// One cold start: spawn with `event` queued, wait for the answer.
struct Sample {
    init_ms: f64,
    first_ms: f64,
    handle_ms: f64,
    rss_kib: Option<f64>,
    answer: String,
}

async fn start_once(spec: &FunctionSpec, event: Value, name: &str) -> anyhow::Result<Sample> {
    let runtime = FakeRuntime::start().await?;
    let pending = runtime.enqueue(event)?;
    let mut process = LambdaProcess::spawn_on(spec, runtime)?;
    let done = process.wait(pending, Duration::from_secs(20)).await;
    let spawned = process.spawned_at();
    let polled = process.runtime().first_poll();
    let rss = process.peak_rss_kib().map(|k| k as f64);
    process.stop().await;
    let done = done.with_context(|| format!("cold start of {name}"))?;
    let since = |t: Instant| stats::ms(t.saturating_duration_since(spawned));
    let answer = match (&done.outcome, done.outcome.status_code()) {
        (_, Some(code)) => format!("HTTP {code}"),
        (Outcome::Response(v), None) => v.to_string().chars().take(40).collect(),
        (Outcome::Error { error_type, .. }, None) => {
            format!("error {}", error_type.clone().unwrap_or_default())
        }
    };
    Ok(Sample {
        init_ms: polled.map(since).unwrap_or(f64::NAN),
        first_ms: since(done.completed_at),
        handle_ms: stats::ms(
            done.completed_at
                .saturating_duration_since(done.delivered_at),
        ),
        rss_kib: rss,
        answer,
    })
}

async fn one(
    f: &FunctionPackage,
    table: &str,
    key: &str,
    runs: usize,
) -> anyhow::Result<ColdStart> {
    let binary = release_dir().join(&f.bin);
    let binary_bytes = std::fs::metadata(&binary)
        .with_context(|| {
            format!(
                "{} is missing: cargo build --release -p {}",
                binary.display(),
                f.package
            )
        })?
        .len();
    let mut spec = FunctionSpec::new(&binary, &format!("ojs-{}", f.bin));
    spec.env = function_env(table);
    spec.show_output = std::env::var_os("OJS_BENCH_SHOW_LAMBDA_OUTPUT").is_some();
    let mut open = spec.clone();
    open.env.push(("OJS_AUTH".into(), "off".into()));
    let mut samples = Vec::new();
    let mut open_first = Vec::new();
    let mut event_name = String::new();
    for _ in 0..runs {
        let (name, mut event) = event_for(&f.bin);
        event_name = name;
        let http = event.get("requestContext").is_some();
        if http {
            // The deployed default: API keys required; the first request of an instance
            // reads the key record and runs one Argon2 verification.
            event["headers"]["authorization"] = Value::String(format!("Bearer {key}"));
        }
        samples.push(start_once(&spec, event.clone(), &f.bin).await?);
        if http {
            open_first.push(start_once(&open, event, &f.bin).await?.first_ms);
        }
    }
    let col = |g: fn(&Sample) -> f64| samples.iter().map(g).collect::<Vec<f64>>();
    let first = col(|s| s.first_ms);
    let rss: Vec<f64> = samples.iter().filter_map(|s| s.rss_kib).collect();
    Ok(ColdStart {
        function: f.bin.clone(),
        package: f.package.clone(),
        binary_bytes,
        zip_bytes: zip_size(&binary),
        event: event_name,
        runs,
        init_ms: stats::median(&col(|s| s.init_ms)).unwrap_or(f64::NAN),
        first_event_ms: stats::median(&first).unwrap_or(f64::NAN),
        first_event_auth_off_ms: stats::median(&open_first),
        handle_ms: stats::median(&col(|s| s.handle_ms)).unwrap_or(f64::NAN),
        first_event_max_ms: first.iter().copied().fold(0.0, f64::max),
        peak_rss_kib: stats::median(&rss).map(|k| k as u64),
        answer: samples.last().map(|s| s.answer.clone()).unwrap_or_default(),
        error: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovers_every_lambda_function_and_not_the_local_server() -> anyhow::Result<()> {
        let found = discover()?;
        let bins: Vec<&str> = found.iter().map(|f| f.bin.as_str()).collect();
        for expected in ["jobs", "workers", "system", "scheduler", "timer"] {
            assert!(bins.contains(&expected), "{expected} not in {bins:?}");
        }
        assert!(!bins.contains(&"ojs-local"));
        Ok(())
    }
}
