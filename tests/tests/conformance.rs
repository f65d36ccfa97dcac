//! Runs the official OJS conformance suite (levels 0-4) against the real routers over
//! HTTP, each case on its own server and fresh DynamoDB table (the suite assumes a
//! clean `default` queue). Prints `N passed, N failed` per level and fails if any case
//! fails at a level the manifest claims, unless it is a listed exception
//! (`ojs_http::CONFORMANCE_EXCEPTIONS`), and fails if a listed exception passes, so the
//! manifest can neither overclaim nor carry a stale list.
//!
//! The suite folder is `$OJS_CONFORMANCE_DIR`, else `../shared/ojs-conformance/suites`
//! beside the repository; when absent the test says so and passes.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use futures::stream::{self, StreamExt};
use ojs_tests::conformance::{load_cases, run_case};
use ojs_tests::TestApp;

/// Cases run at once; most time is spent in the suite's own WAIT steps.
const PARALLEL: usize = 8;

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

/// A case's level, test id, label, and its failures (or why it could not run).
type CaseResult = (u8, String, String, Result<Vec<String>, String>);

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
    let max_level: u8 = std::env::var("OJS_CONFORMANCE_MAX_LEVEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let cases: Vec<_> = load_cases(&dir)?
        .into_iter()
        .filter(|c| c.level <= max_level)
        .collect();
    let cases = Arc::new(cases);
    let results: Vec<CaseResult> = stream::iter(0..cases.len())
        .map(|i| {
            let cases = Arc::clone(&cases);
            async move {
                let case = &cases[i];
                let label = format!("{} ({})", case.test_id, case.path.display());
                let outcome = match TestApp::spawn_with_sweeper().await {
                    Err(e) => Err(format!("could not start the server: {e:#}")),
                    Ok(app) => {
                        let report = run_case(&app.client, &app.base_url, case).await;
                        app.teardown().await;
                        if report.passed {
                            Ok(Vec::new())
                        } else {
                            Ok(report.failures)
                        }
                    }
                };
                (case.level, case.test_id.clone(), label, outcome)
            }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;

    let mut per_level: BTreeMap<u8, (usize, usize)> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut exceptions_passing = Vec::new();
    let claimed = ojs_http::CONFORMANCE_LEVEL;
    let mut sorted = results;
    sorted.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (level, test_id, label, outcome) in &sorted {
        let entry = per_level.entry(*level).or_default();
        let excepted = ojs_http::conformance::is_exception(test_id);
        let failures = match outcome {
            Ok(f) if f.is_empty() => {
                entry.0 += 1;
                if excepted {
                    exceptions_passing.push(label.clone());
                }
                continue;
            }
            Ok(failures) => failures.clone(),
            Err(e) => vec![e.clone()],
        };
        entry.1 += 1;
        let counts = *level <= claimed && !excepted;
        let tag = if excepted { " (listed exception)" } else { "" };
        report!("FAIL level {level} {label}{tag}");
        // Full detail where a failure counts; the first line elsewhere.
        let shown = if counts { failures.len() } else { 1 };
        for f in failures.iter().take(shown) {
            report!("    {f}");
        }
        if counts {
            unexpected.push(label.clone());
        }
    }
    if let Some(strict) = ojs_tests::strict_proxy::process_report() {
        report!("strict DynamoDB layer: {}", strict.summary());
    }
    report!(
        "conformance (manifest claims level {claimed}, {} listed exceptions):",
        ojs_http::CONFORMANCE_EXCEPTIONS.len()
    );
    for (level, (pass, fail)) in &per_level {
        report!("level-{level}: {pass} passed, {fail} failed");
    }
    anyhow::ensure!(
        unexpected.is_empty(),
        "{} case(s) fail at a level the manifest claims ({claimed}) and are not listed \
         exceptions: {unexpected:?}",
        unexpected.len()
    );
    // Only meaningful when the whole suite ran: a filtered run may not reach them.
    if max_level >= 4 {
        anyhow::ensure!(
            exceptions_passing.is_empty(),
            "listed exceptions now pass, so the list in shared/http/src/conformance.rs is \
             wrong: {exceptions_passing:?}"
        );
        let ran: Vec<&str> = sorted.iter().map(|r| r.1.as_str()).collect();
        for e in ojs_http::CONFORMANCE_EXCEPTIONS {
            anyhow::ensure!(
                ran.contains(&e.test_id),
                "listed exception {} is not a case of the suite",
                e.test_id
            );
        }
    }
    Ok(())
}
