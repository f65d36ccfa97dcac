//! Payload limits (ojs-payload-limits.md): compressed request bodies (`Content-Encoding:
//! gzip` and `zstd`) decoded before anything reads them, size limits applied to the
//! decompressed body, a decompression bomb refused at the limit, `meta` up to 64 KB,
//! `args` bounded only by the job's stored request, and the manifest saying so.

use std::time::{Duration, Instant};

use crate::compress::{gzip, zstd};
use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

const OJS_JSON: &str = "application/openjobspec+json";

/// Sends `body` as it is, with `Content-Encoding: coding` when one is given.
async fn send(
    app: &TestApp,
    method: Method,
    path: &str,
    content_type: &str,
    coding: Option<&str>,
    body: Vec<u8>,
) -> anyhow::Result<Reply> {
    let mut req = app
        .client
        .request(method, format!("{}{path}", app.base_url))
        .header("content-type", content_type)
        .body(body);
    if let Some(c) = coding {
        req = req.header("content-encoding", c);
    }
    ojs_tests::reply(req).await
}

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
async fn gzip_and_zstd_pushes_are_stored_as_sent() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let args = json!(["alice@example.com", {"template": "welcome", "n": 42, "tags": ["a", "b"]}, null, 1.5]);
    for (coding, pack) in [
        ("gzip", gzip as fn(&[u8]) -> Vec<u8>),
        ("x-gzip", gzip),
        ("zstd", zstd),
        ("identity", <[u8]>::to_vec),
    ] {
        let queue = format!("limits-{}", coding.replace('-', ""));
        let envelope = json!({"type": "email.send", "queue": queue, "args": args});
        let body = pack(envelope.to_string().as_bytes());
        let pushed = send(
            &app,
            Method::POST,
            "/ojs/v1/jobs",
            OJS_JSON,
            Some(coding),
            body,
        )
        .await?;
        anyhow::ensure!(
            pushed.status == 201,
            "{coding}: {} {}",
            pushed.status,
            pushed.body
        );
        let stored = job(&app, &pushed.body["job"]["id"]).await?;
        anyhow::ensure!(stored["args"] == args, "{coding}: {}", stored["args"]);
        anyhow::ensure!(stored["queue"] == queue.as_str(), "{coding}: {stored}");
    }

    // A batch in zstd, and a Protobuf envelope in gzip.
    let batch = json!({"jobs": [
        {"type": "batch.one", "queue": "limits-batch", "args": [1]},
        {"type": "batch.two", "queue": "limits-batch", "args": ["two"]},
    ]});
    let body = zstd(batch.to_string().as_bytes());
    let r = send(
        &app,
        Method::POST,
        "/ojs/v1/jobs/batch",
        OJS_JSON,
        Some("zstd"),
        body,
    )
    .await?;
    anyhow::ensure!(r.status == 201, "batch: {} {}", r.status, r.body);
    let ids: Vec<Value> = r.body["jobs"].as_array().cloned().unwrap_or_default();
    anyhow::ensure!(ids.len() == 2, "batch: {}", r.body);
    anyhow::ensure!(job(&app, &ids[1]["id"]).await?["args"] == json!(["two"]));
    let proto = ojs_proto::json_to_proto(&json!({
        "specversion": "1.0", "id": uuid::Uuid::now_v7().to_string(),
        "type": "proto.job", "queue": "limits-proto", "args": [{"k": "v"}]
    }))?;
    let r = send(
        &app,
        Method::POST,
        "/ojs/v1/jobs",
        "application/openjobspec+proto",
        Some("gzip"),
        gzip(&proto),
    )
    .await?;
    anyhow::ensure!(r.status == 201, "proto: {} {}", r.status, r.body);
    anyhow::ensure!(job(&app, &r.body["job"]["id"]).await?["args"] == json!([{"k": "v"}]));

    // Other routes that read a body: an ACK with its result in zstd, a Cloudq PUSH in gzip.
    let pushed = app
        .push(json!({"type": "acked.job", "queue": "limits-ack", "args": []}))
        .await?;
    let id = pushed.body["job"]["id"].clone();
    let fetched = app
        .fetch(json!({"queues": ["limits-ack"], "worker_id": "w"}))
        .await?;
    anyhow::ensure!(fetched.body["jobs"][0]["id"] == id, "{}", fetched.body);
    let ack = json!({"job_id": id, "worker_id": "w", "result": {"rows": 7}});
    let body = zstd(ack.to_string().as_bytes());
    let r = send(
        &app,
        Method::POST,
        "/ojs/v1/workers/ack",
        OJS_JSON,
        Some("zstd"),
        body,
    )
    .await?;
    anyhow::ensure!(r.status == 200, "ack: {} {}", r.status, r.body);
    anyhow::ensure!(job(&app, &id).await?["result"] == json!({"rows": 7}));
    let cloudq = json!({"job": {"klass": "Mail::SendDigest", "args": [3]}});
    let body = gzip(cloudq.to_string().as_bytes());
    let r = send(
        &app,
        Method::POST,
        "/cloudq/limits-cloudq",
        "application/json",
        Some("gzip"),
        body,
    )
    .await?;
    anyhow::ensure!(r.status == 200, "cloudq: {} {}", r.status, r.body);
    app.teardown().await;
    Ok(())
}

