//! Batch PUSH: all-or-nothing. Up to 100 items (jobs plus their unique locks) go in one
//! DynamoDB transaction; a larger batch is written in transactions of up to 100 items and,
//! if a later one fails, the earlier ones are deleted again (each delete conditional on
//! the job being untouched), so the batch as a whole either lands or does not.
//! The limit of that guarantee: between two chunk transactions a worker may already have
//! fetched a job of an earlier chunk; such a job cannot be taken back and the error says so.

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Delete, Put, ReturnConsumedCapacity, TransactWriteItem};
use ojs_core::event::{Event, EventKind};
use ojs_core::unique::UniquePolicy;
use ojs_core::{Job, JobState};

use crate::error::StoreError;
use crate::item::{self, n, s, Item};
use crate::usage::Kind;
use crate::Store;

/// Items one DynamoDB transaction may hold.
const TX_ITEMS: usize = 100;

/// Why a batch was refused.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A job conflicts (existing id or live unique key); nothing was written.
    #[error("job {index} conflicts: {source}")]
    Conflict {
        /// Index in the request.
        index: usize,
        /// The conflict.
        source: StoreError,
    },
    /// The store failed; nothing was written (or everything written was removed again).
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct Planned {
    index: usize,
    items: Vec<TransactWriteItem>,
    keys: Vec<Item>,
}

