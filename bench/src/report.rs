//! The report: targets, the printed tables and the JSON document.

use std::fmt::Write as _;

use serde::Serialize;

use crate::capacity::{ops, CapacityReport, Lifecycle, TARGET_SIZE};
use crate::cold_start::ColdStart;
use crate::cost::{Prices, ScenarioCost};
use crate::cpu::CpuReport;
use crate::throughput::ThroughputReport;

/// A target (of issue #9 or #17) and how the measurement compares.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is measured.
    pub name: String,
    /// The limit, in words.
    pub limit: String,
    /// The measured value, in words.
    pub measured: String,
    /// Met, missed, or `None` when not measured in this run.
    pub pass: Option<bool>,
}

/// The machine the numbers come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// `uname -srm`.
    pub os: String,
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// DynamoDB endpoint.
    pub dynamodb_endpoint: String,
    /// `/proc/loadavg` when the run started (other work on the machine skews CPU and
    /// latency figures).
    pub loadavg_at_start: String,
    /// `OJS_STRICT_DDB`: `off` when the sections that spawn a server reach DynamoDB as it
    /// is, anything else when through the tests' AWS-strict layer (index lag, short pages,
    /// throttling: slower, and not what a deployment sees).
    pub strict_ddb: String,
}

impl Machine {
    /// Describes this machine.
    pub fn detect() -> Self {
        let os = std::process::Command::new("uname")
            .arg("-srm")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_default();
        Self {
            cpus: std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(1),
            os,
            cpu_model,
            dynamodb_endpoint: crate::env::dynamodb_endpoint(),
            loadavg_at_start: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            strict_ddb: std::env::var("OJS_STRICT_DDB").unwrap_or_default(),
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When (UTC).
    pub generated_at: String,
    /// `quick` or `full`.
    pub mode: String,
    /// Where.
    pub machine: Machine,
    /// The prices used.
    pub prices: Prices,
    /// Section 1.
    pub capacity: Option<CapacityReport>,
    /// Section 2.
    pub cost: Vec<ScenarioCost>,
    /// Section 3.
    pub throughput: Option<ThroughputReport>,
    /// Section 4.
    pub cold_start: Vec<ColdStart>,
    /// Section 5.
    pub cpu: Option<CpuReport>,
    /// Section 6.
    pub push: Option<crate::push::PushReport>,
    /// Section 7.
    pub timer: Option<crate::timer::TimerReport>,
    /// Section 8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenants: Option<crate::tenants::TenantReport>,
    /// Section 9: large jobs' latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub large: Option<crate::large::LargeReport>,
    /// Targets.
    pub targets: Vec<Target>,
}

/// Compares the measurements with the issue's targets.
pub fn targets(
    cap: Option<&CapacityReport>,
    cost: &[ScenarioCost],
    cold: &[ColdStart],
    cpu: Option<&CpuReport>,
    throughput: Option<&ThroughputReport>,
    timer: Option<&crate::timer::TimerReport>,
) -> Vec<Target> {
    let mut t = Vec::new();
    t.push(Target {
        name: "timer promotion lateness, largest over the delayed jobs (never early)".into(),
        limit: "< 1000 ms".into(),
        measured: timer.map_or("not measured".into(), |r| {
            format!(
                "{} ms (p50 {} ms, earliest {} ms)",
                r.max_ms, r.p50_ms, r.min_ms
            )
        }),
        pass: timer.map(|r| r.max_ms < 1000 && r.min_ms >= 0),
    });
    let life = cap.and_then(|c| c.lifecycle(TARGET_SIZE));
    // A per-lifecycle figure against its ceiling.
    let per_lifecycle = |name: &str, unit: &str, limit: f64, of: fn(&Lifecycle) -> f64| Target {
        name: name.into(),
        limit: format!("<= {limit} {unit}"),
        measured: life.map_or("not measured".into(), |l| format!("{:.1} {unit}", of(l))),
        pass: life.map(|l| of(l) <= limit + 1e-9),
    };
    t.extend([
        per_lifecycle(
            "write units per job lifecycle (PUSH+FETCH+ACK, 1 KiB args, its stream batch alone)",
            "WCU",
            8.0,
            |l| l.single.write_units,
        ),
        per_lifecycle(
            "write units per job lifecycle, steady (stream batches of 100 lifecycles)",
            "WCU",
            8.0,
            |l| l.single_steady.write_units,
        ),
        per_lifecycle(
            "write units per job lifecycle, batched (stream batches of 100 lifecycles)",
            "WCU",
            8.0,
            |l| l.batched.write_units,
        ),
        per_lifecycle(
            "DynamoDB calls per job lifecycle on the request path (PUSH+FETCH+ACK)",
            "calls",
            6.0,
            |l| l.request_path_calls,
        ),
        per_lifecycle(
            "read units per job lifecycle (1 KiB args)",
            "RCU",
            1.0,
            |l| l.single.read_units,
        ),
    ]);
    for scenario in ["single", "batched"] {
        let c = cost
            .iter()
            .find(|c| c.scenario == scenario && c.args_bytes == TARGET_SIZE);
        t.push(Target {
            name: format!("cost per million jobs through the HTTP API ({scenario}, 1 KiB)"),
            limit: "< $6.00".into(),
            measured: c.map_or("not measured".into(), |c| {
                format!("${:.2}", c.usd_per_million_jobs)
            }),
            pass: c.map(|c| c.usd_per_million_jobs < 6.0),
        });
    }
    let worst = |f: fn(&ColdStart) -> f64| {
        cold.iter()
            .filter(|c| c.error.is_none())
            .max_by(|a, b| f(a).total_cmp(&f(b)))
            .map(|c| (c.function.clone(), f(c)))
    };
    for (label, f) in [
        (
            "cold start: spawn to first response, slowest function (median)",
            (|c: &ColdStart| c.first_event_ms) as fn(&ColdStart) -> f64,
        ),
        (
            "cold init: spawn to first Runtime API poll, slowest function (median)",
            |c: &ColdStart| c.init_ms,
        ),
    ] {
        let w = worst(f);
        t.push(Target {
            name: label.into(),
            limit: "< 50 ms".into(),
            measured: w
                .as_ref()
                .map_or("not measured".into(), |(n, v)| format!("{v:.1} ms ({n})")),
            pass: w.map(|(_, v)| v < 50.0),
        });
    }
    let single = [ops::PUSH, ops::FETCH_1, ops::ACK];
    let worst_cpu = cpu.and_then(|c| {
        c.ops
            .iter()
            .filter(|o| single.contains(&o.op.as_str()))
            .max_by(|a, b| a.cpu_us.total_cmp(&b.cpu_us))
    });
    t.push(Target {
        name: "product CPU per request incl. SDK work, worst of PUSH/FETCH/ACK".into(),
        limit: "< 200 µs".into(),
        measured: worst_cpu.map_or("not measured".into(), |o| {
            format!("{:.0} µs ({})", o.cpu_us, o.op)
        }),
        pass: worst_cpu.map(|o| o.cpu_us < 200.0),
    });
    let worst_own = cpu.and_then(|c| {
        c.ops
            .iter()
            .filter(|o| single.contains(&o.op.as_str()) && o.own_us.is_some())
            .max_by(|a, b| a.own_us.unwrap_or(0.0).total_cmp(&b.own_us.unwrap_or(0.0)))
    });
    t.push(Target {
        name: "product CPU per request minus SDK cost per DynamoDB call (estimate), worst".into(),
        limit: "< 200 µs".into(),
        measured: worst_own.map_or("not measured".into(), |o| {
            format!("{:.0} µs ({})", o.own_us.unwrap_or(0.0), o.op)
        }),
        pass: worst_own.map(|o| o.own_us.unwrap_or(0.0) < 200.0),
    });
    t.extend(change_stream_targets(life, cost, cpu, throughput));
    t
}

/// Issue #17's figures before the change stream and the transition engine (commit
/// 68c502c): CPU per request in µs, and lifecycles per second at 32 workers on one queue.
pub const CPU_BEFORE_US: [(&str, f64); 3] = [
    (ops::PUSH, 1_073.0),
    (ops::FETCH_1, 1_530.0),
    (ops::ACK, 1_086.0),
];
/// Lifecycles per second at 32 workers, issue #17's figure.
pub const THROUGHPUT_32_BEFORE: f64 = 108.6;

/// Issue #17's CPU targets: each request at most 60 % of its CPU before. With a baseline
/// measured in the same run (`--cpu-baseline`), "before" is that build's figure on this
/// machine; otherwise it is the issue's own figure, measured on another processor.
fn cpu_targets(cpu: Option<&CpuReport>) -> Vec<Target> {
    let baseline = cpu.and_then(|c| c.baseline.as_ref());
    CPU_BEFORE_US
        .into_iter()
        .map(|(op, issue_us)| {
            let now = cpu.and_then(|c| c.get(op)).map(|o| o.cpu_us);
            let (before, against) = match baseline {
                Some(b) => (
                    b.get(op).map(|o| o.cpu_us),
                    format!("{}, same run", b.label),
                ),
                None => (Some(issue_us), format!("issue's {issue_us:.0} µs")),
            };
            let both = now.zip(before);
            Target {
                name: format!("CPU per request, {op}, against before ({against})"),
                limit: "<= 60 %".into(),
                measured: match (now, before) {
                    (Some(n), Some(b)) => {
                        format!("{n:.0} µs vs {b:.0} µs ({:.0} %)", 100.0 * n / b)
                    }
                    (Some(n), None) => format!("{n:.0} µs (before: not measured)"),
                    _ => "not measured".into(),
                },
                pass: both.map(|(n, b)| n <= 0.6 * b),
            }
        })
        .collect()
}

/// The targets issue #17 adds to those above (its per-lifecycle units are among them).
fn change_stream_targets(
    life: Option<&Lifecycle>,
    cost: &[ScenarioCost],
    cpu: Option<&CpuReport>,
    throughput: Option<&ThroughputReport>,
) -> Vec<Target> {
    let mut t = Vec::new();
    let busiest = life.map(|l| l.busiest_shared_key());
    t.push(Target {
        name: "item writes per job to the busiest partition key shared by many jobs (steady)"
            .into(),
        limit: "<= 0.1".into(),
        measured: match busiest {
            None => "not measured".into(),
            Some(None) => "0 (no shared key written)".into(),
            Some(Some((key, v))) => format!("{v:.2} ({key})"),
        },
        pass: busiest.map(|b| b.map_or(0.0, |(_, v)| v) <= 0.1 + 1e-9),
    });
    // Single requests are judged under steady traffic, as the issue's own measurement ran
    // (200 jobs at once) and as its shared-key target presumes (0.1 writes per job needs
    // 10 lifecycles per stream batch); the trickle figure is shown beside it.
    let at_1kib = |scenario: &str| {
        cost.iter()
            .find(|c| c.scenario == scenario && c.args_bytes == TARGET_SIZE)
            .map(|c| c.usd_per_million_jobs)
    };
    let trickle = at_1kib("single");
    for (scenario, label, limit) in [
        ("steady", "single requests, steady traffic", 9.5),
        ("batched", "batched", 7.5),
    ] {
        let usd = at_1kib(scenario);
        t.push(Target {
            name: format!("cost per million jobs, HTTP API, {label}, 1 KiB (issue #17)"),
            limit: format!("<= ${limit:.2}"),
            measured: match (usd, trickle) {
                (Some(u), Some(alone)) if scenario == "steady" => {
                    format!("${u:.2} (${alone:.2} at a trickle)")
                }
                (Some(u), _) => format!("${u:.2}"),
                (None, _) => "not measured".into(),
            },
            pass: usd.map(|u| u <= limit + 1e-9),
        });
    }
    t.extend(cpu_targets(cpu));
    let at32 = throughput.and_then(|r| r.runs.iter().find(|r| r.workers == 32));
    t.push(Target {
        name: "lost claims per job, 32 workers on one queue".into(),
        limit: "<= 1".into(),
        measured: at32.map_or("not measured".into(), |r| {
            format!("{:.2}", r.lost_claims as f64 / r.jobs.max(1) as f64)
        }),
        pass: at32.map(|r| r.lost_claims <= r.jobs),
    });
    // Like CPU, throughput is judged against the old build measured in the same run when
    // there is one: the issue's figure was measured on another machine.
    t.push(match throughput.and_then(|r| r.versus.as_ref()) {
        Some(v) => Target {
            name: format!(
                "lifecycles per second, {} workers on one queue, against before ({}, same run)",
                v.workers, v.baseline
            ),
            limit: ">= before".into(),
            measured: format!("{:.1} vs {:.1}", v.this_build, v.before),
            pass: Some(v.this_build >= v.before),
        },
        None => Target {
            name: "lifecycles per second, 32 workers on one queue (issue's figure)".into(),
            limit: format!(">= {THROUGHPUT_32_BEFORE}"),
            measured: at32.map_or("not measured".into(), |r| {
                format!("{:.1}", r.lifecycle_jobs_per_s)
            }),
            pass: at32.map(|r| r.lifecycle_jobs_per_s >= THROUGHPUT_32_BEFORE),
        },
    });
    t
}

fn size(b: usize) -> String {
    if b >= 1024 && b.checked_rem(1024) == Some(0) {
        format!("{} KiB", b / 1024)
    } else {
        format!("{b} B")
    }
}

fn kib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / 1024.0 / 1024.0)
}

