//! Push delivery (ojs-serverless.md §2): the registration API, the address guard, and
//! deliveries to an in-process endpoint that checks every header and signature (the
//! official SDKs' adapters are driven in tests/tests/push_sdk.rs).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

const SECRET: &str = "whsec_test_0123456789abcdef";

fn registration(endpoint: &str, job_types: &[&str], queue: &str) -> Value {
    json!({
        "endpoint": endpoint,
        "job_types": job_types,
        "queues": [queue],
        "config": {"max_concurrency": 4, "timeout_ms": 5000, "signing_secret": SECRET},
    })
}

#[tokio::test]
async fn registration_crud_never_returns_the_secret() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let created = app
        .call(
            Method::POST,
            "/ojs/v1/push/endpoints",
            Some(registration(
                "https://example.com/ojs",
                &["email.send"],
                "mail",
            )),
        )
        .await?;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let e = &created.body["endpoint"];
    let id = e["id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("pe_"), "{e}");
    assert_eq!(e["endpoint"], "https://example.com/ojs");
    assert_eq!(e["job_types"], json!(["email.send"]));
    assert_eq!(e["queues"], json!(["mail"]));
    assert_eq!(e["config"]["max_concurrency"], 4);
    assert_eq!(e["config"]["timeout_ms"], 5000);

    let got = app
        .call(Method::GET, &format!("/ojs/v1/push/endpoints/{id}"), None)
        .await?;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["endpoint"], *e);
    let listed = app
        .call(Method::GET, "/ojs/v1/push/endpoints", None)
        .await?;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body["endpoints"], json!([e]));
    for body in [&created.body, &got.body, &listed.body] {
        assert!(!body.to_string().contains(SECRET), "secret leaked: {body}");
    }

    let deleted = app
        .call(
            Method::DELETE,
            &format!("/ojs/v1/push/endpoints/{id}"),
            None,
        )
        .await?;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    for (method, path) in [
        (Method::GET, format!("/ojs/v1/push/endpoints/{id}")),
        (Method::DELETE, format!("/ojs/v1/push/endpoints/{id}")),
        (Method::GET, "/ojs/v1/push/endpoints/pe_nope".to_owned()),
    ] {
        let r = app.call(method, &path, None).await?;
        assert_eq!(r.status, 404, "{path}: {:?}", r.body);
        assert_eq!(r.body["error"]["code"], "not_found");
    }
    let listed = app
        .call(Method::GET, "/ojs/v1/push/endpoints", None)
        .await?;
    assert_eq!(listed.body["endpoints"], json!([]));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn registration_validation() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let good = registration("https://example.com/", &["a.b"], "default");
    let with = |path: &[&str], v: Value| {
        let mut b = good.clone();
        let mut at = &mut b;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        at[path[path.len() - 1]] = v;
        b
    };
    let cases = [
        (json!([1]), 400),
        (with(&["job_types"], Value::Null), 400),
        (with(&["job_types"], json!([])), 422),
        (with(&["job_types"], json!(["Bad Type"])), 400),
        (
            with(
                &["queues"],
                json!((0..11).map(|i| format!("q{i}")).collect::<Vec<_>>()),
            ),
            422,
        ),
        (with(&["endpoint"], json!("ftp://example.com/")), 422),
        (
            with(
                &["endpoint"],
                json!(format!("https://example.com/{}", "a".repeat(2100))),
            ),
            422,
        ),
        (with(&["config", "max_concurrency"], json!(0)), 422),
        (with(&["config", "max_concurrency"], json!(101)), 422),
        (with(&["config", "timeout_ms"], json!(900_001)), 422),
        (with(&["config", "timeout_ms"], json!("30s")), 422),
        (with(&["config", "signing_secret"], Value::Null), 400),
        (with(&["config", "signing_secret"], json!("short")), 422),
    ];
    // A Lambda function ARN is an endpoint too (invoked directly); anything else under arn: is not.
    let arn = with(
        &["endpoint"],
        json!("arn:aws:lambda:eu-west-1:123456789012:function:worker:live"),
    );
    let r = app
        .call(Method::POST, "/ojs/v1/push/endpoints", Some(arn))
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let cases = cases.into_iter().chain([(
        with(
            &["endpoint"],
            json!("arn:aws:sqs:eu-west-1:123456789012:queue"),
        ),
        422,
    )]);
    for (body, status) in cases {
        let r = app
            .call(Method::POST, "/ojs/v1/push/endpoints", Some(body.clone()))
            .await?;
        assert_eq!(r.status, status, "{body}: {:?}", r.body);
        assert!(r.body["error"]["code"].is_string(), "{:?}", r.body);
        assert!(!r.body.to_string().contains(SECRET));
    }
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn private_and_metadata_addresses_are_refused() -> anyhow::Result<()> {
    // The default: OJS_PUSH_ALLOW_PRIVATE off.
    let app = TestApp::spawn().await?;
    for endpoint in [
        "http://127.0.0.1:9000/",
        "https://127.0.0.1/",
        "https://10.0.0.8/",
        "https://192.168.1.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/",
        "https://[fd00:ec2::254]/",
        "https://localhost/",
        "http://example.com/",
    ] {
        let r = app
            .call(
                Method::POST,
                "/ojs/v1/push/endpoints",
                Some(registration(endpoint, &["a"], "default")),
            )
            .await?;
        assert_eq!(r.status, 422, "{endpoint}: {:?}", r.body);
        assert_eq!(r.body["error"]["code"], "validation_error");
    }
    let listed = app
        .call(Method::GET, "/ojs/v1/push/endpoints", None)
        .await?;
    assert_eq!(listed.body["endpoints"], json!([]));
    app.teardown().await;
    Ok(())
}

