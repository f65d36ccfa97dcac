//! `{{steps.<id>.response.body.<path>}}` templates and the per-case step context.
//!
//! Substitution follows the Go runner: strings are inserted as-is, whole numbers
//! without decimals, other numbers with Go's `%v`, booleans/objects/arrays as JSON;
//! a template whose step is unknown, whose response had no JSON body, or whose path
//! does not resolve (or resolves to null) is left unchanged. `{{steps.<id>.response.body}}`
//! (no field path) stands for the whole body; the upstream regex does not know it,
//! but the `equality` assertion of the suite uses it.

use super::gofmt::template_number;
use super::jsonpath;
use regex::{Captures, Regex};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::OnceLock;

/// Results of the steps executed so far in one case.
#[derive(Debug, Default, Clone)]
pub struct StepContext {
    /// Parsed JSON body of every step that returned one, by step id.
    bodies: HashMap<String, Value>,
    /// `{"<id>": {"response": {"status", "headers", "body"}}}` for cross-step paths.
    steps: Map<String, Value>,
    /// Values saved by `capture` / `captures`, by name.
    captures: HashMap<String, Value>,
}

impl StepContext {
    /// One line per step answered so far, in the order given: `<id>: <status> <body>`,
    /// the body cut at `width` characters. What a failed case's report shows, so a
    /// failure seen once in CI can be read without running it again.
    pub fn trace(&self, order: &[&str], width: usize) -> Vec<String> {
        order
            .iter()
            .filter_map(|id| {
                let response = self.steps.get(*id)?.get("response")?;
                let body = response
                    .get("body")
                    .map(Value::to_string)
                    .unwrap_or_default();
                let cut: String = body.chars().take(width).collect();
                let more = if cut.len() < body.len() { "..." } else { "" };
                Some(format!("{id}: {} {cut}{more}", response["status"]))
            })
            .collect()
    }

    /// Records the outcome of step `id` (`status` is `None` when no response arrived).
    pub fn record(
        &mut self,
        id: &str,
        status: Option<u16>,
        headers: Map<String, Value>,
        body: Option<Value>,
    ) {
        match &body {
            Some(b) => self.bodies.insert(id.to_string(), b.clone()),
            None => self.bodies.remove(id),
        };
        let response = serde_json::json!({
            "status": status,
            "headers": headers,
            "body": body.unwrap_or(Value::Null),
        });
        self.steps
            .insert(id.to_string(), serde_json::json!({ "response": response }));
    }

    /// Saves `value` under the capture `name`.
    pub fn capture(&mut self, name: &str, value: Value) {
        self.captures.insert(name.to_string(), value);
    }

    /// The value captured as `name`, if any.
    pub fn captured(&self, name: &str) -> Option<&Value> {
        self.captures.get(name)
    }

    /// Parsed body of step `id`, if it returned JSON.
    pub fn body(&self, id: &str) -> Option<&Value> {
        self.bodies.get(id)
    }

    /// The whole context as `{"steps": {...}}`, the root of `equality` paths.
    pub fn as_json(&self) -> Value {
        serde_json::json!({ "steps": Value::Object(self.steps.clone()) })
    }
}

fn template_re() -> Option<&'static Regex> {
    static C: OnceLock<Option<Regex>> = OnceLock::new();
    C.get_or_init(|| Regex::new(r"\{\{steps\.([^.}]+)\.response\.body(?:\.([^}]+))?\}\}").ok())
        .as_ref()
}

fn lookup(caps: &Captures<'_>, ctx: &StepContext) -> Option<Value> {
    let body = ctx.body(caps.get(1)?.as_str())?;
    let value = match caps.get(2) {
        Some(path) => jsonpath::resolve(path.as_str(), Some(body))?,
        None => body.clone(),
    };
    (!value.is_null()).then_some(value)
}

/// Text inserted for a resolved template value.
pub fn to_template_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => template_number(n),
        other => other.to_string(),
    }
}

/// Replaces every template in `input`; unresolved templates stay unchanged.
pub fn resolve_str(input: &str, ctx: &StepContext) -> String {
    let Some(re) = template_re() else {
        return input.to_string();
    };
    re.replace_all(input, |caps: &Captures<'_>| match lookup(caps, ctx) {
        Some(v) => to_template_string(&v),
        None => caps[0].to_string(),
    })
    .into_owned()
}

