//! Workflows on DynamoDB. A workflow item (`WF#<id>`) holds the graph and counters; each
//! step is an ordinary job carrying `wf_id`/`wf_step`, created `pending` (with
//! `deps_left`) when it waits for other steps.
//!
//! When a step (or a batch callback) reaches a terminal state, the transition that put it
//! there calls [`Store::advance_workflow`], and every write that follows is idempotent:
//! the step is recorded once (`ADD done_steps` and its counter, conditional on the step
//! not being recorded yet), a dependent counts a parent off once (`deps_done`), a pending
//! step is cancelled only while pending, callbacks fire in one transaction guarded by
//! `cb_fired`, and the final state is set only while running ([`workflow::settle`] holds
//! the rules). A request that dies part-way loses nothing: the job's terminal state is
//! durable, and the sweep checks every running workflow (a due entry in
//! `DUE#~workflows#<n>`) and repeats the follow-ups it finds missing.

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, Put, ReturnValue, TransactWriteItem, Update};
use ojs_core::time::Timestamp;
use ojs_core::workflow::{self, Progress, Settlement, WorkflowKind, WorkflowSpec, WorkflowState};
use ojs_core::{Job, JobId, JobState, NewJob, Transition};
use serde_json::{json, Value};

use std::time::Instant;

use crate::effects::StepOutcome;
use crate::error::{is_condition_failure, StoreError};
use crate::item::{self, json as json_attr, n, s, ts, Item};
use crate::jobs::old_item;
use crate::keys;
use crate::transition::{JobWrite, Place};
use crate::usage::Kind;
use crate::Store;

fn wf_key(id: &str) -> Item {
    Item::from([
        ("pk".to_owned(), s(format!("WF#{id}"))),
        ("sk".to_owned(), s("WF")),
    ])
}

fn num(item: &Item, k: &str) -> i64 {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn text(item: &Item, k: &str) -> Option<String> {
    item.get(k).and_then(|v| v.as_s().ok()).cloned()
}

/// The JSON view of a workflow item, with the state of each step taken from `jobs` (the
/// step jobs, in any order; steps whose job is missing show no state).
///
/// Besides the counters the conformance suite reads, it carries the binding's `steps`
/// (§14.1, read by the Python and Go SDKs) and the `metadata` object of ojs-workflows §11
/// (read by the JavaScript SDK).
fn view(item: &Item, jobs: &[Job]) -> Value {
    let doc: Value = text(item, "doc")
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .unwrap_or(Value::Null);
    let total = num(item, "total");
    let completed = num(item, "completed");
    let failed = num(item, "failed");
    let cancelled = num(item, "cancelled");
    let ids = job_ids(item);
    let by_id: std::collections::HashMap<JobId, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let steps: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, job_id)| {
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
        .collect();
    let fired = fired_callbacks(item);
    let finished = workflow_state(item) != Some(WorkflowState::Running);
    let steps: Vec<Value> = steps
        .into_iter()
        .chain(doc["callback_steps"].as_array().into_iter().flatten().map(|c| {
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
                "depends_on": ids_of_steps(&doc),
                "job_id": job.map(|j| j.id.to_string()),
                "state": state,
                "started_at": job.and_then(|j| j.status.started_at.as_ref().map(ojs_core::time::format)),
                "completed_at": job.and_then(|j| j.status.completed_at.as_ref().map(ojs_core::time::format)),
                "result": job.and_then(|j| j.status.result.clone()),
            })
        }))
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

/// The job a batch callback fires: its template with `meta.workflow_id` and
/// `meta.callback` added.
fn callback_job(
    wf_id: &str,
    name: &str,
    template: &serde_json::Map<String, Value>,
    now: Timestamp,
) -> Result<Job, StoreError> {
    let mut body = template.clone();
    if let Value::Object(meta) = body.entry("meta").or_insert_with(|| json!({})) {
        meta.insert("workflow_id".into(), wf_id.into());
        meta.insert("callback".into(), name.into());
    }
    // Validated at creation with room for these two keys; refusing it now would
    // leave the batch running forever, so a template that no longer fits (limits
    // tightened since) fires without them.
    let new = NewJob::from_json(Value::Object(body))
        .or_else(|_| NewJob::from_json(Value::Object(template.clone())))
        .map_err(|e| StoreError::Corrupt(e.message))?;
    let mut job = Job::enqueue(new, now);
    job.status.workflow_id = Some(wf_id.to_owned());
    job.status.workflow_callback = Some(name.to_owned());
    Ok(job)
}

