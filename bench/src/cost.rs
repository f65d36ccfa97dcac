//! Section 2: cost per million jobs from the measured counts and `bench/prices.toml`.

use anyhow::{anyhow, Context};
use serde::Serialize;

use crate::capacity::{ops, CapacityReport, OpCost};
use crate::cpu::CpuReport;

/// On-demand prices (USD), from `bench/prices.toml`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Prices {
    /// DynamoDB, per million write request units.
    pub dynamodb_write_per_million: f64,
    /// DynamoDB, per million read request units.
    pub dynamodb_read_per_million: f64,
    /// Lambda, per million invocations.
    pub lambda_requests_per_million: f64,
    /// Lambda arm64, per GB-second.
    pub lambda_gb_second: f64,
    /// Function memory, MB.
    pub lambda_memory_mb: f64,
    /// Assumed latency of one DynamoDB call on AWS, ms (Lambda duration model).
    pub dynamodb_call_ms: f64,
    /// Memory at which a function gets one full vCPU (CPU time stretches below it).
    pub full_vcpu_memory_mb: f64,
    /// API Gateway HTTP API, per million requests.
    pub http_api_per_million: f64,
    /// SQS, per million requests.
    pub sqs_per_million: f64,
}

/// The prices file shipped with the crate.
pub fn default_prices_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prices.toml")
}

impl Prices {
    /// Parses the prices file's text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let doc: toml_edit::DocumentMut = text.parse().context("parsing prices")?;
        let get = |table: &str, key: &str| -> anyhow::Result<f64> {
            let v = doc
                .get(table)
                .and_then(|t| t.get(key))
                .ok_or_else(|| anyhow!("prices: [{table}] {key} is missing"))?;
            v.as_float()
                .or_else(|| v.as_integer().map(|i| i as f64))
                .ok_or_else(|| anyhow!("prices: [{table}] {key} is not a number"))
        };
        Ok(Self {
            dynamodb_write_per_million: get("dynamodb", "write_units_per_million")?,
            dynamodb_read_per_million: get("dynamodb", "read_units_per_million")?,
            lambda_requests_per_million: get("lambda", "requests_per_million")?,
            lambda_gb_second: get("lambda", "gb_second")?,
            lambda_memory_mb: get("lambda", "memory_mb")?,
            dynamodb_call_ms: get("lambda", "dynamodb_call_ms")?,
            full_vcpu_memory_mb: get("lambda", "full_vcpu_memory_mb")?,
            http_api_per_million: get("api_gateway", "requests_per_million")?,
            sqs_per_million: get("sqs", "requests_per_million")?,
        })
    }

    /// Reads a prices file.
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text)
    }

    /// How much longer CPU-bound work takes at the configured memory than on a full vCPU.
    pub fn cpu_stretch(&self) -> f64 {
        (self.full_vcpu_memory_mb / self.lambda_memory_mb.max(1.0)).max(1.0)
    }

    /// Billed Lambda milliseconds of one invocation making `calls` DynamoDB calls and
    /// spending `cpu_us` of CPU (on a full core): calls x assumed latency + CPU stretched
    /// to the memory's vCPU share, rounded up to a whole millisecond, at least 1.
    pub fn billed_ms(&self, calls: f64, cpu_us: f64) -> f64 {
        (calls * self.dynamodb_call_ms + cpu_us / 1000.0 * self.cpu_stretch())
            .ceil()
            .max(1.0)
    }

    /// USD of `ms` billed milliseconds at the configured memory.
    pub fn lambda_duration_usd(&self, ms: f64) -> f64 {
        ms / 1000.0 * self.lambda_memory_mb / 1024.0 * self.lambda_gb_second
    }
}

/// One line of a cost breakdown.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CostLine {
    /// What is paid for.
    pub item: String,
    /// Quantity per job (units, requests, milliseconds).
    pub per_job: f64,
    /// Unit of `per_job`.
    pub unit: String,
    /// USD per million jobs.
    pub usd_per_million_jobs: f64,
}

