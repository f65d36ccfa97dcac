//! A fault-injecting HTTP/1.1 proxy for the reliability tests. Put it in front of
//! DynamoDB Local (so a [`Store`] sees throttling, 500s, timeouts and dropped connections
//! exactly as the SDK would from AWS) or in front of the API (so a worker loses the
//! answer to its FETCH).
//!
//! Faults come from two sources: a random fraction of matching requests
//! ([`FaultProxy::set_rate`]), and a script of faults for the next requests matching a
//! filter ([`FaultProxy::script`]), for deterministic tests. The `*After` faults forward
//! the request first, so the write happens at DynamoDB while the client sees a failure:
//! the ambiguous case a retry has to survive.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use ojs_store::{Store, StoreConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;

use crate::proxy::{aws_error, lock, operation_of, send, upstream_client};

/// One kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// `400 ProvisionedThroughputExceededException`, not forwarded.
    Throughput,
    /// `400 ThrottlingException`, not forwarded.
    Throttling,
    /// `500 InternalServerError`, not forwarded.
    ServerError,
    /// No answer for longer than the SDK's attempt timeout, then the connection closes;
    /// not forwarded.
    Hang,
    /// The connection closes without an answer; not forwarded.
    Drop,
    /// Forwarded (the write happens), then answered `500 InternalServerError`.
    ServerErrorAfter,
    /// Forwarded, then the connection closes without an answer.
    DropAfter,
    /// Forwarded, then no answer for longer than the SDK's attempt timeout.
    HangAfter,
    /// No fault: forwarded and answered as is (a script's way to let a request through).
    Pass,
    /// `400 TransactionCanceledException` whose every reason is `TransactionConflict`
    /// (another transaction held an item), not forwarded. For transactions only: not in
    /// [`Fault::ALL`].
    TransactionConflict,
    /// Held until [`FaultProxy::release`] (or the hang time), then forwarded and answered
    /// as is: lets a test act between a request's sending and its arrival. Not in
    /// [`Fault::ALL`].
    Hold,
}

impl Fault {
    /// Every kind.
    pub const ALL: [Fault; 8] = [
        Fault::Throughput,
        Fault::Throttling,
        Fault::ServerError,
        Fault::Hang,
        Fault::Drop,
        Fault::ServerErrorAfter,
        Fault::DropAfter,
        Fault::HangAfter,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Throughput => "throughput_exceeded",
            Fault::Throttling => "throttling",
            Fault::ServerError => "500",
            Fault::Hang => "timeout",
            Fault::Drop => "dropped_connection",
            Fault::ServerErrorAfter => "500_after_write",
            Fault::DropAfter => "dropped_after_write",
            Fault::HangAfter => "timeout_after_write",
            Fault::Pass => "none",
            Fault::TransactionConflict => "transaction_conflict",
            Fault::Hold => "held",
        }
    }

    /// Whether the request reaches the upstream before the fault.
    pub fn forwards(self) -> bool {
        matches!(
            self,
            Fault::ServerErrorAfter
                | Fault::DropAfter
                | Fault::HangAfter
                | Fault::Pass
                | Fault::Hold
        )
    }
}

/// Which requests a fault may hit: a DynamoDB operation (the `X-Amz-Target` suffix, e.g.
/// `PutItem`) or an HTTP path (e.g. `/ojs/v1/workers/fetch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Every request.
    Any,
    /// DynamoDB operations whose target ends with this name.
    Operation(String),
    /// Requests to this exact path.
    Path(String),
}

impl Filter {
    /// A DynamoDB operation filter.
    pub fn op(name: &str) -> Self {
        Filter::Operation(name.to_owned())
    }

    fn matches(&self, operation: Option<&str>, path: &str) -> bool {
        match self {
            Filter::Any => true,
            Filter::Operation(name) => operation.is_some_and(|t| t.ends_with(name.as_str())),
            Filter::Path(p) => p == path,
        }
    }
}