/// The report as text tables.
fn render_timer(o: &mut String, r: &crate::timer::TimerReport) {
    let _ = writeln!(o, "\n== 7. Timer promotion lateness ==");
    let _ = writeln!(
        o,
        "Method: {} jobs pushed with scheduled_at 3-6 s ahead onto a server whose only mover is the SQS timer consumer (no FETCH, INFO or sweep); lateness = enqueued_at - scheduled_at.",
        r.jobs
    );
    let _ = writeln!(
        o,
        "p50 {} ms, p99 {} ms, max {} ms, earliest {} ms",
        r.p50_ms, r.p99_ms, r.max_ms, r.min_ms
    );
}

fn render_tenants(o: &mut String, r: &crate::tenants::TenantReport) {
    let _ = writeln!(o, "\n== 8. Tenant B beside tenant A's flood ==");
    let _ = writeln!(
        o,
        "Method: tenant A pushes {} jobs into one queue (batches of 100), then tenant B pushes {} one by one while {} workers for any tenant FETCH one job and ACK it; B's wait = its FETCH's answer - its PUSH's answer. Runs on fresh tables: B alone; beside the flood with tenants (lanes); the same jobs without tenants (FIFO).",
        r.flood, r.small, r.workers
    );
    let _ = writeln!(
        o,
        "Paced runs: B pushes a job every {} ms instead of back to back.",
        r.pace_ms
    );
    let _ = writeln!(
        o,
        "{:<13} {:>10} {:>10} {:>10} {:>9}  DynamoDB Local",
        "run", "p50 ms", "p99 ms", "max ms", "fetched"
    );
    for w in &r.waits {
        let _ = writeln!(
            o,
            "{:<13} {:>10.0} {:>10.0} {:>10.0} {:>9}  {}",
            w.run,
            w.p50_ms,
            w.p99_ms,
            w.max_ms,
            w.fetched,
            if w.fresh_dynamodb {
                "fresh"
            } else {
                "not restarted"
            }
        );
        if w.unfetched > 0 {
            let _ = writeln!(
                o,
                "          (stopped at its cap with {} of B's jobs not fetched: lower bounds)",
                w.unfetched
            );
        }
    }
    let _ = writeln!(
        o,
        "B's p99 beside the flood / alone: {:.2}; paced: {:.2} (issue #35: within 2)",
        r.p99_ratio, r.paced_p99_ratio
    );
    let _ = writeln!(o, "FETCH (1 job) for any tenant, per request:");
    let _ = writeln!(
        o,
        "{:<16} {:>7} {:>7} {:>7}",
        "tenants ready", "calls", "RCU", "WCU"
    );
    for c in &r.fetch_cost {
        let _ = writeln!(
            o,
            "{:<16} {:>7.2} {:>7.2} {:>7.2}",
            c.tenants, c.calls, c.read_units, c.write_units
        );
    }
}

