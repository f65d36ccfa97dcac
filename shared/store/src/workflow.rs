//! Workflows on DynamoDB. A workflow item (`WF#<id>`) holds the graph and counters; each
//! step is an ordinary job carrying `wf_id`/`wf_step`, created `pending` (with
//! `deps_left`) when it waits for other steps. When a step reaches a terminal state the
//! transition that put it there calls [`Store::advance_workflow`]: one atomic `ADD` on the
//! workflow's counters (never read-modify-write), then dependents are released or
//! cancelled. The update that brings the terminal count to the total is the last one out:
//! only it can see that count, and it fires batch callbacks in a transaction guarded by
//! `attribute_not_exists(cb_fired)`, so callbacks fire exactly once.

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnConsumedCapacity, ReturnValue, TransactWriteItem, Update,
};
use ojs_core::event::{Event, EventKind};
use ojs_core::time::Timestamp;
use ojs_core::workflow::{self, WorkflowSpec};
use ojs_core::{Job, JobId, JobState, NewJob};
use serde_json::{json, Value};

use crate::error::{is_condition_failure, StoreError};
use crate::item::{self, json as json_attr, n, s, ts, Item};
use crate::keys;
use crate::usage::Kind;
use crate::Store;

/// How a step ended, for the workflow's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// Completed.
    Completed,
    /// Discarded.
    Failed,
    /// Cancelled.
    Cancelled,
}

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