/// 50 MB of zeros packed into about 50 KB (fifty gzip members of a MB each), with bytes
/// after it that are no gzip: inflating it all would end in a 400 for the tail, and take
/// 50 MB. The answer is a 413 naming the 1 MiB limit, quickly: the server stopped at the
/// limit. The same in zstd (fifty frames).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decompression_bomb_is_refused_at_the_limit() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let mb = vec![0u8; 1_000_000];
    for (coding, member) in [("gzip", gzip(&mb)), ("zstd", zstd(&mb))] {
        let mut bomb = member.repeat(50);
        bomb.extend_from_slice(b"not compressed at all");
        anyhow::ensure!(bomb.len() < 100_000, "{coding}: {} bytes", bomb.len());
        let started = Instant::now();
        let r = send(
            &app,
            Method::POST,
            "/ojs/v1/jobs",
            OJS_JSON,
            Some(coding),
            bomb,
        )
        .await?;
        let took = started.elapsed();
        let err = &r.body["error"];
        anyhow::ensure!(
            r.status == 413 && err["code"] == "envelope_too_large",
            "{coding}: {} {}",
            r.status,
            r.body
        );
        anyhow::ensure!(
            err["details"]["max_bytes"] == 1024 * 1024,
            "{coding}: {}",
            r.body
        );
        anyhow::ensure!(took < Duration::from_secs(2), "{coding}: took {took:?}");
        println!("{coding} bomb: 413 in {took:?}");
    }
    // Under the limit once inflated, the same body is a job.
    let job = json!({"type": "a", "queue": "limits-bomb", "args": ["y".repeat(900_000)]});
    let packed = gzip(job.to_string().as_bytes());
    let r = send(
        &app,
        Method::POST,
        "/ojs/v1/jobs",
        OJS_JSON,
        Some("gzip"),
        packed,
    )
    .await?;
    // 900,000 characters fit the body but not the stored request: the store's 413.
    anyhow::ensure!(r.status == 413, "{} {}", r.status, r.body);
    anyhow::ensure!(
        r.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&ojs_store::MAX_STORED_REQUEST_BYTES.to_string())),
        "{}",
        r.body
    );
    app.teardown().await;
    Ok(())
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

/// Text that deflates little (a xorshift over 64 letters), of `len` characters.
fn noise(len: usize, seed: u32) -> String {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            char::from(LETTERS[(x % 64) as usize])
        })
        .collect()
}

