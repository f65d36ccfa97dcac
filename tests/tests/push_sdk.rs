//! Push delivery (ojs-serverless.md §2) to the official SDKs' push adapters, unmodified
//! (`../shared/clients`), each served on 127.0.0.1 by a tiny shim (`tests/push/`, which
//! checks signatures as a deployment's front would and records every delivery). With one
//! endpoint registered and no polling worker: jobs complete, a failing handler is retried,
//! a handler slower than `timeout_ms` is retried with a new delivery id (its late answer
//! lands nowhere), and an endpoint registered with the wrong secret fails its deliveries
//! visibly. The Python `direct_handler` is invoked as a Lambda function through a fake
//! Invoke API. Needs `scripts/sdk-clients.sh setup` (Python venv, built JS SDK, Go).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const SECRET: &str = "whsec_sdk_push_0123456789";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The command that serves `lang`'s adapter.
async fn shim_command(lang: &str, ojs_url: &str) -> anyhow::Result<Command> {
    let root = root();
    let shims = root.join("tests/push");
    let mut cmd = match lang {
        "python" => {
            let mut c = Command::new(root.join(".local/sdk/python/venv/bin/python"));
            c.arg(shims.join("python_shim.py"));
            c
        }
        "js" => {
            let sdk = root.join(".local/sdk/js/ojs-js-sdk/dist/esm/serverless/lambda.js");
            anyhow::ensure!(
                sdk.exists(),
                "the JS SDK is not built; run scripts/sdk-clients.sh setup"
            );
            let mut c = Command::new("node");
            c.arg(shims.join("js_shim.mjs")).arg(sdk);
            c
        }
        "go" => {
            let bin = root.join(".local/push-go-shim");
            let script = format!(
                "source {}/tests/sdk/go/env.sh && GO=\"$(go_bin)\" && cd {}/go && \"$GO\" build -o {} .",
                root.display(),
                shims.display(),
                bin.display()
            );
            let built = Command::new("bash").arg("-c").arg(&script).output().await?;
            anyhow::ensure!(
                built.status.success(),
                "building the Go shim: {}",
                String::from_utf8_lossy(&built.stderr)
            );
            Command::new(bin)
        }
        other => anyhow::bail!("no shim for {other}"),
    };
    cmd.env("PUSH_SECRET", SECRET)
        .env("SLOW_MS", "2500")
        .env("OJS_URL", ojs_url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    Ok(cmd)
}

/// Starts the shim and waits for its `LISTENING <port>` line.
async fn start_shim(lang: &str, ojs_url: &str) -> anyhow::Result<(Child, String)> {
    let mut child = shim_command(lang, ojs_url)
        .await?
        .spawn()
        .with_context(|| format!("starting the {lang} shim (scripts/sdk-clients.sh setup)"))?;
    let stdout = child.stdout.take().context("shim stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .context("the shim did not start within 60 s")??
        .context("the shim exited")?;
    let port = line
        .strip_prefix("LISTENING ")
        .with_context(|| format!("unexpected shim output {line:?}"))?
        .trim()
        .to_owned();
    Ok((child, format!("http://127.0.0.1:{port}/")))
}

async fn register(app: &TestApp, url: &str, queue: &str, secret: &str) -> anyhow::Result<()> {
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/push/endpoints",
            Some(json!({
                "endpoint": url,
                "job_types": ["push.echo", "push.flaky", "push.slow"],
                "queues": [queue],
                "config": {"max_concurrency": 8, "timeout_ms": 1000, "signing_secret": secret},
            })),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "register: {:?}", r.body);
    Ok(())
}

async fn push(app: &TestApp, job_type: &str, queue: &str, args: Value) -> anyhow::Result<String> {
    let r = app
        .push(json!({
            "type": job_type, "queue": queue, "args": args,
            "retry": {"max_attempts": 3, "initial_interval": "PT1S", "jitter": false},
        }))
        .await?;
    anyhow::ensure!(r.status == 201, "push: {:?}", r.body);
    Ok(r.body["job"]["id"].as_str().unwrap_or_default().to_owned())
}

async fn wait_terminal(app: &TestApp, id: &str) -> anyhow::Result<Value> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let job = app.info(id).await?.body["job"].clone();
        let state = job["state"].as_str().unwrap_or_default();
        if ["completed", "discarded", "cancelled"].contains(&state) || Instant::now() > until {
            return Ok(job);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn scenario(lang: &str) -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let (_shim, url) = start_shim(lang, &app.base_url).await?;
    let (good, bad) = (format!("sdk-{lang}"), format!("sdk-{lang}-badsig"));
    register(&app, &url, &good, SECRET).await?;
    register(&app, &url, &bad, "whsec_not_the_shims_secret").await?;

    let started = Instant::now();
    let echo = push(&app, "push.echo", &good, json!(["hi", 1])).await?;
    let echo_job = wait_terminal(&app, &echo).await?;
    let echo_ms = started.elapsed().as_millis();
    let flaky = push(&app, "push.flaky", &good, json!([])).await?;
    let slow = push(&app, "push.slow", &good, json!([])).await?;
    let refused = push(&app, "push.echo", &bad, json!([])).await?;
    let (flaky_job, slow_job, refused_job) = (
        wait_terminal(&app, &flaky).await?,
        wait_terminal(&app, &slow).await?,
        wait_terminal(&app, &refused).await?,
    );
    let deliveries: Vec<Value> = app
        .client
        .get(&url)
        .send()
        .await?
        .json::<Value>()
        .await?
        .as_array()
        .cloned()
        .unwrap_or_default();
    let of =
        |id: &str| -> Vec<&Value> { deliveries.iter().filter(|d| d["job_id"] == id).collect() };
    eprintln!(
        "push {lang}: echo job pushed and completed in {echo_ms} ms; {} deliveries",
        deliveries.len()
    );

    // Completed through the adapter; the Python adapter sends its handler's result.
    assert_eq!(echo_job["state"], "completed", "{echo_job}");
    assert_eq!(echo_job["attempt"], 1, "{echo_job}");
    if lang == "python" {
        assert_eq!(echo_job["result"], json!({"echo": ["hi", 1]}));
    }
    // A failing handler is retried, and the retry completes.
    assert_eq!(flaky_job["state"], "completed", "{flaky_job}");
    assert_eq!(flaky_job["attempt"], 2, "{flaky_job}");
    assert!(
        flaky_job["errors"].to_string().contains("handler_error"),
        "{flaky_job}"
    );
    // A handler slower than timeout_ms: the attempt times out, the retry is a new delivery.
    assert_eq!(slow_job["state"], "completed", "{slow_job}");
    assert_eq!(slow_job["attempt"], 2, "{slow_job}");
    assert!(
        slow_job["errors"].to_string().contains("push_timeout"),
        "{slow_job}"
    );
    if lang == "python" {
        assert_eq!(
            slow_job["result"],
            json!({"attempt": 2}),
            "the late answer of attempt 1 was taken"
        );
    }
    for (id, attempts) in [(&echo, 1), (&flaky, 2), (&slow, 2)] {
        let ds = of(id);
        assert_eq!(ds.len(), attempts, "{id}: {ds:?}");
        let mut ids: Vec<&str> = ds
            .iter()
            .filter_map(|d| d["delivery_id"].as_str())
            .collect();
        assert!(
            ds.iter()
                .all(|d| d["sig_ok"] == true && d["delivery_id"] == d["body_delivery_id"]),
            "{ds:?}"
        );
        ids.dedup();
        assert_eq!(ids.len(), attempts, "a new delivery id per attempt: {ds:?}");
    }
    // The wrong secret: refused by the endpoint (401), not retried, and it says why.
    assert_eq!(refused_job["state"], "discarded", "{refused_job}");
    assert!(
        refused_job["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("signing secret")),
        "{refused_job}"
    );
    assert!(of(&refused).iter().all(|d| d["sig_ok"] == false) && of(&refused).len() == 1);
    // ... and the endpoint is disabled (§7.2.3): the next job of its queue stays available.
    let listed = app
        .call(Method::GET, "/ojs/v1/push/endpoints", None)
        .await?;
    let bad_endpoint = listed.body["endpoints"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["queues"] == json!([bad])).cloned())
        .unwrap_or_default();
    assert_eq!(bad_endpoint["status"], "disabled", "{bad_endpoint}");
    assert!(
        bad_endpoint["disabled_reason"]
            .as_str()
            .is_some_and(|r| r.contains("401")),
        "{bad_endpoint}"
    );
    let held = push(&app, "push.echo", &bad, json!([])).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(app.info(&held).await?.body["job"]["state"], "available");
    app.teardown().await;
    Ok(())
}

/// The Python SDK's `direct_handler`, invoked as a Lambda function (RequestResponse)
/// through the fake Invoke API the shim serves: no result (the direct handlers send
/// none), a failing handler retried, a slow one timed out and retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_direct_handler() -> anyhow::Result<()> {
    // The shim's port is known only once it runs: start it first, against any server URL.
    let (_shim, url) = start_shim("python", "http://127.0.0.1:9").await?;
    let config = ojs_push::PushConfig::local(true);
    let app = TestApp::spawn_with_push_to(config, Some(url.trim_end_matches('/'))).await?;
    let arn = "arn:aws:lambda:us-east-1:123456789012:function:ojs-worker";
    register(&app, arn, "sdk-direct", SECRET).await?;
    let echo = push(&app, "push.echo", "sdk-direct", json!(["hi"])).await?;
    let flaky = push(&app, "push.flaky", "sdk-direct", json!([])).await?;
    let slow = push(&app, "push.slow", "sdk-direct", json!([])).await?;
    let (echo_job, flaky_job, slow_job) = (
        wait_terminal(&app, &echo).await?,
        wait_terminal(&app, &flaky).await?,
        wait_terminal(&app, &slow).await?,
    );
    assert_eq!(echo_job["state"], "completed", "{echo_job}");
    assert_eq!(echo_job["attempt"], 1);
    assert_eq!(flaky_job["state"], "completed", "{flaky_job}");
    assert_eq!(flaky_job["attempt"], 2);
    assert!(
        flaky_job["errors"]
            .to_string()
            .contains("flaky handler fails its first attempt"),
        "{flaky_job}"
    );
    assert_eq!(slow_job["state"], "completed", "{slow_job}");
    assert_eq!(slow_job["attempt"], 2);
    assert!(
        slow_job["errors"].to_string().contains("push_timeout"),
        "{slow_job}"
    );
    let deliveries: Vec<Value> = app
        .client
        .get(&url)
        .send()
        .await?
        .json::<Value>()
        .await?
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(deliveries.len(), 5, "{deliveries:?}");
    assert!(
        deliveries.iter().all(|d| d["function"] == arn
            && d["delivery_id"]
                .as_str()
                .is_some_and(|i| i.starts_with("del_"))),
        "{deliveries:?}"
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_http_handler() -> anyhow::Result<()> {
    scenario("python").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_handle_http() -> anyhow::Result<()> {
    scenario("go").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_http_handler() -> anyhow::Result<()> {
    scenario("js").await
}
