//! Reads and writes of the admin API (`ojs-admin-api.md`) that need more than the data
//! plane's: listing a queue's jobs by state, retrying or deleting finished jobs, dead
//! letter statistics, maintenance mode, deregistering a stale worker.
//!
//! Nothing here adds a write to a job transition and nothing scans the table. Jobs are
//! found through what already exists:
//! - `available`: the ready index (`READY#<queue>[#shard]`), keys only;
//! - `scheduled`, `retryable`, `active`: the due index (`DUE#<queue>[#shard]`), whose
//!   projected `state` is filtered on;
//! - `completed`, `cancelled`, `discarded`: the lifecycle events of the queue
//!   ([`crate::Derived::list_events`], whatever stores them), then the jobs by id;
//! - `pending` (workflow steps waiting) is in no index and cannot be listed.
//!
//! A listing reads at most [`MAX_LISTED`] ids per queue and state; docs/performance.md
//! gives the cost of each query.

use std::collections::{BTreeMap, HashMap, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;
use ojs_core::event::EventKind;
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, JobState, QueueName, Transition};

use crate::derived::Derived;
use crate::error::{is_condition_failure, Missing, StoreError};
use crate::features::dead_letter::DeadLetter;
use crate::item::{self, item_key, s, ts, Item};
use crate::keys;
use crate::transition::JobWrite;
use crate::usage::Kind;
use crate::EventQuery;

/// Most job ids one listing collects per queue and state.
pub const MAX_LISTED: usize = 1000;

/// Partition of system-wide settings (maintenance mode).
const SYSTEM_PK: &str = "SYSTEM";
const MAINTENANCE_SK: &str = "MAINTENANCE";

/// The lifecycle event that moves a job into a terminal state.
fn terminal_event(state: JobState) -> Option<EventKind> {
    match state {
        JobState::Completed => Some(EventKind::Completed),
        JobState::Cancelled => Some(EventKind::Cancelled),
        JobState::Discarded => Some(EventKind::Discarded),
        _ => None,
    }
}

/// The job id of a job item's primary key (`JOB#<id>`).
fn id_of_pk(item: &Item) -> Option<JobId> {
    let pk = item.get("pk")?.as_s().ok()?;
    JobId::parse(pk.strip_prefix("JOB#")?).ok()
}

/// A job an admin action names, as it finds it.
enum Target {
    /// In the dead letter queue, whose own action applies.
    DeadLettered,
    /// Anywhere else.
    Job(Box<Job>),
}

/// Dead letter counts (`GET /ojs/v1/admin/dead-letter/stats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterStats {
    /// Dead-lettered jobs.
    pub total: u64,
    /// Per queue.
    pub by_queue: BTreeMap<String, u64>,
    /// Oldest discard time (RFC 3339).
    pub oldest_at: Option<String>,
    /// Newest discard time (RFC 3339).
    pub newest_at: Option<String>,
}

/// Maintenance mode as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Maintenance {
    /// Whether it is on.
    pub enabled: bool,
    /// Why (free text).
    pub reason: Option<String>,
    /// When it was turned on (RFC 3339).
    pub started_at: Option<String>,
    /// When it is expected to end (RFC 3339).
    pub ends_at: Option<String>,
    /// The queues it paused (resumed when it is turned off).
    pub paused_queues: Vec<String>,
}

service! {
    /// The admin API's queries and actions: job listings, retry and delete, dead letter stats, maintenance mode.
    Admin over derived: Derived
}

