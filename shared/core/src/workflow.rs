//! Workflows (ojs-workflows.md): chain, group and batch requests, and the dependency
//! graph they describe. A chain is a graph where each step depends on the one before; a
//! group has no edges; a batch is a group with callbacks; steps with `id`/`depends_on`
//! give any acyclic graph.

use serde_json::{Map, Value};

use crate::error::OjsError;
use crate::job::NewJob;
use crate::tenant;

mod parse;

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

impl WorkflowSpec {
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
        let fired = |done, failed| Progress {
            callbacks_fired: true,
            callbacks_total: 2,
            callbacks_done: done,
            callbacks_failed: failed,
            ..p(3, 2, 1, 0)
        };
        use Settlement::{Finish, FireCallbacks, Wait};
        use WorkflowKind::{Batch, Chain, Group};
        use WorkflowState::{Completed, Failed};
        // (kind, progress, whether callbacks are due, settlement)
        let cases = [
            // Chain: fails at the first failure, completes when all completed.
            (Chain, p(3, 1, 0, 0), false, Wait),
            (Chain, p(3, 1, 1, 0), false, Finish(Failed)),
            (Chain, p(3, 1, 0, 1), false, Finish(Failed)),
            (Chain, p(3, 3, 0, 0), false, Finish(Completed)),
            // Group: waits for every job, then failed if any failed.
            (Group, p(3, 1, 1, 0), false, Wait),
            (Group, p(3, 2, 1, 0), false, Finish(Failed)),
            (Group, p(2, 2, 0, 0), false, Finish(Completed)),
            // Batch: callbacks first, then their outcome decides.
            (Batch, p(3, 2, 0, 0), true, Wait),
            (Batch, p(3, 2, 1, 0), true, FireCallbacks),
            (Batch, p(3, 2, 1, 0), false, Finish(Completed)),
            (Batch, fired(1, 0), true, Wait),
            (Batch, fired(2, 0), true, Finish(Completed)),
            (Batch, fired(2, 1), true, Finish(Failed)),
        ];
        for (kind, progress, due, want) in cases {
            assert_eq!(
                settle(kind, &progress, due),
                want,
                "{kind:?} {progress:?} {due}"
            );
        }
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
