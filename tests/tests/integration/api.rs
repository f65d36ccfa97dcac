//! Integration tests over HTTP against the real routers and a fresh DynamoDB table.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;

use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

fn id_of(reply: &ojs_tests::Reply) -> String {
    reply.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_job_is_delivered_exactly_once_to_32_racing_fetchers() -> anyhow::Result<()> {
    let app = Arc::new(TestApp::spawn().await?);
    // Sixteen pushes at a time: the race under test is the fetchers', and 200 pushes at
    // once queue up behind DynamoDB Local's one writer past the client's attempt timeout.
    let pushes: Vec<_> = futures::stream::iter((0..200).map(|i| {
        let app = Arc::clone(&app);
        async move {
            app.push(json!({"type": "race.job", "args": [i], "options": {"queue": "race", "priority": i % 3}}))
                .await
        }
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    let mut pushed = Vec::new();
    for p in pushes {
        let p = p?;
        anyhow::ensure!(p.status == 201, "push failed: {:?}", p.body);
        pushed.push(id_of(&p));
    }
    // A FETCH answered 503 is retried with backoff, as the official SDKs' workers do;
    // DynamoDB Local on a busy 2-core machine can stall past the store's 8 s budget.
    let unanswered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers = (0..32).map(|w| {
        let app = Arc::clone(&app);
        let unanswered = Arc::clone(&unanswered);
        tokio::spawn(async move {
            let mut got: Vec<String> = Vec::new();
            let mut empty_in_a_row = 0;
            let mut retries = 0;
            for _ in 0..400 {
                let r = app
                    .fetch(json!({"queues": ["race"], "count": 1 + w % 3, "worker_id": format!("w{w}")}))
                    .await?;
                if r.status == 503 && r.body["error"]["retryable"] == true && retries < 5 {
                    retries += 1;
                    unanswered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(std::time::Duration::from_millis(200 << retries)).await;
                    continue;
                }
                anyhow::ensure!(r.status == 200, "fetch failed: {:?}", r.body);
                let jobs = r.body["jobs"].as_array().cloned().unwrap_or_default();
                if jobs.is_empty() {
                    empty_in_a_row += 1;
                    if empty_in_a_row >= 3 {
                        break;
                    }
                    continue;
                }
                empty_in_a_row = 0;
                for j in jobs {
                    anyhow::ensure!(j["state"] == "active" && j["attempt"] == 1, "bad claim {j}");
                    let id = j["id"].as_str().unwrap_or_default().to_owned();
                    let ack = app.ack(json!({"job_id": id, "worker_id": format!("w{w}")})).await?;
                    anyhow::ensure!(ack.status == 200, "ack of own job refused: {:?}", ack.body);
                    got.push(id);
                }
            }
            Ok::<_, anyhow::Error>(got)
        })
    })
    // Spawn all 32 before awaiting any, so they really race.
    .collect::<Vec<_>>();
    let mut deliveries: HashMap<String, usize> = HashMap::new();
    let mut busy_workers = 0;
    for w in workers {
        let got = w.await??;
        busy_workers += usize::from(!got.is_empty());
        for id in got {
            *deliveries.entry(id).or_default() += 1;
        }
    }
    anyhow::ensure!(
        busy_workers > 8,
        "the fetchers did not race: only {busy_workers} got jobs"
    );
    let duplicated: Vec<_> = deliveries.iter().filter(|(_, n)| **n > 1).collect();
    anyhow::ensure!(duplicated.is_empty(), "delivered twice: {duplicated:?}");
    // A FETCH answered 503 may have claimed jobs whose answer it lost: they are not
    // lost, but held until their lease ends (30 s), and then delivered once more.
    let undelivered: Vec<&String> = pushed
        .iter()
        .filter(|id| !deliveries.contains_key(*id))
        .collect();
    if !undelivered.is_empty() && unanswered.load(std::sync::atomic::Ordering::Relaxed) > 0 {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut left: std::collections::HashSet<String> =
            undelivered.into_iter().cloned().collect();
        while !left.is_empty() && tokio::time::Instant::now() < deadline {
            // This app runs no scheduler: the sweep ends the leases.
            let _ = ojs_tests::sweep(&app.store, ojs_core::time::now()).await;
            let r = app
                .fetch(json!({"queues": ["race"], "count": 10, "worker_id": "late"}))
                .await?;
            for j in r.body["jobs"].as_array().cloned().unwrap_or_default() {
                let id = j["id"].as_str().unwrap_or_default().to_owned();
                anyhow::ensure!(left.remove(&id), "redelivered a job a worker had: {j}");
                anyhow::ensure!(j["attempt"] == 2, "a held job comes back on attempt 2: {j}");
                let ack = app.ack(json!({"job_id": id, "worker_id": "late"})).await?;
                anyhow::ensure!(ack.status == 200, "late ack refused: {:?}", ack.body);
                *deliveries.entry(id).or_default() += 1;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
    for id in &pushed {
        if deliveries.get(id) != Some(&1) {
            let info = app.info(id).await?;
            anyhow::bail!(
                "job {id} was never delivered ({} of {} delivered): {}",
                deliveries.len(),
                pushed.len(),
                info.body
            );
        }
        let info = app.info(id).await?;
        anyhow::ensure!(
            info.body["job"]["state"] == "completed",
            "{id}: {:?}",
            info.body
        );
    }
    assert_eq!(deliveries.len(), 200);
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    Ok(())
}

#[tokio::test]
async fn fetch_orders_by_priority_then_fifo() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let mut ids = HashMap::new();
    for (name, priority) in [
        ("low", -10),
        ("normal1", 0),
        ("high", 10),
        ("normal2", 0),
        ("top", 100),
    ] {
        let r = app.push(json!({"type": "order.job", "args": [name], "options": {"queue": "ord", "priority": priority}})).await?;
        ids.insert(id_of(&r), name);
    }
    // The order of jobs in the ready index is what this checks, not how soon a push shows
    // there: a FETCH within the GSI's lag may not see the job pushed last yet (on AWS
    // too), and a FETCH that sees some jobs is answered without looking again.
    ojs_tests::after_index_lag().await;
    let r = app.fetch(json!({"queues": ["ord"], "count": 5})).await?;
    let order: Vec<&str> = r.body["jobs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|j| j["id"].as_str())
                .filter_map(|id| ids.get(id).copied())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(order, ["top", "high", "normal1", "normal2", "low"]);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_cancelled_job_is_never_delivered_and_a_late_ack_changes_nothing() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let cancelled = id_of(
        &app.push(json!({"type": "c.job", "args": [], "options": {"queue": "cq"}}))
            .await?,
    );
    assert_eq!(app.cancel(&cancelled).await?.status, 200);
    assert_eq!(
        app.fetch(json!({"queues": ["cq"]})).await?.body["jobs"],
        json!([])
    );

    let held = id_of(
        &app.push(json!({"type": "c.job", "args": [], "options": {"queue": "cq"}}))
            .await?,
    );
    let f = app
        .fetch(json!({"queues": ["cq"], "worker_id": "owner"}))
        .await?;
    assert_eq!(f.body["jobs"][0]["id"], held.as_str());
    let intruder = app
        .ack(json!({"job_id": held, "worker_id": "someone-else"}))
        .await?;
    assert_eq!(intruder.status, 409);
    assert_eq!(intruder.body["error"]["code"], "conflict");
    let intruder_fail = app
        .nack(json!({"job_id": held, "worker_id": "someone-else", "error": {"message": "x"}}))
        .await?;
    assert_eq!(intruder_fail.status, 409);
    assert_eq!(app.info(&held).await?.body["job"]["state"], "active");
    assert_eq!(app.cancel(&held).await?.status, 200);
    let late = app
        .ack(json!({"job_id": held, "worker_id": "owner"}))
        .await?;
    assert_eq!(late.status, 409);
    assert_eq!(late.body["error"]["details"]["current_state"], "cancelled");
    assert_eq!(app.info(&held).await?.body["job"]["state"], "cancelled");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn failed_jobs_retry_with_backoff_and_record_every_error() -> anyhow::Result<()> {
    let app = TestApp::spawn_rules_only().await?;
    let id = id_of(
        &app.push(
            json!({"type": "r.job", "args": [], "options": {"queue": "rq",
            "retry": {"max_attempts": 2, "initial_interval": "PT1S", "jitter": false}}}),
        )
        .await?,
    );
    app.fetch(json!({"queues": ["rq"]})).await?;
    // The retry is due 1 s after the server took the NACK, which is after this instant:
    // a FETCH answered within 1 s of it was decided before the job was due.
    let before_nack = std::time::Instant::now();
    let first = app
        .nack(json!({"job_id": id, "error": {"type": "io.reset", "message": "reset"}}))
        .await?;
    assert_eq!(first.body["state"], "retryable");
    assert!(first.body["next_attempt_at"].is_string());
    let early = app.fetch(json!({"queues": ["rq"]})).await?;
    if before_nack.elapsed() < std::time::Duration::from_secs(1) {
        assert_eq!(early.body["jobs"], json!([]), "not before its time");
    }
    // Then it comes back, with its second attempt (FETCH promotes it once due).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut again = early;
    while again.body["jobs"].as_array().is_none_or(Vec::is_empty) {
        assert!(
            std::time::Instant::now() < deadline,
            "the retry never came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        again = app.fetch(json!({"queues": ["rq"]})).await?;
    }
    assert_eq!(again.body["jobs"][0]["attempt"], 2);
    let last = app
        .nack(json!({"job_id": id, "error": {"type": "io.reset", "message": "reset again"}}))
        .await?;
    assert_eq!(last.body["state"], "discarded");
    let info = app.info(&id).await?.body;
    assert_eq!(info["job"]["errors"].as_array().map(Vec::len), Some(2));
    assert_eq!(info["job"]["error"]["message"], "reset again");
    app.teardown().await;
    Ok(())
}

/// method, path, content type (default OJS JSON), body, expected status, expected code.
type BadInput = (
    Method,
    &'static str,
    Option<&'static str>,
    Vec<u8>,
    u16,
    &'static str,
);

#[tokio::test]
async fn bad_input_gets_the_ojs_error_body_and_writes_nothing() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let huge = format!(
        "{{\"type\":\"a\",\"args\":[\"{}\"]}}",
        "x".repeat(1024 * 1024 + 10)
    );
    let cases: Vec<BadInput> = vec![
        (
            Method::POST,
            "/ojs/v1/jobs",
            None,
            b"{ invalid json }".to_vec(),
            400,
            "invalid_payload",
        ),
        (
            Method::POST,
            "/ojs/v1/jobs",
            None,
            b"".to_vec(),
            400,
            "invalid_payload",
        ),
        (
            Method::POST,
            "/ojs/v1/jobs",
            None,
            vec![b'"', 0xff, 0xfe, b'"'],
            400,
            "invalid_payload",
        ),
        (
            Method::POST,
            "/ojs/v1/jobs",
            None,
            b"[1,2]".to_vec(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/ojs/v1/jobs",
            None,
            br#"{"type":"a","args":"x"}"#.to_vec(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/ojs/v1/jobs",
            None,
            br#"{"type":"a","args":[],"options":{"priority":"high!"}}"#.to_vec(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/ojs/v1/jobs",
            Some("text/plain"),
            br#"{"type":"a","args":[]}"#.to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            Method::POST,
            "/ojs/v1/jobs",
            None,
            huge.into_bytes(),
            413,
            "envelope_too_large",
        ),
        (
            Method::GET,
            "/ojs/v1/jobs/not-a-uuid",
            None,
            Vec::new(),
            400,
            "invalid_request",
        ),
        (
            Method::GET,
            "/ojs/v1/nope",
            None,
            Vec::new(),
            404,
            "not_found",
        ),
        (
            Method::PUT,
            "/ojs/v1/jobs",
            None,
            Vec::new(),
            405,
            "method_not_allowed",
        ),
        (
            Method::POST,
            "/ojs/v1/workers/fetch",
            None,
            br#"{"queues":[]}"#.to_vec(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/ojs/v1/workers/ack",
            None,
            br#"{"job_id":42}"#.to_vec(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/ojs/v1/workers/nack",
            None,
            br#"{"job_id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","error":7}"#.to_vec(),
            400,
            "invalid_request",
        ),
        (
            Method::POST,
            "/ojs/v1/workers/ack",
            None,
            br#"{"job_id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f"}"#.to_vec(),
            404,
            "not_found",
        ),
    ];
    for (method, path, content_type, body, status, code) in cases {
        let res = app
            .client
            .request(method.clone(), format!("{}{path}", app.base_url))
            .header(
                "content-type",
                content_type.unwrap_or("application/openjobspec+json"),
            )
            .header("x-request-id", "req_test-123")
            .body(body)
            .send()
            .await?;
        let label = format!("{method} {path} -> {code}");
        assert_eq!(res.status().as_u16(), status, "{label}");
        assert_eq!(
            res.headers()["content-type"],
            ojs_http::JSON_CONTENT_TYPE,
            "{label}"
        );
        assert_eq!(res.headers()["ojs-version"], "1.0", "{label}");
        assert_eq!(res.headers()["x-request-id"], "req_test-123", "{label}");
        let body: Value = res.json().await?;
        assert_eq!(body["error"]["code"], code, "{label}: {body}");
        assert_eq!(body["error"]["request_id"], "req_test-123", "{label}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{label}"
        );
        assert_eq!(body["error"]["retryable"], false, "{label}");
    }
    let not_acceptable = app
        .client
        .get(format!("{}/ojs/v1/health", app.base_url))
        .header("accept", "text/html")
        .send()
        .await?;
    assert_eq!(not_acceptable.status().as_u16(), 406);
    let generated = app
        .client
        .get(format!("{}/ojs/v1/health", app.base_url))
        .send()
        .await?;
    let rid = generated.headers()["x-request-id"].to_str()?.to_owned();
    assert!(rid.starts_with("req_") && rid.len() == 40, "{rid}");
    let queues = app.call(Method::GET, "/ojs/v1/queues", None).await?;
    assert_eq!(
        queues.body["queues"],
        json!([]),
        "a rejected request must not write"
    );
    app.teardown().await;
    Ok(())
}

/// DynamoDB calls and capacity units per operation, read from `ReturnConsumedCapacity`.
/// Prints the figures and bounds the call counts, so an extra round trip fails the test.
#[tokio::test]
async fn dynamodb_cost_per_operation() -> anyhow::Result<()> {
    let app = TestApp::spawn_rules_only().await?;
    app.push(json!({"type": "warm.up", "args": [], "options": {"queue": "cost"}}))
        .await?;
    app.fetch(json!({"queues": ["cost"]})).await?;
    let args = json!(["x".repeat(1000)]);
    let mut report = Vec::new();
    let mut measure = |label: &str,
                       before: ojs_store::UsageSnapshot,
                       after: ojs_store::UsageSnapshot,
                       max_calls: u64| {
        let d = after - before;
        report.push(format!(
            "{label}: {} calls, {:.1} RCU, {:.1} WCU",
            d.calls, d.read_units, d.write_units
        ));
        assert!(
            d.calls <= max_calls,
            "{label} made {} DynamoDB calls (max {max_calls})",
            d.calls
        );
    };
    let u0 = app.store.usage();
    let pushed = app
        .push(json!({"type": "cost.job", "args": args, "options": {"queue": "cost"}}))
        .await?;
    let u1 = app.store.usage();
    // Job, event, queue counters, and the queue's settings (its depth bound) when this
    // instance read them over a second ago.
    measure("PUSH (1 KiB args)", u0, u1, 4);
    let fetched = app
        .fetch(json!({"queues": ["cost"], "worker_id": "w"}))
        .await?;
    assert_eq!(fetched.body["jobs"][0]["id"], pushed.body["job"]["id"]);
    let u2 = app.store.usage();
    // Pause check, due sweep, ready query, the worker's state (once per second per
    // instance, when there is a job for it), claim, events, queue counters.
    measure("FETCH (1 job)", u1, u2, 6);
    app.ack(json!({"job_id": pushed.body["job"]["id"], "result": {"ok": true}}))
        .await?;
    let u3 = app.store.usage();
    // Transition, event, queue counters (active down, completed up: one ADD).
    measure("ACK", u2, u3, 3);
    let empty = app.fetch(json!({"queues": ["cost"]})).await?;
    assert_eq!(empty.body["jobs"], json!([]));
    measure("FETCH (empty queue)", u3, app.store.usage(), 3);
    println!("{}", report.join("\n"));
    app.teardown().await;
    Ok(())
}

/// The worker id is optional at FETCH; an attempt claimed without one has no holder, so
/// an ACK naming a worker cannot complete it (it could be the late ACK of an earlier
/// attempt whose holder that was: fencing by attempt). The anonymous fetcher ACKs by job
/// id alone, or echoing its `attempt`.
#[tokio::test]
async fn an_anonymous_fetch_is_acked_without_a_worker_id() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = id_of(
        &app.push(json!({"type": "anon.job", "args": [], "options": {"queue": "anon"}}))
            .await?,
    );
    let fetched = app.fetch(json!({"queues": ["anon"]})).await?;
    assert_eq!(fetched.body["jobs"][0]["id"], id.as_str());
    assert_eq!(fetched.body["jobs"][0].get("worker_id"), None);
    let named = app
        .ack(json!({"job_id": id, "worker_id": "w-late-name"}))
        .await?;
    assert_eq!(named.status, 409, "{:?}", named.body);
    let ack = app.ack(json!({"job_id": id, "attempt": 1})).await?;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    app.teardown().await;
    Ok(())
}

/// `POST /ojs/v1/jobs/{id}/ack` (ojs-results.md §10.1) ACKs the job the path names, with
/// the body `/workers/ack` takes (or none); a body naming another job is 400 and ACKs
/// nothing, and the job keeps its envelope's extension fields (`version`).
#[tokio::test]
async fn ack_by_path_acks_the_named_job() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let mut ids = Vec::new();
    for n in 0..2 {
        let r = app
            .push(json!({"type": "ack.path", "args": [n], "version": 3,
                "options": {"queue": "ack-path"}}))
            .await?;
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(id_of(&r));
    }
    ojs_tests::after_index_lag().await;
    let f = app
        .fetch(json!({"queues": ["ack-path"], "count": 2, "worker_id": "w"}))
        .await?;
    assert_eq!(f.job_ids().len(), 2, "{}", f.body);
    let path = |id: &str| format!("/ojs/v1/jobs/{id}/ack");
    let wrong = app
        .call(
            Method::POST,
            &path(&ids[0]),
            Some(json!({"job_id": ids[1]})),
        )
        .await?;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    let r = app
        .call(
            Method::POST,
            &path(&ids[0]),
            Some(json!({"worker_id": "w", "result": {"ok": 1}})),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["job"]["state"], "completed");
    assert_eq!(r.body["job"]["version"], 3);
    assert_eq!(r.body["job"]["result"], json!({"ok": 1}));
    let r = app.call(Method::POST, &path(&ids[1]), None).await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let other = app
        .call(Method::GET, &format!("/ojs/v1/jobs/{}", ids[1]), None)
        .await?;
    assert_eq!(other.body["job"]["state"], "completed", "{}", other.body);
    let again = app.call(Method::POST, &path(&ids[1]), None).await?;
    assert_eq!(again.status, 409, "{}", again.body);
    app.teardown().await;
    Ok(())
}
