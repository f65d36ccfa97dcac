//! `ojs-bench [--quick] [--json PATH] [--only SECTIONS] [--no-build] [--prices PATH] [--cpu-baseline DIR [--cpu-baseline-label LABEL]]
//! [--cpu-baseline DIR [--cpu-baseline-label LABEL]]`
//!
//! Measures, against the local stack (DynamoDB Local, moto SQS): DynamoDB capacity per
//! request, cost per million jobs, throughput and latency, Lambda cold starts and CPU per
//! request; prints tables and writes JSON. See docs/performance.md.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use ojs_bench::{
    capacity, cold_start, cost, cpu, env, large, push, report, tenants, throughput, timer, versus,
};

const USAGE: &str = "usage: ojs-bench [--quick] [--json PATH] [--only capacity,cost,throughput,cold,cpu,push,timer,tenants,large] [--workers 1,8,32] [--no-build] [--prices PATH]

  --quick      smaller samples (about a minute); the full run takes several minutes
  --json PATH  also write the results as JSON to PATH
  --only LIST  run only these sections (cost needs capacity; cpu figures refine cost)
  --workers    the throughput section's concurrencies (default 1,8,32); each starts on a
               fresh DynamoDB Local when OJS_BENCH_FRESH_DYNAMODB names a command that
               restarts it (make bench sets it when it started DynamoDB Local itself)
  --no-build   do not run `cargo build --release` for the function and server binaries
  --prices     prices file (default: bench/prices.toml)
  --cpu-baseline DIR
               also measure the CPU of another build (DIR holds its release ojs-local and
               ojs-keys, e.g. an older commit's target/release), taking turns with this
               one, and its throughput at 32 workers beside this one's (both as servers);
               issue #17's CPU and throughput targets are then judged against it
  --cpu-baseline-label LABEL
               what that build is, for the report (default: DIR)";

struct Args {
    quick: bool,
    json: Option<PathBuf>,
    sections: Vec<String>,
    workers: Vec<usize>,
    build: bool,
    prices: PathBuf,
    cpu_baseline: Option<cpu::Baseline>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        quick: false,
        json: None,
        sections: [
            "capacity",
            "cost",
            "throughput",
            "cold",
            "cpu",
            "push",
            "timer",
            "tenants",
            "large",
        ]
        .map(String::from)
        .to_vec(),
        workers: vec![1, 8, 32],
        build: true,
        prices: cost::default_prices_path(),
        cpu_baseline: None,
    };
    let mut baseline_label = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--json" => args.json = Some(it.next().context("--json needs a path")?.into()),
            "--only" => {
                args.sections = it
                    .next()
                    .context("--only needs a list")?
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .collect()
            }
            "--workers" => {
                args.workers = it
                    .next()
                    .context("--workers needs a list")?
                    .split(',')
                    .map(|s| s.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .context("--workers takes counts such as 1,8,32")?;
                if args.workers.is_empty() || args.workers.contains(&0) {
                    bail!("--workers takes counts of at least 1");
                }
            }
            "--no-build" => args.build = false,
            "--prices" => args.prices = it.next().context("--prices needs a path")?.into(),
            "--cpu-baseline" => {
                let dir = PathBuf::from(it.next().context("--cpu-baseline needs a directory")?);
                for bin in ["ojs-local", "ojs-keys"] {
                    if !dir.join(bin).is_file() {
                        bail!("--cpu-baseline: {} has no {bin}", dir.display());
                    }
                }
                args.cpu_baseline = Some(cpu::Baseline {
                    label: dir.display().to_string(),
                    dir,
                });
            }
            "--cpu-baseline-label" => {
                baseline_label = Some(it.next().context("--cpu-baseline-label needs a label")?)
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    match (&mut args.cpu_baseline, baseline_label) {
        (Some(b), Some(label)) => b.label = label,
        (None, Some(_)) => bail!("--cpu-baseline-label needs --cpu-baseline"),
        _ => {}
    }
    Ok(args)
}

fn step(name: &str) -> Instant {
    eprintln!("bench: {name}...");
    Instant::now()
}

fn done(t: Instant) {
    eprintln!("bench:   done in {:.1} s", t.elapsed().as_secs_f64());
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    env::local_defaults();
    let on = |s: &str| args.sections.iter().any(|x| x == s);
    let prices = cost::Prices::load(&args.prices)?;
    let (reps, cpu_n, jobs, cold_runs) = if args.quick {
        (1, 200, 100, 3)
    } else {
        (3, 2000, 1000, 10)
    };
    let started = Instant::now();

    let functions = if on("cold") {
        cold_start::discover()?
    } else {
        Vec::new()
    };
    if args.build {
        let mut packages: Vec<String> = functions.iter().map(|f| f.package.clone()).collect();
        if on("cpu") {
            packages.push("ojs-local".into());
        }
        cold_start::build(&packages)?;
    }

    let capacity = if on("capacity") || on("cost") {
        let t = step("capacity per request (3 sizes)");
        let c = capacity::run(&capacity::SIZES, reps).await?;
        done(t);
        Some(c)
    } else {
        None
    };
    let cpu = if on("cpu") {
        let t = step("CPU per request (ojs-local process)");
        let c = cpu::run(
            cpu_n,
            capacity::TARGET_SIZE,
            capacity.as_ref(),
            args.cpu_baseline.as_ref(),
        )
        .await?;
        done(t);
        Some(c)
    } else {
        None
    };
    let throughput = if on("throughput") {
        let t = step(&format!(
            "throughput at {:?} workers, with raw ceilings",
            args.workers
        ));
        let mut r = throughput::run(&args.workers, jobs, capacity::TARGET_SIZE).await?;
        done(t);
        if let Some(b) = &args.cpu_baseline {
            let t = step(&format!(
                "throughput at 32 workers, this build and {}",
                b.label
            ));
            let rounds = if args.quick { 1 } else { 2 };
            r.versus = Some(versus::run(b, 32, jobs, capacity::TARGET_SIZE, rounds).await?);
            done(t);
        }
        Some(r)
    } else {
        None
    };
    let push = if on("push") {
        let t = step("a pushed job next to a polled one");
        let p = push::run(jobs / 10, capacity::TARGET_SIZE).await?;
        done(t);
        Some(p)
    } else {
        None
    };
    let timer = if on("timer") {
        let t = step("timer promotion lateness");
        let r = timer::run(if args.quick { 20 } else { 50 }).await?;
        done(t);
        Some(r)
    } else {
        None
    };
    let tenants = if on("tenants") {
        let t = step("tenant B beside tenant A's flood");
        let (flood, small) = if args.quick {
            (2_000, 50)
        } else {
            (20_000, 100)
        };
        let r = tenants::run(flood, small, 8).await?;
        done(t);
        Some(r)
    } else {
        None
    };
    let large = if on("large") {
        let t = step("large jobs (1 KiB, 300 KiB, 1 MB of args)");
        let r = large::run(if args.quick { 5 } else { 20 }).await?;
        done(t);
        Some(r)
    } else {
        None
    };
    let cold = if on("cold") {
        let t = step("cold starts");
        let c = cold_start::run(&functions, cold_runs).await?;
        done(t);
        c
    } else {
        Vec::new()
    };
    let costs = match &capacity {
        Some(c) if on("cost") => cost::scenarios(&prices, c, cpu.as_ref()),
        _ => Vec::new(),
    };
    let targets = report::targets(
        capacity.as_ref(),
        &costs,
        &cold,
        cpu.as_ref(),
        throughput.as_ref(),
        timer.as_ref(),
    );
    let report = report::Report {
        generated_at: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        mode: if args.quick { "quick" } else { "full" }.into(),
        machine: report::Machine::detect(),
        prices,
        capacity: capacity.filter(|_| on("capacity") || on("cost")),
        cost: costs,
        throughput,
        cold_start: cold,
        cpu,
        push,
        timer,
        tenants,
        large,
        targets,
    };
    println!("{}", report::render(&report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("bench: wrote {}", path.display());
    }
    eprintln!(
        "bench: finished in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
