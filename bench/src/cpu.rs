//! Section 5: CPU the product spends per request, DynamoDB round trips excluded.
//!
//! Method: the release `ojs-local` server (every endpoint group, the same routers and
//! store as the functions) runs as its own process on a fresh table; the bench drives N
//! sequential requests of one kind and reads the process's CPU time before and after
//! (sum of `/proc/<pid>/task/*/schedstat` run time, nanoseconds; cross-checked with
//! utime+stime of `/proc/<pid>/stat`). Time spent waiting for DynamoDB is not CPU time,
//! so round trips are excluded; what remains includes hyper/axum request handling and
//! the AWS SDK's request signing, serialization and response parsing, which a Lambda
//! function spends too. To separate the SDK's share, the bench also measures its own
//! CPU per raw SDK call (same client settings) and subtracts calls x that.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::{json, Value};

use crate::capacity::{args_of, CapacityReport};
use crate::stats;

/// CPU of one kind of request.
#[derive(Debug, Clone, Serialize)]
pub struct CpuCost {
    /// e.g. `PUSH`.
    pub op: String,
    /// Requests measured.
    pub requests: usize,
    /// Jobs per request.
    pub jobs_per_request: usize,
    /// Process CPU per request, µs (schedstat): the median over the phase's chunks, so a
    /// burst of other work on the machine during one chunk does not skew it.
    pub cpu_us: f64,
    /// The least disturbed chunk's CPU per request, µs.
    pub cpu_us_min: f64,
    /// Chunks the phase was measured in.
    pub chunks: usize,
    /// Process CPU per request, µs (utime+stime; tick resolution).
    pub cpu_us_stat: f64,
    /// DynamoDB calls per request (from the capacity section, at the same size).
    pub dynamodb_calls: Option<f64>,
    /// `cpu_us - dynamodb_calls * sdk_us_per_call`: the product's own code.
    pub own_us: Option<f64>,
    /// Wall time per request seen by the client, µs.
    pub wall_us: f64,
}

/// Section 5 result.
#[derive(Debug, Clone, Serialize)]
pub struct CpuReport {
    /// The method, in words.
    pub method: String,
    /// Args size of the jobs.
    pub args_bytes: usize,
    /// Per kind of request.
    pub ops: Vec<CpuCost>,
    /// CPU of one raw SDK call (UpdateItem/PutItem/Query mix) in the bench process, µs.
    pub sdk_us_per_call: f64,
    /// CPU of the same three calls as hand-written JSON POSTs with reqwest (no SDK: no
    /// signing, interceptors, endpoint rules or retry machinery), µs per call: the floor
    /// of an HTTP round trip from the client's side.
    pub http_floor_us_per_call: f64,
    /// CPU of the idle server per second, µs (subtracted).
    pub idle_us_per_s: f64,
}

impl CpuReport {
    /// The figure for `op`.
    pub fn get(&self, op: &str) -> Option<&CpuCost> {
        self.ops.iter().find(|c| c.op == op)
    }
}

/// The method as printed with the results.
pub const METHOD: &str =
    "Release ojs-local server as a separate process (RUST_LOG=info, events on, API keys required \
as deployed (one key, verified once a minute), no timer, and OJS_LOCAL_STREAM=off: no in-process \
stream consumer, push catch-up or webhook redrive, so the process does what an API function does); \
N sequential requests per kind in 5 chunks; CPU = delta of the server's /proc/<pid>/task/*/schedstat \
run time per request, median chunk (utime+stime of /proc/<pid>/stat over the phase as a check), minus idle CPU. Waiting for DynamoDB is not \
CPU time, so round trips are excluded; HTTP parsing and AWS SDK work (signing, JSON, hyper) are \
included (a Lambda pays for them too). own = cpu - DynamoDB calls x SDK CPU per raw call (measured \
in the bench process with the same client settings).";

