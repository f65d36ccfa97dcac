//! Worker scenarios: the SDK's `Worker` (its fetch / ack / nack / heartbeat loop and
//! handler registration), and its transport for the one case the worker cannot express.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use ojs::{
    EnqueueOption, JobContext, JobRequest, JobState, OjsError, OnExhaustion, RetryPolicy,
    TransportMethod,
};
use serde_json::json;

use crate::common::*;

/// A handler's result is stored and shown by INFO.
#[tokio::test]
async fn handler_result() {
    bounded(60, async {
        let c = client();
        let q = queue("result");
        let job = c
            .enqueue("rs.worker.sum", json!({"a": 2, "b": 3}))
            .queue(&q)
            .send()
            .await
            .expect("PUSH");
        let calls = Counts::default();
        let w = worker_builder(&[&q], 2).build().expect("worker");
        let k = calls.clone();
        w.register("rs.worker.sum", move |ctx: JobContext| {
            let k = k.clone();
            async move {
                k.hit(&ctx.job.id);
                let a: i64 = ctx.job.arg("a")?;
                let b: i64 = ctx.job.arg("b")?;
                Ok(json!({"sum": a + b, "attempt": ctx.attempt}))
            }
        })
        .await;
        let running = RunningWorker::start(w);
        let done = wait_state(&c, &job.id, JobState::Completed, Duration::from_secs(30)).await;
        running.stop();
        assert_eq!(calls.snapshot().get(&job.id), Some(&1));
        assert_eq!(done.result, Some(json!({"sum": 5, "attempt": 1})));
        assert_eq!(done.attempt, 1);
        assert!(done.completed_at.is_some());
    })
    .await
}

/// A job of about 1 MiB (the spec's PL-001 envelope; hex that the server's deflate cannot
/// shrink, so its args go to the payload bucket) reaches the worker whole, and its result
/// reads back.
#[tokio::test]
async fn one_mebibyte_job() {
    bounded(60, async {
        let c = client();
        let q = queue("large");
        let blob: String = (0..1_000_000u32)
            .map(|i| {
                let x = i.wrapping_mul(2_654_435_761) ^ (i >> 7);
                char::from_digit(x % 16, 16).unwrap_or('0')
            })
            .collect();
        let job = c
            .enqueue("rs.worker.large", json!({"blob": blob}))
            .queue(&q)
            .send()
            .await
            .expect("PUSH of 1 MiB");
        let w = worker_builder(&[&q], 1).build().expect("worker");
        let expected = blob.clone();
        w.register("rs.worker.large", move |ctx: JobContext| {
            let expected = expected.clone();
            async move {
                let text: String = ctx.job.arg("blob")?;
                Ok(json!({"length": text.len(), "same": text == expected}))
            }
        })
        .await;
        let running = RunningWorker::start(w);
        let done = wait_state(&c, &job.id, JobState::Completed, Duration::from_secs(30)).await;
        running.stop();
        assert_eq!(
            done.result,
            Some(json!({"length": 1_000_000, "same": true}))
        );
        let read: String = done.arg("blob").expect("INFO args");
        assert!(read == blob, "INFO changed the args");
    })
    .await
}

/// A handler that fails once is retried after the policy's backoff and then succeeds.
#[tokio::test]
async fn retry_then_succeed() {
    bounded(60, async {
        let c = client();
        let q = queue("retry");
        let job = c
            .enqueue("rs.worker.flaky", json!({}))
            .queue(&q)
            .retry(
                RetryPolicy::new()
                    .max_attempts(3)
                    .initial_interval("PT1S")
                    .backoff_coefficient(2.0)
                    .jitter(false),
            )
            .send()
            .await
            .expect("PUSH");
        let log: Log<(u32, Instant)> = Log::default();
        let w = worker_builder(&[&q], 2).build().expect("worker");
        let l = log.clone();
        w.register("rs.worker.flaky", move |ctx: JobContext| {
            let l = l.clone();
            async move {
                l.push((ctx.attempt, Instant::now()));
                if ctx.attempt == 1 {
                    Err(OjsError::Handler("transient failure".into()))
                } else {
                    Ok(json!({"ok": true}))
                }
            }
        })
        .await;
        let running = RunningWorker::start(w);
        let done = wait_state(&c, &job.id, JobState::Completed, Duration::from_secs(30)).await;
        running.stop();

        let calls = log.snapshot();
        let attempts: Vec<u32> = calls.iter().map(|c| c.0).collect();
        assert_eq!(attempts, [1, 2], "attempt numbers seen by the handler");
        let gap = calls[1].1 - calls[0].1;
        assert!(
            gap >= Duration::from_millis(900) && gap <= Duration::from_secs(16),
            "retry came {gap:?} after the failure; the policy says PT1S without jitter \
             (+ at most 15 s for a loaded machine's poll and promotion)"
        );
        assert_eq!(done.attempt, 2);
        assert_eq!(done.result, Some(json!({"ok": true})));
    })
    .await
}

