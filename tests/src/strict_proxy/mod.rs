//! An AWS-strict DynamoDB layer for the tests: an HTTP proxy in front of DynamoDB Local
//! that reads the JSON protocol (`X-Amz-Target: DynamoDB_20120810.<Op>`) and applies what
//! AWS documents and DynamoDB Local skips, answering as AWS does:
//!
//! - one item at most once per TransactWriteItems / TransactGetItems, at most 100
//!   actions, at most 4 MB of items ([`rules`]);
//! - BatchWriteItem 25 requests, BatchGetItem 100 keys, no key twice;
//! - 400 KB per item on PutItem, transaction and batch Puts (UpdateItem: only a value
//!   over 400 KB is refused up front; a resulting item over 400 KB is detected after the
//!   write and reported as a violation, not refused);
//! - part of a multi-item BatchGetItem / BatchWriteItem returned as
//!   UnprocessedKeys / UnprocessedItems at random;
//! - Query and Scan pages cut short at random (a lower `Limit`, so DynamoDB answers with a
//!   `LastEvaluatedKey`): every reader has to paginate;
//! - index lag on GSI queries ([`lag`]);
//! - throttling bursts: a partition answers ThrottlingException /
//!   ProvisionedThroughputExceededException for a short while.
//!
//! Configured by [`StrictConfig`] (environment: see [`StrictConfig::from_env`]). The tests
//! share one proxy per process ([`process_proxy`]), by default with the rules and the
//! random behaviours (the full mode, `OJS_STRICT_DDB=full`); `OJS_STRICT_DDB=rules` keeps
//! the rules alone, `OJS_STRICT_DDB=off` turns it off.
//! Refusals and violations are printed to stderr (`strict-ddb: ...`).

pub mod lag;
pub mod rules;
pub mod size;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

use crate::proxy::{aws_error, lock, operation_of, send, upstream_client, Answer};
use lag::{Item, Lag, LaggedQuery, TableInfo};
use rules::{Rejection, Target};

/// What the strict layer does beyond the fixed AWS limits.
#[derive(Debug, Clone)]
pub struct StrictConfig {
    /// Seed of the random choices.
    pub seed: u64,
    /// Chance that a BatchGetItem / BatchWriteItem of 2+ entries gets part back unprocessed.
    pub unprocessed_rate: f64,
    /// Chance that a Query / Scan page is cut short.
    pub short_page_rate: f64,
    /// How long a GSI lags behind the table (0: no lag).
    pub index_lag: Duration,
    /// Chance that a request starts a throttling burst on its partition.
    pub throttle_rate: f64,
    /// How long a burst lasts.
    pub throttle_burst: Duration,
    /// Print refusals and violations to stderr.
    pub log: bool,
}

impl Default for StrictConfig {
    /// The strict default: realistic, and cheap enough for the suites.
    fn default() -> Self {
        Self {
            seed: rand::random(),
            unprocessed_rate: 0.25,
            short_page_rate: 0.25,
            index_lag: Duration::from_millis(50),
            throttle_rate: 0.001,
            throttle_burst: Duration::from_millis(10),
            log: true,
        }
    }
}

impl StrictConfig {
    /// Only the request rules: no random behaviour, no lag.
    pub fn rules_only() -> Self {
        Self {
            unprocessed_rate: 0.0,
            short_page_rate: 0.0,
            index_lag: Duration::ZERO,
            throttle_rate: 0.0,
            ..Self::default()
        }
    }