/// The JSON view of a workflow item.
fn view(item: &Item) -> Value {
    let doc: Value = text(item, "doc")
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .unwrap_or(Value::Null);
    let total = num(item, "total");
    let completed = num(item, "completed");
    let failed = num(item, "failed");
    let cancelled = num(item, "cancelled");
    let job_ids: Vec<Value> = item
        .get("job_ids")
        .and_then(|v| v.as_l().ok())
        .map(|l| {
            l.iter()
                .filter_map(|v| v.as_s().ok())
                .map(|s| Value::from(s.as_str()))
                .collect()
        })
        .unwrap_or_default();
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
        "job_ids": job_ids,
        "created_at": text(item, "created_at"),
        "completed_at": text(item, "completed_at"),
    })
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
            if !step.depends_on.is_empty() {
                job.status.state = JobState::Pending;
                job.status.enqueued_at = None;
            }
            job.status.workflow_id = Some(id.clone());
            jobs.push(job);
        }
        let mut wf = wf_key(&id);
        wf.insert("doc".into(), s(spec.to_stored().to_string()));
        wf.insert("state".into(), s("running"));
        wf.insert("total".into(), n(jobs.len()));
        for counter in ["completed", "failed", "cancelled"] {
            wf.insert(counter.into(), n(0));
        }
        wf.insert("created_at".into(), ts(&now));
        wf.insert(
            "job_ids".into(),
            AttributeValue::L(jobs.iter().map(|j| s(j.id.to_string())).collect()),
        );
        let mut items = vec![TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(self.table())
                    .set_item(Some(wf.clone()))
                    .condition_expression("attribute_not_exists(pk)")
                    .build()
                    .map_err(|e| StoreError::Backend(e.to_string()))?,
            )
            .build()];
        for (i, (job, step)) in jobs.iter().zip(&spec.steps).enumerate() {
            self.register_queue(job.spec.queue.as_str()).await?;
            let mut it = item::job_to_item(job, self.queue_shards());
            it.insert("wf_id".into(), s(id.clone()));
            it.insert("wf_step".into(), n(i));
            if !step.depends_on.is_empty() {
                it.insert("deps_left".into(), n(step.depends_on.len()));
            }
            items.push(
                TransactWriteItem::builder()
                    .put(
                        Put::builder()
                            .table_name(self.table())
                            .set_item(Some(it))
                            .condition_expression("attribute_not_exists(pk)")
                            .build()
                            .map_err(|e| StoreError::Backend(e.to_string()))?,
                    )
                    .build(),
            );
        }
        let out = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.tally(Kind::Write, out)?;
        self.after_create(&jobs, now).await;
        Ok(view(&wf))
    }

    /// Events and counts of workflow jobs just created (steps or callbacks): an enqueued
    /// event for each one that is available at once; every one counted.
    async fn after_create(&self, jobs: &[Job], now: Timestamp) {
        let events: Vec<Event> = jobs
            .iter()
            .filter(|j| j.status.state == JobState::Available)
            .map(|j| {
                Event::for_job(
                    EventKind::Enqueued,
                    j,
                    &now,
                    "ojs://ojs-serverless/workflows",
                )
            })
            .collect();
        let mut moves = self.moves();
        moves.add_all(jobs, None);
        self.emit_and_count(&events, moves).await;
    }

    /// The workflow's view, or NotFound.
    pub async fn get_workflow(&self, id: &str) -> Result<Value, StoreError> {
        self.read_item(wf_key(id))
            .await?
            .as_ref()
            .map(view)
            .ok_or(StoreError::NotFound)
    }

    /// Cancels a running workflow and every step that has not finished.
    pub async fn cancel_workflow(&self, id: &str, now: Timestamp) -> Result<Value, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(self.table())
            .set_key(Some(wf_key(id)))
            .update_expression("SET #state = :cancelled, completed_at = :now")
            .condition_expression("#state = :running")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":cancelled", s("cancelled"))
            .expression_attribute_values(":running", s("running"))
            .expression_attribute_values(":now", ts(&now))
            .return_values(ReturnValue::AllNew)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let item = match out {
            Ok(out) => {
                self.usage.record(Kind::Write, out.consumed_capacity());
                out.attributes().cloned().unwrap_or_default()
            }
            Err(e) => {
                self.usage.record(Kind::Write, None);
                if is_condition_failure(&e) {
                    // Finished or already cancelled: 409, or 404 when unknown.
                    self.get_workflow(id).await?;
                    return Err(StoreError::Conflict { current: None });
                }
                return Err(StoreError::from_sdk(e));
            }
        };
        for job_id in job_ids(&item) {
            self.cancel_step(&job_id, now).await?;
        }
        Ok(view(&item))
    }

    /// Cancels one step without feeding the cancellation back into the workflow.
    async fn cancel_step(&self, id: &JobId, now: Timestamp) -> Result<(), StoreError> {
        match self.cancel_job_quietly(id, now).await {
            Ok(_) | Err(StoreError::Conflict { .. } | StoreError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Records that step `job` of its workflow ended with `outcome`, releases or cancels
    /// its dependents, settles the workflow's state and fires batch callbacks.
    pub(crate) async fn advance_workflow(
        &self,
        job: &Job,
        outcome: StepOutcome,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let Some(wf_id) = job.status.workflow_id.clone() else {
            return Ok(());
        };
        let counter = match outcome {
            StepOutcome::Completed => "completed",
            StepOutcome::Failed => "failed",
            StepOutcome::Cancelled => "cancelled",
        };
        let item = self.add_to_workflow(&wf_id, counter, 1).await?;
        let Some(item) = item else {
            return Ok(());
        };
        let doc: Value = text(&item, "doc")
            .and_then(|raw| serde_json::from_str(&raw).ok())
            .unwrap_or(Value::Null);
        let ids = job_ids(&item);
        let Some(step) = ids.iter().position(|i| *i == job.id) else {
            return Ok(());
        };
        let mut item = item;
        let dependents = workflow::stored_dependents(&doc, step);
        if outcome == StepOutcome::Completed {
            let result = job.status.result.clone().unwrap_or(Value::Null);
            for d in dependents {
                if let Some(dep) = ids.get(d) {
                    self.release_dependent(dep, &result, now).await?;
                }
            }
        } else if text(&item, "state").as_deref() == Some("running") {
            // A failed step's dependents can never run: cancel everything downstream.
            let mut cancelled = 0usize;
            let mut stack = dependents;
            let mut seen = std::collections::HashSet::new();
            while let Some(d) = stack.pop() {
                if !seen.insert(d) {
                    continue;
                }
                stack.extend(workflow::stored_dependents(&doc, d));
                if let Some(dep) = ids.get(d) {
                    if self.cancel_pending(dep, now).await? {
                        cancelled += 1;
                    }
                }
            }
            if cancelled > 0 {
                if let Some(updated) = self.add_to_workflow(&wf_id, "cancelled", cancelled).await? {
                    item = updated;
                }
            }
        }
        self.settle_workflow(&wf_id, &item, &doc, now).await
    }

    /// `ADD counter :by` on the workflow, returning the new item (None if it is gone).
    async fn add_to_workflow(
        &self,
        wf_id: &str,
        counter: &str,
        by: usize,
    ) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(self.table())
            .set_key(Some(wf_key(wf_id)))
            .update_expression("ADD #c :by")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#c", counter)
            .expression_attribute_values(":by", n(by))
            .return_values(ReturnValue::AllNew)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match out {
            Ok(out) => {
                self.usage.record(Kind::Write, out.consumed_capacity());
                Ok(out.attributes().cloned())
            }
            Err(e) if is_condition_failure(&e) => Ok(None),
            Err(e) => {
                self.usage.record(Kind::Write, None);
                Err(StoreError::from_sdk(e))
            }
        }
    }

    /// One dependency of a pending step is done: pass the result on and, when it was the
    /// last one, make the step available.
    async fn release_dependent(
        &self,
        id: &JobId,
        result: &Value,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let out = self
            .update(id)
            .update_expression(
                "ADD deps_left :minus SET parent_results = list_append(if_not_exists(parent_results, :empty), :result)",
            )
            .condition_expression("#state = :pending")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":pending", s(JobState::Pending.as_str()))
            .expression_attribute_values(":minus", n(-1))
            .expression_attribute_values(":empty", AttributeValue::L(Vec::new()))
            .expression_attribute_values(":result", AttributeValue::L(vec![json_attr(result)]))
            .send()
            .await;
        let left = match &out {
            Ok(o) => o.attributes().map(|a| num(a, "deps_left")),
            Err(_) => None,
        };
        let job = match self.finish_update(out) {
            Ok(job) => job,
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        if left != Some(0) {
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
        let out = self
            .update(id)
            .update_expression(
                "SET #state = :available, enqueued_at = :now, gsi1pk = :readypk, gsi1sk = :readysk, \
                 version = version + :one REMOVE deps_left",
            )
            .condition_expression("#state = :pending AND version = :version")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":pending", s(JobState::Pending.as_str()))
            .expression_attribute_values(":available", s(JobState::Available.as_str()))
            .expression_attribute_values(":version", n(job.status.version))
            .expression_attribute_values(":now", ts(&now))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":readypk", s(self.ready_pk(&job.spec.queue, &job.id)))
            .expression_attribute_values(":readysk", s(keys::ready_sk(job.spec.priority, &now, id)))
            .send()
            .await;
        match self.finish_update(out) {
            Ok(job) => {
                self.watch_expiry(&job).await?;
                let e = Event::for_job(EventKind::Enqueued, &job, &now, "ojs://ojs-serverless/api");
                self.emit_and_count_one(e, &job, Some(JobState::Pending))
                    .await;
                Ok(())
            }
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Everything a terminal transition sets off: the workflow's bookkeeping and the
    /// release of a cron occurrence queued behind this job (`overlap_policy: enqueue`).
    pub(crate) async fn after_terminal(
        &self,
        job: &Job,
        outcome: StepOutcome,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.advance_workflow(job, outcome, now).await?;
        if let Some(next) = job
            .status
            .successor
            .as_deref()
            .and_then(|s| JobId::parse(s).ok())
        {
            if let Some(waiting) = self.get_job(&next).await? {
                if waiting.status.state == JobState::Pending {
                    self.activate_pending(&waiting, now).await?;
                }
            }
        }
        Ok(())
    }

    /// Cancels a step that is still waiting; `true` when it was.
    async fn cancel_pending(&self, id: &JobId, now: Timestamp) -> Result<bool, StoreError> {
        let out = self
            .update(id)
            .update_expression("SET #state = :cancelled, cancelled_at = :now, #ttl = :ttl, version = version + :one")
            .condition_expression("#state = :pending")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":pending", s(JobState::Pending.as_str()))
            .expression_attribute_values(":cancelled", s(JobState::Cancelled.as_str()))
            .expression_attribute_values(":now", ts(&now))
            .expression_attribute_values(":ttl", self.expiry(&now))
            .expression_attribute_values(":one", n(1))
            .send()
            .await;
        match self.finish_update(out) {
            Ok(job) => {
                self.count_move(&job, Some(JobState::Pending)).await;
                Ok(true)
            }
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// When every step is terminal: the final state, once, and the batch callbacks, once.
    async fn settle_workflow(
        &self,
        wf_id: &str,
        item: &Item,
        doc: &Value,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let total = num(item, "total");
        let (completed, failed, cancelled) = (
            num(item, "completed"),
            num(item, "failed"),
            num(item, "cancelled"),
        );
        let all_succeeded = failed + cancelled == 0;
        let running = text(item, "state").as_deref() == Some("running");
        if running && !all_succeeded {
            // A chain (or any graph) with a failed step has failed, even while siblings run.
            let chain_like = doc["type"] == "chain";
            if chain_like || completed + failed + cancelled >= total {
                self.finish_workflow(wf_id, "failed", now).await?;
            }
        } else if running && completed >= total {
            self.finish_workflow(wf_id, "completed", now).await?;
        }
        if completed + failed + cancelled < total {
            return Ok(());
        }
        let callbacks = workflow::stored_callbacks(doc);
        let due = callbacks.due(all_succeeded);
        if due.is_empty() {
            return Ok(());
        }
        let mut jobs = Vec::new();
        for (name, template) in due {
            let mut body = template.clone();
            if let Value::Object(meta) = body.entry("meta").or_insert_with(|| json!({})) {
                meta.insert("workflow_id".into(), wf_id.into());
                meta.insert("callback".into(), name.into());
            }
            let new = NewJob::from_json(Value::Object(body))
                .map_err(|e| StoreError::Corrupt(e.message))?;
            jobs.push(Job::enqueue(new, now));
        }
        let guard = Update::builder()
            .table_name(self.table())
            .set_key(Some(wf_key(wf_id)))
            .update_expression("SET cb_fired = :t")
            .condition_expression("attribute_not_exists(cb_fired)")
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let mut tx = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(guard).build())
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        for job in &jobs {
            self.register_queue(job.spec.queue.as_str()).await?;
            let put = Put::builder()
                .table_name(self.table())
                .set_item(Some(item::job_to_item(job, self.queue_shards())))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            tx = tx.transact_items(TransactWriteItem::builder().put(put).build());
        }
        match tx.send().await {
            Ok(out) => self.usage.record(Kind::Write, out.consumed_capacity()),
            Err(e) => {
                self.usage.record(Kind::Write, None);
                if e.code() == Some("TransactionCanceledException") {
                    return Ok(()); // already fired
                }
                return Err(StoreError::from_sdk(e));
            }
        }
        self.after_create(&jobs, now).await;
        Ok(())
    }

    async fn finish_workflow(
        &self,
        wf_id: &str,
        state: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(self.table())
            .set_key(Some(wf_key(wf_id)))
            .update_expression("SET #state = :state, completed_at = :now")
            .condition_expression("#state = :running")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":state", s(state))
            .expression_attribute_values(":running", s("running"))
            .expression_attribute_values(":now", ts(&now))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match out {
            Ok(out) => {
                self.usage.record(Kind::Write, out.consumed_capacity());
                Ok(())
            }
            Err(e) if is_condition_failure(&e) => Ok(()),
            Err(e) => Err(StoreError::from_sdk(e)),
        }
    }
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
