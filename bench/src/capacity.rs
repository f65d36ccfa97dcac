//! Section 1: DynamoDB calls and capacity units per operation, measured through the
//! HTTP API of an in-process server over a fresh table on DynamoDB Local.
//!
//! Every request's calls are read from the [`Meter`] on the server's own SDK clients, and
//! cross-checked against the store's own counter ([`ojs_store::Store::usage`]).

use std::time::Duration;

use anyhow::{bail, Context};
use ojs_store::{Timer, TimerMessage, TimerTarget};
use ojs_tests::{Reply, TestApp};
use serde::Serialize;
use serde_json::{json, Value};

use crate::meter::{self, CallRecord, Meter};

/// Argument sizes measured (bytes of the serialized `args` array).
pub const SIZES: [usize; 3] = [100, 1024, 10 * 1024];

/// The size at which the capacity targets are judged.
pub const TARGET_SIZE: usize = 1024;

/// Jobs in one batch PUSH for the batched figures.
pub const BATCH_PUSH: usize = 100;

/// Jobs in one batched FETCH.
pub const BATCH_FETCH: usize = 10;

/// One DynamoDB call of an operation, for the breakdown.
#[derive(Debug, Clone, Serialize)]
pub struct CallSummary {
    /// API operation.
    pub op: String,
    /// What it touched.
    pub target: String,
    /// Read units.
    pub read_units: f64,
    /// Write units.
    pub write_units: f64,
    /// Units on the base table.
    pub table_units: f64,
    /// Units per GSI.
    pub index_units: std::collections::BTreeMap<String, f64>,
    /// Whether it succeeded.
    pub ok: bool,
}

impl From<&CallRecord> for CallSummary {
    fn from(c: &CallRecord) -> Self {
        Self {
            op: if c.service == "sqs" {
                format!("SQS {}", c.op)
            } else {
                c.op.clone()
            },
            target: c.target.clone(),
            read_units: c.read_units,
            write_units: c.write_units,
            table_units: c.table_units,
            index_units: c.index_units.clone(),
            ok: c.ok,
        }
    }
}

/// What one kind of request costs (means over the samples).
#[derive(Debug, Clone, Serialize)]
pub struct OpCost {
    /// e.g. `PUSH`, `FETCH (10 jobs)`.
    pub op: String,
    /// Bytes of the serialized `args`.
    pub args_bytes: usize,
    /// Jobs one request handles.
    pub jobs_per_request: usize,
    /// Requests measured.
    pub samples: usize,
    /// DynamoDB calls per request.
    pub calls: f64,
    /// Read units per request.
    pub read_units: f64,
    /// Write units per request, as DynamoDB Local reports them.
    pub write_units: f64,
    /// Write units per request as AWS would bill them: equal to `write_units` except for
    /// TransactWriteItems, which DynamoDB Local reports as if the transaction wrote one
    /// item (measured: 1, 2 and 10 Puts of the same job all report 6 WCU); AWS bills
    /// every item of a transaction at twice its standard write cost, so the estimate is
    /// items x 2 x (the measured units of a single PutItem of the same job).
    pub write_units_aws: f64,
    /// SQS requests per request (timer messages).
    pub sqs_requests: f64,
    /// Whether every sample cost the same.
    pub stable: bool,
    /// The calls of the last sample.
    pub breakdown: Vec<CallSummary>,
}

/// Per-job totals of a lifecycle.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct PerJob {
    /// DynamoDB calls per job.
    pub calls: f64,
    /// Read units per job.
    pub read_units: f64,
    /// Write units per job.
    pub write_units: f64,
    /// SQS requests per job.
    pub sqs_requests: f64,
    /// HTTP API requests (= Lambda invocations) per job.
    pub http_requests: f64,
    /// Lambda invocations not caused by an HTTP request (timer function), per job.
    pub other_invocations: f64,
}

impl std::ops::Add for PerJob {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            calls: self.calls + o.calls,
            read_units: self.read_units + o.read_units,
            write_units: self.write_units + o.write_units,
            sqs_requests: self.sqs_requests + o.sqs_requests,
            http_requests: self.http_requests + o.http_requests,
            other_invocations: self.other_invocations + o.other_invocations,
        }
    }
}

