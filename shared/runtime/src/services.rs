//! The periodic services, by name. Each is one operation of the store or of webhook
//! delivery; [`QueueSweep`] alone keeps state of its own between ticks (where the last
//! sweep stopped).

use std::time::Instant;

use ojs_core::time::Timestamp;
use ojs_core::QueueName;
use ojs_store::{Store, StoreError};

/// One periodic service, as logs and reports name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Due cron occurrences enqueue their jobs ([`Store::fire_due_crons`]).
    FireCron,
    /// Work due within the SQS timer's 15 minutes gets its message
    /// ([`Store::hand_over_to_timer`]).
    TimerHandOver,
    /// Per queue: due jobs promoted, expired leases reclaimed, overdue attempts timed
    /// out, expired jobs discarded ([`QueueSweep`]).
    QueueSweep,
    /// Workflows whose follow-ups a dying request left undone are repaired
    /// ([`Store::check_workflows`]).
    WorkflowCheck,
    /// Drifted queue counters are recomputed from the indexes ([`Store::heal_counters`]).
    CounterHealing,
    /// Webhook retries that are due are made (`ojs_push::WebhookDispatcher::redrive`).
    WebhookRedrive,
    /// Stream batches the stream function gave up on are read again from the stream and
    /// applied (`ojs_store::StreamRedrive`).
    StreamRedrive,
    /// Jobs left waiting on a queue with push endpoints go back on the change stream
    /// ([`Store::nudge_waiting_pushes`]).
    PushNudge,
    /// Backlog and sweep metrics are printed ([`Store::emit_sweep_metrics`]).
    BacklogMetrics,
}

impl Service {
    /// The service's name in logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::FireCron => "cron",
            Self::TimerHandOver => "timer hand-over",
            Self::QueueSweep => "queues",
            Self::WorkflowCheck => "workflows",
            Self::CounterHealing => "counters",
            Self::WebhookRedrive => "webhook retries",
            Self::StreamRedrive => "stream redrive",
            Self::PushNudge => "push nudges",
            Self::BacklogMetrics => "metrics",
        }
    }
}

/// Most due batches one sweep takes from a queue, so one busy queue cannot starve the
/// rest of a Lambda invocation's time.
pub(crate) const MAX_BATCHES_PER_QUEUE: usize = 20;

/// The per-queue sweep: every known queue in turn, from where the last sweep stopped
/// (the store's sweep cursor), until the time budget runs out.
pub struct QueueSweep<'a> {
    store: &'a Store,
}

/// What [`QueueSweep::run`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueuesSwept {
    pub(crate) queues: usize,
    pub(crate) queues_left: usize,
    pub(crate) moved: usize,
    pub(crate) failures: usize,
}

impl<'a> QueueSweep<'a> {
    /// The sweep of `store`'s queues.
    pub fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// The known queues in the order this sweep takes them: by name, starting at the
    /// one the last sweep stopped at, and the cursor as read. An unreadable cursor is
    /// logged and the order starts at the first queue; an unreadable queue list is the
    /// sweep's error.
    #[allow(clippy::type_complexity)]
    pub async fn order(
        &self,
    ) -> Result<(Vec<QueueName>, Result<Option<String>, StoreError>), StoreError> {
        let cursor = self.store.engine().sweep_cursor().await;
        if let Err(e) = &cursor {
            tracing::warn!(service = Service::QueueSweep.name(), error = %e, "sweep cursor unreadable; starting at the first queue");
        }
        let at = cursor.as_ref().ok().and_then(|c| c.as_deref());
        let queues = rotate(self.store.engine().queue_names().await?, at);
        Ok((queues, cursor))
    }

    /// Sweeps `queues` (in [`QueueSweep::order`]) at `now` until `deadline`; remembers
    /// the queue it stopped at for the next sweep. A queue that fails is logged and
    /// counted; the others go on.
    pub(crate) async fn run(
        &self,
        queues: &[QueueName],
        cursor: Option<&str>,
        now: Timestamp,
        deadline: Instant,
    ) -> QueuesSwept {
        let mut done = QueuesSwept::default();
        let mut stopped_at = None;
        for (i, queue) in queues.iter().enumerate() {
            if Instant::now() >= deadline {
                done.queues_left = queues.len() - i;
                stopped_at = Some(queue);
                break;
            }
            done.queues += 1;
            match self.sweep_queue(queue, now).await {
                Ok(moved) => done.moved += moved,
                Err(e) => {
                    tracing::warn!(queue = %queue, error = %e, "queue not swept; the next sweep retries");
                    done.failures += 1;
                }
            }
        }
        if stopped_at.is_some() || cursor.is_some() {
            if let Err(e) = self.store.engine().set_sweep_cursor(stopped_at).await {
                tracing::warn!(service = Service::QueueSweep.name(), error = %e, "sweep cursor not saved; the next sweep starts at the first queue");
                done.failures += 1;
            }
        }
        done
    }

    /// Promotes, reclaims and times out one queue's due jobs, batch after batch.
    async fn sweep_queue(&self, queue: &QueueName, now: Timestamp) -> Result<usize, StoreError> {
        let mut moved = 0;
        for _ in 0..MAX_BATCHES_PER_QUEUE {
            let n = self.store.lifecycle().promote_due(queue, now).await?;
            moved += n;
            if n == 0 {
                break;
            }
        }
        Ok(moved)
    }
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

    #[test]
    fn every_service_has_its_own_name() {
        let all = [
            Service::FireCron,
            Service::TimerHandOver,
            Service::QueueSweep,
            Service::WorkflowCheck,
            Service::CounterHealing,
            Service::WebhookRedrive,
            Service::StreamRedrive,
            Service::PushNudge,
            Service::BacklogMetrics,
        ];
        let names: std::collections::HashSet<_> = all.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), all.len());
    }
}
