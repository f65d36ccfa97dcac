//! Producer scenarios: everything a `Client` does, as the SDK's README shows it.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use ojs::{
    ConflictStrategy, CronJobRequest, EnqueueOption, JobRequest, JobState, OnExhaustion,
    OverlapPolicy, RetryPolicy, UniqueDimension, UniquePolicy,
};
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn health() {
    bounded(20, async {
        let h = client()
            .health()
            .await
            .expect("GET /ojs/v1/health via Client::health");
        assert_eq!(h.status, "ok");
        assert!(h.version.is_some(), "health has no version: {h:?}");
        assert!(
            h.uptime_seconds.is_some(),
            "health has no uptime_seconds: {h:?}"
        );
    })
    .await
}

#[tokio::test]
async fn manifest() {
    bounded(20, async {
        let m = client()
            .manifest()
            .await
            .expect("GET /ojs/manifest via Client::manifest");
        assert_eq!(m.ojs_version, "1.0");
        assert!(!m.implementation.name.is_empty(), "{m:?}");
        assert!(
            m.protocols.iter().any(|p| p == "http"),
            "protocols: {:?}",
            m.protocols
        );
        assert!(!m.backend.is_empty(), "{m:?}");
        // The capabilities this suite exercises must be claimed.
        let c = &m.capabilities;
        for (name, on) in [
            ("batch_enqueue", c.batch_enqueue),
            ("cron_jobs", c.cron_jobs),
            ("dead_letter", c.dead_letter),
            ("delayed_jobs", c.delayed_jobs),
            ("priority_queues", c.priority_queues),
            ("unique_jobs", c.unique_jobs),
            ("workflows", c.workflows),
            ("pause_resume", c.pause_resume),
        ] {
            assert!(on, "manifest does not claim capability {name}: {c:?}");
        }
    })
    .await
}

/// PUSH with every option the `EnqueueBuilder` has; the reply's job must carry them.
#[tokio::test]
async fn push_with_options() {
    bounded(20, async {
        let q = queue("push");
        let meta = HashMap::from([
            ("tenant".to_owned(), json!("acme")),
            ("trace".to_owned(), json!({"id": 7})),
        ]);
        let expires = Utc::now() + chrono::Duration::hours(1);
        let job = client()
            .enqueue("rs.push.options", json!({"to": "a@example.com", "n": 3}))
            .queue(&q)
            .priority(7)
            .tags(vec!["alpha".into(), "beta".into()])
            .meta(meta)
            .retry(
                RetryPolicy::new()
                    .max_attempts(5)
                    .initial_interval("PT2S")
                    .backoff_coefficient(1.5)
                    .max_interval("PT1M")
                    .jitter(false)
                    .non_retryable_errors(vec!["validation".into()]),
            )
            .timeout(Duration::from_secs(45))
            .expires_at(expires)
            .send()
            .await
            .expect("PUSH POST /jobs via EnqueueBuilder::send");

        assert!(uuid::Uuid::parse_str(&job.id).is_ok(), "id {:?}", job.id);
        assert_eq!(job.job_type, "rs.push.options");
        assert_eq!(job.queue, q);
        // The SDK sends an object as `[object]`; the server keeps args as sent.
        assert_eq!(job.args, json!([{"to": "a@example.com", "n": 3}]));
        assert_eq!(job.priority, 7);
        assert_eq!(job.tags, vec!["alpha", "beta"]);
        let meta = job.meta.clone().expect("job.meta");
        assert_eq!(meta.get("tenant"), Some(&json!("acme")));
        assert_eq!(meta.get("trace"), Some(&json!({"id": 7})));
        assert_eq!(job.state, Some(JobState::Available));
        assert_eq!(job.attempt, 0);
        assert_eq!(job.max_attempts, Some(5));
        let retry = job.retry.clone().expect("job.retry");
        assert_eq!(retry.max_attempts, 5);
        // Durations compare by value: the server may write PT1M as PT60S.
        assert_eq!(
            iso_secs(&retry.initial_interval),
            2.0,
            "{}",
            retry.initial_interval
        );
        assert_eq!(retry.backoff_coefficient, 1.5);
        assert_eq!(
            iso_secs(&retry.max_interval),
            60.0,
            "{}",
            retry.max_interval
        );
        assert!(!retry.jitter);
        assert_eq!(retry.non_retryable_errors, vec!["validation"]);
        assert_eq!(job.timeout_ms, Some(45_000));
        let exp = job.expires_at.expect("job.expires_at");
        assert!(
            (exp - expires).num_milliseconds().abs() < 1000,
            "{exp} vs {expires}"
        );
        assert!(job.created_at.is_some());
    })
    .await
}

