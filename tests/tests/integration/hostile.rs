//! The hostile-input table of `docs/reliability.md`: one case per bounded field and per
//! route, each aimed at a panic, an overflow, an oversized item or a wedged queue. Each
//! must be answered with its 4xx OJS error (or handled: a 2xx), on a live connection,
//! and afterwards a normal job pushed to the same queue is still delivered (no poison
//! job wedges FETCH), the accepted poison job still answers INFO, and the sweep runs.
//! The table in the docs lists these cases by name; keep the two in step.

use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

/// The queue every poison request aims at.
const Q: &str = "hostile";

enum Body {
    None,
    Json(Value),
    Raw(Vec<u8>),
}

/// One hostile request and the answer it must get: a status and an OJS error code, or
/// `(2xx, "")` for input that is handled.
struct Case {
    name: &'static str,
    method: Method,
    path: String,
    body: Body,
    headers: Vec<(&'static str, String)>,
    status: u16,
    code: &'static str,
}

fn c(
    name: &'static str,
    method: Method,
    path: &str,
    body: Body,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        name,
        method,
        path: path.to_owned(),
        body,
        headers: Vec::new(),
        status,
        code,
    }
}

fn push(name: &'static str, options: Value, status: u16, code: &'static str) -> Case {
    let mut options = options;
    options["queue"] = json!(Q);
    c(
        name,
        Method::POST,
        "/ojs/v1/jobs",
        Body::Json(json!({"type": "poison.job", "args": [1], "options": options})),
        status,
        code,
    )
}

fn post(name: &'static str, path: &str, body: Value, status: u16, code: &'static str) -> Case {
    c(name, Method::POST, path, Body::Json(body), status, code)
}

fn get(name: &'static str, path: &str, status: u16, code: &'static str) -> Case {
    c(name, Method::GET, path, Body::None, status, code)
}

fn nested(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = json!([v]);
    }
    v
}

const E16: u64 = 10_000_000_000_000_000;
const U64_MAX: &str = "18446744073709551615";

