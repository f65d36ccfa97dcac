//! Per-queue job counts, kept by atomic counters: the change stream consumer sums the
//! moves of a batch of records (one state down, another up) per queue shard and adds
//! them with one `ADD` to that shard's counter item, so a batch of a thousand transitions
//! costs one write per queue shard, on no request path. Reading the counts is one
//! `BatchGetItem` of the queue's counter items (one per shard), whatever the number of
//! jobs.
//!
//! Live states (available, scheduled, pending, active, retryable) are current counts;
//! terminal states (completed, discarded, cancelled) count transitions into them since
//! the counter was created (retention deletes and dead-letter retries do not take them
//! back).
//!
//! The stream delivers at least once, and a batch's `ADD`s are applied once
//! (`stream/apply.rs`). A batch given up after its retries leaves a live counter off:
//! the sweep repairs a shard once it has been quiet for one sweep
//! ([`crate::Derived::heal_counters`]); [`crate::Derived::recount_queue`] sets the live counts from the
//! indexes at once.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{Select, TransactWriteItem};
use ojs_core::{time, Job, JobState, QueueName};

use crate::derived::counter_add::CounterAdd;
use crate::derived::Derived;
use crate::error::StoreError;
use crate::item::{n, s, Item};
use crate::keys;
use crate::usage::Kind;

/// Per-queue job counts, and whether the queue is paused and its depth bound (read with
/// them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueStats {
    /// Whether the queue exists: a job was pushed to it or a setting made for it (its
    /// registry item, read in the same batch as the counters).
    pub registered: bool,
    /// Not fetched while paused.
    pub paused: bool,
    /// Ready to fetch.
    pub available: u64,
    /// Waiting for their time.
    pub scheduled: u64,
    /// Waiting for a retry.
    pub retryable: u64,
    /// Being worked on.
    pub active: u64,
    /// Workflow steps waiting for their dependencies (counted by the counters only).
    pub pending: u64,
    /// Finished successfully (since the counter was created).
    pub completed: u64,
    /// Failed for good, or expired before they ran (since the counter was created).
    pub discarded: u64,
    /// Cancelled (since the counter was created).
    pub cancelled: u64,
    /// The queue's depth bound, read with the counters (ojs-backpressure.md).
    pub backpressure: Option<ojs_core::backpressure::Backpressure>,
}

impl QueueStats {
    /// Adds the counts of a counter item.
    pub(crate) fn add_counts(&mut self, item: &Item) {
        let get = |k: &str| {
            item.get(k)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0)
        };
        // A counter below zero (a lost ADD) reads as none rather than wrapping.
        let add = |to: &mut u64, k: &str| {
            *to = to.saturating_add(u64::try_from(get(k)).unwrap_or(0));
        };
        add(&mut self.available, "available");
        add(&mut self.scheduled, "scheduled");
        add(&mut self.retryable, "retryable");
        add(&mut self.active, "active");
        add(&mut self.pending, "pending");
        add(&mut self.completed, "completed");
        add(&mut self.discarded, "discarded");
        add(&mut self.cancelled, "cancelled");
    }

    /// Takes `other`'s counts from these (a part's from its whole), never below zero.
    pub fn subtract_counts(&mut self, other: &QueueStats) {
        for (mine, theirs) in [
            (&mut self.available, other.available),
            (&mut self.scheduled, other.scheduled),
            (&mut self.retryable, other.retryable),
            (&mut self.active, other.active),
            (&mut self.pending, other.pending),
            (&mut self.completed, other.completed),
            (&mut self.discarded, other.discarded),
            (&mut self.cancelled, other.cancelled),
        ] {
            *mine = mine.saturating_sub(theirs);
        }
    }

    /// Every job counted: live ones and those that ended since the counters began.
    pub fn total(&self) -> u64 {
        [
            self.available,
            self.scheduled,
            self.retryable,
            self.active,
            self.pending,
            self.completed,
            self.discarded,
            self.cancelled,
        ]
        .iter()
        .fold(0_u64, |sum, n| sum.saturating_add(*n))
    }

    /// Jobs waiting to run: available, scheduled and retryable (ojs-backpressure.md §3).
    pub fn depth(&self) -> u64 {
        self.available
            .saturating_add(self.scheduled)
            .saturating_add(self.retryable)
    }
}

