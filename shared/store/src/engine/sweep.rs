//! The scheduler's sweep: the work no request is there to do, as named services run one
//! after another, each isolated (its failure is logged and counted, the others go on):
//!
//! 1. fire due cron occurrences (each registration on its own);
//! 2. hand work due within the timer's range to the SQS timer;
//! 3. per queue: promote due jobs, reclaim expired leases, time out overdue attempts and
//!    discard expired jobs (what FETCH does for its own queues);
//! 4. check running workflows ([`Store::check_workflows`]);
//! 5. repair drifted queue counters ([`Store::heal_counters`]).
//!
//! It keeps a time budget: queues it had no time for are swept first by the next sweep
//! (the queue it stopped at is remembered in the `QUEUES`/`~SWEEP` item).

use std::time::Instant;

use ojs_core::time::Timestamp;
use ojs_core::QueueName;

use crate::error::StoreError;
use crate::item::{s, Item};
use crate::keys;
use crate::usage::Kind;
use crate::Store;

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

/// Most due batches one sweep takes from a queue, so one busy queue cannot starve the rest
/// of a Lambda invocation's time.
const MAX_BATCHES_PER_QUEUE: usize = 20;

fn cursor_key() -> Item {
    Item::from([
        ("pk".to_owned(), s(keys::QUEUES_PK)),
        ("sk".to_owned(), s("~SWEEP")),
    ])
}

/// `queues` (sorted by name) starting at the first one at or after `cursor`, wrapping.
fn rotate(mut queues: Vec<QueueName>, cursor: Option<&str>) -> Vec<QueueName> {
    queues.sort();
    if let Some(c) = cursor {
        let at = queues.iter().position(|q| q.as_str() >= c).unwrap_or(0);
        queues.rotate_left(at);
    }
    queues
}

impl Store {
    /// One sweep at `now` (see the module docs), within [`crate::StoreConfig::sweep_budget`].
    pub async fn sweep(&self, now: Timestamp) -> Result<SweepReport, StoreError> {
        let deadline = Instant::now() + self.config.sweep_budget;
        let mut report = SweepReport::default();
        let failed = |what: &str, e: StoreError| {
            tracing::warn!(service = what, error = %e, "sweep service failed; the next sweep retries");
            1
        };
        match self.fire_due_crons(now).await {
            Ok(n) => report.fired = n,
            Err(e) => report.failures += failed("cron", e),
        }
        let cursor = match self.read_item(cursor_key()).await {
            Ok(item) => item.and_then(|i| i.get("next_queue").and_then(|v| v.as_s().ok()).cloned()),
            Err(e) => {
                report.failures += failed("sweep cursor", e);
                None
            }
        };
        let queues = rotate(self.queue_names().await?, cursor.as_deref());
        // The hand-over reads for at most half of what is left of the budget (the queues
        // need the rest); its sends stop at the deadline.
        let read_by = Instant::now() + deadline.saturating_duration_since(Instant::now()) / 2;
        match self
            .hand_over_to_timer(&queues, now, read_by, deadline)
            .await
        {
            Ok(left) => report.timer_partitions_left = left,
            Err(e) => report.failures += failed("timer hand-over", e),
        }
        let mut stopped_at = None;
        for (i, queue) in queues.iter().enumerate() {
            if Instant::now() >= deadline {
                report.queues_left = queues.len() - i;
                stopped_at = Some(queue.clone());
                break;
            }
            report.queues += 1;
            match self.sweep_queue(queue, now).await {
                Ok(moved) => report.moved += moved,
                Err(e) => {
                    tracing::warn!(queue = %queue, error = %e, "queue not swept; the next sweep retries");
                    report.failures += 1;
                }
            }
        }
        if stopped_at.is_some() || cursor.is_some() {
            if let Err(e) = self.set_sweep_cursor(stopped_at.as_ref()).await {
                report.failures += failed("sweep cursor", e);
            }
        }
        match self.check_workflows(now, deadline).await {
            Ok(n) => report.workflows = n,
            Err(e) => report.failures += failed("workflows", e),
        }
        // Counters are reports, not state: healing runs last and only with time left.
        if Instant::now() < deadline {
            match self.heal_counters(&queues).await {
                Ok(n) => report.healed = n,
                Err(e) => report.failures += failed("counters", e),
            }
        }
        Ok(report)
    }

    /// Sweeps every `period` for ever: the scheduler function's schedule, in process
    /// (`make dev`, tests).
    pub async fn sweep_every(&self, period: std::time::Duration) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match self.sweep(ojs_core::time::now()).await {
                Ok(r) if r.moved + r.fired + r.failures > 0 => {
                    tracing::info!(
                        moved = r.moved,
                        fired = r.fired,
                        failures = r.failures,
                        "sweep"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "sweep failed"),
            }
        }
    }

    /// The names of the known queues ([`Store::list_queues`]) that parse, in its order.
    pub(crate) async fn queue_names(&self) -> Result<Vec<QueueName>, StoreError> {
        Ok(self
            .list_queues()
            .await?
            .into_iter()
            .filter_map(|q| QueueName::parse(&q.name).ok())
            .collect())
    }

    /// Promotes, reclaims and times out one queue's due jobs, batch after batch.
    async fn sweep_queue(&self, queue: &QueueName, now: Timestamp) -> Result<usize, StoreError> {
        let mut moved = 0;
        for _ in 0..MAX_BATCHES_PER_QUEUE {
            let n = self.promote_due(queue, now).await?;
            moved += n;
            if n == 0 {
                break;
            }
        }
        Ok(moved)
    }

    /// Remembers the queue the next sweep starts at (or forgets it with `None`).
    async fn set_sweep_cursor(&self, queue: Option<&QueueName>) -> Result<(), StoreError> {
        let req = self.update_item().set_key(Some(cursor_key()));
        let req = match queue {
            Some(q) => req
                .update_expression("SET next_queue = :q")
                .expression_attribute_values(":q", s(q.as_str())),
            None => req.update_expression("REMOVE next_queue"),
        };
        self.tally(Kind::Write, req.send().await).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<QueueName> {
        list.iter()
            .filter_map(|q| QueueName::parse(q).ok())
            .collect()
    }

    #[test]
    fn a_sweep_starts_where_the_last_one_stopped() {
        let qs = names(&["c", "a", "d", "b"]);
        let order = |cursor| {
            rotate(qs.clone(), cursor)
                .iter()
                .map(|q| q.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(order(None), ["a", "b", "c", "d"]);
        assert_eq!(order(Some("c")), ["c", "d", "a", "b"]);
        // A queue that no longer exists: the next one after it.
        assert_eq!(order(Some("bb")), ["c", "d", "a", "b"]);
        assert_eq!(order(Some("zz")), ["a", "b", "c", "d"]);
    }
}