fn cases() -> Vec<Case> {
    let huge = "P100000000D";
    let big_meta = json!({"m": "x".repeat(64 * 1024)});
    let near_meta = json!({"m": "x".repeat(64 * 1024 - 16)});
    let step =
        |id: &str| json!({"id": id, "type": "poison.step", "args": [], "options": {"queue": Q}});
    let template = |meta: Value| json!({"type": "poison.cron", "args": [], "options": {"queue": Q}, "meta": meta});
    let long = "x".repeat(2000);
    let mut v = vec![
        // PUSH: every duration, timestamp and count a job carries.
        push(
            "timeout_ms 1e16",
            json!({"timeout_ms": E16}),
            400,
            "invalid_request",
        ),
        push(
            "timeout_ms u64::MAX",
            json!({"timeout_ms": u64::MAX}),
            400,
            "invalid_request",
        ),
        push(
            "visibility_timeout_ms 1e16",
            json!({"visibility_timeout_ms": E16}),
            400,
            "invalid_request",
        ),
        push(
            "retry.initial_interval P100000000D",
            json!({"retry": {"initial_interval": huge}, "timeout_ms": 1000}),
            422,
            "validation_error",
        ),
        push(
            "retry.max_interval P100000000D",
            json!({"retry": {"max_interval": huge}}),
            422,
            "validation_error",
        ),
        push(
            "retry.max_attempts u64::MAX",
            json!({"retry": {"max_attempts": u64::MAX}}),
            422,
            "validation_error",
        ),
        push(
            "retry.backoff_coefficient 1e300",
            json!({"retry": {"backoff_coefficient": 1e300}}),
            422,
            "validation_error",
        ),
        push(
            "scheduled_at +P100000000D",
            json!({"scheduled_at": format!("+{huge}")}),
            400,
            "invalid_request",
        ),
        push(
            "delay_until +P100000000D",
            json!({"delay_until": format!("+{huge}")}),
            400,
            "invalid_request",
        ),
        push(
            "scheduled_at year 9999 (handled: far future)",
            json!({"scheduled_at": "9999-12-31T23:59:59Z"}),
            201,
            "",
        ),
        push(
            "expires_at year 0000 (handled: expired, never delivered)",
            json!({"expires_at": "0000-01-01T00:00:00Z"}),
            201,
            "",
        ),
        push(
            "unique.period P100000000D",
            json!({"unique": {"keys": ["type"], "period": huge}}),
            400,
            "invalid_request",
        ),
        push(
            "unique.period_ms u64::MAX",
            json!({"unique": {"keys": ["type"], "period_ms": u64::MAX}}),
            400,
            "invalid_request",
        ),
        push(
            "priority i64::MIN",
            json!({"priority": i64::MIN}),
            400,
            "invalid_request",
        ),
        push(
            "rate_limit.rate.period P100000000D (handled: one start per window)",
            json!({"rate_limit": {"key": "h-long", "rate": {"limit": 1, "period": huge}}}),
            201,
            "",
        ),
        push(
            "rate_limit.rate.limit u64::MAX",
            json!({"rate_limit": {"rate": {"limit": u64::MAX, "period": "PT1S"}}}),
            422,
            "validation_error",
        ),
        push(
            "rate_limit.concurrency 1e6",
            json!({"rate_limit": {"concurrency": 1_000_000}}),
            422,
            "validation_error",
        ),
        push(
            "rate_limit.key queue-limit: prefix",
            json!({"rate_limit": {"key": format!("queue-limit:{Q}"), "max_per_second": 1}}),
            422,
            "validation_error",
        ),
        push(
            "rate_limit rate and throttle of one period (handled)",
            json!({"rate_limit": {"key": "h-same", "rate": {"limit": 10, "period": "PT1S"}, "throttle": {"limit": 1, "period": "PT1S"}}}),
            201,
            "",
        ),
        push(
            "tags 10,000 entries",
            json!({"tags": (0..10_000).map(|i| format!("{i:0>90}")).collect::<Vec<_>>()}),
            413,
            "envelope_too_large",
        ),
        c(
            "args nested 11 deep",
            Method::POST,
            "/ojs/v1/jobs",
            Body::Json(
                json!({"type": "poison.job", "args": [nested(11)], "options": {"queue": Q}}),
            ),
            400,
            "invalid_request",
        ),
        c(
            "args nested 100,000 deep (raw)",
            Method::POST,
            "/ojs/v1/jobs",
            Body::Raw(
                format!(
                    "{{\"type\":\"a\",\"args\":{}{}}}",
                    "[".repeat(100_000),
                    "]".repeat(100_000)
                )
                .into_bytes(),
            ),
            400,
            "invalid_payload",
        ),
        c(
            "meta over 64 KiB",
            Method::POST,
            "/ojs/v1/jobs",
            Body::Json(
                json!({"type": "poison.job", "args": [], "meta": big_meta, "options": {"queue": Q}}),
            ),
            413,
            "envelope_too_large",
        ),
        c(
            "invalid UTF-8 in args",
            Method::POST,
            "/ojs/v1/jobs",
            Body::Raw(b"{\"type\":\"a\",\"args\":[\"\xff\xfe\"]}".to_vec()),
            400,
            "invalid_payload",
        ),
        c(
            "body over 1 MiB",
            Method::POST,
            "/ojs/v1/jobs",
            Body::Raw(
                format!(
                    "{{\"type\":\"a\",\"args\":[\"{}\"]}}",
                    "x".repeat(1024 * 1024 + 10)
                )
                .into_bytes(),
            ),
            413,
            "envelope_too_large",
        ),
        // Batch.
        post(
            "batch of 1,001 jobs",
            "/ojs/v1/jobs/batch",
            json!({"jobs": (0..1001).map(|_| json!({"type": "a", "args": [], "options": {"queue": Q}})).collect::<Vec<_>>()}),
            422,
            "validation_error",
        ),
        post(
            "batch with one timeout_ms 1e16",
            "/ojs/v1/jobs/batch",
            json!({"jobs": [{"type": "a", "args": [], "options": {"queue": Q}}, {"type": "a", "args": [], "options": {"queue": Q, "timeout_ms": E16}}]}),
            400,
            "invalid_request",
        ),
        // FETCH.
        post(
            "FETCH one queue named twice (handled)",
            "/ojs/v1/workers/fetch",
            json!({"queues": [Q, Q], "count": 1, "worker_id": "poison"}),
            200,
            "",
        ),
        post(
            "FETCH 101 queues",
            "/ojs/v1/workers/fetch",
            json!({"queues": (0..101).map(|i| format!("q{i}")).collect::<Vec<_>>()}),
            400,
            "invalid_request",
        ),
        post(
            "FETCH 26 distinct queues (over the cap of 25)",
            "/ojs/v1/workers/fetch",
            json!({"queues": (0..26).map(|i| format!("q{i}")).collect::<Vec<_>>()}),
            400,
            "invalid_request",
        ),
        post(
            "FETCH count 0",
            "/ojs/v1/workers/fetch",
            json!({"queues": [Q], "count": 0}),
            400,
            "invalid_request",
        ),
        post(
            "FETCH count 1000",
            "/ojs/v1/workers/fetch",
            json!({"queues": [Q], "count": 1000}),
            400,
            "invalid_request",
        ),
        post(
            "FETCH visibility_timeout_ms 1e16",
            "/ojs/v1/workers/fetch",
            json!({"queues": [Q], "visibility_timeout_ms": E16}),
            400,
            "invalid_request",
        ),
        post(
            "FETCH worker_id of 10 KB",
            "/ojs/v1/workers/fetch",
            json!({"queues": [Q], "worker_id": "w".repeat(10_000)}),
            400,
            "invalid_request",
        ),
        // ACK, FAIL, heartbeat.
        post(
            "ACK result over 1 MiB",
            "/ojs/v1/workers/ack",
            json!({"job_id": uuid::Uuid::now_v7().to_string(), "result": "x".repeat(1024 * 1024)}),
            413,
            "envelope_too_large",
        ),
        post(
            "FAIL with a job_id that is no UUID",
            "/ojs/v1/workers/nack",
            json!({"job_id": "../../etc", "error": {"message": "m"}}),
            400,
            "invalid_request",
        ),
        post(
            "heartbeat visibility_timeout_ms 1e16",
            "/ojs/v1/workers/heartbeat",
            json!({"worker_id": "w", "visibility_timeout_ms": E16}),
            400,
            "invalid_request",
        ),
        // List offsets and limits.
        get(
            "queues offset 2^64-1",
            &format!("/ojs/v1/queues?offset={U64_MAX}"),
            400,
            "invalid_request",
        ),
        get(
            "cron offset 2^64-1",
            &format!("/ojs/v1/cron?offset={U64_MAX}"),
            400,
            "invalid_request",
        ),
        get(
            "dead-letter offset 2^64-1",
            &format!("/ojs/v1/dead-letter?offset={U64_MAX}"),
            400,
            "invalid_request",
        ),
        get(
            "schemas offset 2^64-1",
            &format!("/ojs/v1/schemas?offset={U64_MAX}"),
            400,
            "invalid_request",
        ),
        get(
            "queues offset 1,000,001 (over the cap)",
            "/ojs/v1/queues?offset=1000001",
            400,
            "invalid_request",
        ),
        get(
            "events limit 2^64-1",
            &format!("/ojs/v1/events?limit={U64_MAX}"),
            400,
            "invalid_request",
        ),
        // Cron.
        post(
            "cron @every 1ms",
            "/ojs/v1/cron",
            json!({"name": "h-every", "expression": "@every 1ms", "job_template": template(json!({}))}),
            400,
            "invalid_request",
        ),
        post(
            "cron template meta near 64 KiB (over with the fire meta)",
            "/ojs/v1/cron",
            json!({"name": "h-meta", "expression": "@hourly", "job_template": template(near_meta)}),
            413,
            "envelope_too_large",
        ),
        post(
            "cron template timeout_ms 1e16",
            "/ojs/v1/cron",
            json!({"name": "h-timeout", "expression": "@hourly", "job_template": {"type": "poison.cron", "args": [], "options": {"queue": Q, "timeout_ms": E16}}}),
            400,
            "invalid_request",
        ),
        post(
            "cron name of 2,000 characters",
            "/ojs/v1/cron",
            json!({"name": long, "expression": "@hourly", "job_template": template(json!({}))}),
            400,
            "invalid_request",
        ),
        post(
            "cron timezone Mars/Olympus",
            "/ojs/v1/cron",
            json!({"name": "h-tz", "expression": "@hourly", "timezone": "Mars/Olympus", "job_template": template(json!({}))}),
            400,
            "invalid_request",
        ),
        c(
            "DELETE cron name of 2,000 characters",
            Method::DELETE,
            &format!("/ojs/v1/cron/{long}"),
            Body::None,
            404,
            "not_found",
        ),
        // Workflows.
        post(
            "workflow callback meta of 64 KiB",
            "/ojs/v1/workflows",
            json!({"type": "batch", "jobs": [step("a")], "callbacks": {"on_complete": {"type": "poison.cb", "args": [], "options": {"queue": Q}, "meta": big_meta}}}),
            413,
            "envelope_too_large",
        ),
        post(
            "workflow step timeout_ms 1e16",
            "/ojs/v1/workflows",
            json!({"type": "chain", "steps": [{"id": "a", "type": "poison.step", "args": [], "options": {"queue": Q, "timeout_ms": E16}}]}),
            400,
            "invalid_request",
        ),
        post(
            "workflow step depending on itself",
            "/ojs/v1/workflows",
            json!({"type": "chain", "steps": [{"id": "a", "type": "poison.step", "args": [], "depends_on": ["a"], "options": {"queue": Q}}]}),
            400,
            "invalid_request",
        ),
        // Admin routes and path segments.
        c(
            "queue rate-limit period P100000000D (handled)",
            Method::PUT,
            &format!("/ojs/v1/admin/queues/{Q}-rl/rate-limit"),
            Body::Json(json!({"rate": {"limit": 1, "period": huge}})),
            200,
            "",
        ),
        c(
            "queue rate-limit concurrency",
            Method::PUT,
            &format!("/ojs/v1/admin/queues/{Q}/rate-limit"),
            Body::Json(json!({"concurrency": 1})),
            422,
            "validation_error",
        ),
        c(
            "worker directive, worker id of 2,000 characters",
            Method::POST,
            &format!("/ojs/v1/admin/workers/{long}/quiet"),
            Body::None,
            404,
            "not_found",
        ),
        get(
            "INFO of a job id that is no UUID",
            "/ojs/v1/jobs/%FF%FE",
            400,
            "invalid_request",
        ),
        get(
            "stats of a queue name of 2,000 characters",
            &format!("/ojs/v1/queues/{long}/stats"),
            400,
            "invalid_request",
        ),
        c(
            "pause a queue named Bad Name",
            Method::POST,
            "/ojs/v1/queues/Bad%20Name/pause",
            Body::None,
            400,
            "invalid_request",
        ),
        c(
            "DELETE dead-letter entry, id of 2,000 characters",
            Method::DELETE,
            &format!("/ojs/v1/dead-letter/{long}"),
            Body::None,
            400,
            "invalid_request",
        ),
    ];
    // Headers.
    let mut padded = push("a 16 KiB header (handled)", json!({}), 201, "");
    padded.headers.push(("x-padding", "p".repeat(16 * 1024)));
    v.push(padded);
    let mut request_id = push(
        "x-request-id of 9,000 characters (handled)",
        json!({}),
        201,
        "",
    );
    request_id.headers.push(("x-request-id", "r".repeat(9000)));
    v.push(request_id);
    let mut version = push(
        "OJS-Version 2.0 (handled: answered in 1.0)",
        json!({}),
        201,
        "",
    );
    version.headers.push(("ojs-version", "2.0".to_owned()));
    v.push(version);
    // Sizes since ojs-payload-limits: `args` bounded only by the stored request, and
    // compressed bodies bounded once inflated.
    let arg = |len: usize| {
        Body::Json(
            json!({"type": "poison.job", "args": ["x".repeat(len)], "options": {"queue": Q}}),
        )
    };
    v.push(c(
        "one argument of 200,000 characters (handled)",
        Method::POST,
        "/ojs/v1/jobs",
        arg(200_000),
        201,
        "",
    ));
    v.push(c(
        "one argument of 300,000 characters (over the stored request)",
        Method::POST,
        "/ojs/v1/jobs",
        arg(300_000),
        413,
        "envelope_too_large",
    ));
    let coded = |name, coding: &str, body: Vec<u8>, status, code| {
        let mut case = c(
            name,
            Method::POST,
            "/ojs/v1/jobs",
            Body::Raw(body),
            status,
            code,
        );
        case.headers.push(("content-encoding", coding.to_owned()));
        case
    };
    // Fifty gzip members of a MB of zeros each.
    let bomb = {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let _ = enc.write_all(&vec![0u8; 1_000_000]);
        enc.finish().unwrap_or_default().repeat(50)
    };
    v.push(coded(
        "gzip bomb: 50 MB of zeros in 50 KB",
        "gzip",
        bomb,
        413,
        "envelope_too_large",
    ));
    // A zstd frame header asking for a 1 GiB window, and nothing else.
    v.push(coded(
        "zstd frame asking for a 1 GiB window",
        "zstd",
        vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xa0],
        413,
        "envelope_too_large",
    ));
    v.push(coded(
        "Content-Encoding br",
        "br",
        b"{}".to_vec(),
        415,
        "unsupported_compression",
    ));
    v
}