/// Resolves templates in every string and key of a JSON tree (request bodies and
/// matchers). Deliberate choice: a string that is exactly one template stays a JSON
/// *string* even when the value is a number/bool/object (its text is inserted). That is
/// what the Go runner's substitution into the JSON text yields, because the quotes
/// around the template remain.
pub fn resolve_tree(v: &Value, ctx: &StepContext) -> Value {
    match v {
        Value::String(s) => Value::String(resolve_str(s, ctx)),
        Value::Array(items) => Value::Array(items.iter().map(|i| resolve_tree(i, ctx)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (resolve_str(k, ctx), resolve_tree(v, ctx)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Resolves a value used by cross-step assertions (`exclusive_claim`, `equality`): a
/// string that is exactly one template becomes the referenced JSON value itself (the
/// Go text substitution marshals it, and it is parsed back here); other strings are
/// substituted and, if that inserted an array/object text, parsed back as JSON.
pub fn resolve_value(v: &Value, ctx: &StepContext) -> Value {
    match v {
        Value::String(s) => {
            let trimmed = s.trim();
            if let Some(caps) = template_re().and_then(|re| re.captures(trimmed)) {
                if caps.get(0).is_some_and(|m| m.len() == trimmed.len()) {
                    if let Some(value) = lookup(&caps, ctx) {
                        return value;
                    }
                }
            }
            let resolved = resolve_str(s, ctx);
            let looks_structured = resolved.trim_start().starts_with(['[', '{']);
            if resolved != *s && looks_structured {
                if let Ok(parsed) = serde_json::from_str::<Value>(&resolved) {
                    return parsed;
                }
            }
            Value::String(resolved)
        }
        Value::Array(items) => Value::Array(items.iter().map(|i| resolve_value(i, ctx)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (resolve_str(k, ctx), resolve_value(v, ctx)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `${name}` or `{{name}}` (a bare name: no dot, so never a `{{steps...}}` template).
fn capture_re() -> Option<&'static Regex> {
    static C: OnceLock<Option<Regex>> = OnceLock::new();
    C.get_or_init(|| Regex::new(r"\$\{([^{}]*)\}|\{\{\s*([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}").ok())
        .as_ref()
}

/// Replaces every `${name}` / `{{name}}` in `input` by the captured value (inserted
/// like a template value); names never captured are left as written and added to
/// `missing` (the caller fails the step with them).
pub fn resolve_captures_str(input: &str, ctx: &StepContext, missing: &mut Vec<String>) -> String {
    let Some(re) = capture_re() else {
        return input.to_string();
    };
    re.replace_all(input, |caps: &Captures<'_>| {
        let name = caps
            .get(1)
            .or_else(|| caps.get(2))
            .map(|m| m.as_str().trim())
            .unwrap_or_default();
        match ctx.captured(name) {
            Some(v) => to_template_string(v),
            None => {
                let written = caps[0].to_string();
                if !missing.contains(&written) {
                    missing.push(written.clone());
                }
                written
            }
        }
    })
    .into_owned()
}

/// [`resolve_captures_str`] over every string and key of a JSON tree. A string that is
/// exactly one reference stays a string (the value's text), as with templates.
pub fn resolve_captures_tree(v: &Value, ctx: &StepContext, missing: &mut Vec<String>) -> Value {
    match v {
        Value::String(s) => Value::String(resolve_captures_str(s, ctx, missing)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| resolve_captures_tree(i, ctx, missing))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    (
                        resolve_captures_str(k, ctx, missing),
                        resolve_captures_tree(v, ctx, missing),
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// True if `s` still contains a template (e.g. it could not be resolved).
pub fn has_template(s: &str) -> bool {
    template_re().is_some_and(|re| re.is_match(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> StepContext {
        let mut c = StepContext::default();
        let body = json!({
            "job": {"id": "019a-id", "attempt": 2, "score": 2.5, "meta": {"k": "v"}, "none": null, "ok": true},
            "jobs": [{"id": "first"}]
        });
        c.record("step-1", Some(201), Map::new(), Some(body));
        c.record("step-2", None, Map::new(), None);
        c
    }

    #[test]
    fn substitutes_strings_numbers_and_objects() {
        let c = ctx();
        assert_eq!(
            resolve_str("/jobs/{{steps.step-1.response.body.job.id}}", &c),
            "/jobs/019a-id"
        );
        assert_eq!(
            resolve_str("{{steps.step-1.response.body.job.attempt}}", &c),
            "2"
        );
        assert_eq!(
            resolve_str("{{steps.step-1.response.body.job.score}}", &c),
            "2.5"
        );
        assert_eq!(
            resolve_str("{{steps.step-1.response.body.job.ok}}", &c),
            "true"
        );
        assert_eq!(
            resolve_str("{{steps.step-1.response.body.job.meta}}", &c),
            r#"{"k":"v"}"#
        );
        assert_eq!(
            resolve_str("{{steps.step-1.response.body.jobs[0].id}}", &c),
            "first"
        );
        assert_eq!(
            resolve_str("a={{steps.step-1.response.body.job.attempt}},b={{steps.step-1.response.body.jobs[0].id}}", &c),
            "a=2,b=first"
        );
    }

    #[test]
    fn unresolved_templates_stay_unchanged() {
        let c = ctx();
        for t in [
            "{{steps.nope.response.body.job.id}}",
            "{{steps.step-2.response.body.job.id}}",
            "{{steps.step-1.response.body.job.missing}}",
            "{{steps.step-1.response.body.job.none}}",
        ] {
            assert_eq!(resolve_str(t, &c), t);
            assert!(has_template(&resolve_str(t, &c)));
        }
    }

    #[test]
    fn trees_keep_whole_templates_as_strings() {
        let c = ctx();
        let body = json!({"job_id": "{{steps.step-1.response.body.job.id}}", "n": "{{steps.step-1.response.body.job.attempt}}", "x": 1});
        assert_eq!(
            resolve_tree(&body, &c),
            json!({"job_id": "019a-id", "n": "2", "x": 1})
        );
    }

    #[test]
    fn cross_step_values_are_parsed_back() {
        let c = ctx();
        assert_eq!(
            resolve_value(&json!("{{steps.step-1.response.body.jobs}}"), &c),
            json!([{"id": "first"}])
        );
        assert_eq!(
            resolve_value(&json!("{{steps.step-1.response.body.job.attempt}}"), &c),
            json!(2)
        );
        assert_eq!(
            resolve_value(&json!("{{steps.step-1.response.body}}"), &c)["job"]["id"],
            json!("019a-id")
        );
        let unresolved = json!("{{steps.step-2.response.body.jobs}}");
        assert_eq!(resolve_value(&unresolved, &c), unresolved);
    }

    #[test]
    fn context_json_exposes_steps() {
        let c = ctx();
        let root = c.as_json();
        assert_eq!(
            jsonpath::resolve("$.steps.step-1.response.body.job.id", Some(&root)),
            Some(json!("019a-id"))
        );
        assert_eq!(
            jsonpath::resolve("$.steps.step-1.response.status", Some(&root)),
            Some(json!(201))
        );
    }
}
