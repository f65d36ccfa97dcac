//! Batch PUSH: all-or-nothing. Up to 100 items (jobs plus their unique locks) go in one
//! DynamoDB transaction; a larger batch is written in transactions of up to 100 items and,
//! if a later one fails, the earlier ones are deleted again (each delete conditional on
//! the job being untouched), so the batch as a whole either lands or does not.
//! The limit of that guarantee: between two chunk transactions a worker may already have
//! fetched a job of an earlier chunk; such a job cannot be taken back and the error says so.

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use ojs_core::unique::UniquePolicy;
use ojs_core::{Job, JobState};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{self, n, s, Item};
use crate::payloads::PayloadRef;

/// Items one DynamoDB transaction may hold.
const TX_ITEMS: usize = 100;

/// Bytes of items one transaction may hold: AWS allows 4 MB in all; the sizes here are
/// upper bounds ([`item::size_bound`]), and the margin covers what they leave out.
const TX_BYTES: usize = 4_000_000;

/// Times a chunk is sent again after its transaction was cancelled for a lock whose
/// holder turned out finished, or for a conflicting transaction.
const CHUNK_ROUNDS: usize = 4;

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

/// One job's share of a chunk: its item and, under a unique policy, its lock.
struct Planned {
    index: usize,
    job_item: Item,
    lock: Option<PlannedLock>,
    bytes: usize,
    /// When the job was created (a lock's period runs from then), epoch microseconds.
    created_us: i64,
}

struct PlannedLock {
    policy: UniquePolicy,
    item: Item,
    /// A finished job still named by the lock: the lock may be taken from it.
    takeover: Option<String>,
}

impl Planned {
    fn len(&self) -> usize {
        1 + usize::from(self.lock.is_some())
    }

