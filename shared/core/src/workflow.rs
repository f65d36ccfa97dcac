//! Workflows (ojs-workflows.md): chain, group and batch requests, and the dependency
//! graph they describe. A chain is a graph where each step depends on the one before; a
//! group has no edges; a batch is a group with callbacks; steps with `id`/`depends_on`
//! give any acyclic graph.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{ErrorCode, OjsError};
use crate::job::NewJob;
use crate::tenant;

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
    /// The step's id: the request's `id`, else `step-<index>`.
    pub id: String,
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
    /// The step ids of callbacks sent as steps (name, id), so views list them as steps.
    pub step_ids: Vec<(&'static str, String)>,
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

impl WorkflowSpec {
    /// Gives every job of the workflow its tenant (ojs-multi-tenancy.md §15.2: all of a
    /// workflow's jobs inherit its tenant; a job naming another is refused, 400): the
    /// tenant the request acts for, or, for a request acting for any, the one its first
    /// step naming a tenant names (the default tenant when none does).
    pub fn adopt_tenant(&mut self, scope: &tenant::Scope) -> Result<(), OjsError> {
        let own = match scope {
            tenant::Scope::One(t) => t.clone(),
            tenant::Scope::Any => self
                .steps
                .iter()
                .find(|s| s.job.spec.meta.contains_key(tenant::META_KEY))
                .and_then(|s| tenant::of_meta(&s.job.spec.meta)),
        };
        let own = tenant::Scope::One(own);
        for (i, step) in self.steps.iter_mut().enumerate() {
            tenant::adopt(&own, &mut step.job.spec.meta, &format!("$.steps[{i}].meta"))?;
        }
        let c = &mut self.callbacks;
        for (name, body) in [
            ("on_complete", &mut c.on_complete),
            ("on_success", &mut c.on_success),
            ("on_failure", &mut c.on_failure),
        ] {
            if let Some(meta) = body.as_mut().and_then(tenant::meta_of) {
                tenant::adopt(&own, meta, &format!("$.callbacks.{name}.meta"))?;
            }
        }
        Ok(())
    }
}

fn bad(message: impl Into<String>, path: &str) -> OjsError {
    OjsError::invalid_request(message).with_path(path)
}

/// The error of the job at `path` (a step or a callback), under that path.
fn nested(e: &OjsError, path: &str) -> OjsError {
    OjsError::new(e.code.nested(), format!("{path}: {}", e.message)).with_path(path)
}

/// A workflow's jobs take no `unique` policy: the workflow spec does not say what a step
/// (or callback) refused as a duplicate would do to its workflow, so one is refused here
/// rather than stored and ignored (README, "Deliberate choices").
fn without_unique(job: &NewJob, path: &str) -> Result<(), OjsError> {
    if job.spec.unique.is_none() {
        return Ok(());
    }
    Err(OjsError::invalid_request(format!(
        "{path}: a workflow's jobs take no unique policy (a step refused as a duplicate would leave its workflow undefined); deduplicate the workflow instead"
    ))
    .with_path(&format!("{path}.unique")))
}

/// The names of batch callbacks, as `callbacks` keys and as callback step markers.
const CALLBACK_NAMES: [&str; 3] = ["on_complete", "on_success", "on_failure"];

/// The callback a step stands for in a request without `type`: `options.callback_type`
/// (the Python SDK) or an id `on-complete`/`on_complete`... (the Go SDK).
fn callback_name(step: &Map<String, Value>) -> Option<&'static str> {
    let marked = step
        .get("options")
        .and_then(|o| o.get("callback_type"))
        .and_then(Value::as_str)
        .or_else(|| step.get("id").and_then(Value::as_str))?
        .replace('-', "_");
    CALLBACK_NAMES.into_iter().find(|n| *n == marked)
}

