//! Test-case files: loading and parsing into [`Case`] and [`Step`].
//!
//! Steps are parsed by hand from `serde_json::Value` so that unusual content never
//! aborts a run: unknown fields are ignored, a missing step `id` gets a positional one,
//! a missing `action` is reported when the step runs. Only what makes a file unusable
//! as a case (not JSON, no `test_id`/`level`/`steps`) is a load error.

use anyhow::{bail, Context as _};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// One conformance test case (one JSON file).
#[derive(Debug, Clone)]
pub struct Case {
    /// File the case was read from (test ids are not unique in the suite).
    pub path: PathBuf,
    /// `test_id`, e.g. `L0-ENV-001`.
    pub test_id: String,
    /// Conformance level 0-4 as declared, or [`EXT`] for `"ext"` (extension cases).
    pub level: u8,
    /// The folder below the suites' root it was found in (`level-0-core`,
    /// `ext-progress`...): the suite it belongs to.
    pub suite: String,
    /// Kebab-case name.
    pub name: String,
    /// Category within the level (`envelope`, `retry`, ...).
    pub category: String,
    /// Human-readable description.
    pub description: String,
    /// Steps run before `steps`; a failure there aborts the case.
    pub setup: Vec<Step>,
    /// The test steps, in order.
    pub steps: Vec<Step>,
    /// Steps run after the test whatever its outcome; their failures are ignored.
    pub teardown: Vec<Step>,
}

/// One step: an HTTP request, a `WAIT` or an `ASSERT`.
#[derive(Debug, Clone)]
pub struct Step {
    /// Step id, referenced by templates and `parallel_with`.
    pub id: String,
    /// HTTP method, `WAIT` or `ASSERT` (as written).
    pub action: String,
    /// Request path (may contain templates).
    pub path: Option<String>,
    /// Request headers, in file order.
    pub headers: Vec<(String, String)>,
    /// JSON request body (present even when it is `null`).
    pub body: Option<Value>,
    /// Body sent verbatim instead of `body` (used for malformed-JSON tests).
    pub raw_body: Option<String>,
    /// Milliseconds to sleep before the step.
    pub delay_ms: u64,
    /// Milliseconds a `WAIT` step sleeps.
    pub duration_ms: u64,
    /// Ids of steps to execute concurrently with this one.
    pub parallel_with: Vec<String>,
    /// The `assertions` object, evaluated by the runner.
    pub assertions: Option<Value>,
    /// The `expect` object some extension cases write instead of `assertions`
    /// (`status`, `status_in`, `body` and dotted `body.<path>` keys), evaluated like
    /// `assertions` after conversion (see [`super::expect`]).
    pub expect: Option<Value>,
    /// `capture` / `captures`: `(name, JSONPath)` pairs saved from the response body
    /// after the step, for `${name}` / `{{name}}` in later steps.
    pub captures: Vec<(String, String)>,
    /// `repeat`: how many times the request is sent (1 when absent); each response
    /// is checked, the last one is recorded and captured from.
    pub repeat: u64,
    /// Constructs of the step the engine does not evaluate (`request`, `store`, a
    /// malformed `repeat` or `capture`): the step fails with these instead of running
    /// without checking what its author meant.
    pub unsupported: Vec<String>,
}

/// The level of a case that declares `"level": "ext"` (an extension suite's).
pub const EXT: u8 = u8::MAX;

/// Recursively loads every `*.json` case below `root`, sorted by path.
pub fn load_cases(root: &Path) -> anyhow::Result<Vec<Case>> {
    let mut files = Vec::new();
    if root.is_file() {
        files.push(root.to_path_buf());
    } else {
        collect_json(root, &mut files)?;
    }
    files.sort();
    files
        .iter()
        .map(|p| {
            let mut case = Case::from_file(p)?;
            case.suite = p
                .strip_prefix(root)
                .ok()
                .and_then(|rel| rel.components().next())
                .filter(|_| root.is_dir())
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default();
            Ok(case)
        })
        .collect()
}

impl Case {
    /// The path below the suites' root, `<suite>/.../<file>.json`: what identifies a case
    /// (test ids repeat) and what the exception lists name.
    pub fn key(&self) -> String {
        let parts: Vec<String> = self
            .path
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        match parts.iter().position(|p| *p == self.suite) {
            Some(i) if !self.suite.is_empty() => parts[i..].join("/"),
            _ => self.path.display().to_string(),
        }
    }

    /// Milliseconds the case's steps sleep as written (`delay_ms` before a step, a `WAIT`'s
    /// `duration_ms`): a lower bound on how long it runs.
    pub fn declared_sleep_ms(&self) -> u64 {
        self.setup
            .iter()
            .chain(&self.steps)
            .chain(&self.teardown)
            .map(|s| s.delay_ms.saturating_add(s.duration_ms))
            .fold(0, u64::saturating_add)
    }

    /// The declared level as written (`0`...`4`, `ext`).
    pub fn level_name(&self) -> String {
        if self.level == EXT {
            "ext".to_owned()
        } else {
            self.level.to_string()
        }
    }
}