/// A job that always fails is discarded after max_attempts, and with
/// `on_exhaustion: dead_letter` it is in the dead letter list.
#[tokio::test]
async fn exhaustion() {
    bounded(60, async {
        let c = client();
        let q = queue("exhaust");
        let job = c
            .enqueue("rs.worker.doomed", json!({}))
            .queue(&q)
            .retry(
                RetryPolicy::new()
                    .max_attempts(2)
                    .initial_interval("PT1S")
                    .jitter(false)
                    .on_exhaustion(OnExhaustion::DeadLetter),
            )
            .send()
            .await
            .expect("PUSH");
        let log: Log<u32> = Log::default();
        let w = worker_builder(&[&q], 2).build().expect("worker");
        let l = log.clone();
        w.register("rs.worker.doomed", move |ctx: JobContext| {
            let l = l.clone();
            async move {
                l.push(ctx.attempt);
                Err(OjsError::Handler("always fails".into()))
            }
        })
        .await;
        let running = RunningWorker::start(w);
        let done = wait_state(&c, &job.id, JobState::Discarded, Duration::from_secs(30)).await;
        // Long enough for a (wrong) third attempt to show up.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        running.stop();

        assert_eq!(log.snapshot(), [1, 2], "attempts seen by the handler");
        assert_eq!(done.attempt, 2);
        let err = done
            .error
            .as_ref()
            .expect("a discarded job carries its last error");
        assert!(err.message.contains("always fails"), "{err:?}");
        let (dead, _) = c
            .list_dead_letter_jobs(&q, 10, 0)
            .await
            .expect("GET /dead-letter via Client::list_dead_letter_jobs");
        assert!(
            dead.iter().any(|j| j.id == job.id),
            "exhausted job not in the dead letter list: {dead:?}"
        );
    })
    .await
}

