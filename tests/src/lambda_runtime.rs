//! A fake Lambda Runtime API (the HTTP interface a `provided.al2023` bootstrap polls), so
//! the real function binaries can be run and invoked on this machine: start it, spawn a
//! binary with `AWS_LAMBDA_RUNTIME_API` pointing at it, hand it events, read its answers.
//!
//! Endpoints served (version 2018-06-01): `GET runtime/invocation/next` (long poll),
//! `POST runtime/invocation/{id}/response`, `POST runtime/invocation/{id}/error`,
//! `POST runtime/init/error`.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, Mutex};

/// What a function answered to one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `POST .../response` with this JSON body.
    Response(Value),
    /// `POST .../error` with this body.
    Error(Value),
}

struct Pending {
    id: String,
    event: Value,
}

#[derive(Clone)]
struct Shared {
    next: Arc<Mutex<mpsc::Receiver<Pending>>>,
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Outcome>>>>,
    init_error: Arc<Mutex<Option<Value>>>,
}

/// The fake runtime API, listening on a random loopback port.
pub struct FakeRuntime {
    addr: String,
    queue: mpsc::Sender<Pending>,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl FakeRuntime {
    /// Starts the server.
    pub async fn start() -> anyhow::Result<Self> {
        let (queue, rx) = mpsc::channel(64);
        let shared = Shared {
            next: Arc::new(Mutex::new(rx)),
            waiting: Arc::new(Mutex::new(HashMap::new())),
            init_error: Arc::new(Mutex::new(None)),
        };
        let router = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(invocation_response),
            )
            .route(
                "/2018-06-01/runtime/invocation/{id}/error",
                post(invocation_error),
            )
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            addr,
            queue,
            shared,
            server,
        })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> &str {
        &self.addr
    }

    /// Hands `event` to the function and waits (at most `timeout`) for its answer.
    pub async fn invoke(&self, event: Value, timeout: Duration) -> anyhow::Result<Outcome> {
        let id = uuid::Uuid::new_v4().to_string();
        let (tx, rx) = oneshot::channel();
        self.shared.waiting.lock().await.insert(id.clone(), tx);
        self.queue
            .send(Pending { id, event })
            .await
            .map_err(|_| anyhow!("the fake runtime stopped"))?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => Err(anyhow!("the invocation was dropped")),
            Err(_) => match self.shared.init_error.lock().await.clone() {
                Some(e) => Err(anyhow!("the function failed to initialise: {e}")),
                None => Err(anyhow!("no answer within {timeout:?}")),
            },
        }
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn next_invocation(State(s): State<Shared>) -> Response {
    let Some(p) = s.next.lock().await.recv().await else {
        return StatusCode::GONE.into_response();
    };
    let deadline = chrono::Utc::now().timestamp_millis() + 30_000;
    let mut headers = HeaderMap::new();
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    };
    put("lambda-runtime-aws-request-id", p.id);
    put("lambda-runtime-deadline-ms", deadline.to_string());
    put(
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:us-east-1:000000000000:function:ojs-test".into(),
    );
    put(
        "lambda-runtime-trace-id",
        "Root=1-00000000-000000000000000000000000;Parent=0000000000000000;Sampled=0".into(),
    );
    put("content-type", "application/json".into());
    (StatusCode::OK, headers, p.event.to_string()).into_response()
}

async fn finish(s: &Shared, id: &str, outcome: Outcome) -> StatusCode {
    match s.waiting.lock().await.remove(id) {
        Some(tx) => {
            let _ = tx.send(outcome);
            StatusCode::ACCEPTED
        }
        None => StatusCode::BAD_REQUEST,
    }
}

fn json_of(body: &Bytes) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

async fn invocation_response(
    State(s): State<Shared>,
    Path(id): Path<String>,
    body: Bytes,
) -> StatusCode {
    finish(&s, &id, Outcome::Response(json_of(&body))).await
}

async fn invocation_error(
    State(s): State<Shared>,
    Path(id): Path<String>,
    body: Bytes,
) -> StatusCode {
    finish(&s, &id, Outcome::Error(json_of(&body))).await
}

async fn init_error(State(s): State<Shared>, body: Bytes) -> StatusCode {
    *s.init_error.lock().await = Some(json_of(&body));
    StatusCode::ACCEPTED
}

/// A function binary running against a [`FakeRuntime`], killed on drop.
pub struct RunningFunction {
    /// The runtime it polls.
    pub runtime: FakeRuntime,
    child: tokio::process::Child,
    /// When the process was spawned.
    pub spawned: Instant,
}

impl RunningFunction {
    /// Spawns `binary` with the Lambda environment, `env` on top (e.g. `OJS_TABLE`), and
    /// the AWS endpoint variables of this process (DynamoDB Local, SQS).
    pub async fn spawn(binary: &std::path::Path, env: &[(&str, String)]) -> anyhow::Result<Self> {
        let runtime = FakeRuntime::start().await?;
        let mut cmd = tokio::process::Command::new(binary);
        cmd.env("AWS_LAMBDA_RUNTIME_API", runtime.address())
            .env("AWS_LAMBDA_FUNCTION_NAME", "ojs-test")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "test")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "test")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let spawned = Instant::now();
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", binary.display()))?;
        Ok(Self {
            runtime,
            child,
            spawned,
        })
    }

    /// Invokes the function with `event`.
    pub async fn invoke(&self, event: Value) -> anyhow::Result<Outcome> {
        self.runtime.invoke(event, Duration::from_secs(30)).await
    }

    /// Stops the process and returns what it printed on stdout (logs, EMF lines).
    pub async fn stop(mut self) -> anyhow::Result<String> {
        let _ = self.child.start_kill();
        let out = self.child.wait_with_output().await?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// An API Gateway HTTP API (payload format 2.0) request event.
pub fn http_api_event(
    method: &str,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Value {
    let (raw_path, query) = path.split_once('?').unwrap_or((path, ""));
    let mut h = serde_json::Map::new();
    h.insert("host".into(), "api.example.com".into());
    if body.is_some() {
        h.insert("content-type".into(), "application/json".into());
    }
    for (k, v) in headers {
        h.insert((*k).into(), (*v).into());
    }
    serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": query,
        "headers": h,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "test",
            "domainName": "api.example.com",
            "domainPrefix": "api",
            "http": {
                "method": method,
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "ojs-tests"
            },
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": "$default",
            "stage": "$default",
            "time": "22/Nov/2026:00:00:00 +0000",
            "timeEpoch": 0
        },
        "body": body.map(Value::to_string),
        "isBase64Encoded": false
    })
}