impl Admin<'_> {
    /// The settings of `queue` (paused, queue-wide rate limit), as FETCH reads them.
    pub async fn admin_queue_settings(
        &self,
        queue: &QueueName,
    ) -> Result<crate::QueueSettings, StoreError> {
        Ok(self
            .derived
            .engine
            .queue_settings(std::slice::from_ref(queue))
            .await?
            .remove(queue.as_str())
            .unwrap_or_default())
    }

    /// Ids of up to `cap` jobs of `queue` in `state` (see the module docs for where each
    /// state is found). Ids repeat only if a job moved during the read.
    pub async fn admin_job_ids(
        &self,
        queue: &QueueName,
        state: JobState,
        cap: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        let cap = cap.min(MAX_LISTED);
        if let Some(kind) = terminal_event(state) {
            let q = EventQuery {
                types: vec![kind.as_str().to_owned()],
                queues: vec![queue.as_str().to_owned()],
                after: None,
                limit: cap,
                tenant: Default::default(),
            };
            let page = self.derived.list_events(&q).await?;
            let mut seen = HashSet::new();
            return Ok(page
                .events
                .iter()
                .filter_map(|e| JobId::parse(e["data"]["job_id"].as_str()?).ok())
                .filter(|id| seen.insert(*id))
                .collect());
        }
        let mut ids = Vec::new();
        let shards = self.derived.engine.queue_shards();
        // Available jobs are in their tenants' lanes; waiting and active ones in the
        // queue's due partitions.
        let partitions: Vec<_> = match state {
            JobState::Available => self
                .derived
                .engine
                .lanes(std::slice::from_ref(queue))
                .await?
                .iter()
                .flat_map(|lane| {
                    (0..shards).map(move |shard| {
                        (&crate::schema::READY_INDEX, keys::ready_pk(lane, shard))
                    })
                })
                .collect(),
            JobState::Scheduled | JobState::Retryable | JobState::Active => (0..shards)
                .map(|shard| (&crate::schema::DUE_INDEX, keys::due_pk(queue, shard)))
                .collect(),
            _ => return Ok(Vec::new()),
        };
        for (index, pk) in partitions {
            let mut query = self
                .derived
                .engine
                .table
                .query_index(index)
                .key_condition_expression(format!("{} = :pk", index.keys.partition))
                .expression_attribute_values(":pk", s(pk));
            if state != JobState::Available {
                query = query
                    .filter_expression("#state = :state")
                    .expression_attribute_names("#state", "state")
                    .expression_attribute_values(":state", s(state.as_str()));
            }
            let mut pages = self.derived.engine.table.pages(query);
            while ids.len() < cap {
                let limit = i32::try_from(cap - ids.len())
                    .unwrap_or(1000)
                    .clamp(1, 1000);
                let Some(out) = pages.next_limited(Some(limit)).await? else {
                    break;
                };
                ids.extend(out.items().iter().filter_map(id_of_pk));
            }
        }
        ids.truncate(cap);
        Ok(ids)
    }

    /// The jobs of `ids` that exist, in the order given (strongly consistent reads, 100
    /// keys a call), as read: one keeping its args and meta in the payload bucket is
    /// incomplete until [`Engine::shown_jobs`] brings them back.
    pub async fn get_jobs(&self, ids: &[JobId]) -> Result<Vec<Job>, StoreError> {
        let how = crate::batch_read::BatchRead {
            consistent: true,
            ..Default::default()
        };
        let keys: Vec<Item> = ids.iter().map(item::job_key).collect();
        let mut found: HashMap<JobId, Job> = HashMap::new();
        for it in self.derived.engine.table.batch_get(keys, &how).await? {
            let job = item::job_from_item(&it)?;
            found.insert(job.id, job);
        }
        let jobs = ids.iter().filter_map(|id| found.remove(id)).collect();
        // As read: a job whose args and meta are in the payload bucket is incomplete and
        // its view says so; a caller that shows them brings them back
        // (`Store::shown_jobs`). The admin listings show summaries, without args.
        Ok(jobs)
    }

    /// Job `id` as an admin action on it finds it (one strongly consistent read;
    /// NotFound when there is no such job).
    async fn admin_target(&self, id: &JobId) -> Result<Target, StoreError> {
        let item = self
            .derived
            .engine
            .table
            .read_existing(item::job_key(id))
            .await
            .map_err(|e| e.naming(|| Missing::Job(id.to_string())))?;
        if item.contains_key("dead_sk") {
            return Ok(Target::DeadLettered);
        }
        item::job_from_item(&item).map(|job| Target::Job(Box::new(job)))
    }

    /// Puts a discarded or cancelled job back in its queue (attempt 0, errors cleared), as
    /// `POST /ojs/v1/admin/jobs/{id}/retry`; a dead-lettered job leaves the dead letter
    /// queue with it. Workflow steps are refused (their workflow already moved on).
    pub async fn admin_retry_job(&self, id: &JobId, now: Timestamp) -> Result<Job, StoreError> {
        let job = match self.admin_target(id).await? {
            Target::DeadLettered => {
                return DeadLetter::new(&self.derived.engine).retry(id, now).await
            }
            Target::Job(job) => *job,
        };
        let from = job.status.state;
        if !matches!(from, JobState::Discarded | JobState::Cancelled)
            || job.status.workflow_id.is_some()
        {
            return Err(StoreError::Conflict {
                current: Some(from),
            });
        }
        let write = JobWrite::new(
            Transition::Revive,
            self.derived.engine.ready_place(&job, &now),
        )
        .from(from)
        .version(job.status.version)
        .restart(&now)
        .write_id(&crate::job_item::write_id());
        let engine = &self.derived.engine;
        let done = engine.transition_read(&job, write).await?.unfinished();
        Ok(engine.shown_job(done).await)
    }

    /// Permanently deletes a finished (completed, cancelled or discarded) job; a
    /// dead-lettered one leaves the dead letter queue with it. NotFound when there is no
    /// such job, Conflict when it is not finished or is a workflow step.
    pub async fn admin_delete_job(&self, id: &JobId) -> Result<(), StoreError> {
        let job = match self.admin_target(id).await? {
            Target::DeadLettered => return DeadLetter::new(&self.derived.engine).delete(id).await,
            Target::Job(job) => *job,
        };
        let state = job.status.state;
        if !state.is_terminal() || job.status.workflow_id.is_some() {
            return Err(StoreError::Conflict {
                current: Some(state),
            });
        }
        let out = self
            .derived
            .engine
            .table
            .delete_at(item::job_key(id))
            .condition_expression("#state = :state AND attribute_not_exists(dead_sk)")
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":state", s(state.as_str()))
            .send()
            .await;
        self.derived
            .engine
            .table
            .tally_conditional(Kind::Write, out)?
            .map(|_| ())
            .ok_or(StoreError::Conflict { current: None })
    }

    /// Counts of the dead letter queue: one keys-only Query of the `DEAD` partition.
    pub async fn dead_letter_stats(&self) -> Result<DeadLetterStats, StoreError> {
        let mut stats = DeadLetterStats::default();
        let mut oldest: Option<i64> = None;
        let mut newest: Option<i64> = None;
        let query = self
            .derived
            .engine
            .table
            .query_table()
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(keys::DEAD_PK))
            .projection_expression("sk");
        let mut pages = self.derived.engine.table.pages(query);
        while let Some(out) = pages.next().await? {
            for sk in out.items().iter().filter_map(|i| i.get("sk")?.as_s().ok()) {
                let mut parts = sk.splitn(3, '#');
                let (Some(queue), Some(micros)) = (parts.next(), parts.next()) else {
                    continue;
                };
                stats.total += 1;
                *stats.by_queue.entry(queue.to_owned()).or_default() += 1;
                if let Ok(m) = micros.parse::<i64>() {
                    oldest = Some(oldest.map_or(m, |o| o.min(m)));
                    newest = Some(newest.map_or(m, |o| o.max(m)));
                }
            }
        }
        let format = |m: i64| {
            chrono::DateTime::<chrono::Utc>::from_timestamp_micros(m).map(|t| time::format(&t))
        };
        stats.oldest_at = oldest.and_then(format);
        stats.newest_at = newest.and_then(format);
        Ok(stats)
    }

    /// Maintenance mode as stored (off when never set).
    pub async fn maintenance(&self) -> Result<Maintenance, StoreError> {
        let key = item_key(SYSTEM_PK, MAINTENANCE_SK);
        let Some(item) = self.derived.engine.table.read_item(key).await? else {
            return Ok(Maintenance::default());
        };
        let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        Ok(Maintenance {
            enabled: item.get("enabled").and_then(|v| v.as_bool().ok()) == Some(&true),
            reason: get("reason"),
            started_at: get("started_at"),
            ends_at: get("ends_at"),
            paused_queues: item
                .get("paused_queues")
                .and_then(|v| v.as_l().ok())
                .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
                .unwrap_or_default(),
        })
    }

    /// Turns maintenance mode on (pausing every queue not already paused, and noting
    /// which) or off (resuming the queues it paused). Turning it on twice keeps the first
    /// record; off when off is a no-op.
    pub async fn set_maintenance(
        &self,
        enabled: bool,
        reason: Option<&str>,
        ends_at: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<Maintenance, StoreError> {
        let current = self.maintenance().await?;
        if current.enabled == enabled {
            return Ok(current);
        }
        let next = if enabled {
            let mut paused = Vec::new();
            for q in self.derived.engine.list_queues().await? {
                if !q.paused {
                    self.derived.engine.set_paused(&q.name, true).await?;
                    paused.push(q.name);
                }
            }
            Maintenance {
                enabled: true,
                reason: reason.map(str::to_owned),
                started_at: Some(time::format(&now)),
                ends_at: ends_at.map(|t| time::format(&t)),
                paused_queues: paused,
            }
        } else {
            for q in &current.paused_queues {
                self.derived.engine.set_paused(q, false).await?;
            }
            Maintenance::default()
        };
        let mut item = Item::from([
            ("pk".to_owned(), s(SYSTEM_PK)),
            ("sk".to_owned(), s(MAINTENANCE_SK)),
            ("enabled".to_owned(), AttributeValue::Bool(next.enabled)),
            (
                "paused_queues".to_owned(),
                AttributeValue::L(next.paused_queues.iter().map(|q| s(q.clone())).collect()),
            ),
        ]);
        for (k, v) in [
            ("reason", &next.reason),
            ("started_at", &next.started_at),
            ("ends_at", &next.ends_at),
        ] {
            if let Some(v) = v {
                item.insert(k.to_owned(), s(v.clone()));
            }
        }
        self.derived.engine.table.put_plain(item).await?;
        Ok(next)
    }

    /// Removes the record of worker `id` if its last heartbeat is before `stale_before`
    /// (its jobs' leases then run out and the sweep retries them). NotFound when there is
    /// no such worker, Conflict when it is not stale.
    pub async fn deregister_worker(
        &self,
        id: &str,
        stale_before: Timestamp,
    ) -> Result<(), StoreError> {
        let out = self
            .derived
            .engine
            .table
            .delete_at(crate::workers::worker_key(id))
            .condition_expression(
                "attribute_exists(pk) AND (attribute_not_exists(last_seen) OR last_seen < :stale)",
            )
            .expression_attribute_values(":stale", ts(&stale_before))
            .return_values_on_condition_check_failure(
                aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
            )
            .send()
            .await;
        match self.derived.engine.table.metered(Kind::Write, out) {
            Ok(_) => Ok(()),
            Err(e) => {
                if is_condition_failure(&e) {
                    let exists = e
                        .as_service_error()
                        .and_then(|se| match se {
                            aws_sdk_dynamodb::operation::delete_item::DeleteItemError::ConditionalCheckFailedException(c) => c.item(),
                            _ => None,
                        })
                        .is_some();
                    Err(if exists {
                        StoreError::Conflict { current: None }
                    } else {
                        StoreError::NotFound(Missing::Worker(id.to_owned()))
                    })
                } else {
                    Err(StoreError::from_sdk(e))
                }
            }
        }
    }
}