/// The counter attribute of a state.
fn field(state: JobState) -> &'static str {
    state.as_str()
}

/// Whether a state's count goes down when a job leaves it.
fn is_live(state: JobState) -> bool {
    !matches!(
        state,
        JobState::Completed | JobState::Discarded | JobState::Cancelled
    )
}

/// Most live jobs (by its counters) in a shard the sweep's healing counts from the
/// indexes; a larger shard waits for [`crate::Derived::recount_queue`].
pub const HEAL_MAX_LIVE: u64 = 100_000;

/// Live states whose counts the sparse indexes can give (pending jobs are in none).
const INDEXED: [JobState; 4] = [
    JobState::Available,
    JobState::Scheduled,
    JobState::Retryable,
    JobState::Active,
];

impl QueueStats {
    /// The counts the indexes can give, in [`INDEXED`] order.
    fn indexed(&self) -> [u64; 4] {
        [self.available, self.scheduled, self.retryable, self.active]
    }
}

/// What the sweep's healing reads of a shard's counter item.
struct HealState {
    /// The live moves added so far (none yet: only terminal counts were ever added).
    moves: Option<i64>,
    /// `moves` as a sweep last found them, and when it found them so (ms).
    seen_moves: Option<i64>,
    seen_at: Option<i64>,
    /// `moves` when the counts were last checked against the indexes.
    checked_moves: Option<i64>,
    /// The indexed counts, in [`INDEXED`] order.
    held: Vec<i64>,
}

impl HealState {
    fn of(item: &Item) -> Self {
        let num = |k: &str| {
            item.get(k)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
        };
        Self {
            moves: num("moves"),
            seen_moves: num("seen_moves"),
            seen_at: num("seen_at"),
            checked_moves: num("checked_moves"),
            held: INDEXED
                .iter()
                .map(|st| num(field(*st)).unwrap_or(0))
                .collect(),
        }
    }

    fn moves_so_far(&self) -> i64 {
        self.moves.unwrap_or(0)
    }
}

/// `req` also setting the indexed counts `values` (place in [`INDEXED`], count); their
/// `SET` clauses go to `sets`.
fn set_indexed(
    mut req: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    sets: &mut Vec<String>,
    values: impl IntoIterator<Item = (usize, u64)>,
) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
    for (i, value) in values {
        sets.push(format!("#f{i} = :v{i}"));
        req = req
            .expression_attribute_names(format!("#f{i}"), field(INDEXED[i]))
            .expression_attribute_values(format!(":v{i}"), n(value));
    }
    req
}

/// The primary key of an item of the `QUEUES` partition.
pub(crate) fn counts_key(sk: &str) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(keys::QUEUES_PK)),
        ("sk".to_owned(), s(sk)),
    ])
}

/// Counter changes of a batch of transitions, summed per counter item.
#[derive(Debug, Default)]
pub(crate) struct Moves {
    shards: u16,
    per_item: BTreeMap<(String, u16), BTreeMap<&'static str, i64>>,
    /// The same moves of jobs of tenants other than the default one, per tenant and queue.
    pub(crate) tenants: crate::tenants::TenantMoves,
}

impl Moves {
    fn deltas(&mut self, job: &Job) -> &mut BTreeMap<&'static str, i64> {
        let shard = keys::shard_of(&job.id, self.shards);
        self.per_item
            .entry((job.spec.queue.as_str().to_owned(), shard))
            .or_default()
    }

    /// `job` (as it is now) moved from `from` (`None`: it was created).
    pub(crate) fn add(&mut self, job: &Job, from: Option<JobState>) {
        let to = job.status.state;
        if from == Some(to) {
            return;
        }
        if let Some(from) = from.filter(|f| is_live(*f)) {
            self.change(job, field(from), -1);
        }
        self.change(job, field(to), 1);
    }

    /// `job` (as it was) was deleted: it leaves its live state; a terminal count stays.
    pub(crate) fn remove(&mut self, job: &Job) {
        let from = job.status.state;
        if is_live(from) {
            self.change(job, field(from), -1);
        }
    }

    /// Adds `delta` to `job`'s count of `field`: its queue shard's, and its tenant's.
    fn change(&mut self, job: &Job, field: &'static str, delta: i64) {
        *self.deltas(job).entry(field).or_default() += delta;
        if let Some(tenant) = job.tenant() {
            self.tenants.change(&tenant, &job.spec.queue, field, delta);
        }
    }
}