struct Plan {
    rate: f64,
    kinds: Vec<Fault>,
    filter: Filter,
    script: VecDeque<(Filter, Fault)>,
    hang: Duration,
    rng: StdRng,
}

#[derive(Default)]
struct Tally {
    requests: u64,
    by_operation: HashMap<String, u64>,
    injected: HashMap<Fault, u64>,
    injected_by_operation: HashMap<(String, Fault), u64>,
}

struct Shared {
    upstream: String,
    client: reqwest::Client,
    plan: Mutex<Plan>,
    tally: Mutex<Tally>,
    /// Permits for held requests ([`Fault::Hold`]).
    released: tokio::sync::Semaphore,
}

/// Counts of what the proxy saw and did.
#[derive(Debug, Clone, Default)]
pub struct FaultReport {
    /// Requests received.
    pub requests: u64,
    /// Requests received per DynamoDB operation (or path).
    pub by_operation: HashMap<String, u64>,
    /// Faults injected, by kind.
    pub injected: HashMap<Fault, u64>,
    /// Faults injected, by operation and kind.
    pub injected_by_operation: HashMap<(String, Fault), u64>,
}

impl FaultReport {
    /// Faults injected in total.
    pub fn total_injected(&self) -> u64 {
        self.injected.values().sum()
    }

    /// One line per kind, for test output.
    pub fn summary(&self) -> String {
        let mut kinds: Vec<_> = self.injected.iter().collect();
        kinds.sort();
        let per_kind: Vec<String> = kinds
            .iter()
            .map(|(k, n)| format!("{}={n}", k.name()))
            .collect();
        format!(
            "{} requests, {} faults injected ({})",
            self.requests,
            self.total_injected(),
            per_kind.join(", ")
        )
    }
}

/// A running proxy. Dropping it stops accepting connections.
pub struct FaultProxy {
    /// e.g. `http://127.0.0.1:41234`
    pub url: String,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy forwarding to `upstream` (e.g. `http://127.0.0.1:8000`), injecting
    /// nothing until told to. The random choices use `seed`, so a failing run can be
    /// replayed with the same seed.
    pub async fn start(upstream: &str, seed: u64) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let client = upstream_client()?;
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client,
            plan: Mutex::new(Plan {
                rate: 0.0,
                kinds: Fault::ALL.to_vec(),
                filter: Filter::Any,
                script: VecDeque::new(),
                hang: Duration::from_millis(3_500),
                rng: StdRng::seed_from_u64(seed),
            }),
            tally: Mutex::new(Tally::default()),
            released: tokio::sync::Semaphore::new(0),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                tokio::spawn(serve_connection(Arc::clone(&accept_shared), stream, peer));
            }
        });
        Ok(Self {
            url,
            shared,
            accept,
        })
    }

    /// Injects one of `kinds` (uniformly) into a `rate` fraction of the requests that
    /// match `filter`. A rate of 0 stops random faults.
    pub fn set_rate(&self, rate: f64, kinds: &[Fault], filter: Filter) {
        let mut plan = lock(&self.shared.plan);
        plan.rate = rate.clamp(0.0, 1.0);
        plan.kinds = kinds.to_vec();
        plan.filter = filter;
    }

    /// Stops random faults and clears the script.
    pub fn heal(&self) {
        let mut plan = lock(&self.shared.plan);
        plan.rate = 0.0;
        plan.script.clear();
    }

    /// Applies `faults`, in order, to the next requests matching `filter` (before any
    /// random fault).
    pub fn script(&self, filter: Filter, faults: &[Fault]) {
        let mut plan = lock(&self.shared.plan);
        plan.script
            .extend(faults.iter().map(|f| (filter.clone(), *f)));
    }

    /// Scripted faults not yet applied.
    pub fn scripted_left(&self) -> usize {
        lock(&self.shared.plan).script.len()
    }

    /// How long a hang lasts (default 3.5 s: longer than the store's 3 s attempt timeout).
    pub fn set_hang(&self, hang: Duration) {
        lock(&self.shared.plan).hang = hang;
    }

    /// Lets `requests` held requests ([`Fault::Hold`]) go on, now or when they come.
    pub fn release(&self, requests: usize) {
        self.shared.released.add_permits(requests);
    }

    /// What the proxy saw and injected so far.
    pub fn report(&self) -> FaultReport {
        let t = lock(&self.shared.tally);
        FaultReport {
            requests: t.requests,
            by_operation: t.by_operation.clone(),
            injected: t.injected.clone(),
            injected_by_operation: t.injected_by_operation.clone(),
        }
    }
}

