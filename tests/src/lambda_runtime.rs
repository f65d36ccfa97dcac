//! A minimal fake of the AWS Lambda Runtime API (version 2018-06-01), so that the real
//! function binaries (`provided.al2023` bootstraps built with `lambda_runtime`) can be
//! started and invoked on a machine without AWS: start a [`FakeRuntime`], queue events,
//! spawn a binary with [`LambdaProcess::spawn`] (which points `AWS_LAMBDA_RUNTIME_API`
//! at it), and read back what the function answered and when.
//!
//! Served endpoints:
//! - `GET  /2018-06-01/runtime/invocation/next`: long poll; returns the next queued event
//!   with `Lambda-Runtime-Aws-Request-Id`, `Lambda-Runtime-Deadline-Ms`,
//!   `Lambda-Runtime-Invoked-Function-Arn` and `Lambda-Runtime-Trace-Id`.
//! - `POST /2018-06-01/runtime/invocation/{id}/response` and `.../{id}/error`.
//! - `POST /2018-06-01/runtime/init/error`.
//!
//! Timing: the first `next` poll marks the end of the function's init phase (what Lambda
//! reports as Init Duration); the response POST marks the end of the invocation.
//!
//! Used by the Lambda-level integration tests (`tests/tests/integration/lambda.rs`) and
//! the cold-start bench (`bench/src/cold_start.rs`).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use ojs_tests::lambda_runtime::{events, FunctionSpec, LambdaProcess};
//! let spec = FunctionSpec::new("target/release/system", "system")
//!     .env("OJS_TABLE", "ojs-local");
//! let mut f = LambdaProcess::spawn(&spec).await?;
//! let done = f
//!     .invoke(events::http_api("GET", "/ojs/v1/health", None), Duration::from_secs(10))
//!     .await?;
//! println!("{:?} after {:?}", done.outcome, done.completed_at - f.spawned_at());
//! f.stop().await;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// How a function finished one invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `POST .../{id}/response`, with the body (JSON when it parses, else a string).
    Response(Value),
    /// `POST .../{id}/error`, with `Lambda-Runtime-Function-Error-Type` and the body.
    Error {
        /// The error type header, when sent.
        error_type: Option<String>,
        /// The error body.
        body: Value,
    },
}

impl Outcome {
    /// For an HTTP (API Gateway) function: the `statusCode` of the response.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Outcome::Response(v) => v["statusCode"].as_u64().and_then(|s| u16::try_from(s).ok()),
            Outcome::Error { .. } => None,
        }
    }
}

/// A finished invocation.
#[derive(Debug, Clone)]
pub struct Completed {
    /// The `Lambda-Runtime-Aws-Request-Id` it ran under.
    pub request_id: String,
    /// What the function answered.
    pub outcome: Outcome,
    /// When the function received the event (its `next` poll returned).
    pub delivered_at: Instant,
    /// When the function posted its response or error.
    pub completed_at: Instant,
}

/// An event waiting in the queue or being handled.
struct Queued {
    request_id: String,
    event: Value,
}

struct InFlight {
    done: oneshot::Sender<Completed>,
    delivered_at: Option<Instant>,
}

struct Shared {
    function_arn: String,
    deadline: Duration,
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<Queued>>,
    in_flight: Mutex<HashMap<String, InFlight>>,
    first_poll: Mutex<Option<Instant>>,
    init_error: Mutex<Option<Value>>,
}

/// The fake Runtime API server, on a random loopback port.
pub struct FakeRuntime {
    addr: SocketAddr,
    sender: mpsc::UnboundedSender<Queued>,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

/// An invocation queued with [`FakeRuntime::enqueue`].
pub struct Pending {
    request_id: String,
    done: oneshot::Receiver<Completed>,
}

impl Pending {
    /// The request id the function will see.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// Waits for the function to answer, at most `timeout`.
    pub async fn wait(self, timeout: Duration) -> anyhow::Result<Completed> {
        match tokio::time::timeout(timeout, self.done).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(_)) => bail!(
                "the runtime stopped before invocation {} finished",
                self.request_id
            ),
            Err(_) => bail!(
                "invocation {} not answered within {timeout:?}",
                self.request_id
            ),
        }
    }
}

