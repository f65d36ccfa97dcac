//! Runs every case of the official OJS conformance release (levels 0-4 and the extension
//! suites, 267 cases) against the real routers over HTTP, each case on its own server and
//! fresh DynamoDB table (the suite assumes a clean `default` queue). Prints `N passed, N
//! failed` per suite and fails if any case fails that `shared/http/src/conformance.rs`
//! does not list (`CONFORMANCE_EXCEPTIONS`: cases that contradict the specification or
//! that no server can pass as written; `NOT_IMPLEMENTED`: extension cases of what this
//! server does not do yet, each naming what is missing), and if a listed case passes, so
//! the manifest can neither overclaim nor carry a stale list.
//!
//! The suite folder is `$OJS_CONFORMANCE_DIR`, else `../shared/ojs-conformance/suites`
//! beside the repository; when absent the test says so and passes.
//! `OJS_CONFORMANCE_SUITE=<folder prefix>` runs only some suites (then listed cases that
//! did not run are not checked). `OJS_CONFORMANCE_PART=long` runs only the cases that
//! declare [`LONG_CASE_MS`] or more of sleeping (the cron cases, which wait on the
//! clock's minutes), `short` all the others: `make test` runs the short ones alone and
//! the long ones beside the SDK suites, as they sleep almost all of their 65 and 130 s.
//! A listed case that passes fails any run that ran it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use futures::stream::{self, StreamExt};
use ojs_tests::conformance::{load_cases, run_case};
use ojs_tests::TestApp;

/// Cases run at once; most time is spent in the suite's own WAIT steps.
const PARALLEL: usize = 8;

/// Declared sleep (delays and WAIT durations) from which a case belongs to the `long`
/// part: a minute, what a cron case must wait to see its schedule fire.
const LONG_CASE_MS: u64 = 60_000;

/// Which cases a run takes, from `OJS_CONFORMANCE_PART`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Part {
    All,
    Long,
    Short,
}

impl Part {
    fn from_env() -> anyhow::Result<Part> {
        match std::env::var("OJS_CONFORMANCE_PART").as_deref() {
            Err(_) | Ok("") | Ok("all") => Ok(Part::All),
            Ok("long") => Ok(Part::Long),
            Ok("short") => Ok(Part::Short),
            Ok(other) => anyhow::bail!("OJS_CONFORMANCE_PART={other}: expected long, short or all"),
        }
    }

    fn takes(self, declared_sleep_ms: u64) -> bool {
        match self {
            Part::All => true,
            Part::Long => declared_sleep_ms >= LONG_CASE_MS,
            Part::Short => declared_sleep_ms < LONG_CASE_MS,
        }
    }
}

fn suite_dir() -> PathBuf {
    std::env::var_os("OJS_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/ojs-conformance/suites")
        })
}