/// `delay()` and `scheduled_at()` make a scheduled job.
#[tokio::test]
async fn push_scheduled() {
    bounded(20, async {
        let c = client();
        let q = queue("sched");
        let before = Utc::now();
        let delayed = c
            .enqueue("rs.push.delayed", json!({}))
            .queue(&q)
            .delay(Duration::from_secs(60))
            .send()
            .await
            .expect("PUSH with delay()");
        assert_eq!(delayed.state, Some(JobState::Scheduled));
        let at = delayed.scheduled_at.expect("scheduled_at of a delayed job");
        let secs = (at - before).num_milliseconds() as f64 / 1000.0;
        assert!(
            (59.0..=63.0).contains(&secs),
            "delay(60s) scheduled {secs} s ahead"
        );

        let when = Utc::now() + chrono::Duration::hours(2);
        let scheduled = c
            .enqueue("rs.push.scheduled", json!({}))
            .queue(&q)
            .scheduled_at(when)
            .send()
            .await
            .expect("PUSH with scheduled_at()");
        assert_eq!(scheduled.state, Some(JobState::Scheduled));
        let at = scheduled.scheduled_at.expect("scheduled_at");
        assert!(
            (at - when).num_milliseconds().abs() < 1000,
            "{at} vs {when}"
        );
    })
    .await
}

/// `unique()`: a duplicate is rejected (409 duplicate), `ignore` answers the existing job.
#[tokio::test]
async fn push_unique() {
    bounded(20, async {
        let c = client();
        let q = queue("unique");
        let policy = || {
            UniquePolicy::new()
                .keys(vec![
                    UniqueDimension::Type,
                    UniqueDimension::Queue,
                    UniqueDimension::Args,
                ])
                .period("PT1M")
        };
        let first = c
            .enqueue("rs.push.unique", json!({"order": 1}))
            .queue(&q)
            .unique(policy())
            .send()
            .await
            .expect("first unique PUSH");

        let dup = c
            .enqueue("rs.push.unique", json!({"order": 1}))
            .queue(&q)
            .unique(policy())
            .send()
            .await
            .expect_err("a duplicate PUSH must be rejected");
        let e = server_error(dup, "duplicate");
        assert_eq!(e.http_status, 409, "{e:?}");
        assert!(
            e.is_duplicate(),
            "error code {:?}, expected duplicate",
            e.code
        );

        let ignored = c
            .enqueue("rs.push.unique", json!({"order": 1}))
            .queue(&q)
            .unique(policy().on_conflict(ConflictStrategy::Ignore))
            .send()
            .await
            .expect("on_conflict ignore answers the existing job");
        assert_eq!(ignored.id, first.id);

        let other = c
            .enqueue("rs.push.unique", json!({"order": 2}))
            .queue(&q)
            .unique(policy())
            .send()
            .await
            .expect("different args are not a duplicate");
        assert_ne!(other.id, first.id);
    })
    .await
}