/// A store on `table` whose DynamoDB client goes through `proxy_url` with one attempt
/// per call and 30 s for it: a request the proxy holds ([`Fault::Hold`]) is neither
/// timed out nor sent again, however slow the machine, so a test decides what happens
/// while it waits.
pub fn patient_store_through(sdk: &aws_config::SdkConfig, table: &str) -> Store {
    let patient = aws_sdk_dynamodb::config::Builder::from(sdk)
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_secs(30))
                .build(),
        )
        .build();
    Store::new(
        aws_sdk_dynamodb::Client::from_conf(patient),
        StoreConfig::for_table(table),
    )
}

/// A store on `table` whose DynamoDB client goes through `proxy_url`, built with the
/// product's own [`ojs_store::client_for`] so its retry and timeout settings apply.
pub async fn store_through(proxy_url: &str, table: &str) -> Store {
    let sdk = ojs_store::sdk_loader().endpoint_url(proxy_url).load().await;
    Store::new(ojs_store::client_for(&sdk), StoreConfig::for_table(table))
}

/// The DynamoDB endpoint the tests use (what [`crate::fresh_store`] talks to): the
/// process's AWS-strict layer ([`crate::strict_proxy::process_proxy`]) unless
/// `OJS_STRICT_DDB=off`, in front of [`raw_dynamodb_endpoint`].
pub fn dynamodb_endpoint() -> String {
    crate::strict_proxy::process_proxy().unwrap_or_else(raw_dynamodb_endpoint)
}

/// The DynamoDB endpoint of the environment (DynamoDB Local by default), without the
/// strict layer.
pub fn raw_dynamodb_endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|_| "http://127.0.0.1:8000".to_owned())
}

