//! Executes a [`Case`] against a running server.
//!
//! Flow (upstream Go runner, plus the suite's `parallel_with`): setup steps (a failure
//! aborts the case), then the test steps; the case fails at the first step with a
//! failed assertion or request, and no further test steps run; teardown steps always
//! run and their failures are ignored. A step with `parallel_with` is executed
//! concurrently with the named steps (in both directions, transitively); their
//! assertions are evaluated afterwards in file order. `delay_ms` sleeps before a step;
//! `WAIT` sleeps `duration_ms` (or `delay_ms` if that is 0); `ASSERT` evaluates
//! cross-step assertions without a request.
//!
//! Extension-case constructs: `expect` is checked like `assertions` (both when a step
//! has both); `capture` / `captures` save JSONPath values of the response body after
//! the step (a path that resolves nothing fails it) for `${name}` / `{{name}}` in later
//! steps' paths, headers, bodies, `assertions` and `expect`; a reference to a name no
//! earlier step captured fails the step before its request is sent. `repeat: N` sends
//! the request N times and checks every response (captures come from the last).
//! `request` / `store` (SDK-style steps) are not translated into HTTP requests: such a
//! step fails as an unsupported construct without sending anything.

use super::assertions::{evaluate, Response};
use super::case::{Case, Step};
use super::template::{
    resolve_captures_str, resolve_captures_tree, resolve_str, resolve_tree, StepContext,
};
use super::{expect, jsonpath};
use futures::future::join_all;
use serde_json::Map;
use std::time::{Duration, Instant};

/// Media type sent when a step has a body and no `Content-Type` header.
pub const OJS_MEDIA_TYPE: &str = "application/openjobspec+json";
/// Per-request timeout (the Go runner's default).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Characters of each step's answer a failed case's report shows.
const TRACE_WIDTH: usize = 400;

/// Result of one case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaseReport {
    /// True if every setup and test step passed.
    pub passed: bool,
    /// Human-readable failures: `<step id>: <assertion>: expected ... got ...`.
    pub failures: Vec<String>,
    /// For a failed case, every step's answer (`<step id>: <status> <body, cut>`), so a
    /// failure seen once in CI can be read without running it again.
    pub trace: Vec<String>,
}

/// Runs one case against `base_url` (e.g. `http://127.0.0.1:43121`, no trailing slash).
pub async fn run_case(client: &reqwest::Client, base_url: &str, case: &Case) -> CaseReport {
    let base_url = base_url.trim_end_matches('/');
    let mut ctx = StepContext::default();
    let mut failures = Vec::new();
    if run_steps(
        client,
        base_url,
        &case.setup,
        &mut ctx,
        "setup ",
        &mut failures,
    )
    .await
    {
        run_steps(client, base_url, &case.steps, &mut ctx, "", &mut failures).await;
    }
    let mut ignored = Vec::new();
    run_steps(
        client,
        base_url,
        &case.teardown,
        &mut ctx,
        "teardown ",
        &mut ignored,
    )
    .await;
    let trace = if failures.is_empty() {
        Vec::new()
    } else {
        let order: Vec<&str> = case
            .setup
            .iter()
            .chain(&case.steps)
            .map(|s| s.id.as_str())
            .collect();
        ctx.trace(&order, TRACE_WIDTH)
    };
    CaseReport {
        passed: failures.is_empty(),
        failures,
        trace,
    }
}

/// Runs `steps` in order; returns false (after recording the failures) at the first
/// step group that fails.
async fn run_steps(
    client: &reqwest::Client,
    base_url: &str,
    steps: &[Step],
    ctx: &mut StepContext,
    phase: &str,
    failures: &mut Vec<String>,
) -> bool {
    let mut done = vec![false; steps.len()];
    for start in 0..steps.len() {
        if done.get(start).copied().unwrap_or(true) {
            continue;
        }
        let group = parallel_group(steps, start, &done);
        for &i in &group {
            if let Some(d) = done.get_mut(i) {
                *d = true;
            }
        }
        let members: Vec<Step> = group
            .iter()
            .filter_map(|&i| steps.get(i))
            .map(|s| prepare(s, ctx))
            .collect();
        let outcomes = {
            let shared: &StepContext = ctx;
            join_all(members.iter().map(|s| execute(client, base_url, s, shared))).await
        };
        let mut ok = true;
        for (step, outcome) in members.iter().zip(outcomes) {
            for f in finish(step, outcome, ctx) {
                ok = false;
                failures.push(format!("{phase}{}: {f}", step.id));
            }
        }
        if !ok {
            return false;
        }
    }
    true
}

