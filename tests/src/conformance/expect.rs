//! The `expect` form of a step's checks, written by some extension cases instead of
//! `assertions` (ext-durable-execution, ext-federation, ext-ml-resources).
//!
//! It is converted to an `assertions` object and evaluated by the same code, so it is
//! checked exactly like `assertions`:
//! - `status`, `status_in` (and any other key) are kept as they are;
//! - `body` is an object of path -> matcher whose paths may be written without the
//!   leading `$.` (`"state"`, `"jobs[0].type"`): a bare path `p` means `$.p`;
//! - a dotted key `"body.<path>"` means the body entry `"$.<path>": value`.

use serde_json::{Map, Value};

/// A body path as JSONPath: `$...` stays, `[0].x` becomes `$[0].x`, `p` becomes `$.p`.
pub fn body_path(path: &str) -> String {
    if path.starts_with('$') {
        path.to_string()
    } else if path.starts_with('[') {
        format!("${path}")
    } else {
        format!("$.{path}")
    }
}

/// Converts an `expect` object to the equivalent `assertions` object.
pub fn to_assertions(expect: &Value) -> Result<Value, String> {
    let Some(map) = expect.as_object() else {
        return Err(format!("expect must be an object, got {expect}"));
    };
    let mut out = Map::new();
    let mut body = Map::new();
    for (key, value) in map {
        if key == "body" {
            let Some(entries) = value.as_object() else {
                return Err(format!(
                    "expect body: expected an object of path -> matcher, got {value}"
                ));
            };
            for (path, matcher) in entries {
                body.insert(body_path(path), matcher.clone());
            }
        } else if let Some(path) = key.strip_prefix("body.") {
            body.insert(body_path(path), value.clone());
        } else {
            out.insert(key.clone(), value.clone());
        }
    }
    if !body.is_empty() {
        out.insert("body".to_string(), Value::Object(body));
    }
    Ok(Value::Object(out))
}
