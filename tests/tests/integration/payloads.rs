//! Large job requests kept in S3 (issue #32): a job of about 1 MB of incompressible args
//! is stored with a reference in its item, served whole by FETCH and GET, its object is
//! deleted with its item (through the change stream), a tampered object is refused, and
//! a job that fits its item makes no S3 call.
//!
//! PUSH of such a job goes through the store here: the HTTP layer still limits `args` to
//! 64 KiB until that limit is lifted (issue #32, item 3).

use anyhow::Context;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine as _;
use ojs_core::{Job, NewJob};
use ojs_store::{Payloads, PushOutcome, Store};
use ojs_tests::{fresh_store, raw_dynamodb, with_payloads, TestApp};
use rand::RngCore;
use serde_json::{json, Value};

/// About 1,000,000 characters of base64 over random bytes: deflate cannot shrink it.
fn random_text() -> String {
    let mut bytes = vec![0u8; 750_000];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Stores a job of `args` on `queue` through the store (see the module's note).
async fn put_large(store: &Store, queue: &str, args: Value) -> anyhow::Result<Job> {
    let new =
        NewJob::from_json(json!({"type": "big.job", "args": [], "options": {"queue": queue}}))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut job = Job::enqueue(new, ojs_core::time::now());
    job.spec.args = vec![args];
    let outcome = store.lifecycle().put_job(&job).await?;
    anyhow::ensure!(matches!(outcome, PushOutcome::Created), "{outcome:?}");
    Ok(job)
}

/// The job's item as the table holds it.
async fn raw_item(
    store: &Store,
    id: &str,
) -> anyhow::Result<std::collections::HashMap<String, AttributeValue>> {
    raw_dynamodb()
        .await
        .get_item()
        .table_name(store.table())
        .key("pk", AttributeValue::S(format!("JOB#{id}")))
        .key("sk", AttributeValue::S("JOB".into()))
        .consistent_read(true)
        .send()
        .await?
        .item
        .context("no item")
}

async fn app_with_payloads() -> anyhow::Result<(TestApp, Payloads)> {
    let (store, payloads) = with_payloads(fresh_store().await?).await?;
    Ok((TestApp::spawn_on_store(store).await?, payloads))
}

#[tokio::test]
async fn a_one_megabyte_job_is_kept_in_s3_served_whole_and_deleted_with_its_item(
) -> anyhow::Result<()> {
    let (app, payloads) = app_with_payloads().await?;
    let text = random_text();
    assert!(text.len() >= 1_000_000);
    let job = put_large(&app.store, "big", Value::String(text.clone())).await?;
    let id = job.id.to_string();

    // The item holds a reference, not the request's args.
    let item = raw_item(&app.store, &id).await?;
    let key = item
        .get("spec_ref")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .context("no spec_ref")?;
    assert!(
        key.starts_with(&format!("jobs/{}/{id}/", app.store.table())),
        "{key}"
    );
    assert!(item.contains_key("spec_sha256") && item.contains_key("spec_bytes"));
    let stored_spec: usize = ["spec", "specz"]
        .iter()
        .filter_map(|a| item.get(*a))
        .map(|v| match v {
            AttributeValue::S(s) => s.len(),
            AttributeValue::B(b) => b.as_ref().len(),
            _ => 0,
        })
        .sum();
    assert!(
        stored_spec < 4096,
        "the item keeps {stored_spec} bytes of request"
    );
    // Written, so no longer pending: the lifecycle rule leaves it alone.
    assert_eq!(payloads.tags(&key).await?, vec!["ojs-pending=0".to_owned()]);

    let fetched = app
        .fetch(json!({"queues": ["big"], "worker_id": "w1"}))
        .await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    let jobs = fetched.body["jobs"].as_array().context("no jobs")?;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], json!(id));
    assert!(jobs[0]["args"] == json!([text]), "FETCH changed the args");
    assert!(jobs[0].get("~spec_ref").is_none());

    let got = app.info(&id).await?;
    assert_eq!(got.status, 200);
    assert!(
        got.body["job"]["args"] == json!([text]),
        "GET changed the args"
    );
    assert!(got.body["job"].get("~spec_ref").is_none());

    let ack = app.ack(json!({"job_id": id, "worker_id": "w1"})).await?;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    let got = app.info(&id).await?;
    assert_eq!(got.body["job"]["state"], json!("completed"));
    assert!(got.body["job"]["args"] == json!([text]));

    // The job item is deleted; the change stream's consumer deletes its object.
    app.store.catch_up().await;
    assert!(payloads.exists(&key).await?);
    app.store
        .admin()
        .admin_delete_job(&ojs_core::JobId::parse(&id).map_err(|e| anyhow::anyhow!("{e}"))?)
        .await?;
    app.store.catch_up().await;
    assert!(!payloads.exists(&key).await?, "the object outlived its job");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_tampered_payload_is_never_served() -> anyhow::Result<()> {
    let (app, payloads) = app_with_payloads().await?;
    let text = random_text();
    let job = put_large(&app.store, "tampered", Value::String(text.clone())).await?;
    let id = job.id.to_string();
    let item = raw_item(&app.store, &id).await?;
    let key = item
        .get("spec_ref")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .context("no spec_ref")?;
    // Same length, one character changed.
    let body = json!({"args": [text.replacen('A', "B", 1)], "meta": {}}).to_string();
    payloads.overwrite(&key, body.into_bytes()).await?;

    // FETCH never delivers it, and fails it for good (payloads_answers has the rest).
    let fetched = app
        .fetch(json!({"queues": ["tampered"], "worker_id": "w1"}))
        .await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    assert_eq!(fetched.body["jobs"], json!([]));
    assert!(!fetched.body.to_string().contains(&text[..64]));
    // GET shows the job, saying it is incomplete: never the tampered args.
    let got = app.info(&id).await?;
    assert_eq!(got.status, 200, "{:?}", got.body);
    assert_eq!(got.body["job"]["state"], json!("discarded"));
    assert!(got.body["job"].get("args").is_none());
    assert!(!got.body.to_string().contains(&text[..64]));
    let settled = app
        .store
        .lifecycle()
        .get_job_settled(&job.id, ojs_core::time::now())
        .await?
        .context("gone")?;
    assert!(settled
        .status
        .payload
        .is_some_and(|p| p.unreadable.is_some()));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_job_that_fits_its_item_makes_no_s3_call() -> anyhow::Result<()> {
    // Every call of this bucket's client would fail: nothing listens on port 9.
    let sdk = ojs_store::sdk_config().await;
    let conf = aws_sdk_s3::config::Builder::from(&sdk)
        .endpoint_url("http://127.0.0.1:9")
        .force_path_style(true)
        .build();
    let nowhere = Payloads::new(aws_sdk_s3::Client::from_conf(conf), "nowhere");
    let app = TestApp::spawn_on_store(fresh_store().await?.with_payloads(nowhere)).await?;
    let pushed = app
        .push(json!({"type": "small.job", "args": ["x".repeat(60_000)], "options": {"queue": "small"}}))
        .await?;
    assert_eq!(pushed.status, 201, "{:?}", pushed.body);
    let id = pushed.body["job"]["id"]
        .as_str()
        .context("no id")?
        .to_owned();
    let item = raw_item(&app.store, &id).await?;
    assert!(!item.contains_key("spec_ref"));
    let fetched = app
        .fetch(json!({"queues": ["small"], "worker_id": "w1"}))
        .await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    assert_eq!(
        fetched.body["jobs"][0]["args"][0].as_str().map(str::len),
        Some(60_000)
    );
    assert_eq!(app.info(&id).await?.status, 200);
    let ack = app.ack(json!({"job_id": id, "worker_id": "w1"})).await?;
    assert_eq!(ack.status, 200);
    app.store
        .admin()
        .admin_delete_job(&ojs_core::JobId::parse(&id).map_err(|e| anyhow::anyhow!("{e}"))?)
        .await?;
    app.store.catch_up().await;
    app.teardown().await;
    Ok(())
}

/// A workflow step as large as a pushed job may be keeps its args in S3 the same way:
/// created in the workflow's one transaction with a reference, served whole to the worker.
#[tokio::test]
async fn a_workflow_step_of_one_megabyte_is_kept_in_s3_and_served_whole() -> anyhow::Result<()> {
    let (app, payloads) = app_with_payloads().await?;
    let text = random_text();
    let created = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/workflows",
            Some(json!({
                "type": "chain", "name": "big-chain",
                "steps": [
                    {"type": "big.first", "args": [text], "options": {"queue": "big-wf"}},
                    {"type": "small.second", "args": [1], "options": {"queue": "big-wf"}},
                ],
            })),
        )
        .await?;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let fetched = app
        .fetch(json!({"queues": ["big-wf"], "worker_id": "w1"}))
        .await?;
    assert_eq!(fetched.status, 200, "{:?}", fetched.body);
    let job = &fetched.body["jobs"][0];
    assert_eq!(job["type"], json!("big.first"));
    assert!(job["args"] == json!([text]), "FETCH changed the args");
    let id = job["id"].as_str().context("job id")?.to_owned();
    let item = raw_item(&app.store, &id).await?;
    let key = item
        .get("spec_ref")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .context("the step's item holds its args, not a reference")?;
    // Written, so no longer pending: the lifecycle rule leaves it alone.
    assert_eq!(payloads.tags(&key).await?, vec!["ojs-pending=0".to_owned()]);
    let ack = app.ack(json!({"job_id": id, "worker_id": "w1"})).await?;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    // The chain goes on to its next step.
    let next = app
        .fetch(json!({"queues": ["big-wf"], "worker_id": "w1"}))
        .await?;
    assert_eq!(
        next.body["jobs"][0]["type"],
        json!("small.second"),
        "{:?}",
        next.body
    );
    app.teardown().await;
    Ok(())
}

/// A unique job as large as a pushed job may be: stored with its args in S3 under its
/// lock, and a refused duplicate leaves no object behind (its pending one is deleted).
#[tokio::test]
async fn a_unique_job_of_one_megabyte_is_kept_in_s3_and_a_refused_duplicate_leaves_no_object(
) -> anyhow::Result<()> {
    let (app, payloads) = app_with_payloads().await?;
    let text = random_text();
    let job = json!({
        "type": "big.unique", "args": [text],
        "options": {"queue": "big-uniq", "unique": {"keys": ["type"], "on_conflict": "reject"}},
    });
    let first = app.push(job.clone()).await?;
    assert_eq!(first.status, 201, "{:?}", first.body);
    let id = first.body["job"]["id"]
        .as_str()
        .context("no id")?
        .to_owned();
    let item = raw_item(&app.store, &id).await?;
    let key = item
        .get("spec_ref")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .context("the unique job's item holds its args, not a reference")?;
    assert_eq!(payloads.tags(&key).await?, vec!["ojs-pending=0".to_owned()]);
    let second = app.push(job).await?;
    assert_eq!(second.status, 409, "{:?}", second.body);
    let prefix = format!("jobs/{}/", app.store.table());
    assert_eq!(
        payloads.keys_under(&prefix).await?,
        vec![key],
        "the refused duplicate left its object"
    );
    let fetched = app
        .fetch(json!({"queues": ["big-uniq"], "worker_id": "w1"}))
        .await?;
    assert!(
        fetched.body["jobs"][0]["args"] == json!([text]),
        "FETCH changed the args"
    );
    app.teardown().await;
    Ok(())
}
