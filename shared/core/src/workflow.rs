//! Workflows (ojs-workflows.md): chain, group and batch requests, and the dependency
//! graph they describe. A chain is a graph where each step depends on the one before; a
//! group has no edges; a batch is a group with callbacks; steps with `id`/`depends_on`
//! give any acyclic graph.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{ErrorCode, OjsError};
use crate::job::NewJob;

/// Most steps one workflow may have (one DynamoDB transaction creates them all).
pub const MAX_STEPS: usize = 99;

/// The workflow primitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowKind {
    /// Sequential steps.
    Chain,
    /// Independent jobs.
    Group,
    /// Independent jobs with callbacks.
    Batch,
}

impl WorkflowKind {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chain => "chain",
            Self::Group => "group",
            Self::Batch => "batch",
        }
    }

    /// Parses the wire string.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "chain" => Some(Self::Chain),
            "group" => Some(Self::Group),
            "batch" => Some(Self::Batch),
            _ => None,
        }
    }
}

/// One step: the job it enqueues and the steps it waits for.
#[derive(Debug, Clone)]
pub struct Step {
    /// The step's job.
    pub job: NewJob,
    /// Indices of the steps that must complete first.
    pub depends_on: Vec<usize>,
}

/// Batch callbacks: PUSH bodies enqueued when every job is terminal.
#[derive(Debug, Clone, Default)]
pub struct Callbacks {
    /// Always.
    pub on_complete: Option<Map<String, Value>>,
    /// When every job completed.
    pub on_success: Option<Map<String, Value>>,
    /// When any job failed or was cancelled.
    pub on_failure: Option<Map<String, Value>>,
}

impl Callbacks {
    /// The callbacks that fire for an outcome.
    pub fn due(&self, all_succeeded: bool) -> Vec<(&'static str, &Map<String, Value>)> {
        let mut out = Vec::new();
        if let Some(c) = &self.on_complete {
            out.push(("on_complete", c));
        }
        match (all_succeeded, &self.on_success, &self.on_failure) {
            (true, Some(c), _) => out.push(("on_success", c)),
            (false, _, Some(c)) => out.push(("on_failure", c)),
            _ => {}
        }
        out
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in [
            ("on_complete", &self.on_complete),
            ("on_success", &self.on_success),
            ("on_failure", &self.on_failure),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), Value::Object(v.clone()));
            }
        }
        Value::Object(m)
    }
}

/// A validated workflow request.
#[derive(Debug, Clone)]
pub struct WorkflowSpec {
    /// Primitive.
    pub kind: WorkflowKind,
    /// Optional name.
    pub name: Option<String>,
    /// Steps in request order.
    pub steps: Vec<Step>,
    /// Batch callbacks.
    pub callbacks: Callbacks,
}

fn bad(message: impl Into<String>, path: &str) -> OjsError {
    OjsError::invalid_request(message).with_path(path)
}