    /// The full mode by default (`OJS_STRICT_DDB` unset, `full` or `on`): AWS's request
    /// rules and the realistic behaviours of [`StrictConfig::default`] (unprocessed keys,
    /// short pages, index lag, throttling bursts); with `OJS_STRICT_DDB=rules` the rules
    /// only ([`StrictConfig::rules_only`]). Either overridden by
    /// `OJS_STRICT_SEED`,
    /// `OJS_STRICT_UNPROCESSED` (rate), `OJS_STRICT_SHORT_PAGES` (rate),
    /// `OJS_STRICT_INDEX_LAG_MS`, `OJS_STRICT_THROTTLE` (rate), `OJS_STRICT_THROTTLE_MS`
    /// (burst length) and `OJS_STRICT_LOG=0`.
    pub fn from_env() -> Self {
        let rules = std::env::var("OJS_STRICT_DDB")
            .is_ok_and(|v| matches!(v.trim(), "rules" | "rules-only" | "rules_only"));
        let mut c = if rules {
            Self::rules_only()
        } else {
            Self::default()
        };
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let rate = |k: &str, d: f64| {
            var(k)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map_or(d, |r| r.clamp(0.0, 1.0))
        };
        let ms = |k: &str, d: Duration| {
            var(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(d, Duration::from_millis)
        };
        if let Some(seed) = var("OJS_STRICT_SEED").and_then(|v| v.trim().parse().ok()) {
            c.seed = seed;
        }
        c.unprocessed_rate = rate("OJS_STRICT_UNPROCESSED", c.unprocessed_rate);
        c.short_page_rate = rate("OJS_STRICT_SHORT_PAGES", c.short_page_rate);
        c.index_lag = ms("OJS_STRICT_INDEX_LAG_MS", c.index_lag);
        c.throttle_rate = rate("OJS_STRICT_THROTTLE", c.throttle_rate);
        c.throttle_burst = ms("OJS_STRICT_THROTTLE_MS", c.throttle_burst);
        c.log = !matches!(
            var("OJS_STRICT_LOG").as_deref(),
            Some("0" | "off" | "false")
        );
        c
    }

    /// One line for logs.
    pub fn describe(&self) -> String {
        format!(
            "seed={} unprocessed={} short_pages={} index_lag={}ms throttle={} burst={}ms",
            self.seed,
            self.unprocessed_rate,
            self.short_page_rate,
            self.index_lag.as_millis(),
            self.throttle_rate,
            self.throttle_burst.as_millis()
        )
    }
}

/// Counts of what the strict layer saw and did.
#[derive(Debug, Clone, Default)]
pub struct StrictReport {
    /// Requests received.
    pub requests: u64,
    /// Requests per operation.
    pub by_operation: BTreeMap<String, u64>,
    /// Requests refused, per rule.
    pub rejected: BTreeMap<String, u64>,
    /// Requests (or batch entries) throttled.
    pub throttled: u64,
    /// Throttling bursts started.
    pub bursts: u64,
    /// Batches answered with part unprocessed, and the entries left unprocessed.
    pub unprocessed_batches: u64,
    /// Entries returned unprocessed.
    pub unprocessed_entries: u64,
    /// Query / Scan pages cut short.
    pub short_pages: u64,
    /// GSI queries seen.
    pub index_queries: u64,
    /// GSI queries the lag was applied to (the rest: no recent write, or unsupported).
    pub lagged_queries: u64,
    /// Index entries the lag hid / showed.
    pub lag_hidden: u64,
    /// Lagged entries shown.
    pub lag_shown: u64,
    /// GSI queries the lag could not evaluate, by key condition / reason.
    pub lag_unsupported: BTreeMap<String, u64>,
    /// What AWS would have refused but the proxy could only detect afterwards.
    pub violations: Vec<String>,
}

impl StrictReport {
    /// A few lines for test output.
    pub fn summary(&self) -> String {
        format!(
            "{} requests; refused {:?}; throttled {} ({} bursts); unprocessed {} entries in {} batches; {} short pages; GSI queries {} (lag applied to {}, hid {}, showed {}; unsupported {:?}); violations detected after the fact: {}",
            self.requests,
            self.rejected,
            self.throttled,
            self.bursts,
            self.unprocessed_entries,
            self.unprocessed_batches,
            self.short_pages,
            self.index_queries,
            self.lagged_queries,
            self.lag_hidden,
            self.lag_shown,
            self.lag_unsupported,
            self.violations.len(),
        )
    }
}

struct Shared {
    upstream: String,
    client: reqwest::Client,
    config: Mutex<StrictConfig>,
    rng: Mutex<StdRng>,
    tables: Mutex<HashMap<String, Arc<TableInfo>>>,
    lag: Mutex<Lag>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    bursts: Mutex<HashMap<String, Instant>>,
    report: Mutex<StrictReport>,
}

/// A running strict proxy. Dropping it stops accepting connections.
pub struct StrictProxy {
    /// e.g. `http://127.0.0.1:41234`
    pub url: String,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for StrictProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl StrictProxy {
    /// Starts a proxy on a random loopback port in front of `upstream`.
    pub async fn start(upstream: &str, config: StrictConfig) -> anyhow::Result<Self> {
        Self::start_on("127.0.0.1:0", upstream, config).await
    }

    /// Starts a proxy listening on `listen` (e.g. `127.0.0.1:8001`).
    pub async fn start_on(
        listen: &str,
        upstream: &str,
        config: StrictConfig,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: upstream_client()?,
            rng: Mutex::new(StdRng::seed_from_u64(config.seed)),
            config: Mutex::new(config),
            tables: Mutex::default(),
            lag: Mutex::default(),
            locks: Mutex::default(),
            bursts: Mutex::default(),
            report: Mutex::default(),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = Arc::clone(&accept_shared);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let shared = Arc::clone(&shared);
                        // A request runs to its end on a task of its own, as on AWS: a
                        // client that hangs up (an SDK attempt timeout, the fault proxy's
                        // dropped connections) must not cancel it between the write and
                        // its record, which left the item in the lag window for good
                        // (hidden from its indexes: jobs stuck `available`).
                        let task = tokio::spawn(handle(shared, req));
                        async move {
                            Ok::<_, Infallible>(match task.await {
                                Ok(res) => res,
                                Err(e) => internal(&format!("the request's task: {e}")),
                            })
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            url,
            shared,
            accept,
        })
    }

    /// What the proxy saw and did so far.
    pub fn report(&self) -> StrictReport {
        lock(&self.shared.report).clone()
    }

