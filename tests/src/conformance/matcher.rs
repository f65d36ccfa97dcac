//! Body-assertion matchers (the values of `"$.path": matcher`).
//!
//! Semantics follow upstream `lib/assertions.go`, except where the DSL reference is
//! explicit and differs: `"any"` requires a present non-null value, `"exists"` accepts
//! a present `null`, and `~N` uses the documented floor (tolerance
//! `max(N * 50%, 100)`). `actual` is `None` when the path does not resolve; Go's `nil`
//! corresponds to "`None` or `null`".

use super::gofmt::go_v;
use super::patterns::{approx_re, datetime_re, length_re, matches, range_re, uuid_re, uuidv7_re};
use regex::Regex;
use serde_json::Value;

/// Outcome of one matcher: `Err` carries a human-readable reason.
pub type MatchResult = Result<(), String>;

/// Default tolerance of `~N` and `timing_ms.approximate`, in percent.
pub const TOLERANCE_PCT: f64 = 50.0;
/// Minimum absolute tolerance of `~N` and `timing_ms.approximate`.
pub const MIN_TOLERANCE: f64 = 100.0;

/// `|actual - expected| <= max(expected * 50%, 100)`.
pub fn approx_ok(expected: f64, actual: f64) -> bool {
    let tolerance = (expected.abs() * TOLERANCE_PCT / 100.0).max(MIN_TOLERANCE);
    (actual - expected).abs() <= tolerance
}

/// Go's `nil`: the path did not resolve, or resolved to JSON `null`.
pub fn is_nil(actual: Option<&Value>) -> bool {
    actual.is_none_or(Value::is_null)
}

/// Short description of an actual value for failure messages.
pub fn show(actual: Option<&Value>) -> String {
    let Some(v) = actual else {
        return "<missing>".to_string();
    };
    let text = v.to_string();
    if text.chars().count() > 300 {
        format!("{}...", text.chars().take(300).collect::<String>())
    } else {
        text
    }
}

fn number(actual: Option<&Value>) -> Option<f64> {
    actual.and_then(Value::as_f64)
}

fn array(actual: Option<&Value>) -> Option<&Vec<Value>> {
    actual.and_then(Value::as_array)
}

/// Applies `matcher` (any JSON value, see the reference) to `actual`.
pub fn match_value(matcher: &Value, actual: Option<&Value>) -> MatchResult {
    match matcher {
        Value::Null if is_nil(actual) => Ok(()),
        Value::Null => Err(format!("expected null, got {}", show(actual))),
        Value::String(s) => match_string(s, actual),
        Value::Number(n) => match_number(n.as_f64().unwrap_or(f64::NAN), actual),
        Value::Bool(b) => match actual {
            Some(Value::Bool(a)) if a == b => Ok(()),
            _ => Err(format!("expected boolean {b}, got {}", show(actual))),
        },
        Value::Array(items) => {
            let arr =
                array(actual).ok_or_else(|| format!("expected array, got {}", show(actual)))?;
            if arr.len() != items.len() {
                return Err(format!(
                    "expected array of length {}, got length {}",
                    items.len(),
                    arr.len()
                ));
            }
            for (i, (m, v)) in items.iter().zip(arr).enumerate() {
                match_value(m, Some(v)).map_err(|e| format!("[{i}]: {e}"))?;
            }
            Ok(())
        }
        Value::Object(ops) => super::operators::match_object(ops, actual),
    }
}

fn match_number(expected: f64, actual: Option<&Value>) -> MatchResult {
    let n = number(actual)
        .ok_or_else(|| format!("expected number {}, got {}", go_v_f(expected), show(actual)))?;
    let equal = if expected.fract() == 0.0 && n.fract() == 0.0 {
        expected == n
    } else {
        (expected - n).abs() <= 1e-9
    };
    if equal {
        Ok(())
    } else {
        Err(format!("expected {}, got {}", go_v_f(expected), go_v_f(n)))
    }
}

fn go_v_f(f: f64) -> String {
    super::gofmt::go_float(f)
}

fn need_string<'a>(actual: Option<&'a Value>, what: &str) -> Result<&'a str, String> {
    actual
        .and_then(Value::as_str)
        .ok_or_else(|| format!("expected {what}, got {}", show(actual)))
}

fn need_array<'a>(actual: Option<&'a Value>, what: &str) -> Result<&'a Vec<Value>, String> {
    array(actual).ok_or_else(|| format!("expected {what}, got {}", show(actual)))
}

fn check(ok: bool, msg: impl FnOnce() -> String) -> MatchResult {
    if ok {
        Ok(())
    } else {
        Err(msg())
    }
}

fn parse_count(text: &str, form: &str) -> Result<i64, String> {
    text.parse::<i64>()
        .map_err(|_| format!("invalid {form} value {text:?}"))
}