/// `OjsError::NonRetryable` (the SDK sends `retryable: false`) discards at once, whatever
/// attempts are left.
#[tokio::test]
async fn non_retryable_error() {
    bounded(60, async {
        let c = client();
        let q = queue("nonretry");
        let job = c
            .enqueue("rs.worker.fatal", json!({}))
            .queue(&q)
            .retry(
                RetryPolicy::new()
                    .max_attempts(5)
                    .initial_interval("PT1S")
                    .jitter(false),
            )
            .send()
            .await
            .expect("PUSH");
        let log: Log<u32> = Log::default();
        let w = worker_builder(&[&q], 1).build().expect("worker");
        let l = log.clone();
        w.register("rs.worker.fatal", move |ctx: JobContext| {
            let l = l.clone();
            async move {
                l.push(ctx.attempt);
                Err(OjsError::NonRetryable("bad input".into()))
            }
        })
        .await;
        let running = RunningWorker::start(w);
        let done = wait_state(&c, &job.id, JobState::Discarded, Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        running.stop();
        assert_eq!(
            log.snapshot(),
            [1],
            "a non-retryable failure is not retried"
        );
        assert_eq!(done.attempt, 1);
    })
    .await
}

/// A delayed job is not run before its time, and runs within ~2 s of it.
#[tokio::test]
async fn delayed_on_time() {
    bounded(60, async {
        let c = client();
        let q = queue("delay");
        let log: Log<(String, chrono::DateTime<Utc>)> = Log::default();
        let w = worker_builder(&[&q], 2).build().expect("worker");
        let l = log.clone();
        w.register("rs.worker.later", move |ctx: JobContext| {
            let l = l.clone();
            async move {
                l.push((ctx.job.id.clone(), Utc::now()));
                Ok(json!(null))
            }
        })
        .await;
        // The worker is already polling when the jobs arrive.
        let running = RunningWorker::start(w);
        let at = Utc::now() + chrono::Duration::seconds(3);
        let by_time = c
            .enqueue("rs.worker.later", json!({"how": "scheduled_at"}))
            .queue(&q)
            .scheduled_at(at)
            .send()
            .await
            .expect("PUSH scheduled_at");
        let by_delay = c
            .enqueue("rs.worker.later", json!({"how": "delay"}))
            .queue(&q)
            .delay(Duration::from_secs(2))
            .send()
            .await
            .expect("PUSH delay");
        assert_eq!(by_time.state, Some(JobState::Scheduled));
        assert_eq!(by_delay.state, Some(JobState::Scheduled));

        wait_for("both delayed jobs to run", Duration::from_secs(30), || {
            let log = log.clone();
            async move { (log.len() >= 2).then_some(()) }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        running.stop();

        let runs = log.snapshot();
        assert_eq!(runs.len(), 2, "each delayed job runs once: {runs:?}");
        for job in [&by_time, &by_delay] {
            let due = job.scheduled_at.expect("scheduled_at");
            let ran = runs
                .iter()
                .find(|r| r.0 == job.id)
                .unwrap_or_else(|| panic!("job {} did not run", job.id))
                .1;
            let late = (ran - due).num_milliseconds();
            assert!(late >= -50, "job {} ran {} ms early", job.id, -late);
            // Never early; "on time" allows the poll interval plus a loaded machine (a
            // run beside two CPU hogs measured over 5 s).
            assert!(late <= 15_000, "job {} ran {late} ms late", job.id);
        }
    })
    .await
}

/// With concurrency 1, higher priority runs first.
#[tokio::test]
async fn priority_order() {
    bounded(60, async {
        let c = client();
        let q = queue("prio");
        let priorities = [1, 9, -4, 5, 3, 7];
        for p in priorities {
            c.enqueue("rs.worker.prio", json!({"p": p}))
                .queue(&q)
                .priority(p)
                .send()
                .await
                .expect("PUSH");
        }
        let log: Log<i64> = Log::default();
        let w = worker_builder(&[&q], 1).build().expect("worker");
        let l = log.clone();
        w.register("rs.worker.prio", move |ctx: JobContext| {
            let l = l.clone();
            async move {
                l.push(ctx.job.arg("p")?);
                Ok(json!(null))
            }
        })
        .await;
        let running = RunningWorker::start(w);
        wait_for("all six jobs", Duration::from_secs(20), || {
            let log = log.clone();
            async move { (log.len() >= 6).then_some(()) }
        })
        .await;
        running.stop();
        let mut want: Vec<i64> = priorities.iter().map(|p| i64::from(*p)).collect();
        want.sort_by(|a, b| b.cmp(a));
        assert_eq!(log.snapshot(), want, "order of execution");
    })
    .await
}

/// A job fetched with a 5 s lease and never acknowledged is delivered again after the
/// lease ends, and not before. The first FETCH goes through the SDK's transport (the
/// `Worker` fetches with the server's default lease and always acks or nacks); the
/// redelivery is picked up by an SDK `Worker`. 5 s, not less: on a loaded machine
/// DynamoDB Local has taken 1.7 s for one FETCH, and two must fit in the lease.
#[tokio::test]
async fn lease_expiry_redelivers() {
    bounded(60, async {
        let c = client();
        let q = queue("lease");
        let job = c
            .enqueue("rs.worker.lease", json!({}))
            .queue(&q)
            .send()
            .await
            .expect("PUSH");

        let fetch = |lease_ms: u64| {
            let c = c.clone();
            let q = q.clone();
            async move {
                let body = c
                    .transport()
                    .request(
                        TransportMethod::Post,
                        "/workers/fetch",
                        Some(
                            json!({"queues": [q], "count": 1, "worker_id": "rs-lease-holder",
                                    "visibility_timeout_ms": lease_ms}),
                        ),
                        false,
                    )
                    .await
                    .expect("POST /workers/fetch via the SDK transport")
                    .expect("FETCH reply body");
                serde_json::from_value::<Vec<ojs::Job>>(body["jobs"].clone())
                    .expect("FETCH reply jobs, as the SDK's Job")
            }
        };
        let fetched_at = Instant::now();
        let first = fetch(5000).await;
        assert_eq!(first.len(), 1, "the first FETCH claims the job");
        assert_eq!(first[0].id, job.id);
        assert_eq!(first[0].attempt, 1);
        assert!(
            fetch(5000).await.is_empty(),
            "a leased job is not delivered twice"
        );

        let log: Log<(u32, Instant)> = Log::default();
        let w = worker_builder(&[&q], 1).build().expect("worker");
        let l = log.clone();
        w.register("rs.worker.lease", move |ctx: JobContext| {
            let l = l.clone();
            async move {
                l.push((ctx.attempt, Instant::now()));
                Ok(json!({"redelivered": true}))
            }
        })
        .await;
        let running = RunningWorker::start(w);
        let done = wait_state(&c, &job.id, JobState::Completed, Duration::from_secs(30)).await;
        running.stop();
        let runs = log.snapshot();
        assert_eq!(runs.len(), 1, "redelivered once: {runs:?}");
        assert_eq!(runs[0].0, 2, "the redelivery is attempt 2");
        assert!(
            runs[0].1 - fetched_at >= Duration::from_millis(5000),
            "redelivered {:?} after the first FETCH, before its 5 s lease ended",
            runs[0].1 - fetched_at
        );
        assert_eq!(done.attempt, 2);
    })
    .await
}

/// `JobContext::heartbeat` keeps a job's 10 s lease alive through a 12 s handler: the job
/// is not redelivered and its one attempt completes. (The lease leaves room for a slow
/// FETCH and slow beats: the lease starts when the server claims the job, the first beat
/// comes after the reply, 400 ms of work and the beat's own round trip; a CI machine
/// running every SDK suite at once took 6 s over one request, more than a 4 s lease.)
#[tokio::test]
async fn heartbeat_extends_lease() {
    bounded(90, async {
        let c = client();
        let q = queue("beat");
        // EnqueueBuilder has no visibility-timeout setter; JobRequest takes the option.
        let job = c
            .enqueue_batch(vec![JobRequest::new("rs.worker.slow", json!({}))
                .with_option(EnqueueOption::Queue(q.clone()))
                .with_option(EnqueueOption::VisibilityTimeout(Duration::from_secs(10)))])
            .await
            .expect("batch PUSH")
            .remove(0);
        let calls: Log<u32> = Log::default();
        let beats: Log<Result<(), String>> = Log::default();
        let w = worker_builder(&[&q], 2)
            .heartbeat_interval(Duration::from_secs(30))
            .build()
            .expect("worker");
        let (l, b) = (calls.clone(), beats.clone());
        w.register("rs.worker.slow", move |ctx: JobContext| {
            let (l, b) = (l.clone(), b.clone());
            async move {
                l.push(ctx.attempt);
                for _ in 0..30 {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    b.push(ctx.heartbeat().await.map_err(|e| e.to_string()));
                }
                Ok(json!({"slow": true}))
            }
        })
        .await;
        let running = RunningWorker::start(w);
        let done = wait_state(&c, &job.id, JobState::Completed, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        running.stop();
        let failed: Vec<String> = beats
            .snapshot()
            .into_iter()
            .filter_map(Result::err)
            .collect();
        assert!(failed.is_empty(), "heartbeats failed: {failed:?}");
        assert_eq!(
            calls.snapshot(),
            [1],
            "the job was redelivered despite heartbeats"
        );
        assert_eq!(done.attempt, 1);
    })
    .await
}

/// 120 jobs, worker concurrency 8: every job completes, and no job is run twice.
#[tokio::test]
async fn many_jobs_exactly_once() {
    bounded(90, async {
        const N: usize = 120;
        const CONCURRENCY: usize = 8;
        let c = client();
        let q = queue("bulk");
        let jobs = c
            .enqueue_batch(
                (0..N)
                    .map(|i| {
                        JobRequest::new("rs.worker.bulk", json!({"i": i}))
                            .with_option(EnqueueOption::Queue(q.clone()))
                    })
                    .collect(),
            )
            .await
            .expect("batch PUSH of 120 jobs");
        assert_eq!(jobs.len(), N);

        let counts = Counts::default();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let w = worker_builder(&[&q], CONCURRENCY).build().expect("worker");
        let (k, f, p) = (counts.clone(), in_flight.clone(), peak.clone());
        w.register("rs.worker.bulk", move |ctx: JobContext| {
            let (k, f, p) = (k.clone(), f.clone(), p.clone());
            async move {
                k.hit(&ctx.job.id);
                let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                f.fetch_sub(1, Ordering::SeqCst);
                Ok(json!({"i": ctx.job.arg::<i64>("i")?}))
            }
        })
        .await;
        let started = Instant::now();
        let running = RunningWorker::start(w);
        wait_for(
            "every job to reach a handler",
            Duration::from_secs(60),
            || {
                let counts = counts.clone();
                async move { (counts.snapshot().len() >= N).then_some(()) }
            },
        )
        .await;
        // Let in-flight acks land, and give a duplicate delivery time to show up.
        tokio::time::sleep(Duration::from_secs(2)).await;
        running.stop();
        eprintln!("{N} jobs handled in {:?}", started.elapsed());

        let seen = counts.snapshot();
        let twice: Vec<(&String, &u32)> = seen.iter().filter(|(_, n)| **n != 1).collect();
        assert!(twice.is_empty(), "jobs run more than once: {twice:?}");
        let unknown: Vec<&String> = seen
            .keys()
            .filter(|id| !jobs.iter().any(|j| &j.id == *id))
            .collect();
        assert!(
            unknown.is_empty(),
            "handlers saw jobs that were not pushed: {unknown:?}"
        );
        let peak = peak.load(Ordering::SeqCst);
        assert!(
            (4..=CONCURRENCY).contains(&peak),
            "peak handler concurrency {peak}, configured {CONCURRENCY}"
        );
        for j in &jobs {
            let got = c
                .get_job(&j.id)
                .await
                .unwrap_or_else(|e| panic!("INFO {}: {e}", j.id));
            assert_eq!(got.state, Some(JobState::Completed), "job {}", j.id);
            assert_eq!(got.attempt, 1, "job {}", j.id);
        }
    })
    .await
}
