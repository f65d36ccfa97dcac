//! Jobs whose args and meta are kept in S3 (issue #32) in every answer that shows a job,
//! and a FETCH whose payload reads fail.
//!
//! - ACK, FAIL (NACK), CANCEL, dead letter retry, the OJS dead letter listing and the admin
//!   job detail show such a job whole; none shows the store's reference.
//! - A job whose payload cannot be brought back is never shown as a job with empty args:
//!   its view has no `args`/`meta` and says why (`x-ojs-payload`).
//! - FETCH delivers the claimed jobs it can read. A claimed job whose payload store fails
//!   is given back (`available`, its attempt not counted); one whose object is missing
//!   or damaged is discarded with the error `payload_unreadable`. Neither stays leased.

use anyhow::Context;
use base64::Engine as _;
use ojs_core::{Job, JobId, JobState, NewJob, QueueName};
use ojs_store::{FetchRequest, Payloads, PushOutcome, Store};
use ojs_tests::{fresh_store, raw_dynamodb, with_payloads, TestApp};
use rand::RngCore;
use serde_json::{json, Value};

/// About 400,000 characters of base64 over random bytes: over the item's 256 KiB, and
/// deflate cannot shrink it.
fn random_text() -> String {
    let mut bytes = vec![0u8; 300_000];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Stores `envelope` (a PUSH body) with `text` as its only argument and in its meta,
/// through the store; its request goes to the payload bucket.
async fn put_large(store: &Store, envelope: Value, text: &str) -> anyhow::Result<Job> {
    let new = NewJob::from_json(envelope).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut job = Job::enqueue(new, ojs_core::time::now());
    job.spec.args = vec![Value::String(text.to_owned())];
    job.spec
        .meta
        .insert("note".into(), Value::String(text[..1000].to_owned()));
    let outcome = store.lifecycle().put_job(&job).await?;
    anyhow::ensure!(matches!(outcome, PushOutcome::Created), "{outcome:?}");
    Ok(job)
}

/// The payload object key a job's item names.
async fn key_of(store: &Store, id: &JobId) -> anyhow::Result<String> {
    raw_dynamodb()
        .await
        .get_item()
        .table_name(store.table())
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(format!("JOB#{id}")),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S("JOB".into()),
        )
        .consistent_read(true)
        .send()
        .await?
        .item
        .and_then(|i| i.get("spec_ref").and_then(|v| v.as_s().ok()).cloned())
        .context("no spec_ref")
}

/// Fails unless `view` is the job whole: its args and meta as pushed, no reference.
fn assert_whole(view: &Value, text: &str, what: &str) {
    assert!(view["args"] == json!([text]), "{what}: args not whole");
    assert!(
        view["meta"]["note"] == json!(&text[..1000]),
        "{what}: meta not whole"
    );
    let shown = view.to_string();
    assert!(
        !shown.contains("spec_ref"),
        "{what}: the reference is shown"
    );
    assert!(
        view.get("x-ojs-payload").is_none(),
        "{what}: shown incomplete"
    );
}

/// Fails unless `view` is shown incomplete, saying so, without args or meta.
fn assert_incomplete(view: &Value, what: &str) {
    assert!(view.get("args").is_none(), "{what}: {view}");
    assert!(view.get("meta").is_none(), "{what}: {view}");
    assert_eq!(view["x-ojs-payload"]["resolved"], json!(false), "{what}");
    assert!(view["x-ojs-payload"]["error"].is_string(), "{what}");
    assert!(!view.to_string().contains("spec_ref"), "{what}");
    assert!(
        !view.to_string().contains("jobs/ojs-test-"),
        "{what}: key shown"
    );
}