impl PerJob {
    /// The per-job share of an operation handling `op.jobs_per_request` jobs, reached
    /// through `http` HTTP requests per call of it (0 for the timer).
    pub fn of(op: &OpCost, http: f64) -> Self {
        let n = op.jobs_per_request.max(1) as f64;
        Self {
            calls: op.calls / n,
            read_units: op.read_units / n,
            write_units: op.write_units_aws / n,
            sqs_requests: op.sqs_requests / n,
            http_requests: http / n,
            other_invocations: if http == 0.0 { 1.0 / n } else { 0.0 },
        }
    }
}

/// The lifecycles of one size.
#[derive(Debug, Clone, Serialize)]
pub struct Lifecycle {
    /// Bytes of the serialized `args`.
    pub args_bytes: usize,
    /// DynamoDB calls of PUSH + FETCH (1 job) + ACK on the request path alone.
    pub request_path_calls: f64,
    /// PUSH + FETCH (1 job) + ACK, with the stream function's work on their records.
    pub single: PerJob,
    /// PUSH + FETCH (1 job) + ACK under steady traffic: the stream function gets their
    /// records in batches of 100 lifecycles.
    pub single_steady: PerJob,
    /// Batch PUSH of 100 + FETCH of 10 + ACK, per job, with the stream function's work
    /// on their records in batches of 100 lifecycles.
    pub batched: PerJob,
    /// Scheduled PUSH + timer promotion + FETCH (1 job) + ACK.
    pub scheduled: PerJob,
    /// Item writes per job to each partition key that many jobs share (every key but a
    /// job's own `JOB#<id>`), under steady traffic: on AWS one partition takes about
    /// 1,000 writes a second, so these bound a queue's throughput.
    pub shared_key_writes: std::collections::BTreeMap<String, f64>,
}

impl Lifecycle {
    /// The busiest shared partition key of [`Lifecycle::shared_key_writes`].
    pub fn busiest_shared_key(&self) -> Option<(&str, f64)> {
        self.shared_key_writes
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(k, v)| (k.as_str(), *v))
    }
}

/// Item writes per job to each partition key shared by many jobs, from the calls of the
/// last sample of each of `ops` (each divided by the jobs one request of it serves).
pub fn shared_key_writes(ops: &[&OpCost]) -> std::collections::BTreeMap<String, f64> {
    let mut per_key = std::collections::BTreeMap::new();
    for op in ops {
        let jobs = op.jobs_per_request.max(1) as f64;
        for call in op.breakdown.iter().filter(|c| c.ok) {
            for (partition, items) in written_partitions(&call.target) {
                if !partition.starts_with("JOB#") {
                    *per_key.entry(partition).or_insert(0.0) += items as f64 / jobs;
                }
            }
        }
    }
    per_key
}

/// The partition keys a write call's target names, with the items written to each:
/// `Put EVT#…/evt_…` is one item to `EVT#…`; `Tx[2×Put JOB#…/JOB, Update QUEUES/x]`
/// two to `JOB#…` and one to `QUEUES`.
fn written_partitions(target: &str) -> Vec<(String, usize)> {
    let inner = ["Tx[", "Batch["]
        .iter()
        .find_map(|p| target.strip_prefix(p))
        .map_or(target, |rest| rest.strip_suffix(']').unwrap_or(rest));
    inner
        .split(", ")
        .filter_map(|part| {
            let (n, action) = match part.split_once('×') {
                Some((n, action)) => (n.parse().ok()?, action),
                None => (1, part),
            };
            let (verb, key) = action.split_once(' ')?;
            if !matches!(verb, "Put" | "Update" | "Delete") {
                return None;
            }
            let partition = key.split_once('/').map_or(key, |(pk, _)| pk);
            Some((partition.to_owned(), n))
        })
        .collect()
}

/// Section 1 result.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityReport {
    /// Every operation at every size.
    pub ops: Vec<OpCost>,
    /// Lifecycles per size.
    pub lifecycles: Vec<Lifecycle>,
    /// The first PUSH to a queue on a new instance also registers the queue.
    pub first_push_of_a_queue: Option<OpCost>,
    /// Whether the store's own counter agreed with the meter on every request.
    pub store_counter_agrees: bool,
}