fn render_large(o: &mut String, r: &crate::large::LargeReport) {
    let _ = writeln!(o, "\n== 9. Large jobs ==");
    let _ = writeln!(
        o,
        "Method: PUSH, FETCH (1 job) and ACK one lifecycle at a time, each timed at the client over loopback; jobs over 256 KiB keep args and meta in S3 (moto here). DynamoDB figures are the request path's, per lifecycle."
    );
    let _ = writeln!(
        o,
        "{:>10} {:>7} | {:>16} {:>16} {:>16} | {:>6} {:>6} {:>6}",
        "args", "samples", "PUSH p50/max ms", "FETCH p50/max", "ACK p50/max", "calls", "RCU", "WCU"
    );
    for l in &r.rows {
        let _ = writeln!(
            o,
            "{:>10} {:>7} | {:>16} {:>16} {:>16} | {:>6.2} {:>6.2} {:>6.2}",
            l.args_bytes,
            l.samples,
            format!("{:.0} / {:.0}", l.push_p50_ms, l.push_max_ms),
            format!("{:.0} / {:.0}", l.fetch_p50_ms, l.fetch_max_ms),
            format!("{:.0} / {:.0}", l.ack_p50_ms, l.ack_max_ms),
            l.calls,
            l.read_units,
            l.write_units
        );
    }
}

