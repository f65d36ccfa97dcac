//! Cross-step assertions of `ASSERT` steps.
//!
//! The reference shows their shape but not their exact semantics; implemented:
//!
//! - `exclusive_claim`: `job_id` (template -> id string) and `fetches` (templates that
//!   resolve to the `jobs` arrays of fetch responses). `exactly_one_has_job: true`
//!   requires exactly one fetch array to contain the job (an element whose `id`
//!   equals `job_id`, or the id itself); `exactly_one_empty: true` requires exactly
//!   one fetch array to be empty. A fetch entry that does not resolve to an array is a
//!   failure.
//! - `equality`: `{ "<JSONPath over {\"steps\": {<id>: {\"response\": {status, headers,
//!   body}}}}>": expected }`; the value at the path must equal `expected` (a template
//!   resolved to its JSON value) as JSON, numbers compared numerically.

use super::jsonpath;
use super::matcher::show;
use super::template::{has_template, resolve_value, StepContext};
use serde_json::Value;

/// Evaluates an `exclusive_claim` spec.
pub fn exclusive_claim(spec: &Value, ctx: &StepContext) -> Vec<String> {
    let Some(map) = spec.as_object() else {
        return vec![format!("exclusive_claim: expected an object, got {spec}")];
    };
    let mut failures = Vec::new();
    let job_id = match map.get("job_id").map(|v| resolve_value(v, ctx)) {
        Some(Value::String(id)) if !has_template(&id) => Some(id),
        Some(other) => {
            failures.push(format!(
                "exclusive_claim: job_id did not resolve to an id: {other}"
            ));
            None
        }
        None => None,
    };
    let mut fetches = Vec::new();
    match map.get("fetches").and_then(Value::as_array) {
        Some(entries) => {
            for (i, entry) in entries.iter().enumerate() {
                match resolve_value(entry, ctx) {
                    Value::Array(items) => fetches.push(items),
                    other => failures.push(format!(
                        "exclusive_claim: fetches[{i}] did not resolve to a JSON array: {}",
                        show(Some(&other))
                    )),
                }
            }
        }
        None => failures.push("exclusive_claim: missing list `fetches`".to_string()),
    }
    if !failures.is_empty() {
        return failures;
    }
    for (key, flag) in map {
        let wanted = flag.as_bool() == Some(true);
        match key.as_str() {
            "job_id" | "fetches" => {}
            "exactly_one_has_job" if wanted => {
                let Some(id) = &job_id else {
                    failures.push("exclusive_claim: exactly_one_has_job needs job_id".to_string());
                    continue;
                };
                let holders = fetches
                    .iter()
                    .filter(|items| items.iter().any(|j| is_job(j, id)))
                    .count();
                if holders != 1 {
                    failures.push(format!(
                        "exclusive_claim: expected exactly one fetch to receive job {id}, {holders} did"
                    ));
                }
            }
            "exactly_one_empty" if wanted => {
                let empties = fetches.iter().filter(|items| items.is_empty()).count();
                if empties != 1 {
                    failures.push(format!(
                        "exclusive_claim: expected exactly one empty fetch, got {empties} (sizes {:?})",
                        fetches.iter().map(Vec::len).collect::<Vec<_>>()
                    ));
                }
            }
            "exactly_one_has_job" | "exactly_one_empty" => {}
            other => failures.push(format!("exclusive_claim: unsupported key {other:?}")),
        }
    }
    failures
}

fn is_job(item: &Value, id: &str) -> bool {
    match item {
        Value::String(s) => s == id,
        other => other.get("id").and_then(Value::as_str) == Some(id),
    }
}

/// Evaluates an `equality` spec.
pub fn equality(spec: &Value, ctx: &StepContext) -> Vec<String> {
    let Some(map) = spec.as_object() else {
        return vec![format!("equality: expected an object, got {spec}")];
    };
    let root = ctx.as_json();
    let mut failures = Vec::new();
    for (path, expected) in map {
        let actual = jsonpath::resolve(path, Some(&root));
        let expected = resolve_value(expected, ctx);
        let matches = actual.as_ref().is_some_and(|a| json_eq(a, &expected));
        if !matches {
            failures.push(format!(
                "equality {path}: expected {}, got {}",
                show(Some(&expected)),
                show(actual.as_ref())
            ));
        }
    }
    failures
}

/// Structural JSON equality; numbers compare by value (`1 == 1.0`), object key
/// order is irrelevant.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}
