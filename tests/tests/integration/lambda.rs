//! Lambda-level tests: the real function binaries (debug builds of `functions/*`) run as
//! Lambda would run them, polling a fake Runtime API, against DynamoDB Local. HTTP
//! functions get API Gateway HTTP API (v2) events, the scheduler an EventBridge Scheduler
//! event, the timer an SQS batch, the stream function the records of the table's stream.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use ojs_tests::fresh_store;
use ojs_tests::lambda_runtime::{events, FunctionSpec, LambdaProcess, Outcome};
use serde_json::{json, Value};
use tokio::sync::OnceCell;

/// The function binaries these tests run, built once per test process.
const PACKAGES: [&str; 9] = [
    "ojs-fn-jobs",
    "ojs-fn-stream",
    "ojs-fn-delivery",
    "ojs-fn-workers",
    "ojs-fn-system",
    "ojs-fn-scheduler",
    "ojs-fn-timer",
    "ojs-fn-authorizer",
    "ojs-fn-keys",
];

static BUILT: OnceCell<PathBuf> = OnceCell::const_new();

/// How long one invocation may take.
const INVOKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The variables of this process the functions get (the sandbox starts them with an
/// otherwise empty environment): the AWS endpoints, region and credentials that
/// `ojs_tests::default_local_env` sets (DynamoDB Local, moto SQS) or the caller chose.
const AWS_ENV: [&str; 8] = [
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_EC2_METADATA_DISABLED",
];

/// Builds the function binaries (debug, sharing the test build's dependencies) and
/// returns the directory holding them; or, when `OJS_FUNCTION_BINARIES` names one, that
/// directory as it is: scripts/test.sh sets it after its `cargo test --workspace
/// --all-targets` built every bin, since a `cargo build -p ...` of a few packages resolves
/// features apart from that build and recompiles most dependencies beside running tests.
async fn binaries() -> anyhow::Result<&'static PathBuf> {
    BUILT
        .get_or_try_init(|| async {
            if let Some(dir) = std::env::var_os("OJS_FUNCTION_BINARIES") {
                return Ok(PathBuf::from(dir));
            }
            let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            let root = manifest.parent().context("workspace root")?.to_path_buf();
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            let mut cmd = tokio::process::Command::new(
                std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            );
            cmd.current_dir(&root).arg("build").arg("--quiet");
            for p in PACKAGES {
                cmd.args(["-p", p]);
            }
            let status = cmd.status().await.context("running cargo build")?;
            if !status.success() {
                bail!("cargo build of the function binaries failed");
            }
            Ok(target.join("debug"))
        })
        .await
}

/// Starts the `bin` function on `table` with auth off, logs at warn and stdout captured;
/// `extra` variables go last, so they override those.
async fn start(bin: &str, table: &str, extra: &[(&str, &str)]) -> anyhow::Result<LambdaProcess> {
    let path = binaries().await?.join(bin);
    let mut spec = FunctionSpec::new(path, &format!("ojs-{bin}")).capture_stdout();
    for key in AWS_ENV {
        if let Ok(value) = std::env::var(key) {
            spec = spec.env(key, value);
        }
    }
    // DynamoDB through the tests' AWS-strict layer, as fresh_store.
    if let Some(strict) = ojs_tests::strict_proxy::process_proxy() {
        spec = spec.env("AWS_ENDPOINT_URL_DYNAMODB", strict);
    }
    spec = spec
        .env("RUST_LOG", "warn")
        .env("OJS_TABLE", table)
        .env("OJS_AUTH", "off");
    for (k, v) in extra {
        spec = spec.env(k, *v);
    }
    LambdaProcess::spawn(&spec).await
}

/// Invokes `f` with `event` and returns its answer.
async fn invoke(f: &mut LambdaProcess, event: Value) -> anyhow::Result<Outcome> {
    Ok(f.invoke(event, INVOKE_TIMEOUT).await?.outcome)
}