fn render_push(o: &mut String, p: &crate::push::PushReport) {
    let _ = writeln!(
        o,
        "\n== 6. A pushed job next to a polled one (1 KiB args) =="
    );
    let _ = writeln!(
        o,
        "Method: {} jobs one at a time through the same server (change stream read every 50 ms, as make dev): pushed to one registered endpoint answering completed, then pushed and fetched and acknowledged by one worker. Per job, every DynamoDB call in the window (stream and dispatcher included).",
        p.jobs
    );
    let _ = writeln!(
        o,
        "{:<8} {:>7} {:>7} {:>7} {:>13} {:>10}",
        "job", "calls", "RCU", "WCU", "API requests", "median ms"
    );
    for (name, s) in [("pushed", &p.pushed), ("polled", &p.polled)] {
        let _ = writeln!(
            o,
            "{:<8} {:>7.2} {:>7.2} {:>7.2} {:>13.2} {:>10.1}",
            name, s.calls, s.read_units, s.write_units, s.api_requests, s.median_ms
        );
    }
}

pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ojs-bench ({} mode) {} | {} CPUs, {} | {} | load {} | DynamoDB {} (strict layer: {})",
        r.mode,
        r.generated_at,
        r.machine.cpus,
        r.machine.cpu_model,
        r.machine.os,
        r.machine.loadavg_at_start,
        r.machine.dynamodb_endpoint,
        r.machine.strict_ddb
    );
    if let Some(cap) = &r.capacity {
        render_capacity(&mut o, cap);
    }
    if !r.cost.is_empty() {
        render_cost(&mut o, r);
    }
    if let Some(tp) = &r.throughput {
        render_throughput(&mut o, tp);
    }
    if !r.cold_start.is_empty() {
        render_cold(&mut o, &r.cold_start);
    }
    if let Some(cpu) = &r.cpu {
        render_cpu(&mut o, cpu);
    }
    if let Some(push) = &r.push {
        render_push(&mut o, push);
    }
    if let Some(timer) = &r.timer {
        render_timer(&mut o, timer);
    }
    if let Some(tenants) = &r.tenants {
        render_tenants(&mut o, tenants);
    }
    if let Some(large) = &r.large {
        render_large(&mut o, large);
    }
    let _ = writeln!(o, "\n== Targets (issues #9 and #17) ==");
    let _ = writeln!(
        o,
        "{:<72} {:>9}  {:<22} result",
        "target", "limit", "measured"
    );
    for t in &r.targets {
        let res = match t.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "-",
        };
        let _ = writeln!(o, "{:<72} {:>9}  {:<22} {res}", t.name, t.limit, t.measured);
    }
    o
}

fn render_capacity(o: &mut String, cap: &CapacityReport) {
    let _ = writeln!(
        o,
        "\n== 1. DynamoDB capacity per request (DynamoDB Local, ReturnConsumedCapacity=INDEXES, through the HTTP API) =="
    );
    let _ = writeln!(
        o,
        "{:<24} {:>7} {:>6} {:>6} {:>7} {:>9} {:>4} | {:>8} {:>8}",
        "operation", "args", "calls", "RCU", "WCU", "WCU(AWS)", "SQS", "RCU/job", "WCU/job"
    );
    for op in &cap.ops {
        let n = op.jobs_per_request.max(1) as f64;
        let _ = writeln!(
            o,
            "{:<24} {:>7} {:>6.1} {:>6.1} {:>7.1} {:>9.1} {:>4.0} | {:>8.2} {:>8.2}{}",
            op.op,
            size(op.args_bytes),
            op.calls,
            op.read_units,
            op.write_units,
            op.write_units_aws,
            op.sqs_requests,
            op.read_units / n,
            op.write_units_aws / n,
            if op.stable { "" } else { "  (varied)" }
        );
    }
    let _ = writeln!(
        o,
        "WCU = as DynamoDB Local reports; WCU(AWS) differs only for TransactWriteItems, which DynamoDB Local reports as one item: estimated as items x 2 x one PutItem of the job. Per-job figures and costs use WCU(AWS)."
    );
    if let Some(f) = &cap.first_push_of_a_queue {
        let _ = writeln!(
            o,
            "(the first PUSH to a queue per instance also registers the queue: {:.0} calls, {:.1} WCU at {})",
            f.calls,
            f.write_units,
            size(f.args_bytes)
        );
    }
    let _ = writeln!(o, "\nPer job lifecycle:");
    let _ = writeln!(
        o,
        "{:<7} {:<48} {:>6} {:>6} {:>6} {:>5} {:>6}",
        "args", "lifecycle", "calls", "RCU", "WCU", "SQS", "HTTP"
    );
    for l in &cap.lifecycles {
        for (name, p) in [
            ("single: PUSH + FETCH 1 + ACK", &l.single),
            ("steady: single, stream batches of 100", &l.single_steady),
            ("batched: batch PUSH 100 + FETCH 10 + ACK", &l.batched),
            (
                "scheduled: PUSH at + promotion + FETCH 1 + ACK",
                &l.scheduled,
            ),
        ] {
            let _ = writeln!(
                o,
                "{:<7} {:<48} {:>6.2} {:>6.2} {:>6.2} {:>5.2} {:>6.2}",
                size(l.args_bytes),
                name,
                p.calls,
                p.read_units,
                p.write_units,
                p.sqs_requests,
                p.http_requests
            );
        }
    }
    let _ = writeln!(
        o,
        "\nWhere the units go at {} (one sample; table + per-index units):",
        size(TARGET_SIZE)
    );
    for op in cap.ops.iter().filter(|op| op.args_bytes == TARGET_SIZE) {
        let _ = writeln!(o, "  {}:", op.op);
        // Consecutive identical calls (the claims of one FETCH) on one line.
        let mut lines: Vec<(usize, String)> = Vec::new();
        for c in &op.breakdown {
            let idx: Vec<String> = c
                .index_units
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let units = if c.op.starts_with("SQS") {
                String::new()
            } else if c.read_units > 0.0 || c.write_units == 0.0 {
                format!("{} RCU", c.read_units)
            } else {
                format!("{} WCU", c.write_units)
            };
            let mut target = c.target.clone();
            if target.chars().count() > 40 {
                target = target.chars().take(37).collect::<String>() + "...";
            }
            let line = format!(
                "{:<19} {:<40} {:>8} {}{}",
                c.op,
                target,
                units,
                if idx.is_empty() {
                    String::new()
                } else {
                    format!("(table {}, {})", c.table_units, idx.join(", "))
                },
                if c.ok { "" } else { " [condition failed]" }
            );
            match lines.last_mut() {
                Some((n, last)) if *last == line => *n += 1,
                _ => lines.push((1, line)),
            }
        }
        for (n, line) in lines {
            let times = if n > 1 {
                format!("{n}x")
            } else {
                String::new()
            };
            let _ = writeln!(o, "    {times:>4} {line}");
        }
    }
    if !cap.store_counter_agrees {
        let _ = writeln!(
            o,
            "WARNING: the store's own usage counter disagreed with the meter (see stderr)."
        );
    }
}