impl Derived {
    /// An empty set of moves for this store's settings.
    pub(crate) fn moves(&self) -> Moves {
        Moves {
            shards: self.engine.queue_shards(),
            per_item: BTreeMap::new(),
            tenants: Default::default(),
        }
    }

    /// The counter updates of `moves`: one `Update` action (an `ADD`) per counter item
    /// that changes, for the stream batch's transaction.
    pub(crate) fn counter_updates(
        &self,
        mut moves: Moves,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let now_us = ojs_core::time::now().timestamp_micros();
        let tenants = std::mem::take(&mut moves.tenants).updates(self.engine.table(), now_us)?;
        let queues: Result<Vec<_>, _> = moves
            .per_item
            .into_iter()
            .filter_map(|((queue, shard), deltas)| {
                // `moves` counts the ADDs themselves: the sweep's healing knows a shard was
                // quiet by it not changing (see [`crate::Derived::heal_counters`]).
                let add = CounterAdd {
                    adds: vec!["moves :one".to_owned()],
                    then: None,
                    names: HashMap::new(),
                    values: HashMap::from([(":one".to_owned(), n(1))]),
                };
                let key = counts_key(&keys::queue_counts_sk(&queue, shard));
                add.action(self.engine.table(), key, deltas, "counter update")
            })
            .collect();
        Ok(queues?.into_iter().chain(tenants).collect())
    }

    /// Counts for one queue: one `BatchGetItem` of the queue's counter items.
    pub async fn queue_stats(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        self.catch_up().await;
        self.read_counters(queue).await
    }

    /// Counts the live states of `queue` from the indexes (exact when nothing moves during
    /// the count), sets the live counters to them and returns the queue's counts. For a
    /// table whose counters missed moves: counters turned on over existing jobs, or a
    /// transition whose process died before its `ADD`. Moves made while it runs may be
    /// lost from the counters, so run it when the queue is quiet. Pending jobs are in no
    /// index; their count is left as it is.
    pub async fn recount_queue(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        self.catch_up().await;
        for shard in 0..self.engine.queue_shards() {
            let mut counted = QueueStats::default();
            self.count_shard(queue, shard, &mut counted).await?;
            let req = self.update_counters(&keys::queue_counts_sk(queue.as_str(), shard));
            let mut sets = Vec::new();
            let req = set_indexed(req, &mut sets, counted.indexed().into_iter().enumerate());
            let out = req
                .update_expression(format!("SET {}", sets.join(", ")))
                .send()
                .await;
            self.engine.table.tally(Kind::Write, out)?;
        }
        self.read_counters(queue).await
    }