/// The cost of a usage scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioCost {
    /// `single`, `batched` or `scheduled`.
    pub scenario: String,
    /// What the scenario does per job.
    pub description: String,
    /// Args size.
    pub args_bytes: usize,
    /// Breakdown.
    pub lines: Vec<CostLine>,
    /// USD per million jobs.
    pub usd_per_million_jobs: f64,
}

/// One kind of request in a scenario: how many per job, and its cost figures.
#[derive(Debug, Clone)]
pub struct Step {
    /// Label.
    pub name: String,
    /// Requests of this kind per job.
    pub per_job: f64,
    /// DynamoDB calls per request.
    pub calls: f64,
    /// Read units per request.
    pub read_units: f64,
    /// Write units per request.
    pub write_units: f64,
    /// SQS requests per request (measured sends plus assumed receive/delete).
    pub sqs_requests: f64,
    /// Whether it arrives through API Gateway (else an event source invokes it).
    pub http: bool,
    /// Product CPU per request, µs (0 when not measured).
    pub cpu_us: f64,
    /// Extra billed Lambda time per request, ms, beyond calls and CPU.
    pub extra_ms: f64,
}

impl Step {
    /// A step from a measured operation, `per_job` times per job.
    pub fn of(op: &OpCost, cpu_us: Option<f64>) -> Self {
        Self {
            name: op.op.clone(),
            per_job: 1.0 / op.jobs_per_request.max(1) as f64,
            calls: op.calls,
            read_units: op.read_units,
            write_units: op.write_units_aws,
            sqs_requests: op.sqs_requests,
            http: true,
            cpu_us: cpu_us.unwrap_or(0.0),
            extra_ms: 0.0,
        }
    }
}

/// Prices a scenario made of `steps`.
pub fn price(
    prices: &Prices,
    scenario: &str,
    description: &str,
    args_bytes: usize,
    steps: &[Step],
) -> ScenarioCost {
    let m = 1e6;
    let sum = |f: &dyn Fn(&Step) -> f64| steps.iter().map(|s| s.per_job * f(s)).sum::<f64>();
    let wcu = sum(&|s| s.write_units);
    let rcu = sum(&|s| s.read_units);
    let http = sum(&|s| if s.http { 1.0 } else { 0.0 });
    let invocations = sum(&|_| 1.0);
    let billed_ms = sum(&|s| prices.billed_ms(s.calls, s.cpu_us) + s.extra_ms.ceil());
    let sqs = sum(&|s| s.sqs_requests);
    let mut lines = vec![
        CostLine {
            item: "DynamoDB writes".into(),
            per_job: wcu,
            unit: "WRU".into(),
            usd_per_million_jobs: wcu * prices.dynamodb_write_per_million,
        },
        CostLine {
            item: "DynamoDB reads".into(),
            per_job: rcu,
            unit: "RRU".into(),
            usd_per_million_jobs: rcu * prices.dynamodb_read_per_million,
        },
        CostLine {
            item: "API Gateway HTTP API".into(),
            per_job: http,
            unit: "requests".into(),
            usd_per_million_jobs: http * prices.http_api_per_million,
        },
        CostLine {
            item: "Lambda requests".into(),
            per_job: invocations,
            unit: "invocations".into(),
            usd_per_million_jobs: invocations * prices.lambda_requests_per_million,
        },
        CostLine {
            item: format!("Lambda duration ({} MB arm64)", prices.lambda_memory_mb),
            per_job: billed_ms,
            unit: "billed ms".into(),
            usd_per_million_jobs: prices.lambda_duration_usd(billed_ms) * m,
        },
    ];
    if sqs > 0.0 {
        lines.push(CostLine {
            item: "SQS".into(),
            per_job: sqs,
            unit: "requests".into(),
            usd_per_million_jobs: sqs * prices.sqs_per_million,
        });
    }
    let total = lines.iter().map(|l| l.usd_per_million_jobs).sum();
    ScenarioCost {
        scenario: scenario.into(),
        description: description.into(),
        args_bytes,
        lines,
        usd_per_million_jobs: total,
    }
}

