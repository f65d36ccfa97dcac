//! Workflows on DynamoDB. A workflow item (`WF#<id>`) holds the graph and counters; each
//! step is an ordinary job carrying `wf_id`/`wf_step`, created `pending` (with
//! `deps_left`) when it waits for other steps.
//!
//! When a step (or a batch callback) reaches a terminal state, the transition answers the
//! follow-up it owes ([`crate::effects::Moved`]) and the request that made it runs it
//! ([`crate::Lifecycle`]: [`Workflows::advance_workflow`]), and every write that follows
//! is idempotent:
//! the step is recorded once (`ADD done_steps` and its counter, conditional on the step
//! not being recorded yet), a dependent counts a parent off once (`deps_done`), a pending
//! step is cancelled only while pending, callbacks fire in one transaction guarded by
//! `cb_fired`, and the final state is set only while running ([`workflow::settle`] holds
//! the rules). A request that dies part-way loses nothing: the job's terminal state is
//! durable, and the sweep checks every running workflow (a due entry in
//! `DUE#~workflows#<n>`) and repeats the follow-ups it finds missing.
//!
//! Here: the item's helpers; in `create`, `views`, `progress` (steps finishing, cancel),
//! `callbacks` and `check` (the sweep's), each part.

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValue;
use ojs_core::workflow::{Progress, WorkflowState};
use ojs_core::{JobId, JobState};
use serde_json::Value;

use crate::effects::StepOutcome;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{item_key, n, s, ts, Item};
use crate::keys;
use crate::usage::Kind;
use ojs_core::time::Timestamp;

mod callbacks;
mod check;
mod create;
mod progress;
mod views;
pub use views::WorkflowRecord;

pub(crate) fn wf_key(id: &str) -> Item {
    item_key(format!("WF#{id}"), "WF")
}

pub(crate) fn num(item: &Item, k: &str) -> i64 {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn text(item: &Item, k: &str) -> Option<String> {
    item.get(k).and_then(|v| v.as_s().ok()).cloned()
}

service! {
    /// Workflows (chains, groups, batches): their creation, views, steps' progress,
    /// callbacks and the sweep's check. Holds the engine, through which every step moves.
    Workflows over engine: Engine
}

impl Workflows<'_> {
    /// An UpdateItem of workflow `wf_id`'s item.
    pub(crate) fn wf_update(&self, wf_id: &str) -> UpdateItemFluentBuilder {
        self.engine.table.update_at(wf_key(wf_id))
    }

    /// The one write of a workflow's own state: out of `running` (the only state a
    /// workflow leaves) into `to`, stamped `completed_at`. A workflow that finished leaves
    /// the sweep's checks (its due entry goes); a cancelled one stays on them until its
    /// steps have finished (`check.rs`). Refused before anything is sent for `running`.
    pub(crate) fn wf_finish(
        &self,
        wf_id: &str,
        to: WorkflowState,
        now: Timestamp,
    ) -> Result<UpdateItemFluentBuilder, StoreError> {
        let update = match to {
            WorkflowState::Running => {
                return Err(StoreError::Backend(format!(
                    "internal: a workflow write of {wf_id} back to running"
                )))
            }
            WorkflowState::Cancelled => "SET #state = :state, completed_at = :now",
            WorkflowState::Completed | WorkflowState::Failed => {
                "SET #state = :state, completed_at = :now REMOVE gsi2pk, gsi2sk"
            }
        };
        Ok(self
            .wf_update(wf_id)
            .update_expression(update)
            .condition_expression("#state = :running")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":state", s(to.as_str()))
            .expression_attribute_values(":running", s(WorkflowState::Running.as_str()))
            .expression_attribute_values(":now", ts(&now)))
    }

    /// Sends the conditional UpdateItem `req` of a workflow item with ALL_NEW: the item
    /// after it, or `None` when its condition failed.
    pub(crate) async fn workflow_update(
        &self,
        req: UpdateItemFluentBuilder,
    ) -> Result<Option<Item>, StoreError> {
        let out = req.return_values(ReturnValue::AllNew).send().await;
        Ok(self
            .engine
            .table
            .tally_conditional(Kind::Write, out)?
            .and_then(|out| out.attributes().cloned()))
    }

    /// Sends the conditional UpdateItem `req` of a workflow item whose failed condition
    /// leaves nothing to do.
    pub(crate) async fn update_unless_done(
        &self,
        req: UpdateItemFluentBuilder,
    ) -> Result<(), StoreError> {
        self.engine
            .table
            .tally_conditional(Kind::Write, req.send().await)
            .map(|_| ())
    }
}