/// Two jobs of one batch writing the same item (the same client id, or the same unique
/// key) conflict: refused before any write, as AWS refuses a transaction naming one item
/// twice (review #8).
fn refuse_repeated_items(planned: &[Planned], jobs: &[Job]) -> Result<(), BatchError> {
    let mut seen: std::collections::HashMap<(String, String), usize> = Default::default();
    for p in planned {
        for key in &p.keys {
            let text = |k: &str| {
                key.get(k)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            let (pk, sk) = (text("pk"), text("sk"));
            let is_job = sk == "JOB";
            if let Some(first) = seen.insert((pk, sk), p.index) {
                let source = if is_job {
                    StoreError::Duplicate
                } else {
                    StoreError::UniqueConflict {
                        existing: jobs
                            .get(first)
                            .map(|j| j.id.to_string())
                            .unwrap_or_default(),
                    }
                };
                return Err(BatchError::Conflict {
                    index: p.index,
                    source,
                });
            }
        }
    }
    Ok(())
}

/// In a rollback key of a unique lock: the job of this batch the lock was taken for.
const LOCK_HOLDER: &str = "~holder";

impl Store {
    /// Stores every job or none.
    pub async fn put_batch(&self, jobs: &[Job]) -> Result<(), BatchError> {
        for job in jobs {
            item::check_spec_size(job)?;
        }
        let mut queues: Vec<&str> = jobs.iter().map(|j| j.spec.queue.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        self.refuse_if_paused(&queues).await?;
        for q in queues {
            self.register_queue(q).await?;
        }
        let mut planned = Vec::with_capacity(jobs.len());
        for (index, job) in jobs.iter().enumerate() {
            planned.push(self.plan(index, job)?);
        }
        refuse_repeated_items(&planned, jobs)?;
        let mut chunks: Vec<Vec<Planned>> = vec![Vec::new()];
        let mut size = 0;
        for p in planned {
            if size + p.items.len() > TX_ITEMS {
                chunks.push(Vec::new());
                size = 0;
            }
            size += p.items.len();
            if let Some(last) = chunks.last_mut() {
                last.push(p);
            }
        }
        let mut written: Vec<Item> = Vec::new();
        for chunk in &chunks {
            let items: Vec<TransactWriteItem> =
                chunk.iter().flat_map(|p| p.items.iter().cloned()).collect();
            let out = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            match out {
                Ok(out) => {
                    self.usage.record(Kind::Write, out.consumed_capacity());
                    written.extend(chunk.iter().flat_map(|p| p.keys.iter().cloned()));
                }
                Err(e) => {
                    self.usage.record(Kind::Write, None);
                    let conflict = match e.as_service_error() {
                        Some(TransactWriteItemsError::TransactionCanceledException(t)) => {
                            // Map the failed item back to its job.
                            let mut at = 0;
                            let mut found = None;
                            for p in chunk {
                                for _ in 0..p.items.len() {
                                    if t.cancellation_reasons().get(at).and_then(|r| r.code())
                                        == Some("ConditionalCheckFailed")
                                    {
                                        found = found.or(Some(p.index));
                                    }
                                    at += 1;
                                }
                            }
                            found
                        }
                        _ => None,
                    };
                    let cause = StoreError::from_sdk(e);
                    self.roll_back(&written).await?;
                    return Err(match conflict {
                        Some(index) => BatchError::Conflict {
                            index,
                            source: StoreError::Duplicate,
                        },
                        None => BatchError::Store(cause),
                    });
                }
            }
        }
        let events: Vec<Event> = jobs
            .iter()
            .map(|j| {
                let kind = if j.status.state == JobState::Scheduled {
                    EventKind::Scheduled
                } else {
                    EventKind::Enqueued
                };
                Event::for_job(kind, j, &j.status.created_at, "ojs://ojs-serverless/api")
            })
            .collect();
        let mut moves = self.moves();
        moves.add_all(jobs, None);
        self.emit_and_count(&events, moves).await;
        let timers: Vec<_> = jobs
            .iter()
            .filter(|j| j.status.state == JobState::Scheduled)
            .filter_map(|j| {
                Some((
                    crate::timer::TimerTarget::Job {
                        job_id: j.id.to_string(),
                    },
                    j.spec.scheduled_at?,
                ))
            })
            .collect();
        self.arm_timer(timers).await;
        Ok(())
    }

    /// The transaction items of one job: the job, and its unique lock (live locks are not
    /// taken over inside a batch: a batch with a duplicate is refused whole).
    fn plan(&self, index: usize, job: &Job) -> Result<Planned, StoreError> {
        let job_item = item::job_to_item(job, self.queue_shards());
        let mut keys = vec![item::job_key(&job.id)];
        let mut items = vec![TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(self.table())
                    .set_item(Some(job_item))
                    .condition_expression("attribute_not_exists(pk)")
                    .build()
                    .map_err(|e| StoreError::Backend(e.to_string()))?,
            )
            .build()];
        if let Some(u) = &job.spec.unique {
            let policy = UniquePolicy::from_json(u).map_err(|e| StoreError::Corrupt(e.message))?;
            let key = format!("UNIQ#{}", policy.fingerprint(&job.spec));
            let now = job.status.created_at;
            let mut lock = Item::from([
                ("pk".to_owned(), s(key.clone())),
                ("sk".to_owned(), s("UNIQ")),
                ("job_id".to_owned(), s(job.id.to_string())),
            ]);
            let ttl = match policy.period {
                Some(p) => {
                    let until = ojs_core::time::after(now, p);
                    lock.insert("until_us".into(), n(until.timestamp_micros()));
                    until.timestamp() + 60
                }
                None => {
                    now.timestamp() + i64::try_from(self.config.retention.as_secs()).unwrap_or(0)
                }
            };
            lock.insert("ttl".into(), n(ttl));
            items.push(
                TransactWriteItem::builder()
                    .put(
                        Put::builder()
                            .table_name(self.table())
                            .set_item(Some(lock))
                            .condition_expression("attribute_not_exists(pk) OR until_us < :now")
                            .expression_attribute_values(":now", n(now.timestamp_micros()))
                            .build()
                            .map_err(|e| StoreError::Backend(e.to_string()))?,
                    )
                    .build(),
            );
            // The holder travels with the key: a rollback deletes the lock only while it
            // still names this job (a `replace` PUSH may have taken it over meanwhile).
            keys.push(Item::from([
                ("pk".to_owned(), s(key)),
                ("sk".to_owned(), s("UNIQ")),
                (LOCK_HOLDER.to_owned(), s(job.id.to_string())),
            ]));
        }
        Ok(Planned { index, items, keys })
    }

    /// Deletes what earlier chunks wrote. A job is only deleted while untouched
    /// (version 1); a lock only while it still names a job of this batch.
    async fn roll_back(&self, written: &[Item]) -> Result<(), StoreError> {
        let mut stuck = 0usize;
        for chunk in written.chunks(TX_ITEMS) {
            for key in chunk {
                let is_job = key
                    .get("sk")
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                    == Some("JOB");
                let mut key = key.clone();
                let holder = key.remove(LOCK_HOLDER);
                let mut del = Delete::builder()
                    .table_name(self.table())
                    .set_key(Some(key));
                if is_job {
                    del = del
                        .condition_expression("version = :one")
                        .expression_attribute_values(":one", n(1));
                } else if let Some(holder) = holder {
                    del = del
                        .condition_expression("job_id = :mine")
                        .expression_attribute_values(":mine", holder);
                }
                let del = del
                    .build()
                    .map_err(|e| StoreError::Backend(e.to_string()))?;
                let out = self
                    .client
                    .delete_item()
                    .table_name(del.table_name())
                    .set_key(Some(del.key().clone()))
                    .set_condition_expression(del.condition_expression().map(str::to_owned))
                    .set_expression_attribute_values(del.expression_attribute_values().cloned())
                    .send()
                    .await;
                if out.is_err() {
                    stuck += 1;
                }
            }
        }
        if stuck > 0 {
            return Err(StoreError::Backend(format!(
                "batch failed part-way and {stuck} already-stored items could not be removed (fetched by a worker meanwhile)"
            )));
        }
        Ok(())
    }
}