fn render_cost(o: &mut String, r: &Report) {
    let p = &r.prices;
    let _ = writeln!(
        o,
        "\n== 2. Cost per million jobs (bench/prices.toml: DynamoDB ${}/M WRU, ${}/M RRU; Lambda ${}/M + ${}/GB-s at {} MB; HTTP API ${}/M; SQS ${}/M) ==",
        p.dynamodb_write_per_million,
        p.dynamodb_read_per_million,
        p.lambda_requests_per_million,
        p.lambda_gb_second,
        p.lambda_memory_mb,
        p.http_api_per_million,
        p.sqs_per_million
    );
    let _ = writeln!(
        o,
        "Lambda billed duration per invocation = DynamoDB calls x {} ms (assumed AWS latency) + measured CPU x {:.1} (vCPU share at {} MB), rounded up to 1 ms; the timer adds {} ms (mean sub-second wait) and {} SQS requests (event source receive + delete).",
        p.dynamodb_call_ms,
        p.cpu_stretch(),
        p.lambda_memory_mb,
        crate::cost::TIMER_WAIT_MS,
        crate::cost::TIMER_EVENT_SOURCE_SQS
    );
    let _ = writeln!(
        o,
        "USD per million jobs (quantity per job in parentheses: write/read units, requests, billed ms)"
    );
    let _ = writeln!(
        o,
        "{:<7} {:<10} {:>8} | {:>15} {:>13} {:>13} {:>13} {:>15} {:>13}",
        "args",
        "scenario",
        "total",
        "DDB writes",
        "DDB reads",
        "HTTP API",
        "Lambda req",
        "Lambda time",
        "SQS"
    );
    for c in &r.cost {
        let cell = |prefix: &str| {
            c.lines
                .iter()
                .find(|l| l.item.starts_with(prefix))
                .map_or("-".to_owned(), |l| {
                    format!("{:.2} ({:.2})", l.usd_per_million_jobs, l.per_job)
                })
        };
        let _ = writeln!(
            o,
            "{:<7} {:<10} {:>8} | {:>15} {:>13} {:>13} {:>13} {:>15} {:>13}",
            size(c.args_bytes),
            c.scenario,
            format!("${:.2}", c.usd_per_million_jobs),
            cell("DynamoDB writes"),
            cell("DynamoDB reads"),
            cell("API Gateway"),
            cell("Lambda requests"),
            cell("Lambda duration"),
            cell("SQS")
        );
    }
}

