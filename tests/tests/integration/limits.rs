//! Payload limits (ojs-payload-limits.md): `meta` up to 64 KB, `args` bounded only by the
//! job's stored request, every size refusal a 413 that writes nothing, and the manifest
//! saying so.

use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

/// The job INFO answers for `id`.
async fn job(app: &TestApp, id: &Value) -> anyhow::Result<Value> {
    let info = app.info(id.as_str().unwrap_or_default()).await?;
    anyhow::ensure!(
        info.status == 200,
        "INFO {id}: {} {}",
        info.status,
        info.body
    );
    Ok(info.body["job"].clone())
}

/// FETCHes `queue` as `worker` and ACKs what comes, which must be job `id`.
async fn fetch_and_ack(app: &TestApp, queue: &str, id: &Value) -> anyhow::Result<Value> {
    let fetched = app
        .fetch(json!({"queues": [queue], "worker_id": "limits-worker"}))
        .await?;
    anyhow::ensure!(
        fetched.status == 200,
        "FETCH: {} {}",
        fetched.status,
        fetched.body
    );
    let got = fetched.body["jobs"][0].clone();
    anyhow::ensure!(got["id"] == *id, "FETCH gave {}", fetched.body);
    let acked = app
        .ack(json!({"job_id": id, "worker_id": "limits-worker", "result": {"ok": true}}))
        .await?;
    anyhow::ensure!(acked.status == 200, "ACK: {} {}", acked.status, acked.body);
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_of_60000_bytes_goes_through_its_lifecycle() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let meta = json!({"trace": "t".repeat(60_000), "tenant": "acme"});
    let pushed = app
        .push(json!({"type": "meta.big", "queue": "limits-meta", "args": [1], "meta": meta}))
        .await?;
    anyhow::ensure!(pushed.status == 201, "{} {}", pushed.status, pushed.body);
    let id = pushed.body["job"]["id"].clone();
    let got = fetch_and_ack(&app, "limits-meta", &id).await?;
    anyhow::ensure!(got["meta"] == meta, "FETCH lost the meta");
    let done = job(&app, &id).await?;
    anyhow::ensure!(done["state"] == "completed", "{}", done["state"]);
    anyhow::ensure!(done["meta"] == meta);
    // Over 65,536 bytes of JSON: 413 with the OJS error body, nothing written.
    let over = json!({"trace": "t".repeat(65_536)});
    let r = app
        .push(json!({"type": "meta.big", "queue": "limits-meta", "args": [], "meta": over}))
        .await?;
    anyhow::ensure!(
        r.status == 413 && r.body["error"]["code"] == "envelope_too_large",
        "{} {}",
        r.status,
        r.body
    );
    anyhow::ensure!(r.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("65536")));
    let empty = app
        .fetch(json!({"queues": ["limits-meta"], "worker_id": "limits-worker"}))
        .await?;
    anyhow::ensure!(empty.body["jobs"] == json!([]), "{}", empty.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_argument_of_200000_characters_is_kept_intact() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    // Varied text, so the stored request deflates (to fit its item) but not to nothing.
    let arg: String = (0..200_000u32)
        .map(|i| char::from(b'a' + u8::try_from(i.wrapping_mul(7919) % 26).unwrap_or(0)))
        .collect();
    let pushed = app
        .push(json!({"type": "big.arg", "queue": "limits-args", "args": [arg, 2]}))
        .await?;
    anyhow::ensure!(pushed.status == 201, "{} {}", pushed.status, pushed.body);
    let id = pushed.body["job"]["id"].clone();
    anyhow::ensure!(
        job(&app, &id).await?["args"] == json!([arg, 2]),
        "INFO changed the args"
    );
    let got = fetch_and_ack(&app, "limits-args", &id).await?;
    anyhow::ensure!(got["args"][0] == arg.as_str(), "FETCH changed the args");
    app.teardown().await;
    Ok(())
}

/// Every limit answer over every way a job is created is `413 envelope_too_large` with
/// the OJS error body, and leaves nothing behind: no job, no workflow, no cron.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_over_the_stored_request_are_413_everywhere_and_write_nothing() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let big = "x".repeat(300_000);
    let q = "limits-over";
    let step =
        |id: &str, args: Value| json!({"id": id, "type": "wf.step", "queue": q, "args": args});
    let cases = [
        (
            "PUSH",
            "/ojs/v1/jobs",
            json!({"type": "a", "queue": q, "args": [big]}),
        ),
        (
            "batch",
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "a", "queue": q, "args": [1]}, {"type": "a", "queue": q, "args": [big]}]}),
        ),
        (
            "workflow step",
            "/ojs/v1/workflows",
            json!({"type": "chain", "name": "over", "steps": [step("a", json!([1])), step("b", json!([big]))]}),
        ),
        (
            "workflow callback",
            "/ojs/v1/workflows",
            json!({"type": "batch", "jobs": [step("a", json!([1]))],
                   "callbacks": {"on_failure": {"type": "cb", "queue": q, "args": [big]}}}),
        ),
        (
            "cron template",
            "/ojs/v1/cron",
            json!({"name": "limits-over", "expression": "* * * * *",
                   "job_template": {"type": "a", "queue": q, "args": [big]}}),
        ),
        (
            "cron template over an item",
            "/ojs/v1/cron",
            json!({"name": "limits-over-item", "expression": "* * * * *",
                   "job_template": {"type": "a", "queue": q, "args": ["z".repeat(900_000)]}}),
        ),
    ];
    for (what, path, body) in cases {
        let r = app.call(Method::POST, path, Some(body)).await?;
        let err = &r.body["error"];
        anyhow::ensure!(
            r.status == 413
                && err["code"] == "envelope_too_large"
                && err["retryable"] == false
                && err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {} {}",
            r.status,
            r.body
        );
    }
    let fetched = app
        .fetch(json!({"queues": [q], "count": 10, "worker_id": "w"}))
        .await?;
    anyhow::ensure!(fetched.body["jobs"] == json!([]), "{}", fetched.body);
    let crons = app.call(Method::GET, "/ojs/v1/cron", None).await?;
    anyhow::ensure!(crons.body["crons"] == json!([]), "{}", crons.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_states_the_limits_in_force() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let m = app.call(Method::GET, "/ojs/manifest", None).await?;
    let limits = &m.body["limits"];
    anyhow::ensure!(limits["max_envelope_bytes"] == 262_144, "{limits}");
    anyhow::ensure!(limits["max_request_body_bytes"] == 1_048_576, "{limits}");
    anyhow::ensure!(limits["max_meta_bytes"] == 65_536, "{limits}");
    anyhow::ensure!(limits.get("max_args_bytes").is_none(), "{limits}");
    anyhow::ensure!(
        limits["max_envelope_note"]
            .as_str()
            .is_some_and(|n| n.contains("262144")),
        "{limits}"
    );
    app.teardown().await;
    Ok(())
}
