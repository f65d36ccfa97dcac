//! Idempotency keys on PUSH and batch PUSH (ojs-bulk-operations.md §10-11): a request
//! sent again with its key is answered as the first time and creates nothing, whether the
//! first try was answered, lost its answer, died after claiming the key, or is racing it.

use std::sync::Arc;

use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

async fn send(app: &TestApp, path: &str, key: Option<&str>, body: &Value) -> anyhow::Result<Reply> {
    let mut req = app
        .client
        .post(format!("{}{path}", app.base_url))
        .header("content-type", "application/openjobspec+json")
        .body(body.to_string());
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let res = req.send().await?;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = serde_json::from_slice(&res.bytes().await?).unwrap_or(Value::Null);
    Ok(Reply {
        status,
        headers,
        body,
    })
}

async fn push(app: &TestApp, key: Option<&str>, body: &Value) -> anyhow::Result<Reply> {
    send(app, "/ojs/v1/jobs", key, body).await
}

fn replayed(r: &Reply) -> bool {
    r.headers
        .get("idempotent-replayed")
        .and_then(|v| v.to_str().ok())
        == Some("true")
}

async fn depth(app: &TestApp, queue: &str) -> anyhow::Result<u64> {
    let r = app
        .call(Method::GET, &format!("/ojs/v1/queues/{queue}/stats"), None)
        .await?;
    Ok(r.body["stats"]["depth"].as_u64().unwrap_or(u64::MAX))
}

fn job(queue: &str, n: u64) -> Value {
    json!({"type": "idem.job", "args": [n, {"to": "ada@example.com"}], "options": {"queue": queue}})
}

#[tokio::test]
async fn a_push_sent_again_with_its_key_is_answered_as_the_first_time() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let body = job("iq", 1);
    let first = push(&app, Some("order-1001"), &body).await?;
    assert_eq!(first.status, 201, "{}", first.body);
    assert!(!replayed(&first));
    let id = first.body["job"]["id"].clone();
    let again = push(&app, Some("order-1001"), &body).await?;
    assert_eq!(again.status, 201, "{}", again.body);
    assert!(replayed(&again));
    assert_eq!(again.body["job"]["id"], id);
    assert_eq!(again.headers["location"], first.headers["location"]);
    // The key in the body, and the fields in another order: the same request.
    let reordered = json!({"options": {"queue": "iq"}, "args": [1, {"to": "ada@example.com"}],
        "type": "idem.job", "idempotency_key": "order-1001"});
    let third = push(&app, None, &reordered).await?;
    assert_eq!((third.status, &third.body["job"]["id"]), (201, &id));
    assert!(replayed(&third));
    assert_eq!(third.body["job"].get("idempotency_key"), None);
    assert_eq!(depth(&app, "iq").await?, 1, "one job for the three tries");
    // The replay shows the job as it is now.
    ojs_tests::after_index_lag().await;
    let fetched = app
        .fetch(json!({"queues": ["iq"], "worker_id": "w"}))
        .await?;
    assert_eq!(fetched.body["jobs"][0]["id"], id);
    let fourth = push(&app, Some("order-1001"), &body).await?;
    assert_eq!(fourth.body["job"]["state"], "active");
    assert_eq!(depth(&app, "iq").await?, 0);

    // Without a key, or with another one, the same body is a new job.
    let plain = push(&app, None, &body).await?;
    let other = push(&app, Some("order-1002"), &body).await?;
    assert_eq!((plain.status, other.status), (201, 201));
    assert_ne!(plain.body["job"]["id"], id);
    assert_ne!(other.body["job"]["id"], id);
    assert_eq!(depth(&app, "iq").await?, 2);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_key_used_with_another_body_is_refused_and_creates_nothing() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    assert_eq!(push(&app, Some("k-1"), &job("ir", 1)).await?.status, 201);
    let other = push(&app, Some("k-1"), &job("ir", 2)).await?;
    assert_eq!(other.status, 422, "{}", other.body);
    assert_eq!(other.body["error"]["details"]["idempotency_key"], "k-1");
    let batch = json!({"jobs": [job("ir", 1)]});
    let as_batch = send(&app, "/ojs/v1/jobs/batch", Some("k-1"), &batch).await?;
    assert_eq!(
        as_batch.status, 422,
        "a batch is another body: {}",
        as_batch.body
    );
    assert_eq!(depth(&app, "ir").await?, 1);
    for bad in [String::new(), "k".repeat(257)] {
        let r = push(&app, Some(bad.as_str()), &job("ir", 3)).await?;
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
    }
    let mut typed = job("ir", 4);
    typed["idempotency_key"] = json!(42);
    assert_eq!(push(&app, None, &typed).await?.status, 400);
    assert_eq!(depth(&app, "ir").await?, 1);
    app.teardown().await;
    Ok(())
}

