//! Fencing by attempt: only the holder of a job's current attempt can ACK, FAIL or extend
//! it. A late call from an earlier attempt is `409` (or, for a heartbeat, not extended),
//! whatever worker id it carries; a claim never inherits the previous holder; a Cloudq
//! DELETE completes only an attempt a Cloudq reserve took.

use std::time::Duration;

use anyhow::{ensure, Context};
use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

fn id_of(reply: &Reply) -> anyhow::Result<String> {
    reply.body["job"]["id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no job id in {:?}", reply.body))
}

/// The one job a FETCH claimed.
fn fetched(reply: &Reply) -> anyhow::Result<Value> {
    ensure!(
        reply.status == 200,
        "FETCH {}: {:?}",
        reply.status,
        reply.body
    );
    let jobs = reply.body["jobs"].as_array().context("no jobs array")?;
    ensure!(jobs.len() == 1, "expected one job, got {:?}", reply.body);
    Ok(jobs[0].clone())
}

async fn heartbeat(app: &TestApp, body: Value) -> anyhow::Result<Value> {
    let beat = app
        .call(Method::POST, "/ojs/v1/workers/heartbeat", Some(body))
        .await?;
    ensure!(
        beat.status == 200,
        "heartbeat {}: {:?}",
        beat.status,
        beat.body
    );
    Ok(beat.body["jobs_extended"].clone())
}

async fn job(app: &TestApp, id: &str) -> anyhow::Result<Value> {
    Ok(app.info(id).await?.body["job"].clone())
}

