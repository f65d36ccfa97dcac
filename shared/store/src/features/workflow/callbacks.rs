//! A batch workflow's callbacks (`on_complete`, `on_success`, `on_failure`): created in one
//! transaction guarded by `cb_fired`, so each fires once.

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use ojs_core::time::Timestamp;
use ojs_core::workflow::{self};
use ojs_core::{Job, NewJob};
use serde_json::{json, Value};

use crate::error::StoreError;
use crate::item::{self, n, s};

use super::wf_key;
use super::Workflows;

impl Workflows<'_> {
    /// Enqueues the batch callbacks due, once: one transaction with a guard on the workflow
    /// (`attribute_not_exists(cb_fired)`) that also records which jobs they are.
    pub(crate) async fn fire_callbacks(
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
                .table_name(self.engine.table())
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
                self.engine
                    .register_lane(&crate::keys::Lane::of(job))
                    .await?;
                let mut it = item::job_to_item(job, self.engine.queue_shards());
                it.insert("wf_id".into(), s(wf_id));
                if let Some(name) = &job.status.workflow_callback {
                    it.insert("wf_cb".into(), s(name.as_str()));
                }
                items.push(self.engine.table.put_new(it)?);
            }
            match self.engine.table.transact(items).await {
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
}

/// The job a batch callback fires: its template with `meta.workflow_id` and
/// `meta.callback` added.
pub(crate) fn callback_job(
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
        .map_err(StoreError::corrupt)?;
    let mut job = Job::enqueue(new, now);
    job.status.workflow_id = Some(wf_id.to_owned());
    job.status.workflow_callback = Some(name.to_owned());
    Ok(job)
}