fn match_string(m: &str, actual: Option<&Value>) -> MatchResult {
    let len_of = |arr: &Vec<Value>| i64::try_from(arr.len()).unwrap_or(i64::MAX);
    match m {
        "any" => {
            return check(!is_nil(actual), || {
                format!("expected any non-null value, got {}", show(actual))
            })
        }
        "absent" => {
            return check(is_nil(actual), || {
                format!("expected field to be absent, got {}", show(actual))
            })
        }
        "exists" => {
            return check(actual.is_some(), || {
                "expected field to exist, but it is missing".to_string()
            })
        }
        "string:nonempty" | "string:non_empty" => {
            let s = need_string(actual, "non-empty string")?;
            return check(!s.is_empty(), || {
                "expected non-empty string, got empty string".to_string()
            });
        }
        "string:uuid" => {
            let s = need_string(actual, "UUID string")?;
            return check(matches(uuid_re(), s), || {
                format!("expected valid UUID, got {s:?}")
            });
        }
        "string:uuidv7" => {
            let s = need_string(actual, "UUIDv7 string")?;
            return check(matches(uuidv7_re(), s), || {
                format!("expected valid UUIDv7, got {s:?}")
            });
        }
        "string:datetime" => {
            let s = need_string(actual, "datetime string")?;
            return check(matches(datetime_re(), s), || {
                format!("expected RFC 3339 datetime, got {s:?}")
            });
        }
        "number:positive" => {
            let n = number(actual)
                .ok_or_else(|| format!("expected positive number, got {}", show(actual)))?;
            return check(n > 0.0, || {
                format!("expected positive number, got {}", go_v_f(n))
            });
        }
        "number:non_negative" => {
            let n = number(actual)
                .ok_or_else(|| format!("expected non-negative number, got {}", show(actual)))?;
            return check(n >= 0.0, || {
                format!("expected non-negative number, got {}", go_v_f(n))
            });
        }
        "array:nonempty" => {
            let a = need_array(actual, "non-empty array")?;
            return check(!a.is_empty(), || {
                "expected non-empty array, got empty array".to_string()
            });
        }
        "array:empty" => {
            let a = need_array(actual, "empty array")?;
            return check(a.is_empty(), || {
                format!("expected empty array, got {} elements", a.len())
            });
        }
        _ => {}
    }
    for prefix in ["array:min_length:", "array:min:"] {
        if let Some(n) = m.strip_prefix(prefix) {
            let n = parse_count(n, prefix)?;
            let a = need_array(actual, &format!("array with at least {n} elements"))?;
            return check(len_of(a) >= n, || {
                format!("expected at least {n} elements, got {}", a.len())
            });
        }
    }
    if let Some(n) = m.strip_prefix("array:length:") {
        let n = parse_count(n, "array:length")?;
        let a = need_array(actual, &format!("array of length {n}"))?;
        return check(len_of(a) == n, || {
            format!("expected array of length {n}, got length {}", a.len())
        });
    }
    if let Some(target) = m.strip_prefix("contains:") {
        let a = need_array(actual, "array for contains check")?;
        return check(a.iter().any(|item| go_v(item) == target), || {
            format!("expected array to contain {target:?}, got {}", show(actual))
        });
    }
    if let Some(target) = m.strip_prefix("not_contains:") {
        let a = need_array(actual, "array for not_contains check")?;
        return check(!a.iter().any(|item| go_v(item) == target), || {
            format!(
                "expected array not to contain {target:?}, got {}",
                show(actual)
            )
        });
    }
    if let Some(sub) = m.strip_prefix("string:contains:") {
        let s = need_string(actual, &format!("string containing {sub:?}"))?;
        return check(s.contains(sub), || {
            format!("expected string containing {sub:?}, got {s:?}")
        });
    }
    if let Some(caps) = range_re().and_then(|r| r.captures(m)) {
        let lo: f64 = caps[1].parse().unwrap_or(f64::NAN);
        let hi: f64 = caps[2].parse().unwrap_or(f64::NAN);
        let n = number(actual)
            .ok_or_else(|| format!("expected number in [{lo}, {hi}], got {}", show(actual)))?;
        return check(n >= lo && n <= hi, || {
            format!("expected number in [{lo}, {hi}], got {}", go_v_f(n))
        });
    }
    if let Some(caps) = length_re().and_then(|r| r.captures(m)) {
        let n = parse_count(&caps[1], "array:length")?;
        let a = need_array(actual, &format!("array of length {n}"))?;
        return check(len_of(a) == n, || {
            format!("expected array of length {n}, got length {}", a.len())
        });
    }
    if let Some(caps) = approx_re().and_then(|r| r.captures(m)) {
        let expected: f64 = caps[1].parse().unwrap_or(f64::NAN);
        let n = number(actual)
            .ok_or_else(|| format!("expected number ~{expected}, got {}", show(actual)))?;
        return check(approx_ok(expected, n), || {
            format!(
                "expected ~{expected} (tolerance max({TOLERANCE_PCT}%, {MIN_TOLERANCE})), got {}",
                go_v_f(n)
            )
        });
    }
    if let Some(pattern) = m
        .strip_prefix("string:pattern(")
        .and_then(|p| p.strip_suffix(')'))
    {
        let re =
            Regex::new(pattern).map_err(|e| format!("invalid regex pattern {pattern:?}: {e}"))?;
        let s = need_string(actual, &format!("string matching {pattern:?}"))?;
        return check(re.is_match(s), || {
            format!("expected string matching {pattern:?}, got {s:?}")
        });
    }
    let s = need_string(actual, &format!("string {m:?}"))?;
    check(s == m, || format!("expected {m:?}, got {s:?}"))
}
