//! The dead letter queue: a job discarded with `on_exhaustion: dead_letter` gets an entry
//! item in the `DEAD` partition of the table (sort key: queue, discard time, id), written
//! in the same transaction as the job's discard and removed in the same transaction as
//! its retry or deletion; the job item carries the same key as `dead_sk`. Listing is a
//! strongly consistent Query of that partition plus one BatchGetItem for the page (never
//! a Scan), so a job is listed as soon as the FAIL that dead-lettered it has answered (a
//! GSI, as before, lags: the conformance case L1-RTR-007 lists right after the FAIL).
//! Dead-lettering is rare, so the one partition shared by these entries stays far below
//! a partition's 1,000 writes a second. An entry names its job's tenant, and a tenant's
//! listing filters on it (the Query reads, and pays for, every entry of the queue or of
//! all queues; what it returns and counts are the tenant's).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{Delete, Select, TransactWriteItem};
use ojs_core::tenant::Scope;
use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId, JobState, QueueName, Transition};

use crate::effects::Before;
use crate::engine::dead_entry::DEAD_TENANT;
use crate::engine::Engine;
use crate::error::{Missing, StoreError};
use crate::item::{self, s, Item};
use crate::keys;
use crate::transition::JobWrite;

/// One page of the dead letter queue.
#[derive(Debug, Clone)]
pub struct DeadLetterPage {
    /// The jobs, oldest discard first, as read: one keeping its args and meta in the
    /// payload bucket is incomplete until [`Engine::shown_jobs`] brings them back.
    pub jobs: Vec<Job>,
    /// How many dead-lettered jobs match the filter.
    pub total: usize,
}

service! {
    /// The dead letter queue: listing, retry and deletion of its entries.
    DeadLetter over engine: Engine
}