fn queue(name: &str) -> anyhow::Result<QueueName> {
    QueueName::parse(name).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A store on `store`'s table whose payload bucket cannot be reached (nothing listens
/// on port 9): every S3 call fails as a network error does.
async fn with_s3_down(store: &Store) -> Store {
    with_s3_at(store, "http://127.0.0.1:9").await
}

/// A store on `store`'s table whose payload bucket is reached at `endpoint`.
async fn with_s3_at(store: &Store, endpoint: &str) -> Store {
    let sdk = ojs_store::sdk_config().await;
    let conf = aws_sdk_s3::config::Builder::from(&sdk)
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    store.clone().with_payloads(Payloads::new(
        aws_sdk_s3::Client::from_conf(conf),
        ojs_tests::TEST_PAYLOAD_BUCKET,
    ))
}

#[tokio::test]
async fn every_answer_that_shows_an_offloaded_job_shows_it_whole() -> anyhow::Result<()> {
    let (store, _payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let text = random_text();
    let envelope = |q: &str| {
        json!({"type": "big.job", "args": [], "options": {"queue": q,
            "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}})
    };

    // ACK.
    let acked = put_large(&app.store, envelope("ans-ack"), &text).await?;
    let fetched = app
        .fetch(json!({"queues": ["ans-ack"], "worker_id": "w1"}))
        .await?;
    assert_whole(&fetched.body["jobs"][0], &text, "FETCH");
    let ack = app
        .ack(json!({"job_id": acked.id.to_string(), "worker_id": "w1"}))
        .await?;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    assert_whole(&ack.body["job"], &text, "ACK");

    // FAIL, into the dead letter queue; its listing; its retry.
    let failed = put_large(&app.store, envelope("ans-fail"), &text).await?;
    app.fetch(json!({"queues": ["ans-fail"], "worker_id": "w1"}))
        .await?;
    let nack = app
        .nack(json!({"job_id": failed.id.to_string(), "worker_id": "w1",
            "error": {"type": "boom", "message": "no"}}))
        .await?;
    assert_eq!(nack.status, 200, "{:?}", nack.body);
    assert_eq!(nack.body["state"], json!("discarded"));
    assert_whole(&nack.body["job"], &text, "FAIL");
    let listed = app
        .call(
            reqwest::Method::GET,
            "/ojs/v1/dead-letter?queue=ans-fail",
            None,
        )
        .await?;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert_whole(&listed.body["jobs"][0], &text, "dead letter listing");
    let retried = app
        .call(
            reqwest::Method::POST,
            &format!("/ojs/v1/dead-letter/{}/retry", failed.id),
            None,
        )
        .await?;
    assert_eq!(retried.status, 200, "{:?}", retried.body);
    assert_whole(&retried.body["job"], &text, "dead letter retry");

    // CANCEL, and the admin detail.
    let cancelled = put_large(&app.store, envelope("ans-cancel"), &text).await?;
    let cancel = app.cancel(&cancelled.id.to_string()).await?;
    assert_eq!(cancel.status, 200, "{:?}", cancel.body);
    assert_whole(&cancel.body["job"], &text, "CANCEL");
    let detail = app
        .call(
            reqwest::Method::GET,
            &format!("/ojs/v1/admin/jobs/{}", cancelled.id),
            None,
        )
        .await?;
    assert_eq!(detail.status, 200, "{:?}", detail.body);
    let detail = detail.body.get("job").unwrap_or(&detail.body);
    assert_whole(detail, &text, "admin detail");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn an_answer_whose_payload_cannot_be_read_says_the_job_is_incomplete() -> anyhow::Result<()> {
    let (store, payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let text = random_text();
    let job = put_large(
        &app.store,
        json!({"type": "big.job", "args": [], "options": {"queue": "ans-gone"}}),
        &text,
    )
    .await?;
    let fetched = app
        .fetch(json!({"queues": ["ans-gone"], "worker_id": "w1"}))
        .await?;
    assert_whole(&fetched.body["jobs"][0], &text, "FETCH");
    // The object goes while the worker runs the job: the ACK takes, and its answer
    // shows the job incomplete rather than failing or showing empty args.
    payloads.remove(&key_of(&app.store, &job.id).await?).await?;
    let ack = app
        .ack(json!({"job_id": job.id.to_string(), "worker_id": "w1"}))
        .await?;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    assert_eq!(ack.body["state"], json!("completed"));
    assert_incomplete(&ack.body["job"], "ACK");
    // GET shows it too, incomplete: the job's state is still worth seeing.
    let got = app.info(&job.id.to_string()).await?;
    assert_eq!(got.status, 200, "{:?}", got.body);
    assert_eq!(got.body["job"]["state"], json!("completed"));
    assert_incomplete(&got.body["job"], "GET");
    // With S3 down, a transition's answer is incomplete too, never an error.
    let other = put_large(
        &app.store,
        json!({"type": "big.job", "args": [], "options": {"queue": "ans-down"}}),
        &text,
    )
    .await?;
    let down = with_s3_down(&app.store).await;
    let cancelled = down
        .lifecycle()
        .cancel_job(&other.id, ojs_core::time::now())
        .await?;
    assert_eq!(cancelled.status.state, JobState::Cancelled);
    assert_incomplete(&cancelled.to_json(), "CANCEL with S3 down");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_fetch_whose_payload_store_fails_delivers_the_rest_and_gives_the_job_back(
) -> anyhow::Result<()> {
    let (store, _payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let text = random_text();
    let large = put_large(
        &app.store,
        json!({"type": "big.job", "args": [], "options": {"queue": "fetch-down"}}),
        &text,
    )
    .await?;
    let small = app
        .push(json!({"type": "small.job", "args": [1], "options": {"queue": "fetch-down"}}))
        .await?;
    assert_eq!(small.status, 201, "{:?}", small.body);

    let down = with_s3_down(&app.store).await;
    // Both jobs in the ready index before the FETCH, so it claims both.
    ojs_tests::after_index_lag().await;
    let req = FetchRequest {
        queues: vec![queue("fetch-down")?],
        count: 2,
        worker_id: Some("w1".into()),
        visibility_timeout_ms: None,
        tenant: Default::default(),
        scheduling: None,
    };
    let outcome = down.workers().fetch(&req, ojs_core::time::now()).await?;
    let ids: Vec<String> = outcome.jobs.iter().map(|j| j.id.to_string()).collect();
    assert_eq!(ids, vec![small.body["job"]["id"].as_str().unwrap_or("?")]);
    // Given back at once, its attempt not counted, no holder.
    let back = app
        .store
        .engine()
        .get_job(&large.id)
        .await?
        .context("gone")?;
    assert_eq!(back.status.state, JobState::Available);
    assert_eq!(back.status.attempt, 0);
    assert!(back.status.worker_id.is_none() && back.status.lease_until.is_none());

    // Once S3 answers, the next FETCH delivers it whole.
    let fetched = app
        .fetch(json!({"queues": ["fetch-down"], "worker_id": "w2"}))
        .await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    assert_eq!(fetched.body["jobs"][0]["id"], json!(large.id.to_string()));
    assert_eq!(fetched.body["jobs"][0]["attempt"], json!(1));
    assert_whole(&fetched.body["jobs"][0], &text, "FETCH after S3 is back");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_fetch_of_a_job_whose_payload_is_missing_or_damaged_discards_it_with_a_clear_error(
) -> anyhow::Result<()> {
    let (store, payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let text = random_text();
    let envelope = json!({"type": "big.job", "args": [], "options": {"queue": "fetch-bad",
        "retry": {"max_attempts": 5, "on_exhaustion": "dead_letter"}}});
    let missing = put_large(&app.store, envelope.clone(), &text).await?;
    let tampered = put_large(&app.store, envelope, &text).await?;
    payloads
        .remove(&key_of(&app.store, &missing.id).await?)
        .await?;
    let key = key_of(&app.store, &tampered.id).await?;
    let body = json!({"args": [text.replacen('A', "B", 1)], "meta": {"note": &text[..1000]}});
    payloads
        .overwrite(&key, body.to_string().into_bytes())
        .await?;
    let small = app
        .push(json!({"type": "small.job", "args": [1], "options": {"queue": "fetch-bad"}}))
        .await?;

    // Every job in the ready index before the FETCH, so it claims all three.
    ojs_tests::after_index_lag().await;
    let fetched = app
        .fetch(json!({"queues": ["fetch-bad"], "worker_id": "w1", "count": 3}))
        .await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    let jobs = fetched.body["jobs"].as_array().context("no jobs")?;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["id"], small.body["job"]["id"]);
    assert!(!fetched.body.to_string().contains(&text[..64]));

    for job in [&missing, &tampered] {
        let got = app.info(&job.id.to_string()).await?;
        assert_eq!(got.status, 200, "{:?}", got.body);
        let view = &got.body["job"];
        // Failed for good, with an error that says why, in the dead letter queue.
        assert_eq!(view["state"], json!("discarded"), "{view}");
        assert_eq!(view["error"]["type"], json!(ojs_store::PAYLOAD_UNREADABLE));
        assert_eq!(view["error"]["retryable"], json!(false));
        assert_eq!(view["dead_letter"], json!(true));
        assert_incomplete(view, "GET of a damaged job");
        assert!(!view.to_string().contains(&text[..64]));
    }
    // The dead letter listing answers, with both shown incomplete.
    let listed = app
        .call(
            reqwest::Method::GET,
            "/ojs/v1/dead-letter?queue=fetch-bad",
            None,
        )
        .await?;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let listed = listed.body["jobs"].as_array().context("no jobs")?;
    assert_eq!(listed.len(), 2);
    for view in listed {
        assert_incomplete(view, "dead letter listing");
    }
    app.teardown().await;
    Ok(())
}

/// The objects kept for job `id` of `store`'s table.
async fn objects_of(payloads: &Payloads, store: &Store, id: &str) -> anyhow::Result<Vec<String>> {
    Ok(payloads
        .keys_under(&format!("jobs/{}/{id}/", store.table()))
        .await?)
}

#[tokio::test]
async fn a_batch_offloads_its_large_jobs_as_push_does_all_or_nothing() -> anyhow::Result<()> {
    let (store, payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let (one, two) = (random_text(), random_text());
    let batch = json!({"jobs": [
        {"type": "big.batch", "queue": "batch-big", "args": [one], "meta": {"note": &one[..1000]}},
        {"type": "small.batch", "queue": "batch-big", "args": [1]},
        {"type": "big.batch", "queue": "batch-big", "args": [two], "meta": {"note": &two[..1000]}},
    ]});
    let r = app
        .call(reqwest::Method::POST, "/ojs/v1/jobs/batch", Some(batch))
        .await?;
    assert_eq!(r.status, 201, "{:.300}", r.body.to_string());
    let ids: Vec<String> = r.body["jobs"]
        .as_array()
        .context("no jobs")?
        .iter()
        .filter_map(|j| j["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 3);
    // The large ones are kept in S3, written (untagged); the small one is not.
    for id in [&ids[0], &ids[2]] {
        let keys = objects_of(&payloads, &app.store, id).await?;
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert_eq!(payloads.tags(&keys[0]).await?, vec!["ojs-pending=0"]);
    }
    assert!(objects_of(&payloads, &app.store, &ids[1]).await?.is_empty());
    ojs_tests::after_index_lag().await;
    // A FETCH that met a throttled claim (the strict layer's) delivers what it claimed
    // and stops: the rest come with the next FETCHes (bounded: 20 tries).
    let mut jobs: Vec<Value> = Vec::new();
    for _ in 0..20 {
        let fetched = app
            .fetch(json!({"queues": ["batch-big"], "worker_id": "w1", "count": 3 - jobs.len()}))
            .await?;
        assert_eq!(fetched.status, 200, "{:?}", fetched.body);
        jobs.extend(
            fetched.body["jobs"]
                .as_array()
                .context("no jobs")?
                .iter()
                .cloned(),
        );
        if jobs.len() >= 3 {
            break;
        }
    }
    assert_eq!(jobs.len(), 3);
    for job in &jobs {
        match job["id"].as_str() {
            Some(id) if id == ids[0] => assert_whole(job, &one, "batch job 0"),
            Some(id) if id == ids[2] => assert_whole(job, &two, "batch job 2"),
            _ => assert_eq!(job["args"], json!([1])),
        }
    }

    // A batch refused for a duplicate id writes nothing and keeps no object.
    let taken = uuid::Uuid::now_v7().to_string();
    let first = app
        .push(json!({"id": taken, "type": "small.batch", "queue": "batch-dup", "args": [0]}))
        .await?;
    assert_eq!(first.status, 201, "{:?}", first.body);
    let large_id = uuid::Uuid::now_v7().to_string();
    let refused = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({"jobs": [
                {"id": large_id, "type": "big.batch", "queue": "batch-dup", "args": [one]},
                {"id": taken, "type": "small.batch", "queue": "batch-dup", "args": [1]},
            ]})),
        )
        .await?;
    assert_eq!(refused.status, 409, "{:.300}", refused.body.to_string());
    assert_eq!(app.info(&large_id).await?.status, 404);
    assert!(objects_of(&payloads, &app.store, &large_id)
        .await?
        .is_empty());

    // Refused in its second transaction, after the first landed: rolled back whole,
    // the first transaction's large job and its object are gone.
    let rolled_id = uuid::Uuid::now_v7().to_string();
    let mut jobs = vec![
        json!({"id": rolled_id, "type": "big.batch", "queue": "batch-dup",
        "args": [one]}),
    ];
    jobs.extend(
        (1..100).map(|i| json!({"type": "small.batch", "queue": "batch-dup", "args": [i]})),
    );
    jobs.push(json!({"id": taken, "type": "small.batch", "queue": "batch-dup", "args": [1]}));
    let refused = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({ "jobs": jobs })),
        )
        .await?;
    assert_eq!(refused.status, 409, "{:.300}", refused.body.to_string());
    assert_eq!(refused.body["error"]["details"]["index"], json!(100));
    assert_eq!(app.info(&rolled_id).await?.status, 404);
    assert!(objects_of(&payloads, &app.store, &rolled_id)
        .await?
        .is_empty());

    // A batch whose payload put fails writes nothing either.
    let down = with_s3_down(&app.store).await;
    let small_id = uuid::Uuid::now_v7().to_string();
    let jobs: Vec<Job> = [
        json!({"id": small_id, "type": "small.batch", "queue": "batch-down", "args": [1]}),
        json!({"type": "big.batch", "queue": "batch-down", "args": [two]}),
    ]
    .into_iter()
    .map(|v| {
        NewJob::from_json(v)
            .map(|n| Job::enqueue(n, ojs_core::time::now()))
            .map_err(|e| anyhow::anyhow!("{e}"))
    })
    .collect::<anyhow::Result<_>>()?;
    assert!(down.engine().put_batch(&jobs).await.is_err());
    assert_eq!(app.info(&small_id).await?.status, 404);
    app.teardown().await;
    Ok(())
}

/// S3 answers lost after the request landed (#32's fault list): a PutObject whose answer
/// is lost once is retried by the SDK and the job is stored whole; when every attempt's
/// answer is lost the PUSH fails and no job names an object (what landed is an orphan under
/// the job's prefix, for the bucket's lifecycle rule); a GetObject whose answer is lost
/// every time gives the claimed job back, and the next FETCH delivers it whole.
#[tokio::test]
async fn s3_answers_lost_after_the_call_landed_lose_no_job_and_half_write_none(
) -> anyhow::Result<()> {
    use ojs_tests::fault_proxy::{Fault, FaultProxy, Filter};
    let (store, payloads) = with_payloads(fresh_store().await?).await?;
    let upstream = std::env::var("AWS_ENDPOINT_URL_S3")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .context("no S3 endpoint")?;
    let proxy = FaultProxy::start(&upstream, 32).await?;
    let faulty = with_s3_at(&store, &proxy.url).await;
    let text = random_text();
    let envelope = |q: &str| json!({"type": "s3.fault", "args": [], "queue": q});

    // Lost once: the SDK's retry puts it again, and the job is whole.
    proxy.script(Filter::Any, &[Fault::DropAfter]);
    let once = put_large(&faulty, envelope("s3-lost-once"), &text).await?;
    assert_eq!(proxy.scripted_left(), 0, "the fault was met");
    let read = store.engine().get_job(&once.id).await?.context("stored")?;
    let read = store.engine().full_job(read).await?;
    assert!(
        read.spec.args == vec![Value::String(text.clone())],
        "the job is whole"
    );

    // Lost every time: the PUSH fails, no job item, the object landed unnamed.
    proxy.script(Filter::Any, &[Fault::DropAfter; 8]);
    let new = NewJob::from_json(envelope("s3-lost-always")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut job = Job::enqueue(new, ojs_core::time::now());
    job.spec.args = vec![Value::String(text.clone())];
    let failed = faulty.lifecycle().put_job(&job).await;
    assert!(failed.is_err(), "{failed:?}");
    proxy.heal();
    assert!(
        store.engine().get_job(&job.id).await?.is_none(),
        "no job names a lost object"
    );
    assert!(
        !objects_of(&payloads, &store, &job.id.to_string())
            .await?
            .is_empty(),
        "the put landed (an orphan for the lifecycle rule)"
    );

    // Reads whose answers are lost: the claim is given back, then delivered whole.
    let req = FetchRequest {
        queues: vec![queue("s3-lost-once")?],
        count: 1,
        worker_id: Some("w".into()),
        visibility_timeout_ms: None,
        tenant: Default::default(),
        scheduling: None,
    };
    ojs_tests::after_index_lag().await;
    proxy.script(Filter::Any, &[Fault::DropAfter; 8]);
    let first = faulty.workers().fetch(&req, ojs_core::time::now()).await?;
    assert!(
        first.jobs.is_empty(),
        "nothing delivered without its payload"
    );
    assert!(
        proxy.scripted_left() < 8,
        "the claim read its payload and met the faults"
    );
    proxy.heal();
    let back = store
        .engine()
        .get_job(&once.id)
        .await?
        .context("still there")?;
    assert_eq!(
        back.status.state,
        JobState::Available,
        "given back, not leased"
    );
    assert_eq!(back.status.attempt, 0, "the attempt is not counted");
    let mut delivered = Vec::new();
    for _ in 0..50 {
        delivered = faulty
            .workers()
            .fetch(&req, ojs_core::time::now())
            .await?
            .jobs;
        if !delivered.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(delivered.len(), 1, "delivered once the reads answer");
    assert!(
        delivered[0].spec.args == vec![Value::String(text)],
        "delivered whole"
    );
    Ok(())
}

/// An INFO that settles an overdue workflow step (its lease over, no attempt left) and
/// then cannot read the step's payload answers the error, and the step's workflow has
/// still moved on: what the settling owed is not lost with the read.
#[tokio::test]
async fn an_info_whose_payload_read_fails_after_settling_a_step_still_moves_its_workflow_on(
) -> anyhow::Result<()> {
    let (store, _payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let text = random_text();
    let created = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "chain", "name": "large", "steps": [
                {"type": "big.step", "args": [text],
                    "options": {"queue": "info-down", "retry": {"max_attempts": 1}}},
                {"type": "big.next", "args": [], "options": {"queue": "info-down"}}]})),
        )
        .await?;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let wf = created.body["workflow"]["id"]
        .as_str()
        .unwrap_or("?")
        .to_owned();
    ojs_tests::after_index_lag().await;
    let fetched = app
        .fetch(json!({"queues": ["info-down"], "worker_id": "w"}))
        .await?;
    let step = JobId::parse(fetched.body["jobs"][0]["id"].as_str().unwrap_or("?"))
        .map_err(|e| anyhow::anyhow!("{e}: {:?}", fetched.body))?;

    // An hour on, the lease is long over: INFO settles the step (discarded, its one
    // attempt spent), then fails to read its args from the unreachable bucket.
    let later = ojs_core::time::now() + chrono::Duration::hours(1);
    let down = with_s3_down(&app.store).await;
    let read = down.lifecycle().get_job_settled(&step, later).await;
    assert!(read.is_err(), "{read:?}");
    let settled = app.store.engine().get_job(&step).await?.context("gone")?;
    assert_eq!(settled.status.state, JobState::Discarded);
    let got = app.workflow(&wf).await?;
    assert_eq!(got.body["workflow"]["state"], "failed", "{:?}", got.body);
    app.teardown().await;
    Ok(())
}