    /// Repairs live counters that drifted (a process that died between a transition and
    /// its `ADD`, an `ADD` applied twice), one shard at a time, as part of the sweep:
    /// - a shard whose `moves` changed since the last sweep is busy: the sweep only notes
    ///   the value and when (`seen_moves`, `seen_at`; one small write per busy shard per
    ///   sweep);
    /// - a shard quiet since then for [`crate::StoreConfig::counter_heal_quiet`] (ten
    ///   minutes on AWS: the stream must have applied its last moves, or the count from
    ///   the indexes, which show them at once, would be added to again), and not yet
    ///   checked at this `moves`, is counted from the indexes; if the counts differ they
    ///   are set, under the condition that no `ADD` landed meanwhile (`checked_moves`
    ///   records the check, so a quiet shard is counted once, not every minute).
    ///
    /// A transition racing the count can still leave an error, but its own `ADD` changes
    /// `moves`, so the shard is counted again after its next quiet sweep: the counts
    /// converge. Shards with more than [`HEAL_MAX_LIVE`] live jobs are left to
    /// [`crate::Derived::recount_queue`]. Returns how many shards were corrected.
    pub async fn heal_counters(&self, queues: &[QueueName]) -> Result<usize, StoreError> {
        self.catch_up().await;
        let shards: Vec<(&QueueName, u16, String)> = queues
            .iter()
            .flat_map(|q| {
                (0..self.engine.queue_shards())
                    .map(move |shard| (q, shard, keys::queue_counts_sk(q.as_str(), shard)))
            })
            .collect();
        // The counter items of every queue: BatchGetItems of up to 100, not a read each.
        let mut items = HashMap::new();
        for chunk in shards.chunks(100) {
            let keys = chunk.iter().map(|(_, _, sk)| counts_key(sk)).collect();
            for item in self.read_consistent(keys).await? {
                if let Some(sk) = item.get("sk").and_then(|v| v.as_s().ok()) {
                    items.insert(sk.clone(), item);
                }
            }
        }
        let mut healed = 0;
        for (queue, shard, sk) in &shards {
            if let Some(item) = items.get(sk) {
                if self.heal_shard(queue, *shard, sk, item).await? {
                    healed += 1;
                }
            }
        }
        Ok(healed)
    }

    /// One shard of [`crate::Derived::heal_counters`], from its counter item as read: whether its
    /// counts were corrected.
    async fn heal_shard(
        &self,
        queue: &QueueName,
        shard: u16,
        sk: &str,
        item: &Item,
    ) -> Result<bool, StoreError> {
        let counter = HealState::of(item);
        let now_ms = time::now().timestamp_millis();
        if counter.seen_moves != Some(counter.moves_so_far()) || counter.seen_at.is_none() {
            let out = self
                .update_counters(sk)
                .update_expression("SET seen_moves = :m, seen_at = :at")
                .expression_attribute_values(":m", n(counter.moves_so_far()))
                .expression_attribute_values(":at", n(now_ms))
                .send()
                .await;
            self.engine.table.tally(Kind::Write, out)?;
            return Ok(false);
        }
        if !self.due_for_count(&counter, now_ms) {
            return Ok(false);
        }
        self.correct_shard(queue, shard, sk, &counter).await
    }

    /// Whether a shard whose moves have stood still since `seen_at` is counted from the
    /// indexes now: not yet checked at these moves, quiet for long enough, and no larger
    /// than [`HEAL_MAX_LIVE`].
    fn due_for_count(&self, counter: &HealState, now_ms: i64) -> bool {
        if counter.checked_moves == Some(counter.moves_so_far()) {
            return false;
        }
        // Still since `seen_at`, but maybe only because the stream has not caught up with
        // the shard's last moves yet, which the indexes already show.
        let quiet_ms =
            i64::try_from(self.engine.config.counter_heal_quiet.as_millis()).unwrap_or(i64::MAX);
        if now_ms.saturating_sub(counter.seen_at.unwrap_or(now_ms)) < quiet_ms {
            return false;
        }
        counter.held.iter().map(|v| v.unsigned_abs()).sum::<u64>() <= HEAL_MAX_LIVE
    }