impl DeadLetter<'_> {
    /// Dead-lettered jobs, optionally of one queue, of the tenants `tenant` sees,
    /// `offset`/`limit` paginated.
    pub async fn list(
        &self,
        queue: Option<&QueueName>,
        tenant: &Scope,
        limit: usize,
        offset: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        let total = self.count_dead(queue, tenant).await?;
        if offset >= total {
            return Ok(DeadLetterPage {
                jobs: Vec::new(),
                total,
            });
        }
        let wanted = offset.saturating_add(limit);
        let mut keys: Vec<Item> = Vec::new();
        let mut pages = self.engine.table.pages(self.dead_query(queue, tenant));
        while keys.len() < wanted {
            let limit = i32::try_from(wanted - keys.len()).unwrap_or(1000).min(1000);
            let Some(out) = pages.next_limited(Some(limit)).await? else {
                break;
            };
            keys.extend(out.items().iter().filter_map(|i| {
                let id = JobId::parse(i.get("job_id")?.as_s().ok()?).ok()?;
                Some(item::job_key(&id))
            }));
        }
        let page: Vec<Item> = keys.into_iter().skip(offset).take(limit).collect();
        let mut jobs = self.batch_get_jobs(page).await?;
        // An entry whose job is gone or no longer dead-lettered (it cannot be, as both
        // change in one transaction; this guards against a hand-edited table) is left out,
        // as is one of another tenant (an entry written before entries named tenants).
        jobs.retain(|j| j.status.dead_letter && tenant.sees(j.tenant().as_ref()));
        Ok(DeadLetterPage { jobs, total })
    }

    fn dead_query(
        &self,
        queue: Option<&QueueName>,
        tenant: &Scope,
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        let mut req = self
            .engine
            .table
            .query_table()
            .consistent_read(true)
            .expression_attribute_values(":pk", s(keys::DEAD_PK));
        req = match tenant {
            Scope::Any => req,
            Scope::One(None) => req
                .filter_expression("attribute_not_exists(#tenant)")
                .expression_attribute_names("#tenant", DEAD_TENANT),
            Scope::One(Some(t)) => req
                .filter_expression("#tenant = :tenant")
                .expression_attribute_names("#tenant", DEAD_TENANT)
                .expression_attribute_values(":tenant", s(t.as_str())),
        };
        match queue {
            Some(q) => req
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":prefix", s(format!("{q}#"))),
            None => req.key_condition_expression("pk = :pk"),
        }
    }

    async fn count_dead(
        &self,
        queue: Option<&QueueName>,
        tenant: &Scope,
    ) -> Result<usize, StoreError> {
        let mut total = 0usize;
        let mut pages = self
            .engine
            .table
            .pages(self.dead_query(queue, tenant).select(Select::Count));
        while let Some(out) = pages.next().await? {
            total += usize::try_from(out.count()).unwrap_or(0);
        }
        Ok(total)
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
        for it in self.engine.table.batch_get(keys, &how).await? {
            let job = item::job_from_item(&it)?;
            found.insert(crate::keys::job_pk(&job.id), job);
        }
        let jobs = order
            .into_iter()
            .filter_map(|pk| found.remove(&pk))
            .collect();
        // As read: a job whose args and meta are in the payload bucket is incomplete and
        // its view says so; the OJS listing, which shows them, brings them back
        // (`Store::shown_jobs`), the admin one shows summaries.
        Ok(jobs)
    }

    /// Puts a dead-lettered job back in its queue: attempt 0, errors cleared. NotFound
    /// (as not in the dead letter queue) when the job is not there, or no longer is by the
    /// time of the write (retried, deleted or changed meanwhile).
    pub async fn retry(&self, id: &JobId, now: Timestamp) -> Result<Job, StoreError> {
        let not_dead = || StoreError::NotFound(Missing::DeadLetter(id.to_string()));
        let item = match self.engine.table.read_existing(item::job_key(id)).await {
            Err(StoreError::NotFound(_)) => return Err(not_dead()),
            other => other?,
        };
        let Some(sk) = item.get("dead_sk").and_then(|v| v.as_s().ok()).cloned() else {
            return Err(not_dead());
        };
        let job = item::job_from_item(&item)?;
        let wid = crate::job_item::write_id();
        let req = JobWrite::new(Transition::RetryDead, self.engine.ready_place(&job, &now))
            .version(job.status.version)
            .listed_dead(sk.clone())
            .restart(&now)
            .write_id(&wid);
        let entry = self.engine.dead_entry_delete(&sk)?;
        let done = self
            .engine
            .transition_with(id, req, entry, Some(Before::of(&job)))
            .await
            .map_err(|e| match e {
                StoreError::NotFound(_) | StoreError::Conflict { .. } => not_dead(),
                other => other,
            })?
            .unfinished();
        Ok(self.engine.shown_job(done).await)
    }

    /// Permanently deletes a dead-lettered job, and its entry with it.
    pub async fn delete(&self, id: &JobId) -> Result<(), StoreError> {
        let Some(sk) = self.dead_sk_of(id).await? else {
            return Err(StoreError::NotFound(Missing::DeadLetter(id.to_string())));
        };
        let delete = Delete::builder()
            .table_name(self.engine.table())
            .set_key(Some(item::job_key(id)))
            .condition_expression("#state = :discarded AND dead_sk = :sk")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":discarded", s(JobState::Discarded.as_str()))
            .expression_attribute_values(":sk", s(sk.clone()))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let delete = TransactWriteItem::builder().delete(delete).build();
        match self
            .engine
            .table
            .transact(vec![delete, self.engine.dead_entry_delete(&sk)?])
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => {
                match crate::error::cancellation_codes(&e) {
                    // Retried, deleted or changed meanwhile: no longer a dead letter.
                    Some(codes)
                        if codes.first().map(String::as_str) == Some("ConditionalCheckFailed") =>
                    {
                        Err(StoreError::NotFound(Missing::DeadLetter(id.to_string())))
                    }
                    Some(_) => Err(StoreError::Throttled(
                        "the transaction met a concurrent write; retry".into(),
                    )),
                    None => Err(StoreError::from_sdk(e)),
                }
            }
        }
    }

    /// The dead letter key of job `id`, when it is dead-lettered.
    async fn dead_sk_of(&self, id: &JobId) -> Result<Option<String>, StoreError> {
        Ok(self
            .engine
            .table
            .read_item(item::job_key(id))
            .await?
            .and_then(|i| i.get("dead_sk").and_then(|v| v.as_s().ok()).cloned()))
    }
}
