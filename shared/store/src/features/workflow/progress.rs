//! A workflow moving on as its steps finish: each step recorded once, dependents released
//! (or cancelled), the final state set once; and cancelling a workflow.

use super::views::WorkflowRecord;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use ojs_core::time::Timestamp;
use ojs_core::workflow::{self, Settlement, WorkflowKind, WorkflowState};
use ojs_core::{Job, JobId, JobState, Transition};
use serde_json::{json, Value};

use crate::effects::Before;
use crate::effects::StepOutcome;
use crate::error::{is_condition_failure, StoreError};
use crate::item::{self, json as json_attr, n, s, Item};
use crate::job_item::old_item;
use crate::transition::{Field, JobWrite, Place};
use crate::usage::Kind;

use super::Workflows;
use super::{
    job_ids, num, progress_of, wf_key, workflow_doc, workflow_state, FOLLOW_UP_RETRIES,
    MAX_PARENT_RESULTS_BYTES,
};

impl Workflows<'_> {
    /// Cancels a running workflow and every step that has not finished.
    pub async fn cancel(&self, id: &str, now: Timestamp) -> Result<WorkflowRecord, StoreError> {
        let out = self
            .wf_finish(id, WorkflowState::Cancelled, now)?
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let item = match self.engine.table.metered(Kind::Write, out) {
            Ok(out) => out.attributes().cloned().unwrap_or_default(),
            Err(e) => {
                if is_condition_failure(&e) {
                    // Finished or already cancelled: 409, or 404 when unknown. A
                    // cancellation that stopped part-way is completed first.
                    let item = self.workflow_item(id).await?;
                    if workflow_state(&item) == Some(WorkflowState::Cancelled) {
                        for job_id in job_ids(&item) {
                            self.cancel_step(&job_id, now).await?;
                        }
                    }
                    return Err(StoreError::Conflict { current: None });
                }
                return Err(StoreError::from_sdk(e));
            }
        };
        let mut cancelled = 0;
        for job_id in job_ids(&item) {
            if self.cancel_step(&job_id, now).await? {
                cancelled += 1;
            }
        }
        let item = match self.add_to_workflow(id, "cancelled", cancelled).await? {
            Some(updated) => updated,
            None => item,
        };
        self.reschedule_check(id, &item, true, now).await?;
        let jobs = self.step_jobs(&item).await?;
        Ok(WorkflowRecord::of(&item, jobs))
    }

    /// Cancels one step without feeding the cancellation back into the workflow; `true`
    /// when this call cancelled it.
    pub(crate) async fn cancel_step(&self, id: &JobId, now: Timestamp) -> Result<bool, StoreError> {
        match self.engine.cancel_job_quietly(id, now).await {
            Ok(_cancelled) => Ok(true),
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// What follows a workflow job's terminal transition: the step (or batch callback) is
    /// recorded on the workflow once, its dependents are released or cancelled, and the
    /// workflow settles. Every write is idempotent (conditional on not having happened),
    /// so a retried or repeated call changes nothing twice, and the sweep repeats it for a
    /// workflow whose request died ([`Store::check_workflows`]).
    pub(crate) async fn advance_workflow(
        &self,
        job: &Job,
        outcome: StepOutcome,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let Some(wf_id) = job.status.workflow_id.as_deref() else {
            return Ok(());
        };
        if let Some(name) = &job.status.workflow_callback {
            if let Some(item) = self.record_callback(wf_id, name, outcome).await? {
                self.settle_workflow(wf_id, &item, now).await?;
            }
            return Ok(());
        }
        let Some(step) = job
            .status
            .workflow_step
            .and_then(|s| usize::try_from(s).ok())
        else {
            return Ok(());
        };
        let Some(item) = self.record_step(wf_id, step, outcome).await? else {
            return Ok(());
        };
        self.follow_step(wf_id, &item, step, outcome, job, now)
            .await
    }

    /// Releases or cancels what waits for `step`, then settles the workflow.
    pub(crate) async fn follow_step(
        &self,
        wf_id: &str,
        item: &Item,
        step: usize,
        outcome: StepOutcome,
        job: &Job,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let doc = workflow_doc(item);
        let ids = job_ids(item);
        let dependents = workflow::stored_dependents(&doc, step);
        if outcome == StepOutcome::Completed {
            let result = job.status.result.clone().unwrap_or(Value::Null);
            for d in dependents {
                if let Some(dep) = ids.get(d) {
                    let waits_for = doc["steps"][d]["depends_on"].as_array().map_or(1, Vec::len);
                    let result = bounded_result(&result, &job.id, waits_for);
                    self.release_dependent(dep, step, &result, now).await?;
                }
            }
        } else {
            // A step that did not complete: nothing downstream of it can ever run.
            let mut stack = dependents;
            let mut seen = std::collections::HashSet::new();
            while let Some(d) = stack.pop() {
                if !seen.insert(d) {
                    continue;
                }
                stack.extend(workflow::stored_dependents(&doc, d));
                if let Some(dep) = ids.get(d) {
                    if self.cancel_pending(dep, now).await? {
                        self.record_step(wf_id, d, StepOutcome::Cancelled).await?;
                    }
                }
            }
        }
        // Read again: the cancellations above moved the counts.
        match self.engine.table.read_item(wf_key(wf_id)).await? {
            Some(item) => self.settle_workflow(wf_id, &item, now).await,
            None => Ok(()),
        }
    }

    /// Records that `step` ended with `outcome`: `ADD` of the step to `done_steps` and of
    /// one to the outcome's counter, in one write conditional on the step not being there
    /// yet. The workflow item after it (also when it was already recorded), or None when
    /// the workflow is gone.
    pub(crate) async fn record_step(
        &self,
        wf_id: &str,
        step: usize,
        outcome: StepOutcome,
    ) -> Result<Option<Item>, StoreError> {
        let counter = match outcome {
            StepOutcome::Completed => "completed",
            StepOutcome::Failed => "failed",
            StepOutcome::Cancelled => "cancelled",
        };
        self.record_once(wf_id, "done_steps", &step.to_string(), counter)
            .await
    }

    /// Records that the fired batch callback `name` ended with `outcome`.
    pub(crate) async fn record_callback(
        &self,
        wf_id: &str,
        name: &str,
        outcome: StepOutcome,
    ) -> Result<Option<Item>, StoreError> {
        let counter = if outcome == StepOutcome::Completed {
            "cb_completed"
        } else {
            "cb_failed"
        };
        self.record_once(wf_id, "cb_done", name, counter).await
    }

    /// `ADD #set :member, #counter 1` unless `member` is in the set already.
    pub(crate) async fn record_once(
        &self,
        wf_id: &str,
        set: &str,
        member: &str,
        counter: &str,
    ) -> Result<Option<Item>, StoreError> {
        let req = self
            .wf_update(wf_id)
            .update_expression("ADD #set :members, #c :one")
            .condition_expression("attribute_exists(pk) AND NOT contains(#set, :member)")
            .expression_attribute_names("#set", set)
            .expression_attribute_names("#c", counter)
            .expression_attribute_values(":members", AttributeValue::Ss(vec![member.to_owned()]))
            .expression_attribute_values(":member", s(member))
            .expression_attribute_values(":one", n(1));
        match self.workflow_update(req).await? {
            Some(item) => Ok(Some(item)),
            // Recorded already (or gone): the item as it stands.
            None => self.engine.table.read_item(wf_key(wf_id)).await,
        }
    }

    /// `ADD counter :by` on the workflow, returning the new item (None if it is gone).
    pub(crate) async fn add_to_workflow(
        &self,
        wf_id: &str,
        counter: &str,
        by: usize,
    ) -> Result<Option<Item>, StoreError> {
        let req = self
            .wf_update(wf_id)
            .update_expression("ADD #c :by")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#c", counter)
            .expression_attribute_values(":by", n(by));
        self.workflow_update(req).await
    }

    /// Step `parent` of a pending step is done: its result is passed on and one
    /// dependency is counted off, once (conditional on `parent` not in `deps_done`);
    /// the write that counts off the last one makes the step available.
    pub(crate) async fn release_dependent(
        &self,
        id: &JobId,
        parent: usize,
        result: &Value,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let out = self
            .engine
            .update(id)
            .update_expression(
                "ADD deps_left :minus, deps_done :parents \
                 SET parent_results = list_append(if_not_exists(parent_results, :empty), :result)",
            )
            .condition_expression("#state = :pending AND NOT contains(deps_done, :parent)")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":pending", s(JobState::Pending.as_str()))
            .expression_attribute_values(":minus", n(-1))
            .expression_attribute_values(":parents", AttributeValue::Ss(vec![parent.to_string()]))
            .expression_attribute_values(":parent", s(parent.to_string()))
            .expression_attribute_values(":empty", AttributeValue::L(Vec::new()))
            .expression_attribute_values(":result", AttributeValue::L(vec![json_attr(result)]))
            .send()
            .await;
        // After the write, or as it stood when this parent had been counted off already
        // (an earlier try whose answer was lost may have been the last one).
        let (left, item) = match &out {
            Ok(o) => (
                o.attributes().map(|a| num(a, "deps_left")),
                o.attributes().cloned(),
            ),
            Err(e) => (
                old_item(e).map(|a| num(a, "deps_left")),
                old_item(e).cloned(),
            ),
        };
        match self.engine.finish_update(out) {
            Ok(_) | Err(StoreError::Conflict { .. }) => {}
            Err(StoreError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        }
        let Some(item) = item.filter(|_| left.is_some_and(|l| l <= 0)) else {
            return Ok(());
        };
        let job = item::job_from_item(&item)?;
        if job.status.state != JobState::Pending {
            return Ok(());
        }
        self.activate_pending(&job, now).await
    }

    /// A pending job whose wait is over becomes available (conditional on the version
    /// read); losing the race to another writer is fine.
    pub(crate) async fn activate_pending(
        &self,
        job: &Job,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let write = JobWrite::new(Transition::Activate, self.engine.ready_place(job, &now))
            .version(job.status.version)
            .stamp(Field::EnqueuedAt, &now)
            .clear(Field::DepsLeft);
        match self.engine.transition_read(job, write).await {
            Ok(activated) => {
                activated.unfinished();
                Ok(())
            }
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Everything a terminal transition sets off: the workflow's bookkeeping and the
    /// release of a cron occurrence queued behind this job (`overlap_policy: enqueue`).
    /// The transition itself has succeeded, so a failure here is not the caller's: it is
    /// logged, and the sweep completes a workflow's part ([`Store::check_workflows`]).
    #[tracing::instrument(name = "follow_up", level = "error", skip_all, fields(job_id = %job.id, queue = %job.spec.queue))]
    pub(crate) async fn after_terminal(&self, job: &Job, outcome: StepOutcome, now: Timestamp) {
        // Every write of the follow-up is conditional on not having happened, so a
        // throttled or failed one is simply tried again: left to the sweep, a workflow
        // would wait up to CHECK_AFTER for a step's release or its final state.
        let mut round = 0;
        loop {
            match self.advance_workflow(job, outcome, now).await {
                Ok(()) => break,
                Err(e) if e.is_transient() && round < FOLLOW_UP_RETRIES => {
                    round += 1;
                    tokio::time::sleep(crate::batch_read::backoff(round)).await;
                }
                Err(e) => {
                    tracing::warn!(job_id = %job.id, error = %e, "workflow follow-up left to the sweep");
                    break;
                }
            }
        }
        if let Some(next) = job
            .status
            .successor
            .as_deref()
            .and_then(|s| JobId::parse(s).ok())
        {
            let activated = match self.engine.get_job(&next).await {
                Ok(Some(waiting)) if waiting.status.state == JobState::Pending => {
                    self.activate_pending(&waiting, now).await
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = activated {
                tracing::warn!(job_id = %job.id, error = %e, "queued cron occurrence not released");
            }
        }
    }

    /// Cancels a step that is still waiting; `true` when it was.
    pub(crate) async fn cancel_pending(
        &self,
        id: &JobId,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        // Quietly: the workflow cancelling its waiting steps records them itself.
        let write = JobWrite::new(
            Transition::Cancel,
            Place::Retained {
                ttl: self.engine.expiry(&now),
            },
        )
        .from(JobState::Pending)
        .stamp(Field::CancelledAt, &now)
        .quietly();
        let before = Before {
            state: JobState::Pending,
            lease_us: None,
        };
        match self.engine.transition(id, write, Some(before)).await {
            Ok(cancelled) => {
                cancelled.unfinished();
                Ok(true)
            }
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Applies [`workflow::settle`] to a running workflow: finishes it, or fires the batch
    /// callbacks due.
    pub(crate) async fn settle_workflow(
        &self,
        wf_id: &str,
        item: &Item,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        if workflow_state(item) != Some(WorkflowState::Running) {
            return Ok(());
        }
        let doc = workflow_doc(item);
        let kind = doc["type"]
            .as_str()
            .and_then(WorkflowKind::parse)
            .unwrap_or(WorkflowKind::Chain);
        let progress = progress_of(item);
        let callbacks = workflow::stored_callbacks(&doc);
        let all_succeeded = progress.failed + progress.cancelled == 0;
        match workflow::settle(kind, &progress, !callbacks.due(all_succeeded).is_empty()) {
            Settlement::Wait => Ok(()),
            Settlement::Finish(state) => self.finish_workflow(wf_id, state, now).await,
            Settlement::FireCallbacks => {
                self.fire_callbacks(wf_id, &callbacks, all_succeeded, now)
                    .await
            }
        }
    }

    /// Sets a running workflow's final state and takes it off the sweep's checks.
    pub(crate) async fn finish_workflow(
        &self,
        wf_id: &str,
        state: WorkflowState,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let req = self.wf_finish(wf_id, state, now)?;
        self.update_unless_done(req).await
    }
}

/// A parent's result as passed to a step waiting for `waits_for` parents: as is when it
/// fits its share of [`MAX_PARENT_RESULTS_BYTES`], else a reference to the parent job.
pub(crate) fn bounded_result(result: &Value, parent: &JobId, waits_for: usize) -> Value {
    let size = ojs_core::validate::json_size(result);
    if size <= MAX_PARENT_RESULTS_BYTES / waits_for.max(1) {
        return result.clone();
    }
    json!({"job_id": parent.to_string(), "result_truncated": true, "result_bytes": size})
}