impl Store {
    /// Creates a workflow and all its step jobs in one transaction. Steps without
    /// dependencies are available at once; the others wait as `pending`.
    pub async fn create_workflow(
        &self,
        spec: &WorkflowSpec,
        now: Timestamp,
    ) -> Result<Value, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let mut jobs: Vec<Job> = Vec::with_capacity(spec.steps.len());
        for (i, step) in spec.steps.iter().enumerate() {
            // Microsecond offsets keep FIFO order among a workflow's ready steps.
            let at = now + chrono::Duration::microseconds(i64::try_from(i).unwrap_or(0));
            let mut job = Job::enqueue(step.job.clone(), at);
            // Where the Rust SDK's worker looks for it (JobContext::workflow_id).
            job.spec
                .meta
                .insert("workflow_id".into(), Value::from(id.as_str()));
            if !step.depends_on.is_empty() {
                job.status.state = JobState::Pending;
                job.status.enqueued_at = None;
            }
            job.status.workflow_id = Some(id.clone());
            jobs.push(job);
        }
        // Sizes are checked before anything is written; a step too large for its item
        // keeps its args and meta in the payload bucket, as a pushed job does.
        let bodies = jobs
            .iter()
            .map(|j| self.offload_body(j))
            .collect::<Result<Vec<_>, _>>()?;
        // Each callback is checked now as it will fire: refused then, it would leave the
        // batch running forever.
        let cb = &spec.callbacks;
        for (name, template) in [
            ("on_complete", &cb.on_complete),
            ("on_success", &cb.on_success),
            ("on_failure", &cb.on_failure),
        ] {
            if let Some(template) = template {
                item::check_spec_size(&callback_job(&id, name, template, now)?)?;
            }
        }
        let mut wf = wf_key(&id);
        wf.insert("doc".into(), s(spec.to_stored().to_string()));
        wf.insert("state".into(), s(WorkflowState::Running.as_str()));
        wf.insert("total".into(), n(jobs.len()));
        for counter in ["completed", "failed", "cancelled"] {
            wf.insert(counter.into(), n(0));
        }
        wf.insert("created_at".into(), ts(&now));
        // The sweep checks it until it finishes, so a follow-up a dying request left
        // undone is done anyway (check_workflows).
        wf.insert("gsi2pk".into(), s(keys::workflow_due_pk(&id)));
        wf.insert(
            "gsi2sk".into(),
            s(keys::workflow_due_sk(
                &ojs_core::time::after(now, CHECK_AFTER),
                &id,
            )),
        );
        wf.insert(
            "job_ids".into(),
            AttributeValue::L(jobs.iter().map(|j| s(j.id.to_string())).collect()),
        );
        let mut items = vec![self.put_new(wf.clone())?];
        for job in &jobs {
            self.register_lane(&crate::keys::Lane::of(job)).await?;
        }
        let (job_items, payloads) = self.new_job_items(&jobs, bodies).await?;
        for (i, (mut it, step)) in job_items.into_iter().zip(&spec.steps).enumerate() {
            it.insert("wf_id".into(), s(id.clone()));
            it.insert("wf_step".into(), n(i));
            if !step.depends_on.is_empty() {
                it.insert("deps_left".into(), n(step.depends_on.len()));
            }
            items.push(self.put_new(it)?);
        }
        let out = self.table.transact(items).await;
        // Written when it succeeded, or when its answer was lost after it landed (the
        // workflow item is there): only then are the payloads kept.
        let written = match &out {
            Ok(_) => true,
            Err(_) => self.workflow_exists(&id).await,
        };
        self.settle_offloads(&payloads, |_| written).await;
        match out {
            Ok(_) => Ok(view(&wf, &jobs)),
            Err(_) if written => Ok(view(&wf, &jobs)),
            Err(e) => Err(StoreError::from_sdk(e)),
        }
    }

    /// Whether the workflow item `id` exists (a consistent read; false when it cannot be
    /// read).
    async fn workflow_exists(&self, id: &str) -> bool {
        let out = self
            .table
            .get_item()
            .set_key(Some(wf_key(id)))
            .consistent_read(true)
            .projection_expression("pk")
            .send()
            .await;
        matches!(self.table.metered(Kind::Read, out), Ok(o) if o.item.is_some())
    }

    /// The workflow's view with its steps' states (the workflow item, then its step jobs
    /// in one BatchGetItem), or NotFound.
    pub async fn get_workflow(&self, id: &str) -> Result<Value, StoreError> {
        let item = self
            .table
            .read_item(wf_key(id))
            .await?
            .ok_or(StoreError::NotFound)?;
        let jobs = self.step_jobs(&item).await?;
        Ok(view(&item, &jobs))
    }

    /// The step jobs of a workflow item, and its fired callbacks' jobs.
    async fn step_jobs(&self, item: &Item) -> Result<Vec<Job>, StoreError> {
        let keys = job_ids(item)
            .iter()
            .chain(fired_callbacks(item).iter().map(|(_, id)| id))
            .map(item::job_key)
            .collect();
        let how = crate::batch_read::BatchRead {
            consistent: true,
            ..Default::default()
        };
        self.table
            .batch_get(keys, &how)
            .await?
            .iter()
            .map(item::job_from_item)
            .collect()
    }

    /// Cancels a running workflow and every step that has not finished.
    pub async fn cancel_workflow(&self, id: &str, now: Timestamp) -> Result<Value, StoreError> {
        let out = self
            .wf_update(id)
            .update_expression("SET #state = :cancelled, completed_at = :now")
            .condition_expression("#state = :running")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":cancelled", s(WorkflowState::Cancelled.as_str()))
            .expression_attribute_values(":running", s(WorkflowState::Running.as_str()))
            .expression_attribute_values(":now", ts(&now))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let item = match self.table.metered(Kind::Write, out) {
            Ok(out) => out.attributes().cloned().unwrap_or_default(),
            Err(e) => {
                if is_condition_failure(&e) {
                    // Finished or already cancelled: 409, or 404 when unknown. A
                    // cancellation that stopped part-way is completed first.
                    let item = self
                        .table
                        .read_item(wf_key(id))
                        .await?
                        .ok_or(StoreError::NotFound)?;
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
        Ok(view(&item, &jobs))
    }

    /// Cancels one step without feeding the cancellation back into the workflow; `true`
    /// when this call cancelled it.
    async fn cancel_step(&self, id: &JobId, now: Timestamp) -> Result<bool, StoreError> {
        match self.cancel_job_quietly(id, now).await {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => Ok(false),
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
    async fn follow_step(
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
        match self.table.read_item(wf_key(wf_id)).await? {
            Some(item) => self.settle_workflow(wf_id, &item, now).await,
            None => Ok(()),
        }
    }

    /// Records that `step` ended with `outcome`: `ADD` of the step to `done_steps` and of
    /// one to the outcome's counter, in one write conditional on the step not being there
    /// yet. The workflow item after it (also when it was already recorded), or None when
    /// the workflow is gone.
    async fn record_step(
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
    async fn record_callback(
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
    async fn record_once(
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
            None => self.table.read_item(wf_key(wf_id)).await,
        }
    }

    /// An UpdateItem of workflow `wf_id`'s item.
    fn wf_update(&self, wf_id: &str) -> UpdateItemFluentBuilder {
        self.table.update_item().set_key(Some(wf_key(wf_id)))
    }

    /// Sends the conditional UpdateItem `req` of a workflow item with ALL_NEW: the item
    /// after it, or `None` when its condition failed.
    async fn workflow_update(
        &self,
        req: UpdateItemFluentBuilder,
    ) -> Result<Option<Item>, StoreError> {
        let out = req.return_values(ReturnValue::AllNew).send().await;
        Ok(self
            .table
            .tally_conditional(Kind::Write, out)?
            .and_then(|out| out.attributes().cloned()))
    }

    /// Sends the conditional UpdateItem `req` of a workflow item whose failed condition
    /// leaves nothing to do.
    async fn update_unless_done(&self, req: UpdateItemFluentBuilder) -> Result<(), StoreError> {
        self.table
            .tally_conditional(Kind::Write, req.send().await)
            .map(|_| ())
    }

    /// `ADD counter :by` on the workflow, returning the new item (None if it is gone).
    async fn add_to_workflow(
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
    async fn release_dependent(
        &self,
        id: &JobId,
        parent: usize,
        result: &Value,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let out = self
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
        match self.finish_update(out) {
            Ok(_) | Err(StoreError::Conflict { .. }) => {}
            Err(StoreError::NotFound) => return Ok(()),
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
        let id = &job.id;
        let out = JobWrite::new(Transition::Activate, self.ready_place(job, &now))
            .version(job.status.version)
            .set("enqueued_at = :now")
            .remove("deps_left")
            .value(":now", ts(&now))
            .apply(self.update(id))?
            .send()
            .await;
        match self.finish_update(out) {
            Ok(_) | Err(StoreError::Conflict { .. } | StoreError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Everything a terminal transition sets off: the workflow's bookkeeping and the
    /// release of a cron occurrence queued behind this job (`overlap_policy: enqueue`).
    /// The transition itself has succeeded, so a failure here is not the caller's: it is
    /// logged, and the sweep completes a workflow's part ([`Store::check_workflows`]).
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
            let activated = match self.get_job(&next).await {
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
    async fn cancel_pending(&self, id: &JobId, now: Timestamp) -> Result<bool, StoreError> {
        let out = JobWrite::new(
            Transition::Cancel,
            Place::Retained {
                ttl: self.expiry(&now),
            },
        )
        .from(JobState::Pending)
        .set("cancelled_at = :now")
        .value(":now", ts(&now))
        .apply(self.update(id))?
        .send()
        .await;
        match self.finish_update(out) {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Applies [`workflow::settle`] to a running workflow: finishes it, or fires the batch
    /// callbacks due.
    async fn settle_workflow(
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

    /// Enqueues the batch callbacks due, once: one transaction with a guard on the workflow
    /// (`attribute_not_exists(cb_fired)`) that also records which jobs they are.
    async fn fire_callbacks(
        &self,
        wf_id: &str,
        callbacks: &workflow::Callbacks,
        all_succeeded: bool,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut jobs = Vec::new();
        for (name, template) in callbacks.due(all_succeeded) {
            jobs.push(callback_job(wf_id, name, template, now)?);
        }
        let fired: std::collections::HashMap<String, AttributeValue> = jobs
            .iter()
            .filter_map(|j| Some((j.status.workflow_callback.clone()?, s(j.id.to_string()))))
            .collect();
        for attempt in 0..4u32 {
            let guard = Update::builder()
                .table_name(self.table())
                .set_key(Some(wf_key(wf_id)))
                .update_expression("SET cb_fired = :t, cb_jobs = :jobs, cb_total = :total")
                .condition_expression("attribute_not_exists(cb_fired)")
                .expression_attribute_values(":t", AttributeValue::Bool(true))
                .expression_attribute_values(":jobs", AttributeValue::M(fired.clone()))
                .expression_attribute_values(":total", n(jobs.len()))
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            let mut items = vec![TransactWriteItem::builder().update(guard).build()];
            for job in &jobs {
                self.register_lane(&crate::keys::Lane::of(job)).await?;
                let mut it = item::job_to_item(job, self.queue_shards());
                it.insert("wf_id".into(), s(wf_id));
                if let Some(name) = &job.status.workflow_callback {
                    it.insert("wf_cb".into(), s(name.as_str()));
                }
                items.push(self.put_new(it)?);
            }
            match self.table.transact(items).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    // Only a failed guard means "fired already"; a conflict with another
                    // write of the workflow item, or throttling, is tried again.
                    match crate::error::cancellation_codes(&e) {
                        Some(codes)
                            if codes.first().map(String::as_str)
                                == Some("ConditionalCheckFailed") =>
                        {
                            return Ok(())
                        }
                        Some(_) if attempt < 3 => {
                            tokio::time::sleep(crate::batch_read::backoff(attempt + 1)).await;
                        }
                        _ => return Err(StoreError::from_sdk(e)),
                    }
                }
            }
        }
        Err(StoreError::Throttled(
            "batch callbacks not fired; the sweep retries".into(),
        ))
    }

    /// Sets a running workflow's final state and takes it off the sweep's checks.
    async fn finish_workflow(
        &self,
        wf_id: &str,
        state: WorkflowState,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let req = self
            .wf_update(wf_id)
            .update_expression("SET #state = :state, completed_at = :now REMOVE gsi2pk, gsi2sk")
            .condition_expression("#state = :running")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":state", s(state.as_str()))
            .expression_attribute_values(":running", s(WorkflowState::Running.as_str()))
            .expression_attribute_values(":now", ts(&now));
        self.update_unless_done(req).await
    }

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
                .due_query(&keys::workflow_due_shard_pk(shard), &now)
                .limit(50);
            let mut pages = self.table.pages(query);
            loop {
                if Instant::now() >= budget {
                    return Ok(checked);
                }
                let Some(out) = pages.next().await? else {
                    break;
                };
                for i in out.items() {
                    let Some(id) = i
                        .get("pk")
                        .and_then(|v| v.as_s().ok())
                        .and_then(|pk| pk.strip_prefix("WF#"))
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
        let Some(item) = self.table.read_item(wf_key(wf_id)).await? else {
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
        let Some(item) = self.table.read_item(wf_key(wf_id)).await? else {
            return Ok(());
        };
        self.settle_workflow(wf_id, &item, now).await?;
        let Some(item) = self.table.read_item(wf_key(wf_id)).await? else {
            return Ok(());
        };
        let settled = match workflow_state(&item) {
            Some(WorkflowState::Running) => false,
            Some(WorkflowState::Cancelled) => jobs.iter().all(|j| j.status.state.is_terminal()),
            _ => true,
        };
        self.reschedule_check(wf_id, &item, settled, now).await
    }

    /// Moves a workflow's next check out (1 minute, doubling to at most 15), or ends its
    /// checks once it is settled.
    async fn reschedule_check(
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

    /// The transaction item writing `item`, on condition that no item has its key yet.
    pub(crate) fn put_new(&self, item: Item) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(self.table())
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}

/// Times a workflow follow-up that failed transiently is tried again within the request
/// that finished its job, beyond the SDK's own retries (backoff from 25-50 ms, doubling:
/// at most 0.75 s of waiting in all), before it is left to the sweep.
const FOLLOW_UP_RETRIES: u32 = 4;

/// When a running workflow is first checked by the sweep, after its creation.
const CHECK_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
/// The longest wait between two checks of a running workflow.
const MAX_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(900);
/// Most bytes of parent results a waiting step accumulates, shared among its
/// dependencies; a larger result is passed as a reference to its job.
const MAX_PARENT_RESULTS_BYTES: usize = 64 * 1024;

impl StepOutcome {
    /// The outcome a terminal job state stands for (None while the job is live).
    fn of(state: JobState) -> Option<Self> {
        match state {
            JobState::Completed => Some(Self::Completed),
            JobState::Discarded => Some(Self::Failed),
            JobState::Cancelled => Some(Self::Cancelled),
            _ => None,
        }
    }
}

/// A parent's result as passed to a step waiting for `waits_for` parents: as is when it
/// fits its share of [`MAX_PARENT_RESULTS_BYTES`], else a reference to the parent job.
fn bounded_result(result: &Value, parent: &JobId, waits_for: usize) -> Value {
    let size = ojs_core::validate::json_size(result);
    if size <= MAX_PARENT_RESULTS_BYTES / waits_for.max(1) {
        return result.clone();
    }
    json!({"job_id": parent.to_string(), "result_truncated": true, "result_bytes": size})
}

/// The stored immutable part of a workflow (its graph, kind and callbacks).
fn workflow_doc(item: &Item) -> Value {
    text(item, "doc")
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .unwrap_or(Value::Null)
}

fn workflow_state(item: &Item) -> Option<WorkflowState> {
    text(item, "state")
        .as_deref()
        .and_then(WorkflowState::parse)
}

/// The counts of a workflow item.
fn progress_of(item: &Item) -> Progress {
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
fn fired_callbacks(item: &Item) -> Vec<(String, JobId)> {
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
fn ids_of_steps(doc: &Value) -> Vec<Value> {
    doc["steps"]
        .as_array()
        .map(|steps| steps.iter().map(|s| s["id"].clone()).collect())
        .unwrap_or_default()
}

fn job_ids(item: &Item) -> Vec<JobId> {
    item.get("job_ids")
        .and_then(|v| v.as_l().ok())
        .map(|l| {
            l.iter()
                .filter_map(|v| v.as_s().ok())
                .filter_map(|s| JobId::parse(s).ok())
                .collect()
        })
        .unwrap_or_default()
}