    /// Counts shard `shard` of `queue` from the indexes and writes the counts its counter
    /// item `sk` holds wrong, with the moves they were checked at, unless a move landed
    /// meanwhile: whether any was wrong.
    async fn correct_shard(
        &self,
        queue: &QueueName,
        shard: u16,
        sk: &str,
        counter: &HealState,
    ) -> Result<bool, StoreError> {
        let mut counted = QueueStats::default();
        self.count_shard(queue, shard, &mut counted).await?;
        let changed: Vec<(usize, u64)> = counted
            .indexed()
            .into_iter()
            .enumerate()
            .filter(|(i, value)| i64::try_from(*value).ok() != Some(counter.held[*i]))
            .collect();
        let drifted: Vec<String> = changed
            .iter()
            .map(|(i, value)| format!("{} {} -> {value}", field(INDEXED[*i]), counter.held[*i]))
            .collect();
        // With no `moves` yet the item only ever had terminal counts added.
        let unchanged = match counter.moves {
            Some(_) => "moves = :m",
            None => "attribute_not_exists(moves)",
        };
        let req = self
            .update_counters(sk)
            .condition_expression(unchanged)
            .expression_attribute_values(":m", n(counter.moves_so_far()));
        let mut sets = vec!["checked_moves = :m".to_owned()];
        let req = set_indexed(req, &mut sets, changed);
        let out = req
            .update_expression(format!("SET {}", sets.join(", ")))
            .send()
            .await;
        match self.engine.table.tally_conditional(Kind::Write, out)? {
            Some(_) => {
                if !drifted.is_empty() {
                    tracing::warn!(queue = %queue, shard, drift = %drifted.join(", "), "job counters repaired from the indexes");
                }
                Ok(!drifted.is_empty())
            }
            // A move landed during the count: the next quiet sweep counts again.
            None => Ok(false),
        }
    }

    /// An UpdateItem of the counter item `sk`.
    fn update_counters(&self, sk: &str) -> UpdateItemFluentBuilder {
        self.engine
            .table
            .update_item()
            .key("pk", s(keys::QUEUES_PK))
            .key("sk", s(sk))
    }

    /// The counts of `queue` as its counter items hold them, and its pause flag (one
    /// `BatchGetItem` of the queue item and its counter items).
    async fn read_counters(&self, queue: &QueueName) -> Result<QueueStats, StoreError> {
        // At most 1 + MAX_QUEUE_SHARDS (65) keys: within one BatchGetItem's 100.
        let keys: Vec<_> = std::iter::once(counts_key(&keys::queue_sk(queue.as_str())))
            .chain(
                (0..self.engine.queue_shards())
                    .map(|shard| counts_key(&keys::queue_counts_sk(queue.as_str(), shard))),
            )
            .collect();
        let mut stats = QueueStats::default();
        let registry_sk = keys::queue_sk(queue.as_str());
        for item in self.read_consistent(keys).await? {
            if item.get("sk").and_then(|v| v.as_s().ok()) == Some(&registry_sk) {
                stats.registered = true;
            }
            if let Some(paused) = item.get("paused").and_then(|v| v.as_bool().ok()) {
                stats.paused = *paused;
            }
            if let Some(bound) = crate::queues::stored_backpressure(&item) {
                stats.backpressure = Some(bound);
            }
            stats.add_counts(&item);
        }
        Ok(stats)
    }

    /// Strongly consistent `BatchGetItem` of up to 100 `keys` (unprocessed keys asked
    /// again); items that do not exist are absent.
    async fn read_consistent(&self, keys: Vec<Item>) -> Result<Vec<Item>, StoreError> {
        let how = crate::batch_read::BatchRead {
            consistent: true,
            ..Default::default()
        };
        self.engine.table.batch_get(keys, &how).await
    }

    /// Replaces the indexed live counts of `stats` with counts from the indexes, shard by
    /// shard (a COUNT Query of the ready index and a keys-and-state Query of the due
    /// index per shard).
    pub async fn count_from_indexes(
        &self,
        queue: &QueueName,
        stats: &mut QueueStats,
    ) -> Result<(), StoreError> {
        let mut counted = QueueStats::default();
        for shard in 0..self.engine.queue_shards() {
            self.count_shard(queue, shard, &mut counted).await?;
        }
        stats.available = counted.available;
        stats.scheduled = counted.scheduled;
        stats.retryable = counted.retryable;
        stats.active = counted.active;
        Ok(())
    }