fn collect_json(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("reading directory {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if path.is_dir() {
            collect_json(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    Ok(())
}

impl Case {
    /// Reads and parses one case file.
    pub fn from_file(path: &Path) -> anyhow::Result<Case> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        Case::from_value(path, &value).with_context(|| format!("invalid case {}", path.display()))
    }

    /// Builds a case from its parsed JSON.
    pub fn from_value(path: &Path, value: &Value) -> anyhow::Result<Case> {
        let Some(obj) = value.as_object() else {
            bail!("a case must be a JSON object");
        };
        let text = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_string);
        let Some(test_id) = text("test_id") else {
            bail!("missing string field `test_id`");
        };
        let level = match obj.get("level") {
            Some(Value::String(s)) if s == "ext" => EXT,
            other => other
                .and_then(Value::as_u64)
                .and_then(|l| u8::try_from(l).ok())
                .filter(|l| *l != EXT)
                .context("missing or invalid field `level` (an integer or \"ext\")")?,
        };
        let Some(steps) = obj.get("steps").and_then(Value::as_array) else {
            bail!("missing array field `steps`");
        };
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        Ok(Case {
            path: path.to_path_buf(),
            test_id,
            level,
            suite: String::new(),
            name: text("name").or(stem).unwrap_or_default(),
            category: text("category").unwrap_or_default(),
            description: text("description").unwrap_or_default(),
            setup: phase_steps(obj.get("setup")),
            steps: parse_steps(steps),
            teardown: phase_steps(obj.get("teardown")),
        })
    }
}

/// `setup` / `teardown` are `{"steps": [...]}` in the Go schema; a bare array is
/// accepted too.
fn phase_steps(v: Option<&Value>) -> Vec<Step> {
    match v {
        Some(Value::Array(items)) => parse_steps(items),
        Some(Value::Object(o)) => o
            .get("steps")
            .and_then(Value::as_array)
            .map(|items| parse_steps(items))
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn parse_steps(items: &[Value]) -> Vec<Step> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| Step::from_value(v, i))
        .collect()
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn millis(v: Option<&Value>) -> u64 {
    match v {
        Some(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f > 0.0).map(|f| f.round() as u64))
            .unwrap_or(0),
        None => 0,
    }
}

impl Step {
    /// Parses step number `index` (0-based); never fails, see the module docs.
    pub fn from_value(v: &Value, index: usize) -> Step {
        let empty = Map::new();
        let obj = v.as_object().unwrap_or(&empty);
        let text = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_string);
        let headers = obj
            .get("headers")
            .and_then(Value::as_object)
            .map(|h| h.iter().map(|(k, v)| (k.clone(), as_text(v))).collect())
            .unwrap_or_default();
        let parallel_with = match obj.get("parallel_with") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(ids)) => ids
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        let mut unsupported = Vec::new();
        let mut captures = Vec::new();
        for key in ["capture", "captures"] {
            match obj.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Object(map)) => {
                    for (name, path) in map {
                        match path.as_str() {
                            Some(p) => captures.push((name.clone(), p.to_string())),
                            None => unsupported.push(format!(
                                "unsupported construct \"{key}\": `{name}` must map to a JSONPath string, got {path}"
                            )),
                        }
                    }
                }
                Some(other) => unsupported.push(format!(
                    "unsupported construct \"{key}\": expected an object of name -> JSONPath, got {other}"
                )),
            }
        }
        let repeat = match obj.get("repeat") {
            None | Some(Value::Null) => 1,
            Some(v) => match v.as_u64().filter(|n| *n >= 1) {
                Some(n) => n,
                None => {
                    unsupported.push(format!(
                        "unsupported construct \"repeat\": expected a positive integer, got {v}"
                    ));
                    1
                }
            },
        };
        // The SDK-style steps of ext-federation / ext-ml-resources: `action` is an SDK
        // operation (`push`, `fetch`, `ack`, `get`) with a `request` object instead of
        // an HTTP method, path and body, `store` saves a response field by a bare name
        // and `$ref.<name>` reads it back. The engine does not translate SDK
        // operations to HTTP requests, so such steps fail rather than send a request
        // nobody meant (e.g. `PUSH /`) and check nothing.
        for key in ["request", "store"] {
            if obj.get(key).is_some() {
                unsupported.push(format!(
                    "unsupported construct \"{key}\" (SDK-style step, action {:?}): the engine sends HTTP steps only (action, path, body)",
                    text("action").unwrap_or_default()
                ));
            }
        }
        Step {
            id: text("id").unwrap_or_else(|| format!("step#{}", index + 1)),
            action: text("action").unwrap_or_default(),
            path: text("path"),
            headers,
            body: obj.get("body").cloned(),
            raw_body: obj.get("raw_body").filter(|v| !v.is_null()).map(as_text),
            delay_ms: millis(obj.get("delay_ms")),
            duration_ms: millis(obj.get("duration_ms")),
            parallel_with,
            assertions: obj.get("assertions").filter(|v| !v.is_null()).cloned(),
            expect: obj.get("expect").filter(|v| !v.is_null()).cloned(),
            captures,
            repeat,
            unsupported,
        }
    }
}