/// Status and parsed body of an API Gateway v2 response.
fn http_reply(outcome: Outcome) -> anyhow::Result<(u16, Value, Value)> {
    let Outcome::Response(res) = outcome else {
        bail!("the function reported an error: {outcome:?}");
    };
    let status = res["statusCode"].as_u64().context("statusCode")? as u16;
    let body = match res["body"].as_str() {
        Some(b) if !b.is_empty() => serde_json::from_str(b).context("JSON body")?,
        _ => Value::Null,
    };
    Ok((status, res["headers"].clone(), body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_functions_serve_api_gateway_v2_events_end_to_end() -> anyhow::Result<()> {
    let store = fresh_store().await?;
    let mut jobs = start("jobs", store.table(), &[]).await?;
    // As the template configures it: a FETCH that finds nothing looks again after the
    // index lag (here the strict layer's), so the FETCH right after the PUSH finds it.
    let recheck = ojs_tests::strict_proxy::fetch_recheck()
        .as_millis()
        .to_string();
    let mut workers = start(
        "workers",
        store.table(),
        &[("OJS_FETCH_RECHECK_MS", recheck.as_str())],
    )
    .await?;
    let mut system = start("system", store.table(), &[]).await?;

    let push = json!({"type": "email.send", "queue": "lambda-q", "args": ["a@example.com"]});
    let (status, headers, body) = http_reply(
        invoke(
            &mut jobs,
            events::http_api("POST", "/ojs/v1/jobs", Some(&push)),
        )
        .await?,
    )?;
    let init = jobs.spawned_at().elapsed();
    assert_eq!(status, 201, "{body}");
    assert_eq!(headers["ojs-version"], "1.0");
    assert_eq!(headers["content-type"], ojs_http::JSON_CONTENT_TYPE);
    let id = body["job"]["id"].as_str().context("job id")?.to_owned();
    eprintln!("jobs: process start to first answered event {init:?}");

    let fetch = json!({"queues": ["lambda-q"], "worker_id": "lambda-worker"});
    let (status, _, body) = http_reply(
        invoke(
            &mut workers,
            events::http_api("POST", "/ojs/v1/workers/fetch", Some(&fetch)),
        )
        .await?,
    )?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobs"][0]["id"], id.as_str());
    let ack = json!({"job_id": id, "result": {"sent": true}});
    let (status, _, body) = http_reply(
        invoke(
            &mut workers,
            events::http_api("POST", "/ojs/v1/workers/ack", Some(&ack)),
        )
        .await?,
    )?;
    assert_eq!(status, 200, "{body}");

    let (status, _, body) = http_reply(
        invoke(
            &mut jobs,
            events::http_api("GET", &format!("/ojs/v1/jobs/{id}"), None),
        )
        .await?,
    )?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["job"]["state"], "completed");

    // A path of another group is a 404 with the OJS error body, not a crash.
    let (status, _, body) =
        http_reply(invoke(&mut jobs, events::http_api("GET", "/ojs/v1/queues", None)).await?)?;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    // The stream function gets the table's records as Lambda hands them over: it stores
    // the lifecycle events and prints the metrics.
    let (arn, records) = ojs_tests::stream_records(store.table()).await?;
    assert!(
        records.len() >= 3,
        "created, claimed, completed: {records:?}"
    );
    // A webhook subscription to completions whose receiver answers 410: a dead delivery,
    // which the stream function's first attempt finds and measures.
    let (gone, receiver) = ojs_tests::serve_on_loopback(axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async { axum::http::StatusCode::GONE }),
    ))
    .await?;
    let gone_url = format!("{gone}/hook");
    let subscription = ojs_core::webhook::Subscription::from_json(
        &json!({"url": gone_url, "events": ["job.completed"]}),
        true,
    )
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let hook = store
        .webhooks()
        .put(
            &subscription,
            "s".repeat(32),
            None,
            &Default::default(),
            ojs_core::time::now(),
        )
        .await?;
    let mut stream = start(
        "stream",
        store.table(),
        &[
            ("OJS_METRICS", "emf"),
            ("OJS_PUSH_ALLOW_PRIVATE", "on"),
            ("RUST_LOG", "info"),
        ],
    )
    .await?;
    let Outcome::Response(res) =
        invoke(&mut stream, events::dynamodb_stream(&arn, &records)).await?
    else {
        bail!("the stream batch failed as a whole");
    };
    assert_eq!(res, json!({"batchItemFailures": []}));
    receiver.abort();
    // Query strings reach the handlers.
    let (status, _, body) = http_reply(
        invoke(
            &mut system,
            events::http_api("GET", "/ojs/v1/events?queue=lambda-q&limit=10", None),
        )
        .await?,
    )?;
    assert_eq!(status, 200, "{body}");
    let kinds: Vec<&str> = body["events"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["type"].as_str()).collect())
        .unwrap_or_default();
    assert!(kinds.contains(&"job.completed"), "{body}");
    let (status, _, body) =
        http_reply(invoke(&mut system, events::http_api("GET", "/ojs/manifest", None)).await?)?;
    assert_eq!(status, 200, "{body}");

    // The stream function printed CloudWatch EMF lines for the start and completion.
    workers.stop().await;
    let stdout = stream.stop_with_output().await?;
    let emf: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("_aws").is_some())
        .collect();
    assert!(
        emf.iter()
            .any(|d| d["JobsCompleted"] == 1 && d["Queue"] == "lambda-q"),
        "no EMF completion metric in: {stdout}"
    );
    // And the webhook metrics (ojs-webhooks.md §11.2) of its one, dead, delivery.
    let dead = emf
        .iter()
        .find(|d| d["ojs.webhook.delivery.count"] == 1)
        .ok_or_else(|| anyhow::anyhow!("no webhook delivery metric in: {stdout}"))?;
    assert_eq!(dead["Status"], "dead", "{dead}");
    assert_eq!(dead["EventType"], "job.completed");
    assert_eq!(dead["SubscriptionId"], hook.id.as_str());
    assert_eq!(dead["ojs.webhook.dead_delivery.count"], 1);
    assert!(
        emf.iter().any(|d| d["ojs.webhook.subscription.count"] == 1),
        "no subscription gauge in: {stdout}"
    );
    // The §11.1 event of that attempt, as a log record.
    let logged: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "webhook attempt")
        .collect();
    assert_eq!(logged.len(), 1, "{stdout}");
    assert_eq!(
        logged[0]["fields"]["event"], "webhook.dead",
        "{}",
        logged[0]
    );
    assert_eq!(
        logged[0]["fields"]["subscription"],
        hook.id.as_str(),
        "{}",
        logged[0]
    );
    jobs.stop().await;
    system.stop().await;
    let _ = store.delete_table().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_function_counts_a_batch_and_hands_back_one_it_cannot_apply(
) -> anyhow::Result<()> {
    let store = fresh_store().await?;
    let queue = ojs_core::QueueName::parse("stream-q").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    for _ in 0..2 {
        push_available(&store, "stream-q").await?;
    }
    let (arn, records) = ojs_tests::stream_records(store.table()).await?;
    let mut stream = start("stream", store.table(), &[]).await?;
    let Outcome::Response(res) =
        invoke(&mut stream, events::dynamodb_stream(&arn, &records)).await?
    else {
        bail!("the stream batch failed as a whole");
    };
    assert_eq!(res, json!({"batchItemFailures": []}));
    // Read without a consumer of this process's own: what the function counted.
    let stats = store.derived().queue_stats(&queue).await?;
    assert_eq!(stats.available, 2, "{stats:?}");
    // A batch it cannot apply (the table is gone) goes back whole, from its first record,
    // for Lambda to retry or bisect; it is not skipped.
    store.delete_table().await?;
    let Outcome::Response(res) =
        invoke(&mut stream, events::dynamodb_stream(&arn, &records)).await?
    else {
        bail!("the stream batch failed as a whole");
    };
    let first = records[0]["dynamodb"]["SequenceNumber"].clone();
    assert!(first.is_string());
    assert_eq!(
        res,
        json!({"batchItemFailures": [{"itemIdentifier": first}]})
    );
    stream.stop().await;
    Ok(())
}