/// A refused request wrote nothing, so its key goes free: the request corrected (or the
/// queue drained) may use it again.
#[tokio::test]
async fn a_refused_push_lets_its_key_go() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let set = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/queues/ifull/config",
            Some(json!({"backpressure": {"max_depth": 1}})),
        )
        .await?;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(push(&app, None, &job("ifull", 0)).await?.status, 201);
    let refused = push(&app, Some("k-full"), &job("ifull", 1)).await?;
    assert_eq!(refused.status, 429, "{}", refused.body);
    // Room again: the same request under the same key runs, not a replay of the 429.
    ojs_tests::after_index_lag().await;
    let fetched = app
        .fetch(json!({"queues": ["ifull"], "worker_id": "w"}))
        .await?;
    assert_eq!(fetched.job_ids().len(), 1);
    let admitted = push(&app, Some("k-full"), &job("ifull", 1)).await?;
    assert_eq!(admitted.status, 201, "{}", admitted.body);
    assert!(!replayed(&admitted));
    let replay = push(&app, Some("k-full"), &job("ifull", 1)).await?;
    assert_eq!(replay.body["job"]["id"], admitted.body["job"]["id"]);
    assert!(replayed(&replay));
    app.teardown().await;
    Ok(())
}

/// The first try claimed the key and died: before writing its job, or after writing it
/// and before its answer was recorded. The next try makes or finds that very job.
#[tokio::test]
async fn a_try_after_one_that_died_makes_or_finds_the_same_job() -> anyhow::Result<()> {
    use ojs_core::idempotency::{fingerprint, IdempotencyKey};
    let app = TestApp::spawn().await?;
    let now = ojs_core::time::now();

    // Died before writing: the claim names a job that does not exist.
    let body = job("idied", 1);
    let key = IdempotencyKey::parse("died-early", "h")?;
    let planned = ojs_core::JobId::generate();
    let claim = app
        .store
        .idempotency_keys()
        .reserve(&key, &fingerprint(&body), &[planned], now)
        .await?;
    assert_eq!(claim, ojs_store::KeyClaim::Fresh);
    let r = push(&app, Some("died-early"), &body).await?;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.body["job"]["id"],
        planned.to_string(),
        "the id the claim named"
    );

    // Died after writing: the job exists, the answer was never recorded.
    let body = job("idied", 2);
    let key = IdempotencyKey::parse("died-late", "h")?;
    let written = push(&app, None, &body).await?;
    let written_id = ojs_core::JobId::parse(written.body["job"]["id"].as_str().unwrap_or(""))?;
    let claim = app
        .store
        .idempotency_keys()
        .reserve(&key, &fingerprint(&body), &[written_id], now)
        .await?;
    assert_eq!(claim, ojs_store::KeyClaim::Fresh);
    let r = push(&app, Some("died-late"), &body).await?;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["job"]["id"], written_id.to_string());
    assert_eq!(depth(&app, "idied").await?, 2, "no job was made twice");
    // Now answered: a replay.
    assert!(replayed(&push(&app, Some("died-late"), &body).await?));
    app.teardown().await;
    Ok(())
}