impl FakeRuntime {
    /// Starts the server. Invocations get a deadline 30 s after delivery.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(
            "arn:aws:lambda:us-east-1:123456789012:function:ojs-bench",
            Duration::from_secs(30),
        )
        .await
    }

    /// Starts the server with the function ARN and per-invocation deadline it reports.
    pub async fn start_with(function_arn: &str, deadline: Duration) -> anyhow::Result<Self> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            function_arn: function_arn.to_owned(),
            deadline,
            queue: tokio::sync::Mutex::new(receiver),
            in_flight: Mutex::new(HashMap::new()),
            first_poll: Mutex::new(None),
            init_error: Mutex::new(None),
        });
        let router = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(post_response),
            )
            .route(
                "/2018-06-01/runtime/invocation/{id}/error",
                post(post_error),
            )
            .route("/2018-06-01/runtime/init/error", post(post_init_error))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            addr,
            sender,
            shared,
            server,
        })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Queues an event; the function receives it on its next poll.
    pub fn enqueue(&self, event: Value) -> anyhow::Result<Pending> {
        let request_id = uuid::Uuid::new_v4().to_string();
        let (done, rx) = oneshot::channel();
        self.shared
            .in_flight
            .lock()
            .map_err(|_| anyhow!("runtime state poisoned"))?
            .insert(
                request_id.clone(),
                InFlight {
                    done,
                    delivered_at: None,
                },
            );
        self.sender
            .send(Queued {
                request_id: request_id.clone(),
                event,
            })
            .map_err(|_| anyhow!("the runtime server is gone"))?;
        Ok(Pending {
            request_id,
            done: rx,
        })
    }

    /// Queues an event and waits for the answer.
    pub async fn invoke(&self, event: Value, timeout: Duration) -> anyhow::Result<Completed> {
        self.enqueue(event)?.wait(timeout).await
    }

    /// When the function first polled for an event (the end of its init phase).
    pub fn first_poll(&self) -> Option<Instant> {
        self.shared.first_poll.lock().ok().and_then(|g| *g)
    }

    /// The body of `POST /runtime/init/error`, if the function reported one.
    pub fn init_error(&self) -> Option<Value> {
        self.shared.init_error.lock().ok().and_then(|g| g.clone())
    }

    /// The environment a Lambda bootstrap needs to talk to this runtime:
    /// `AWS_LAMBDA_RUNTIME_API`, `AWS_LAMBDA_FUNCTION_NAME`,
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, `AWS_LAMBDA_FUNCTION_VERSION`, log group/stream.
    pub fn lambda_env(&self, function_name: &str, memory_mb: u32) -> Vec<(String, String)> {
        [
            ("AWS_LAMBDA_RUNTIME_API", self.address()),
            ("AWS_LAMBDA_FUNCTION_NAME", function_name.to_owned()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.to_string()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
            (
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{function_name}"),
            ),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "bench".to_owned()),
            ("_HANDLER", "bootstrap".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn next_invocation(State(shared): State<Arc<Shared>>) -> Response {
    if let Ok(mut first) = shared.first_poll.lock() {
        first.get_or_insert_with(Instant::now);
    }
    let queued = shared.queue.lock().await.recv().await;
    let Some(Queued { request_id, event }) = queued else {
        return StatusCode::GONE.into_response();
    };
    let now = Instant::now();
    if let Ok(mut map) = shared.in_flight.lock() {
        if let Some(f) = map.get_mut(&request_id) {
            f.delivered_at = Some(now);
        }
    }
    let deadline = epoch_ms() + shared.deadline.as_millis() as u64;
    let mut headers = HeaderMap::new();
    let mut put = |k: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            headers.insert(k, v);
        }
    };
    put("lambda-runtime-aws-request-id", request_id.clone());
    put("lambda-runtime-deadline-ms", deadline.to_string());
    put(
        "lambda-runtime-invoked-function-arn",
        shared.function_arn.clone(),
    );
    put(
        "lambda-runtime-trace-id",
        format!(
            "Root=1-{:08x}-{};Parent=0000000000000000;Sampled=0",
            epoch_ms() / 1000,
            &uuid::Uuid::new_v4().simple().to_string()[..24]
        ),
    );
    put("content-type", "application/json".into());
    (StatusCode::OK, headers, event.to_string()).into_response()
}

fn finish(shared: &Shared, id: &str, outcome: Outcome) -> StatusCode {
    let now = Instant::now();
    let Some(f) = shared.in_flight.lock().ok().and_then(|mut m| m.remove(id)) else {
        return StatusCode::BAD_REQUEST;
    };
    let _ = f.done.send(Completed {
        request_id: id.to_owned(),
        outcome,
        delivered_at: f.delivered_at.unwrap_or(now),
        completed_at: now,
    });
    StatusCode::ACCEPTED
}

fn parse(body: &Bytes) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

async fn post_response(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> StatusCode {
    finish(&shared, &id, Outcome::Response(parse(&body)))
}

async fn post_error(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let error_type = headers
        .get("lambda-runtime-function-error-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    finish(
        &shared,
        &id,
        Outcome::Error {
            error_type,
            body: parse(&body),
        },
    )
}

async fn post_init_error(State(shared): State<Arc<Shared>>, body: Bytes) -> StatusCode {
    if let Ok(mut e) = shared.init_error.lock() {
        *e = Some(parse(&body));
    }
    StatusCode::ACCEPTED
}

/// What to start: a bootstrap binary and the environment it runs in.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// The binary.
    pub binary: PathBuf,
    /// `AWS_LAMBDA_FUNCTION_NAME`.
    pub name: String,
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`.
    pub memory_mb: u32,
    /// Extra variables (region, credentials, endpoints, `OJS_*`). The process starts
    /// with an otherwise empty environment, like a Lambda sandbox.
    pub env: Vec<(String, String)>,
    /// Pass the function's stdout/stderr through (default: discarded).
    pub show_output: bool,
    /// Collect the function's stdout (its logs, EMF lines) for
    /// [`LambdaProcess::stop_with_output`]; stderr is then passed through.
    pub capture_stdout: bool,
}

impl FunctionSpec {
    /// A spec with 256 MB and no extra environment.
    pub fn new(binary: impl Into<PathBuf>, name: &str) -> Self {
        Self {
            binary: binary.into(),
            name: name.to_owned(),
            memory_mb: 256,
            env: Vec::new(),
            show_output: false,
            capture_stdout: false,
        }
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// Collects stdout for [`LambdaProcess::stop_with_output`] (stderr passes through).
    pub fn capture_stdout(mut self) -> Self {
        self.capture_stdout = true;
        self
    }
}

/// A function binary running against its own [`FakeRuntime`].
pub struct LambdaProcess {
    child: tokio::process::Child,
    runtime: FakeRuntime,
    spawned_at: Instant,
    /// Reads stdout while the process runs (so a full pipe never blocks it), when
    /// [`FunctionSpec::capture_stdout`] is set.
    stdout: Option<tokio::task::JoinHandle<std::io::Result<Vec<u8>>>>,
}

impl LambdaProcess {
    /// Starts a fresh runtime and the binary pointed at it.
    pub async fn spawn(spec: &FunctionSpec) -> anyhow::Result<Self> {
        let runtime = FakeRuntime::start().await?;
        Self::spawn_on(spec, runtime)
    }

    /// Starts the binary against `runtime` (events may already be queued on it, so the
    /// first poll returns at once, as on a cold start).
    pub fn spawn_on(spec: &FunctionSpec, runtime: FakeRuntime) -> anyhow::Result<Self> {
        let mut cmd = tokio::process::Command::new(&spec.binary);
        cmd.env_clear()
            .envs(runtime.lambda_env(&spec.name, spec.memory_mb))
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let pass = |on: bool| if on { Stdio::inherit() } else { Stdio::null() };
        if spec.capture_stdout {
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        } else {
            cmd.stdout(pass(spec.show_output))
                .stderr(pass(spec.show_output));
        }
        let spawned_at = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", spec.binary.display()))?;
        let stdout = child.stdout.take().map(|mut out| {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut out, &mut buf).await?;
                Ok(buf)
            })
        });
        Ok(Self {
            child,
            runtime,
            spawned_at,
            stdout,
        })
    }

    /// When the process was started.
    pub fn spawned_at(&self) -> Instant {
        self.spawned_at
    }

    /// The runtime the process talks to.
    pub fn runtime(&self) -> &FakeRuntime {
        &self.runtime
    }

    /// The OS process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Queues `event` and waits for its answer; fails early if the process exits or
    /// reports an init error.
    pub async fn invoke(&mut self, event: Value, timeout: Duration) -> anyhow::Result<Completed> {
        let pending = self.runtime.enqueue(event)?;
        self.wait(pending, timeout).await
    }

    /// Waits for an invocation queued on [`LambdaProcess::runtime`].
    pub async fn wait(&mut self, pending: Pending, timeout: Duration) -> anyhow::Result<Completed> {
        let id = pending.request_id().to_owned();
        tokio::select! {
            done = pending.wait(timeout) => done,
            status = self.child.wait() => {
                let init = self.runtime.init_error();
                bail!("the function exited ({status:?}) before answering {id}; init error: {init:?}")
            }
        }
    }

    /// Peak resident memory so far (`VmHWM`), in KiB, on Linux.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// Kills the process and waits for it.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Kills the process, waits for it and returns what it printed on stdout (needs
    /// [`FunctionSpec::capture_stdout`]).
    pub async fn stop_with_output(mut self) -> anyhow::Result<String> {
        let _ = self.child.start_kill();
        self.child
            .wait()
            .await
            .context("waiting for the function")?;
        let reader = self
            .stdout
            .take()
            .context("stdout was not captured (FunctionSpec::capture_stdout)")?;
        let out = reader
            .await
            .context("the stdout reader panicked")?
            .context("reading the function's stdout")?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// Events of the AWS services that invoke the functions.
pub mod events {
    use serde_json::{json, Value};

    fn now_ms() -> i64 {
        chrono::Utc::now().timestamp_millis()
    }

    /// An API Gateway HTTP API (payload format 2.0) request event.
    pub fn http_api(method: &str, path: &str, body: Option<&Value>) -> Value {
        http_api_with_headers(method, path, body, &[])
    }

    /// [`http_api`] with `headers` (lower-case names) added to, or replacing, the defaults.
    pub fn http_api_with_headers(
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Value {
        let (path_only, query) = path.split_once('?').unwrap_or((path, ""));
        let mut event = json!({
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": path_only,
            "rawQueryString": query,
            "headers": {
                "accept": "application/openjobspec+json",
                "content-type": "application/openjobspec+json",
                "host": "bench.execute-api.us-east-1.amazonaws.com",
                "user-agent": "ojs-bench"
            },
            "requestContext": {
                "accountId": "123456789012",
                "apiId": "bench",
                "domainName": "bench.execute-api.us-east-1.amazonaws.com",
                "domainPrefix": "bench",
                "http": {
                    "method": method,
                    "path": path_only,
                    "protocol": "HTTP/1.1",
                    "sourceIp": "127.0.0.1",
                    "userAgent": "ojs-bench"
                },
                "requestId": uuid::Uuid::new_v4().to_string(),
                "routeKey": "$default",
                "stage": "$default",
                "time": chrono::Utc::now().format("%d/%b/%Y:%H:%M:%S +0000").to_string(),
                "timeEpoch": now_ms()
            },
            "isBase64Encoded": false
        });
        for (k, v) in headers {
            event["headers"][*k] = Value::String((*v).to_owned());
        }
        if let Some(b) = body {
            event["body"] = Value::String(b.to_string());
        }
        event
    }

    /// An EventBridge scheduled event (`rate(...)` / `cron(...)` rule).
    pub fn eventbridge_scheduled() -> Value {
        json!({
            "version": "0",
            "id": uuid::Uuid::new_v4().to_string(),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": "123456789012",
            "time": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "region": "us-east-1",
            "resources": ["arn:aws:events:us-east-1:123456789012:rule/ojs-scheduler"],
            "detail": {}
        })
    }

    /// A DynamoDB stream event source batch of `records` as the Streams API returns them
    /// (Lambda adds only the stream's ARN to each).
    pub fn dynamodb_stream(stream_arn: &str, records: &[Value]) -> Value {
        let records: Vec<Value> = records
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r["eventSourceARN"] = Value::String(stream_arn.to_owned());
                r
            })
            .collect();
        json!({ "Records": records })
    }

    /// An SQS event source batch with one record per body.
    pub fn sqs(bodies: &[String]) -> Value {
        let records: Vec<Value> = bodies
            .iter()
            .map(|body| {
                json!({
                    "messageId": uuid::Uuid::new_v4().to_string(),
                    "receiptHandle": uuid::Uuid::new_v4().simple().to_string(),
                    "body": body,
                    "attributes": {
                        "ApproximateReceiveCount": "1",
                        "SentTimestamp": now_ms().to_string(),
                        "SenderId": "123456789012",
                        "ApproximateFirstReceiveTimestamp": now_ms().to_string()
                    },
                    "messageAttributes": {},
                    "md5OfBody": "",
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:ojs-timer",
                    "awsRegion": "us-east-1"
                })
            })
            .collect();
        json!({ "Records": records })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays the part of a bootstrap over plain HTTP: poll, answer, poll again.
    #[tokio::test]
    async fn serves_events_and_records_answers() -> anyhow::Result<()> {
        let rt = FakeRuntime::start().await?;
        let base = format!("http://{}/2018-06-01/runtime", rt.address());
        let first = rt.enqueue(serde_json::json!({"n": 1}))?;
        let second = rt.enqueue(serde_json::json!({"n": 2}))?;
        let client = reqwest::Client::new();
        for (expect, ok) in [(1, true), (2, false)] {
            let res = client.get(format!("{base}/invocation/next")).send().await?;
            let id = res
                .headers()
                .get("lambda-runtime-aws-request-id")
                .context("request id header")?
                .to_str()?
                .to_owned();
            for h in [
                "lambda-runtime-deadline-ms",
                "lambda-runtime-invoked-function-arn",
                "lambda-runtime-trace-id",
            ] {
                assert!(res.headers().contains_key(h), "missing {h}");
            }
            let event: Value = res.json().await?;
            assert_eq!(event["n"], expect);
            let url = if ok {
                format!("{base}/invocation/{id}/response")
            } else {
                format!("{base}/invocation/{id}/error")
            };
            let posted = client
                .post(url)
                .header("lambda-runtime-function-error-type", "Boom")
                .body(r#"{"done":true}"#)
                .send()
                .await?;
            assert_eq!(posted.status().as_u16(), 202);
        }
        assert!(rt.first_poll().is_some());
        let a = first.wait(Duration::from_secs(5)).await?;
        assert_eq!(
            a.outcome,
            Outcome::Response(serde_json::json!({"done": true}))
        );
        assert!(a.completed_at >= a.delivered_at);
        let b = second.wait(Duration::from_secs(5)).await?;
        assert_eq!(
            b.outcome,
            Outcome::Error {
                error_type: Some("Boom".into()),
                body: serde_json::json!({"done": true})
            }
        );
        client
            .post(format!("{base}/init/error"))
            .body(r#"{"errorMessage":"x"}"#)
            .send()
            .await?;
        assert_eq!(
            rt.init_error(),
            Some(serde_json::json!({"errorMessage": "x"}))
        );
        Ok(())
    }

    /// A "function" that prints a line and exits: `invoke` notices the exit, and
    /// `stop_with_output` returns the line; without `capture_stdout` there is nothing.
    #[cfg(unix)]
    #[tokio::test]
    async fn captures_stdout_and_notices_an_exit() -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let script = std::env::temp_dir().join(format!(
            "ojs-fake-function-{}.sh",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(
            &script,
            "#!/bin/sh\necho \"ran as $AWS_LAMBDA_FUNCTION_NAME $X\"\n",
        )?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        let spec = FunctionSpec::new(&script, "echo").env("X", "1");
        let mut f = LambdaProcess::spawn(&spec.clone().capture_stdout()).await?;
        let exited = f
            .invoke(serde_json::json!({}), Duration::from_secs(10))
            .await;
        assert!(exited.is_err(), "{exited:?}");
        assert_eq!(f.stop_with_output().await?, "ran as echo 1\n");
        let mut quiet = LambdaProcess::spawn(&spec).await?;
        let _ = quiet
            .invoke(serde_json::json!({}), Duration::from_secs(10))
            .await;
        assert!(quiet.stop_with_output().await.is_err());
        std::fs::remove_file(&script)?;
        Ok(())
    }

    #[test]
    fn events_have_the_shapes_the_runtimes_expect() {
        let e = events::http_api(
            "POST",
            "/ojs/v1/jobs?x=1",
            Some(&serde_json::json!({"a": 1})),
        );
        assert_eq!(e["version"], "2.0");
        assert_eq!(e["rawPath"], "/ojs/v1/jobs");
        assert_eq!(e["rawQueryString"], "x=1");
        assert_eq!(e["requestContext"]["http"]["method"], "POST");
        assert_eq!(e["body"], r#"{"a":1}"#);
        let h = events::http_api_with_headers(
            "GET",
            "/ojs/v1/jobs/x",
            None,
            &[("authorization", "Bearer k"), ("accept", "*/*")],
        );
        assert_eq!(h["headers"]["authorization"], "Bearer k");
        assert_eq!(h["headers"]["accept"], "*/*");
        assert_eq!(h["headers"]["host"], e["headers"]["host"]);
        assert!(h.get("body").is_none());
        assert_eq!(
            events::eventbridge_scheduled()["detail-type"],
            "Scheduled Event"
        );
        assert_eq!(events::sqs(&["b".into()])["Records"][0]["body"], "b");
    }
}
