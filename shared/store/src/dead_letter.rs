//! The dead letter queue: jobs discarded with `on_exhaustion: dead_letter` carry a key in
//! the sparse `dead` index (`DEAD`, sorted by queue, discard time, id). Listing is a Query
//! of that index plus one BatchGetItem for the page; never a Scan.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{ReturnConsumedCapacity, Select};
use ojs_core::event::{Event, EventKind};
use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId, JobState, QueueName};

use crate::error::StoreError;
use crate::item::{self, n, s, ts, Item};
use crate::keys;
use crate::schema::DEAD_INDEX;
use crate::usage::Kind;
use crate::Store;

/// One page of the dead letter queue.
#[derive(Debug, Clone)]
pub struct DeadLetterPage {
    /// The jobs, oldest discard first.
    pub jobs: Vec<Job>,
    /// How many dead-lettered jobs match the filter.
    pub total: usize,
}

impl Store {
    /// Dead-lettered jobs, optionally of one queue, `offset`/`limit` paginated.
    pub async fn list_dead_letter(
        &self,
        queue: Option<&QueueName>,
        limit: usize,
        offset: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        let total = self.count_dead(queue).await?;
        if offset >= total {
            return Ok(DeadLetterPage {
                jobs: Vec::new(),
                total,
            });
        }
        let wanted = offset.saturating_add(limit);
        let mut keys: Vec<Item> = Vec::new();
        let mut start = None;
        while keys.len() < wanted {
            let out = self
                .dead_query(queue)
                .set_exclusive_start_key(start.take())
                .limit(i32::try_from(wanted - keys.len()).unwrap_or(1000).min(1000))
                .send()
                .await;
            let out = self.tally(Kind::Read, out)?;
            keys.extend(out.items().iter().filter_map(|i| {
                Some(HashMap::from([
                    ("pk".to_owned(), i.get("pk")?.clone()),
                    ("sk".to_owned(), i.get("sk")?.clone()),
                ]))
            }));
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        let page: Vec<Item> = keys.into_iter().skip(offset).take(limit).collect();
        let mut jobs = self.batch_get_jobs(page).await?;
        // The index may still list a job retried or deleted a moment ago.
        jobs.retain(|j| j.status.dead_letter);
        Ok(DeadLetterPage { jobs, total })
    }

    fn dead_query(
        &self,
        queue: Option<&QueueName>,
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        let req = self
            .client
            .query()
            .table_name(self.table())
            .index_name(DEAD_INDEX.name)
            .expression_attribute_values(":pk", s(keys::DEAD_PK))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        match queue {
            Some(q) => req
                .key_condition_expression("gsi3pk = :pk AND begins_with(gsi3sk, :prefix)")
                .expression_attribute_values(":prefix", s(format!("{q}#"))),
            None => req.key_condition_expression("gsi3pk = :pk"),
        }
    }

    async fn count_dead(&self, queue: Option<&QueueName>) -> Result<usize, StoreError> {
        let mut total = 0usize;
        let mut start = None;
        loop {
            let out = self
                .dead_query(queue)
                .select(Select::Count)
                .set_exclusive_start_key(start.take())
                .send()
                .await;
            let out = self.tally(Kind::Read, out)?;
            total += usize::try_from(out.count()).unwrap_or(0);
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(total);
            }
        }
    }

    /// Reads jobs by key in order (BatchGetItem, strongly consistent).
    async fn batch_get_jobs(&self, keys: Vec<Item>) -> Result<Vec<Job>, StoreError> {
        let order: Vec<String> = keys
            .iter()
            .filter_map(|k| k.get("pk").and_then(|v| v.as_s().ok()).cloned())
            .collect();
        let how = crate::batch_read::BatchRead {
            consistent: true,
            ..Default::default()
        };
        let mut found: HashMap<String, Job> = HashMap::new();
        for it in self.batch_get(keys, &how).await? {
            let job = item::job_from_item(&it)?;
            found.insert(crate::keys::job_pk(&job.id), job);
        }
        Ok(order
            .into_iter()
            .filter_map(|pk| found.remove(&pk))
            .collect())
    }

    /// Puts a dead-lettered job back in its queue: attempt 0, errors cleared.
    pub async fn retry_dead_letter(&self, id: &JobId, now: Timestamp) -> Result<Job, StoreError> {
        let job = self.get_job(id).await?.ok_or(StoreError::NotFound)?;
        if !job.status.dead_letter {
            return Err(StoreError::NotFound);
        }
        let out = self
            .update(id)
            .update_expression(
                "SET #state = :available, attempt = :zero, enqueued_at = :now, gsi1pk = :readypk, \
                 gsi1sk = :readysk, version = version + :one \
                 REMOVE gsi3pk, gsi3sk, errors, #error, #result, completed_at, discarded_at, \
                 next_attempt_at, retry_delay_ms, started_at, worker_id, #ttl",
            )
            .condition_expression(
                "#state = :discarded AND version = :version AND attribute_exists(gsi3pk)",
            )
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#error", "error")
            .expression_attribute_names("#result", "result")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":available", s(JobState::Available.as_str()))
            .expression_attribute_values(":discarded", s(JobState::Discarded.as_str()))
            .expression_attribute_values(":version", n(job.status.version))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now", ts(&now))
            .expression_attribute_values(":readypk", s(self.ready_pk(&job.spec.queue, &job.id)))
            .expression_attribute_values(":readysk", s(keys::ready_sk(job.spec.priority, &now, id)))
            .send()
            .await;
        let job = self.finish_update(out)?;
        self.watch_expiry(&job).await?;
        let e = Event::for_job(EventKind::Enqueued, &job, &now, "ojs://ojs-serverless/api");
        self.emit_and_count_one(e, &job, Some(JobState::Discarded))
            .await;
        Ok(job)
    }

    /// Permanently deletes a dead-lettered job.
    pub async fn delete_dead_letter(&self, id: &JobId) -> Result<(), StoreError> {
        let out = self
            .client
            .delete_item()
            .table_name(self.table())
            .set_key(Some(item::job_key(id)))
            .condition_expression("#state = :discarded AND attribute_exists(gsi3pk)")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":discarded", s(JobState::Discarded.as_str()))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.tally_existing(Kind::Write, out)?;
        Ok(())
    }
}