/// A loopback push endpoint answering `completed` (after `gate` lets it, when given, or
/// 60 s), counting the requests it took.
async fn loopback_endpoint(
    gate: Option<Arc<tokio::sync::Semaphore>>,
) -> anyhow::Result<(String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let server = tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/",
            axum::routing::post(move |body: axum::Json<Value>| {
                let (counter, gate) = (counter.clone(), gate.clone());
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    if let Some(gate) = gate {
                        let _ = tokio::time::timeout(Duration::from_secs(60), gate.acquire()).await;
                    }
                    axum::Json(
                        json!({"status": "completed", "result": {"args": body.0["job"]["args"]}}),
                    )
                }
            }),
        );
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, seen, server))
}

async fn register_endpoint(store: &ojs_store::Store, url: &str, queue: &str) -> anyhow::Result<()> {
    let registration = json!({
        "endpoint": url, "job_types": ["t"], "queues": [queue],
        "config": {"signing_secret": "whsec_lambda_0123456789", "timeout_ms": 90_000},
    });
    store
        .push_endpoints()
        .put(
            &ojs_core::push::PushEndpoint::from_json(&registration, true)
                .map_err(|e| anyhow::anyhow!("{e:?}"))?,
            None,
            ojs_core::time::now(),
        )
        .await?;
    Ok(())
}

/// A delivery queue of this test on the local SQS, and a client of it.
async fn delivery_queue() -> anyhow::Result<(aws_sdk_sqs::Client, String)> {
    let sdk = ojs_store::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let name = format!("ojs-deliveries-{}", uuid::Uuid::now_v7().simple());
    let out = sqs.create_queue().queue_name(name).send().await?;
    Ok((sqs, out.queue_url().context("queue URL")?.to_owned()))
}

/// Every message the queue holds now (bodies), taken off it.
async fn drain_queue(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<Vec<String>> {
    let mut bodies = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .send()
            .await?;
        if out.messages().is_empty() {
            return Ok(bodies);
        }
        for m in out.messages() {
            bodies.extend(m.body().map(str::to_owned));
            if let Some(handle) = m.receipt_handle() {
                sqs.delete_message()
                    .queue_url(url)
                    .receipt_handle(handle)
                    .send()
                    .await?;
            }
        }
    }
}