#[tokio::test]
async fn batch_push() {
    bounded(20, async {
        let q = queue("batch");
        let q2 = queue("batch2");
        let meta = HashMap::from([("src".to_owned(), json!("batch"))]);
        let jobs = client()
            .enqueue_batch(vec![
                JobRequest::new("rs.batch.a", json!({"i": 0}))
                    .with_option(EnqueueOption::Queue(q.clone())),
                JobRequest::new("rs.batch.b", json!({"i": 1}))
                    .with_option(EnqueueOption::Queue(q.clone()))
                    .with_option(EnqueueOption::Priority(3)),
                JobRequest::new("rs.batch.c", json!(["x", 2]))
                    .with_option(EnqueueOption::Queue(q2.clone()))
                    .meta(meta),
            ])
            .await
            .expect("batch PUSH POST /jobs/batch via Client::enqueue_batch");
        assert_eq!(jobs.len(), 3);
        let types: Vec<&str> = jobs.iter().map(|j| j.job_type.as_str()).collect();
        assert_eq!(types, ["rs.batch.a", "rs.batch.b", "rs.batch.c"]);
        let mut ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 3, "batch ids are not distinct");
        assert_eq!(jobs[0].queue, q);
        assert_eq!(jobs[1].priority, 3);
        assert_eq!(jobs[2].queue, q2);
        assert_eq!(jobs[2].args, json!(["x", 2]));
        assert_eq!(
            jobs[2].meta.as_ref().and_then(|m| m.get("src")),
            Some(&json!("batch"))
        );
        assert!(jobs.iter().all(|j| j.state == Some(JobState::Available)));
    })
    .await
}

/// INFO: `get_job` returns what PUSH stored.
#[tokio::test]
async fn info() {
    bounded(20, async {
        let c = client();
        let q = queue("info");
        let pushed = c
            .enqueue("rs.info", json!({"k": "v"}))
            .queue(&q)
            .priority(-4)
            .tags(vec!["t1".into()])
            .send()
            .await
            .expect("PUSH");
        let got = c
            .get_job(&pushed.id)
            .await
            .expect("INFO GET /jobs/{id} via Client::get_job");
        assert_eq!(got.id, pushed.id);
        assert_eq!(got.job_type, "rs.info");
        assert_eq!(got.queue, q);
        assert_eq!(got.args, json!([{"k": "v"}]));
        assert_eq!(got.priority, -4);
        assert_eq!(got.tags, vec!["t1"]);
        assert_eq!(got.state, Some(JobState::Available));
        assert_eq!(got.attempt, 0);

        let missing = c
            .get_job(&uuid::Uuid::now_v7().to_string())
            .await
            .expect_err("INFO of an unknown id must fail");
        let e = server_error(missing, "not_found");
        assert_eq!(e.http_status, 404);
        assert!(e.is_not_found(), "code {:?}", e.code);
    })
    .await
}

/// CANCEL: an available job is cancelled; cancelling it again is a 409.
#[tokio::test]
async fn cancel() {
    bounded(20, async {
        let c = client();
        let q = queue("cancel");
        let job = c
            .enqueue("rs.cancel", json!({}))
            .queue(&q)
            .send()
            .await
            .expect("PUSH");
        let cancelled = c
            .cancel_job(&job.id)
            .await
            .expect("CANCEL DELETE /jobs/{id} via Client::cancel_job");
        assert_eq!(cancelled.id, job.id);
        assert_eq!(cancelled.state, Some(JobState::Cancelled));

        let again = c
            .cancel_job(&job.id)
            .await
            .expect_err("cancelling a cancelled job must fail");
        assert_eq!(server_error(again, "conflict").http_status, 409);

        let got = c.get_job(&job.id).await.expect("INFO after cancel");
        assert_eq!(got.state, Some(JobState::Cancelled));
    })
    .await
}