/// CPU time of a process: (schedstat ns summed over live threads, utime+stime ticks).
fn cpu_of(pid: u32) -> anyhow::Result<(u64, u64)> {
    let mut ns = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        if let Ok(s) = std::fs::read_to_string(path) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok((ns, tick(11) + tick(12)))
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

struct Server {
    child: std::process::Child,
    base: String,
    client: reqwest::Client,
    /// `Bearer <API key>`: the server runs with API keys required, as deployed.
    auth: String,
}

impl Server {
    async fn start(table: &str, key: &str) -> anyhow::Result<Self> {
        let binary: PathBuf = crate::cold_start::release_dir().join("ojs-local");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut cmd = std::process::Command::new(&binary);
        cmd.env_clear()
            .env("OJS_HOST", "127.0.0.1")
            .env("OJS_PORT", port.to_string())
            .env("OJS_TABLE", table)
            .env("OJS_EVENTS", "on")
            // An API function's work only: on AWS the stream and scheduler functions run
            // the consumer, the push catch-up and the webhook redrive.
            .env("OJS_LOCAL_STREAM", "off")
            .env("RUST_LOG", "info")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_ENDPOINT_URL_DYNAMODB", crate::env::dynamodb_endpoint())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for key in [
            "AWS_REGION",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ] {
            if let Ok(v) = std::env::var(key) {
                cmd.env(key, v);
            }
        }
        let child = cmd.spawn().with_context(|| {
            format!(
                "starting {} (cargo build --release -p ojs-local)",
                binary.display()
            )
        })?;
        let server = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            auth: format!("Bearer {key}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let up = server
                .client
                .get(format!("{}/ojs/v1/health", server.base))
                .send()
                .await;
            if matches!(up, Ok(ref r) if r.status().is_success()) {
                return Ok(server);
            }
            if Instant::now() > deadline {
                bail!("ojs-local did not answer within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let res = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/openjobspec+json")
            .header("authorization", &self.auth)
            .body(body.to_string())
            .send()
            .await?;
        let status = res.status();
        let v: Value = res.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("{path} answered {status}: {v}");
        }
        Ok(v)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ids(v: &Value) -> Vec<String> {
    v["jobs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|j| j["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Measures CPU per request with `n` requests of each single-job kind.
pub async fn run(
    n: usize,
    args_bytes: usize,
    capacity: Option<&CapacityReport>,
) -> anyhow::Result<CpuReport> {
    let table = crate::env::table_name("cpu");
    let sdk = crate::env::sdk().await;
    let store = ojs_store::Store::new(
        ojs_store::client_for(&sdk),
        ojs_store::StoreConfig::for_table(&table),
    );
    store
        .ensure_table()
        .await
        .context("creating the CPU table")?;
    let result = async {
        let key = ojs_http::auth::issue_key(&store, "ojs-bench").await?.key;
        let server = Server::start(&table, &key).await?;
        measure(&server, n.max(10), args_bytes, capacity).await
    }
    .await;
    let _ = store.delete_table().await;
    result
}

async fn measure(
    s: &Server,
    n: usize,
    args_bytes: usize,
    capacity: Option<&CapacityReport>,
) -> anyhow::Result<CpuReport> {
    use crate::capacity::ops;
    let queue = "cpu";
    let batch_queue = "cpu-batch";
    let job =
        json!({"type": "bench.job", "args": args_of(args_bytes), "options": {"queue": queue}});
    let batch_job = json!({"type": "bench.job", "args": args_of(args_bytes), "options": {"queue": batch_queue}});
    // Warm-up: queue items, connections, allocator.
    for _ in 0..20 {
        s.post("/ojs/v1/jobs", &job).await?;
        let f = s
            .post("/ojs/v1/workers/fetch", &json!({"queues": [queue]}))
            .await?;
        for id in ids(&f) {
            s.post("/ojs/v1/workers/ack", &json!({"job_id": id}))
                .await?;
        }
    }
    s.post("/ojs/v1/jobs", &batch_job).await?;
    let f = s
        .post("/ojs/v1/workers/fetch", &json!({"queues": [batch_queue]}))
        .await?;
    for id in ids(&f) {
        s.post("/ojs/v1/workers/ack", &json!({"job_id": id}))
            .await?;
    }
    let ticks = clock_ticks();
    let pid = s.pid();
    // Idle CPU of the server (background tasks), to subtract.
    let (i0, _) = cpu_of(pid)?;
    let idle_start = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (i1, _) = cpu_of(pid)?;
    let idle_ns_per_s = (i1 - i0) as f64 / idle_start.elapsed().as_secs_f64();

    let sdk_us = sdk_cpu_per_call(n).await?;
    let http_us = http_cpu_per_call(n).await?;
    let calls_of = |op: &str| {
        capacity
            .and_then(|c| c.get(op, args_bytes))
            .map(|o| o.calls)
    };

    let record = |op: &str, jobs: usize, phase: Vec<Chunk>| {
        let requests: usize = phase.iter().map(|c| c.requests).sum::<usize>().max(1);
        let secs: f64 = phase.iter().map(|c| c.secs).sum();
        let per_request: Vec<f64> = phase
            .iter()
            .filter(|c| c.requests > 0)
            .map(|c| (c.ns - idle_ns_per_s * c.secs) / 1000.0 / c.requests as f64)
            .collect();
        let ticks_total: f64 = phase.iter().map(|c| c.ticks).sum();
        let cpu_us = stats::median(&per_request).unwrap_or(f64::NAN);
        let calls = calls_of(op);
        CpuCost {
            op: op.to_owned(),
            requests,
            jobs_per_request: jobs,
            cpu_us,
            cpu_us_min: per_request.iter().copied().fold(f64::INFINITY, f64::min),
            chunks: per_request.len(),
            cpu_us_stat: ticks_total / ticks * 1e6 / requests as f64,
            dynamodb_calls: calls,
            own_us: calls.map(|c| cpu_us - c * sdk_us),
            wall_us: secs * 1e6 / requests as f64,
        }
    };
    let mut out = Vec::new();

    // PUSH x n
    let mut p = Phase::start(pid, n)?;
    for _ in 0..n {
        p.before()?;
        s.post("/ojs/v1/jobs", &job).await?;
        p.after();
    }
    out.push(record(ops::PUSH, 1, p.finish()?));
    // FETCH (1 job) x n
    let mut fetched = Vec::with_capacity(n);
    let mut p = Phase::start(pid, n)?;
    for _ in 0..n {
        p.before()?;
        let f = s
            .post(
                "/ojs/v1/workers/fetch",
                &json!({"queues": [queue], "worker_id": "cpu"}),
            )
            .await?;
        p.after();
        fetched.extend(ids(&f));
    }
    out.push(record(ops::FETCH_1, 1, p.finish()?));
    if fetched.len() != n {
        bail!("FETCH returned {} jobs for {n} requests", fetched.len());
    }
    // ACK x n
    let mut p = Phase::start(pid, n)?;
    for id in &fetched {
        p.before()?;
        s.post(
            "/ojs/v1/workers/ack",
            &json!({"job_id": id, "worker_id": "cpu", "result": {"ok": true}}),
        )
        .await?;
        p.after();
    }
    out.push(record(ops::ACK, 1, p.finish()?));
    // Batch PUSH of 100 x n/100 (at least 5), FETCH of 10 for those jobs.
    let batches = (n / 100).max(5);
    let batch: Vec<Value> = (0..100).map(|_| batch_job.clone()).collect();
    let mut p = Phase::start(pid, batches)?;
    for _ in 0..batches {
        p.before()?;
        s.post("/ojs/v1/jobs/batch", &json!({ "jobs": batch }))
            .await?;
        p.after();
    }
    out.push(record(ops::BATCH_PUSH, 100, p.finish()?));
    let fetches = batches * 10;
    let mut p = Phase::start(pid, fetches)?;
    for _ in 0..fetches {
        p.before()?;
        s.post(
            "/ojs/v1/workers/fetch",
            &json!({"queues": [batch_queue], "count": 10, "worker_id": "cpu"}),
        )
        .await?;
        p.after();
    }
    out.push(record(ops::FETCH_10, 10, p.finish()?));
    Ok(CpuReport {
        method: METHOD.into(),
        args_bytes,
        ops: out,
        sdk_us_per_call: sdk_us,
        http_floor_us_per_call: http_us,
        idle_us_per_s: idle_ns_per_s / 1000.0,
    })
}

/// CPU of the bench process per raw DynamoDB call (a PutItem, an UpdateItem and a Query
/// per round, ~1 KiB items, the store's client settings), µs.
async fn sdk_cpu_per_call(n: usize) -> anyhow::Result<f64> {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    let sdk = crate::env::sdk().await;
    let client = ojs_store::client_for(&sdk);
    let table = crate::env::table_name("sdkcpu");
    let store = ojs_store::Store::new(client.clone(), ojs_store::StoreConfig::for_table(&table));
    store.ensure_table().await?;
    let pad = "x".repeat(1000);
    let round = |i: usize| {
        let (client, table, pad) = (client.clone(), table.clone(), pad.clone());
        async move {
            let pk = A::S(format!("SDK#{i}"));
            client
                .put_item()
                .table_name(&table)
                .item("pk", pk.clone())
                .item("sk", A::S("JOB".into()))
                .item("pad", A::S(pad.clone()))
                .send()
                .await?;
            client
                .update_item()
                .table_name(&table)
                .key("pk", pk.clone())
                .key("sk", A::S("JOB".into()))
                .update_expression("SET st = :s")
                .expression_attribute_values(":s", A::S("active".into()))
                .send()
                .await?;
            client
                .query()
                .table_name(&table)
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", pk)
                .limit(1)
                .send()
                .await?;
            anyhow::Ok(())
        }
    };
    let per_call = cpu_per_call_of(n, round).await;
    let _ = store.delete_table().await;
    per_call
}

/// CPU of the bench process per DynamoDB call made as a plain JSON POST (reqwest, a dummy
/// SigV4 header that DynamoDB Local accepts unchecked), same three calls as
/// [`sdk_cpu_per_call`], µs.
async fn http_cpu_per_call(n: usize) -> anyhow::Result<f64> {
    let sdk = crate::env::sdk().await;
    let table = crate::env::table_name("httpcpu");
    let store = ojs_store::Store::new(
        ojs_store::client_for(&sdk),
        ojs_store::StoreConfig::for_table(&table),
    );
    store.ensure_table().await?;
    let client = reqwest::Client::new();
    let endpoint = crate::env::dynamodb_endpoint();
    let pad = "x".repeat(1000);
    let call = |target: &'static str, body: Value| {
        let (client, endpoint) = (client.clone(), endpoint.clone());
        async move {
            let res = client
                .post(&endpoint)
                .header("x-amz-target", format!("DynamoDB_20120810.{target}"))
                .header("content-type", "application/x-amz-json-1.0")
                .header(
                    "authorization",
                    "AWS4-HMAC-SHA256 Credential=local/20240101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00",
                )
                .body(body.to_string())
                .send()
                .await?;
            let status = res.status();
            let v: Value = res.json().await?;
            if !status.is_success() {
                bail!("{target}: {status} {v}");
            }
            anyhow::Ok(v)
        }
    };
    let round = |i: usize| {
        let (table, pad) = (table.clone(), pad.clone());
        let call = &call;
        async move {
            let key = json!({"pk": {"S": format!("SDK#{i}")}, "sk": {"S": "JOB"}});
            call(
                "PutItem",
                json!({"TableName": table, "Item": {"pk": key["pk"], "sk": key["sk"], "pad": {"S": pad}}}),
            )
            .await?;
            call(
                "UpdateItem",
                json!({"TableName": table, "Key": key, "UpdateExpression": "SET st = :s",
                    "ExpressionAttributeValues": {":s": {"S": "active"}}}),
            )
            .await?;
            call(
                "Query",
                json!({"TableName": table, "KeyConditionExpression": "pk = :p",
                    "ExpressionAttributeValues": {":p": key["pk"]}, "Limit": 1}),
            )
            .await?;
            anyhow::Ok(())
        }
    };
    let per_call = cpu_per_call_of(n, round).await;
    let _ = store.delete_table().await;
    per_call
}

/// CPU of this process per DynamoDB call made by `round` (three calls a round, numbered
/// by its argument), µs: 20 warm-up rounds, then the median of [`CHUNKS`] runs, like the
/// server phases.
async fn cpu_per_call_of<F, Fut>(n: usize, round: F) -> anyhow::Result<f64>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    for i in 0..20 {
        round(i).await?;
    }
    let pid = std::process::id();
    let rounds = (n / 3 / CHUNKS).max(20);
    let mut per_call = Vec::new();
    for c in 0..CHUNKS {
        let before = cpu_of(pid)?;
        for i in 0..rounds {
            round(100 + c * rounds + i).await?;
        }
        let after = cpu_of(pid)?;
        per_call.push((after.0 - before.0) as f64 / 1000.0 / (rounds * 3) as f64);
    }
    stats::median(&per_call).context("no samples")
}

/// Chunks a phase is split into.
const CHUNKS: usize = 5;

/// The server's CPU over a run of requests.
struct Chunk {
    ns: f64,
    ticks: f64,
    secs: f64,
    requests: usize,
}

/// Measures a phase of `total` requests in [`CHUNKS`] chunks.
struct Phase {
    pid: u32,
    size: usize,
    done: Vec<Chunk>,
    start: (u64, u64),
    at: Instant,
    count: usize,
}

impl Phase {
    fn start(pid: u32, total: usize) -> anyhow::Result<Self> {
        Ok(Self {
            pid,
            size: total.div_ceil(CHUNKS).max(1),
            done: Vec::new(),
            start: cpu_of(pid)?,
            at: Instant::now(),
            count: 0,
        })
    }

    /// Before each request: closes the chunk when it is full.
    fn before(&mut self) -> anyhow::Result<()> {
        if self.count >= self.size {
            self.close()?;
        }
        Ok(())
    }

    fn after(&mut self) {
        self.count += 1;
    }

    fn close(&mut self) -> anyhow::Result<()> {
        let now = cpu_of(self.pid)?;
        self.done.push(Chunk {
            ns: now.0.saturating_sub(self.start.0) as f64,
            ticks: now.1.saturating_sub(self.start.1) as f64,
            secs: self.at.elapsed().as_secs_f64(),
            requests: self.count,
        });
        self.start = now;
        self.at = Instant::now();
        self.count = 0;
        Ok(())
    }

    fn finish(mut self) -> anyhow::Result<Vec<Chunk>> {
        if self.count > 0 {
            self.close()?;
        }
        Ok(self.done)
    }
}
