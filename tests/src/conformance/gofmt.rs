//! Go `fmt`-compatible rendering of decoded JSON values.
//!
//! The upstream runner is written in Go: `contains:X`, `not_contains:X` and JSONPath
//! filters compare `fmt.Sprintf("%v", value)` of a value decoded by `encoding/json`
//! (numbers are `float64`, objects `map[string]any`), and templates format numbers
//! with `%d` / `%v`. These helpers reproduce that text so comparisons agree.

use serde_json::{Number, Value};

/// Renders `v` like Go's `fmt.Sprintf("%v", v)` for a value decoded by `encoding/json`:
/// `null` is `<nil>`, numbers use [`go_float`], arrays are `[a b]`, objects are
/// `map[k1:v1 k2:v2]` with sorted keys.
pub fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_v).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(map) => {
            let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = pairs
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", go_v(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Formats a float like Go's `%v` (`strconv.FormatFloat(f, 'g', -1, 64)`): shortest
/// round-trip digits, exponent form (`1e+06`, `1.5e-05`) when the decimal exponent is
/// below -4 or at least 6, plain decimal otherwise.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` yields the same shortest mantissa Go uses, e.g. "1.234567e6".
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return format!("{f}");
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return format!("{f}");
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        format!("{f}")
    }
}

/// Formats a number the way the Go runner substitutes it into a template: whole
/// numbers without decimals (`%d` of `int64`), others with Go's `%v`.
pub fn template_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    // Exact conversion range of i64: whole floats inside it print like integers.
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.2e18 {
        return (f as i64).to_string();
    }
    go_float(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_format_like_go_percent_v() {
        assert_eq!(go_float(42.0), "42");
        assert_eq!(go_float(3.25), "3.25");
        assert_eq!(go_float(-2.5), "-2.5");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1_000_000.0), "1e+06");
        assert_eq!(go_float(1_234_567.0), "1.234567e+06");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(1.5e-7), "1.5e-07");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(0.0), "0");
    }

    #[test]
    fn values_format_like_go_percent_v() {
        assert_eq!(go_v(&json!(null)), "<nil>");
        assert_eq!(go_v(&json!(true)), "true");
        assert_eq!(go_v(&json!(42)), "42");
        assert_eq!(go_v(&json!("a b")), "a b");
        assert_eq!(go_v(&json!([1, "two", [3, null]])), "[1 two [3 <nil>]]");
        assert_eq!(go_v(&json!({"b": 2, "a": "x"})), "map[a:x b:2]");
    }

    #[test]
    fn template_numbers_drop_decimals_only_for_whole_values() {
        assert_eq!(template_number(&Number::from(7)), "7");
        assert_eq!(
            template_number(&Number::from(u64::MAX)),
            u64::MAX.to_string()
        );
        let whole = Number::from_f64(3.0).map(|n| template_number(&n));
        assert_eq!(whole.as_deref(), Some("3"));
        let frac = Number::from_f64(2.75).map(|n| template_number(&n));
        assert_eq!(frac.as_deref(), Some("2.75"));
    }
}