/// Indexes (sorted) of the not-yet-run steps linked to `start` by `parallel_with`.
fn parallel_group(steps: &[Step], start: usize, done: &[bool]) -> Vec<usize> {
    let mut group = vec![start];
    let mut queue = vec![start];
    while let Some(i) = queue.pop() {
        let Some(member) = steps.get(i) else { continue };
        for (j, other) in steps.iter().enumerate() {
            let linked = member.parallel_with.contains(&other.id)
                || other.parallel_with.contains(&member.id);
            if linked && !group.contains(&j) && !done.get(j).copied().unwrap_or(true) {
                group.push(j);
                queue.push(j);
            }
        }
    }
    group.sort_unstable();
    group
}

/// The step with its `${name}` / `{{name}}` capture references substituted (path,
/// headers, body, `assertions`, `expect`); references to names never captured, and
/// unsupported constructs, are added to `unsupported` so the step fails with them.
fn prepare(step: &Step, ctx: &StepContext) -> Step {
    let mut step = step.clone();
    let mut missing = Vec::new();
    step.path = step
        .path
        .as_deref()
        .map(|p| resolve_captures_str(p, ctx, &mut missing));
    for (_, value) in &mut step.headers {
        *value = resolve_captures_str(value, ctx, &mut missing);
    }
    step.raw_body = step
        .raw_body
        .as_deref()
        .map(|b| resolve_captures_str(b, ctx, &mut missing));
    for field in [&mut step.body, &mut step.assertions, &mut step.expect] {
        if let Some(v) = field.as_ref() {
            *field = Some(resolve_captures_tree(v, ctx, &mut missing));
        }
    }
    for reference in missing {
        step.unsupported.push(format!(
            "{reference} refers to a value no earlier step captured"
        ));
    }
    step
}

enum Outcome {
    /// One result per request sent (`repeat` of them, fewer if one failed to send).
    Http(Vec<Result<Box<Response>, String>>),
    NoRequest,
    /// Not run: unsupported constructs or unresolved capture references.
    NotRun(Vec<String>),
}

async fn sleep_ms(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

async fn execute(
    client: &reqwest::Client,
    base_url: &str,
    step: &Step,
    ctx: &StepContext,
) -> Outcome {
    if !step.unsupported.is_empty() {
        return Outcome::NotRun(step.unsupported.clone());
    }
    let action = step.action.trim().to_ascii_uppercase();
    if action == "WAIT" {
        let ms = if step.duration_ms > 0 {
            step.duration_ms
        } else {
            step.delay_ms
        };
        sleep_ms(ms).await;
        return Outcome::NoRequest;
    }
    sleep_ms(step.delay_ms).await;
    if action == "ASSERT" {
        return Outcome::NoRequest;
    }
    let mut results = Vec::new();
    for _ in 0..step.repeat.max(1) {
        let result = send(client, base_url, step, &action, ctx)
            .await
            .map(Box::new);
        let failed = result.is_err();
        results.push(result);
        if failed {
            break;
        }
    }
    Outcome::Http(results)
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

async fn send(
    client: &reqwest::Client,
    base_url: &str,
    step: &Step,
    action: &str,
    ctx: &StepContext,
) -> Result<Response, String> {
    if action.is_empty() {
        return Err("step has no action".to_string());
    }
    let method = reqwest::Method::from_bytes(action.as_bytes())
        .map_err(|e| format!("invalid action {action:?}: {e}"))?;
    let path = step
        .path
        .as_deref()
        .map(|p| resolve_str(p, ctx))
        .unwrap_or_default();
    let mut request = client
        .request(method, format!("{base_url}{path}"))
        .timeout(REQUEST_TIMEOUT);
    let mut has_content_type = false;
    for (name, value) in &step.headers {
        has_content_type |= name.eq_ignore_ascii_case("content-type");
        request = request.header(name.as_str(), resolve_str(value, ctx));
    }
    let body = match (&step.raw_body, &step.body) {
        (Some(raw), _) => Some(raw.clone()),
        (None, Some(json)) => Some(resolve_tree(json, ctx).to_string()),
        (None, None) => None,
    };
    if let Some(body) = body {
        if !has_content_type {
            request = request.header("Content-Type", OJS_MEDIA_TYPE);
        }
        request = request.body(body);
    }
    let started = Instant::now();
    let response = request.send().await.map_err(|e| error_chain(&e))?;
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("reading response body: {}", error_chain(&e)))?;
    Ok(Response {
        status,
        headers,
        raw: String::from_utf8_lossy(&bytes).into_owned(),
        parsed: serde_json::from_slice(&bytes).ok(),
        duration_ms,
    })
}

/// Evaluates a step's `assertions` and `expect` against `resp` (`None`: `ASSERT`).
fn check(step: &Step, resp: Option<&Response>, ctx: &StepContext) -> Vec<String> {
    let mut failures = match &step.assertions {
        Some(a) => evaluate(a, resp, ctx),
        None => Vec::new(),
    };
    if let Some(e) = &step.expect {
        match expect::to_assertions(e) {
            Ok(a) => failures.extend(
                evaluate(&a, resp, ctx)
                    .into_iter()
                    .map(|f| format!("expect {f}")),
            ),
            Err(why) => failures.push(why),
        }
    }
    failures
}

/// Saves the step's captures from `resp`; a capture whose path resolves nothing (or
/// `null`) is a failure.
fn capture(step: &Step, resp: &Response, ctx: &mut StepContext) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, path) in &step.captures {
        let json_path = expect::body_path(path);
        match jsonpath::resolve(&json_path, resp.parsed.as_ref()) {
            Some(v) if !v.is_null() => ctx.capture(name, v),
            other => failures.push(format!(
                "capture {name:?}: {path} resolved {} in the response body",
                if other.is_some() {
                    "to null"
                } else {
                    "nothing"
                }
            )),
        }
    }
    failures
}