    /// Replaces the configuration (the seed is kept).
    pub fn set_config(&self, config: StrictConfig) {
        *lock(&self.shared.config) = config;
    }
}

struct ProcessProxy {
    url: String,
    shared: Arc<Shared>,
}

static PROCESS: OnceLock<Option<ProcessProxy>> = OnceLock::new();

/// Whether the tests go through the strict layer (`OJS_STRICT_DDB` is not `off`).
pub fn enabled() -> bool {
    !matches!(
        std::env::var("OJS_STRICT_DDB")
            .ok()
            .as_deref()
            .map(str::trim),
        Some("off" | "0" | "false" | "no")
    )
}

/// How long a FETCH that found nothing waits before it looks again, for servers under test
/// behind this process's strict layer: twice the simulated index lag (none without the
/// layer), as a deployment sets `OJS_FETCH_RECHECK_MS` above its real GSI lag.
pub fn fetch_recheck() -> std::time::Duration {
    match process_proxy() {
        Some(_) => StrictConfig::from_env().index_lag * 2,
        None => std::time::Duration::ZERO,
    }
}

/// The strict proxy of this test process (one, shared by every test, on its own runtime
/// so it outlives each test's), in front of [`crate::fault_proxy::raw_dynamodb_endpoint`];
/// `None` when `OJS_STRICT_DDB=off`.
pub fn process_proxy() -> Option<String> {
    PROCESS
        .get_or_init(|| {
            if !enabled() {
                return None;
            }
            let upstream = crate::fault_proxy::raw_dynamodb_endpoint();
            let config = StrictConfig::from_env();
            let described = config.describe();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("strict-ddb-proxy".into())
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    rt.block_on(async move {
                        match StrictProxy::start(&upstream, config).await {
                            Ok(proxy) => {
                                let _ = tx.send(Ok((proxy.url.clone(), Arc::clone(&proxy.shared))));
                                std::future::pending::<()>().await;
                                drop(proxy);
                            }
                            Err(e) => {
                                let _ = tx.send(Err(format!("{e:#}")));
                            }
                        }
                    });
                })
                .ok()?;
            match rx.recv() {
                Ok(Ok((url, shared))) => {
                    log_line(&format!("strict-ddb: tests go through the AWS-strict DynamoDB layer at {url} ({described}); OJS_STRICT_DDB=rules for the rules alone, off to bypass"));
                    Some(ProcessProxy { url, shared })
                }
                Ok(Err(e)) => panic!("starting the strict DynamoDB proxy: {e}"),
                Err(_) => panic!("starting the strict DynamoDB proxy: thread died"),
            }
        })
        .as_ref()
        .map(|p| p.url.clone())
}

/// The report of this process's strict proxy, if it runs.
pub fn process_report() -> Option<StrictReport> {
    PROCESS
        .get()
        .and_then(Option::as_ref)
        .map(|p| lock(&p.shared.report).clone())
}

// ---------------------------------------------------------------------------------------
// Request handling.

struct Ctx {
    shared: Arc<Shared>,
    op: String,
    method: hyper::Method,
    path: String,
    headers: hyper::HeaderMap,
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return internal(&format!("reading the request: {e}")),
    };
    let op = operation_of(&parts.headers).unwrap_or_default();
    {
        let mut r = lock(&shared.report);
        r.requests += 1;
        *r.by_operation.entry(op.clone()).or_default() += 1;
    }
    let ctx = Ctx {
        shared,
        op,
        method: parts.method,
        path: parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned(),
        headers: parts.headers,
    };
    let json: Option<Value> = serde_json::from_slice(&body).ok();
    let result = match (ctx.op.as_str(), json) {
        ("TransactWriteItems", Some(v)) => ctx.transact_write(v).await,
        ("TransactGetItems", Some(v)) => ctx.transact_get(v).await,
        ("BatchWriteItem", Some(v)) => ctx.batch_write(v).await,
        ("BatchGetItem", Some(v)) => ctx.batch_get(v).await,
        ("PutItem" | "UpdateItem" | "DeleteItem", Some(v)) => ctx.single_write(v).await,
        ("GetItem", Some(v)) => ctx.get_item(v).await,
        ("Query" | "Scan", Some(v)) => ctx.read_pages(v).await,
        ("DeleteTable", Some(v)) => {
            if let Some(t) = v.get("TableName").and_then(Value::as_str) {
                lock(&ctx.shared.tables).remove(t);
                lock(&ctx.shared.lag).forget(t);
            }
            ctx.forward(body).await.and_then(Answer::into_response)
        }
        _ => ctx.forward(body).await.and_then(Answer::into_response),
    };
    result.unwrap_or_else(|e| internal(&format!("{e:#}")))
}