/// What the fake endpoint saw of one delivery.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    endpoint: usize,
    job_id: String,
    delivery_id: String,
    attempt: u64,
}

#[derive(Clone, Default)]
struct Fake {
    seen: Arc<Mutex<Vec<Seen>>>,
    problems: Arc<Mutex<Vec<String>>>,
    in_flight: Arc<Mutex<(usize, usize)>>,
    delay: Duration,
}

/// A push endpoint on loopback: checks the §2.2 headers and the signature, records the
/// delivery, waits `delay`, and completes with the job's args as its result.
async fn fake_endpoint(fake: Fake, index: usize) -> anyhow::Result<String> {
    async fn handle(
        State((fake, index)): State<(Fake, usize)>,
        headers: HeaderMap,
        body: Bytes,
    ) -> (StatusCode, Json<Value>) {
        let h = |k: &str| {
            headers
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let mut problems = Vec::new();
        let expected = ojs_core::push::signature(SECRET.as_bytes(), &h("x-ojs-timestamp"), &body);
        if h("x-ojs-signature") != expected {
            problems.push("bad signature".to_owned());
        }
        if h("x-ojs-delivery-id") != parsed["delivery_id"].as_str().unwrap_or("?")
            || !h("x-ojs-delivery-id").starts_with("del_")
        {
            problems.push(format!(
                "delivery id header {:?} vs body {}",
                h("x-ojs-delivery-id"),
                parsed["delivery_id"]
            ));
        }
        if h("x-ojs-job-id") != parsed["job"]["id"].as_str().unwrap_or("?") {
            problems.push("job id header differs from the body's".into());
        }
        if h("x-ojs-idempotency-window").parse::<u64>().is_err() {
            problems.push("no idempotency window".into());
        }
        if parsed["job"]["state"] != "active" || !parsed["worker_id"].is_string() {
            problems.push(format!("job not active or no worker id: {parsed}"));
        }
        if !problems.is_empty() {
            if let Ok(mut p) = fake.problems.lock() {
                p.extend(problems);
            }
            return (StatusCode::UNAUTHORIZED, Json(json!({"error": "rejected"})));
        }
        if let Ok(mut s) = fake.seen.lock() {
            s.push(Seen {
                at: Instant::now(),
                endpoint: index,
                job_id: h("x-ojs-job-id"),
                delivery_id: h("x-ojs-delivery-id"),
                attempt: parsed["job"]["attempt"].as_u64().unwrap_or(0),
            });
        }
        if let Ok(mut f) = fake.in_flight.lock() {
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        tokio::time::sleep(fake.delay).await;
        if let Ok(mut f) = fake.in_flight.lock() {
            f.0 -= 1;
        }
        (
            StatusCode::OK,
            Json(
                json!({"status": "completed", "result": {"args": parsed["job"]["args"], "by": index}}),
            ),
        )
    }
    let router = Router::new()
        .route("/", post(handle))
        .with_state((fake, index));
    let (url, _) = ojs_tests::serve_on_loopback(router).await?;
    Ok(format!("{url}/"))
}

async fn register(app: &TestApp, body: Value) -> anyhow::Result<String> {
    let r = app
        .call(Method::POST, "/ojs/v1/push/endpoints", Some(body))
        .await?;
    anyhow::ensure!(r.status == 201, "register: {:?}", r.body);
    Ok(r.body["endpoint"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Polls INFO until `id` reaches a terminal state (or the deadline).
/// Pauses or resumes `queue`.
async fn set_paused(app: &TestApp, queue: &str, paused: bool) -> anyhow::Result<()> {
    let verb = if paused { "pause" } else { "resume" };
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/queues/{queue}/{verb}"),
            None,
        )
        .await?;
    anyhow::ensure!(r.status == 200, "{verb}: {:?}", r.body);
    Ok(())
}

pub async fn wait_terminal(app: &TestApp, id: &str, within: Duration) -> anyhow::Result<Value> {
    let until = Instant::now() + within;
    loop {
        let r = app.info(id).await?;
        let state = r.body["job"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if ["completed", "discarded", "cancelled"].contains(&state.as_str())
            || Instant::now() > until
        {
            return Ok(r.body["job"].clone());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn pushed_jobs_complete_with_signed_deliveries() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let fake = Fake::default();
    let url = fake_endpoint(fake.clone(), 0).await?;
    register(&app, registration(&url, &["push.echo"], "pushq")).await?;
    let started = Instant::now();
    let mut ids = Vec::new();
    let mut latencies = Vec::new();
    // One job at a time, to measure push -> handler and the writes of one pushed job.
    let before = app.store.usage();
    for i in 0..5 {
        let pushed = Instant::now();
        let r = app
            .push(json!({"type": "push.echo", "queue": "pushq", "args": [i]}))
            .await?;
        assert_eq!(r.status, 201, "{:?}", r.body);
        let id = r.body["job"]["id"].as_str().unwrap_or_default().to_owned();
        let job = wait_terminal(&app, &id, Duration::from_secs(10)).await?;
        assert_eq!(job["state"], "completed", "{job}");
        let seen = fake.seen.lock().map(|s| s.clone()).unwrap_or_default();
        if let Some(s) = seen.iter().find(|s| s.job_id == id) {
            latencies.push(s.at.duration_since(pushed));
        }
        ids.push(id);
    }
    let after = app.store.usage();
    latencies.sort();
    eprintln!(
        "push: push -> handler {:?} (median of {}, local stream polled every 50 ms); {:.1} write units per pushed job (PUSH, claim, ACK, slot release; INFO polls read only)",
        latencies.get(latencies.len() / 2),
        latencies.len(),
        (after.write_units - before.write_units) / 5.0,
    );
    assert_eq!(latencies.len(), 5);
    // The same lifecycle polled, for comparison: PUSH + FETCH + ACK on a queue without
    // endpoints.
    let before = app.store.usage();
    for i in 0..5 {
        let r = app
            .push(json!({"type": "push.echo", "queue": "polledq", "args": [i]}))
            .await?;
        assert_eq!(r.status, 201);
        ojs_tests::after_index_lag().await;
        let f = app
            .fetch(json!({"queues": ["polledq"], "count": 1, "worker_id": "w"}))
            .await?;
        let id = f.body["jobs"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let a = app
            .ack(json!({"job_id": id, "result": {"args": [i]}}))
            .await?;
        assert_eq!(a.status, 200, "{:?}", a.body);
    }
    let after = app.store.usage();
    eprintln!(
        "push: {:.1} write units per polled job (PUSH, FETCH, ACK)",
        (after.write_units - before.write_units) / 5.0
    );
    // A job of another type on the queue is not pushed.
    let other = app
        .push(json!({"type": "not.pushed", "queue": "pushq", "args": []}))
        .await?;
    for (i, id) in ids.iter().enumerate() {
        let job = wait_terminal(&app, id, Duration::from_secs(10)).await?;
        assert_eq!(job["state"], "completed", "{job}");
        assert_eq!(job["result"], json!({"args": [i], "by": 0}));
    }
    eprintln!(
        "push: 5 jobs pushed and completed in {:?}",
        started.elapsed()
    );
    let problems = fake.problems.lock().map(|p| p.clone()).unwrap_or_default();
    assert!(problems.is_empty(), "{problems:?}");
    let other_id = other.body["job"]["id"].as_str().unwrap_or_default();
    assert_eq!(app.info(other_id).await?.body["job"]["state"], "available");
    let seen = fake.seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen.len(), 5, "{seen:?}");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn one_job_never_goes_to_two_endpoints_or_a_poller() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let fake = Fake {
        delay: Duration::from_millis(20),
        ..Fake::default()
    };
    for i in 0..2 {
        let url = fake_endpoint(fake.clone(), i).await?;
        register(&app, registration(&url, &["race.job"], "race")).await?;
    }
    let mut ids = Vec::new();
    for i in 0..30 {
        let r = app
            .push(json!({"type": "race.job", "queue": "race", "args": [i]}))
            .await?;
        ids.push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    // A polling worker competes for the same jobs meanwhile.
    let mut fetched: Vec<String> = Vec::new();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let r = app
            .fetch(json!({"queues": ["race"], "count": 5, "worker_id": "poller"}))
            .await?;
        for job in r.body["jobs"].as_array().cloned().unwrap_or_default() {
            let id = job["id"].as_str().unwrap_or_default().to_owned();
            let a = app
                .ack(json!({"job_id": id, "result": {"by": "poller"}}))
                .await?;
            assert_eq!(a.status, 200, "{:?}", a.body);
            fetched.push(id);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The jobs the poller left are delivered by the catch-up (every second); the time
    // allowed covers a DynamoDB Local slowed by the suite's other tests.
    for id in &ids {
        let job = wait_terminal(&app, id, Duration::from_secs(30)).await?;
        assert_eq!(job["state"], "completed", "{job}");
    }
    let seen = fake.seen.lock().map(|s| s.clone()).unwrap_or_default();
    let mut per_job: HashMap<&str, Vec<usize>> = HashMap::new();
    for s in &seen {
        per_job.entry(&s.job_id).or_default().push(s.endpoint);
    }
    for id in &ids {
        let pushed = per_job.get(id.as_str()).map_or(0, Vec::len);
        let polled = fetched.iter().filter(|f| *f == id).count();
        assert_eq!(
            pushed + polled,
            1,
            "job {id}: pushed to {:?}, fetched {polled}",
            per_job.get(id.as_str())
        );
    }
    eprintln!(
        "push race: {} pushed ({} to endpoint 0), {} fetched",
        seen.len(),
        seen.iter().filter(|s| s.endpoint == 0).count(),
        fetched.len()
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn max_concurrency_holds_and_waiting_jobs_follow() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let fake = Fake {
        delay: Duration::from_millis(300),
        ..Fake::default()
    };
    let url = fake_endpoint(fake.clone(), 0).await?;
    let mut body = registration(&url, &["slow.job"], "narrow");
    body["config"]["max_concurrency"] = json!(2);
    register(&app, body).await?;
    let mut ids = Vec::new();
    for i in 0..8 {
        let r = app
            .push(json!({"type": "slow.job", "queue": "narrow", "args": [i]}))
            .await?;
        ids.push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    for id in &ids {
        let job = wait_terminal(&app, id, Duration::from_secs(20)).await?;
        assert_eq!(job["state"], "completed", "{job}");
        assert_eq!(job["attempt"], 1, "{job}");
    }
    let peak = fake.in_flight.lock().map(|f| f.1).unwrap_or(0);
    assert!((1..=2).contains(&peak), "peak in flight {peak}");
    let seen = fake.seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen.len(), 8);
    assert!(seen
        .iter()
        .all(|s| s.attempt == 1 && s.delivery_id.starts_with("del_")));
    app.teardown().await;
    Ok(())
}

/// A tenant's `max_concurrency` (ojs-multi-tenancy.md §8.1) holds for pushed jobs as for
/// fetched ones: an endpoint allowing 8 at once gets one of the tenant's jobs at a time,
/// the others wait and follow as each completes, and another tenant's job is not held
/// behind them.
#[tokio::test]
async fn a_tenants_max_concurrency_holds_for_pushed_jobs() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let limits = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/tenants/tpush/limits",
            Some(json!({"max_concurrency": 1})),
        )
        .await?;
    anyhow::ensure!(
        limits.status == 200 || limits.status == 201,
        "{}",
        limits.body
    );
    let fake = Fake {
        delay: Duration::from_millis(300),
        ..Fake::default()
    };
    let url = fake_endpoint(fake.clone(), 0).await?;
    let mut body = registration(&url, &["tenant.job"], "tenanted");
    body["config"]["max_concurrency"] = json!(8);
    register(&app, body).await?;
    let mut ids = Vec::new();
    for i in 0..4 {
        let r = app
            .push(
                json!({"type": "tenant.job", "queue": "tenanted", "args": [i],
                "meta": {"tenant_id": "tpush"}}),
            )
            .await?;
        anyhow::ensure!(r.status == 201, "{}", r.body);
        ids.push(r.body["job"]["id"].as_str().unwrap_or_default().to_owned());
    }
    let other = app
        .push(
            json!({"type": "tenant.job", "queue": "tenanted", "args": ["other"],
            "meta": {"tenant_id": "tother"}}),
        )
        .await?;
    let other_id = other.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Hang guards only: the assertions are on what the endpoint saw, not on when.
    for id in ids.iter().chain([&other_id]) {
        let job = wait_terminal(&app, id, Duration::from_secs(120)).await?;
        assert_eq!(job["state"], "completed", "{job}");
        assert_eq!(job["attempt"], 1, "{job}");
    }
    let seen = fake.seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen.len(), 5, "{seen:?}");
    // The tenant's deliveries never overlapped: each began after the one before it ended
    // (the endpoint holds each for 300 ms; in between, the ACK and the next claim).
    let mut tenant_starts: Vec<Instant> = seen
        .iter()
        .filter(|s| ids.contains(&s.job_id))
        .map(|s| s.at)
        .collect();
    tenant_starts.sort();
    assert_eq!(tenant_starts.len(), 4);
    for pair in tenant_starts.windows(2) {
        assert!(
            pair[1] - pair[0] >= fake.delay,
            "two of the tenant's deliveries overlapped: {:?} apart",
            pair[1] - pair[0]
        );
    }
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn deliveries_never_reach_a_name_that_resolves_to_loopback() -> anyhow::Result<()> {
    // Registered while private targets were allowed; the dispatcher no longer allows them
    // (as after OJS_PUSH_ALLOW_PRIVATE is turned off, or a name re-pointed at 127.0.0.1).
    let app = TestApp::spawn_with_push_config(ojs_push::PushConfig::local(false)).await?;
    let fake = Fake::default();
    let url = fake_endpoint(fake.clone(), 0).await?;
    let port = url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    register(
        &app,
        registration(
            &format!("https://localhost:{port}/"),
            &["guarded.job"],
            "guarded",
        ),
    )
    .await?;
    let r = app
        .push(json!({"type": "guarded.job", "queue": "guarded", "args": [], "retry": {"max_attempts": 1}}))
        .await?;
    let id = r.body["job"]["id"].as_str().unwrap_or_default().to_owned();
    let job = wait_terminal(&app, &id, Duration::from_secs(10)).await?;
    assert_eq!(job["state"], "discarded", "{job}");
    let error = job["error"].to_string();
    assert!(error.contains("no allowed address"), "{error}");
    assert!(fake.seen.lock().map(|s| s.is_empty()).unwrap_or(false));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_paused_queue_is_pushed_once_resumed() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let fake = Fake::default();
    let url = fake_endpoint(fake.clone(), 0).await?;
    register(&app, registration(&url, &["paused.job"], "pausable")).await?;
    set_paused(&app, "pausable", true).await?;
    let r = app
        .push(json!({"type": "paused.job", "queue": "pausable", "args": []}))
        .await?;
    let id = r.body["job"]["id"].as_str().unwrap_or_default().to_owned();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(app.info(&id).await?.body["job"]["state"], "available");
    assert!(fake.seen.lock().map(|s| s.is_empty()).unwrap_or(false));
    // Resuming writes no job: the periodic catch-up delivers it.
    set_paused(&app, "pausable", false).await?;
    let job = wait_terminal(&app, &id, Duration::from_secs(10)).await?;
    assert_eq!(job["state"], "completed", "{job}");
    app.teardown().await;
    Ok(())
}

/// Registers `fake` for `<queue>.job` on `queue`, pauses the queue and pushes three jobs
/// of that type and one of a type no endpoint takes (left to polling workers); waits a
/// second and checks that nothing was delivered. Returns the pushed ids and the other one.
async fn waiting_on_a_paused_queue(
    app: &TestApp,
    fake: &Fake,
    queue: &str,
) -> anyhow::Result<(Vec<String>, String)> {
    let job_type = format!("{queue}.job");
    let url = fake_endpoint(fake.clone(), 0).await?;
    register(app, registration(&url, &[job_type.as_str()], queue)).await?;
    set_paused(app, queue, true).await?;
    let id = |r: &ojs_tests::Reply| r.body["job"]["id"].as_str().unwrap_or_default().to_owned();
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = app
            .push(json!({"type": job_type, "queue": queue, "args": [i]}))
            .await?;
        ids.push(id(&r));
    }
    let polled = app
        .push(json!({"type": "polled.job", "queue": queue, "args": []}))
        .await?;
    // The stream's offers of the three, refused while the queue is paused, have ended
    // (on a loaded machine one that ran after the resume below would deliver its job).
    app.push_offers_settled(Duration::from_secs(60)).await?;
    assert!(fake.seen.lock().map(|s| s.is_empty()).unwrap_or(false));
    Ok((ids, id(&polled)))
}

#[tokio::test]
async fn a_resumed_queue_delivers_its_waiting_jobs_without_the_scheduler() -> anyhow::Result<()> {
    // As on AWS: deliveries start from the change stream only. The resume nudges the jobs
    // that became available while the queue was paused.
    let app = TestApp::spawn_with_push_from_stream_only().await?;
    let fake = Fake::default();
    let (ids, polled) = waiting_on_a_paused_queue(&app, &fake, "resumed").await?;
    set_paused(&app, "resumed", false).await?;
    for id in &ids {
        let job = wait_terminal(&app, id, Duration::from_secs(10)).await?;
        assert_eq!(job["state"], "completed", "{job}");
    }
    assert_eq!(fake.seen.lock().map(|s| s.len()).unwrap_or(0), 3);
    assert_eq!(app.info(&polled).await?.body["job"]["state"], "available");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn the_schedulers_nudge_delivers_jobs_left_waiting_on_aws() -> anyhow::Result<()> {
    // On AWS no process catches up periodically: a job that became available while its
    // queue was paused, whose resume did not nudge it (the request died after its write),
    // waits until the scheduler nudges it.
    let app = TestApp::spawn_with_push_from_stream_only().await?;
    let fake = Fake::default();
    let (ids, polled) = waiting_on_a_paused_queue(&app, &fake, "nudged").await?;
    app.store.engine().set_paused("nudged", false).await?;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    for id in &ids {
        assert_eq!(app.info(id).await?.body["job"]["state"], "available");
    }
    assert!(fake.seen.lock().map(|s| s.is_empty()).unwrap_or(false));
    // Only jobs that waited since before the cutoff are nudged.
    let before_the_pushes = ojs_core::time::now() - chrono::TimeDelta::seconds(60);
    let now = ojs_core::time::now();
    assert_eq!(
        app.store
            .push_endpoints()
            .nudge_waiting(now, before_the_pushes)
            .await?,
        0
    );
    assert_eq!(app.store.push_endpoints().nudge_waiting(now, now).await?, 3);
    for id in &ids {
        let job = wait_terminal(&app, id, Duration::from_secs(10)).await?;
        assert_eq!(job["state"], "completed", "{job}");
    }
    assert_eq!(fake.seen.lock().map(|s| s.len()).unwrap_or(0), 3);
    assert_eq!(app.info(&polled).await?.body["job"]["state"], "available");
    // A nudge writes no lifecycle event: each job was enqueued once.
    let events = app
        .call(
            Method::GET,
            "/ojs/v1/events?queues=nudged&types=job.enqueued",
            None,
        )
        .await?;
    let enqueued = events.body["events"].as_array().map_or(0, Vec::len);
    assert_eq!(enqueued, 4, "{:?}", events.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_endpoint_cap_holds_under_racing_registrations() -> anyhow::Result<()> {
    let app = std::sync::Arc::new(TestApp::spawn_with_push().await?);
    let cap = ojs_store::MAX_PUSH_ENDPOINTS;
    let body = |i: usize| registration(&format!("http://127.0.0.1:9/r{i}"), &["cap.job"], "cap");
    for i in 0..cap - 2 {
        let endpoint = ojs_core::push::PushEndpoint::from_json(&body(i), true)?;
        app.store
            .push_endpoints()
            .put(&endpoint, None, ojs_core::time::now())
            .await?;
    }
    // Eight registrations race for the last two places.
    let racers = (0..8).map(|i| {
        let app = std::sync::Arc::clone(&app);
        let b = body(1000 + i);
        tokio::spawn(async move {
            app.call(Method::POST, "/ojs/v1/push/endpoints", Some(b))
                .await
        })
    });
    let mut statuses = Vec::new();
    for r in futures::future::join_all(racers).await {
        statuses.push(r??.status);
    }
    let created = statuses.iter().filter(|s| **s == 201).count();
    assert!(
        statuses.iter().all(|s| matches!(s, 201 | 409 | 422)),
        "{statuses:?}"
    );
    assert!((1..=2).contains(&created), "{statuses:?}");
    let listed = || async {
        let r = app
            .call(Method::GET, "/ojs/v1/push/endpoints", None)
            .await?;
        anyhow::Ok(r.body["endpoints"].as_array().map_or(0, Vec::len))
    };
    assert_eq!(listed().await?, cap - 2 + created);
    // Filled up one by one, the registry stops at the cap exactly.
    let mut last = 201;
    for i in 0..3 {
        last = app
            .call(Method::POST, "/ojs/v1/push/endpoints", Some(body(2000 + i)))
            .await?
            .status;
    }
    assert_eq!(last, 422);
    assert_eq!(listed().await?, cap);
    // A deletion frees a place (the count follows it).
    let any = app
        .call(Method::GET, "/ojs/v1/push/endpoints", None)
        .await?;
    let id = any.body["endpoints"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let deleted = app
        .call(
            Method::DELETE,
            &format!("/ojs/v1/push/endpoints/{id}"),
            None,
        )
        .await?;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    let again = app
        .call(Method::POST, "/ojs/v1/push/endpoints", Some(body(3000)))
        .await?;
    assert_eq!(again.status, 201, "{:?}", again.body);
    assert_eq!(listed().await?, cap);
    Ok(())
}

#[tokio::test]
async fn a_429s_retry_after_delays_the_next_attempt() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    // The first delivery is answered 429 with Retry-After: 2, the next one completes.
    let hits: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = hits.clone();
    let router = Router::new().route(
        "/",
        post(move || async move {
            let first = seen
                .lock()
                .map(|mut h| {
                    h.push(Instant::now());
                    h.len() == 1
                })
                .unwrap_or(false);
            if first {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "2")],
                    "slow down".to_owned(),
                )
            } else {
                (
                    StatusCode::OK,
                    [("retry-after", "0")],
                    r#"{"status":"completed"}"#.to_owned(),
                )
            }
        }),
    );
    let (url, _) = ojs_tests::serve_on_loopback(router).await?;
    let url = format!("{url}/");
    register(&app, registration(&url, &["busy.job"], "busy")).await?;
    let r = app
        .push(json!({"type": "busy.job", "queue": "busy", "args": [],
            "retry": {"max_attempts": 3, "initial_interval": "PT0.1S", "jitter": false}}))
        .await?;
    let id = r.body["job"]["id"].as_str().unwrap_or_default().to_owned();
    let job = wait_terminal(&app, &id, Duration::from_secs(15)).await?;
    assert_eq!(job["state"], "completed", "{job}");
    let times = hits.lock().map(|h| h.clone()).unwrap_or_default();
    assert_eq!(times.len(), 2, "{times:?}");
    // The job's own backoff (0.1 s) gave way to the endpoint's 2 s.
    let gap = times[1] - times[0];
    assert!(gap >= Duration::from_millis(1900), "retried after {gap:?}");
    let error = &job["errors"][0];
    assert_eq!(error["retry_after_ms"], 2000, "{job}");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_failing_endpoint_opens_its_circuit_then_is_probed_once() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?; // breaker cooldown: 1 s
    let cooldown = Duration::from_secs(1);
    // When each delivery reached the endpoint: the circuit opens after the fifth failure's
    // answer, so the probe may come no sooner than a cooldown after the fifth arrived (on
    // a slow machine, only later).
    let hits = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let counter = hits.clone();
    let router = Router::new().route(
        "/",
        post(move || async move {
            if let Ok(mut n) = counter.lock() {
                n.push(Instant::now());
            }
            (StatusCode::SERVICE_UNAVAILABLE, "down")
        }),
    );
    let (url, _) = ojs_tests::serve_on_loopback(router).await?;
    let url = format!("{url}/");
    register(&app, registration(&url, &["down.job"], "down")).await?;
    let hits_now = || hits.lock().map(|n| n.clone()).unwrap_or_default();
    let push = || {
        app.push(json!({"type": "down.job", "queue": "down", "args": [],
            "retry": {"max_attempts": 5, "initial_interval": "PT30S"}}))
    };
    let wait_retryable = |id: String| {
        let app = &app;
        async move {
            // 20 s: far inside the 30 s backoff that keeps the others from a second delivery.
            let until = Instant::now() + Duration::from_secs(20);
            while app.info(&id).await?.body["job"]["state"] != "retryable" && Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok(())
        }
    };
    // Five delivery errors in a row, one job at a time (each retried only in 30 s).
    for n in 1..=5 {
        let id = push().await?.body["job"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        wait_retryable(id).await?;
        assert_eq!(hits_now().len(), n);
    }
    // Open: the next job is not delivered before the cooldown; after it, one delivery
    // tests the endpoint, it fails, and the circuit opens again (the five others wait
    // for their 30 s backoff).
    let sixth = push().await?.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    wait_retryable(sixth.clone()).await?;
    let seen = hits_now();
    assert_eq!(seen.len(), 6, "the open circuit's one probe");
    let waited = seen[5] - seen[4];
    assert!(
        waited >= cooldown,
        "the probe came {waited:?} after the fifth failure, within the {cooldown:?} cooldown"
    );
    let job = app.info(&sixth).await?.body["job"].clone();
    assert_eq!(job["state"], "retryable", "{job}");
    assert!(job["errors"].to_string().contains("push_http_503"), "{job}");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn an_answer_for_an_attempt_that_ended_is_ignored() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    // The endpoint answers 3 s after the request (inside the registration's 5 s timeout):
    // time enough for the CANCEL to land first on a loaded machine.
    let fake = Fake {
        delay: Duration::from_millis(3000),
        ..Fake::default()
    };
    let url = fake_endpoint(fake.clone(), 0).await?;
    register(&app, registration(&url, &["late.job"], "late")).await?;
    let id = app
        .push(json!({"type": "late.job", "queue": "late", "args": []}))
        .await?
        .body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let until = Instant::now() + Duration::from_secs(10);
    while fake.seen.lock().map(|s| s.is_empty()).unwrap_or(true) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Cancelled while the endpoint works on it: its "completed" arrives for an attempt
    // that has ended, and the store's fence refuses it.
    let cancelled = app.cancel(&id).await?;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);
    // Once the endpoint has answered (its delay after the request, and nothing in flight),
    // the dispatcher's ACK of the answer is one call away.
    let reached = fake.seen.lock().ok().and_then(|s| s.first().map(|s| s.at));
    let answered = reached.unwrap_or_else(Instant::now) + fake.delay;
    let until = answered + Duration::from_secs(10);
    while (Instant::now() < answered || fake.in_flight.lock().map(|f| f.0 > 0).unwrap_or(false))
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let job = app.info(&id).await?.body["job"].clone();
    assert_eq!(job["state"], "cancelled", "{job}");
    assert!(job["result"].is_null(), "{job}");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_job_offered_twice_keeps_the_slot_its_first_claim_took() -> anyhow::Result<()> {
    // Two dispatches of one job (the stream's and a catch-up's) both take a slot; the one
    // whose claim loses gives back its own, never the delivery's in flight.
    let app = TestApp::spawn().await?;
    let mut body = registration("http://127.0.0.1:9/", &["twice.job"], "twice");
    body["config"]["max_concurrency"] = json!(2);
    let endpoint = ojs_core::push::PushEndpoint::from_json(&body, true)?;
    app.store
        .push_endpoints()
        .put(&endpoint, None, ojs_core::time::now())
        .await?;
    let queue = ojs_core::QueueName::parse("twice")?;
    let entry = app.store.push_endpoints().of_queue(&queue).await?.remove(0);
    for i in 0..3 {
        app.push(json!({"type": "twice.job", "queue": "twice", "args": [i]}))
            .await?;
    }
    // The ready index is eventually consistent (the strict layer lags it).
    let deadline = Instant::now() + Duration::from_secs(5);
    let ready = loop {
        let ready = app
            .store
            .push_endpoints()
            .ready_jobs(&queue, 10, ojs_core::time::now())
            .await?;
        if ready.len() == 3 || Instant::now() > deadline {
            break ready;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ready.len(), 3);
    let now = ojs_core::time::now;
    let first = app
        .store
        .push_endpoints()
        .claim_ready(&ready[0], &entry, now())
        .await?;
    assert!(matches!(first, ojs_store::PushClaim::Claimed { .. }));
    let again = app
        .store
        .push_endpoints()
        .claim_ready(&ready[0], &entry, now())
        .await?;
    assert!(matches!(again, ojs_store::PushClaim::NotNow));
    let second = app
        .store
        .push_endpoints()
        .claim_ready(&ready[1], &entry, now())
        .await?;
    assert!(matches!(second, ojs_store::PushClaim::Claimed { .. }));
    let third = app
        .store
        .push_endpoints()
        .claim_ready(&ready[2], &entry, now())
        .await?;
    assert!(
        matches!(third, ojs_store::PushClaim::Full),
        "a third delivery in flight while max_concurrency is 2"
    );
    app.teardown().await;
    Ok(())
}