/// W1's lease on attempt 1 runs out, and an anonymous FETCH claims attempt 2 with a lease
/// long enough for every step below however slow the machine (attempt 1's is only what
/// the test waits for). The claim does not inherit W1's worker id, and W1's late ACK,
/// FAIL and heartbeat change nothing; the anonymous holder completes its attempt.
#[tokio::test]
async fn a_timed_out_workers_late_calls_cannot_touch_an_anonymous_next_attempt(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = id_of(
        &app.push(json!({"type": "slow.job", "args": [], "options": {"queue": "fence-timeout"}}))
            .await?,
    )?;
    let first = fetched(
        &app.fetch(
            json!({"queues": ["fence-timeout"], "worker_id": "w1", "visibility_timeout_ms": 1000}),
        )
        .await?,
    )?;
    ensure!(
        first["attempt"] == 1 && first["worker_id"] == "w1",
        "{first}"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // The lease has ended: the next FETCH reclaims the job (a wait that ends when it
    // did; 60 s is what the test's whole wait may take at most, not a guess at speed).
    let second = ojs_tests::poll_until(
        Duration::from_secs(60),
        || async {
            app.fetch(json!({"queues": ["fence-timeout"], "visibility_timeout_ms": 600_000}))
                .await
        },
        |r| r.body["jobs"].as_array().is_some_and(|j| !j.is_empty()),
    )
    .await?;
    let second = fetched(&second)?;
    ensure!(second["attempt"] == 2, "{second}");
    let extended = heartbeat(&app, json!({"worker_id": "w1", "active_jobs": [id]})).await?;
    ensure!(
        extended == json!([]),
        "w1's heartbeat extended attempt 2: {extended}"
    );
    let late = app.ack(json!({"job_id": id, "worker_id": "w1"})).await?;
    ensure!(
        late.status == 409,
        "w1's late ACK: {} {:?}",
        late.status,
        late.body
    );
    let late = app
        .nack(json!({"job_id": id, "worker_id": "w1", "error": {"message": "late"}}))
        .await?;
    ensure!(
        late.status == 409,
        "w1's late FAIL: {} {:?}",
        late.status,
        late.body
    );
    let late = app
        .ack(json!({"job_id": id, "attempt": 1, "result": "stale"}))
        .await?;
    ensure!(
        late.status == 409,
        "an ACK echoing attempt 1: {} {:?}",
        late.status,
        late.body
    );
    let now = job(&app, &id).await?;
    ensure!(now["state"] == "active" && now["attempt"] == 2, "{now}");
    ensure!(
        second.get("worker_id").is_none() && now.get("worker_id").is_none(),
        "an anonymous claim inherits no worker id: {second}"
    );
    let done = app
        .ack(json!({"job_id": id, "attempt": 2, "result": "fresh"}))
        .await?;
    ensure!(done.status == 200, "{:?}", done.body);
    ensure!(done.body["job"]["result"] == "fresh", "{:?}", done.body);
    app.teardown().await;
    Ok(())
}

/// W1 FAILs attempt 1 (retryable); W2 claims attempt 2. W1's heartbeat and late calls
/// are refused; a FAIL with retry removes the holder.
#[tokio::test]
async fn a_failed_attempts_worker_cannot_touch_the_retry() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = id_of(
        &app.push(
            json!({"type": "flaky.job", "args": [], "options": {"queue": "fence-fail",
            "retry": {"max_attempts": 5, "initial_interval": "PT0.1S", "max_interval": "PT0.1S",
                      "jitter": false}}}),
        )
        .await?,
    )?;
    fetched(
        &app.fetch(json!({"queues": ["fence-fail"], "worker_id": "w1"}))
            .await?,
    )?;
    let failed = app
        .nack(json!({"job_id": id, "worker_id": "w1", "attempt": 1,
                     "error": {"message": "boom"}}))
        .await?;
    ensure!(failed.status == 200, "{:?}", failed.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = fetched(&app.fetch(json!({"queues": ["fence-fail"]})).await?)?;
    ensure!(second["attempt"] == 2, "{second}");
    let extended = heartbeat(&app, json!({"worker_id": "w1", "job_id": id})).await?;
    ensure!(
        extended == json!([]),
        "w1's heartbeat extended attempt 2: {extended}"
    );
    let late = app.ack(json!({"job_id": id, "worker_id": "w1"})).await?;
    ensure!(
        late.status == 409,
        "w1's late ACK: {} {:?}",
        late.status,
        late.body
    );
    ensure!(job(&app, &id).await?["state"] == "active");
    ensure!(
        failed.body["job"].get("worker_id").is_none(),
        "a retryable job keeps no holder: {:?}",
        failed.body
    );
    ensure!(
        second.get("worker_id").is_none(),
        "an anonymous claim inherits no worker id: {second}"
    );
    ensure!(app.ack(json!({"job_id": id})).await?.status == 200);
    app.teardown().await;
    Ok(())
}

/// One worker id for two concurrent slots, as SDKs do: attempt 1's lease lapses and the
/// same worker id claims attempt 2. Calls echoing attempt 1 are refused; attempt 2's work.
#[tokio::test]
async fn the_same_worker_ids_earlier_attempt_is_fenced_by_its_attempt_number() -> anyhow::Result<()>
{
    let app = TestApp::spawn().await?;
    let id = id_of(
        &app.push(json!({"type": "slot.job", "args": [], "options": {"queue": "fence-slots"}}))
            .await?,
    )?;
    // Attempt 1 on a 300 ms lease, attempt 2 on the default 30 s.
    let first = app
        .fetch(json!({"queues": ["fence-slots"], "worker_id": "w", "visibility_timeout_ms": 300}))
        .await?;
    ensure!(fetched(&first)?["attempt"] == 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = fetched(
        &app.fetch(json!({"queues": ["fence-slots"], "worker_id": "w"}))
            .await?,
    )?;
    ensure!(
        second["attempt"] == 2 && second["worker_id"] == "w",
        "{second}"
    );
    let extended = heartbeat(
        &app,
        json!({"worker_id": "w", "active_jobs": [{"job_id": id, "attempt": 1}]}),
    )
    .await?;
    ensure!(extended == json!([]), "attempt 1's heartbeat: {extended}");
    let extended = heartbeat(&app, json!({"worker_id": "w", "job_id": id, "attempt": 1})).await?;
    ensure!(extended == json!([]), "attempt 1's heartbeat: {extended}");
    let late = app
        .ack(json!({"job_id": id, "worker_id": "w", "attempt": 1, "result": "stale"}))
        .await?;
    ensure!(late.status == 409, "{} {:?}", late.status, late.body);
    ensure!(
        late.body["error"]["details"]["current_state"] == "active",
        "{:?}",
        late.body
    );
    let late = app
        .nack(json!({"job_id": id, "worker_id": "w", "attempt": 1,
                     "error": {"message": "stale"}}))
        .await?;
    ensure!(late.status == 409, "{} {:?}", late.status, late.body);
    let now = job(&app, &id).await?;
    ensure!(now["state"] == "active" && now["attempt"] == 2, "{now}");
    let extended = heartbeat(
        &app,
        json!({"worker_id": "w", "active_jobs": [{"id": id, "attempt": 2}]}),
    )
    .await?;
    ensure!(extended == json!([id]), "attempt 2's heartbeat: {extended}");
    let done = app
        .ack(json!({"job_id": id, "worker_id": "w", "attempt": 2, "result": "fresh"}))
        .await?;
    ensure!(done.status == 200, "{:?}", done.body);
    ensure!(done.body["job"]["result"] == "fresh");
    app.teardown().await;
    Ok(())
}

/// `attempt` is checked like any other field: a positive integer.
#[tokio::test]
async fn a_malformed_attempt_is_a_400() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";
    for bad in [json!("1"), json!(0), json!(-1), json!(1.5)] {
        let r = app.ack(json!({"job_id": id, "attempt": bad})).await?;
        ensure!(r.status == 400, "ACK attempt {bad}: {}", r.status);
        let r = app
            .nack(json!({"job_id": id, "attempt": bad, "error": {"message": "x"}}))
            .await?;
        ensure!(r.status == 400, "FAIL attempt {bad}: {}", r.status);
        let r = app
            .call(
                Method::POST,
                "/ojs/v1/workers/heartbeat",
                Some(json!({"worker_id": "w", "active_jobs": [{"job_id": id, "attempt": bad}]})),
            )
            .await?;
        ensure!(r.status == 400, "heartbeat attempt {bad}: {}", r.status);
    }
    app.teardown().await;
    Ok(())
}

async fn cloudq(app: &TestApp, method: Method, path: &str) -> anyhow::Result<Reply> {
    let res = app
        .client
        .request(method, format!("{}{path}", app.base_url))
        .send()
        .await?;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = serde_json::from_slice(&res.bytes().await?).unwrap_or(Value::Null);
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// A Cloudq DELETE never completes an attempt an OJS worker holds, whether the
/// Cloudq reservation lapsed before the worker claimed the job or never existed.
#[tokio::test]
async fn a_cloudq_delete_cannot_complete_an_ojs_workers_attempt() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    // A lapsed reservation, then an OJS worker's claim.
    let id = id_of(
        &app.push(json!({"type": "archive", "args": [],
            "options": {"queue": "fence-cq", "visibility_timeout_ms": 500}}))
            .await?,
    )?;
    let reserved = cloudq(&app, Method::GET, "/cloudq/fence-cq").await?;
    ensure!(
        reserved.body["job"]["id"] == id.as_str(),
        "{:?}",
        reserved.body
    );
    tokio::time::sleep(Duration::from_millis(900)).await;
    let claimed = fetched(
        &app.fetch(
            json!({"queues": ["fence-cq"], "worker_id": "w2", "visibility_timeout_ms": 30000}),
        )
        .await?,
    )?;
    ensure!(claimed["attempt"] == 2, "{claimed}");
    let deleted = cloudq(&app, Method::DELETE, &format!("/cloudq/fence-cq/{id}")).await?;
    ensure!(
        deleted.status == 409 && deleted.body["status"] == "error",
        "a lapsed reservation's DELETE: {} {:?}",
        deleted.status,
        deleted.body
    );
    let acked = app.ack(json!({"job_id": id, "worker_id": "w2"})).await?;
    ensure!(acked.status == 200, "w2's ACK: {:?}", acked.body);

    // No reservation at all: a job an OJS worker (named or not) holds.
    for fetch in [
        json!({"queues": ["fence-cq"], "worker_id": "w3"}),
        json!({"queues": ["fence-cq"]}),
    ] {
        let id = id_of(
            &app.push(json!({"type": "archive", "args": [], "options": {"queue": "fence-cq"}}))
                .await?,
        )?;
        fetched(&app.fetch(fetch.clone()).await?)?;
        let deleted = cloudq(&app, Method::DELETE, &format!("/cloudq/fence-cq/{id}")).await?;
        ensure!(
            deleted.status == 409,
            "DELETE of a job fetched by {fetch}: {} {:?}",
            deleted.status,
            deleted.body
        );
        ensure!(job(&app, &id).await?["state"] == "active");
        ensure!(app.ack(json!({"job_id": id})).await?.status == 200);
    }

    // A live reservation is still deleted.
    let id = id_of(
        &app.push(json!({"type": "archive", "args": [], "options": {"queue": "fence-cq"}}))
            .await?,
    )?;
    let reserved = cloudq(&app, Method::GET, "/cloudq/fence-cq").await?;
    ensure!(
        reserved.body["job"]["id"] == id.as_str(),
        "{:?}",
        reserved.body
    );
    let deleted = cloudq(&app, Method::DELETE, &format!("/cloudq/fence-cq/{id}")).await?;
    ensure!(
        deleted.status == 200 && deleted.body["status"] == "success",
        "{:?}",
        deleted.body
    );
    ensure!(job(&app, &id).await?["state"] == "completed");
    app.teardown().await;
    Ok(())
}

/// An OJS worker cannot complete a Cloudq reservation by naming a worker id: the
/// reservation is nobody's but Cloudq's.
#[tokio::test]
async fn a_named_ojs_worker_cannot_complete_a_cloudq_reservation() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = id_of(
        &app.push(json!({"type": "archive", "args": [], "options": {"queue": "fence-cq2"}}))
            .await?,
    )?;
    let reserved = cloudq(&app, Method::GET, "/cloudq/fence-cq2").await?;
    ensure!(
        reserved.body["job"]["id"] == id.as_str(),
        "{:?}",
        reserved.body
    );
    let acked = app.ack(json!({"job_id": id, "worker_id": "w1"})).await?;
    ensure!(acked.status == 409, "{} {:?}", acked.status, acked.body);
    let extended = heartbeat(&app, json!({"worker_id": "w1", "active_jobs": [id]})).await?;
    ensure!(extended == json!([]), "{extended}");
    let deleted = cloudq(&app, Method::DELETE, &format!("/cloudq/fence-cq2/{id}")).await?;
    ensure!(deleted.status == 200, "{:?}", deleted.body);
    app.teardown().await;
    Ok(())
}