/// One line on the process's stderr, past the test harness's capture (the proxy serves
/// every test of the process, so its lines belong to none of them).
fn log_line(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn internal(message: &str) -> Response<Full<Bytes>> {
    aws_error(
        500,
        "com.amazonaws.dynamodb.v20120810#InternalServerError",
        &format!("strict proxy: {message}"),
    )
}

fn json_answer(mut answer: Answer, body: &Value) -> anyhow::Result<Response<Full<Bytes>>> {
    // The body changed: its CRC32 no longer applies.
    answer.headers.remove("x-amz-crc32");
    answer.body = Bytes::from(body.to_string());
    answer.into_response()
}

fn body_of(v: &Value) -> Bytes {
    Bytes::from(v.to_string())
}

impl Ctx {
    fn config(&self) -> StrictConfig {
        lock(&self.shared.config).clone()
    }

    fn chance(&self, p: f64) -> bool {
        p > 0.0 && lock(&self.shared.rng).random_bool(p.clamp(0.0, 1.0))
    }

    async fn forward(&self, body: Bytes) -> anyhow::Result<Answer> {
        send(
            &self.shared.client,
            &self.shared.upstream,
            &self.method,
            &self.path,
            &self.headers,
            body,
        )
        .await
    }

    /// Another operation, with the caller's credentials (DynamoDB Local does not check
    /// signatures).
    async fn call(&self, op: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let mut headers = self.headers.clone();
        headers.insert(
            "x-amz-target",
            hyper::header::HeaderValue::from_str(&format!("DynamoDB_20120810.{op}"))?,
        );
        let a = send(
            &self.shared.client,
            &self.shared.upstream,
            &hyper::Method::POST,
            "/",
            &headers,
            body_of(body),
        )
        .await?;
        Ok((
            a.status,
            serde_json::from_slice(&a.body).unwrap_or(Value::Null),
        ))
    }

    fn refuse(&self, r: &Rejection, detail: &str) -> Response<Full<Bytes>> {
        *lock(&self.shared.report)
            .rejected
            .entry(r.rule.to_owned())
            .or_default() += 1;
        if self.config().log {
            log_line(&format!(
                "strict-ddb: refused {} [{}]: {} ({detail})",
                self.op, r.rule, r.message
            ));
        }
        aws_error(400, r.type_name, &r.message)
    }

    fn violation(&self, what: String) {
        if self.config().log {
            log_line(&format!(
                "strict-ddb: VIOLATION (detected after the write, not refused): {what}"
            ));
        }
        lock(&self.shared.report).violations.push(what);
    }

    async fn table(&self, name: &str) -> Option<Arc<TableInfo>> {
        if let Some(t) = lock(&self.shared.tables).get(name) {
            return Some(Arc::clone(t));
        }
        let (status, v) = self
            .call("DescribeTable", &json!({ "TableName": name }))
            .await
            .ok()?;
        if status != 200 {
            return None;
        }
        let info = Arc::new(TableInfo::from_describe(&v)?);
        lock(&self.shared.tables).insert(name.to_owned(), Arc::clone(&info));
        Some(info)
    }

    async fn tables(&self, body: &Value) -> HashMap<String, TableInfo> {
        let mut out = HashMap::new();
        for name in rules::tables_named(&self.op, body) {
            if let Some(t) = self.table(&name).await {
                out.insert(name, (*t).clone());
            }
        }
        out
    }

    // --- throttling -----------------------------------------------------------------

    /// The partition (table + partition key value) an item key is in.
    fn partition(tables: &HashMap<String, TableInfo>, table: &str, key: &Item) -> String {
        let pk = tables
            .get(table)
            .and_then(|t| key.get(&t.keys.partition))
            .map(Value::to_string)
            .unwrap_or_default();
        format!("{table}\u{1}{pk}")
    }

    /// Which of `partitions` are throttled now; may start a burst on one of them.
    fn throttled(&self, partitions: &[String]) -> Vec<bool> {
        let config = self.config();
        if config.throttle_rate <= 0.0 || partitions.is_empty() {
            return vec![false; partitions.len()];
        }
        let now = Instant::now();
        let mut bursts = lock(&self.shared.bursts);
        bursts.retain(|_, until| *until > now);
        if self.chance(config.throttle_rate) {
            let i = lock(&self.shared.rng).random_range(0..partitions.len());
            bursts.insert(partitions[i].clone(), now + config.throttle_burst);
            lock(&self.shared.report).bursts += 1;
        }
        partitions.iter().map(|p| bursts.contains_key(p)).collect()
    }

    fn throttle_error(&self) -> Response<Full<Bytes>> {
        lock(&self.shared.report).throttled += 1;
        if self.chance(0.5) {
            aws_error(
                400,
                "com.amazonaws.dynamodb.v20120810#ThrottlingException",
                "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table or index so please try again shortly. If exceptions persist, check if you have a hot key: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html",
            )
        } else {
            aws_error(
                400,
                "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.",
            )
        }
    }

    fn any_throttled(&self, tables: &HashMap<String, TableInfo>, targets: &[Target]) -> bool {
        let parts: Vec<String> = targets
            .iter()
            .map(|t| Self::partition(tables, &t.table, &t.key))
            .collect();
        self.throttled(&parts).into_iter().any(|b| b)
    }

    // --- images and the lag ---------------------------------------------------------

    fn lag_on(&self, tables: &HashMap<String, TableInfo>, table: &str) -> bool {
        !self.config().index_lag.is_zero()
            && tables.get(table).is_some_and(|t| !t.indexes.is_empty())
    }

    /// Locks the written items (in a fixed order, so transactions cannot deadlock) so that
    /// the images read around a write are this write's.
    async fn lock_items(&self, ids: &[String]) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let mut ids: Vec<&String> = ids.iter().collect();
        ids.sort();
        ids.dedup();
        let mut guards = Vec::with_capacity(ids.len());
        for id in ids {
            let m = Arc::clone(lock(&self.shared.locks).entry(id.clone()).or_default());
            guards.push(m.lock_owned().await);
        }
        guards
    }

    fn unlock_items(&self, guards: Vec<tokio::sync::OwnedMutexGuard<()>>, ids: &[String]) {
        drop(guards);
        let mut locks = lock(&self.shared.locks);
        for id in ids {
            if locks.get(id).is_some_and(|m| Arc::strong_count(m) == 1) {
                locks.remove(id);
            }
        }
    }

    /// The current images of `targets` (consistent reads), by (table, id).
    async fn read_images(
        &self,
        targets: &[&Target],
    ) -> anyhow::Result<HashMap<(String, String), Option<Item>>> {
        let mut out = HashMap::new();
        for chunk in targets.chunks(100) {
            let mut pending: Map<String, Value> = Map::new();
            for t in chunk {
                out.insert((t.table.clone(), t.id.clone()), None);
                let entry = pending
                    .entry(t.table.clone())
                    .or_insert_with(|| json!({"Keys": [], "ConsistentRead": true}));
                if let Some(keys) = entry.get_mut("Keys").and_then(Value::as_array_mut) {
                    if !keys.contains(&Value::Object(t.key.clone())) {
                        keys.push(Value::Object(t.key.clone()));
                    }
                }
            }
            let mut tries = 0;
            while !pending.is_empty() {
                tries += 1;
                let (status, v) = self
                    .call("BatchGetItem", &json!({ "RequestItems": pending }))
                    .await?;
                anyhow::ensure!(status == 200 && tries < 50, "reading images: {status} {v}");
                for (table, items) in v
                    .get("Responses")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    let Some(info) = lock(&self.shared.tables).get(table).cloned() else {
                        continue;
                    };
                    for item in items.as_array().into_iter().flatten() {
                        if let Some(item) = item.as_object() {
                            if let Some(id) = info.keys.id(item) {
                                out.insert((table.clone(), id), Some(item.clone()));
                            }
                        }
                    }
                }
                pending = v
                    .get("UnprocessedKeys")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
            }
        }
        Ok(out)
    }

    fn lag_key(t: &Target) -> String {
        format!("{}\u{2}{}", t.table, t.id)
    }

    /// Runs a write: forwards `body` for the written `targets`, recording their images
    /// before and after for the index lag (when on). `check` sees the images before the
    /// write and may refuse it.
    async fn write(
        &self,
        body: Bytes,
        tables: &HashMap<String, TableInfo>,
        targets: &[Target],
        check: impl FnOnce(&HashMap<(String, String), Option<Item>>) -> Result<(), Rejection>,
    ) -> anyhow::Result<Answer> {
        let lagged: Vec<&Target> = targets
            .iter()
            .filter(|t| t.writes && self.lag_on(tables, &t.table))
            .collect();
        if lagged.is_empty() {
            // No lag to record; the transaction's 4 MB check still needs the images of
            // the items it updates or deletes.
            let updated: Vec<&Target> = targets
                .iter()
                .filter(|t| t.writes && t.put.is_none() && self.op == "TransactWriteItems")
                .collect();
            let before = if updated.is_empty() {
                HashMap::new()
            } else {
                self.read_images(&updated).await?
            };
            if let Err(r) = check(&before) {
                return Err(RefusedWrite(r).into());
            }
            return self.forward(body).await;
        }
        let ids: Vec<String> = lagged.iter().map(|t| Self::lag_key(t)).collect();
        let guards = self.lock_items(&ids).await;
        let result = self.write_locked(body, targets, &lagged, check).await;
        self.unlock_items(guards, &ids);
        result
    }

    async fn write_locked(
        &self,
        body: Bytes,
        targets: &[Target],
        lagged: &[&Target],
        check: impl FnOnce(&HashMap<(String, String), Option<Item>>) -> Result<(), Rejection>,
    ) -> anyhow::Result<Answer> {
        // The images before: known from a recent write, else read.
        let mut before: HashMap<(String, String), Option<Item>> = HashMap::new();
        let mut unknown: Vec<&Target> = Vec::new();
        {
            let lag = lock(&self.shared.lag);
            for t in targets.iter().filter(|t| t.writes) {
                match lag.known(&t.table, &t.id) {
                    Some(image) => {
                        before.insert((t.table.clone(), t.id.clone()), image);
                    }
                    None => unknown.push(t),
                }
            }
        }
        if !unknown.is_empty() {
            before.extend(self.read_images(&unknown).await?);
        }
        if let Err(r) = check(&before) {
            return Err(RefusedWrite(r).into());
        }
        {
            let mut lag = lock(&self.shared.lag);
            for t in lagged {
                let prior = before
                    .get(&(t.table.clone(), t.id.clone()))
                    .cloned()
                    .flatten();
                lag.begin(&t.table, &t.id, &t.key, prior);
            }
        }
        let answer = self.forward(body).await;
        let changed = match &answer {
            Ok(a) => a.status == 200 || a.status >= 500,
            Err(_) => true,
        };
        let after = if changed && !lagged.is_empty() {
            self.read_images(lagged).await.ok()
        } else {
            None
        };
        let now = Instant::now();
        {
            let mut lag = lock(&self.shared.lag);
            for t in lagged {
                let image = after
                    .as_ref()
                    .and_then(|a| a.get(&(t.table.clone(), t.id.clone())).cloned());
                lag.end(&t.table, &t.id, image, now);
            }
        }
        if let Some(after) = &after {
            for ((table, id), image) in after {
                if let Some(image) = image {
                    let n = size::item_size(image);
                    if n > rules::MAX_ITEM_BYTES {
                        self.violation(format!(
                            "{} left an item of {n} bytes (> 400 KB) in {table} at key {id}",
                            self.op
                        ));
                    }
                }
            }
        }
        answer
    }

    // --- operations -----------------------------------------------------------------

    async fn transact_write(&self, v: Value) -> anyhow::Result<Response<Full<Bytes>>> {
        let tables = self.tables(&v).await;
        let targets = match rules::transact_write(&v, &tables) {
            Ok(t) => t,
            Err(r) => return Ok(self.refuse(&r, &describe_targets(&v))),
        };
        if self.any_throttled(&tables, &targets) {
            return Ok(self.throttle_error());
        }
        let check = |before: &HashMap<(String, String), Option<Item>>| {
            if rules::transaction_bytes(&targets, before) > rules::MAX_TRANSACTION_BYTES {
                Err(rules::transaction_too_big())
            } else {
                Ok(())
            }
        };
        match self.write(body_of(&v), &tables, &targets, check).await {
            Ok(a) => a.into_response(),
            Err(e) => match e.downcast::<RefusedWrite>() {
                Ok(RefusedWrite(r)) => Ok(self.refuse(
                    &r,
                    &format!(
                        "{} bytes",
                        rules::transaction_bytes(&targets, &HashMap::new())
                    ),
                )),
                Err(e) => Err(e),
            },
        }
    }

    async fn transact_get(&self, v: Value) -> anyhow::Result<Response<Full<Bytes>>> {
        let tables = self.tables(&v).await;
        let targets = match rules::transact_get(&v, &tables) {
            Ok(t) => t,
            Err(r) => return Ok(self.refuse(&r, &describe_targets(&v))),
        };
        if self.any_throttled(&tables, &targets) {
            return Ok(self.throttle_error());
        }
        self.forward(body_of(&v)).await?.into_response()
    }

    async fn single_write(&self, v: Value) -> anyhow::Result<Response<Full<Bytes>>> {
        let checked = match self.op.as_str() {
            "PutItem" => rules::put_item(&v),
            "UpdateItem" => rules::update_item(&v),
            _ => Ok(()),
        };
        if let Err(r) = checked {
            return Ok(self.refuse(
                &r,
                &format!(
                    "table {}",
                    v.get("TableName").and_then(Value::as_str).unwrap_or("?")
                ),
            ));
        }
        let tables = self.tables(&v).await;
        let table = v
            .get("TableName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let key = if self.op == "PutItem" {
            v.get("Item")
        } else {
            v.get("Key")
        }
        .and_then(Value::as_object);
        let targets: Vec<Target> = match (tables.get(table), key) {
            (Some(info), Some(key)) => info
                .keys
                .id(key)
                .map(|id| Target {
                    table: table.to_owned(),
                    id,
                    key: info.keys.key_of(key),
                    put: None,
                    writes: true,
                })
                .into_iter()
                .collect(),
            _ => Vec::new(),
        };
        if self.any_throttled(&tables, &targets) {
            return Ok(self.throttle_error());
        }
        self.write(body_of(&v), &tables, &targets, |_| Ok(()))
            .await?
            .into_response()
    }

    async fn get_item(&self, v: Value) -> anyhow::Result<Response<Full<Bytes>>> {
        let tables = self.tables(&v).await;
        let table = v
            .get("TableName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Some(key) = v.get("Key").and_then(Value::as_object) {
            if self.throttled(&[Self::partition(&tables, table, key)])[0] {
                return Ok(self.throttle_error());
            }
        }
        self.forward(body_of(&v)).await?.into_response()
    }

    /// Picks which of `n` entries to leave unprocessed (none, or a proper subset).
    fn unprocessed(&self, n: usize, throttled: &[bool]) -> Vec<bool> {
        let mut out = throttled.to_vec();
        if n >= 2 && self.chance(self.config().unprocessed_rate) {
            let mut rng = lock(&self.shared.rng);
            let k = rng.random_range(1..n);
            for i in rand::seq::index::sample(&mut *rng, n, k) {
                out[i] = true;
            }
        }
        out
    }

    async fn batch_get(&self, v: Value) -> anyhow::Result<Response<Full<Bytes>>> {
        let tables = self.tables(&v).await;
        let targets = match rules::batch_get(&v, &tables) {
            Ok(t) => t,
            Err(r) => return Ok(self.refuse(&r, &describe_targets(&v))),
        };
        let parts: Vec<String> = targets
            .iter()
            .map(|t| Self::partition(&tables, &t.table, &t.key))
            .collect();
        let throttled = self.throttled(&parts);
        if !targets.is_empty() && throttled.iter().all(|b| *b) {
            return Ok(self.throttle_error());
        }
        let skip = self.unprocessed(targets.len(), &throttled);
        if !skip.iter().any(|b| *b) {
            return self.forward(body_of(&v)).await?.into_response();
        }
        // Split each table's keys into forwarded and unprocessed, in request order.
        let mut forwarded = v.clone();
        let mut left: Map<String, Value> = Map::new();
        let mut i = 0;
        let mut n_left = 0u64;
        if let Some(reqs) = forwarded
            .get_mut("RequestItems")
            .and_then(Value::as_object_mut)
        {
            for (table, r) in reqs.iter_mut() {
                let keys: Vec<Value> = r
                    .get("Keys")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let (mut go, mut stay) = (Vec::new(), Vec::new());
                for k in keys {
                    // Keys of unknown tables were not counted as targets: forward them.
                    let known = tables.contains_key(table);
                    if known && skip.get(i).copied().unwrap_or(false) {
                        stay.push(k);
                    } else {
                        go.push(k);
                    }
                    if known {
                        i += 1;
                    }
                }
                if !stay.is_empty() {
                    n_left += stay.len() as u64;
                    let mut u = r.clone();
                    u["Keys"] = Value::Array(stay);
                    left.insert(table.clone(), u);
                }
                r["Keys"] = Value::Array(go);
            }
            reqs.retain(|_, r| {
                r.get("Keys")
                    .and_then(Value::as_array)
                    .is_some_and(|k| !k.is_empty())
            });
        }
        {
            let mut r = lock(&self.shared.report);
            r.unprocessed_batches += 1;
            r.unprocessed_entries += n_left;
        }
        let answer = self.forward(body_of(&forwarded)).await?;
        if answer.status != 200 {
            return answer.into_response();
        }
        let mut out: Value =
            serde_json::from_slice(&answer.body).context("parsing BatchGetItem's answer")?;
        let merged = out
            .as_object_mut()
            .context("BatchGetItem's answer")?
            .entry("UnprocessedKeys")
            .or_insert_with(|| json!({}));
        if let Some(m) = merged.as_object_mut() {
            for (table, u) in left {
                match m
                    .get_mut(&table)
                    .and_then(|e| e.get_mut("Keys"))
                    .and_then(Value::as_array_mut)
                {
                    Some(keys) => keys.extend(u["Keys"].as_array().cloned().unwrap_or_default()),
                    None => {
                        m.insert(table, u);
                    }
                }
            }
        }
        json_answer(answer, &out)
    }

    async fn batch_write(&self, v: Value) -> anyhow::Result<Response<Full<Bytes>>> {
        let tables = self.tables(&v).await;
        let targets = match rules::batch_write(&v, &tables) {
            Ok(t) => t,
            Err(r) => return Ok(self.refuse(&r, &describe_targets(&v))),
        };
        let parts: Vec<String> = targets
            .iter()
            .map(|t| Self::partition(&tables, &t.table, &t.key))
            .collect();
        let throttled = self.throttled(&parts);
        if !targets.is_empty() && throttled.iter().all(|b| *b) {
            return Ok(self.throttle_error());
        }
        let skip = self.unprocessed(targets.len(), &throttled);
        let mut forwarded = v.clone();
        let mut left: Map<String, Value> = Map::new();
        let mut written: Vec<Target> = Vec::new();
        let mut i = 0;
        if let Some(reqs) = forwarded
            .get_mut("RequestItems")
            .and_then(Value::as_object_mut)
        {
            for (table, r) in reqs.iter_mut() {
                let all: Vec<Value> = r.as_array().cloned().unwrap_or_default();
                let known = tables.contains_key(table);
                let (mut go, mut stay) = (Vec::new(), Vec::new());
                for w in all {
                    if known && skip.get(i).copied().unwrap_or(false) {
                        stay.push(w);
                    } else {
                        if known {
                            written.extend(targets.get(i).cloned());
                        }
                        go.push(w);
                    }
                    if known {
                        i += 1;
                    }
                }
                if !stay.is_empty() {
                    left.insert(table.clone(), Value::Array(stay));
                }
                *r = Value::Array(go);
            }
            reqs.retain(|_, r| r.as_array().is_some_and(|a| !a.is_empty()));
        }
        if !left.is_empty() {
            let mut r = lock(&self.shared.report);
            r.unprocessed_batches += 1;
            r.unprocessed_entries += left
                .values()
                .map(|l| l.as_array().map_or(0, Vec::len) as u64)
                .sum::<u64>();
        }
        let answer = self
            .write(body_of(&forwarded), &tables, &written, |_| Ok(()))
            .await?;
        if left.is_empty() || answer.status != 200 {
            return answer.into_response();
        }
        let mut out: Value =
            serde_json::from_slice(&answer.body).context("parsing BatchWriteItem's answer")?;
        let merged = out
            .as_object_mut()
            .context("BatchWriteItem's answer")?
            .entry("UnprocessedItems")
            .or_insert_with(|| json!({}));
        if let Some(m) = merged.as_object_mut() {
            for (table, u) in left {
                match m.get_mut(&table).and_then(Value::as_array_mut) {
                    Some(list) => list.extend(u.as_array().cloned().unwrap_or_default()),
                    None => {
                        m.insert(table, u);
                    }
                }
            }
        }
        json_answer(answer, &out)
    }

    /// Query and Scan: pages cut short, throttling, and the lag on GSI queries.
    async fn read_pages(&self, mut v: Value) -> anyhow::Result<Response<Full<Bytes>>> {
        let config = self.config();
        if self.chance(config.short_page_rate) {
            let limit = v.get("Limit").and_then(Value::as_u64).unwrap_or(100).max(1);
            if limit > 1 {
                let cut = lock(&self.shared.rng).random_range(1..limit);
                v["Limit"] = json!(cut);
                lock(&self.shared.report).short_pages += 1;
            }
        }
        let table_name = v
            .get("TableName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let Some(table) = self.table(&table_name).await else {
            return self.forward(body_of(&v)).await?.into_response();
        };
        let names = v.get("ExpressionAttributeNames").and_then(Value::as_object);
        let values = v
            .get("ExpressionAttributeValues")
            .and_then(Value::as_object);
        let cond = v
            .get("KeyConditionExpression")
            .and_then(Value::as_str)
            .and_then(|e| lag::parse_key_condition(e, names, values));
        // Throttling on the queried partition (a Scan on the table's).
        let partition = format!(
            "{table_name}{}\u{1}{}",
            v.get("IndexName")
                .and_then(Value::as_str)
                .map(|i| format!("/{i}"))
                .unwrap_or_default(),
            cond.as_ref()
                .map(|c| c.partition.1.to_string())
                .unwrap_or_default()
        );
        if self.throttled(&[partition])[0] {
            return Ok(self.throttle_error());
        }
        let index_name = v
            .get("IndexName")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let index = match (&index_name, self.op.as_str()) {
            (Some(i), "Query") => table.indexes.get(i).cloned(),
            _ => None,
        };
        let Some(index) = index else {
            return self.forward(body_of(&v)).await?.into_response();
        };
        lock(&self.shared.report).index_queries += 1;
        if config.index_lag.is_zero() {
            return self.forward(body_of(&v)).await?.into_response();
        }
        let expr = v
            .get("KeyConditionExpression")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let unsupported = |why: String| {
            *lock(&self.shared.report)
                .lag_unsupported
                .entry(why)
                .or_default() += 1;
        };
        let Some(cond) = cond.and_then(|c| c.for_schema(&index.keys)) else {
            unsupported(format!("key condition `{expr}`"));
            return self.forward(body_of(&v)).await?.into_response();
        };
        if v.get("FilterExpression").is_some() {
            unsupported(format!("FilterExpression on `{expr}`"));
            return self.forward(body_of(&v)).await?.into_response();
        }
        let attributes = match v.get("ProjectionExpression").and_then(Value::as_str) {
            None => None,
            Some(p) => match simple_projection(p, names) {
                Some(a) => Some(a),
                None => {
                    unsupported(format!("ProjectionExpression `{p}`"));
                    return self.forward(body_of(&v)).await?.into_response();
                }
            },
        };
        let quiet = {
            let mut lag = lock(&self.shared.lag);
            lag.prune(Instant::now(), config.index_lag);
            lag.window(&table_name).is_empty()
        };
        if quiet {
            return self.forward(body_of(&v)).await?.into_response();
        }
        // COUNT is computed here from the entries.
        let count_only = v.get("Select").and_then(Value::as_str) == Some("COUNT");
        if count_only {
            if let Some(o) = v.as_object_mut() {
                o.remove("Select");
            }
        }
        // DynamoDB reads past entries not in the index yet: a page whose every entry the
        // lag hides is read on from its last key, here, instead of answered empty with a
        // last key (which no index query without a filter answers, and which would let the
        // caller's next page start behind entries that appear meanwhile).
        let mut reads = 0;
        let mut hidden = 0;
        let mut shown = 0;
        let (answer, mut out, page, last) = loop {
            reads += 1;
            let answer = self.forward(body_of(&v)).await?;
            if answer.status != 200 {
                return answer.into_response();
            }
            let out: Value =
                serde_json::from_slice(&answer.body).context("parsing Query's answer")?;
            let items: Vec<Item> = out
                .get("Items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| i.as_object().cloned())
                .collect();
            let last = out
                .get("LastEvaluatedKey")
                .and_then(Value::as_object)
                .cloned();
            let window = {
                let mut lag = lock(&self.shared.lag);
                lag.prune(Instant::now(), config.index_lag);
                lag.window(&table_name)
            };
            let q = LaggedQuery {
                table: &table,
                index: &index,
                cond: cond.clone(),
                start: v.get("ExclusiveStartKey").and_then(Value::as_object),
                forward: v
                    .get("ScanIndexForward")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
                limit: v
                    .get("Limit")
                    .and_then(Value::as_u64)
                    .and_then(|l| usize::try_from(l).ok()),
                attributes: attributes.clone(),
            };
            let (page, last, applied) = q.apply(items, last, &window);
            hidden += applied.hidden as u64;
            shown += applied.shown as u64;
            match last {
                Some(next) if page.is_empty() && reads < MAX_LAGGED_READS => {
                    if let Some(o) = v.as_object_mut() {
                        o.insert("ExclusiveStartKey".into(), Value::Object(next));
                    }
                }
                last => break (answer, out, page, last),
            }
        };
        {
            let mut r = lock(&self.shared.report);
            r.lagged_queries += 1;
            r.lag_hidden += hidden;
            r.lag_shown += shown;
        }
        let o = out.as_object_mut().context("Query's answer")?;
        o.insert("Count".into(), json!(page.len()));
        o.insert("ScannedCount".into(), json!(page.len()));
        match last {
            Some(k) => {
                o.insert("LastEvaluatedKey".into(), Value::Object(k));
            }
            None => {
                o.remove("LastEvaluatedKey");
            }
        }
        if count_only {
            o.remove("Items");
        } else {
            o.insert(
                "Items".into(),
                Value::Array(page.into_iter().map(Value::Object).collect()),
            );
        }
        json_answer(answer, &out)
    }
}

