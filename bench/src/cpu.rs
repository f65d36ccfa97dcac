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

use std::path::{Path, PathBuf};
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
    /// The same requests served by another build (`--cpu-baseline`), measured in the
    /// same run, its chunks interleaved with this build's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineCpu>,
    /// Whether the section started on a fresh DynamoDB Local (`OJS_BENCH_FRESH_DYNAMODB`).
    pub fresh_dynamodb: bool,
}

/// CPU per request of another build, measured beside this one.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineCpu {
    /// What the build is, e.g. a commit.
    pub label: String,
    /// Per kind of request, as for this build (`dynamodb_calls` and `own_us` unset: the
    /// capacity section measured this build's calls, not that one's).
    pub ops: Vec<CpuCost>,
}

impl BaselineCpu {
    /// The figure for `op`.
    pub fn get(&self, op: &str) -> Option<&CpuCost> {
        self.ops.iter().find(|c| c.op == op)
    }
}

/// Another build to measure beside this one: a release directory holding its
/// `ojs-local` and `ojs-keys`.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// The release directory.
    pub dir: PathBuf,
    /// What the build is, for the report.
    pub label: String,
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
N sequential requests per kind in 10 chunks (with --cpu-baseline, the other build's server \
runs beside this one on its own table and the two take turns chunk by chunk); CPU = delta of the server's /proc/<pid>/task/*/schedstat \
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

pub(crate) struct Server {
    child: std::process::Child,
    base: String,
    client: reqwest::Client,
    /// `Bearer <API key>`: the server runs with API keys required, as deployed.
    auth: String,
}

/// The environment both binaries of a build (`ojs-local`, `ojs-keys`) run with.
fn server_command(binary: &Path, table: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(binary);
    cmd.env_clear()
        .env("OJS_TABLE", table)
        .env("OJS_EVENTS", "on")
        .env("RUST_LOG", "info")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ENDPOINT_URL_DYNAMODB", crate::env::dynamodb_endpoint())
        .stdin(Stdio::null());
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
    cmd
}

impl Server {
    /// Starts the build in `dir` on `table` (its `ojs-local` creates the table in its own
    /// schema), then issues an API key with the same build's `ojs-keys`, so any commit's
    /// build can be measured the same way.
    /// Without `local_stream`, only an API function's work: on AWS the stream and
    /// scheduler functions run the consumer, the push catch-up and the webhook redrive.
    pub(crate) async fn start(dir: &Path, table: &str, local_stream: bool) -> anyhow::Result<Self> {
        let binary = dir.join("ojs-local");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = server_command(&binary, table)
            .env("OJS_LOCAL_STREAM", if local_stream { "on" } else { "off" })
            .env("OJS_HOST", "127.0.0.1")
            .env("OJS_PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (cargo build --release -p ojs-local)",
                    binary.display()
                )
            })?;
        let mut server = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            auth: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let up = server
                .client
                .get(format!("{}/ojs/v1/health", server.base))
                .send()
                .await;
            if matches!(up, Ok(ref r) if r.status().is_success()) {
                break;
            }
            if Instant::now() > deadline {
                bail!("{} did not answer within 30 s", binary.display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let keys = dir.join("ojs-keys");
        let out = server_command(&keys, table)
            .args(["create", "ojs-bench"])
            .output()
            .with_context(|| format!("running {}", keys.display()))?;
        let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || key.is_empty() {
            bail!(
                "{} create failed: {}",
                keys.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        server.auth = format!("Bearer {key}");
        Ok(server)
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
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

pub(crate) fn ids(v: &Value) -> Vec<String> {
    v["jobs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|j| j["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Measures CPU per request with `n` requests of each single-job kind, of this build and,
/// if given, of `baseline` beside it.
pub async fn run(
    n: usize,
    args_bytes: usize,
    capacity: Option<&CapacityReport>,
    baseline: Option<&Baseline>,
) -> anyhow::Result<CpuReport> {
    // On the DynamoDB Local the capacity section left behind, this build's writes (to a
    // table with a stream) slowed, and its server's CPU per request rose with the wait
    // (PUSH 988 µs there, 811 µs on a fresh one minutes later): the section starts on a
    // fresh one.
    let fresh_dynamodb = crate::throughput::fresh_dynamodb(1, args_bytes).await?;
    let sdk = crate::env::sdk().await;
    let client = ojs_store::client_for(&sdk);
    let mut builds = vec![(crate::cold_start::release_dir(), "this build".to_owned())];
    builds.extend(baseline.map(|b| (b.dir.clone(), b.label.clone())));
    let tables: Vec<String> = builds
        .iter()
        .enumerate()
        .map(|(i, _)| crate::env::table_name(&format!("cpu{i}")))
        .collect();
    let result = async {
        let mut subjects = Vec::new();
        for ((dir, _), table) in builds.iter().zip(&tables) {
            subjects.push(Subject::new(
                Server::start(dir, table, false).await?,
                args_bytes,
            ));
        }
        measure(&mut subjects, n.max(10), args_bytes, capacity).await
    }
    .await;
    for table in &tables {
        let store = ojs_store::Store::new(client.clone(), ojs_store::StoreConfig::for_table(table));
        let _ = store.delete_table().await;
    }
    let (mut report, mut others) = result?;
    report.fresh_dynamodb = fresh_dynamodb;
    report.baseline = others.pop().zip(baseline).map(|(ops, b)| BaselineCpu {
        label: b.label.clone(),
        ops,
    });
    Ok(report)
}

/// The kinds of request measured, in order (each kind's jobs come from the one before).
#[derive(Debug, Clone, Copy)]
enum Step {
    Push,
    Fetch,
    Ack,
    BatchPush,
    Fetch10,
}

const QUEUE: &str = "cpu";
/// The lease of the jobs the FETCH phases claim: an hour.
const LEASE_MS: u64 = 3_600_000;
const BATCH_QUEUE: &str = "cpu-batch";

/// One build under measurement: its server and the jobs its FETCHes handed out.
struct Subject {
    server: Server,
    job: Value,
    batch: Value,
    fetched: std::collections::VecDeque<String>,
}

impl Subject {
    fn new(server: Server, args_bytes: usize) -> Self {
        let job =
            json!({"type": "bench.job", "args": args_of(args_bytes), "options": {"queue": QUEUE}});
        let batch_job = json!({"type": "bench.job", "args": args_of(args_bytes), "options": {"queue": BATCH_QUEUE}});
        let batch: Vec<Value> = (0..100).map(|_| batch_job.clone()).collect();
        Self {
            server,
            job,
            batch: json!({ "jobs": batch }),
            fetched: std::collections::VecDeque::new(),
        }
    }

    /// Queue items, connections and the allocator warmed up.
    async fn warm_up(&mut self) -> anyhow::Result<()> {
        let s = &self.server;
        let batch_job = self.batch["jobs"][0].clone();
        for (job, times) in [(&self.job, 20), (&batch_job, 1)] {
            let queue = job["options"]["queue"].clone();
            for _ in 0..times {
                s.post("/ojs/v1/jobs", job).await?;
                let f = s
                    .post("/ojs/v1/workers/fetch", &json!({ "queues": [queue] }))
                    .await?;
                for id in ids(&f) {
                    s.post("/ojs/v1/workers/ack", &json!({"job_id": id}))
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// One request of `step`.
    async fn one(&mut self, step: Step) -> anyhow::Result<()> {
        let s = &self.server;
        match step {
            Step::Push => {
                s.post("/ojs/v1/jobs", &self.job).await?;
            }
            Step::Fetch => {
                let f = s
                    .post(
                        "/ojs/v1/workers/fetch",
                        // Jobs wait for their ACK phase, the other build's turns
                        // included: a lease longer than the run keeps them claimed.
                        &json!({"queues": [QUEUE], "worker_id": "cpu", "visibility_timeout_ms": LEASE_MS}),
                    )
                    .await?;
                let got = ids(&f);
                if got.len() != 1 {
                    bail!("a FETCH of one job from a full queue returned {f}");
                }
                self.fetched.extend(got);
            }
            Step::Ack => {
                let id = self
                    .fetched
                    .pop_front()
                    .context("an ACK with no job fetched")?;
                s.post(
                    "/ojs/v1/workers/ack",
                    &json!({"job_id": id, "worker_id": "cpu", "result": {"ok": true}}),
                )
                .await?;
            }
            Step::BatchPush => {
                s.post("/ojs/v1/jobs/batch", &self.batch).await?;
            }
            Step::Fetch10 => {
                s.post(
                    "/ojs/v1/workers/fetch",
                    &json!({"queues": [BATCH_QUEUE], "count": 10, "worker_id": "cpu", "visibility_timeout_ms": LEASE_MS}),
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// Runs `total` requests of `step` on every subject in [`CHUNKS`] chunks, taking turns
/// chunk by chunk (the order reversed every other chunk), so whatever else the machine
/// does while one build runs falls on the other's neighbouring chunks too.
async fn interleaved(
    subjects: &mut [Subject],
    step: Step,
    total: usize,
) -> anyhow::Result<Vec<Vec<Chunk>>> {
    let size = total.div_ceil(CHUNKS).max(1);
    let mut chunks: Vec<Vec<Chunk>> = subjects.iter().map(|_| Vec::new()).collect();
    for c in 0..CHUNKS {
        let requests = size.min(total.saturating_sub(c * size));
        if requests == 0 {
            break;
        }
        let mut order: Vec<usize> = (0..subjects.len()).collect();
        if c % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let pid = subjects[i].server.pid();
            let start = cpu_of(pid)?;
            let at = Instant::now();
            for _ in 0..requests {
                subjects[i].one(step).await?;
            }
            let end = cpu_of(pid)?;
            chunks[i].push(Chunk {
                ns: end.0.saturating_sub(start.0) as f64,
                ticks: end.1.saturating_sub(start.1) as f64,
                secs: at.elapsed().as_secs_f64(),
                requests,
            });
        }
    }
    Ok(chunks)
}

/// This build's report and each other subject's figures, in order.
async fn measure(
    subjects: &mut [Subject],
    n: usize,
    args_bytes: usize,
    capacity: Option<&CapacityReport>,
) -> anyhow::Result<(CpuReport, Vec<Vec<CpuCost>>)> {
    use crate::capacity::ops;
    for s in subjects.iter_mut() {
        s.warm_up().await?;
    }
    let ticks = clock_ticks();
    // Idle CPU of each server (background tasks), to subtract.
    let mut idle_ns_per_s = Vec::new();
    for s in subjects.iter() {
        let pid = s.server.pid();
        let (i0, _) = cpu_of(pid)?;
        let idle_start = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (i1, _) = cpu_of(pid)?;
        idle_ns_per_s.push((i1 - i0) as f64 / idle_start.elapsed().as_secs_f64());
    }

    let sdk_us = sdk_cpu_per_call(n).await?;
    let http_us = http_cpu_per_call(n).await?;
    let calls_of = |op: &str| {
        capacity
            .and_then(|c| c.get(op, args_bytes))
            .map(|o| o.calls)
    };
    let record = |op: &str, jobs: usize, phase: &[Chunk], idle_ns_per_s: f64, own: bool| {
        let requests: usize = phase.iter().map(|c| c.requests).sum::<usize>().max(1);
        let secs: f64 = phase.iter().map(|c| c.secs).sum();
        let per_request: Vec<f64> = phase
            .iter()
            .filter(|c| c.requests > 0)
            .map(|c| (c.ns - idle_ns_per_s * c.secs) / 1000.0 / c.requests as f64)
            .collect();
        let ticks_total: f64 = phase.iter().map(|c| c.ticks).sum();
        let cpu_us = stats::median(&per_request).unwrap_or(f64::NAN);
        let calls = calls_of(op).filter(|_| own);
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
    // Batch PUSH of 100 x n/100 (at least 5), FETCH of 10 for those jobs.
    let batches = (n / 100).max(5);
    let steps = [
        (Step::Push, ops::PUSH, 1, n),
        (Step::Fetch, ops::FETCH_1, 1, n),
        (Step::Ack, ops::ACK, 1, n),
        (Step::BatchPush, ops::BATCH_PUSH, 100, batches),
        (Step::Fetch10, ops::FETCH_10, 10, batches * 10),
    ];
    let mut out: Vec<Vec<CpuCost>> = subjects.iter().map(|_| Vec::new()).collect();
    for (step, op, jobs, total) in steps {
        let chunks = interleaved(subjects, step, total).await?;
        for (i, phase) in chunks.iter().enumerate() {
            out[i].push(record(op, jobs, phase, idle_ns_per_s[i], i == 0));
        }
    }
    let mut out = out.into_iter();
    let ops = out.next().unwrap_or_default();
    Ok((
        CpuReport {
            method: METHOD.into(),
            args_bytes,
            ops,
            sdk_us_per_call: sdk_us,
            http_floor_us_per_call: http_us,
            idle_us_per_s: idle_ns_per_s.first().copied().unwrap_or(0.0) / 1000.0,
            baseline: None,
            fresh_dynamodb: false,
        },
        out.collect(),
    ))
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

/// Chunks a phase is split into (per build, when builds take turns).
const CHUNKS: usize = 10;

/// The server's CPU over a run of requests.
struct Chunk {
    ns: f64,
    ticks: f64,
    secs: f64,
    requests: usize,
}
