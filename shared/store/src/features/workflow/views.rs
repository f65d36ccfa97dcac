//! A workflow as the API shows it: its item and its steps' jobs, read back.

use std::collections::HashMap;

use ojs_core::time::Timestamp;
use ojs_core::workflow::WorkflowState;
use ojs_core::{Job, JobId, JobState};
use serde_json::{json, Value};

use crate::error::{Missing, StoreError};
use crate::item::{self, Item};

use super::Workflows;
use super::{fired_callbacks, ids_of_steps, job_ids, num, text, wf_key, workflow_state};

impl Workflows<'_> {
    /// The workflow's view with its steps' states (the workflow item, then its step jobs
    /// in one BatchGetItem), or NotFound.
    pub async fn get(&self, id: &str) -> Result<Value, StoreError> {
        let item = self
            .engine
            .table
            .read_existing(wf_key(id))
            .await
            .map_err(|e| e.naming(|| Missing::Workflow(id.to_owned())))?;
        let jobs = self.step_jobs(&item).await?;
        Ok(view(&item, &jobs))
    }

    /// The step jobs of a workflow item, and its fired callbacks' jobs.
    pub(crate) async fn step_jobs(&self, item: &Item) -> Result<Vec<Job>, StoreError> {
        let keys = job_ids(item)
            .iter()
            .chain(fired_callbacks(item).iter().map(|(_, id)| id))
            .map(item::job_key)
            .collect();
        let how = crate::batch_read::BatchRead {
            consistent: true,
            ..Default::default()
        };
        self.engine
            .table
            .batch_get(keys, &how)
            .await?
            .iter()
            .map(item::job_from_item)
            .collect()
    }
}

/// The JSON view of a workflow item, with the state of each step taken from `jobs` (the
/// step jobs, in any order; steps whose job is missing show no state).
///
/// Besides the counters the conformance suite reads, it carries the binding's `steps`
/// (§14.1, read by the Python and Go SDKs) and the `metadata` object of ojs-workflows §11
/// (read by the JavaScript SDK).
pub(crate) fn view(item: &Item, jobs: &[Job]) -> Value {
    let doc: Value = text(item, "doc")
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .unwrap_or(Value::Null);
    let total = num(item, "total");
    let completed = num(item, "completed");
    let failed = num(item, "failed");
    let cancelled = num(item, "cancelled");
    let ids = job_ids(item);
    let by_id: HashMap<JobId, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let steps: Vec<Value> = step_views(&doc, &ids, &by_id)
        .chain(callback_views(item, &doc, &by_id))
        .collect();
    let started_at = jobs
        .iter()
        .filter_map(|j| j.status.started_at)
        .min()
        .map(|t| ojs_core::time::format(&t));
    let id = text(item, "pk").and_then(|pk| pk.strip_prefix("WF#").map(str::to_owned));
    json!({
        "id": id,
        "type": doc["type"],
        "name": doc["name"],
        "state": text(item, "state"),
        "steps_total": total,
        "steps_completed": completed,
        "steps_failed": failed,
        "steps_cancelled": cancelled,
        "jobs_total": total,
        "jobs_completed": completed,
        "jobs_failed": failed,
        "jobs_cancelled": cancelled,
        "job_ids": ids.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "steps": steps,
        "created_at": text(item, "created_at"),
        "started_at": started_at,
        "completed_at": text(item, "completed_at"),
        "metadata": {
            "created_at": text(item, "created_at"),
            "started_at": started_at,
            "completed_at": text(item, "completed_at"),
            "job_count": total,
            "completed_count": completed,
            "failed_count": failed,
            "cancelled_count": cancelled,
        },
    })
}

/// The views of the steps `ids` as `doc` describes them, each with its job's state.
fn step_views<'a>(
    doc: &'a Value,
    ids: &'a [JobId],
    by_id: &'a HashMap<JobId, &Job>,
) -> impl Iterator<Item = Value> + 'a {
    ids.iter().enumerate().map(move |(i, job_id)| {
        let described = &doc["steps"][i];
        let job = by_id.get(job_id);
        let at = |t: Option<&Timestamp>| t.map(ojs_core::time::format);
        json!({
            "id": described["id"].as_str().map_or_else(|| format!("step-{i}"), str::to_owned),
            "type": described["type"].as_str().map(str::to_owned).or_else(|| job.map(|j| j.spec.job_type.to_string())),
            "depends_on": described.get("depends_on").cloned().unwrap_or_else(|| json!([])),
            "job_id": job_id.to_string(),
            "state": job.map(|j| j.status.state.as_str()),
            "started_at": job.and_then(|j| at(j.status.started_at.as_ref())),
            "completed_at": job.and_then(|j| at(j.status.completed_at.as_ref())),
            "result": job.and_then(|j| j.status.result.clone()),
        })
    })
}

/// The views of the callback steps `doc` describes, each with its fired job's state.
fn callback_views<'a>(
    item: &'a Item,
    doc: &'a Value,
    by_id: &'a HashMap<JobId, &Job>,
) -> impl Iterator<Item = Value> + 'a {
    let fired = fired_callbacks(item);
    let finished = workflow_state(item) != Some(WorkflowState::Running);
    doc["callback_steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(move |c| {
            let name = c["callback"].as_str().unwrap_or_default();
            let job = fired
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, id)| by_id.get(id));
            // A callback that was not due when the workflow settled never runs.
            let state = match job {
                Some(j) => j.status.state.as_str(),
                None if finished && item.contains_key("cb_fired") => JobState::Cancelled.as_str(),
                None => JobState::Pending.as_str(),
            };
            json!({
                "id": c["id"],
                "type": c["type"],
                "depends_on": ids_of_steps(doc),
                "job_id": job.map(|j| j.id.to_string()),
                "state": state,
                "started_at": job.and_then(|j| j.status.started_at.as_ref().map(ojs_core::time::format)),
                "completed_at": job.and_then(|j| j.status.completed_at.as_ref().map(ojs_core::time::format)),
                "result": job.and_then(|j| j.status.result.clone()),
            })
        })
}