/// Large jobs in one batch: 20 of 200,000 characters that barely deflate (4 MB, over
/// DynamoDB's 4 MB transaction, so written in several), sent in zstd, are all stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_large_jobs_is_stored_whole() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let jobs: Vec<Value> = (0..20)
        .map(|i| json!({"type": "big.batch", "queue": "limits-big-batch", "args": [noise(200_000, i + 1), i]}))
        .collect();
    let body = json!({ "jobs": jobs }).to_string();
    anyhow::ensure!(body.len() > 4_000_000, "{}", body.len());
    let r = send(
        &app,
        Method::POST,
        "/ojs/v1/jobs/batch",
        OJS_JSON,
        Some("zstd"),
        zstd(body.as_bytes()),
    )
    .await?;
    anyhow::ensure!(r.status == 201, "{} {:.300}", r.status, r.body.to_string());
    let ids = r.body["jobs"].as_array().cloned().unwrap_or_default();
    anyhow::ensure!(ids.len() == 20, "{:.300}", r.body.to_string());
    for (i, id) in ids.iter().enumerate() {
        let stored = job(&app, &id["id"]).await?;
        anyhow::ensure!(stored["args"] == jobs[i]["args"], "job {i} changed");
    }
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
async fn the_manifest_states_the_limits_and_capabilities_in_force() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let m = app.call(Method::GET, "/ojs/manifest", None).await?;
    // The dashboard's sidebar shows a page when `capabilities` names it (Sidebar.tsx's
    // `capability`, hasCapability: `=== true`); the tenants page by `multi_tenancy`.
    let caps = &m.body["capabilities"];
    for name in [
        "multi_tenancy",
        "webhooks",
        "job_versioning",
        "events",
        "dead_letter",
    ] {
        anyhow::ensure!(caps[name] == json!(true), "{name}: {caps}");
    }
    // The extension itself is not claimed: its events and per-tenant metrics are not built.
    anyhow::ensure!(
        !m.body["extensions"]
            .as_array()
            .is_some_and(|e| e.contains(&json!("multi-tenancy"))),
        "{}",
        m.body["extensions"]
    );
    let limits = &m.body["limits"];
    anyhow::ensure!(limits["max_envelope_bytes"] == 262_144, "{limits}");
    anyhow::ensure!(limits["max_request_body_bytes"] == 1_048_576, "{limits}");
    anyhow::ensure!(limits["max_meta_bytes"] == 65_536, "{limits}");
    anyhow::ensure!(
        limits["supported_compression"] == json!(["gzip", "zstd"]),
        "{limits}"
    );
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

/// Queue names of 255 characters (the JSON format's recommended limit, PL-003's 255
/// bytes) go through a job's lifecycle and the queue's stats; one more is a 400 naming
/// `$.queue` that writes nothing; a queue that never existed has no stats (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_names_of_255_characters_work_256_are_refused_and_unknown_queues_have_no_stats(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let queue = format!("q{}", "a.b-".repeat(63) + "zz");
    assert_eq!(queue.len(), 255);
    let pushed = app
        .push(json!({"type": "long.queue", "args": [1], "options": {"queue": queue}}))
        .await?;
    anyhow::ensure!(pushed.status == 201, "{} {}", pushed.status, pushed.body);
    let id = pushed.body["job"]["id"].clone();
    fetch_and_ack(&app, &queue, &id).await?;
    assert_eq!(job(&app, &id).await?["queue"], queue.as_str());
    let stats = app
        .call(Method::GET, &format!("/ojs/v1/queues/{queue}/stats"), None)
        .await?;
    anyhow::ensure!(stats.status == 200, "{} {}", stats.status, stats.body);

    let too_long = format!("{queue}x");
    let refused = app
        .push(json!({"type": "long.queue", "args": [1], "options": {"queue": too_long}}))
        .await?;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(
        refused.body["error"]["details"]["validation_errors"][0]["path"], "$.queue",
        "{}",
        refused.body
    );
    // A queue nothing was ever pushed to or set for does not exist: its stats are a 404.
    for never in ["never-used", queue.replace("zz", "zy").as_str()] {
        let stats = app
            .call(Method::GET, &format!("/ojs/v1/queues/{never}/stats"), None)
            .await?;
        assert_eq!(stats.status, 404, "{}", stats.body);
        assert_eq!(stats.body["error"]["code"], "not_found", "{}", stats.body);
    }
    let listed = app.call(Method::GET, "/ojs/v1/queues", None).await?;
    anyhow::ensure!(
        !listed.body.to_string().contains(&too_long),
        "the refused queue is listed: {}",
        listed.body
    );
    app.teardown().await;
    Ok(())
}
