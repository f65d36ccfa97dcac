//! Checkpoints (ojs-durable-execution.md) over HTTP: saved by a worker, carried by the
//! next attempt's FETCH, fenced by worker/attempt and by sequence when the save names
//! them, removed in the write that ends the job (ACK, CANCEL, discard), kept per job.

use futures::future::join_all;
use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

fn id_of(reply: &Reply) -> String {
    reply.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn push(app: &TestApp, queue: &str, max_attempts: u32) -> anyhow::Result<String> {
    let r = app
        .push(json!({"type": "d.t", "args": [], "options": {"queue": queue,
            "retry": {"max_attempts": max_attempts, "initial_interval": "PT0.1S", "jitter": false}}}))
        .await?;
    anyhow::ensure!(r.status == 201, "{:?}", r.body);
    Ok(id_of(&r))
}

async fn fetch(app: &TestApp, queue: &str, worker: &str) -> anyhow::Result<Reply> {
    ojs_tests::after_index_lag().await;
    app.fetch(json!({"queues": [queue], "worker_id": worker}))
        .await
}

async fn save(app: &TestApp, id: &str, body: Value) -> anyhow::Result<Reply> {
    app.call(
        Method::PUT,
        &format!("/ojs/v1/jobs/{id}/checkpoint"),
        Some(body),
    )
    .await
}

async fn get(app: &TestApp, id: &str) -> anyhow::Result<Reply> {
    app.call(Method::GET, &format!("/ojs/v1/jobs/{id}/checkpoint"), None)
        .await
}

/// The checkpoint attributes still on the job's item, read from the table itself.
async fn stored_checkpoint(app: &TestApp, id: &str) -> anyhow::Result<Option<u64>> {
    let job = app
        .store
        .engine()
        .get_job(&ojs_core::JobId::parse(id)?)
        .await?;
    Ok(job.and_then(|j| j.status.checkpoint).map(|c| c.sequence))
}

#[tokio::test]
async fn a_stale_sequence_or_another_holder_is_refused_and_the_newer_state_kept(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = push(&app, "ck-a", 3).await?;
    let f = fetch(&app, "ck-a", "w1").await?;
    assert_eq!(f.body["jobs"][0]["id"], json!(id));
    let r = save(
        &app,
        &id,
        json!({"state": {"n": 1}, "worker_id": "w1", "sequence": 1}),
    )
    .await?;
    assert_eq!(
        (r.status, r.body["sequence"].clone()),
        (200, json!(1)),
        "{:?}",
        r.body
    );
    assert_eq!(r.body["checkpoint"]["sequence"], json!(1));
    let r = save(
        &app,
        &id,
        json!({"state": {"n": 2}, "worker_id": "w1", "sequence": 2}),
    )
    .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    // A save that claims to be the second again (a late or repeated one) is refused.
    let r = save(&app, &id, json!({"state": {"n": "old"}, "sequence": 2})).await?;
    assert_eq!(r.status, 409, "{:?}", r.body);
    assert_eq!(r.body["error"]["details"]["current_sequence"], json!(2));
    let r = save(&app, &id, json!({"state": {"n": "old"}, "sequence": 1})).await?;
    assert_eq!(r.status, 409, "{:?}", r.body);
    // Another worker, or another attempt, may not write the holder's checkpoint.
    let r = save(&app, &id, json!({"state": {"n": "x"}, "worker_id": "w2"})).await?;
    assert_eq!(r.status, 409, "{:?}", r.body);
    let r = save(
        &app,
        &id,
        json!({"state": {"n": "x"}, "worker_id": "w1", "attempt": 2}),
    )
    .await?;
    assert_eq!(r.status, 409, "{:?}", r.body);
    let g = get(&app, &id).await?;
    assert_eq!(
        (
            g.status,
            g.body["state"].clone(),
            g.body["sequence"].clone()
        ),
        (200, json!({"n": 2}), json!(2)),
        "{:?}",
        g.body
    );
    assert_eq!(g.body["checkpoint"]["state"], json!({"n": 2}));
    // The holder with the right attempt goes on.
    let r = save(
        &app,
        &id,
        json!({"state": {"n": 3}, "worker_id": "w1", "attempt": 1}),
    )
    .await?;
    assert_eq!(
        (r.status, r.body["sequence"].clone()),
        (200, json!(3)),
        "{:?}",
        r.body
    );
    Ok(())
}

#[tokio::test]
async fn the_next_attempt_fetches_the_checkpoint_and_ack_removes_it() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let id = push(&app, "ck-b", 3).await?;
    let first = fetch(&app, "ck-b", "w1").await?;
    assert_eq!(first.body["jobs"][0]["id"], json!(id));
    assert!(
        first.body["jobs"][0].get("checkpoint").is_none(),
        "a first attempt carries none: {:?}",
        first.body
    );
    let r = save(
        &app,
        &id,
        json!({"state": {"cursor": "c-750"}, "worker_id": "w1"}),
    )
    .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let n = app
        .nack(json!({"job_id": id, "worker_id": "w1", "error": {"message": "lost"}}))
        .await?;
    assert_eq!(n.status, 200, "{:?}", n.body);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let second = loop {
        let _ = ojs_tests::sweep(&app.store, ojs_core::time::now()).await;
        let f = app
            .fetch(json!({"queues": ["ck-b"], "worker_id": "w2"}))
            .await?;
        if f.body["jobs"][0]["id"] == json!(id) {
            break f;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the retry never came"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let job = &second.body["jobs"][0];
    assert_eq!(job["attempt"], json!(2));
    assert_eq!(
        (
            job["checkpoint"]["state"].clone(),
            job["checkpoint"]["sequence"].clone()
        ),
        (json!({"cursor": "c-750"}), json!(1)),
        "the retry resumes from it: {job}"
    );
    let info = app.info(&id).await?;
    assert_eq!(info.body["job"]["checkpoint"]["sequence"], json!(1));
    // The first attempt's worker is not the holder any more.
    let r = save(&app, &id, json!({"state": {}, "worker_id": "w1"})).await?;
    assert_eq!(r.status, 409, "{:?}", r.body);
    let r = save(
        &app,
        &id,
        json!({"state": {"cursor": "c-900"}, "worker_id": "w2"}),
    )
    .await?;
    assert_eq!(
        (r.status, r.body["sequence"].clone()),
        (200, json!(2)),
        "{:?}",
        r.body
    );
    let a = app.ack(json!({"job_id": id, "worker_id": "w2"})).await?;
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert_eq!(
        stored_checkpoint(&app, &id).await?,
        None,
        "gone from the item"
    );
    assert_eq!(get(&app, &id).await?.status, 404);
    assert!(app.info(&id).await?.body["job"].get("checkpoint").is_none());
    let r = save(&app, &id, json!({"state": {}})).await?;
    assert_eq!(r.status, 409, "a completed job takes none: {:?}", r.body);
    Ok(())
}

#[tokio::test]
async fn cancel_and_discard_remove_the_checkpoint() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let cancelled = push(&app, "ck-c", 3).await?;
    let r = save(&app, &cancelled, json!({"state": [1, 2]})).await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(stored_checkpoint(&app, &cancelled).await?, Some(1));
    let c = app.cancel(&cancelled).await?;
    assert_eq!(c.status, 200, "{:?}", c.body);
    assert_eq!(stored_checkpoint(&app, &cancelled).await?, None);
    assert_eq!(get(&app, &cancelled).await?.status, 404);

    let discarded = push(&app, "ck-d", 1).await?;
    let f = fetch(&app, "ck-d", "w1").await?;
    assert_eq!(f.body["jobs"][0]["id"], json!(discarded));
    let r = save(&app, &discarded, json!({"state": "half"})).await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let n = app
        .nack(json!({"job_id": discarded, "worker_id": "w1", "error": {"message": "fatal"}}))
        .await?;
    assert_eq!(n.status, 200, "{:?}", n.body);
    assert_eq!(
        app.info(&discarded).await?.body["job"]["state"],
        json!("discarded")
    );
    assert_eq!(stored_checkpoint(&app, &discarded).await?, None);
    assert_eq!(get(&app, &discarded).await?.status, 404);
    let r = save(&app, &discarded, json!({"state": "late"})).await?;
    assert_eq!(r.status, 409, "{:?}", r.body);
    // Deleting is idempotent, and 404 only for no job.
    for _ in 0..2 {
        let d = app
            .call(
                Method::DELETE,
                &format!("/ojs/v1/jobs/{discarded}/checkpoint"),
                None,
            )
            .await?;
        assert_eq!((d.status, d.body["deleted"].clone()), (200, json!(true)));
    }
    let none = ojs_core::JobId::generate();
    let d = app
        .call(
            Method::DELETE,
            &format!("/ojs/v1/jobs/{none}/checkpoint"),
            None,
        )
        .await?;
    assert_eq!(d.status, 404);
    Ok(())
}

#[tokio::test]
async fn checkpoints_are_kept_per_job_and_racing_saves_all_count() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let a = push(&app, "ck-e", 3).await?;
    let b = push(&app, "ck-e", 3).await?;
    const SAVES: u64 = 8;
    let saves = (0..SAVES).flat_map(|i| {
        [
            save(&app, &a, json!({"state": {"job": "a", "i": i}})),
            save(&app, &b, json!({"state": {"job": "b", "i": i}})),
        ]
    });
    let replies = join_all(saves).await;
    let mut seqs: Vec<(String, u64)> = Vec::new();
    for r in replies {
        let r = r?;
        assert_eq!(r.status, 200, "{:?}", r.body);
        seqs.push((
            r.body["job_id"].as_str().unwrap_or_default().to_owned(),
            r.body["sequence"].as_u64().unwrap_or(0),
        ));
    }
    for id in [&a, &b] {
        let mut mine: Vec<u64> = seqs
            .iter()
            .filter(|(j, _)| j == id)
            .map(|(_, s)| *s)
            .collect();
        mine.sort_unstable();
        assert_eq!(
            mine,
            (1..=SAVES).collect::<Vec<_>>(),
            "each racing save got its own number"
        );
        let g = get(&app, id).await?;
        assert_eq!(g.body["sequence"], json!(SAVES), "{:?}", g.body);
        let owner = if id == &a { "a" } else { "b" };
        assert_eq!(
            g.body["state"]["job"],
            json!(owner),
            "no state of the other job"
        );
    }
    // Over the limit: a clear 413, and the stored one untouched.
    let big = "x".repeat(ojs_core::checkpoint::MAX_CHECKPOINT_BYTES);
    let r = save(&app, &a, json!({"state": big})).await?;
    assert_eq!(r.status, 413, "{:?}", r.body);
    assert_eq!(get(&app, &a).await?.body["sequence"], json!(SAVES));
    Ok(())
}