/// The timer function waits out the sub-second remainder of a job's time, because SQS
/// delays are whole seconds (rounded down): on average half a second of billed time.
pub const TIMER_WAIT_MS: f64 = 500.0;

/// SQS requests of the timer path besides the measured send: the event source's
/// receive and delete, one each per message at low rates (batch size 1).
pub const TIMER_EVENT_SOURCE_SQS: f64 = 2.0;

/// Every scenario at every measured size.
pub fn scenarios(
    prices: &Prices,
    cap: &CapacityReport,
    cpu: Option<&CpuReport>,
) -> Vec<ScenarioCost> {
    let cpu_of = |op: &str| cpu.and_then(|c| c.get(op)).map(|c| c.cpu_us.max(0.0));
    let mut out = Vec::new();
    for l in &cap.lifecycles {
        let size = l.args_bytes;
        let get = |op: &str| cap.get(op, size);
        let (
            Some(push),
            Some(fetch1),
            Some(ack),
            Some(batch),
            Some(fetch10),
            Some(sched),
            Some(promote),
            Some(stream1),
            Some(stream100),
        ) = (
            get(ops::PUSH),
            get(ops::FETCH_1),
            get(ops::ACK),
            get(ops::BATCH_PUSH),
            get(ops::FETCH_10),
            get(ops::PUSH_SCHEDULED),
            get(ops::PROMOTE),
            get(ops::STREAM_1),
            get(ops::STREAM_100),
        )
        else {
            continue;
        };
        // The stream function, invoked by its event source (no API Gateway request).
        let stream = |op: &OpCost| {
            let mut s = Step::of(op, None);
            s.http = false;
            s
        };
        let single = [
            Step::of(push, cpu_of(ops::PUSH)),
            Step::of(fetch1, cpu_of(ops::FETCH_1)),
            Step::of(ack, cpu_of(ops::ACK)),
            stream(stream1),
        ];
        out.push(price(
            prices,
            "single",
            "PUSH + FETCH (1 job) + ACK",
            size,
            &single,
        ));
        // Under steady traffic each instance serves many requests a second, so what it
        // remembers for a second (the queue's settings, the worker's state) is
        // remembered: the warm PUSH and FETCH (the cold ones when a report lacks them).
        let push_warm = get(ops::PUSH_WARM).unwrap_or(push);
        let fetch1_warm = get(ops::FETCH_1_WARM).unwrap_or(fetch1);
        let steady = [
            Step::of(push_warm, cpu_of(ops::PUSH)),
            Step::of(fetch1_warm, cpu_of(ops::FETCH_1)),
            Step::of(ack, cpu_of(ops::ACK)),
            stream(stream100),
        ];
        out.push(price(
            prices,
            "steady",
            "PUSH + FETCH (1 job) + ACK, stream batches of 100 lifecycles",
            size,
            &steady,
        ));
        let batched = [
            Step::of(batch, cpu_of(ops::BATCH_PUSH)),
            Step::of(fetch10, cpu_of(ops::FETCH_10)),
            Step::of(ack, cpu_of(ops::ACK)),
            stream(stream100),
        ];
        out.push(price(
            prices,
            "batched",
            "batch PUSH of 100 + FETCH of 10 + ACK each",
            size,
            &batched,
        ));
        let mut timer = Step::of(promote, None);
        timer.http = false;
        timer.extra_ms = TIMER_WAIT_MS;
        timer.sqs_requests += TIMER_EVENT_SOURCE_SQS;
        let scheduled = [
            Step::of(sched, cpu_of(ops::PUSH)),
            timer,
            Step::of(fetch1, cpu_of(ops::FETCH_1)),
            Step::of(ack, cpu_of(ops::ACK)),
            stream(stream1),
        ];
        out.push(price(
            prices,
            "scheduled",
            "PUSH with scheduled_at + timer promotion + FETCH (1 job) + ACK",
            size,
            &scheduled,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> anyhow::Result<Prices> {
        Prices::load(&default_prices_path())
    }

    #[test]
    fn the_shipped_prices_file_parses_with_the_issue_prices() -> anyhow::Result<()> {
        let p = prices()?;
        assert_eq!(p.dynamodb_write_per_million, 0.625);
        assert_eq!(p.dynamodb_read_per_million, 0.125);
        assert_eq!(p.lambda_requests_per_million, 0.20);
        assert_eq!(p.http_api_per_million, 1.00);
        assert_eq!(p.sqs_per_million, 0.40);
        assert_eq!(p.lambda_gb_second, 0.0000133334);
        Ok(())
    }

    #[test]
    fn a_missing_price_is_an_error() {
        assert!(Prices::parse("[dynamodb]\nwrite_units_per_million = 1\n").is_err());
    }

    #[test]
    fn billed_duration_rounds_up_to_whole_milliseconds() -> anyhow::Result<()> {
        let p = prices()?;
        // 3 calls x 5 ms + 120 µs of CPU stretched to the memory's vCPU share.
        let stretch = p.full_vcpu_memory_mb / p.lambda_memory_mb;
        assert!(stretch > 1.0);
        assert_eq!(p.cpu_stretch(), stretch);
        assert_eq!(
            p.billed_ms(3.0, 120.0),
            (3.0 * p.dynamodb_call_ms + 0.12 * stretch).ceil()
        );
        assert_eq!(p.billed_ms(0.0, 10.0), 1.0);
        Ok(())
    }

    #[test]
    fn cost_arithmetic() -> anyhow::Result<()> {
        let p = Prices {
            dynamodb_write_per_million: 0.625,
            dynamodb_read_per_million: 0.125,
            lambda_requests_per_million: 0.20,
            lambda_gb_second: 0.0000133334,
            lambda_memory_mb: 256.0,
            dynamodb_call_ms: 5.0,
            full_vcpu_memory_mb: 1769.0,
            http_api_per_million: 1.0,
            sqs_per_million: 0.4,
        };
        let step = |per_job: f64, calls: f64, r: f64, w: f64| Step {
            name: "x".into(),
            per_job,
            calls,
            read_units: r,
            write_units: w,
            sqs_requests: 0.0,
            http: true,
            cpu_us: 0.0,
            extra_ms: 0.0,
        };
        // One request per job: 2 calls (10 ms), 1 RCU, 4 WCU; plus a tenth of a batch
        // request: 10 calls (50 ms), 0 RCU, 20 WCU.
        let c = price(
            &p,
            "t",
            "t",
            1024,
            &[step(1.0, 2.0, 1.0, 4.0), step(0.1, 10.0, 0.0, 20.0)],
        );
        let line = |item: &str| {
            c.lines
                .iter()
                .find(|l| l.item.starts_with(item))
                .map(|l| (l.per_job, l.usd_per_million_jobs))
                .unwrap_or_default()
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let (wcu, usd) = line("DynamoDB writes");
        assert!(close(wcu, 6.0) && close(usd, 6.0 * 0.625));
        let (rcu, usd) = line("DynamoDB reads");
        assert!(close(rcu, 1.0) && close(usd, 0.125));
        let (req, usd) = line("API Gateway");
        assert!(close(req, 1.1) && close(usd, 1.1));
        let (inv, usd) = line("Lambda requests");
        assert!(close(inv, 1.1) && close(usd, 0.22));
        let (ms, usd) = line("Lambda duration");
        assert!(close(ms, 15.0));
        // 15 ms at 0.25 GB = 0.00375 GB-s per job -> x 1e6 jobs x price.
        assert!(close(usd, 0.00375 * 0.0000133334 * 1e6));
        let total: f64 = c.lines.iter().map(|l| l.usd_per_million_jobs).sum();
        assert!(close(c.usd_per_million_jobs, total));
        Ok(())
    }
}
