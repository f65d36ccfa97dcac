//! A workflow as read: its item and its steps' jobs, as a [`WorkflowRecord`] (the HTTP
//! layer renders it).

use ojs_core::workflow::WorkflowState;
use ojs_core::{Job, JobId};
use serde_json::Value;

use crate::error::{Missing, StoreError};
use crate::item::{self, Item};

use super::Workflows;
use super::{fired_callbacks, ids_of_steps, job_ids, num, text, wf_key};

impl Workflows<'_> {
    /// The workflow with its steps' jobs (the workflow item, then its step jobs in one
    /// BatchGetItem), or NotFound.
    pub async fn get(&self, id: &str) -> Result<WorkflowRecord, StoreError> {
        let item = self.workflow_item(id).await?;
        let jobs = self.step_jobs(&item).await?;
        Ok(WorkflowRecord::of(&item, jobs))
    }

    /// Workflow `id`'s item (strongly consistent), or NotFound naming the workflow.
    pub(crate) async fn workflow_item(&self, id: &str) -> Result<Item, StoreError> {
        self.engine
            .table
            .read_existing(wf_key(id))
            .await
            .map_err(|e| e.naming(|| Missing::Workflow(id.to_owned())))
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

/// A workflow as stored, with its steps' and fired callbacks' jobs (in any order; a step
/// whose job is missing has none).
#[derive(Debug, Clone)]
pub struct WorkflowRecord {
    /// Its id.
    pub id: Option<String>,
    /// Its stored description (`type`, `name`, `steps`, `callback_steps`).
    pub doc: Value,
    /// Its state as stored (`running`, `completed`, `failed`, `cancelled`).
    pub state: Option<String>,
    /// Steps in all, and those completed, failed and cancelled so far.
    pub total: i64,
    /// Steps completed.
    pub completed: i64,
    /// Steps failed.
    pub failed: i64,
    /// Steps cancelled.
    pub cancelled: i64,
    /// Its steps' job ids, in step order.
    pub job_ids: Vec<JobId>,
    /// The callbacks fired, by callback name, with their jobs' ids.
    pub fired_callbacks: Vec<(String, JobId)>,
    /// Whether its callbacks have been decided (a callback not fired by then never runs).
    pub callbacks_decided: bool,
    /// When it was created.
    pub created_at: Option<String>,
    /// When it finished.
    pub completed_at: Option<String>,
    /// The jobs of its steps and fired callbacks.
    pub jobs: Vec<Job>,
}

impl WorkflowRecord {
    /// The record of workflow item `item` with its jobs `jobs`.
    pub(crate) fn of(item: &Item, jobs: Vec<Job>) -> Self {
        Self {
            id: text(item, "pk").and_then(|pk| pk.strip_prefix("WF#").map(str::to_owned)),
            doc: text(item, "doc")
                .and_then(|raw| serde_json::from_str(&raw).ok())
                .unwrap_or(Value::Null),
            state: text(item, "state"),
            total: num(item, "total"),
            completed: num(item, "completed"),
            failed: num(item, "failed"),
            cancelled: num(item, "cancelled"),
            job_ids: job_ids(item),
            fired_callbacks: fired_callbacks(item),
            callbacks_decided: item.contains_key("cb_fired"),
            created_at: text(item, "created_at"),
            completed_at: text(item, "completed_at"),
            jobs,
        }
    }

    /// Whether it has finished (or was cancelled).
    pub fn finished(&self) -> bool {
        self.state.as_deref().and_then(WorkflowState::parse) != Some(WorkflowState::Running)
    }

    /// The ids its (non-callback) steps are described by, which its callbacks depend on.
    pub fn step_names(&self) -> Vec<Value> {
        ids_of_steps(&self.doc)
    }
}