impl WorkflowSpec {
    /// Parses `POST /ojs/v1/workflows`: `{type, name, steps|jobs, callbacks}`.
    pub fn from_json(body: Value) -> Result<Self, OjsError> {
        let Value::Object(mut body) = body else {
            return Err(OjsError::invalid_request(
                "the workflow must be a JSON object",
            ));
        };
        let kind = match body.remove("type") {
            Some(Value::String(t)) => WorkflowKind::parse(&t).ok_or_else(|| {
                bad(
                    format!("type must be chain, group or batch, got {t:?}"),
                    "$.type",
                )
            })?,
            _ => return Err(bad("type is required: chain, group or batch", "$.type")),
        };
        let name = match body.remove("name") {
            None | Some(Value::Null) => None,
            Some(Value::String(n)) => Some(n),
            Some(_) => return Err(bad("name must be a string", "$.name")),
        };
        let raw_steps = match body.remove("steps").or_else(|| body.remove("jobs")) {
            Some(Value::Array(s)) if !s.is_empty() => s,
            _ => return Err(bad("steps (or jobs) must be a non-empty array", "$.steps")),
        };
        if raw_steps.len() > MAX_STEPS {
            return Err(OjsError::new(
                ErrorCode::ValidationError,
                format!("a workflow has at most {MAX_STEPS} steps"),
            )
            .with_path("$.steps"));
        }
        let graph = raw_steps.iter().any(|s| s.get("depends_on").is_some());
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut pending_deps: Vec<Vec<String>> = Vec::new();
        let mut steps = Vec::with_capacity(raw_steps.len());
        for (i, raw) in raw_steps.into_iter().enumerate() {
            let path = format!("$.steps[{i}]");
            let Value::Object(mut obj) = raw else {
                return Err(bad("each step must be an object", &path));
            };
            if let Some(Value::String(id)) = obj.remove("id") {
                if ids.insert(id.clone(), i).is_some() {
                    return Err(bad(format!("duplicate step id {id:?}"), &path));
                }
            }
            let deps: Vec<String> = match obj.remove("depends_on") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(d)) => d
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect::<Option<_>>()
                    .ok_or_else(|| bad("depends_on must list step ids", &path))?,
                Some(_) => return Err(bad("depends_on must be an array", &path)),
            };
            pending_deps.push(deps);
            obj.entry("args")
                .or_insert_with(|| Value::Array(Vec::new()));
            let job = NewJob::from_json(Value::Object(obj))
                .map_err(|e| bad(format!("{path}: {}", e.message), &path))?;
            steps.push(Step {
                job,
                depends_on: Vec::new(),
            });
        }
        for (i, deps) in pending_deps.into_iter().enumerate() {
            steps[i].depends_on = if graph {
                deps.iter()
                    .map(|d| {
                        ids.get(d).copied().ok_or_else(|| {
                            bad(
                                format!("unknown step id {d:?} in depends_on"),
                                &format!("$.steps[{i}]"),
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?
            } else if kind == WorkflowKind::Chain && i > 0 {
                vec![i - 1]
            } else {
                Vec::new()
            };
        }
        if graph {
            check_acyclic(&steps)?;
        }
        let callbacks = match body.remove("callbacks") {
            None | Some(Value::Null) => Callbacks::default(),
            Some(Value::Object(mut c)) => {
                let mut take = |k: &str| -> Result<Option<Map<String, Value>>, OjsError> {
                    match c.remove(k) {
                        None | Some(Value::Null) => Ok(None),
                        Some(Value::Object(mut t)) => {
                            t.entry("args").or_insert_with(|| Value::Array(Vec::new()));
                            NewJob::from_json(Value::Object(t.clone())).map_err(|e| {
                                bad(
                                    format!("callbacks.{k}: {}", e.message),
                                    &format!("$.callbacks.{k}"),
                                )
                            })?;
                            Ok(Some(t))
                        }
                        Some(_) => Err(bad(
                            format!("callbacks.{k} must be a job object"),
                            &format!("$.callbacks.{k}"),
                        )),
                    }
                };
                Callbacks {
                    on_complete: take("on_complete")?,
                    on_success: take("on_success")?,
                    on_failure: take("on_failure")?,
                }
            }
            Some(_) => return Err(bad("callbacks must be an object", "$.callbacks")),
        };
        Ok(Self {
            kind,
            name,
            steps,
            callbacks,
        })
    }

    /// For each step, the steps that wait for it.
    pub fn dependents(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.steps.len()];
        for (i, s) in self.steps.iter().enumerate() {
            for d in &s.depends_on {
                out[*d].push(i);
            }
        }
        out
    }

    /// The immutable part stored with the workflow: kind, name, callbacks, dependents.
    pub fn to_stored(&self) -> Value {
        serde_json::json!({
            "type": self.kind.as_str(),
            "name": self.name,
            "callbacks": self.callbacks.to_json(),
            "dependents": self.dependents(),
        })
    }
}

/// Reads back the callbacks stored by [`WorkflowSpec::to_stored`].
pub fn stored_callbacks(stored: &Value) -> Callbacks {
    let get = |k: &str| {
        stored["callbacks"]
            .get(k)
            .and_then(Value::as_object)
            .cloned()
    };
    Callbacks {
        on_complete: get("on_complete"),
        on_success: get("on_success"),
        on_failure: get("on_failure"),
    }
}

/// Reads back the dependents stored by [`WorkflowSpec::to_stored`].
pub fn stored_dependents(stored: &Value, step: usize) -> Vec<usize> {
    stored["dependents"]
        .get(step)
        .and_then(Value::as_array)
        .map(|d| {
            d.iter()
                .filter_map(|v| v.as_u64())
                .filter_map(|v| usize::try_from(v).ok())
                .collect()
        })
        .unwrap_or_default()
}

fn check_acyclic(steps: &[Step]) -> Result<(), OjsError> {
    // Kahn's algorithm: every step must become ready.
    let mut indegree: Vec<usize> = steps.iter().map(|s| s.depends_on.len()).collect();
    let mut dependents = vec![Vec::new(); steps.len()];
    for (i, s) in steps.iter().enumerate() {
        for d in &s.depends_on {
            dependents[*d].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..steps.len()).filter(|i| indegree[*i] == 0).collect();
    let mut seen = 0;
    while let Some(i) = ready.pop() {
        seen += 1;
        for d in &dependents[i] {
            indegree[*d] -= 1;
            if indegree[*d] == 0 {
                ready.push(*d);
            }
        }
    }
    if seen != steps.len() {
        return Err(bad("depends_on forms a cycle", "$.steps"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chain_group_batch_and_graph_forms() {
        let chain = WorkflowSpec::from_json(
            json!({"type": "chain", "steps": [{"type": "a"}, {"type": "b"}, {"type": "c"}]}),
        );
        let chain = chain.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(chain.steps[2].depends_on, vec![1]);
        assert_eq!(chain.dependents()[0], vec![1]);
        let group = WorkflowSpec::from_json(
            json!({"type": "group", "jobs": [{"type": "a", "args": []}, {"type": "b"}]}),
        );
        assert!(group
            .unwrap_or_else(|e| panic!("{e}"))
            .steps
            .iter()
            .all(|s| s.depends_on.is_empty()));
        let batch = WorkflowSpec::from_json(json!({"type": "batch", "jobs": [{"type": "a"}],
            "callbacks": {"on_success": {"type": "cb.ok"}, "on_complete": {"type": "cb.done"}}}));
        let batch = batch.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(batch.callbacks.due(true).len(), 2);
        assert_eq!(batch.callbacks.due(false).len(), 1);
        let graph = WorkflowSpec::from_json(json!({"type": "chain", "steps": [
            {"id": "x", "type": "a"}, {"id": "y", "type": "b"}, {"id": "z", "type": "c", "depends_on": ["x", "y"]}]}));
        assert_eq!(
            graph.unwrap_or_else(|e| panic!("{e}")).steps[2].depends_on,
            vec![0, 1]
        );
    }

    #[test]
    fn invalid_workflows_are_rejected() {
        for bad in [
            json!({"type": "dag", "steps": [{"type": "a"}]}),
            json!({"type": "chain", "steps": []}),
            json!({"type": "chain", "steps": [{"args": []}]}),
            json!({"type": "chain", "steps": [{"id": "a", "type": "a", "depends_on": ["b"]}, {"id": "b", "type": "b", "depends_on": ["a"]}]}),
            json!({"type": "chain", "steps": [{"id": "a", "type": "a", "depends_on": ["nope"]}]}),
            json!({"type": "batch", "jobs": [{"type": "a"}], "callbacks": {"on_success": {"type": "Bad!"}}}),
        ] {
            assert!(WorkflowSpec::from_json(bad.clone()).is_err(), "{bad}");
        }
    }
}