impl CapacityReport {
    /// The operation `op` at `size`.
    pub fn get(&self, op: &str, size: usize) -> Option<&OpCost> {
        self.ops.iter().find(|o| o.op == op && o.args_bytes == size)
    }

    /// The lifecycle at `size`.
    pub fn lifecycle(&self, size: usize) -> Option<&Lifecycle> {
        self.lifecycles.iter().find(|l| l.args_bytes == size)
    }
}

/// Operation names, in table order.
pub mod ops {
    /// PUSH of one job.
    pub const PUSH: &str = "PUSH";
    /// Batch PUSH of 100 jobs.
    pub const BATCH_PUSH: &str = "PUSH batch (100 jobs)";
    /// FETCH claiming one job.
    pub const FETCH_1: &str = "FETCH (1 job)";
    /// FETCH claiming ten jobs.
    pub const FETCH_10: &str = "FETCH (10 jobs)";
    /// FETCH of an empty queue.
    pub const FETCH_EMPTY: &str = "FETCH (empty queue)";
    /// ACK.
    pub const ACK: &str = "ACK";
    /// FAIL with attempts left (job becomes retryable).
    pub const FAIL_RETRY: &str = "FAIL (will retry)";
    /// PUSH of one job less than a second after another PUSH to its queue by the same
    /// instance: the queue's settings are remembered (`OJS_QUEUE_SETTINGS_TTL_MS`), as
    /// under steady traffic, where each instance serves many requests a second.
    pub const PUSH_WARM: &str = "PUSH (queue settings remembered)";
    /// FETCH claiming one job less than a second after another FETCH of the same worker
    /// by the same instance: the worker's state is remembered, as under steady traffic.
    pub const FETCH_1_WARM: &str = "FETCH (1 job, worker state remembered)";
    /// PUSH with `scheduled_at` 1.5 s ahead.
    pub const PUSH_SCHEDULED: &str = "PUSH scheduled";
    /// The timer function promoting the scheduled job.
    pub const PROMOTE: &str = "timer promotion";
    /// The stream function applying the records of one PUSH, FETCH and ACK (a stream
    /// batch of one lifecycle: a trickle of traffic).
    pub const STREAM_1: &str = "stream batch (1 lifecycle)";
    /// The stream function applying the records of 100 lifecycles in one batch (steady
    /// traffic: Lambda hands over up to 100 records within a second).
    pub const STREAM_100: &str = "stream batch (100 lifecycles)";
}

/// A measuring harness: an in-process server whose store and timer use metered clients.
struct Bench {
    app: TestApp,
    meter: Meter,
    sqs: aws_sdk_sqs::Client,
    timer_url: String,
    agrees: std::sync::atomic::AtomicBool,
}

/// `args` whose JSON form is exactly `size` bytes and that compress like a real payload:
/// an order with lines of random SKUs, quantities, prices and customer ids, and a note of
/// words to make up the size (deterministic for a size). The store deflates large requests
/// (shared/store/src/dynamo/item.rs), so a run of one repeated byte, which deflates to almost
/// nothing, would flatter every capacity figure. Sizes too small for an order are a string.
pub fn args_of(size: usize) -> Value {
    const WORDS: [&str; 16] = [
        "please", "deliver", "before", "noon", "fragile", "gift", "wrap", "leave", "at", "the",
        "door", "call", "on", "arrival", "back", "entrance",
    ];
    // A 64-bit LCG (Knuth's MMIX constants): no dependency, same values on every machine.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ size as u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 16
    };
    let order = format!("ord_{:012x}", next() & 0xffff_ffff_ffff);
    let with =
        |lines: &[Value], note: &str| json!([{"order": order, "lines": lines, "note": note}]);
    if with(&[], "").to_string().len() > size {
        return json!(["x".repeat(size.saturating_sub(4))]);
    }
    let mut lines: Vec<Value> = Vec::new();
    // The form's length kept as lines are added (each adds itself and a comma but the
    // first): serializing the whole order per line made a 1 MB order take minutes.
    let mut len = with(&[], "").to_string().len();
    loop {
        let line = json!({
            "sku": format!("SKU-{:05}", next() % 100_000),
            "qty": 1 + next() % 9,
            "price": format!("{}.{:02}", next() % 500, next() % 100),
            "customer": format!("cus_{:012x}", next() & 0xffff_ffff_ffff),
        });
        let grown = len + line.to_string().len() + usize::from(!lines.is_empty());
        if grown > size {
            break;
        }
        len = grown;
        lines.push(line);
    }
    debug_assert_eq!(len, with(&lines, "").to_string().len());
    let missing = size - len;
    let mut note = String::new();
    while note.len() < missing {
        let word = WORDS[usize::try_from(next() % 16).unwrap_or(0)];
        note.push_str(word);
        note.push(' ');
    }
    note.truncate(missing);
    with(&lines, &note)
}

