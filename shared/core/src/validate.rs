//! Size and shape limits from the JSON wire format's recommendations.

use serde_json::Value;

use crate::error::{ErrorCode, OjsError};

/// Largest request body read for one envelope, in bytes of JSON after any
/// `Content-Encoding` is undone (ojs-payload-limits.md §4.1: at least 1 MiB). `args` has
/// no limit of its own below it (§4.2). The store bounds the request it keeps in the
/// job's item more tightly for now (`ojs_store::MAX_STORED_REQUEST_BYTES`).
pub const MAX_ENVELOPE_BYTES: usize = 1024 * 1024;
/// Largest accepted `meta`, in bytes of compact JSON (ojs-payload-limits.md §4.3: 64 KB).
pub const MAX_META_BYTES: usize = 64 * 1024;
/// Largest accepted unknown-field total, in bytes of compact JSON (keeps a job item well
/// under DynamoDB's 400 KB item limit).
pub const MAX_EXTENSION_BYTES: usize = 128 * 1024;
/// Longest execution timeout (`timeout_ms`) a job may ask for: 7 days.
pub const MAX_TIMEOUT_MS: u64 = 7 * 24 * 3_600_000;
/// Longest lease (`visibility_timeout_ms`) a job, a FETCH or a heartbeat may ask for: 12 h.
pub const MAX_VISIBILITY_MS: u64 = 12 * 3_600_000;
/// Longest retry interval (`initial_interval`, `max_interval`): 30 days.
pub const MAX_RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);
/// Longest unique `period`: 366 days.
pub const MAX_UNIQUE_PERIOD: std::time::Duration = std::time::Duration::from_secs(366 * 86_400);
/// Largest `offset` a list accepts: beyond it a page is empty anyway, and bounded
/// arithmetic needs a bound.
pub const MAX_LIST_OFFSET: usize = 1_000_000;
/// Deepest accepted nesting inside `args` (an element of `args` is at depth 1).
pub const MAX_ARGS_DEPTH: usize = 10;
/// Most distinct queues one FETCH may name. An empty FETCH visits every queue it names,
/// each costing a due-timer query plus a ready query per shard (up to about 5 DynamoDB
/// calls), so the cap bounds one request's fan-out to about 125 calls; workers with more
/// queues split them over several FETCHes.
pub const MAX_FETCH_QUEUES: usize = 25;

/// Compact JSON size of `v`.
pub fn json_size(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

/// Nesting depth of a value: scalars are 1, containers 1 + their deepest child.
pub fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 1,
    }
}

/// Refuses a field over `max` bytes with `envelope_too_large`.
pub fn limit_size(v: &Value, max: usize, path: &str) -> Result<(), OjsError> {
    let size = json_size(v);
    if size > max {
        return Err(OjsError::new(
            ErrorCode::EnvelopeTooLarge,
            format!("{path} is {size} bytes; the limit is {max}"),
        )
        .with_path(path));
    }
    Ok(())
}

/// Largest integer a JSON number may carry exactly everywhere (2^53 - 1): beyond it a
/// JavaScript reader loses digits, so the JSON format says larger integers must be sent as
/// strings.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Refuses an integer beyond +-[`MAX_SAFE_INTEGER`] anywhere in `v` (whose path is `path`)
/// with `invalid_request`, naming where it is. Numbers with a fraction or an exponent are
/// floats and pass.
pub fn check_safe_integers(v: &Value, path: &str) -> Result<(), OjsError> {
    match unsafe_integer(v) {
        None => Ok(()),
        Some((n, mut steps)) => {
            steps.reverse();
            let at = format!("{path}{}", steps.concat());
            Err(OjsError::invalid_request(format!(
                "{at} is the integer {n}, beyond 2^53-1: the JSON format asks for such \
                 integers as strings (\"{n}\")"
            ))
            .with_path(&at))
        }
    }
}

/// The first unsafe integer in `v` and its path's steps, innermost first (built only when
/// one is found: `args` may hold a megabyte of numbers).
fn unsafe_integer(v: &Value) -> Option<(serde_json::Number, Vec<String>)> {
    match v {
        Value::Number(n) => {
            let beyond = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u > MAX_SAFE_INTEGER,
                (None, Some(i)) => i.unsigned_abs() > MAX_SAFE_INTEGER,
                (None, None) => false,
            };
            beyond.then(|| (n.clone(), Vec::new()))
        }
        Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| {
            unsafe_integer(x).map(|(n, mut steps)| {
                steps.push(format!("[{i}]"));
                (n, steps)
            })
        }),
        Value::Object(o) => o.iter().find_map(|(k, x)| {
            unsafe_integer(x).map(|(n, mut steps)| {
                let plain =
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                steps.push(if plain {
                    format!(".{k}")
                } else {
                    format!("[{}]", Value::String(k.clone()))
                });
                (n, steps)
            })
        }),
        _ => None,
    }
}

/// Checks `args`: an array, nested at most [`MAX_ARGS_DEPTH`] levels. Its size is bounded
/// by the envelope's alone.
pub fn check_args(args: &Value) -> Result<(), OjsError> {
    let Value::Array(items) = args else {
        return Err(OjsError::invalid_request("args must be a JSON array").with_path("$.args"));
    };
    let deepest = items.iter().map(depth).max().unwrap_or(0);
    if deepest > MAX_ARGS_DEPTH {
        return Err(OjsError::invalid_request(format!(
            "args nest {deepest} levels deep; the limit is {MAX_ARGS_DEPTH}"
        ))
        .with_path("$.args"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_beyond_2_pow_53_are_refused_where_they_are() {
        let max = MAX_SAFE_INTEGER;
        for ok in [
            json!([max, -(max as i64), 1.5e300, "9007199254740993", {"a": [max]}]),
            json!({}),
        ] {
            assert!(check_safe_integers(&ok, "$.args").is_ok(), "{ok}");
        }
        for (bad, at) in [
            (json!([max + 1]), "$.args[0]"),
            (json!([1, {"a": [2, -(max as i64) - 1]}]), "$.args[1].a[1]"),
            (json!([{"user id": u64::MAX}]), "$.args[0][\"user id\"]"),
        ] {
            let Err(err) = check_safe_integers(&bad, "$.args") else {
                panic!("{bad} passed");
            };
            assert_eq!(err.code, ErrorCode::InvalidRequest);
            assert!(err.message.starts_with(at), "{}", err.message);
            assert_eq!(err.details["validation_errors"][0]["path"], at);
        }
    }

    #[test]
    fn depth_counts_levels() {
        assert_eq!(depth(&json!(1)), 1);
        assert_eq!(depth(&json!([1, [2, [3]]])), 4);
        assert_eq!(depth(&json!({"a": {"b": []}})), 3);
    }

    #[test]
    fn args_rules() {
        assert!(check_args(&json!([])).is_ok());
        assert!(check_args(&json!({"a": 1})).is_err());
        let mut deep = json!(1);
        for _ in 0..10 {
            deep = json!([deep]);
        }
        assert!(check_args(&json!([deep.clone()])).is_err());
        assert!(check_args(&json!([deep[0].clone()])).is_ok());
        // No size limit of its own: one argument as large as the envelope passes.
        let big = "x".repeat(MAX_ENVELOPE_BYTES);
        assert!(check_args(&json!([big])).is_ok());
    }
}
