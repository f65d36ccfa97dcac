//! The JSONPath subset of the conformance DSL.
//!
//! Supported: `$` (root), `$.a.b`, `a.b` (no `$.`, as template field paths are
//! written), indexes `[0]` and chains `[0][1]`, wildcards `[*]` (collect from every
//! element, skipping elements that do not resolve or resolve to null, like the Go
//! runner), filters `[?(@.key=='value')]` (first element whose `key`, rendered with
//! Go's `%v`, equals the unquoted value) and quoted keys `['a.b']`.
//! A path that does not resolve (missing field, wrong type, index out of bounds,
//! malformed path) yields `None`.

use super::gofmt::go_v;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
    Wildcard,
    Filter { key: String, value: String },
}

/// Resolves `path` against `root` (`None` = no parsable body). Returns an owned value
/// because a wildcard builds a new array.
pub fn resolve(path: &str, root: Option<&Value>) -> Option<Value> {
    let segs = parse(path)?;
    walk(root?, &segs)
}

fn parse(path: &str) -> Option<Vec<Seg>> {
    let path = path.trim();
    let rest = if path == "$" {
        ""
    } else if let Some(r) = path.strip_prefix("$.") {
        r
    } else if path.starts_with("$[") {
        &path[1..]
    } else {
        path
    };
    let chars: Vec<char> = rest.chars().collect();
    let mut segs = Vec::new();
    let mut key = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                flush(&mut key, &mut segs);
                i += 1;
            }
            '[' => {
                flush(&mut key, &mut segs);
                let (seg, next) = parse_bracket(&chars, i)?;
                segs.push(seg);
                i = next;
            }
            c => {
                key.push(c);
                i += 1;
            }
        }
    }
    flush(&mut key, &mut segs);
    Some(segs)
}

fn flush(key: &mut String, segs: &mut Vec<Seg>) {
    if !key.is_empty() {
        segs.push(Seg::Key(std::mem::take(key)));
    }
}

/// Parses the bracket starting at `chars[start] == '['`; returns the segment and the
/// index just after the closing bracket.
fn parse_bracket(chars: &[char], start: usize) -> Option<(Seg, usize)> {
    let tail: String = chars[start..].iter().collect();
    if tail.starts_with("[?(") {
        let close = tail.find(")]")?;
        let expr = &tail[3..close];
        let (lhs, rhs) = expr.split_once("==")?;
        let key = lhs.trim().trim_start_matches('@').trim_start_matches('.');
        let value = rhs.trim().trim_matches(|c| c == '\'' || c == '"');
        let consumed = tail[..close + 2].chars().count();
        let seg = Seg::Filter {
            key: key.to_string(),
            value: value.to_string(),
        };
        return Some((seg, start + consumed));
    }
    let close = tail.find(']')?;
    let inner = tail[1..close].trim();
    let consumed = tail[..close + 1].chars().count();
    let seg = if inner == "*" {
        Seg::Wildcard
    } else if let Ok(index) = inner.parse::<usize>() {
        Seg::Index(index)
    } else if inner.len() >= 2
        && ((inner.starts_with('\'') && inner.ends_with('\''))
            || (inner.starts_with('"') && inner.ends_with('"')))
    {
        Seg::Key(inner[1..inner.len() - 1].to_string())
    } else {
        return None;
    };
    Some((seg, start + consumed))
}

fn walk(cur: &Value, segs: &[Seg]) -> Option<Value> {
    let Some((first, rest)) = segs.split_first() else {
        return Some(cur.clone());
    };
    match first {
        Seg::Key(k) => walk(cur.as_object()?.get(k)?, rest),
        Seg::Index(i) => walk(cur.as_array()?.get(*i)?, rest),
        Seg::Wildcard => {
            let items = cur.as_array()?;
            let collected = if rest.is_empty() {
                items.clone()
            } else {
                items
                    .iter()
                    .filter_map(|item| walk(item, rest))
                    .filter(|v| !v.is_null())
                    .collect()
            };
            Some(Value::Array(collected))
        }
        Seg::Filter { key, value } => {
            let found = cur.as_array()?.iter().find(|item| {
                item.as_object()
                    .and_then(|o| o.get(key))
                    .is_some_and(|v| go_v(v) == *value)
            })?;
            walk(found, rest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "job": {"id": "j1", "args": [1, "two", [3, [4, 5]]], "meta": {"a.b": 9}},
            "jobs": [
                {"id": "a", "state": "active", "attempt": 1, "tags": ["x"]},
                {"id": "b", "state": "completed", "attempt": 2},
                {"id": "c", "state": "active", "attempt": 3, "extra": null}
            ],
            "matrix": [[1, 2], [3, 4]]
        })
    }

    fn r(path: &str) -> Option<Value> {
        resolve(path, Some(&doc()))
    }

    #[test]
    fn dot_paths() {
        assert_eq!(r("$.job.id"), Some(json!("j1")));
        assert_eq!(r("job.id"), Some(json!("j1")));
        assert_eq!(r("$.job.missing"), None);
        assert_eq!(r("$.job.id.deeper"), None);
        assert_eq!(r("$.job.meta['a.b']"), Some(json!(9)));
        assert_eq!(
            r("$").and_then(|v| v.get("matrix").cloned()),
            doc().get("matrix").cloned()
        );
        assert_eq!(resolve("$.job", None), None);
    }

    #[test]
    fn indexes_and_chains() {
        assert_eq!(r("$.jobs[1].id"), Some(json!("b")));
        assert_eq!(r("$.matrix[0][1]"), Some(json!(2)));
        assert_eq!(r("$.job.args[2][1][0]"), Some(json!(4)));
        assert_eq!(r("$.jobs[0].tags[0]"), Some(json!("x")));
        assert_eq!(r("$.jobs[9]"), None);
        assert_eq!(r("$.jobs[-1]"), None);
        assert_eq!(r("$.job[0]"), None);
    }

    #[test]
    fn wildcards() {
        assert_eq!(r("$.jobs[*].id"), Some(json!(["a", "b", "c"])));
        assert_eq!(r("$.jobs[*].tags"), Some(json!([["x"]])));
        assert_eq!(r("$.jobs[*].extra"), Some(json!([])));
        assert_eq!(r("$.matrix[*][0]"), Some(json!([1, 3])));
        assert_eq!(r("$.job[*]"), None);
    }

    #[test]
    fn filters() {
        assert_eq!(r("$.jobs[?(@.state=='active')].id"), Some(json!("a")));
        assert_eq!(
            r("$.jobs[?(@.state==\"completed\")].attempt"),
            Some(json!(2))
        );
        assert_eq!(r("$.jobs[?(@.attempt==3)].id"), Some(json!("c")));
        assert_eq!(
            r("$.jobs[?(@.id=='b')]").and_then(|v| v.get("state").cloned()),
            Some(json!("completed"))
        );
        assert_eq!(r("$.jobs[?(@.id=='zz')]"), None);
        assert_eq!(r("$.jobs[?(@.id=='zz')].state"), None);
        assert_eq!(r("$.jobs[?(@.id)]"), None);
    }
}