fn job(queue: &str, size: usize) -> Value {
    json!({"type": "bench.job", "args": args_of(size), "options": {"queue": queue}})
}

/// PUSH, FETCH of that one job, and its ACK by worker `bench`: the calls of each.
async fn lifecycle(b: &Bench, q: &str, size: usize) -> anyhow::Result<[Vec<CallRecord>; 3]> {
    let (r, push) = b.measure(b.app.push(job(q, size))).await?;
    ok(&r, "PUSH")?;
    let id = id_of(&r)?;
    let (r, fetch) = b
        .measure(b.app.fetch(json!({"queues": [q], "worker_id": "bench"})))
        .await?;
    if r.job_ids() != [id.clone()] {
        bail!("FETCH did not return the pushed job: {}", r.body);
    }
    let (r, ack) = b
        .measure(
            b.app
                .ack(json!({"job_id": id, "worker_id": "bench", "result": {"ok": true}})),
        )
        .await?;
    ok(&r, "ACK")?;
    Ok([push, fetch, ack])
}

fn ok(reply: &Reply, what: &str) -> anyhow::Result<()> {
    if (200..300).contains(&reply.status) {
        Ok(())
    } else {
        bail!("{what} answered {}: {}", reply.status, reply.body)
    }
}

fn id_of(reply: &Reply) -> anyhow::Result<String> {
    reply.body["job"]["id"]
        .as_str()
        .map(str::to_owned)
        .context("PUSH reply without job.id")
}