async fn serve_connection(shared: Arc<Shared>, stream: tokio::net::TcpStream, _peer: SocketAddr) {
    // Closing the socket without an answer is done by dropping the connection future.
    let kill = Arc::new(Notify::new());
    let service_kill = Arc::clone(&kill);
    let service = hyper::service::service_fn(move |req| {
        let shared = Arc::clone(&shared);
        let kill = Arc::clone(&service_kill);
        async move { Ok::<_, Infallible>(handle(shared, kill, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = conn => {}
        () = kill.notified() => {}
    }
}

fn choose(shared: &Shared, operation: Option<&str>, path: &str) -> (Option<Fault>, Duration) {
    let mut plan = lock(&shared.plan);
    let hang = plan.hang;
    if let Some(i) = plan
        .script
        .iter()
        .position(|(f, _)| f.matches(operation, path))
    {
        return (plan.script.remove(i).map(|(_, f)| f), hang);
    }
    if plan.rate <= 0.0 || plan.kinds.is_empty() || !plan.filter.matches(operation, path) {
        return (None, hang);
    }
    let rate = plan.rate;
    if plan.rng.random_bool(rate) {
        let n = plan.kinds.len();
        let i = plan.rng.random_range(0..n);
        (plan.kinds.get(i).copied(), hang)
    } else {
        (None, hang)
    }
}

async fn handle(
    shared: Arc<Shared>,
    kill: Arc<Notify>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let operation = operation_of(req.headers());
    let path = req.uri().path().to_owned();
    let (fault, hang) = choose(&shared, operation.as_deref(), &path);
    let fault = fault.filter(|f| *f != Fault::Pass);
    {
        let mut t = lock(&shared.tally);
        t.requests += 1;
        let op = operation.clone().unwrap_or_else(|| path.clone());
        *t.by_operation.entry(op.clone()).or_default() += 1;
        if let Some(f) = fault {
            *t.injected.entry(f).or_default() += 1;
            *t.injected_by_operation.entry((op, f)).or_default() += 1;
        }
    }
    let close = || async {
        kill.notify_one();
        std::future::pending::<()>().await;
    };
    match fault {
        Some(Fault::Throughput) => return injected(400, "ProvisionedThroughputExceededException"),
        Some(Fault::Throttling) => return injected(400, "ThrottlingException"),
        Some(Fault::ServerError) => return injected(500, "InternalServerError"),
        Some(Fault::TransactionConflict) => return transaction_conflict(),
        Some(Fault::Hang) => {
            tokio::time::sleep(hang).await;
            close().await;
        }
        Some(Fault::Drop) => close().await,
        Some(Fault::Hold) => {
            if let Ok(Ok(permit)) = tokio::time::timeout(hang, shared.released.acquire()).await {
                permit.forget();
            }
        }
        _ => {}
    }
    let answer = match forward(&shared, req).await {
        Ok(res) => res,
        Err(e) => return injected(502, &format!("ProxyUpstreamError: {e:#}")),
    };
    match fault {
        Some(Fault::ServerErrorAfter) => injected(500, "InternalServerError"),
        Some(Fault::DropAfter) => {
            close().await;
            answer
        }
        Some(Fault::HangAfter) => {
            tokio::time::sleep(hang).await;
            close().await;
            answer
        }
        _ => answer,
    }
}

async fn forward(shared: &Shared, req: Request<Incoming>) -> anyhow::Result<Response<Full<Bytes>>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .context("reading the request")?
        .to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    send(
        &shared.client,
        &shared.upstream,
        &parts.method,
        path,
        &parts.headers,
        body,
    )
    .await?
    .into_response()
}

/// A DynamoDB JSON-protocol error, as the service sends it.
fn injected(status: u16, code: &str) -> Response<Full<Bytes>> {
    aws_error(
        status,
        &format!("com.amazonaws.dynamodb.v20120810#{code}"),
        &format!("injected by the fault proxy: {code}"),
    )
}

/// A transaction cancelled by a conflicting one, as DynamoDB answers it (one reason per
/// item; the SDK reads as many as there are, and 25 covers every transaction here).
fn transaction_conflict() -> Response<Full<Bytes>> {
    let reasons: Vec<serde_json::Value> = (0..25)
        .map(|_| serde_json::json!({"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}))
        .collect();
    let body = serde_json::json!({
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "message": "Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict]",
        "CancellationReasons": reasons,
    })
    .to_string();
    Response::builder()
        .status(400)
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amzn-errortype", "TransactionCanceledException")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// A raw DynamoDB item.
pub type RawItem = HashMap<String, aws_sdk_dynamodb::types::AttributeValue>;

/// Every item of `table`, read straight from DynamoDB (no proxy, no API): what was really
/// written, for "nothing lost, nothing duplicated, nothing written" checks.
pub async fn table_items(table: &str) -> anyhow::Result<Vec<RawItem>> {
    let sdk = ojs_store::sdk_config().await;
    let client = ojs_store::client_for(&sdk);
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let out = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
        items.extend(out.items().iter().cloned());
        start = out.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(items);
        }
    }
}

/// The job items among `items`: (job id, state).
pub fn jobs_in(items: &[RawItem]) -> Vec<(String, String)> {
    items
        .iter()
        .filter_map(|i| {
            if i.get("sk")?.as_s().ok()? != "JOB" {
                return None;
            }
            let id = i.get("pk")?.as_s().ok()?.strip_prefix("JOB#")?.to_owned();
            let state = i.get("state")?.as_s().ok()?.clone();
            Some((id, state))
        })
        .collect()
}
