//! FETCH answers bounded by bytes (issue #32, deploy-review F5): Lambda answers API
//! Gateway with at most 6 MB, the body inside a JSON string (so `"` and `\` count
//! twice). A FETCH for more large jobs than that carries answers fewer jobs, claims no
//! job it does not answer, and the jobs it left are fetched by the next FETCH.

use std::collections::HashSet;

use base64::Engine as _;
use ojs_store::AnswerBound;
use ojs_tests::{fresh_store, with_payloads, TestApp};
use rand::RngCore;
use serde_json::{json, Value};

/// Bytes `body` takes inside Lambda's response envelope: the JSON text with each `"`
/// and `\` escaped.
fn enveloped(body: &Value) -> usize {
    let text = body.to_string();
    text.len() + text.matches('"').count() + text.matches('\\').count()
}

/// Random base64 text of about `chars` characters: deflate cannot shrink it.
fn random_text(chars: usize) -> String {
    let mut bytes = vec![0u8; chars / 4 * 3];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// How many of `views` are whole (`args` as `args_of(i)`) before the rest, which have no
/// args or meta and say so; an error if a whole one follows a slim one.
fn whole_then_slim(views: &[Value], args_of: impl Fn(usize) -> Value) -> anyhow::Result<usize> {
    let whole = views.iter().take_while(|v| v.get("args").is_some()).count();
    for (i, v) in views.iter().enumerate() {
        if i < whole {
            anyhow::ensure!(v["args"] == args_of(i), "view {i} has other args");
            anyhow::ensure!(
                v.get("x-ojs-payload").is_none(),
                "view {i}: {}",
                v["x-ojs-payload"]
            );
        } else {
            anyhow::ensure!(
                v.get("args").is_none() && v.get("meta").is_none(),
                "view {i} is whole after a slim one"
            );
            anyhow::ensure!(
                v["x-ojs-payload"]["resolved"] == false,
                "view {i}: {}",
                v["x-ojs-payload"]
            );
        }
    }
    Ok(whole)
}

/// Pushes `n` jobs with one argument of `text` each (quotes included: they escape).
async fn push_jobs(
    app: &TestApp,
    queue: &str,
    n: usize,
    text: &str,
) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for i in 0..n {
        let r = app
            .push(json!({"type": "big.answer", "args": [i, text], "options": {"queue": queue}}))
            .await?;
        anyhow::ensure!(r.status == 201, "{} {}", r.status, r.body);
        ids.push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    Ok(ids)
}

/// Every job of `ids` is `state` (INFO).
async fn states(app: &TestApp, ids: &[String]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for id in ids {
        let r = app.info(id).await?;
        out.push(
            r.body["job"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    Ok(out)
}

/// Fetches until the queue is empty: every job comes exactly once, each answer within
/// `bound`. Returns the answers' sizes in jobs.
async fn drain(
    app: &TestApp,
    queue: &str,
    count: usize,
    bound: usize,
    ids: &[String],
) -> anyhow::Result<Vec<usize>> {
    let mut seen = HashSet::new();
    let mut sizes = Vec::new();
    while seen.len() < ids.len() {
        let r = app
            .fetch(json!({"queues": [queue], "count": count}))
            .await?;
        assert_eq!(r.status, 200, "{}", r.body);
        let got = r.job_ids();
        assert!(
            !got.is_empty(),
            "a FETCH answered nothing with {} jobs left",
            ids.len() - seen.len()
        );
        assert!(
            enveloped(&r.body) <= bound,
            "an answer of {} bytes, over {bound}",
            enveloped(&r.body)
        );
        for id in &got {
            assert!(seen.insert(id.clone()), "{id} was answered twice");
        }
        sizes.push(got.len());
        anyhow::ensure!(sizes.len() <= ids.len(), "no progress: {sizes:?}");
    }
    Ok(sizes)
}

/// A tight bound (60,000 bytes, 20,000 kept for one more job) over jobs of about 10 KB
/// of text full of quotes: the answer stops at the last job the rule allows, the jobs
/// left are `available` (never claimed), and the queue drains in bounded answers.
#[tokio::test]
async fn a_fetch_answers_no_more_bytes_than_its_bound_and_claims_nothing_it_leaves(
) -> anyhow::Result<()> {
    let bound = AnswerBound {
        bytes: 60_000,
        reserve: 20_000,
    };
    let app = TestApp::spawn_on_store(fresh_store().await?.with_config(|c| c.fetch_answer = bound))
        .await?;
    // Half of it quotes: in Lambda's envelope each becomes four bytes.
    let text = "\"a".repeat(2_500);
    let ids = push_jobs(&app, "tight", 10, &text).await?;

    let first = app.fetch(json!({"queues": ["tight"], "count": 10})).await?;
    assert_eq!(first.status, 200, "{}", first.body);
    let got = first.job_ids();
    let jobs = first.body["jobs"].as_array().cloned().unwrap_or_default();
    let sizes: Vec<usize> = jobs.iter().map(enveloped).collect();
    let total: usize = sizes.iter().sum();
    assert!(
        !got.is_empty() && got.len() < 10,
        "{} jobs answered",
        got.len()
    );
    assert!(
        total <= bound.bytes,
        "{total} bytes of jobs over {}",
        bound.bytes
    );
    // The rule both ways: room was left before the last job was claimed, and none after.
    let before_last = total - sizes[sizes.len() - 1];
    assert!(
        before_last + bound.reserve <= bound.bytes,
        "claimed past the reserve: {sizes:?}"
    );
    assert!(
        total + bound.reserve > bound.bytes,
        "stopped with room for another: {sizes:?}"
    );

    // What was not answered was never claimed.
    let answered: HashSet<&String> = got.iter().collect();
    for (id, state) in ids.iter().zip(states(&app, &ids).await?) {
        let want = if answered.contains(id) {
            "active"
        } else {
            "available"
        };
        assert_eq!(state, want, "{id}");
    }
    for id in &got {
        assert_eq!(app.ack(json!({"job_id": id})).await?.status, 200);
    }
    let left: Vec<String> = ids
        .iter()
        .filter(|id| !answered.contains(id))
        .cloned()
        .collect();
    let sizes = drain(&app, "tight", 10, bound.bytes, &left).await?;
    assert!(sizes.iter().all(|n| *n < 10), "{sizes:?}");
    app.teardown().await;
    Ok(())
}

/// The deployed bound: eight jobs of about 1 MB each (in S3) asked for at once would be
/// over 8 MB; the answers stay under Lambda's 6 MB and every job comes exactly once.
#[tokio::test]
async fn a_fetch_of_megabyte_jobs_stays_under_lambdas_response_limit() -> anyhow::Result<()> {
    let (store, _payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let text = random_text(1_000_000);
    let ids = push_jobs(&app, "huge", 8, &text).await?;
    let sizes = drain(
        &app,
        "huge",
        8,
        ojs_store::LAMBDA_RESPONSE_BYTES - 256 * 1024,
        &ids,
    )
    .await?;
    assert!(sizes.len() > 1, "one answer carried all eight: {sizes:?}");
    println!("8 jobs of 1 MB fetched 8 at a time came in answers of {sizes:?} jobs");
    app.teardown().await;
    Ok(())
}

/// A batch PUSH answers its jobs too. Five jobs of about a megabyte of quotes each fill a
/// batch body (5 MB) and would answer 10 MB in Lambda's envelope: the answer shows jobs
/// whole while the rest fit without their args and meta, the rest without them (and says
/// so), every job is enqueued whole, and GET shows it.
#[tokio::test]
async fn a_batch_whose_answer_would_pass_the_limit_answers_its_last_jobs_without_their_args(
) -> anyhow::Result<()> {
    let (store, _payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let quotes = "\"".repeat(480_000);
    let jobs: Vec<Value> = (0..5)
        .map(|i| json!({"type": "big.batch", "args": [i, quotes], "options": {"queue": "batched"}}))
        .collect();
    let r = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({"jobs": jobs})),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    let bound = ojs_store::AnswerBound::default().bytes;
    assert!(
        enveloped(&r.body) <= bound,
        "a batch answer of {} bytes",
        enveloped(&r.body)
    );
    let answered = r.body["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(answered.len(), 5);
    let whole = whole_then_slim(&answered, |i| json!([i, quotes]))?;
    assert!((1..5).contains(&whole), "{whole} of 5 shown whole");
    for (i, view) in answered.iter().enumerate() {
        let id = view["id"].as_str().unwrap_or_default();
        let got = app.info(id).await?;
        assert_eq!(got.body["job"]["args"], json!([i, quotes]), "{id}");
    }

    // A batch that fits answers its jobs whole, as before.
    let small = app
        .call(
            reqwest::Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({"jobs": [{"type": "small.batch", "args": ["\"x\""]}]})),
        )
        .await?;
    assert_eq!(small.status, 201, "{}", small.body);
    assert_eq!(small.body["jobs"][0]["args"], json!(["\"x\""]));
    assert!(small.body["jobs"][0].get("x-ojs-payload").is_none());
    app.teardown().await;
    Ok(())
}

/// The dead letter listing shows whole envelopes: a page of six dead-lettered jobs of a
/// megabyte of quotes (12 MB in Lambda's envelope) keeps all six, in order, whole while
/// the rest fit without their args and meta, and within the limit.
#[tokio::test]
async fn a_dead_letter_page_of_large_jobs_stays_under_lambdas_response_limit() -> anyhow::Result<()>
{
    let (store, _payloads) = with_payloads(fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let quotes = "\"".repeat(480_000);
    let mut ids = Vec::new();
    for i in 0..6 {
        let r = app
            .push(
                json!({"type": "big.dead", "args": [i, quotes], "options": {"queue": "dying",
                "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}}),
            )
            .await?;
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    app.fail_each("dying", 6, ids.len()).await?;
    ojs_tests::after_index_lag().await;
    let page = app
        .call(reqwest::Method::GET, "/ojs/v1/dead-letter?limit=6", None)
        .await?;
    assert_eq!(page.status, 200, "{}", page.body);
    let bound = ojs_store::AnswerBound::default().bytes;
    assert!(
        enveloped(&page.body) <= bound,
        "a page of {} bytes",
        enveloped(&page.body)
    );
    let listed = page.body["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 6, "{}", page.body["pagination"]);
    let listed_ids: Vec<&str> = listed.iter().filter_map(|j| j["id"].as_str()).collect();
    let order: HashSet<&str> = listed_ids.iter().copied().collect();
    assert_eq!(
        order,
        ids.iter().map(String::as_str).collect::<HashSet<_>>()
    );
    let by_id = |id: &str| ids.iter().position(|x| x == id).unwrap_or(usize::MAX);
    let whole = whole_then_slim(&listed, |i| json!([by_id(listed_ids[i]), quotes]))?;
    assert!((1..6).contains(&whole), "{whole} of 6 shown whole");
    app.teardown().await;
    Ok(())
}