    /// Adds one shard's indexed live jobs to `stats`.
    async fn count_shard(
        &self,
        queue: &QueueName,
        shard: u16,
        stats: &mut QueueStats,
    ) -> Result<(), StoreError> {
        // The shard's available jobs are in every tenant's lane of the queue.
        for lane in self.engine.lanes(std::slice::from_ref(queue)).await? {
            let ready = self
                .engine
                .table
                .query_index(&crate::schema::READY_INDEX)
                .key_condition_expression("gsi1pk = :pk")
                .expression_attribute_values(":pk", s(keys::ready_pk(&lane, shard)))
                .select(Select::Count);
            let mut pages = self.engine.table.pages(ready);
            while let Some(out) = pages.next().await? {
                stats.available += u64::try_from(out.count()).unwrap_or(0);
            }
        }
        let due = self
            .engine
            .table
            .query_index(&crate::schema::DUE_INDEX)
            .key_condition_expression("gsi2pk = :pk")
            .expression_attribute_values(":pk", s(keys::due_pk(queue, shard)));
        let mut pages = self.engine.table.pages(due);
        while let Some(out) = pages.next().await? {
            for i in out.items() {
                match i
                    .get("state")
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                {
                    Some("scheduled") => stats.scheduled += 1,
                    Some("retryable") => stats.retryable += 1,
                    Some("active") => stats.active += 1,
                    // An available job with an expiry also sits in the due index; it was
                    // counted from the ready index already.
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::job::NewJob;

    fn job(queue: &str, state: JobState) -> Job {
        let new = NewJob::from_json(
            serde_json::json!({"type": "t", "args": [], "options": {"queue": queue}}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut job = Job::enqueue(new, ojs_core::time::now());
        job.status.state = state;
        job
    }

    fn deltas(moves: &Moves) -> Vec<(String, &'static str, i64)> {
        moves
            .per_item
            .iter()
            .flat_map(|((q, _), d)| d.iter().map(move |(f, v)| (q.clone(), *f, *v)))
            .collect()
    }

    fn moves() -> Moves {
        Moves {
            shards: 1,
            per_item: BTreeMap::new(),
            tenants: Default::default(),
        }
    }

    #[test]
    fn a_move_takes_one_from_the_old_state_and_gives_one_to_the_new() {
        let mut m = moves();
        m.add(&job("q", JobState::Active), Some(JobState::Available));
        assert_eq!(
            deltas(&m),
            vec![("q".into(), "active", 1), ("q".into(), "available", -1)]
        );
    }

    #[test]
    fn moves_of_one_request_are_summed_per_counter_item() {
        let mut m = moves();
        m.add(&job("q", JobState::Available), None);
        m.add(&job("q", JobState::Available), None);
        m.add(&job("q", JobState::Active), Some(JobState::Available));
        m.add(&job("r", JobState::Scheduled), None);
        assert_eq!(
            deltas(&m),
            vec![
                ("q".into(), "active", 1),
                ("q".into(), "available", 1),
                ("r".into(), "scheduled", 1),
            ]
        );
    }

    #[test]
    fn terminal_counts_never_go_down() {
        let mut m = moves();
        // A dead-letter retry: discarded stays counted, available gains one.
        m.add(&job("q", JobState::Available), Some(JobState::Discarded));
        assert_eq!(deltas(&m), vec![("q".into(), "available", 1)]);
    }

    #[test]
    fn a_deleted_job_leaves_its_live_state_and_keeps_its_terminal_count() {
        let mut m = moves();
        m.remove(&job("q", JobState::Scheduled));
        m.remove(&job("q", JobState::Completed));
        assert_eq!(deltas(&m), vec![("q".into(), "scheduled", -1)]);
    }

    #[test]
    fn a_job_that_stays_in_its_state_changes_nothing() {
        let mut m = moves();
        m.add(&job("q", JobState::Active), Some(JobState::Active));
        assert!(deltas(&m).is_empty());
    }

    #[test]
    fn each_shard_has_its_own_counter_item() {
        let mut m = Moves {
            shards: 64,
            per_item: BTreeMap::new(),
            tenants: Default::default(),
        };
        for _ in 0..50 {
            m.add(&job("q", JobState::Available), None);
        }
        assert!(m.per_item.len() > 1);
        let total: i64 = m.per_item.values().flat_map(|d| d.values()).sum();
        assert_eq!(total, 50);
    }
}