fn render_throughput(o: &mut String, tp: &ThroughputReport) {
    let _ = writeln!(
        o,
        "\n== 3. Throughput and latency (local server on DynamoDB Local) =="
    );
    let _ = writeln!(o, "Method: {}", tp.method);
    let _ = writeln!(
        o,
        "{:>7} {:>5} {:>8} {:>9} {:>9} | {:>15} {:>15} {:>15} | {:>6} {:>5} | {:>8} {:>8} {:>9} {:>6}",
        "workers",
        "jobs",
        "push/s",
        "fetch+ack/s",
        "lifecycle/s",
        "PUSH p50/p99 ms",
        "FETCH p50/p99",
        "ACK p50/p99",
        "calls/job",
        "lost",
        "calls/s",
        "raw/s",
        "ceiling/s",
        "ratio"
    );
    for r in &tp.runs {
        let _ = writeln!(
            o,
            "{:>7} {:>5} {:>8.1} {:>11.1} {:>11.1} | {:>15} {:>15} {:>15} | {:>9.2} {:>5} | {:>8.0} {:>8.0} {:>9.1} {:>5.0}%",
            r.workers,
            r.jobs,
            r.push_jobs_per_s,
            r.consume_jobs_per_s,
            r.lifecycle_jobs_per_s,
            format!("{:.1}/{:.1}", r.push.p50_ms, r.push.p99_ms),
            format!("{:.1}/{:.1}", r.fetch.p50_ms, r.fetch.p99_ms),
            format!("{:.1}/{:.1}", r.ack.p50_ms, r.ack.p99_ms),
            r.calls_per_job,
            r.lost_claims,
            r.product_calls_per_s,
            r.ceiling.calls_per_s,
            r.ceiling_jobs_per_s,
            r.ratio * 100.0
        );
    }
    for r in tp.runs.iter().filter(|r| r.ceiling.errors > 0) {
        let _ = writeln!(
            o,
            "WARNING: {} of {} raw calls failed at {} workers: {}",
            r.ceiling.errors,
            r.ceiling.calls,
            r.workers,
            r.ceiling.first_error.as_deref().unwrap_or("?")
        );
    }
    if tp.runs.iter().any(|r| !r.stream) {
        let _ = writeln!(
            o,
            "STREAM OFF (OJS_BENCH_STREAM=off): tables without their change stream and no stream consumer; the request path alone, not a deployment (no events, no stats)"
        );
    }
    let fresh = tp.runs.iter().filter(|r| r.fresh_dynamodb).count();
    let _ = writeln!(
        o,
        "{fresh} of {} levels (and their replays) started on a fresh DynamoDB Local (OJS_BENCH_FRESH_DYNAMODB), warmed up by an unmeasured pass without a stream",
        tp.runs.len()
    );
    let _ = writeln!(
        o,
        "(lost = claims lost to another consumer; calls/s = product DynamoDB calls per second; raw/s = the same calls replayed raw; ceiling/s = raw/s / calls per job)"
    );
    if let Some(v) = &tp.versus {
        let _ = writeln!(
            o,
            "This build beside {} at {} workers, {} jobs per run: {:.1} against {:.1} lifecycles/s (medians)",
            v.baseline, v.workers, v.jobs, v.this_build, v.before
        );
        let _ = writeln!(o, "Method: {}", v.method);
        for r in &v.runs {
            let _ = writeln!(
                o,
                "  {:<12} push {:>6.2} s  fetch+ack {:>6.2} s  {:>7.1} lifecycles/s{}",
                r.build,
                r.push_seconds,
                r.consume_seconds,
                r.lifecycle_jobs_per_s,
                if r.fresh_dynamodb {
                    ""
                } else {
                    " (DynamoDB Local not restarted)"
                }
            );
        }
    }
}

fn render_cold(o: &mut String, cold: &[ColdStart]) {
    let _ = writeln!(
        o,
        "\n== 4. Cold start (fake Lambda Runtime API, x86_64 release binaries, median of {} starts) ==",
        cold.first().map_or(0, |c| c.runs)
    );
    let _ = writeln!(
        o,
        "{:<12} {:>10} {:>10} {:>9} {:>11} {:>11} {:>9} {:>8} {:>8}  {:<32} answer",
        "function",
        "binary",
        "zip",
        "init ms",
        "1st resp ms",
        "no-auth ms",
        "handle ms",
        "max ms",
        "RSS MiB",
        "event"
    );
    for c in cold {
        if let Some(e) = &c.error {
            let _ = writeln!(o, "{:<12} not measured: {e}", c.function);
            continue;
        }
        let _ = writeln!(
            o,
            "{:<12} {:>10} {:>10} {:>9.1} {:>11.1} {:>11} {:>9.1} {:>8.1} {:>8}  {:<32} {}",
            c.function,
            kib(c.binary_bytes),
            c.zip_bytes.map_or("-".into(), kib),
            c.init_ms,
            c.first_event_ms,
            c.first_event_auth_off_ms
                .map_or("-".into(), |v| format!("{v:.1}")),
            c.handle_ms,
            c.first_event_max_ms,
            c.peak_rss_kib
                .map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
            c.event.chars().take(32).collect::<String>(),
            c.answer
        );
    }
    let _ = writeln!(o, "(init = spawn to first poll of /runtime/invocation/next (Lambda's Init Duration); 1st resp = spawn to the response POST of the first event, HTTP functions with an API key as deployed; no-auth = the same with OJS_AUTH=off; handle = event delivered to response, with key)");
}

