//! What the scheduler's sweep needs of the engine beyond its services' own methods: the
//! report it fills and the cursor that makes a sweep start where the last one stopped
//! (the `QUEUES`/`~SWEEP` item). The sweep itself is composed above the store, by
//! `ojs_runtime::Scheduler`, from named services:
//!
//! 1. fire due cron occurrences ([`crate::Cron::fire_due`]);
//! 2. hand work due within the timer's range to the SQS timer ([`Engine::hand_over_to_timer`]);
//! 3. per queue: promote due jobs, reclaim expired leases, time out overdue attempts and
//!    discard expired jobs ([`crate::Lifecycle::promote_due`], what FETCH does for its own queues);
//! 4. check running workflows ([`crate::Store::check_workflows`]);
//! 5. repair drifted queue counters ([`crate::Derived::heal_counters`]).

use ojs_core::QueueName;

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{item_key, s, Item};
use crate::keys;
use crate::usage::Kind;

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Queues swept.
    pub queues: usize,
    /// Queues left for the next sweep when the budget ran out.
    pub queues_left: usize,
    /// Jobs moved (promoted, reclaimed, timed out).
    pub moved: usize,
    /// Cron occurrences that enqueued a job.
    pub fired: usize,
    /// Running workflows checked.
    pub workflows: usize,
    /// Queue shards whose live counters were repaired from the indexes.
    pub healed: usize,
    /// Services or queues that failed (logged; the next sweep tries again).
    pub failures: usize,
    /// Due-index partitions (queue x shard) the timer hand-over had no time to read:
    /// their jobs due in 14-15 minutes get no timer message and are promoted by a sweep
    /// or a FETCH once due (up to a minute late) instead of at their second.
    pub timer_partitions_left: usize,
}

fn cursor_key() -> Item {
    item_key(keys::QUEUES_PK, "~SWEEP")
}

impl Engine {
    /// The queue the last sweep stopped at, when its budget ran out before the last queue.
    pub async fn sweep_cursor(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .table
            .read_item(cursor_key())
            .await?
            .and_then(|i| i.get("next_queue").and_then(|v| v.as_s().ok()).cloned()))
    }

    /// The names of the known queues ([`Engine::list_queues`]) that parse, in its order.
    pub async fn queue_names(&self) -> Result<Vec<QueueName>, StoreError> {
        Ok(self
            .list_queues()
            .await?
            .into_iter()
            .filter_map(|q| QueueName::parse(&q.name).ok())
            .collect())
    }

    /// Remembers the queue the next sweep starts at (or forgets it with `None`).
    pub async fn set_sweep_cursor(&self, queue: Option<&QueueName>) -> Result<(), StoreError> {
        let req = self.table.update_at(cursor_key());
        let req = match queue {
            Some(q) => req
                .update_expression("SET next_queue = :q")
                .expression_attribute_values(":q", s(q.as_str())),
            None => req.update_expression("REMOVE next_queue"),
        };
        self.table.tally(Kind::Write, req.send().await).map(|_| ())
    }
}