    fn key_of(item: &Item) -> (String, String) {
        let text = |k: &str| {
            item.get(k)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        (text("pk"), text("sk"))
    }

    /// The keys a rollback deletes, each with what proves the item is this batch's: a
    /// job's `created_at`, a lock's `job_id`.
    fn rollback_keys(&self) -> Vec<Item> {
        let proof_key = |item: &Item, proof: &str| -> Item {
            let mut key: Item = ["pk", "sk"]
                .into_iter()
                .filter_map(|k| Some((k.to_owned(), item.get(k)?.clone())))
                .collect();
            if let Some(v) = item.get(proof) {
                key.insert(OURS.to_owned(), v.clone());
            }
            key
        };
        let mut keys = vec![proof_key(&self.job_item, "created_at")];
        if let Some(lock) = &self.lock {
            keys.push(proof_key(&lock.item, "job_id"));
        }
        keys
    }
}

/// Two jobs of one batch writing the same item (the same client id, or the same unique
/// key) conflict: refused before any write, as AWS refuses a transaction naming one item
/// twice (review #8).
fn refuse_repeated_items(planned: &[Planned], jobs: &[Job]) -> Result<(), BatchError> {
    let mut seen: std::collections::HashMap<(String, String), usize> = Default::default();
    for p in planned {
        let items = std::iter::once(&p.job_item).chain(p.lock.as_ref().map(|l| &l.item));
        for item in items {
            let key = Planned::key_of(item);
            let is_job = key.1 == "JOB";
            if let Some(first) = seen.insert(key, p.index) {
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

/// Chunks of at most [`TX_ITEMS`] items and [`TX_BYTES`] bytes, in request order.
fn chunked(planned: Vec<Planned>) -> Vec<Vec<Planned>> {
    let mut chunks: Vec<Vec<Planned>> = vec![Vec::new()];
    let (mut items, mut bytes) = (0, 0);
    for p in planned {
        let full = items + p.len() > TX_ITEMS || bytes + p.bytes > TX_BYTES;
        if full && chunks.last().is_some_and(|c| !c.is_empty()) {
            chunks.push(Vec::new());
            (items, bytes) = (0, 0);
        }
        items += p.len();
        bytes += p.bytes;
        if let Some(last) = chunks.last_mut() {
            last.push(p);
        }
    }
    chunks
}

/// In a rollback key: what the item holds while it is this batch's (a job's
/// `created_at`, a lock's `job_id`).
const OURS: &str = "~ours";

/// What became of one chunk's transaction.
enum ChunkOutcome {
    Written,
    /// Refused: this job conflicts.
    Conflict(usize, StoreError),
    /// Failed without an answer saying whether it was applied.
    Unknown(StoreError),
    /// Failed, certainly not applied.
    Failed(StoreError),
}

impl Engine {
    /// Stores every job or none. A job too large for its item keeps its args and meta in
    /// the payload bucket, as a job pushed alone does ([`Engine::new_job_item`]): the
    /// objects are put first, then the transactions; the objects are untagged when the
    /// batch landed and deleted when it did not.
    #[tracing::instrument(name = "push_batch", level = "error", skip_all, fields(jobs = jobs.len()))]
    pub async fn put_batch(&self, jobs: &[Job]) -> Result<(), BatchError> {
        // Sizes are checked before anything is written (a refused batch writes nothing).
        let bodies = jobs
            .iter()
            .map(|j| self.offload_body(j))
            .collect::<Result<Vec<_>, _>>()?;
        let mut queues: Vec<&str> = jobs.iter().map(|j| j.spec.queue.as_str()).collect();
        queues.sort_unstable();
        queues.dedup();
        self.refuse_if_paused(&queues).await?;
        let mut seen = std::collections::HashSet::new();
        let lanes: Vec<crate::keys::Lane> = jobs
            .iter()
            .map(crate::keys::Lane::of)
            .filter(|lane| seen.insert(lane.clone()))
            .collect();
        for lane in &lanes {
            self.register_lane(lane).await?;
        }
        let (job_items, payloads) = self.new_job_items(jobs, bodies).await?;
        let mut planned = Vec::with_capacity(jobs.len());
        for ((index, job), job_item) in jobs.iter().enumerate().zip(job_items) {
            planned.push(self.plan(index, job, job_item)?);
        }
        if let Err(e) = refuse_repeated_items(&planned, jobs) {
            self.settle_offloads(&payloads, |_| false).await;
            return Err(e);
        }
        let mut written: Vec<Item> = Vec::new();
        // The jobs whose items were (or may have been) written.
        let mut landed = vec![false; jobs.len()];
        for mut chunk in chunked(planned) {
            let failure = match self.write_chunk(&mut chunk).await {
                ChunkOutcome::Written => {
                    written.extend(chunk.iter().flat_map(Planned::rollback_keys));
                    chunk.iter().for_each(|p| landed[p.index] = true);
                    continue;
                }
                ChunkOutcome::Unknown(e) => {
                    // It may have landed: what it wrote is rolled back with the rest.
                    written.extend(chunk.iter().flat_map(Planned::rollback_keys));
                    chunk.iter().for_each(|p| landed[p.index] = true);
                    BatchError::Store(e)
                }
                ChunkOutcome::Failed(e) => BatchError::Store(e),
                ChunkOutcome::Conflict(index, source) => BatchError::Conflict { index, source },
            };
            let rolled_back = self.roll_back(&written).await;
            // Rolled back whole: no item names an object, which all go. Else an item
            // left (a job fetched meanwhile) may name its object, which is kept: a job
            // item that was deleted takes its object with it (the change stream).
            let kept = |i: usize| rolled_back.is_err() && landed[i];
            self.settle_offloads(&payloads, kept).await;
            rolled_back?;
            return Err(failure);
        }
        self.settle_offloads(&payloads, |_| true).await;
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

    /// One job's items: the job, and its unique lock (a live lock is not taken over inside
    /// a batch: a batch with a live duplicate is refused whole).
    fn plan(&self, index: usize, job: &Job, job_item: Item) -> Result<Planned, StoreError> {
        let lock = match &job.spec.unique {
            Some(u) => {
                let policy = UniquePolicy::from_json(u).map_err(StoreError::corrupt)?;
                let key = format!("UNIQ#{}", policy.fingerprint(&job.spec));
                let item = crate::unique::lock_item(&key, &job.id, &policy, job.status.created_at);
                Some(PlannedLock {
                    policy,
                    item,
                    takeover: None,
                })
            }
            None => None,
        };
        let bytes =
            item::size_bound(&job_item) + lock.as_ref().map_or(0, |l| item::size_bound(&l.item));
        Ok(Planned {
            index,
            job_item,
            lock,
            bytes,
            created_us: job.status.created_at.timestamp_micros(),
        })
    }

    /// The items of new jobs ([`Engine::new_job_item`], payload puts concurrently), with
    /// each one's payload reference; when a put fails, the objects put are deleted again.
    pub(crate) async fn new_job_items(
        &self,
        jobs: &[Job],
        bodies: Vec<Option<Vec<u8>>>,
    ) -> Result<(Vec<Item>, Vec<Option<PayloadRef>>), StoreError> {
        let made = futures::future::join_all(
            jobs.iter()
                .zip(bodies)
                .map(|(job, body)| self.new_job_item(job, body)),
        )
        .await;
        let mut items = Vec::with_capacity(made.len());
        let mut payloads = Vec::with_capacity(made.len());
        let mut failure = None;
        for m in made {
            match m {
                Ok((item, payload)) => {
                    items.push(item);
                    payloads.push(payload);
                }
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            self.settle_offloads(&payloads, |_| false).await;
            return Err(e);
        }
        Ok((items, payloads))
    }

    /// [`Engine::settle_offload`] of each job's payload: `written(index)` says whether
    /// its item is (or may be) stored.
    pub(crate) async fn settle_offloads(
        &self,
        payloads: &[Option<PayloadRef>],
        written: impl Fn(usize) -> bool,
    ) {
        let settling = payloads
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_some())
            .map(|(i, r)| self.settle_offload(r.as_ref(), written(i)));
        futures::future::join_all(settling).await;
    }

    fn chunk_items(&self, chunk: &[Planned]) -> Result<Vec<TransactWriteItem>, StoreError> {
        let bad = |e: aws_sdk_dynamodb::error::BuildError| StoreError::Backend(e.to_string());
        let mut items = Vec::with_capacity(TX_ITEMS);
        for p in chunk {
            let put = Put::builder()
                .table_name(self.table())
                .set_item(Some(p.job_item.clone()))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(bad)?;
            items.push(TransactWriteItem::builder().put(put).build());
            let Some(lock) = &p.lock else { continue };
            let mut put = Put::builder()
                .table_name(self.table())
                .set_item(Some(lock.item.clone()))
                .expression_attribute_values(":now", n(p.created_us))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            put = match &lock.takeover {
                Some(holder) => put
                    .condition_expression(
                        "attribute_not_exists(pk) OR until_us < :now OR job_id = :holder",
                    )
                    .expression_attribute_values(":holder", s(holder.clone())),
                None => put.condition_expression("attribute_not_exists(pk) OR until_us < :now"),
            };
            items.push(
                TransactWriteItem::builder()
                    .put(put.build().map_err(bad)?)
                    .build(),
            );
        }
        Ok(items)
    }

    /// Writes one chunk in one transaction. A lock held by a job that has finished is
    /// taken over (review #11: the batch refused what a single PUSH accepts), and a
    /// transaction cancelled by a concurrent one is sent again, a few times.
    async fn write_chunk(&self, chunk: &mut [Planned]) -> ChunkOutcome {
        for _ in 0..CHUNK_ROUNDS {
            let items = match self.chunk_items(chunk) {
                Ok(items) => items,
                Err(e) => return ChunkOutcome::Failed(e),
            };
            let err = match self.table.transact(items).await {
                Ok(()) => return ChunkOutcome::Written,
                Err(e) => e,
            };
            let Some(TransactWriteItemsError::TransactionCanceledException(t)) =
                err.as_service_error()
            else {
                // A definite refusal (validation, throttling after the SDK's retries) or
                // a failure without an answer (timeout, dropped connection, 500), after
                // which the transaction may have been applied.
                let certain = err
                    .as_service_error()
                    .and_then(|e| e.meta().code())
                    .is_some_and(|code| {
                        matches!(
                            code,
                            "ValidationException"
                                | "ProvisionedThroughputExceededException"
                                | "ThrottlingException"
                                | "RequestLimitExceeded"
                                | "ResourceNotFoundException"
                                | "IdempotentParameterMismatchException"
                        )
                    });
                let e = StoreError::from_sdk(err);
                return if certain {
                    ChunkOutcome::Failed(e)
                } else {
                    ChunkOutcome::Unknown(e)
                };
            };
            let reasons = t.cancellation_reasons().to_vec();
            let mut at = 0;
            for p in chunk.iter_mut() {
                let job_reason = reasons.get(at).and_then(|r| r.code());
                at += 1;
                if job_reason == Some("ConditionalCheckFailed") {
                    return ChunkOutcome::Conflict(p.index, StoreError::Duplicate);
                }
                let Some(lock) = p.lock.as_mut() else {
                    continue;
                };
                let reason = reasons.get(at);
                at += 1;
                let Some(reason) = reason.filter(|r| r.code() == Some("ConditionalCheckFailed"))
                else {
                    continue;
                };
                let holder = reason
                    .item()
                    .and_then(|i| i.get("job_id"))
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default();
                match self.live_holder(&holder, &lock.policy).await {
                    Ok(None) => lock.takeover = Some(holder),
                    Ok(Some(existing)) => {
                        let existing = existing.id.to_string();
                        return ChunkOutcome::Conflict(
                            p.index,
                            StoreError::UniqueConflict { existing },
                        );
                    }
                    Err(e) => return ChunkOutcome::Failed(e),
                }
            }
        }
        ChunkOutcome::Failed(StoreError::Throttled(
            "batch transaction kept conflicting with concurrent writes".into(),
        ))
    }

    /// Deletes what was written (or may have been). A job is deleted only while it is
    /// this batch's and untouched (its `created_at`, version 1); a lock only while it
    /// names this batch's job. An item that is not there (a chunk whose fate was unknown
    /// and that did not land) is no failure.
    async fn roll_back(&self, written: &[Item]) -> Result<(), StoreError> {
        let mut stuck = 0usize;
        for key in written {
            let is_job = key
                .get("sk")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
                == Some("JOB");
            let mut key = key.clone();
            let ours = key.remove(OURS);
            let mut del = self.table.delete_at(key);
            del = match (is_job, ours) {
                (true, Some(created)) => del
                    .condition_expression(
                        "attribute_not_exists(pk) OR (version = :one AND created_at = :created)",
                    )
                    .expression_attribute_values(":one", n(1))
                    .expression_attribute_values(":created", created),
                (false, Some(holder)) => del
                    .condition_expression("attribute_not_exists(pk) OR job_id = :mine")
                    .expression_attribute_values(":mine", holder),
                // Every key carries its proof; without one nothing is deleted.
                (_, None) => continue,
            };
            match self
                .table
                .metered(crate::usage::Kind::Write, del.send().await)
            {
                Ok(_) => {}
                // A lock that names another job is not this batch's any more.
                Err(e)
                    if !is_job
                        && e.as_service_error()
                            .is_some_and(|e| e.is_conditional_check_failed_exception()) => {}
                Err(_) => stuck += 1,
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

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;

    fn planned(index: usize, locked: bool, bytes: usize) -> Planned {
        Planned {
            index,
            job_item: Item::new(),
            lock: locked.then(|| PlannedLock {
                policy: UniquePolicy::from_json(&serde_json::json!({}))
                    .unwrap_or_else(|e| panic!("{}", e.message)),
                item: Item::new(),
                takeover: None,
            }),
            bytes,
            created_us: 0,
        }
    }

    fn shape(chunks: &[Vec<Planned>]) -> Vec<Vec<usize>> {
        chunks
            .iter()
            .map(|c| c.iter().map(|p| p.index).collect())
            .collect()
    }

    #[test]
    fn chunks_hold_at_most_100_items_and_4_mb_in_request_order() {
        // 150 locked jobs are 300 items: three transactions of 50 jobs.
        let by_count = chunked((0..150).map(|i| planned(i, true, 10)).collect());
        let lens: Vec<usize> = by_count.iter().map(Vec::len).collect();
        assert_eq!(lens, vec![50, 50, 50]);
        assert_eq!(shape(&by_count).concat(), (0..150).collect::<Vec<_>>());
        // 100 jobs of 1 MB: four to a transaction would be 4 MB, over the budget.
        let by_bytes = chunked((0..10).map(|i| planned(i, false, 1_000_000)).collect());
        assert_eq!(
            shape(&by_bytes),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
        );
        let exact = chunked((0..5).map(|i| planned(i, false, TX_BYTES / 4)).collect());
        assert_eq!(shape(&exact), vec![vec![0, 1, 2, 3], vec![4]]);
        assert_eq!(shape(&chunked(Vec::new())), vec![Vec::<usize>::new()]);
        let big = chunked(vec![planned(0, false, TX_BYTES + 1), planned(1, false, 1)]);
        assert_eq!(shape(&big), vec![vec![0], vec![1]], "never an empty chunk");
    }

    #[test]
    fn an_item_size_bound_is_never_below_what_dynamodb_counts() {
        // AWS: names plus values; a string is its UTF-8 length, a number at most 21 bytes.
        let item = Item::from([
            ("pk".to_owned(), s("JOB#abc")),
            ("version".to_owned(), n(12_345)),
            ("flag".to_owned(), AttributeValue::Bool(true)),
        ]);
        let aws = 2 + 7 + 7 + 4 + 4 + 1; // number 12345: 3 significant-digit bytes + 1
        assert!(item::size_bound(&item) >= aws);
        assert!(item::size_bound(&item) <= aws + 8, "close, not wildly over");
        // Each kind of value, against the bound's own rule (each at least AWS's count:
        // a name plus its bytes; sets, lists and maps with their overhead).
        let one =
            |name: &str, v: AttributeValue| item::size_bound(&Item::from([(name.to_owned(), v)]));
        let blob = |b: &[u8]| aws_sdk_dynamodb::primitives::Blob::new(b.to_vec());
        assert_eq!(one("b", AttributeValue::B(blob(&[0; 10]))), 1 + 10);
        assert_eq!(
            one("ss", AttributeValue::Ss(vec!["ab".into(), "c".into()])),
            2 + 3 + 2
        );
        assert_eq!(one("ns", AttributeValue::Ns(vec!["12".into()])), 2 + 3);
        assert_eq!(one("bs", AttributeValue::Bs(vec![blob(&[1, 2, 3])])), 2 + 3);
        let list = AttributeValue::L(vec![s("xy"), n(5)]);
        assert_eq!(one("l", list), 1 + 3 + (1 + 3) + (1 + 2));
        let map = AttributeValue::M(Item::from([("k".to_owned(), s("v"))]));
        assert_eq!(one("m", map), 1 + 3 + (1 + 1 + 2));
        assert_eq!(one("x", AttributeValue::Null(true)), 1 + 1);
    }
}