/// Writes straight to stderr: libtest captures `println!` of passing tests, and these
/// per-level counts belong in every CI log.
macro_rules! report {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// A case's suite, test id, key (its path below the suites' folder), label, and its
/// failures (or why it could not run).
type CaseResult = (String, String, String, String, Result<Vec<String>, String>);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_suite() -> anyhow::Result<()> {
    let dir = suite_dir();
    if !dir.is_dir() {
        report!(
            "conformance: suite folder {} not found; skipping (set OJS_CONFORMANCE_DIR)",
            dir.display()
        );
        return Ok(());
    }
    let only = std::env::var("OJS_CONFORMANCE_SUITE").unwrap_or_default();
    let part = Part::from_env()?;
    let release = load_cases(&dir)?;
    // Checked against the whole release, whatever part of it runs.
    for e in ojs_http::CONFORMANCE_EXCEPTIONS {
        anyhow::ensure!(
            release.iter().any(|c| c.test_id == e.test_id),
            "listed exception {} is not a case of the suite",
            e.test_id
        );
    }
    for gap in ojs_http::conformance::NOT_IMPLEMENTED {
        anyhow::ensure!(
            release.iter().any(|c| c.key() == gap.case),
            "listed case {} is not a case of the release",
            gap.case
        );
    }
    let mut cases: Vec<_> = release
        .into_iter()
        .filter(|c| c.suite.starts_with(&only) && part.takes(c.declared_sleep_ms()))
        .collect();
    report!(
        "conformance: {} cases ({part:?} part{})",
        cases.len(),
        if only.is_empty() {
            String::new()
        } else {
            format!(", suites {only}*")
        }
    );
    // The cases that sleep longest start first: one cron case alone sleeps 130 s, and
    // started last among 8 at a time it would add its whole length to the suite's.
    cases.sort_by_key(|c| std::cmp::Reverse(c.declared_sleep_ms()));
    let cases = Arc::new(cases);
    let results: Vec<CaseResult> = stream::iter(0..cases.len())
        .map(|i| {
            let cases = Arc::clone(&cases);
            async move {
                let case = &cases[i];
                let label = format!("{} ({})", case.test_id, case.path.display());
                // As `make dev` serves (OJS_PUSH_ALLOW_PRIVATE=on): the webhook cases
                // register https://example.com/..., which cannot resolve here.
                let config = ojs_http::HttpConfig {
                    push_allow_private: true,
                    ..ojs_http::HttpConfig::default()
                };
                let outcome = match TestApp::spawn_with_sweeper_and(config).await {
                    Err(e) => Err(format!("could not start the server: {e:#}")),
                    Ok(app) => {
                        let report = run_case(&app.client, &app.base_url, case).await;
                        app.teardown().await;
                        if report.passed {
                            Ok(Vec::new())
                        } else {
                            let answers = report.trace.iter().map(|t| format!("  answered {t}"));
                            Ok(report.failures.into_iter().chain(answers).collect())
                        }
                    }
                };
                (
                    case.suite.clone(),
                    case.test_id.clone(),
                    case.key(),
                    label,
                    outcome,
                )
            }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;

    let mut per_suite: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut listed_passing = Vec::new();
    let claimed = ojs_http::CONFORMANCE_LEVEL;
    let mut sorted = results;
    sorted.sort_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
    for (suite, test_id, key, label, outcome) in &sorted {
        let entry = per_suite.entry(suite.clone()).or_default();
        let listed = if ojs_http::conformance::is_exception(test_id) {
            Some("listed exception")
        } else if ojs_http::conformance::is_not_implemented(key) {
            Some("not implemented")
        } else {
            None
        };
        let failures = match outcome {
            Ok(f) if f.is_empty() => {
                entry.0 += 1;
                if listed.is_some() {
                    listed_passing.push(key.clone());
                }
                continue;
            }
            Ok(failures) => failures.clone(),
            Err(e) => vec![e.clone()],
        };
        entry.1 += 1;
        let tag = listed.map(|l| format!(" ({l})")).unwrap_or_default();
        report!("FAIL {label}{tag}");
        // Full detail where a failure counts; the first line elsewhere.
        let shown = if listed.is_none() { failures.len() } else { 1 };
        for f in failures.iter().take(shown) {
            report!("    {f}");
        }
        if listed.is_none() {
            unexpected.push(key.clone());
        }
    }
    if let Some(strict) = ojs_tests::strict_proxy::process_report() {
        report!("strict DynamoDB layer: {}", strict.summary());
    }
    report!(
        "conformance (manifest claims level {claimed}; {} listed exceptions, {} extension cases not implemented):",
        ojs_http::CONFORMANCE_EXCEPTIONS.len(),
        ojs_http::conformance::NOT_IMPLEMENTED.len()
    );
    let (mut pass, mut fail) = (0, 0);
    for (suite, (p, f)) in &per_suite {
        report!("{suite}: {p} passed, {f} failed");
        pass += p;
        fail += f;
    }
    report!("all suites: {pass} passed, {fail} failed");
    anyhow::ensure!(
        unexpected.is_empty(),
        "{} case(s) fail that shared/http/src/conformance.rs does not list: {unexpected:?}",
        unexpected.len()
    );
    // Only cases that ran and passed are here, whatever part of the release ran.
    anyhow::ensure!(
        listed_passing.is_empty(),
        "listed cases now pass, so the lists in shared/http/src/conformance.rs are \
         wrong: {listed_passing:?}"
    );
    Ok(())
}

#[test]
fn the_two_parts_take_every_case_once() {
    for ms in [0, 1, LONG_CASE_MS - 1, LONG_CASE_MS, 130_000] {
        assert!(Part::All.takes(ms));
        assert_ne!(Part::Long.takes(ms), Part::Short.takes(ms), "{ms} ms");
    }
    assert!(Part::Long.takes(65_000) && !Part::Long.takes(6_000));
}
