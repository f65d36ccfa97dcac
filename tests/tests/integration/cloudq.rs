//! The Cloudq v0.1.0 binding over HTTP: Cloudq clients and OJS workers share the jobs.

use std::collections::HashSet;
use std::sync::Arc;

use anyhow::{ensure, Context};
use ojs_tests::{Reply, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

/// A request with a raw body and content type, as a Cloudq client (or curl) sends it.
async fn raw(
    app: &TestApp,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> anyhow::Result<Reply> {
    let mut req = app
        .client
        .request(method, format!("{}{path}", app.base_url))
        .body(body.to_owned());
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let res = req.send().await?;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let bytes = res.bytes().await?;
    let body = serde_json::from_slice(&bytes)
        .with_context(|| format!("not JSON: {}", String::from_utf8_lossy(&bytes)))?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

async fn publish(app: &TestApp, queue: &str, body: Value) -> anyhow::Result<Reply> {
    let path = format!("/cloudq/{queue}");
    let reply = raw(
        app,
        Method::POST,
        &path,
        Some("application/json"),
        &body.to_string(),
    )
    .await?;
    ensure_json(&reply)?;
    Ok(reply)
}

async fn reserve(app: &TestApp, queue: &str) -> anyhow::Result<Reply> {
    let reply = raw(app, Method::GET, &format!("/cloudq/{queue}"), None, "").await?;
    ensure_json(&reply)?;
    Ok(reply)
}

async fn remove(app: &TestApp, queue: &str, id: &str) -> anyhow::Result<Reply> {
    let path = format!("/cloudq/{queue}/{id}");
    let reply = raw(app, Method::DELETE, &path, None, "").await?;
    ensure_json(&reply)?;
    Ok(reply)
}

/// Cloudq answers are `application/json`, whatever the status.
fn ensure_json(reply: &Reply) -> anyhow::Result<()> {
    let ct = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok());
    ensure!(
        ct == Some("application/json"),
        "content type {ct:?} for {:?}",
        reply.body
    );
    Ok(())
}

fn ensure_error(reply: &Reply, status: u16, says: &str) -> anyhow::Result<()> {
    ensure!(
        reply.status == status
            && reply.body["status"] == "error"
            && reply.body["message"]
                .as_str()
                .is_some_and(|m| m.contains(says))
            && reply.body.as_object().map(|o| o.len()) == Some(2),
        "expected {status} with a message about {says:?}, got {} {}",
        reply.status,
        reply.body
    );
    Ok(())
}

#[tokio::test]
async fn cloudq_publish_then_ojs_fetch_and_ack() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let published = publish(
        &app,
        "archive",
        json!({"job": {"klass": "archive", "args": [{"data": "foobar"}]}}),
    )
    .await?;
    ensure!(
        published.status == 200 && published.body["status"] == "success",
        "publish: {} {}",
        published.status,
        published.body
    );

    let fetched = app
        .fetch(json!({"queues": ["archive"], "worker_id": "ojs-worker"}))
        .await?;
    let job = &fetched.body["jobs"][0];
    ensure!(
        job["type"] == "archive"
            && job["queue"] == "archive"
            && job["args"] == json!([{"data": "foobar"}])
            && job["state"] == "active",
        "OJS worker got {}",
        fetched.body
    );
    let id = job["id"].as_str().unwrap_or_default().to_owned();
    let published_id = published.body["message"].as_str().unwrap_or_default();
    ensure!(
        published_id.contains(&id),
        "publish answer {published_id:?} names another job than {id}"
    );
    // Leased to the OJS worker: a Cloudq client cannot reserve it too.
    let empty = reserve(&app, "archive").await?;
    ensure!(empty.body == json!({"status": "empty"}), "{}", empty.body);
    let acked = app
        .ack(json!({"job_id": id, "worker_id": "ojs-worker", "result": {"ok": true}}))
        .await?;
    ensure!(acked.status == 200, "ack: {}", acked.body);
    let info = app.info(&id).await?;
    ensure!(info.body["job"]["state"] == "completed", "{}", info.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn ojs_push_then_cloudq_reserve_and_delete() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let pushed = app
        .push(json!({"type": "email.send", "queue": "email", "args": ["to@email.com", "subject", 3, {"html": false}]}))
        .await?;
    ensure!(pushed.status == 201, "push: {}", pushed.body);
    let id = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let reserved = reserve(&app, "email").await?;
    ensure!(
        reserved.status == 200
            && reserved.body
                == json!({"job": {"klass": "email.send", "args": ["to@email.com", "subject", 3, {"html": false}], "id": id}}),
        "reserve: {} {}",
        reserved.status,
        reserved.body
    );
    let info = app.info(&id).await?;
    ensure!(info.body["job"]["state"] == "active", "{}", info.body);
    let fetched = app.fetch(json!({"queues": ["email"]})).await?;
    ensure!(
        fetched.body["jobs"] == json!([]),
        "an OJS worker got the reserved job: {}",
        fetched.body
    );

    let deleted = remove(&app, "email", &id).await?;
    ensure!(
        deleted.status == 200 && deleted.body["status"] == "success",
        "delete: {} {}",
        deleted.status,
        deleted.body
    );
    let info = app.info(&id).await?;
    ensure!(info.body["job"]["state"] == "completed", "{}", info.body);
    // Deleting twice is an error: the job is no longer reserved.
    ensure_error(&remove(&app, "email", &id).await?, 409, "completed")?;
    ensure!(reserve(&app, "email").await?.body == json!({"status": "empty"}));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn bare_jobs_and_any_content_type_are_accepted() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let body = r#"{"klass": "welcome", "args": ["to@email.com", "subject", "body"]}"#;
    // curl -d without -H sends application/x-www-form-urlencoded.
    for content_type in [
        Some("application/json"),
        None,
        Some("application/x-www-form-urlencoded"),
    ] {
        let r = raw(
            &app,
            Method::POST,
            "/cloudq/email-queue",
            content_type,
            body,
        )
        .await?;
        ensure_json(&r)?;
        ensure!(
            r.status == 200 && r.body["status"] == "success",
            "{content_type:?}: {} {}",
            r.status,
            r.body
        );
    }
    for _ in 0..3 {
        let r = reserve(&app, "email-queue").await?;
        ensure!(
            r.body["job"]["klass"] == "welcome"
                && r.body["job"]["args"] == json!(["to@email.com", "subject", "body"]),
            "{}",
            r.body
        );
    }
    ensure!(reserve(&app, "email-queue").await?.body == json!({"status": "empty"}));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn an_empty_or_unknown_queue_answers_empty() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let r = reserve(&app, "nothing-here").await?;
    ensure!(
        r.status == 200 && r.body == json!({"status": "empty"}),
        "{} {}",
        r.status,
        r.body
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn bad_requests_get_cloudq_errors_and_enqueue_nothing() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let json_type = Some("application/json");
    let cases = [
        ("{\"job\": ", "not valid JSON"),
        ("[\"archive\", []]", "the body must be"),
        ("{\"job\": [\"archive\"]}", "the body must be"),
        ("{\"job\": {\"args\": []}}", "klass is required"),
        (
            "{\"job\": {\"klass\": 7, \"args\": []}}",
            "klass must be a string",
        ),
        (
            "{\"job\": {\"klass\": \"\", \"args\": []}}",
            "klass must not be empty",
        ),
        ("{\"job\": {\"klass\": \"archive\"}}", "args is required"),
        (
            "{\"job\": {\"klass\": \"archive\", \"args\": {\"data\": 1}}}",
            "args must be an array",
        ),
    ];
    for (body, says) in cases {
        let r = raw(&app, Method::POST, "/cloudq/archive", json_type, body).await?;
        ensure_json(&r)?;
        ensure_error(&r, 400, says).with_context(|| format!("body {body}"))?;
    }
    let valid = r#"{"job": {"klass": "archive", "args": []}}"#;
    let r = raw(&app, Method::POST, "/cloudq/a!b", json_type, valid).await?;
    ensure_error(&r, 400, "queue must match")?;
    ensure!(reserve(&app, "archive").await?.body == json!({"status": "empty"}));
    ensure_error(&reserve(&app, "a!b").await?, 400, "queue must match")?;

    // DELETE: unknown ids, another queue's job, a job nobody reserved.
    ensure_error(&remove(&app, "archive", "123456789").await?, 404, "no job")?;
    let unknown = "019539a4-b68c-7def-8000-1a2b3c4d5e6f";
    ensure_error(&remove(&app, "archive", unknown).await?, 404, "no job")?;
    let pushed = app
        .push(json!({"type": "archive", "queue": "other", "args": []}))
        .await?;
    let id = pushed.body["job"]["id"].as_str().unwrap_or_default();
    ensure_error(&remove(&app, "archive", id).await?, 404, "no job")?;
    ensure_error(
        &remove(&app, "other", id).await?,
        409,
        "available, not reserved",
    )?;
    let info = app.info(id).await?;
    ensure!(info.body["job"]["state"] == "available", "{}", info.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reservers_never_share_a_job() -> anyhow::Result<()> {
    let app = Arc::new(TestApp::spawn().await?);
    let jobs = 60;
    for i in 0..jobs {
        let r = if i % 2 == 0 {
            publish(
                &app,
                "race",
                json!({"job": {"klass": "race.job", "args": [i]}}),
            )
            .await?
        } else {
            app.push(json!({"type": "race.job", "queue": "race", "args": [i]}))
                .await?
        };
        ensure!(r.status / 100 == 2, "push {i}: {}", r.body);
    }
    // Cloudq reservers and OJS fetchers race for the same queue.
    let racers = (0..12).map(|w| {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            let mut got = Vec::new();
            // A claim lost to every other racer looks empty: stop after three in a row.
            let mut empty_in_a_row = 0;
            while empty_in_a_row < 3 {
                let job = if w % 2 == 0 {
                    let r = reserve(&app, "race").await?;
                    ensure!(r.status == 200, "reserve: {}", r.body);
                    if r.body == json!({"status": "empty"}) {
                        empty_in_a_row += 1;
                        continue;
                    }
                    let id = r.body["job"]["id"].as_str().unwrap_or_default().to_owned();
                    let d = remove(&app, "race", &id).await?;
                    ensure!(d.status == 200, "delete of a reserved job: {}", d.body);
                    (id, r.body["job"]["args"][0].clone())
                } else {
                    let r = app.fetch(json!({"queues": ["race"]})).await?;
                    ensure!(r.status == 200, "fetch: {}", r.body);
                    let Some(job) = r.body["jobs"].get(0).cloned() else {
                        empty_in_a_row += 1;
                        continue;
                    };
                    let id = job["id"].as_str().unwrap_or_default().to_owned();
                    let a = app.ack(json!({"job_id": id})).await?;
                    ensure!(a.status == 200, "ack: {}", a.body);
                    (id, job["args"][0].clone())
                };
                empty_in_a_row = 0;
                got.push(job);
            }
            anyhow::Ok(got)
        })
    });
    let mut ids = HashSet::new();
    let mut args = HashSet::new();
    for racer in futures::future::join_all(racers).await {
        for (id, arg) in racer?? {
            ensure!(ids.insert(id.clone()), "job {id} was delivered twice");
            args.insert(arg.to_string());
        }
    }
    ensure!(
        ids.len() == jobs && args.len() == jobs,
        "{} of {jobs} jobs delivered",
        ids.len()
    );
    if let Ok(app) = Arc::try_unwrap(app) {
        app.teardown().await;
    }
    Ok(())
}

#[tokio::test]
async fn the_seeds_own_example_round_trips_with_its_class_and_queue_names() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let r = publish(
        &app,
        "archive_queue",
        json!({"job": {"klass": "Archive", "args": [{"data": "foobar"}]}}),
    )
    .await?;
    ensure!(
        r.status == 200 && r.body["status"] == "success",
        "{}",
        r.body
    );
    // OJS sees the mapped names, with the exact klass kept in meta.
    let info = app
        .call(Method::GET, "/ojs/v1/queues/archive-queue/stats", None)
        .await?;
    ensure!(
        info.body["queue"]["available"] == 1 || info.body["available"] == 1,
        "{}",
        info.body
    );
    let got = reserve(&app, "archive_queue").await?;
    ensure!(got.body["job"]["klass"] == "Archive", "{}", got.body);
    ensure!(
        got.body["job"]["args"] == json!([{"data": "foobar"}]),
        "{}",
        got.body
    );
    let id = got.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let job = app.info(&id).await?;
    ensure!(job.body["job"]["type"] == "archive", "{}", job.body);
    ensure!(job.body["job"]["queue"] == "archive-queue", "{}", job.body);
    ensure!(
        job.body["job"]["meta"]["cloudq_klass"] == "Archive",
        "{}",
        job.body
    );
    let done = remove(&app, "archive_queue", &id).await?;
    ensure!(
        done.status == 200 && done.body["status"] == "success",
        "{}",
        done.body
    );
    ensure!(app.info(&id).await?.body["job"]["state"] == "completed");
    app.teardown().await;
    Ok(())
}

/// Seed 004's own paths, at the server's root (`POST /:queue`, `GET /:queue`, `DELETE
/// /:queue/:id`), with a klass that is no class name ("could be the object name you would
/// like to perform the job"); the server's own root paths still answer as themselves.
#[tokio::test]
async fn the_protocol_is_served_at_the_root_with_any_klass() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let body = json!({"job": {"klass": "send email!", "args": ["to@example.com"]}});
    let r = raw(
        &app,
        Method::POST,
        "/archive_queue",
        Some("application/json"),
        &body.to_string(),
    )
    .await?;
    ensure_json(&r)?;
    ensure!(
        r.status == 200 && r.body["status"] == "success",
        "{}",
        r.body
    );
    let got = raw(&app, Method::GET, "/archive_queue", None, "").await?;
    ensure_json(&got)?;
    ensure!(got.body["job"]["klass"] == "send email!", "{}", got.body);
    ensure!(
        got.body["job"]["args"] == json!(["to@example.com"]),
        "{}",
        got.body
    );
    let id = got.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let job = app.info(&id).await?.body["job"].clone();
    ensure!(job["type"] == "cloudq.send_email_", "{job}");
    ensure!(job["queue"] == "archive-queue", "{job}");
    ensure!(job["meta"]["cloudq_klass"] == "send email!", "{job}");
    let done = raw(
        &app,
        Method::DELETE,
        &format!("/archive_queue/{id}"),
        None,
        "",
    )
    .await?;
    ensure_json(&done)?;
    ensure!(
        done.status == 200 && done.body["status"] == "success",
        "{}",
        done.body
    );
    ensure!(app.info(&id).await?.body["job"]["state"] == "completed");
    let empty = raw(&app, Method::GET, "/archive_queue", None, "").await?;
    ensure!(empty.body == json!({"status": "empty"}), "{}", empty.body);

    // The server's own root paths win; a queue named so is reached under /cloudq.
    let health = app.call(Method::GET, "/health", None).await?;
    ensure!(
        health.status == 200 && health.body["status"] == "ok",
        "{}",
        health.body
    );
    let r = publish(&app, "health", json!({"klass": "Archive", "args": []})).await?;
    ensure!(r.status == 200, "{}", r.body);
    ensure!(reserve(&app, "health").await?.body["job"]["klass"] == "Archive");
    app.teardown().await;
    Ok(())
}