/// The stream function answers a batch without waiting for any receiver: it plans a
/// push offer per job the batch made available and hands them to the delivery queue;
/// the delivery function makes them (ojs-serverless.md §2). A receiver that hangs holds
/// up its own delivery only: the batch's stats are there, and another endpoint's jobs are
/// delivered and settled, while it still hangs (deploy review F2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_holds_up_neither_the_stream_nor_other_endpoints() -> anyhow::Result<()>
{
    let store = fresh_store().await?;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (slow_url, slow_seen, slow) = loopback_endpoint(Some(gate.clone())).await?;
    let (fast_url, fast_seen, fast) = loopback_endpoint(None).await?;
    register_endpoint(&store, &slow_url, "hang-q").await?;
    register_endpoint(&store, &fast_url, "push-q").await?;
    push_available(&store, "hang-q").await?;
    for _ in 0..2 {
        push_available(&store, "push-q").await?;
    }
    let (sqs, queue_url) = delivery_queue().await?;
    let (arn, records) = ojs_tests::stream_records(store.table()).await?;
    let private = ("OJS_PUSH_ALLOW_PRIVATE", "on");
    let mut stream = start(
        "stream",
        store.table(),
        &[private, ("OJS_DELIVERY_QUEUE_URL", &queue_url)],
    )
    .await?;
    // Answered within the invocation's 30 s although a receiver will hang for 60.
    let Outcome::Response(res) =
        invoke(&mut stream, events::dynamodb_stream(&arn, &records)).await?
    else {
        bail!("the stream batch failed as a whole");
    };
    assert_eq!(res, json!({"batchItemFailures": []}));
    assert_eq!(
        slow_seen.load(Ordering::SeqCst) + fast_seen.load(Ordering::SeqCst),
        0
    );
    let push_q = ojs_core::QueueName::parse("push-q").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    assert_eq!(store.derived().queue_stats(&push_q).await?.available, 2);

    let offers = drain_queue(&sqs, &queue_url).await?;
    assert_eq!(offers.len(), 3, "{offers:?}");
    let mut to_slow = Vec::new();
    let mut to_fast = Vec::new();
    let mut fast_ids = Vec::new();
    for body in offers {
        let id = ojs_push::Delivery::from_message(&body)
            .ok()
            .and_then(|d| match d {
                ojs_push::Delivery::Push { job_id } => Some(job_id),
                ojs_push::Delivery::Webhook(_) => None,
            })
            .context("a push offer")?;
        let job = store
            .engine()
            .get_job(&ojs_core::JobId::parse(&id).map_err(|e| anyhow::anyhow!("{e:?}"))?)
            .await?
            .context("the offered job")?;
        match job.spec.queue.as_str() {
            "hang-q" => to_slow.push(body),
            _ => {
                to_fast.push(body);
                fast_ids.push(id);
            }
        }
    }
    // The hanging delivery in one instance, the others in another, as SQS spreads them.
    let mut slow_delivery = start("delivery", store.table(), &[private]).await?;
    let hanging = tokio::spawn(async move {
        let out = slow_delivery
            .invoke(events::sqs(&to_slow), Duration::from_secs(120))
            .await;
        slow_delivery.stop().await;
        out.map(|i| i.outcome)
    });
    // The slow receiver holds its request before the other deliveries start (a loaded
    // machine may take a while to start the instance and reach it).
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while slow_seen.load(Ordering::SeqCst) == 0 {
        anyhow::ensure!(
            std::time::Instant::now() < until,
            "the slow receiver was never reached"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut fast_delivery = start("delivery", store.table(), &[private]).await?;
    let Outcome::Response(res) = invoke(&mut fast_delivery, events::sqs(&to_fast)).await? else {
        bail!("the delivery batch failed as a whole");
    };
    assert_eq!(res["batchItemFailures"], json!([]));
    assert_eq!(fast_seen.load(Ordering::SeqCst), 2);
    for id in &fast_ids {
        assert_eq!(state_of(&store, id).await?, "completed");
    }
    // ... while the slow receiver still holds its job.
    assert!(!hanging.is_finished());
    assert_eq!(slow_seen.load(Ordering::SeqCst), 1);
    gate.add_permits(1);
    let Outcome::Response(res) = hanging.await?? else {
        bail!("the slow delivery failed as a whole");
    };
    assert_eq!(res["batchItemFailures"], json!([]));
    let hang_q = ojs_core::QueueName::parse("hang-q").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    assert!(store
        .push_endpoints()
        .ready_jobs(&hang_q, 10, ojs_core::time::now())
        .await?
        .is_empty());
    stream.stop().await;
    fast_delivery.stop().await;
    slow.abort();
    fast.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_api_keys_on_a_function_refuses_keyless_events_and_writes_nothing(
) -> anyhow::Result<()> {
    let store = fresh_store().await?;
    let mut jobs = start(
        "jobs",
        store.table(),
        &[("OJS_AUTH", "api-key"), ("RUST_LOG", "info")],
    )
    .await?;
    let id = uuid::Uuid::now_v7().to_string();
    let marker = "secret-arg-7f3a9c";
    let push = json!({"id": id, "type": "email.send", "queue": "locked", "args": [marker]});
    for headers in [
        vec![],
        vec![("authorization", "Bearer ojs_000000000000_00")],
    ] {
        let (status, _, body) = http_reply(
            invoke(
                &mut jobs,
                events::http_api_with_headers("POST", "/ojs/v1/jobs", Some(&push), &headers),
            )
            .await?,
        )?;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"]["code"], "unauthenticated");
    }
    assert!(store
        .engine()
        .get_job(&ojs_core::JobId::parse(&id)?)
        .await?
        .is_none());
    let key = ojs_http::auth::issue_key(&store, "lambda").await?;
    let bearer = format!("Bearer {}", key.key);
    let (status, _, body) = http_reply(
        invoke(
            &mut jobs,
            events::http_api_with_headers(
                "POST",
                "/ojs/v1/jobs",
                Some(&push),
                &[("authorization", bearer.as_str())],
            ),
        )
        .await?,
    )?;
    assert_eq!(status, 201, "{body}");
    // Logs (at info) name the request, key id, job and DynamoDB usage, never the key's
    // secret or the job's args.
    let stdout = jobs.stop_with_output().await?;
    let secret = key.key.rsplit('_').next().unwrap_or_default();
    assert!(
        !stdout.contains(secret),
        "the API key secret is logged: {stdout}"
    );
    assert!(!stdout.contains(marker), "job args are logged: {stdout}");
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let pushed = lines
        .iter()
        .find(|l| l["fields"]["status"] == 201)
        .with_context(|| format!("no request log line for the push in: {stdout}"))?;
    let fields = &pushed["fields"];
    assert_eq!(fields["job_id"], id.as_str(), "{pushed}");
    assert_eq!(fields["queue"], "locked", "{pushed}");
    assert_eq!(fields["key_id"], key.record.id.as_str(), "{pushed}");
    assert!(fields["ddb_calls"].as_u64().unwrap_or(0) >= 1, "{pushed}");
    assert!(fields["ddb_wcu"].as_f64().unwrap_or(0.0) > 0.0, "{pushed}");
    let _ = store.delete_table().await;
    Ok(())
}

/// Stores an available job on `queue` straight through the store.
async fn push_available(store: &ojs_store::Store, queue: &str) -> anyhow::Result<()> {
    let new = ojs_core::job::NewJob::from_json(
        json!({"type": "t", "args": [], "options": {"queue": queue}}),
    )
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    store
        .lifecycle()
        .put_job(&ojs_core::Job::enqueue(new, ojs_core::time::now()))
        .await?;
    Ok(())
}

/// Pushes a job due `delay_ms` from now straight into the store (no timer queue), and
/// answers its id and due time. A push that took longer than the delay stores the job
/// as available: it is pushed again with twice the delay, so a slow machine only waits
/// longer.
async fn push_scheduled(
    store: &ojs_store::Store,
    delay_ms: i64,
) -> anyhow::Result<(String, ojs_core::time::Timestamp)> {
    let app = ojs_tests::TestApp::spawn_on_store(store.clone()).await?;
    let mut delay = chrono::Duration::milliseconds(delay_ms);
    let mut last = None;
    for _ in 0..6 {
        let at = ojs_core::time::now() + delay;
        let reply = app
            .push(json!({
                "type": "report.build",
                "queue": "timed",
                "args": [],
                "scheduled_at": ojs_core::time::format(&at),
            }))
            .await?;
        if reply.status == 201 && reply.body["job"]["state"] == "scheduled" {
            let id = reply.body["job"]["id"].as_str().unwrap_or_default();
            // Not teardown(): that deletes the table the functions use.
            return Ok((id.to_owned(), at));
        }
        if reply.status != 201 || reply.body["job"]["state"] != "available" {
            bail!("scheduled push: {} {}", reply.status, reply.body);
        }
        last = Some(reply.body);
        delay = delay * 2;
    }
    bail!("every scheduled push came due before it was stored: {last:?}")
}

/// Sleeps until `at` has passed.
async fn sleep_until(at: ojs_core::time::Timestamp) {
    let left = (at - ojs_core::time::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(1)).await;
}

async fn state_of(store: &ojs_store::Store, id: &str) -> anyhow::Result<String> {
    let job = store
        .engine()
        .get_job(&ojs_core::JobId::parse(id)?)
        .await?
        .context("job missing")?;
    Ok(job.status.state.as_str().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_sweeps_on_an_eventbridge_event() -> anyhow::Result<()> {
    let store = fresh_store().await?;
    let (id, due) = push_scheduled(&store, 300).await?;
    // Due now, and still scheduled: nothing but the scheduler promotes it here.
    sleep_until(due).await;
    assert_eq!(state_of(&store, &id).await?, "scheduled");
    let mut scheduler = start(
        "scheduler",
        store.table(),
        &[
            ("OJS_METRICS", "emf"),
            ("OJS_METRICS_NAMESPACE", "OJS/lambda-test"),
        ],
    )
    .await?;
    let event = json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": "Scheduled Event",
        "source": "aws.scheduler",
        "account": "000000000000",
        "time": "2026-11-22T00:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:scheduler:us-east-1:000000000000:schedule/default/ojs-sweep"],
        "detail": {}
    });
    let Outcome::Response(report) = invoke(&mut scheduler, event).await? else {
        bail!("the sweep failed");
    };
    assert!(report["moved"].as_u64().unwrap_or(0) >= 1, "{report}");
    // The whole tick ran: the webhook retries and, on an instance's first tick, the nudge
    // of waiting pushes (nothing to do for either here).
    assert_eq!(report["webhook_retries"], 0, "{report}");
    assert_eq!(report["push_nudges"], 0, "{report}");
    assert_eq!(state_of(&store, &id).await?, "available");
    // The backlog metrics the alarms read: the promoted job is the head of its queue.
    let stdout = scheduler.stop_with_output().await?;
    let emf: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("_aws").is_some())
        .collect();
    let age = emf
        .iter()
        .find(|d| d["Queue"] == "timed" && d.get("OldestReadyJobAge").is_some())
        .with_context(|| format!("no OldestReadyJobAge line in: {stdout}"))?;
    assert!(
        age["OldestReadyJobAge"]
            .as_f64()
            .is_some_and(|a| (0.0..60.0).contains(&a)),
        "{age}"
    );
    assert_eq!(
        age["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "OJS/lambda-test"
    );
    assert!(
        emf.iter().all(|d| d.get("SweepFailures").is_none()),
        "a clean sweep printed a SweepFailures line: {stdout}"
    );
    let _ = store.delete_table().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timer_reports_only_the_bad_record_of_an_sqs_batch() -> anyhow::Result<()> {
    let store = fresh_store().await?;
    let (first, first_due) = push_scheduled(&store, 200).await?;
    let (second, second_due) = push_scheduled(&store, 200).await?;
    let due = first_due.max(second_due);
    let due_us = due.timestamp_micros();
    let record = |msg_id: &str, body: String| {
        json!({
            "messageId": msg_id,
            "receiptHandle": format!("rh-{msg_id}"),
            "body": body,
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "0"},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:ojs-timer",
            "awsRegion": "us-east-1"
        })
    };
    let good = |id: &str| json!({"kind": "job", "job_id": id, "due_us": due_us}).to_string();
    let event = json!({"Records": [
        record("m-1", good(&first)),
        record("m-bad", "{not a timer message".to_owned()),
        record("m-2", good(&second)),
    ]});
    let mut timer = start("timer", store.table(), &[]).await?;
    sleep_until(due).await;
    let done = timer.invoke(event, INVOKE_TIMEOUT).await?;
    let Outcome::Response(res) = done.outcome else {
        bail!("the timer batch failed as a whole");
    };
    assert_eq!(
        res["batchItemFailures"],
        json!([{"itemIdentifier": "m-bad"}]),
        "{res}"
    );
    assert_eq!(state_of(&store, &first).await?, "available");
    assert_eq!(state_of(&store, &second).await?, "available");
    // The bad record's line names the invocation it came in (its Lambda request id and
    // X-Ray trace), so the batch's other lines are one query away.
    let log = timer.stop_with_output().await?;
    let line = log
        .lines()
        .find(|l| l.contains("malformed timer message"))
        .with_context(|| format!("no line for the bad record: {log}"))?;
    assert!(
        line.contains(&format!("\"request_id\":\"{}\"", done.request_id))
            && line.contains("\"xray_trace_id\":\"Root=1-"),
        "{line}"
    );
    let _ = store.delete_table().await;
    Ok(())
}

/// On a deployed stack the gateway's authorizer checks the key and the jobs function runs
/// with `OJS_AUTH=off`: the key it let the request in with (its context's `key_id`) still
/// owns the request's idempotency key, as where the server checks keys itself. Two
/// producers using one idempotency key each get their own job; each one's retry is its
/// own first answer. (Before, the function saw no key: the second producer got 422.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_belong_to_the_key_the_gateway_s_authorizer_let_in() -> anyhow::Result<()>
{
    let store = fresh_store().await?;
    // As the template runs it: OJS_AUTH=off (start's default), behind the authorizer.
    let mut jobs = start("jobs", store.table(), &[]).await?;
    let push_as = |key_id: &str, to: &str| {
        let body = json!({"type": "email.send", "queue": "lambda-idem", "args": [to]});
        let mut event = events::http_api_with_headers(
            "POST",
            "/ojs/v1/jobs",
            Some(&body),
            &[("idempotency-key", "order-1")],
        );
        event["requestContext"]["authorizer"] =
            json!({"lambda": {"key_id": key_id, "scopes": "ojs:data:enqueue ojs:data:read"}});
        event
    };
    let mut ids = Vec::new();
    for (key_id, to) in [
        ("producer0001", "a@example.com"),
        ("producer0002", "b@example.com"),
    ] {
        let (status, headers, body) = http_reply(invoke(&mut jobs, push_as(key_id, to)).await?)?;
        assert_eq!(status, 201, "{key_id}: {body}");
        assert!(headers.get("idempotent-replayed").is_none(), "{headers}");
        ids.push(body["job"]["id"].as_str().context("job id")?.to_owned());
    }
    assert_ne!(ids[0], ids[1]);
    // The first producer's retry is its own first answer.
    let (status, headers, body) =
        http_reply(invoke(&mut jobs, push_as("producer0001", "a@example.com")).await?)?;
    assert_eq!(status, 201, "{body}");
    assert_eq!(headers["idempotent-replayed"], "true", "{headers}");
    assert_eq!(body["job"]["id"], ids[0].as_str());
    jobs.stop().await;
    let _ = store.delete_table().await;
    Ok(())
}

/// The first key of a deployed stack: the keys function creates it when invoked directly
/// (no local Rust build), and the authorizer function lets it through and refuses others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_function_issues_a_key_the_authorizer_function_accepts() -> anyhow::Result<()> {
    let store = fresh_store().await?;
    let mut keys = start("keys", store.table(), &[]).await?;
    let Outcome::Response(created) = invoke(
        &mut keys,
        json!({"action": "create", "name": "first-admin"}),
    )
    .await?
    else {
        bail!("create failed");
    };
    let key = created["key"].as_str().context("key")?.to_owned();
    assert!(key.starts_with("ojs_"), "{created}");
    let Outcome::Response(listed) = invoke(&mut keys, json!({"action": "list"})).await? else {
        bail!("list failed");
    };
    assert_eq!(listed["keys"][0]["id"], created["id"], "{listed}");
    assert!(
        listed.to_string().find(&key).is_none(),
        "list shows the secret"
    );
    let refused = invoke(&mut keys, json!({"action": "drop"})).await?;
    assert!(matches!(refused, Outcome::Error { .. }), "{refused:?}");
    let stdout = keys.stop_with_output().await?;
    let secret = key.rsplit('_').next().unwrap_or_default();
    assert!(
        !stdout.contains(secret),
        "the key secret is logged: {stdout}"
    );

    let mut authorizer = start("authorizer", store.table(), &[("OJS_AUTH", "api-key")]).await?;
    let on_route = |authorization: &str, route: &str| {
        json!({
            "version": "2.0", "type": "REQUEST",
            "routeArn": format!("arn:aws:execute-api:us-east-1:000000000000:api/$default/{}", route.replacen(' ', "", 1)),
            "identitySource": [authorization, route], "routeKey": route,
            "headers": {"authorization": authorization},
        })
    };
    let event = |authorization: &str| on_route(authorization, "GET /ojs/v1/queues");
    let Outcome::Response(ok) = invoke(&mut authorizer, event(&format!("Bearer {key}"))).await?
    else {
        bail!("authorizer failed");
    };
    assert_eq!(
        ok,
        json!({"isAuthorized": true, "context": {"key_id": created["id"], "scopes": "ojs:data:read ojs:data:write"}})
    );
    // A data key (created without scopes) is refused the admin routes; an admin key made
    // by the keys function is let through them, and only them.
    let bearer = format!("Bearer {key}");
    let Outcome::Response(admin) = invoke(
        &mut authorizer,
        on_route(&bearer, "GET /ojs/v1/admin/queues"),
    )
    .await?
    else {
        bail!("authorizer failed");
    };
    assert_eq!(admin, json!({"isAuthorized": false}));
    let mut keys = start("keys", store.table(), &[]).await?;
    let Outcome::Response(made) = invoke(
        &mut keys,
        json!({"action": "create", "name": "dash", "scopes": ["ojs:admin:read"]}),
    )
    .await?
    else {
        bail!("create with scopes failed");
    };
    keys.stop().await;
    assert_eq!(made["scopes"], json!(["ojs:admin:read"]), "{made}");
    let dash = format!("Bearer {}", made["key"].as_str().unwrap_or_default());
    for (route, allowed) in [
        ("GET /ojs/v1/admin/queues", true),
        ("POST /ojs/v1/admin/queues/{name}/pause", false),
        ("GET /ojs/v1/queues", false),
    ] {
        let Outcome::Response(v) = invoke(&mut authorizer, on_route(&dash, route)).await? else {
            bail!("authorizer failed");
        };
        assert_eq!(v["isAuthorized"], allowed, "{route}: {v}");
    }
    let wrong = format!(
        "Bearer {}{}",
        &key[..key.len() - 1],
        if key.ends_with('0') { '1' } else { '0' }
    );
    let Outcome::Response(no) = invoke(&mut authorizer, event(&wrong)).await? else {
        bail!("authorizer failed");
    };
    assert_eq!(no, json!({"isAuthorized": false}));
    authorizer.stop().await;
    let _ = store.delete_table().await;
    Ok(())
}

/// How a request's line names its invocation's X-Ray trace (lambda_http passes the
/// runtime's `Lambda-Runtime-Trace-Id` on as the `X-Amzn-Trace-Id` header).
const XRAY_TRACE: &str = "\"xray_trace_id\":\"Root=1-";

/// One job's trace id in the log lines of every function its path crosses, as CloudWatch
/// shows them: the PUSH (jobs), the stream batch and its push delivery (stream), and the
/// FETCH and ACK (workers) of another traced job. A broken link (a PUSH that drops the
/// header, a delivery or an answer that loses the job's meta) leaves its line without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_trace_id_is_in_the_log_lines_of_its_push_stream_batch_delivery_and_ack(
) -> anyhow::Result<()> {
    let store = fresh_store().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = received.clone();
    let endpoint = tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/",
            axum::routing::post(move |headers: axum::http::HeaderMap| async move {
                let traceparent = headers
                    .get("traceparent")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned();
                if let Ok(mut seen) = seen.lock() {
                    seen.push(traceparent);
                }
                axum::Json(json!({"status": "completed", "result": {"ok": true}}))
            }),
        );
        let _ = axum::serve(listener, app).await;
    });
    let registration = json!({
        "endpoint": url, "job_types": ["traced.push"], "queues": ["traced-push"],
        "config": {"signing_secret": "whsec_lambda_0123456789"},
    });
    store
        .push_endpoints()
        .put(
            &ojs_core::push::PushEndpoint::from_json(&registration, true)
                .map_err(|e| anyhow::anyhow!("{e:?}"))?,
            None,
            ojs_core::time::now(),
        )
        .await?;
    let info = [("RUST_LOG", "info")];
    let pushed_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let fetched_trace = "0af7651916cd43dd8448eb211c80319c";
    let mut jobs = start("jobs", store.table(), &info).await?;
    for (trace, queue, kind) in [
        (pushed_trace, "traced-push", "traced.push"),
        (fetched_trace, "traced-fetch", "traced.fetch"),
    ] {
        let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
        let push = json!({"type": kind, "queue": queue, "args": [1]});
        let (status, _, body) = http_reply(
            invoke(
                &mut jobs,
                events::http_api_with_headers(
                    "POST",
                    "/ojs/v1/jobs",
                    Some(&push),
                    &[("traceparent", traceparent.as_str())],
                ),
            )
            .await?,
        )?;
        assert_eq!(status, 201, "{body}");
    }
    let jobs_log = jobs.stop_with_output().await?;

    let (arn, records) = ojs_tests::stream_records(store.table()).await?;
    let mut stream = start(
        "stream",
        store.table(),
        &[("OJS_PUSH_ALLOW_PRIVATE", "on"), ("RUST_LOG", "info")],
    )
    .await?;
    let Outcome::Response(res) =
        invoke(&mut stream, events::dynamodb_stream(&arn, &records)).await?
    else {
        bail!("the stream batch failed as a whole");
    };
    assert_eq!(res, json!({"batchItemFailures": []}));
    let stream_log = stream.stop_with_output().await?;
    endpoint.abort();
    // The batch's lines carry its invocation (request id, X-Ray trace).
    assert!(
        stream_log
            .lines()
            .filter(|l| l.contains("job change"))
            .all(|l| l.contains("\"request_id\":\"") && l.contains("\"xray_trace_id\":\"Root=1-")),
        "{stream_log}"
    );

    let recheck = ojs_tests::strict_proxy::fetch_recheck()
        .as_millis()
        .to_string();
    let mut workers = start(
        "workers",
        store.table(),
        &[
            ("OJS_FETCH_RECHECK_MS", recheck.as_str()),
            ("RUST_LOG", "info"),
        ],
    )
    .await?;
    let fetch = json!({"queues": ["traced-fetch"], "worker_id": "traced-worker"});
    let (status, _, body) = http_reply(
        invoke(
            &mut workers,
            events::http_api("POST", "/ojs/v1/workers/fetch", Some(&fetch)),
        )
        .await?,
    )?;
    assert_eq!(status, 200, "{body}");
    let id = body["jobs"][0]["id"]
        .as_str()
        .context("fetched job")?
        .to_owned();
    let ack = json!({"job_id": id, "worker_id": "traced-worker"});
    let (status, _, body) = http_reply(
        invoke(
            &mut workers,
            events::http_api("POST", "/ojs/v1/workers/ack", Some(&ack)),
        )
        .await?,
    )?;
    assert_eq!(status, 200, "{body}");
    let workers_log = workers.stop_with_output().await?;

    // Each line that must carry a trace: the function's output, what the line is, its trace.
    let line_with = |log: &str, marks: &[&str], trace: &str| -> bool {
        log.lines()
            .any(|l| l.contains(trace) && marks.iter().all(|m| l.contains(m)))
    };
    for (trace, what) in [
        (pushed_trace, "the delivered job"),
        (fetched_trace, "the fetched job"),
    ] {
        assert!(
            line_with(
                &jobs_log,
                &["\"request\"", "/ojs/v1/jobs", XRAY_TRACE],
                trace
            ),
            "no PUSH line with the trace of {what}: {jobs_log}"
        );
        assert!(
            line_with(&stream_log, &["job change"], trace),
            "no stream line with the trace of {what}: {stream_log}"
        );
    }
    assert!(
        line_with(&stream_log, &["push delivery settled"], pushed_trace),
        "no delivery line with the job's trace: {stream_log}"
    );
    let delivered = received.lock().map(|r| r.clone()).unwrap_or_default();
    assert_eq!(
        delivered,
        [format!("00-{pushed_trace}-00f067aa0ba902b7-01")],
        "the delivery carries the job's traceparent"
    );
    for path in ["/ojs/v1/workers/fetch", "/ojs/v1/workers/ack"] {
        assert!(
            line_with(&workers_log, &["\"request\"", path], fetched_trace),
            "no {path} line with the job's trace: {workers_log}"
        );
    }
    Ok(())
}