/// A holder's FAIL lands though its own heartbeats extend the lease between its read and
/// its write: each extension moves the job's version, which a worker's FAIL must not
/// depend on (a worker beating every few hundred milliseconds on a slow table had its
/// FAIL refused as "not the holder" and the job left active until its lease ended). The
/// FAIL's store talks through a proxy that holds each of its writes until a heartbeat
/// has extended the lease; three extensions used to exhaust its three tries.
#[tokio::test]
async fn a_holders_fail_lands_though_its_own_heartbeats_move_the_job() -> anyhow::Result<()> {
    use ojs_tests::fault_proxy::{raw_dynamodb_endpoint, Fault, FaultProxy, Filter};
    let direct = ojs_tests::fresh_store().await?;
    let app = TestApp::spawn_on_store(direct.clone()).await?;
    let queue = "fence-beating";
    let id = id_of(
        &app.push(
            json!({"type": "beat.job", "args": [], "options": {"queue": queue,
            "retry": {"max_attempts": 3, "initial_interval": "PT60S"}}}),
        )
        .await?,
    )?;
    let got = app
        .fetch(json!({"queues": [queue], "worker_id": "w", "visibility_timeout_ms": 600_000}))
        .await?;
    ensure!(fetched(&got)?["attempt"] == 1);

    let proxy = FaultProxy::start(&raw_dynamodb_endpoint(), 1).await?;
    proxy.set_hang(Duration::from_secs(60));
    let sdk = ojs_store::sdk_loader()
        .endpoint_url(&proxy.url)
        .load()
        .await;
    let slow = ojs_tests::fault_proxy::patient_store_through(&sdk, direct.table());
    proxy.script(Filter::op("UpdateItem"), &[Fault::Hold; 3]);
    let job_id = ojs_core::JobId::parse(&id)?;
    let mut fail = tokio::spawn(async move {
        let failure = ojs_core::failure::Failure {
            error_type: "boom".into(),
            message: "boom".into(),
            retryable: true,
            reported: serde_json::Map::new(),
            retry_after: None,
        };
        let fence = ojs_store::Fence {
            worker_id: Some("w"),
            attempt: None,
        };
        slow.lifecycle()
            .fail_job(
                ojs_store::FailRequest {
                    id: &job_id,
                    failure: &failure,
                    fence,
                    requeue: false,
                },
                ojs_core::time::now(),
            )
            .await
    });
    // Every write the FAIL sends waits for a heartbeat of the holder's first (the ones
    // after its own transition extend nothing and change nothing).
    let (mut held, mut extended) = (0, Vec::new());
    let outcome = loop {
        tokio::select! {
            done = &mut fail => break done?,
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        if 3 - proxy.scripted_left() > held {
            held += 1;
            extended.push(heartbeat(&app, json!({"worker_id": "w", "active_jobs": [id]})).await?);
            proxy.release(1);
        }
    };
    proxy.heal();
    proxy.release(3);
    ensure!(
        extended.first() == Some(&json!([id])),
        "the first heartbeat did not extend the lease: {extended:?}"
    );
    let failed = outcome.map_err(|e| anyhow::anyhow!("FAIL after {held} held writes: {e}"))?;
    ensure!(
        failed.job.status.state == ojs_core::JobState::Retryable,
        "{:?}",
        failed.job.status
    );
    app.teardown().await;
    Ok(())
}