/// Evaluates a step's checks, then records its result (and captures) for later steps.
fn finish(step: &Step, outcome: Outcome, ctx: &mut StepContext) -> Vec<String> {
    match outcome {
        Outcome::NotRun(why) => {
            ctx.record(&step.id, None, Map::new(), None);
            why
        }
        Outcome::Http(results) => {
            let total = results.len();
            let mut failures = Vec::new();
            let mut last = None;
            for (i, result) in results.into_iter().enumerate() {
                let prefix = if step.repeat > 1 {
                    format!("repeat {}/{}: ", i + 1, step.repeat)
                } else {
                    String::new()
                };
                match result {
                    Err(e) => {
                        failures.push(format!("{prefix}HTTP request failed: {e}"));
                        last = None;
                    }
                    Ok(resp) => {
                        failures.extend(
                            check(step, Some(&resp), ctx)
                                .into_iter()
                                .map(|f| format!("{prefix}{f}")),
                        );
                        last = Some(resp);
                    }
                }
            }
            if total == 0 {
                failures.push("no request was sent".to_string());
            }
            match last {
                Some(resp) => {
                    failures.extend(capture(step, &resp, ctx));
                    ctx.record(
                        &step.id,
                        Some(resp.status),
                        resp.headers_json(),
                        resp.parsed,
                    );
                }
                None => ctx.record(&step.id, None, Map::new(), None),
            }
            failures
        }
        Outcome::NoRequest if step.action.trim().eq_ignore_ascii_case("ASSERT") => {
            check(step, None, ctx)
        }
        // WAIT: assertions are not evaluated (reference).
        Outcome::NoRequest => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn step(v: Value) -> Step {
        Step::from_value(&v, 0)
    }

    #[test]
    fn parallel_groups_follow_links_both_ways() {
        let steps = vec![
            step(json!({"id": "a", "action": "POST"})),
            step(json!({"id": "b", "action": "POST", "parallel_with": "c"})),
            step(json!({"id": "c", "action": "POST"})),
            step(json!({"id": "d", "action": "POST", "parallel_with": ["b"]})),
        ];
        let done = vec![false; 4];
        assert_eq!(parallel_group(&steps, 0, &done), vec![0]);
        assert_eq!(parallel_group(&steps, 1, &done), vec![1, 2, 3]);
        assert_eq!(
            parallel_group(&steps, 2, &[false, true, false, false]),
            vec![2]
        );
    }

    #[test]
    fn run_case_future_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let client = reqwest::Client::new();
        let case = Case::from_value(
            std::path::Path::new("x.json"),
            &json!({"test_id": "T", "level": 0, "steps": []}),
        );
        if let Ok(case) = case {
            let fut = run_case(&client, "http://127.0.0.1:1", &case);
            assert_send(&fut);
        }
    }

    #[tokio::test]
    async fn connection_errors_fail_the_step_without_panicking() {
        let client = reqwest::Client::new();
        let case = Case::from_value(
            std::path::Path::new("x.json"),
            &json!({"test_id": "T", "level": 0, "steps": [
                {"id": "s1", "action": "GET", "path": "/ojs/manifest", "assertions": {"status": 200}},
                {"id": "s2", "action": "GET", "path": "/never", "assertions": {"status": 200}}
            ]}),
        );
        let Ok(case) = case else {
            panic!("case should parse")
        };
        // Port 9 (discard) on localhost is closed in test environments.
        let report = run_case(&client, "http://127.0.0.1:9", &case).await;
        assert!(!report.passed);
        assert_eq!(
            report.failures.len(),
            1,
            "stops at the first failed step: {:?}",
            report.failures
        );
        assert!(report.failures[0].starts_with("s1: HTTP request failed"));
    }
}
