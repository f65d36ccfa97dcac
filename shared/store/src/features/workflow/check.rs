//! The sweep's check of running workflows: each has a due entry; a workflow whose follow-
//! ups a dying request left undone is found and moved on.

use ojs_core::time::Timestamp;
use ojs_core::workflow::WorkflowState;

use std::time::Instant;

use crate::effects::StepOutcome;
use crate::error::StoreError;
use crate::keys;

use super::Workflows;
use super::{fired_callbacks, job_ids, wf_key, workflow_state};

impl Workflows<'_> {
    /// The sweep's repair of workflows whose follow-ups a dying request left undone: every
    /// running (or cancelled but unsettled) workflow carries a due entry in
    /// `DUE#~workflows#<n>`; each one due is checked ([`Store::check_workflow`]) and
    /// looked at again later, less often each time, until it finishes. Returns how many
    /// were checked.
    pub async fn check_workflows(
        &self,
        now: Timestamp,
        budget: Instant,
    ) -> Result<usize, StoreError> {
        let mut checked = 0;
        for shard in 0..u64::from(keys::WORKFLOW_DUE_SHARDS) {
            let query = self
                .engine
                .due_query(&keys::workflow_due_shard_pk(shard), &now)
                .limit(50);
            let mut pages = self.engine.table.pages(query);
            loop {
                if Instant::now() >= budget {
                    return Ok(checked);
                }
                let Some(out) = pages.next().await? else {
                    break;
                };
                for i in out.items() {
                    let Some(id) =
                        crate::item::get_s(i, "pk").and_then(|pk| pk.strip_prefix("WF#"))
                    else {
                        continue;
                    };
                    checked += 1;
                    if let Err(e) = self.check_workflow(id, now).await {
                        tracing::warn!(workflow_id = id, error = %e, "workflow check failed; retried next sweep");
                    }
                }
            }
        }
        Ok(checked)
    }

    /// Brings one workflow up to date with its step jobs: every terminal step recorded and
    /// followed up, every fired callback recorded, the workflow settled; then, if it is
    /// still running, the next check is scheduled further out.
    pub(crate) async fn check_workflow(
        &self,
        wf_id: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let Some(item) = self.engine.table.read_item(wf_key(wf_id)).await? else {
            return Ok(());
        };
        let jobs = self.step_jobs(&item).await?;
        let cancelled = workflow_state(&item) == Some(WorkflowState::Cancelled);
        let ids = job_ids(&item);
        for (step, id) in ids.iter().enumerate() {
            let Some(job) = jobs.iter().find(|j| j.id == *id) else {
                continue;
            };
            if cancelled && !job.status.state.is_terminal() {
                // A cancellation that stopped part-way.
                self.cancel_step(id, now).await?;
                continue;
            }
            let Some(outcome) = StepOutcome::of(job.status.state) else {
                continue;
            };
            // Idempotent: a step recorded already only has its follow-ups repeated, and
            // each of those is conditional too.
            if let Some(item) = self.record_step(wf_id, step, outcome).await? {
                self.follow_step(wf_id, &item, step, outcome, job, now)
                    .await?;
            }
        }
        for (name, id) in fired_callbacks(&item) {
            if let Some(outcome) = jobs
                .iter()
                .find(|j| j.id == id)
                .and_then(|j| StepOutcome::of(j.status.state))
            {
                self.record_callback(wf_id, &name, outcome).await?;
            }
        }
        let Some(item) = self.engine.table.read_item(wf_key(wf_id)).await? else {
            return Ok(());
        };
        self.settle_workflow(wf_id, &item, now).await?;
        let Some(item) = self.engine.table.read_item(wf_key(wf_id)).await? else {
            return Ok(());
        };
        let settled = match workflow_state(&item) {
            Some(WorkflowState::Running) => false,
            Some(WorkflowState::Cancelled) => jobs.iter().all(|j| j.status.state.is_terminal()),
            _ => true,
        };
        self.reschedule_check(wf_id, &item, settled, now).await
    }
}