/// Times a workflow follow-up that failed transiently is tried again within the request
/// that finished its job, beyond the SDK's own retries (backoff from 25-50 ms, doubling:
/// at most 0.75 s of waiting in all), before it is left to the sweep.
pub(crate) const FOLLOW_UP_RETRIES: u32 = 4;

/// When a running workflow is first checked by the sweep, after its creation.
pub(crate) const CHECK_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
/// The longest wait between two checks of a running workflow.
pub(crate) const MAX_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(900);
/// Most bytes of parent results a waiting step accumulates, shared among its
/// dependencies; a larger result is passed as a reference to its job.
pub(crate) const MAX_PARENT_RESULTS_BYTES: usize = 64 * 1024;

impl StepOutcome {
    /// The outcome a terminal job state stands for (None while the job is live).
    pub(crate) fn of(state: JobState) -> Option<Self> {
        match state {
            JobState::Completed => Some(Self::Completed),
            JobState::Discarded => Some(Self::Failed),
            JobState::Cancelled => Some(Self::Cancelled),
            _ => None,
        }
    }
}

/// The stored immutable part of a workflow (its graph, kind and callbacks).
pub(crate) fn workflow_doc(item: &Item) -> Value {
    text(item, "doc")
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .unwrap_or(Value::Null)
}

pub(crate) fn workflow_state(item: &Item) -> Option<WorkflowState> {
    text(item, "state")
        .as_deref()
        .and_then(WorkflowState::parse)
}

/// The counts of a workflow item.
pub(crate) fn progress_of(item: &Item) -> Progress {
    let count = |k: &str| u64::try_from(num(item, k)).unwrap_or(0);
    Progress {
        total: count("total"),
        completed: count("completed"),
        failed: count("failed"),
        cancelled: count("cancelled"),
        callbacks_fired: item.contains_key("cb_fired"),
        callbacks_total: count("cb_total"),
        callbacks_done: count("cb_completed") + count("cb_failed"),
        callbacks_failed: count("cb_failed"),
    }
}

/// The callbacks fired for a workflow item: (name, job id).
pub(crate) fn fired_callbacks(item: &Item) -> Vec<(String, JobId)> {
    item.get("cb_jobs")
        .and_then(|v| v.as_m().ok())
        .map(|m| {
            m.iter()
                .filter_map(|(name, v)| Some((name.clone(), JobId::parse(v.as_s().ok()?).ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The ids of a stored workflow's (non-callback) steps.
pub(crate) fn ids_of_steps(doc: &Value) -> Vec<Value> {
    doc["steps"]
        .as_array()
        .map(|steps| steps.iter().map(|s| s["id"].clone()).collect())
        .unwrap_or_default()
}

/// The ids of a workflow's jobs, in step order.
pub(crate) fn job_ids(item: &Item) -> Vec<JobId> {
    crate::item::job_ids_of(item, "job_ids")
}

impl Workflows<'_> {
    /// Moves a workflow's next check out (1 minute, doubling to at most 15), or ends its
    /// checks once it is settled.
    pub(crate) async fn reschedule_check(
        &self,
        wf_id: &str,
        item: &Item,
        settled: bool,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let req = self
            .wf_update(wf_id)
            .condition_expression("attribute_exists(pk)");
        let req = if settled {
            req.update_expression("REMOVE gsi2pk, gsi2sk")
        } else {
            let checks = u32::try_from(num(item, "checks")).unwrap_or(0);
            let wait = CHECK_AFTER * 2u32.saturating_pow(checks.min(4));
            let at = ojs_core::time::after(now, wait.min(MAX_CHECK_INTERVAL));
            req.update_expression("SET gsi2pk = :pk, gsi2sk = :sk ADD checks :one")
                .expression_attribute_values(":pk", s(keys::workflow_due_pk(wf_id)))
                .expression_attribute_values(":sk", s(keys::workflow_due_sk(&at, wf_id)))
                .expression_attribute_values(":one", n(1))
        };
        self.update_unless_done(req).await
    }
}