/// `defaults` under the keys `step` does not set itself (the request's top-level
/// `options`, "default enqueue options for all steps", HTTP binding §14.1).
fn with_defaults(
    mut step: Map<String, Value>,
    defaults: &Map<String, Value>,
) -> Map<String, Value> {
    if defaults.is_empty() {
        return step;
    }
    let options = step
        .entry("options")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(options) = options {
        for (k, v) in defaults {
            options.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    step
}

/// A callback's job template, checked as a PUSH body.
fn callback_template(
    mut t: Map<String, Value>,
    path: &str,
) -> Result<Map<String, Value>, OjsError> {
    for key in ["id", "depends_on"] {
        t.remove(key);
    }
    if let Some(Value::Object(o)) = t.get_mut("options") {
        o.remove("callback_type");
    }
    t.entry("args").or_insert_with(|| Value::Array(Vec::new()));
    // Checked as it will be pushed: with the meta keys firing adds, at their longest.
    let mut fired = t.clone();
    if let Value::Object(meta) = fired
        .entry("meta")
        .or_insert_with(|| Value::Object(Map::new()))
    {
        meta.insert(
            "workflow_id".into(),
            "00000000-0000-0000-0000-000000000000".into(),
        );
        meta.insert("callback".into(), "on_complete".into());
    }
    let job = NewJob::from_json(Value::Object(fired)).map_err(|e| nested(&e, path))?;
    without_unique(&job, path)?;
    Ok(t)
}

impl WorkflowSpec {
    /// Parses `POST /ojs/v1/workflows`: `{type, name, steps|jobs, callbacks, options}`.
    /// Without `type` (the binding's §14.1 shape, which the Python and Go SDKs send) the
    /// kind follows from the steps' `depends_on`, and steps that stand for batch
    /// callbacks (see [`callback_name`]) become the callbacks.
    pub fn from_json(body: Value) -> Result<Self, OjsError> {
        let Value::Object(mut body) = body else {
            return Err(OjsError::invalid_request(
                "the workflow must be a JSON object",
            ));
        };
        let kind = match body.remove("type") {
            Some(Value::String(t)) => Some(WorkflowKind::parse(&t).ok_or_else(|| {
                bad(
                    format!("type must be chain, group or batch, got {t:?}"),
                    "$.type",
                )
            })?),
            None | Some(Value::Null) => None,
            Some(_) => return Err(bad("type must be chain, group or batch", "$.type")),
        };
        let name = match body.remove("name") {
            None | Some(Value::Null) => None,
            Some(Value::String(n)) => Some(n),
            Some(_) => return Err(bad("name must be a string", "$.name")),
        };
        let defaults = match body.remove("options") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(o)) => o,
            Some(_) => return Err(bad("options must be an object", "$.options")),
        };
        let raw_steps = match body.remove("steps").or_else(|| body.remove("jobs")) {
            Some(Value::Array(s)) if !s.is_empty() => s,
            _ => return Err(bad("steps (or jobs) must be a non-empty array", "$.steps")),
        };
        let mut objects = Vec::with_capacity(raw_steps.len());
        for (i, raw) in raw_steps.into_iter().enumerate() {
            match raw {
                Value::Object(o) => objects.push(o),
                _ => return Err(bad("each step must be an object", &format!("$.steps[{i}]"))),
            }
        }
        let mut callbacks = Callbacks::default();
        if kind.is_none() {
            let (marked, plain): (Vec<_>, Vec<_>) = objects
                .into_iter()
                .enumerate()
                .partition(|(_, o)| callback_name(o).is_some());
            for (i, o) in marked {
                let path = format!("$.steps[{i}]");
                let Some(name) = callback_name(&o) else {
                    continue;
                };
                if let Some(id) = o.get("id").and_then(Value::as_str) {
                    callbacks.step_ids.push((name, id.to_owned()));
                }
                let template = Some(callback_template(with_defaults(o, &defaults), &path)?);
                match name {
                    "on_complete" => callbacks.on_complete = template,
                    "on_success" => callbacks.on_success = template,
                    _ => callbacks.on_failure = template,
                }
            }
            objects = plain.into_iter().map(|(_, o)| o).collect();
            if objects.is_empty() {
                return Err(bad(
                    "a workflow needs at least one step that is not a callback",
                    "$.steps",
                ));
            }
        }
        if objects.len() > MAX_STEPS {
            return Err(OjsError::new(
                ErrorCode::ValidationError,
                format!("a workflow has at most {MAX_STEPS} steps"),
            )
            .with_path("$.steps"));
        }
        let graph = objects.iter().any(|s| s.get("depends_on").is_some());
        let mut ids: HashMap<String, usize> = HashMap::new();
        let mut pending_deps: Vec<Vec<String>> = Vec::new();
        let mut steps = Vec::with_capacity(objects.len());
        for (i, obj) in objects.into_iter().enumerate() {
            let path = format!("$.steps[{i}]");
            let mut obj = with_defaults(obj, &defaults);
            let id = match obj.remove("id") {
                Some(Value::String(id)) => id,
                None | Some(Value::Null) => format!("step-{i}"),
                Some(_) => return Err(bad("a step id must be a string", &path)),
            };
            if ids.insert(id.clone(), i).is_some() {
                return Err(bad(format!("duplicate step id {id:?}"), &path));
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
            let job = NewJob::from_json(Value::Object(obj)).map_err(|e| nested(&e, &path))?;
            without_unique(&job, &path)?;
            steps.push(Step {
                id,
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
            } else if kind == Some(WorkflowKind::Chain) && i > 0 {
                vec![i - 1]
            } else {
                Vec::new()
            };
        }
        if graph {
            check_acyclic(&steps)?;
        }
        if let Some(raw) = body.remove("callbacks") {
            match raw {
                Value::Null => {}
                Value::Object(mut c) => {
                    let mut take = |k: &str| -> Result<Option<Map<String, Value>>, OjsError> {
                        let path = format!("$.callbacks.{k}");
                        match c.remove(k) {
                            None | Some(Value::Null) => Ok(None),
                            Some(Value::Object(t)) => {
                                callback_template(with_defaults(t, &defaults), &path).map(Some)
                            }
                            Some(_) => {
                                Err(bad(format!("callbacks.{k} must be a job object"), &path))
                            }
                        }
                    };
                    callbacks = Callbacks {
                        on_complete: take("on_complete")?,
                        on_success: take("on_success")?,
                        on_failure: take("on_failure")?,
                        step_ids: Vec::new(),
                    };
                }
                _ => return Err(bad("callbacks must be an object", "$.callbacks")),
            }
        }
        let kind = kind.unwrap_or_else(|| {
            let has_callbacks = callbacks.on_complete.is_some()
                || callbacks.on_success.is_some()
                || callbacks.on_failure.is_some();
            if has_callbacks {
                WorkflowKind::Batch
            } else if steps.iter().all(|s| s.depends_on.is_empty()) {
                WorkflowKind::Group
            } else {
                WorkflowKind::Chain
            }
        });
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

    /// The immutable part stored with the workflow: kind, name, callbacks, dependents,
    /// and each step's id, job type and dependencies (for the `steps` view).
    pub fn to_stored(&self) -> Value {
        serde_json::json!({
            "type": self.kind.as_str(),
            "name": self.name,
            "callbacks": self.callbacks.to_json(),
            "dependents": self.dependents(),
            "callback_steps": self.callbacks.step_ids.iter().map(|(name, id)| serde_json::json!({
                "id": id,
                "callback": name,
                "type": match *name {
                    "on_complete" => self.callbacks.on_complete.as_ref(),
                    "on_success" => self.callbacks.on_success.as_ref(),
                    _ => self.callbacks.on_failure.as_ref(),
                }.and_then(|t| t.get("type")).cloned(),
            })).collect::<Vec<_>>(),
            "steps": self.steps.iter().map(|s| serde_json::json!({
                "id": s.id,
                "type": s.job.spec.job_type.as_str(),
                "depends_on": s.depends_on.iter().map(|d| self.steps[*d].id.clone()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// A workflow's lifecycle state (ojs-workflows §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowState {
    /// Steps are waiting or running (or a batch's callbacks are).
    Running,
    /// Every step (and every fired callback) completed.
    Completed,
    /// A step (chain, group) or a fired callback (batch) failed.
    Failed,
    /// Cancelled through the API.
    Cancelled,
}

impl WorkflowState {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses the wire string.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "running" => Some(Self::Running),
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            "cancelled" => Some(Self::Cancelled),
            _ => None,
        }
    }
}

/// Where a workflow's steps and callbacks stand: the counts its item keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Steps in the workflow.
    pub total: u64,
    /// Steps completed.
    pub completed: u64,
    /// Steps failed (discarded).
    pub failed: u64,
    /// Steps cancelled.
    pub cancelled: u64,
    /// Whether the batch callbacks due were fired (always false for chains and groups).
    pub callbacks_fired: bool,
    /// Callbacks fired.
    pub callbacks_total: u64,
    /// Fired callbacks that reached a terminal state.
    pub callbacks_done: u64,
    /// Fired callbacks that did not complete.
    pub callbacks_failed: u64,
}

/// What a running workflow should do next, given its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Nothing yet.
    Wait,
    /// Enqueue the batch callbacks due (every step is terminal).
    FireCallbacks,
    /// Finish in this state.
    Finish(WorkflowState),
}

/// The settling rules of ojs-workflows §8.3 for a running workflow:
/// - chain: failed as soon as any step fails or is cancelled; completed when all completed;
/// - group: once every step is terminal, completed if all completed, else failed;
/// - batch: once every step is terminal the due callbacks fire and the batch stays running
///   while they do; it is completed when they all completed (or none was due), failed if
///   one of them did not.
pub fn settle(kind: WorkflowKind, p: &Progress, has_due_callbacks: bool) -> Settlement {
    let terminal = p.completed + p.failed + p.cancelled;
    let all_terminal = terminal >= p.total;
    match kind {
        WorkflowKind::Chain if p.failed + p.cancelled > 0 => {
            Settlement::Finish(WorkflowState::Failed)
        }
        WorkflowKind::Chain | WorkflowKind::Group if !all_terminal => Settlement::Wait,
        WorkflowKind::Chain | WorkflowKind::Group => {
            if p.completed >= p.total {
                Settlement::Finish(WorkflowState::Completed)
            } else {
                Settlement::Finish(WorkflowState::Failed)
            }
        }
        WorkflowKind::Batch if !all_terminal => Settlement::Wait,
        WorkflowKind::Batch if !p.callbacks_fired && has_due_callbacks => Settlement::FireCallbacks,
        WorkflowKind::Batch if p.callbacks_done < p.callbacks_total => Settlement::Wait,
        WorkflowKind::Batch if p.callbacks_failed > 0 => Settlement::Finish(WorkflowState::Failed),
        WorkflowKind::Batch => Settlement::Finish(WorkflowState::Completed),
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
        step_ids: Vec::new(),
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

    #[test]
    fn typeless_requests_follow_their_dependencies() {
        // The Python SDK's chain (binding §14.1): ids, depends_on, no type.
        let chain = WorkflowSpec::from_json(json!({"name": "c", "steps": [
            {"id": "step-0", "type": "a.a", "args": [0], "depends_on": []},
            {"id": "step-1", "type": "a.b", "args": [1], "depends_on": ["step-0"]}],
            "options": {"queue": "wfq"}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(chain.kind, WorkflowKind::Chain);
        assert_eq!(chain.steps[1].depends_on, vec![0]);
        assert_eq!(chain.steps[1].id, "step-1");
        // Top-level options are every step's defaults; a step's own options win.
        assert!(chain
            .steps
            .iter()
            .all(|s| s.job.spec.queue.as_str() == "wfq"));
        let own = WorkflowSpec::from_json(json!({"steps": [
            {"type": "a.a", "options": {"queue": "mine"}}], "options": {"queue": "wfq"}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(own.steps[0].job.spec.queue.as_str(), "mine");
        assert_eq!(own.kind, WorkflowKind::Group);
        assert_eq!(own.steps[0].id, "step-0");
    }

    #[test]
    fn callback_steps_become_batch_callbacks() {
        // Python: options.callback_type; Go: ids on-complete/on-success/on-failure.
        for (ok_step, fail_step) in [
            (
                json!({"id": "on_success", "type": "cb.ok", "depends_on": ["job-0", "job-1"], "options": {"callback_type": "on_success"}}),
                json!({"id": "on_failure", "type": "cb.bad", "depends_on": ["job-0", "job-1"], "options": {"callback_type": "on_failure"}}),
            ),
            (
                json!({"id": "on-success", "type": "cb.ok", "depends_on": ["job-0", "job-1"]}),
                json!({"id": "on-failure", "type": "cb.bad", "depends_on": ["job-0", "job-1"]}),
            ),
        ] {
            let spec = WorkflowSpec::from_json(json!({"steps": [
                {"id": "job-0", "type": "w.a", "depends_on": []},
                {"id": "job-1", "type": "w.b", "depends_on": []},
                ok_step, fail_step], "options": {"queue": "bq"}}))
            .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(spec.kind, WorkflowKind::Batch);
            assert_eq!(spec.steps.len(), 2);
            let due: Vec<&str> = spec.callbacks.due(true).iter().map(|(n, _)| *n).collect();
            assert_eq!(due, vec!["on_success"]);
            let failed: Vec<&str> = spec.callbacks.due(false).iter().map(|(n, _)| *n).collect();
            assert_eq!(failed, vec!["on_failure"]);
            let template = spec.callbacks.on_success.unwrap_or_default();
            assert!(template.get("depends_on").is_none() && template.get("id").is_none());
            assert_eq!(template["options"]["queue"], "bq");
            assert!(template["options"].get("callback_type").is_none());
        }
        // With an explicit type, a step named like a callback is an ordinary step.
        let typed = WorkflowSpec::from_json(json!({"type": "group", "steps": [
            {"id": "on-success", "type": "w.a"}]}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(typed.steps.len(), 1);
        assert!(WorkflowSpec::from_json(json!({"steps": [
            {"id": "on-success", "type": "w.a"}]}))
        .is_err());
    }

    #[test]
    fn settling_rules_per_primitive() {
        let p = |total, completed, failed, cancelled| Progress {
            total,
            completed,
            failed,
            cancelled,
            ..Progress::default()
        };
        use Settlement::{Finish, FireCallbacks, Wait};
        use WorkflowState::{Completed, Failed};
        // Chain: fails at the first failure, completes when all completed.
        assert_eq!(settle(WorkflowKind::Chain, &p(3, 1, 0, 0), false), Wait);
        assert_eq!(
            settle(WorkflowKind::Chain, &p(3, 1, 1, 0), false),
            Finish(Failed)
        );
        assert_eq!(
            settle(WorkflowKind::Chain, &p(3, 1, 0, 1), false),
            Finish(Failed)
        );
        assert_eq!(
            settle(WorkflowKind::Chain, &p(3, 3, 0, 0), false),
            Finish(Completed)
        );
        // Group: waits for every job, then failed if any failed.
        assert_eq!(settle(WorkflowKind::Group, &p(3, 1, 1, 0), false), Wait);
        assert_eq!(
            settle(WorkflowKind::Group, &p(3, 2, 1, 0), false),
            Finish(Failed)
        );
        assert_eq!(
            settle(WorkflowKind::Group, &p(2, 2, 0, 0), false),
            Finish(Completed)
        );
        // Batch: callbacks first, then their outcome decides.
        assert_eq!(settle(WorkflowKind::Batch, &p(3, 2, 0, 0), true), Wait);
        assert_eq!(
            settle(WorkflowKind::Batch, &p(3, 2, 1, 0), true),
            FireCallbacks
        );
        assert_eq!(
            settle(WorkflowKind::Batch, &p(3, 2, 1, 0), false),
            Finish(Completed)
        );
        let fired = |done, failed| Progress {
            callbacks_fired: true,
            callbacks_total: 2,
            callbacks_done: done,
            callbacks_failed: failed,
            ..p(3, 2, 1, 0)
        };
        assert_eq!(settle(WorkflowKind::Batch, &fired(1, 0), true), Wait);
        assert_eq!(
            settle(WorkflowKind::Batch, &fired(2, 0), true),
            Finish(Completed)
        );
        assert_eq!(
            settle(WorkflowKind::Batch, &fired(2, 1), true),
            Finish(Failed)
        );
        for st in [
            WorkflowState::Running,
            Completed,
            Failed,
            WorkflowState::Cancelled,
        ] {
            assert_eq!(WorkflowState::parse(st.as_str()), Some(st));
        }
    }

    #[test]
    fn a_callback_that_could_not_fire_is_refused_at_creation() {
        let pad = "x".repeat(crate::validate::MAX_META_BYTES - 20);
        let body = json!({"type": "batch", "jobs": [{"type": "a"}],
            "callbacks": {"on_complete": {"type": "cb", "meta": {"pad": pad}}}});
        assert_eq!(
            WorkflowSpec::from_json(body).err().map(|e| e.code),
            Some(crate::ErrorCode::EnvelopeTooLarge)
        );
    }
}
