//! Creating a workflow: its item and its steps' jobs in one transaction (steps that wait
//! created `pending`), its check's due entry.

use super::callbacks::callback_job;
use super::views::WorkflowRecord;
use ojs_core::time::Timestamp;
use ojs_core::workflow::{WorkflowSpec, WorkflowState};
use ojs_core::{Job, JobState};
use serde_json::Value;

use crate::error::StoreError;
use crate::item::{self, n, s, ts, Item};
use crate::keys;
use crate::usage::Kind;

use super::Workflows;
use super::{wf_key, CHECK_AFTER};

impl Workflows<'_> {
    /// Creates a workflow and all its step jobs in one transaction. Steps without
    /// dependencies are available at once; the others wait as `pending`.
    pub async fn create(
        &self,
        spec: &WorkflowSpec,
        now: Timestamp,
    ) -> Result<WorkflowRecord, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let jobs = step_jobs(spec, &id, now);
        // Sizes are checked before anything is written; a step too large for its item
        // keeps its args and meta in the payload bucket, as a pushed job does.
        let bodies = jobs
            .iter()
            .map(|j| self.engine.offload_body(j))
            .collect::<Result<Vec<_>, _>>()?;
        check_callbacks(spec, &id, now)?;
        let wf = workflow_item(spec, &id, &jobs, now);
        let mut items = vec![self.engine.table.put_new(wf.clone())?];
        for job in &jobs {
            self.engine
                .register_lane(&crate::keys::Lane::of(job))
                .await?;
        }
        let (job_items, payloads) = self.engine.new_job_items(&jobs, bodies).await?;
        for (i, (mut it, step)) in job_items.into_iter().zip(&spec.steps).enumerate() {
            it.insert("wf_id".into(), s(id.clone()));
            it.insert("wf_step".into(), n(i));
            if !step.depends_on.is_empty() {
                it.insert("deps_left".into(), n(step.depends_on.len()));
            }
            items.push(self.engine.table.put_new(it)?);
        }
        let out = self.engine.table.transact(items).await;
        // Written when it succeeded, or when its answer was lost after it landed (the
        // workflow item is there): only then are the payloads kept.
        let written = match &out {
            Ok(_) => true,
            Err(_) => self.workflow_exists(&id).await,
        };
        self.engine.settle_offloads(&payloads, |_| written).await;
        match out {
            Ok(_) => Ok(WorkflowRecord::of(&wf, jobs)),
            Err(_) if written => Ok(WorkflowRecord::of(&wf, jobs)),
            Err(e) => Err(StoreError::from_sdk(e)),
        }
    }

    /// Whether the workflow item `id` exists (a consistent read; false when it cannot be
    /// read).
    pub(crate) async fn workflow_exists(&self, id: &str) -> bool {
        let out = self
            .engine
            .table
            .get_at(wf_key(id))
            .consistent_read(true)
            .projection_expression("pk")
            .send()
            .await;
        matches!(self.engine.table.metered(Kind::Read, out), Ok(o) if o.item.is_some())
    }
}

/// The jobs of `spec`'s steps for workflow `id`: those without dependencies available at
/// once, the others `pending`.
fn step_jobs(spec: &WorkflowSpec, id: &str, now: Timestamp) -> Vec<Job> {
    let mut jobs: Vec<Job> = Vec::with_capacity(spec.steps.len());
    for (i, step) in spec.steps.iter().enumerate() {
        // Microsecond offsets keep FIFO order among a workflow's ready steps.
        let at = now + chrono::Duration::microseconds(i64::try_from(i).unwrap_or(0));
        let mut job = Job::enqueue(step.job.clone(), at);
        // Where the Rust SDK's worker looks for it (JobContext::workflow_id).
        job.spec.meta.insert("workflow_id".into(), Value::from(id));
        if !step.depends_on.is_empty() {
            job.status.state = JobState::Pending;
            job.status.enqueued_at = None;
        }
        job.status.workflow_id = Some(id.to_owned());
        jobs.push(job);
    }
    jobs
}

/// Each callback is checked now as it will fire: refused then, it would leave the batch
/// running forever.
fn check_callbacks(spec: &WorkflowSpec, id: &str, now: Timestamp) -> Result<(), StoreError> {
    let cb = &spec.callbacks;
    for (name, template) in [
        ("on_complete", &cb.on_complete),
        ("on_success", &cb.on_success),
        ("on_failure", &cb.on_failure),
    ] {
        if let Some(template) = template {
            item::check_spec_size(&callback_job(id, name, template, now)?)?;
        }
    }
    Ok(())
}

/// The workflow item of `spec` created at `now`, running its steps' `jobs`.
fn workflow_item(spec: &WorkflowSpec, id: &str, jobs: &[Job], now: Timestamp) -> Item {
    let mut wf = wf_key(id);
    wf.insert("doc".into(), s(spec.to_stored().to_string()));
    wf.insert("state".into(), s(WorkflowState::Running.as_str()));
    wf.insert("total".into(), n(jobs.len()));
    for counter in ["completed", "failed", "cancelled"] {
        wf.insert(counter.into(), n(0));
    }
    wf.insert("created_at".into(), ts(&now));
    // The sweep checks it until it finishes, so a follow-up a dying request left undone
    // is done anyway (check_workflows).
    wf.insert("gsi2pk".into(), s(keys::workflow_due_pk(id)));
    wf.insert(
        "gsi2sk".into(),
        s(keys::workflow_due_sk(
            &ojs_core::time::after(now, CHECK_AFTER),
            id,
        )),
    );
    wf.insert(
        "job_ids".into(),
        crate::item::job_id_list(jobs.iter().map(|j| &j.id)),
    );
    wf
}