/// Tries of one request racing each other (a client retrying while its first try is
/// still under way, rounds of 8): every try answers 201 with the one job, whichever try
/// writes it, for PUSH and batch PUSH.
#[tokio::test]
async fn racing_tries_of_one_request_make_one_job() -> anyhow::Result<()> {
    let app = Arc::new(TestApp::spawn().await?);
    for round in 0..6 {
        let batch = round % 2 == 1;
        let (path, body) = if batch {
            (
                "/ojs/v1/jobs/batch",
                json!({"jobs": [job("irace", round), job("irace", 100 + round)]}),
            )
        } else {
            ("/ojs/v1/jobs", job("irace", round))
        };
        let body = Arc::new(body);
        let key = format!("race-{round}");
        let tries: Vec<_> = (0..8)
            .map(|_| {
                let (app, body, key) = (Arc::clone(&app), Arc::clone(&body), key.clone());
                tokio::spawn(async move { send(&app, path, Some(&key), &body).await })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tries {
            let r = t.await??;
            assert_eq!(r.status, 201, "round {round}: {}", r.body);
            answers.push(if batch {
                r.job_ids()
            } else {
                vec![r.body["job"]["id"].as_str().unwrap_or("").to_owned()]
            });
        }
        answers.dedup();
        assert_eq!(answers.len(), 1, "round {round}: {answers:?}");
    }
    assert_eq!(
        depth(&app, "irace").await?,
        3 + 3 * 2,
        "one job (or batch) a round"
    );
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    Ok(())
}

#[tokio::test]
async fn a_batch_sent_again_with_its_key_is_answered_as_the_first_time() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let batch = json!({"jobs": (0..5).map(|n| job("ib", n)).collect::<Vec<_>>()});
    let first = send(&app, "/ojs/v1/jobs/batch", Some("import-42"), &batch).await?;
    assert_eq!(first.status, 201, "{}", first.body);
    let ids = first.job_ids();
    assert_eq!(ids.len(), 5);
    let again = send(&app, "/ojs/v1/jobs/batch", Some("import-42"), &batch).await?;
    assert_eq!(again.status, 201, "{}", again.body);
    assert!(replayed(&again));
    assert_eq!(again.job_ids(), ids, "the same jobs, in order");
    // The key in the body (§10.1's `idempotency_key`): the same request.
    let mut in_body = batch.clone();
    in_body["idempotency_key"] = json!("import-42");
    let third = send(&app, "/ojs/v1/jobs/batch", None, &in_body).await?;
    assert_eq!(third.job_ids(), ids);
    assert_eq!(depth(&app, "ib").await?, 5);
    let mut changed = batch.clone();
    changed["jobs"][4] = job("ib", 99);
    let other = send(&app, "/ojs/v1/jobs/batch", Some("import-42"), &changed).await?;
    assert_eq!(other.status, 422, "{}", other.body);
    assert_eq!(depth(&app, "ib").await?, 5);
    app.teardown().await;
    Ok(())
}

/// What a key costs (docs/performance.md): a keyed PUSH makes two DynamoDB calls more
/// than a plain one (the claim's PutItem and the answer's UpdateItem); a replay makes
/// three (the claim refused, the key's item read, the job read) and writes no job.
#[tokio::test]
async fn a_key_costs_a_push_two_calls_and_a_replay_three() -> anyhow::Result<()> {
    // Queue settings remembered for the whole test: only what the key adds is counted.
    let store = ojs_tests::fresh_store()
        .await?
        .with_config(|c| c.queue_settings_ttl = std::time::Duration::from_secs(600));
    let app = TestApp::spawn_on_store(store).await?;
    assert_eq!(push(&app, None, &job("icost", 0)).await?.status, 201);
    let u0 = app.store.usage();
    assert_eq!(push(&app, None, &job("icost", 1)).await?.status, 201);
    let u1 = app.store.usage();
    assert_eq!(
        push(&app, Some("cost-1"), &job("icost", 2)).await?.status,
        201
    );
    let u2 = app.store.usage();
    let replay = push(&app, Some("cost-1"), &job("icost", 2)).await?;
    let u3 = app.store.usage();
    assert!(replayed(&replay));
    let (plain, keyed, again) = (u1 - u0, u2 - u1, u3 - u2);
    println!(
        "PUSH: {} calls {:.1} WCU; with a key: {} calls {:.1} WCU; replay: {} calls {:.1} WCU {:.1} RCU",
        plain.calls, plain.write_units, keyed.calls, keyed.write_units, again.calls,
        again.write_units, again.read_units
    );
    assert_eq!(keyed.calls, plain.calls + 2);
    assert_eq!(again.calls, 3);
    assert_eq!(depth(&app, "icost").await?, 3);
    app.teardown().await;
    Ok(())
}

/// The first try of a request is overtaken by a later one: its job write is held (a
/// slow network) until the later try, finding the key claimed and unanswered, has
/// written the job under the claimed id. The first try's write then finds that job and
/// answers with it, as the later try did: one job, two 201s.
#[tokio::test]
async fn a_first_try_overtaken_by_its_retry_answers_with_the_retrys_job() -> anyhow::Result<()> {
    use ojs_tests::fault_proxy::{raw_dynamodb_endpoint, Fault, FaultProxy, Filter};
    use std::time::{Duration, Instant};
    let base = ojs_tests::fresh_store().await?;
    let retry_app = TestApp::spawn_on_store(base.clone()).await?;
    let proxy = FaultProxy::start(&raw_dynamodb_endpoint(), 1).await?;
    proxy.set_hang(Duration::from_secs(20));
    let sdk = ojs_store::sdk_loader()
        .endpoint_url(&proxy.url)
        .load()
        .await;
    // One attempt per call and time to spare: the held write must not become a retry.
    let slow = ojs_tests::fault_proxy::patient_store_through(&sdk, base.table())
        .with_config(|c| c.queue_settings_ttl = Duration::from_secs(600));
    let first_app = Arc::new(TestApp::spawn_on_store_without_stream(slow).await?);
    // The queue registered and its settings remembered: the first try's PutItems are
    // its key's claim, then its job.
    assert_eq!(push(&first_app, None, &job("ihold", 0)).await?.status, 201);
    proxy.script(Filter::op("PutItem"), &[Fault::Pass, Fault::Hold]);
    let body = Arc::new(job("ihold", 1));
    let first = {
        let (app, body) = (Arc::clone(&first_app), Arc::clone(&body));
        tokio::spawn(async move { push(&app, Some("overtaken"), &body).await })
    };
    let held_by = Instant::now() + Duration::from_secs(15);
    while proxy.scripted_left() > 0 {
        anyhow::ensure!(
            Instant::now() < held_by,
            "the first try's job write never came"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let retry = push(&retry_app, Some("overtaken"), &body).await?;
    assert_eq!(retry.status, 201, "{}", retry.body);
    proxy.release(1);
    let first = first.await??;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.body["job"]["id"], retry.body["job"]["id"]);
    assert_eq!(
        depth(&retry_app, "ihold").await?,
        2,
        "the warm-up job and this one"
    );
    retry_app.teardown().await;
    if let Ok(app) = Arc::try_unwrap(first_app) {
        app.teardown().await;
    }
    Ok(())
}

/// A unique job's `ignore` answers with the job already there (200): a replay answers
/// with that job too, not the one the key claimed (which was never written).
#[tokio::test]
async fn a_replay_of_an_ignored_unique_push_answers_with_the_job_already_there(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let body = json!({"type": "idem.unique", "args": [{"user": "U-100"}],
        "options": {"queue": "iuniq", "unique": {"keys": ["type", "args"], "on_conflict": "ignore"}}});
    let original = push(&app, None, &body).await?;
    assert_eq!(original.status, 201, "{}", original.body);
    let keyed = push(&app, Some("uniq-1"), &body).await?;
    assert_eq!(keyed.status, 200, "{}", keyed.body);
    assert_eq!(keyed.body["job"]["id"], original.body["job"]["id"]);
    let again = push(&app, Some("uniq-1"), &body).await?;
    assert!(replayed(&again));
    assert_eq!(
        (again.status, &again.body["job"]["id"]),
        (200, &original.body["job"]["id"])
    );
    assert_eq!(depth(&app, "iuniq").await?, 1);
    app.teardown().await;
    Ok(())
}

/// Keys are per API key: two producers sharing a stack may pick the same key and never
/// answer (or refuse) each other's requests.
#[tokio::test]
async fn keys_are_per_api_key() -> anyhow::Result<()> {
    use ojs_http::scopes::{Scope, Scopes};
    let app = TestApp::spawn_with_config(ojs_http::HttpConfig {
        auth: ojs_http::AuthMode::ApiKey,
        ..ojs_http::HttpConfig::default()
    })
    .await?;
    let mut keys = Vec::new();
    for name in ["producer-a", "producer-b"] {
        let scopes = Scopes::of(&[Scope::DataEnqueue, Scope::DataRead]);
        keys.push(
            ojs_http::auth::issue_scoped_key(&app.store, name, Some(scopes))
                .await?
                .key,
        );
    }
    let send_as = |api_key: String, body: Value| {
        let req = app
            .client
            .post(format!("{}/ojs/v1/jobs", app.base_url))
            .header("content-type", "application/openjobspec+json")
            .header("authorization", format!("Bearer {api_key}"))
            .header("idempotency-key", "shared-key")
            .body(body.to_string());
        async move {
            let res = req.send().await?;
            let status = res.status().as_u16();
            let replayed = res.headers().contains_key("idempotent-replayed");
            let body: Value = serde_json::from_slice(&res.bytes().await?).unwrap_or(Value::Null);
            anyhow::Ok((status, replayed, body["job"]["id"].clone()))
        }
    };
    let (a, b) = (keys[0].clone(), keys[1].clone());
    let first_a = send_as(a.clone(), job("iowner", 1)).await?;
    let first_b = send_as(b.clone(), job("iowner", 1)).await?;
    assert_eq!((first_a.0, first_a.1), (201, false));
    assert_eq!((first_b.0, first_b.1), (201, false), "not a's answer");
    assert_ne!(first_a.2, first_b.2);
    assert_eq!(
        send_as(b, job("iowner", 2)).await?.0,
        422,
        "b's own key, reused"
    );
    assert_eq!(send_as(a, job("iowner", 1)).await?, (201, true, first_a.2));
    app.teardown().await;
    Ok(())
}