impl Bench {
    async fn start() -> anyhow::Result<Self> {
        let sdk = crate::env::sdk().await;
        let meter = Meter::default();
        let store = crate::env::metered_store("capacity", &meter).await?;
        let table = store.table().to_owned();
        // The timer queue as on AWS, with a metered client, but no consumer: the bench
        // hands the message to the timer handler itself to measure the promotion.
        let sqs_metered = meter.sqs_client(&sdk);
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let created = sqs
            .create_queue()
            .queue_name(format!("{table}-timer"))
            .send()
            .await
            .context("creating the timer queue: is moto running? (scripts/local-aws.sh start)")?;
        let timer_url = created
            .queue_url()
            .context("created queue has no URL")?
            .to_owned();
        let store = store.with_timer(Timer::new(sqs_metered, timer_url.clone()));
        let app = TestApp::spawn_on_store(store).await?;
        Ok(Self {
            app,
            meter,
            sqs,
            timer_url,
            agrees: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// Runs `f` and returns its result with the calls it made.
    async fn measure<T, F>(&self, f: F) -> anyhow::Result<(T, Vec<CallRecord>)>
    where
        F: std::future::Future<Output = anyhow::Result<T>>,
    {
        let mark = self.meter.len();
        let before = self.app.store.usage();
        let out = f.await?;
        let calls = self.meter.since(mark);
        let d = self.app.store.usage() - before;
        let t = meter::totals(&calls);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        if d.calls != t.calls as u64
            || !close(d.read_units, t.read_units)
            || !close(d.write_units, t.write_units)
        {
            self.agrees
                .store(false, std::sync::atomic::Ordering::Relaxed);
            eprintln!(
                "bench: store counter ({} calls, {} RCU, {} WCU) and meter ({} calls, {} RCU, {} WCU) disagree",
                d.calls, d.read_units, d.write_units, t.calls, t.read_units, t.write_units
            );
        }
        Ok((out, calls))
    }

    /// Applies every change stream record written so far, as the stream function would in
    /// one batch, and returns the calls it made. (The consumer keeps its own usage, so it
    /// is not cross-checked against the request path's counter.) The in-process consumer's
    /// catch-up mark, which tells it where to read to, is not counted: the stream function
    /// on AWS is handed its batch and writes no mark.
    async fn measure_stream(&self) -> Vec<CallRecord> {
        let mark = self.meter.len();
        self.app.store.catch_up().await;
        self.meter
            .since(mark)
            .into_iter()
            .filter(|c| !c.target.contains("LOCAL#"))
            .collect()
    }

    /// Waits for the timer message of `job_id` and returns its body.
    async fn timer_message(&self, job_id: &str) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < deadline {
            let out = self
                .sqs
                .receive_message()
                .queue_url(&self.timer_url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .send()
                .await?;
            for m in out.messages() {
                let body = m.body().unwrap_or_default().to_owned();
                if let Some(r) = m.receipt_handle() {
                    let _ = self
                        .sqs
                        .delete_message()
                        .queue_url(&self.timer_url)
                        .receipt_handle(r)
                        .send()
                        .await;
                }
                let msg: Result<TimerMessage, _> = serde_json::from_str(&body);
                if matches!(msg, Ok(TimerMessage { target: TimerTarget::Job { job_id: ref id }, .. }) if id == job_id)
                {
                    return Ok(body);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("no timer message for job {job_id} within 20 s")
    }

    async fn teardown(self) {
        let _ = self
            .sqs
            .delete_queue()
            .queue_url(&self.timer_url)
            .send()
            .await;
        self.app.teardown().await;
    }
}

/// Collects samples of one operation.
#[derive(Default)]
struct Samples(Vec<Vec<CallRecord>>);

impl Samples {
    fn add(&mut self, calls: Vec<CallRecord>) {
        self.0.push(calls);
    }

    /// `job_put_units`: table + index units of one standard PutItem of a job of this size
    /// (for the AWS estimate of transactions).
    fn cost(
        &self,
        op: &str,
        args_bytes: usize,
        jobs_per_request: usize,
        job_put_units: Option<f64>,
    ) -> OpCost {
        let totals: Vec<meter::Totals> = self.0.iter().map(|c| meter::totals(c)).collect();
        let n = totals.len().max(1) as f64;
        let aws: Vec<f64> = self
            .0
            .iter()
            .map(|calls| {
                calls
                    .iter()
                    .filter(|c| c.service != "sqs")
                    .map(|c| match (c.op.as_str(), job_put_units) {
                        ("TransactWriteItems", Some(u)) if c.ok => c.items as f64 * 2.0 * u,
                        _ => c.write_units,
                    })
                    .sum::<f64>()
            })
            .collect();
        let first = totals.first().cloned().unwrap_or_default();
        OpCost {
            op: op.to_owned(),
            args_bytes,
            jobs_per_request,
            samples: totals.len(),
            calls: totals.iter().map(|t| t.calls as f64).sum::<f64>() / n,
            read_units: totals.iter().map(|t| t.read_units).sum::<f64>() / n,
            write_units: totals.iter().map(|t| t.write_units).sum::<f64>() / n,
            write_units_aws: aws.iter().sum::<f64>() / n,
            sqs_requests: totals.iter().map(|t| t.sqs_requests as f64).sum::<f64>() / n,
            stable: totals.iter().all(|t| *t == first),
            breakdown: self
                .0
                .last()
                .map(|c| c.iter().map(CallSummary::from).collect())
                .unwrap_or_default(),
        }
    }
}

/// Measures every operation at `sizes`, `reps` times each.
pub async fn run(sizes: &[usize], reps: usize) -> anyhow::Result<CapacityReport> {
    let bench = Bench::start().await?;
    let result = measure_all(&bench, sizes, reps.max(1)).await;
    let agrees = bench.agrees.load(std::sync::atomic::Ordering::Relaxed);
    bench.teardown().await;
    let (ops, lifecycles, first) = result?;
    Ok(CapacityReport {
        ops,
        lifecycles,
        first_push_of_a_queue: first,
        store_counter_agrees: agrees,
    })
}

type Measured = (Vec<OpCost>, Vec<Lifecycle>, Option<OpCost>);

async fn measure_all(b: &Bench, sizes: &[usize], reps: usize) -> anyhow::Result<Measured> {
    let mut ops_out = Vec::new();
    let mut lifecycles = Vec::new();
    let mut first = None;
    for &size in sizes {
        let q = format!("cap-{size}");
        let q_fail = format!("cap-fail-{size}");
        let q_sched = format!("cap-sched-{size}");
        let q_batch = format!("cap-batch-{size}");
        // Warm up: the first PUSH to a queue per instance also writes the queue item.
        for queue in [&q, &q_fail, &q_sched, &q_batch] {
            let (r, calls) = b.measure(b.app.push(job(queue, size))).await?;
            ok(&r, "warm-up PUSH")?;
            if first.is_none() && size == TARGET_SIZE {
                let mut s = Samples::default();
                s.add(calls);
                first = Some(s.cost("PUSH (first to a queue)", size, 1, None));
            }
            let r = b.app.fetch(json!({"queues": [queue], "count": 10})).await?;
            for id in r.job_ids() {
                ok(&b.app.ack(json!({"job_id": id})).await?, "warm-up ACK")?;
            }
        }
        let mut push = Samples::default();
        let mut fetch1 = Samples::default();
        let mut ack = Samples::default();
        let mut push_warm = Samples::default();
        let mut fetch1_warm = Samples::default();
        let mut fail = Samples::default();
        let mut fetch10 = Samples::default();
        let mut batch = Samples::default();
        let mut empty = Samples::default();
        let mut sched = Samples::default();
        let mut promote = Samples::default();
        let mut stream1 = Samples::default();
        let mut stream100 = Samples::default();
        for _ in 0..reps {
            b.measure_stream().await;
            // PUSH, FETCH 1, ACK, alone: a trickle, nothing remembered.
            let [p, f, a] = lifecycle(b, &q, size).await?;
            push.add(p);
            fetch1.add(f);
            ack.add(a);
            stream1.add(b.measure_stream().await);
            // FETCH of the now empty queue.
            let (r, calls) = b.measure(b.app.fetch(json!({"queues": [q]}))).await?;
            if !r.job_ids().is_empty() {
                bail!("expected an empty queue: {}", r.body);
            }
            empty.add(calls);
            // FAIL with attempts left, on its own queue (the retry waits in the due index).
            let r = b
                .app
                .push(json!({"type": "bench.job", "args": args_of(size),
                    "options": {"queue": q_fail, "retry": {"max_attempts": 3}}}))
                .await?;
            let id = id_of(&r)?;
            let r = b
                .app
                .fetch(json!({"queues": [q_fail], "worker_id": "bench"}))
                .await?;
            if r.job_ids() != [id.clone()] {
                bail!(
                    "FETCH (fail queue) did not return the pushed job: {}",
                    r.body
                );
            }
            let (r, calls) = b
                .measure(b.app.nack(json!({"job_id": id, "worker_id": "bench",
                    "error": {"code": "handler_error", "message": "bench failure"}})))
                .await?;
            ok(&r, "FAIL")?;
            if r.body["state"] != "retryable" {
                bail!("FAIL did not leave the job retryable: {}", r.body);
            }
            fail.add(calls);
            // The retry would come back on the next FETCH of this queue: cancel it.
            ok(&b.app.cancel(&id).await?, "CANCEL of the retryable job")?;
            // PUSH, FETCH 1, ACK under steady traffic: an unmeasured lifecycle just before
            // leaves what an instance remembers for a second (the queue's settings, the
            // worker's state) as a busy instance has it. Their stream records are drained
            // unmeasured below; the steady lifecycle takes its stream work from stream100.
            lifecycle(b, &q, size).await?;
            let [p, f, a] = lifecycle(b, &q, size).await?;
            push_warm.add(p);
            fetch1_warm.add(f);
            // ACK remembers nothing: one more sample of it.
            ack.add(a);
            // Batch PUSH of 100, drained by FETCHes of 10 and ACKs.
            b.measure_stream().await;
            let jobs: Vec<Value> = (0..BATCH_PUSH).map(|_| job(&q_batch, size)).collect();
            let (r, calls) = b
                .measure(b.app.call(
                    reqwest::Method::POST,
                    "/ojs/v1/jobs/batch",
                    Some(json!({ "jobs": jobs })),
                ))
                .await?;
            ok(&r, "batch PUSH")?;
            batch.add(calls);
            for _ in 0..BATCH_PUSH / BATCH_FETCH {
                let (r, calls) = b
                    .measure(b.app.fetch(
                        json!({"queues": [q_batch], "count": BATCH_FETCH, "worker_id": "bench"}),
                    ))
                    .await?;
                let ids = r.job_ids();
                if ids.len() != BATCH_FETCH {
                    bail!("FETCH of 10 returned {} jobs: {}", ids.len(), r.body);
                }
                fetch10.add(calls);
                for id in ids {
                    let (r, calls) = b
                        .measure(b.app.ack(
                            json!({"job_id": id, "worker_id": "bench", "result": {"ok": true}}),
                        ))
                        .await?;
                    ok(&r, "ACK")?;
                    ack.add(calls);
                }
            }
            stream100.add(b.measure_stream().await);
            // A job scheduled 1.5 s ahead: PUSH arms the timer; the timer handler promotes.
            let at = ojs_core::time::now() + chrono::Duration::milliseconds(1500);
            let (r, calls) = b
                .measure(
                    b.app
                        .push(json!({"type": "bench.job", "args": args_of(size),
                    "scheduled_at": ojs_core::time::format(&at), "options": {"queue": q_sched}})),
                )
                .await?;
            ok(&r, "scheduled PUSH")?;
            if r.body["job"]["state"] != "scheduled" {
                bail!("scheduled PUSH did not leave the job scheduled: {}", r.body);
            }
            sched.add(calls);
            let id = id_of(&r)?;
            let body = b.timer_message(&id).await?;
            let store = b.app.store.clone();
            let ((), calls) = b
                .measure(async move { Ok(store.wakeups().handle_timer(&body).await?) })
                .await?;
            promote.add(calls);
            let r = b
                .app
                .fetch(json!({"queues": [q_sched], "worker_id": "bench"}))
                .await?;
            if r.job_ids() != [id.clone()] {
                bail!("the promoted job was not fetched: {}", r.body);
            }
            ok(
                &b.app
                    .ack(json!({"job_id": id, "worker_id": "bench"}))
                    .await?,
                "ACK",
            )?;
        }
        // One standard PutItem of a job of this size: the unit of the transaction estimate.
        let put_units = push.0.last().and_then(|calls| {
            calls
                .iter()
                .find(|c| c.op == "PutItem" && c.target.starts_with("Put JOB#"))
                .map(|c| c.write_units)
        });
        let u = put_units;
        let push = push.cost(ops::PUSH, size, 1, u);
        let fetch1 = fetch1.cost(ops::FETCH_1, size, 1, u);
        let ack = ack.cost(ops::ACK, size, 1, u);
        let push_warm = push_warm.cost(ops::PUSH_WARM, size, 1, u);
        let fetch1_warm = fetch1_warm.cost(ops::FETCH_1_WARM, size, 1, u);
        let batch = batch.cost(ops::BATCH_PUSH, size, BATCH_PUSH, u);
        let fetch10 = fetch10.cost(ops::FETCH_10, size, BATCH_FETCH, u);
        let sched = sched.cost(ops::PUSH_SCHEDULED, size, 1, u);
        let promote = promote.cost(ops::PROMOTE, size, 1, u);
        let stream1 = stream1.cost(ops::STREAM_1, size, 1, u);
        let stream100 = stream100.cost(ops::STREAM_100, size, BATCH_PUSH, u);
        let single_path = PerJob::of(&push, 1.0) + PerJob::of(&fetch1, 1.0) + PerJob::of(&ack, 1.0);
        let batched_path =
            PerJob::of(&batch, 1.0) + PerJob::of(&fetch10, 1.0) + PerJob::of(&ack, 1.0);
        lifecycles.push(Lifecycle {
            args_bytes: size,
            request_path_calls: single_path.calls,
            // A single lifecycle's records reach the stream function alone (a trickle);
            // batched traffic fills stream batches.
            single: single_path + PerJob::of(&stream1, 0.0),
            // Under steady traffic each instance serves many requests a second, so what it
            // remembers for a second is remembered.
            single_steady: PerJob::of(&push_warm, 1.0)
                + PerJob::of(&fetch1_warm, 1.0)
                + PerJob::of(&ack, 1.0)
                + PerJob::of(&stream100, 0.0),
            batched: batched_path + PerJob::of(&stream100, 0.0),
            shared_key_writes: shared_key_writes(&[&push_warm, &fetch1_warm, &ack, &stream100]),
            scheduled: PerJob::of(&sched, 1.0)
                + PerJob::of(&promote, 0.0)
                + PerJob::of(&fetch1, 1.0)
                + PerJob::of(&ack, 1.0)
                + PerJob::of(&stream1, 0.0),
        });
        ops_out.extend([
            push,
            push_warm,
            batch,
            fetch1,
            fetch1_warm,
            fetch10,
            empty.cost(ops::FETCH_EMPTY, size, 1, u),
            ack,
            fail.cost(ops::FAIL_RETRY, size, 1, u),
            sched,
            promote,
            stream1,
            stream100,
        ]);
    }
    Ok((ops_out, lifecycles, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_have_the_exact_size_and_compress_like_real_payloads() {
        for size in [10, 60, 100, 1_024, 10_240, 300 * 1_024, 1_000_000] {
            let args = args_of(size);
            let text = args.to_string();
            assert_eq!(text.len(), size, "{text}");
            assert_eq!(args, args_of(size), "not deterministic");
            if size >= 1_024 {
                // Real JSON deflates 2-4x; a repeated byte would deflate ~50x.
                let packed = miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 6).len();
                let ratio = size as f64 / packed as f64;
                assert!((1.5..4.5).contains(&ratio), "ratio {ratio:.2} at {size}");
            }
        }
    }

    fn call(target: &str, ok: bool) -> CallSummary {
        CallSummary {
            op: "UpdateItem".into(),
            target: target.into(),
            read_units: 0.0,
            write_units: 1.0,
            table_units: 1.0,
            index_units: Default::default(),
            ok,
        }
    }

    fn op(jobs_per_request: usize, calls: Vec<CallSummary>) -> OpCost {
        OpCost {
            op: "x".into(),
            args_bytes: 0,
            jobs_per_request,
            samples: 1,
            calls: calls.len() as f64,
            read_units: 0.0,
            write_units: 0.0,
            write_units_aws: 0.0,
            sqs_requests: 0.0,
            stable: true,
            breakdown: calls,
        }
    }

    #[test]
    fn shared_key_writes_count_items_per_job_and_leave_out_each_jobs_own_key() {
        let push = op(1, vec![call("Put JOB#…/JOB", true)]);
        let stream = op(
            100,
            vec![
                call("Update QUEUES/~COUNTS#…", true),
                call("Put EVT#…/evt_…", true),
                call(
                    "Tx[2×Put EVT#…/evt_…, Update QUEUES/~COUNTS#…, 3×Delete JOB#…/JOB]",
                    true,
                ),
                // A failed condition writes nothing.
                call("Update QUEUES/~COUNTS#…", false),
            ],
        );
        let got = shared_key_writes(&[&push, &stream]);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!((got["QUEUES"] - 0.02).abs() < 1e-9, "{got:?}");
        assert!((got["EVT#…"] - 0.03).abs() < 1e-9, "{got:?}");
        let life = Lifecycle {
            args_bytes: 0,
            request_path_calls: 0.0,
            single: PerJob::default(),
            single_steady: PerJob::default(),
            batched: PerJob::default(),
            scheduled: PerJob::default(),
            shared_key_writes: got,
        };
        assert_eq!(life.busiest_shared_key(), Some(("EVT#…", 0.03)));
    }

    #[test]
    fn reads_and_odd_targets_name_no_written_partition() {
        assert_eq!(written_partitions("Query ready READY#…"), vec![]);
        assert_eq!(written_partitions("BatchGet[3]"), vec![]);
        assert_eq!(
            written_partitions("Batch[Put A#…/x, 4×Delete B/y]"),
            vec![("A#…".to_owned(), 1), ("B".to_owned(), 4)]
        );
    }
}