/// Reads of one lagged index Query whose pages the lag emptied, before its answer is given
/// empty with a last key anyway (a bound on one request's work, far above any test's need).
const MAX_LAGGED_READS: usize = 64;

/// A write refused after looking at the items (the 4 MB rule).
#[derive(Debug)]
struct RefusedWrite(Rejection);

impl std::fmt::Display for RefusedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.message)
    }
}

impl std::error::Error for RefusedWrite {}

/// Top-level attribute names of a ProjectionExpression (`None` for paths).
fn simple_projection(p: &str, names: Option<&Map<String, Value>>) -> Option<Vec<String>> {
    p.split(',')
        .map(|a| {
            let a = a.trim();
            if a.contains(['.', '[']) || a.is_empty() {
                None
            } else if a.starts_with('#') {
                names?.get(a)?.as_str().map(str::to_owned)
            } else {
                Some(a.to_owned())
            }
        })
        .collect()
}

/// A short account of the actions of a refused request, for the log: each action's kind,
/// table and key, and the expressions of the updates.
fn describe_targets(v: &Value) -> String {
    let short = |k: &Value| {
        let s = k.to_string();
        if s.len() > 160 {
            format!("{}…", &s[..s.floor_char_boundary(160)])
        } else {
            s
        }
    };
    let mut out = Vec::new();
    if let Some(actions) = v.get("TransactItems").and_then(Value::as_array) {
        out.push(format!("{} actions", actions.len()));
        for a in actions.iter().take(12) {
            if let Some((kind, body)) = a.as_object().and_then(|o| o.iter().next()) {
                let key = body.get("Key").or_else(|| body.get("Item")).map(|k| {
                    let mut m = Map::new();
                    for n in ["pk", "sk"] {
                        if let Some(x) = k.get(n) {
                            m.insert(n.to_owned(), x.clone());
                        }
                    }
                    short(&Value::Object(m))
                });
                let expr = body
                    .get("UpdateExpression")
                    .or_else(|| body.get("ConditionExpression"))
                    .and_then(Value::as_str)
                    .map(|e| format!(" `{}`", &e[..e.floor_char_boundary(100)]))
                    .unwrap_or_default();
                out.push(format!("{kind} {}{expr}", key.unwrap_or_default()));
            }
        }
    } else if let Some(reqs) = v.get("RequestItems").and_then(Value::as_object) {
        for (table, r) in reqs {
            let n = r.as_array().map_or_else(
                || r.get("Keys").and_then(Value::as_array).map_or(0, Vec::len),
                Vec::len,
            );
            out.push(format!("{n} entries on {table}"));
            let keys: Vec<&Value> = match r.as_array() {
                Some(a) => a.iter().collect(),
                None => r
                    .get("Keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .collect(),
            };
            for k in keys.iter().take(6) {
                out.push(short(k));
            }
        }
    }
    out.join("; ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure
mod tests;