/// A normal job pushed to `queue` is delivered (so nothing before it wedged the queue).
async fn still_serves(app: &TestApp, queue: &str, n: usize) -> anyhow::Result<()> {
    let pushed = app
        .push(json!({"type": "normal.job", "args": [n], "options": {"queue": queue, "priority": 100}}))
        .await?;
    anyhow::ensure!(
        pushed.status == 201,
        "PUSH: {} {}",
        pushed.status,
        pushed.body
    );
    let id = pushed.body["job"]["id"].clone();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < until {
        let f = app
            .fetch(json!({"queues": [queue], "count": 100, "worker_id": "normal"}))
            .await?;
        anyhow::ensure!(f.status == 200, "FETCH: {} {}", f.status, f.body);
        let jobs = f.body["jobs"].as_array().cloned().unwrap_or_default();
        for j in &jobs {
            let ack = app
                .ack(json!({"job_id": j["id"], "worker_id": "normal"}))
                .await?;
            anyhow::ensure!(ack.status == 200, "ACK: {} {}", ack.status, ack.body);
        }
        if jobs.iter().any(|j| j["id"] == id) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    anyhow::bail!("a normal job in {queue} was not delivered: the queue is wedged")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_gets_its_4xx_and_never_wedges_a_queue() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let cases = cases();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let mut failures = Vec::new();
    for (n, case) in cases.iter().enumerate() {
        let request_id = format!("req_hostile-{n}");
        let mut req = client
            .request(
                case.method.clone(),
                format!("{}{}", app.base_url, case.path),
            )
            .header("x-request-id", &request_id);
        for (k, v) in &case.headers {
            req = req.header(*k, v);
        }
        req = match &case.body {
            Body::None => req,
            Body::Json(v) => req
                .header("content-type", "application/openjobspec+json")
                .body(v.to_string()),
            Body::Raw(b) => req
                .header("content-type", "application/openjobspec+json")
                .body(b.clone()),
        };
        let label = format!("#{n} {}", case.name);
        let res = match req.send().await {
            Ok(res) => res,
            Err(e) => {
                failures.push(format!("{label}: no answer ({e})"));
                continue;
            }
        };
        let status = res.status().as_u16();
        let raw = match res.bytes().await {
            Ok(raw) => raw,
            Err(e) => {
                failures.push(format!("{label}: {status}, body cut ({e})"));
                continue;
            }
        };
        let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        let err = &body["error"];
        if case.code.is_empty() {
            if status != case.status {
                failures.push(format!(
                    "{label}: {status}, want {} ({body:.300})",
                    case.status
                ));
            }
            // An accepted poison job still answers INFO.
            if let Some(id) = body["job"]["id"].as_str() {
                let info = app.info(id).await?;
                if info.status != 200 {
                    failures.push(format!("{label}: INFO of the accepted job {}", info.status));
                }
            }
        } else if status != case.status
            || err["code"] != case.code
            || err["retryable"] != false
            || err["message"].as_str().is_none_or(str::is_empty)
        {
            failures.push(format!(
                "{label}: {status} {}, want {} {} ({:.300})",
                err["code"],
                case.status,
                case.code,
                String::from_utf8_lossy(&raw)
            ));
        }
        if let Err(e) = still_serves(&app, Q, n).await {
            failures.push(format!("{label}: {e}"));
        }
    }
    // The sweep runs over whatever the table left (no poison job or cron breaks it).
    let report = ojs_tests::sweep(&app.store, ojs_core::time::now()).await;
    if let Err(e) = report {
        failures.push(format!("the sweep failed after the table: {e}"));
    }
    if let Err(e) = still_serves(&app, Q, cases.len()).await {
        failures.push(format!("after the sweep: {e}"));
    }
    println!("{} hostile cases, {} failures", cases.len(), failures.len());
    app.teardown().await;
    anyhow::ensure!(
        failures.is_empty(),
        "{} of {} hostile cases answered wrongly:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    Ok(())
}

/// A job ACKed with a result near DynamoDB's item limit: its completion event cannot fit
/// an event page, and must neither stop the change stream (events and stats of later jobs
/// keep coming) nor be lost (it is stored without its result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_result_never_stops_the_change_stream() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let q = "huge-result";
    let pushed = app
        .push(json!({"type": "big.result", "args": [], "options": {"queue": q}}))
        .await?;
    anyhow::ensure!(pushed.status == 201, "{}", pushed.body);
    let id = pushed.body["job"]["id"].clone();
    ojs_tests::after_index_lag().await;
    let f = app.fetch(json!({"queues": [q], "worker_id": "w"})).await?;
    anyhow::ensure!(f.body["jobs"][0]["id"] == id, "{}", f.body);
    let result = json!({"blob": "r".repeat(330 * 1024)});
    let ack = app
        .ack(json!({"job_id": id, "worker_id": "w", "result": result}))
        .await?;
    anyhow::ensure!(ack.status == 200, "ACK: {} {}", ack.status, ack.body);
    // Several batches of the stream later, a normal job still goes through.
    still_serves(&app, q, 1).await?;
    let events = app
        .call(
            Method::GET,
            &format!("/ojs/v1/events?queues={q}&limit=100"),
            None,
        )
        .await?;
    let all = events.body["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let completed: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "job.completed")
        .collect();
    assert_eq!(completed.len(), 2, "{:.2000}", events.body);
    let big = completed.iter().find(|e| e["data"]["job_id"] == id);
    let big = big.ok_or_else(|| anyhow::anyhow!("no completion event of the huge job"))?;
    assert_eq!(big["data"]["result_omitted"], true);
    assert!(big["data"].get("result").is_none());
    let stats = app
        .call(Method::GET, &format!("/ojs/v1/queues/{q}/stats"), None)
        .await?;
    assert_eq!(stats.body["completed"], 2, "{}", stats.body);
    app.teardown().await;
    Ok(())
}