/// Cron: register, list, unregister.
#[tokio::test]
async fn cron() {
    bounded(20, async {
        let c = client();
        let name = early_name("cron");
        let q = queue("cron");
        // Yearly: the registration never fires while the suite runs.
        let registered = c
            .register_cron_job(CronJobRequest {
                name: name.clone(),
                cron: "0 0 1 1 *".into(),
                timezone: "UTC".into(),
                job_type: "rs.cron.tick".into(),
                args: Some(json!([{"k": 1}])),
                meta: None,
                options: Some(json!({"queue": q})),
                overlap_policy: OverlapPolicy::Skip,
                enabled: true,
                description: Some("rust sdk interop".into()),
            })
            .await;
        if registered.is_err() {
            // The server may have stored it even though the SDK could not read the reply.
            let _ = c.unregister_cron_job(&name).await;
        }
        let created = registered.expect("POST /cron via Client::register_cron_job");
        assert_eq!(created.name, name);
        assert_eq!(created.cron, "0 0 1 1 *");
        assert_eq!(created.job_type, "rs.cron.tick");
        assert_eq!(created.timezone, "UTC");
        assert!(created.enabled);
        assert!(created.next_run_at.is_some(), "no next_run_at: {created:?}");

        let listed = c
            .list_cron_jobs()
            .await
            .expect("GET /cron via Client::list_cron_jobs");
        let mine = listed
            .iter()
            .find(|j| j.name == name)
            .unwrap_or_else(|| panic!("{name} not in the cron list"));
        assert_eq!(mine.job_type, "rs.cron.tick");

        c.unregister_cron_job(&name)
            .await
            .expect("DELETE /cron/{name} via Client::unregister_cron_job");
        let listed = c.list_cron_jobs().await.expect("list after delete");
        assert!(listed.iter().all(|j| j.name != name), "{name} still listed");
    })
    .await
}

/// Queues: list, pause, resume. While a queue is paused an SDK worker gets nothing from
/// it; after resume it gets the job. (A PUSH to a paused queue is accepted here: the
/// queue-config and admin-api specs say paused queues accept jobs, the HTTP binding shows
/// a 422 `queue_paused`; the SDK is fine either way, so the suite checks neither.)
#[tokio::test]
async fn queues_pause_resume() {
    bounded(60, async {
        let c = client();
        let q = early_name("queue");
        c.enqueue("rs.queue.probe", json!({"n": 0}))
            .queue(&q)
            .send()
            .await
            .expect("PUSH creates the queue");
        let status = |qs: Vec<ojs::Queue>| {
            qs.into_iter()
                .find(|x| x.name == q)
                .unwrap_or_else(|| panic!("queue {q} not listed"))
                .status
        };
        let listed = c
            .list_queues()
            .await
            .expect("GET /queues via Client::list_queues");
        assert_eq!(status(listed).as_deref(), Some("active"));

        c.pause_queue(&q)
            .await
            .expect("POST /queues/{name}/pause via Client::pause_queue");
        let listed = c.list_queues().await.expect("list after pause");
        assert_eq!(status(listed).as_deref(), Some("paused"));

        let ran: Log<String> = Log::default();
        let w = worker_builder(&[&q], 2).build().expect("worker");
        let r = ran.clone();
        w.register("rs.queue.probe", move |ctx: ojs::JobContext| {
            let r = r.clone();
            async move {
                r.push(ctx.job.id.clone());
                Ok(json!(null))
            }
        })
        .await;
        let running = RunningWorker::start(w);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(ran.len(), 0, "a worker fetched from a paused queue");

        c.resume_queue(&q)
            .await
            .expect("POST /queues/{name}/resume via Client::resume_queue");
        let listed = c.list_queues().await.expect("list after resume");
        assert_eq!(status(listed).as_deref(), Some("active"));
        wait_for("the job after resume", Duration::from_secs(10), || {
            let ran = ran.clone();
            async move { (ran.len() == 1).then_some(()) }
        })
        .await;
        running.stop();
    })
    .await
}

