//! How the API shows the registries' entries (schemas, cron, webhook subscriptions, push
//! endpoints) and workflows: rendered here, from the typed records the store answers, so
//! the store holds no answer shape. Never a secret.

use std::collections::HashMap;

use ojs_core::tenant::Scope;
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, JobState};
use ojs_store::{CronEntry, PushEntry, SchemaEntry, WebhookEntry, WorkflowRecord};
use serde_json::{json, Value};

/// An entry as the API shows it.
pub(crate) trait EntryView {
    /// Its view.
    fn view(&self) -> Value;
    /// The id of the key that made it (its view's `created_by`).
    fn created_by(&self) -> Option<&str>;
}

/// `view` (an object) with the id of the key that made the entry.
fn with_creator(mut view: Value, created_by: Option<&String>) -> Value {
    if let Some(o) = view.as_object_mut() {
        o.insert("created_by".into(), json!(created_by));
    }
    view
}

/// A schema registration in a listing or a registration's answer: without its document.
pub(crate) fn schema_summary(e: &SchemaEntry) -> Value {
    with_creator(e.doc.summary(&e.created_at), e.created_by.as_ref())
}

impl EntryView for SchemaEntry {
    /// With its document.
    fn view(&self) -> Value {
        with_creator(self.doc.view(&self.created_at), self.created_by.as_ref())
    }

    fn created_by(&self) -> Option<&str> {
        self.created_by.as_deref()
    }
}

impl EntryView for CronEntry {
    fn view(&self) -> Value {
        let view = ojs_core::cron_job::view(
            &self.cron,
            &self.created_at,
            self.next_run_at.as_ref(),
            self.last_run_at.as_deref(),
            self.run_count,
        );
        with_creator(view, self.created_by.as_ref())
    }

    fn created_by(&self) -> Option<&str> {
        self.created_by.as_deref()
    }
}

impl EntryView for WebhookEntry {
    /// ojs-webhooks.md §6.3.
    fn view(&self) -> Value {
        let mut v = self.subscription.to_doc();
        if let Some(o) = v.as_object_mut() {
            o.insert("id".into(), json!(self.id));
            o.insert("created_at".into(), json!(self.created_at));
            o.insert("created_by".into(), json!(self.created_by));
            o.insert("updated_at".into(), json!(self.updated_at));
            if let Scope::One(t) = &self.tenant {
                o.insert("tenant_id".into(), json!(Scope::name(t.as_ref())));
            }
        }
        v
    }

    fn created_by(&self) -> Option<&str> {
        self.created_by.as_deref()
    }
}

impl EntryView for PushEntry {
    fn view(&self) -> Value {
        let mut view = with_creator(
            self.endpoint.view(&self.id, &self.created_at),
            self.created_by.as_ref(),
        );
        if let Some(o) = view.as_object_mut() {
            match &self.disabled {
                None => {
                    o.insert("status".into(), json!("active"));
                }
                Some((at, reason)) => {
                    o.insert("status".into(), json!("disabled"));
                    o.insert("disabled_at".into(), json!(at));
                    o.insert("disabled_reason".into(), json!(reason));
                }
            }
        }
        view
    }

    fn created_by(&self) -> Option<&str> {
        self.created_by.as_deref()
    }
}

/// A workflow as the API shows it, with the state of each step taken from its job.
///
/// Besides the counters the conformance suite reads, it carries the binding's `steps`
/// (§14.1, read by the Python and Go SDKs) and the `metadata` object of ojs-workflows §11
/// (read by the JavaScript SDK).
pub(crate) fn workflow(w: &WorkflowRecord) -> Value {
    let by_id: HashMap<JobId, &Job> = w.jobs.iter().map(|j| (j.id, j)).collect();
    let steps: Vec<Value> = step_views(w, &by_id)
        .chain(callback_views(w, &by_id))
        .collect();
    let started_at = w
        .jobs
        .iter()
        .filter_map(|j| j.status.started_at)
        .min()
        .map(|t| time::format(&t));
    let (total, completed, failed, cancelled) = (w.total, w.completed, w.failed, w.cancelled);
    json!({
        "id": w.id,
        "type": w.doc["type"],
        "name": w.doc["name"],
        "state": w.state,
        "steps_total": total,
        "steps_completed": completed,
        "steps_failed": failed,
        "steps_cancelled": cancelled,
        "jobs_total": total,
        "jobs_completed": completed,
        "jobs_failed": failed,
        "jobs_cancelled": cancelled,
        "job_ids": w.job_ids.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "steps": steps,
        "created_at": w.created_at,
        "started_at": started_at,
        "completed_at": w.completed_at,
        "metadata": {
            "created_at": w.created_at,
            "started_at": started_at,
            "completed_at": w.completed_at,
            "job_count": total,
            "completed_count": completed,
            "failed_count": failed,
            "cancelled_count": cancelled,
        },
    })
}

/// When `job` started and finished, and its result, as a step shows them.
fn step_times(job: Option<&&Job>) -> (Option<String>, Option<String>, Option<Value>) {
    let at = |t: Option<&Timestamp>| t.map(time::format);
    (
        job.and_then(|j| at(j.status.started_at.as_ref())),
        job.and_then(|j| at(j.status.completed_at.as_ref())),
        job.and_then(|j| j.status.result.clone()),
    )
}

/// The views of the workflow's steps as its description gives them, each with its job's
/// state.
fn step_views<'a>(
    w: &'a WorkflowRecord,
    by_id: &'a HashMap<JobId, &Job>,
) -> impl Iterator<Item = Value> + 'a {
    w.job_ids.iter().enumerate().map(move |(i, job_id)| {
        let described = &w.doc["steps"][i];
        let job = by_id.get(job_id);
        let (started_at, completed_at, result) = step_times(job);
        json!({
            "id": described["id"].as_str().map_or_else(|| format!("step-{i}"), str::to_owned),
            "type": described["type"].as_str().map(str::to_owned).or_else(|| job.map(|j| j.spec.job_type.to_string())),
            "depends_on": described.get("depends_on").cloned().unwrap_or_else(|| json!([])),
            "job_id": job_id.to_string(),
            "state": job.map(|j| j.status.state.as_str()),
            "started_at": started_at,
            "completed_at": completed_at,
            "result": result,
        })
    })
}

/// The views of the callback steps its description gives, each with its fired job's
/// state.
fn callback_views<'a>(
    w: &'a WorkflowRecord,
    by_id: &'a HashMap<JobId, &Job>,
) -> impl Iterator<Item = Value> + 'a {
    let finished = w.finished();
    let depends_on = w.step_names();
    w.doc["callback_steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(move |c| {
            let name = c["callback"].as_str().unwrap_or_default();
            let job = w
                .fired_callbacks
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, id)| by_id.get(id));
            // A callback that was not due when the workflow settled never runs.
            let state = match job {
                Some(j) => j.status.state.as_str(),
                None if finished && w.callbacks_decided => JobState::Cancelled.as_str(),
                None => JobState::Pending.as_str(),
            };
            let (started_at, completed_at, result) = step_times(job);
            json!({
                "id": c["id"],
                "type": c["type"],
                "depends_on": depends_on,
                "job_id": job.map(|j| j.id.to_string()),
                "state": state,
                "started_at": started_at,
                "completed_at": completed_at,
                "result": result,
            })
        })
}