fn render_cpu(o: &mut String, cpu: &CpuReport) {
    let _ = writeln!(
        o,
        "\n== 5. CPU per request ({} args) ==",
        size(cpu.args_bytes)
    );
    let _ = writeln!(o, "Method: {}", cpu.method);
    if cpu.fresh_dynamodb {
        let _ = writeln!(
            o,
            "Started on a fresh, warmed DynamoDB Local (OJS_BENCH_FRESH_DYNAMODB)."
        );
    }
    let _ = writeln!(
        o,
        "{:<24} {:>8} {:>10} {:>8} {:>11} {:>10} {:>10} {:>10} {:>10}",
        "request", "n", "CPU µs", "min µs", "(stat) µs", "µs/job", "DDB calls", "own µs", "wall µs"
    );
    for c in &cpu.ops {
        let _ = writeln!(
            o,
            "{:<24} {:>8} {:>10.0} {:>8.0} {:>11.0} {:>10.0} {:>10} {:>10} {:>10.0}",
            c.op,
            c.requests,
            c.cpu_us,
            c.cpu_us_min,
            c.cpu_us_stat,
            c.cpu_us / c.jobs_per_request.max(1) as f64,
            c.dynamodb_calls.map_or("-".into(), |v| format!("{v:.1}")),
            c.own_us.map_or("-".into(), |v| format!("{v:.0}")),
            c.wall_us
        );
    }
    let _ = writeln!(
        o,
        "(CPU per DynamoDB call in the bench process: {:.0} µs through the AWS SDK, {:.0} µs as a plain reqwest JSON POST; idle server CPU: {:.0} µs/s, subtracted)",
        cpu.sdk_us_per_call, cpu.http_floor_us_per_call, cpu.idle_us_per_s
    );
    if let Some(b) = &cpu.baseline {
        let _ = writeln!(
            o,
            "Beside it, {} (same run, the two servers taking turns chunk by chunk):",
            b.label
        );
        let _ = writeln!(
            o,
            "{:<24} {:>10} {:>8} {:>10} {:>12}",
            "request", "CPU µs", "min µs", "wall µs", "this build"
        );
        for c in &b.ops {
            let share = cpu.get(&c.op).map_or("-".into(), |now| {
                format!("{:.0} %", 100.0 * now.cpu_us / c.cpu_us)
            });
            let _ = writeln!(
                o,
                "{:<24} {:>10.0} {:>8.0} {:>10.0} {:>12}",
                c.op, c.cpu_us, c.cpu_us_min, c.wall_us, share
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuCost;

    fn cpu(push: f64, fetch: f64, ack: f64) -> CpuReport {
        let op = |op: &str, cpu_us: f64| CpuCost {
            op: op.into(),
            requests: 1,
            jobs_per_request: 1,
            cpu_us,
            cpu_us_min: cpu_us,
            chunks: 1,
            cpu_us_stat: 0.0,
            dynamodb_calls: None,
            own_us: None,
            wall_us: 0.0,
        };
        CpuReport {
            method: String::new(),
            args_bytes: 1024,
            ops: vec![
                op(ops::PUSH, push),
                op(ops::FETCH_1, fetch),
                op(ops::ACK, ack),
            ],
            sdk_us_per_call: 0.0,
            http_floor_us_per_call: 0.0,
            idle_us_per_s: 0.0,
            baseline: None,
            fresh_dynamodb: false,
        }
    }

    fn verdicts(r: &CpuReport) -> Vec<Option<bool>> {
        change_stream_targets(None, &[], Some(r), None)
            .into_iter()
            .filter(|t| t.name.starts_with("CPU per request"))
            .map(|t| t.pass)
            .collect()
    }

    #[test]
    fn cpu_targets_are_sixty_percent_of_each_requests_figure_before() {
        // 60 % of 1,073 / 1,530 / 1,086 µs is 643.8 / 918 / 651.6.
        let at_limit = cpu(643.8, 918.0, 651.6);
        assert_eq!(verdicts(&at_limit), [Some(true); 3]);
        let over = cpu(644.0, 918.5, 652.0);
        assert_eq!(verdicts(&over), [Some(false); 3]);
    }

    fn with_baseline(now: CpuReport, before: &CpuReport) -> CpuReport {
        CpuReport {
            baseline: Some(crate::cpu::BaselineCpu {
                label: "68c502c".into(),
                ops: before.ops.clone(),
            }),
            ..now
        }
    }

    #[test]
    fn a_baseline_measured_in_the_same_run_replaces_the_issues_figures() {
        // 60 % of a baseline of 1,000 / 2,000 / 500 µs is 600 / 1,200 / 300.
        let before = cpu(1_000.0, 2_000.0, 500.0);
        let r = with_baseline(cpu(600.0, 1_200.0, 300.0), &before);
        assert_eq!(verdicts(&r), [Some(true); 3]);
        let r = with_baseline(cpu(600.5, 1_201.0, 300.5), &before);
        assert_eq!(verdicts(&r), [Some(false); 3]);
        // Below the issue's figures but above 60 % of the baseline's: judged by the baseline.
        let r = with_baseline(cpu(601.0, 900.0, 301.0), &before);
        assert_eq!(verdicts(&r), [Some(false), Some(true), Some(false)]);
        let names: Vec<String> = change_stream_targets(None, &[], Some(&r), None)
            .into_iter()
            .filter(|t| t.name.starts_with("CPU per request"))
            .map(|t| format!("{} {}", t.name, t.measured))
            .collect();
        assert!(
            names[0].contains("68c502c, same run") && names[0].contains("601 µs vs 1000 µs (60 %)"),
            "{names:?}"
        );
    }

    #[test]
    fn a_request_the_baseline_did_not_measure_is_not_judged() {
        let mut before = cpu(1_000.0, 2_000.0, 500.0);
        before.ops.retain(|o| o.op != ops::ACK);
        let r = with_baseline(cpu(100.0, 100.0, 100.0), &before);
        assert_eq!(verdicts(&r), [Some(true), Some(true), None]);
        let ack = change_stream_targets(None, &[], Some(&r), None)
            .into_iter()
            .find(|t| t.name.starts_with("CPU per request, ACK"))
            .map(|t| t.measured);
        assert_eq!(ack.as_deref(), Some("100 µs (before: not measured)"));
    }

    fn verdict(targets: &[Target], starts: &str) -> Option<bool> {
        targets
            .iter()
            .find(|t| t.name.starts_with(starts))
            .and_then(|t| t.pass)
    }

    fn lifecycle(busiest: f64) -> Lifecycle {
        let zero = crate::capacity::PerJob::default();
        Lifecycle {
            args_bytes: TARGET_SIZE,
            request_path_calls: 0.0,
            single: zero,
            single_steady: zero,
            batched: zero,
            scheduled: zero,
            shared_key_writes: [("QUEUES".to_owned(), 0.01), ("EVT#…".to_owned(), busiest)]
                .into_iter()
                .collect(),
        }
    }

    fn cost(scenario: &str, args_bytes: usize, usd: f64) -> ScenarioCost {
        ScenarioCost {
            scenario: scenario.into(),
            description: String::new(),
            args_bytes,
            lines: Vec::new(),
            usd_per_million_jobs: usd,
        }
    }

    fn run(workers: usize, lost_claims: usize, per_s: f64) -> crate::throughput::Run {
        let latency = crate::throughput::Latency {
            n: 0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            mean_ms: 0.0,
        };
        crate::throughput::Run {
            workers,
            jobs: 1_000,
            args_bytes: TARGET_SIZE,
            fresh_dynamodb: true,
            stream: true,
            push_seconds: 0.0,
            consume_seconds: 0.0,
            push_jobs_per_s: 0.0,
            consume_jobs_per_s: 0.0,
            lifecycle_jobs_per_s: per_s,
            push: latency.clone(),
            fetch: latency.clone(),
            ack: latency,
            empty_fetches: 0,
            lost_claims,
            dynamodb_calls: 0,
            calls_per_job: 0.0,
            product_calls_per_s: 0.0,
            ceiling: crate::ceiling::Ceiling::not_replayed(workers),
            ceiling_jobs_per_s: 0.0,
            ratio: 0.0,
        }
    }

    #[test]
    fn the_busiest_shared_key_passes_at_a_tenth_of_a_write_per_job() {
        let at = change_stream_targets(Some(&lifecycle(0.1)), &[], None, None);
        assert_eq!(verdict(&at, "item writes per job"), Some(true));
        let over = change_stream_targets(Some(&lifecycle(0.11)), &[], None, None);
        assert_eq!(verdict(&over, "item writes per job"), Some(false));
        assert!(
            over.iter().any(|t| t.measured == "0.11 (EVT#…)"),
            "{over:?}"
        );
    }

    #[test]
    fn cost_targets_judge_the_1_kib_scenario_at_its_own_limit() {
        let line = |costs: &[ScenarioCost], scenario: &str| {
            verdict(
                &change_stream_targets(None, costs, None, None),
                &format!("cost per million jobs, HTTP API, {scenario}"),
            )
        };
        let met = [cost("steady", 1024, 9.5), cost("batched", 1024, 7.5)];
        assert_eq!(line(&met, "single requests, steady"), Some(true));
        assert_eq!(line(&met, "batched"), Some(true));
        let over = [cost("steady", 1024, 9.51), cost("batched", 1024, 7.51)];
        assert_eq!(line(&over, "single requests, steady"), Some(false));
        assert_eq!(line(&over, "batched"), Some(false));
        // Another size or scenario is not the target's: a trickle is shown, not judged.
        let elsewhere = [cost("steady", 100, 1.0), cost("single", 1024, 1.0)];
        assert_eq!(line(&elsewhere, "single requests, steady"), None);
        let both = [cost("steady", 1024, 8.3), cost("single", 1024, 9.71)];
        let targets = change_stream_targets(None, &both, None, None);
        assert!(
            targets
                .iter()
                .any(|t| t.measured == "$8.30 ($9.71 at a trickle)" && t.pass == Some(true)),
            "{targets:?}"
        );
    }

    #[test]
    fn throughput_targets_read_the_32_worker_run() {
        let report = |runs| ThroughputReport {
            versus: None,
            method: String::new(),
            runs,
        };
        let judge = |r: &ThroughputReport| {
            let t = change_stream_targets(None, &[], None, Some(r));
            (
                verdict(&t, "lost claims per job"),
                verdict(&t, "lifecycles per second"),
            )
        };
        let at_limits = report(vec![run(1, 5_000, 1.0), run(32, 1_000, 108.6)]);
        assert_eq!(judge(&at_limits), (Some(true), Some(true)));
        let below = report(vec![run(32, 1_001, 108.5), run(8, 0, 500.0)]);
        assert_eq!(judge(&below), (Some(false), Some(false)));
        assert_eq!(judge(&report(vec![run(8, 0, 500.0)])), (None, None));
    }

    #[test]
    fn throughput_beside_a_baseline_is_judged_against_it_not_the_issues_figure() {
        let versus = |this_build: f64, before: f64| ThroughputReport {
            versus: Some(crate::versus::Versus {
                method: String::new(),
                baseline: "68c502c".into(),
                workers: 32,
                jobs: 1_000,
                runs: Vec::new(),
                this_build,
                before,
            }),
            method: String::new(),
            runs: vec![run(32, 500, 200.0)],
        };
        let line = |r: &ThroughputReport| {
            change_stream_targets(None, &[], None, Some(r))
                .into_iter()
                .find(|t| t.name.starts_with("lifecycles per second"))
        };
        // Above the issue's 108.6 but below the old build's figure of this run: a miss.
        let slower = line(&versus(150.0, 150.1)).map(|t| (t.pass, t.measured, t.name));
        assert_eq!(
            slower.as_ref().map(|(p, m, _)| (*p, m.as_str())),
            Some((Some(false), "150.0 vs 150.1"))
        );
        assert!(slower.is_some_and(|(_, _, n)| n.contains("68c502c, same run")));
        // Below the issue's figure but no slower than the old build here: met.
        assert_eq!(line(&versus(90.0, 90.0)).and_then(|t| t.pass), Some(true));
    }

    #[test]
    fn unmeasured_targets_say_so_instead_of_passing() {
        for t in change_stream_targets(None, &[], None, None) {
            assert_eq!(t.pass, None, "{}", t.name);
            assert_eq!(t.measured, "not measured", "{}", t.name);
        }
    }
}