/// Queue stats count jobs by state.
#[tokio::test]
async fn queue_stats() {
    bounded(20, async {
        let c = client();
        let q = queue("stats");
        for i in 0..2 {
            c.enqueue("rs.stats", json!({"i": i}))
                .queue(&q)
                .send()
                .await
                .expect("PUSH");
        }
        c.enqueue("rs.stats", json!({"later": true}))
            .queue(&q)
            .delay(Duration::from_secs(600))
            .send()
            .await
            .expect("PUSH scheduled");
        let stats = c
            .get_queue_stats(&q)
            .await
            .expect("GET /queues/{name}/stats via Client::get_queue_stats");
        assert_eq!(stats.queue, q);
        assert_eq!(stats.status, "active");
        assert_eq!(stats.stats.available, 2, "{stats:?}");
        assert_eq!(stats.stats.scheduled, 1, "{stats:?}");
        assert_eq!(stats.stats.active, 0, "{stats:?}");
    })
    .await
}

/// Dead letter: jobs exhausted with `on_exhaustion: dead_letter` are listed, one is
/// retried (back to available, attempts reset), the other deleted.
#[tokio::test]
async fn dead_letter() {
    bounded(45, async {
        let c = client();
        let q = queue("dlq");
        let policy = RetryPolicy::new()
            .max_attempts(1)
            .on_exhaustion(OnExhaustion::DeadLetter);
        let mut ids = Vec::new();
        for i in 0..2 {
            let j = c
                .enqueue("rs.dlq.fail", json!({"i": i}))
                .queue(&q)
                .retry(policy.clone())
                .send()
                .await
                .expect("PUSH");
            ids.push(j.id);
        }
        let seen = Counts::default();
        let w = worker_builder(&[&q], 2).build().expect("worker");
        let s = seen.clone();
        w.register("rs.dlq.fail", move |ctx: ojs::JobContext| {
            let s = s.clone();
            async move {
                s.hit(&ctx.job.id);
                Err(ojs::OjsError::Handler("boom".into()))
            }
        })
        .await;
        let running = RunningWorker::start(w);

        wait_for(
            "both jobs in the dead letter list",
            Duration::from_secs(20),
            || {
                let c = c.clone();
                let q = q.clone();
                async move {
                    let (jobs, _) = c
                        .list_dead_letter_jobs(&q, 10, 0)
                        .await
                        .expect("GET /dead-letter via Client::list_dead_letter_jobs");
                    (jobs.len() == 2).then_some(())
                }
            },
        )
        .await;
        running.stop();
        // Listed again once both are in: the page that first shows both may have counted
        // its total before the second arrived.
        let (jobs, page) = c
            .list_dead_letter_jobs(&q, 10, 0)
            .await
            .expect("GET /dead-letter via Client::list_dead_letter_jobs");
        let mut listed_ids: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
        listed_ids.sort();
        let mut want = ids.clone();
        want.sort();
        assert_eq!(listed_ids, want);
        for j in &jobs {
            assert_eq!(j.state, Some(JobState::Discarded), "{j:?}");
            let err = j
                .error
                .as_ref()
                .expect("a dead letter job carries its error");
            assert!(err.message.contains("boom"), "{err:?}");
        }
        let page = page.expect("pagination");
        assert_eq!(page.total, 2);
        assert!(
            seen.snapshot().values().all(|n| *n == 1),
            "{:?}",
            seen.snapshot()
        );

        let retried = c
            .retry_dead_letter_job(&ids[0])
            .await
            .expect("POST /dead-letter/{id}/retry via Client::retry_dead_letter_job");
        assert_eq!(retried.id, ids[0]);
        assert_eq!(retried.state, Some(JobState::Available));
        assert_eq!(retried.attempt, 0, "retry must reset the attempt counter");

        c.discard_dead_letter_job(&ids[1])
            .await
            .expect("DELETE /dead-letter/{id} via Client::discard_dead_letter_job");
        let (left, _) = c.list_dead_letter_jobs(&q, 10, 0).await.expect("list");
        assert!(left.is_empty(), "dead letter list not empty: {left:?}");
    })
    .await
}
