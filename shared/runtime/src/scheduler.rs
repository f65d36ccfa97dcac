//! One tick of the scheduler: the sweep's services one after another, each isolated (its
//! failure is logged and counted, the others go on), beside the webhook retries, the push
//! nudge and the redrive of given-up stream batches, then the backlog metrics.
//!
//! The sweep keeps a time budget ([`Store::sweep_budget`]): queues it had no time for
//! are swept first by the next sweep.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ojs_core::time::Timestamp;
use ojs_push::WebhookDispatcher;
use ojs_store::{RedriveReport, Store, StoreError, StreamRedrive, SweepReport, PUSH_NUDGE_AFTER};

use crate::services::{QueueSweep, Service};

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickReport {
    /// The sweep's part.
    pub sweep: SweepReport,
    /// Webhook retries made.
    pub webhook_retries: usize,
    /// Jobs put back on the change stream for their push endpoints; `None` when the
    /// nudge did not run in this tick (it runs at most every [`PUSH_NUDGE_AFTER`]).
    pub push_nudges: Option<usize>,
    /// The redrive of the stream batches the stream function gave up on (nothing without
    /// a failure queue).
    pub stream_redrive: RedriveReport,
}

/// The periodic services of one stack, composed once.
pub struct Scheduler {
    store: Store,
    webhooks: Option<WebhookDispatcher>,
    stream_redrive: Option<StreamRedrive>,
    /// When this instance last nudged waiting pushes: a tick every second (the local
    /// server) must not re-mark the same waiting jobs every second.
    last_nudge: Mutex<Option<Instant>>,
}

impl Scheduler {
    /// The services over `store`, without webhook retries.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            webhooks: None,
            stream_redrive: None,
            last_nudge: Mutex::new(None),
        }
    }

    /// The same, also making the webhook retries that are due through `webhooks`.
    pub fn with_webhooks(mut self, webhooks: WebhookDispatcher) -> Self {
        self.webhooks = Some(webhooks);
        self
    }

    /// The same, also applying the stream batches the stream function gave up on
    /// (`StreamFailuresQueue`) through `redrive`.
    pub fn with_stream_redrive(mut self, redrive: StreamRedrive) -> Self {
        self.stream_redrive = Some(redrive);
        self
    }

    /// One tick at `now`: the sweep, the webhook retries, the push nudge and the stream
    /// redrive at once (none waits for the others), then the metrics. Only a sweep that could not start (the
    /// queue list unreadable) is an error.
    pub async fn tick(&self, now: Timestamp) -> Result<TickReport, StoreError> {
        let redrive = async {
            match &self.webhooks {
                Some(w) => w.redrive().await,
                None => 0,
            }
        };
        let stream_redrive = async {
            match &self.stream_redrive {
                Some(r) => {
                    let deadline = Instant::now() + self.store.engine().sweep_budget();
                    r.run(self.store.derived(), deadline).await
                }
                None => RedriveReport::default(),
            }
        };
        let (sweep, webhook_retries, push_nudges, stream_redrive) =
            futures::join!(self.sweep(now), redrive, self.nudge(now), stream_redrive);
        let sweep = sweep?;
        // Backlog metrics for the alarms; a failure here must not fail the tick.
        if let Err(e) = self.store.engine().emit_sweep_metrics(&sweep, now).await {
            failed(Service::BacklogMetrics, &e);
        }
        Ok(TickReport {
            sweep,
            webhook_retries,
            push_nudges,
            stream_redrive,
        })
    }

    /// Ticks every `period` for ever: the scheduler function's schedule, in process
    /// (`make dev`).
    pub async fn tick_every(&self, period: Duration) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match self.tick(ojs_core::time::now()).await {
                Ok(r)
                    if r.sweep.moved + r.sweep.fired + r.sweep.failures + r.webhook_retries > 0 =>
                {
                    tracing::info!(
                        moved = r.sweep.moved,
                        fired = r.sweep.fired,
                        failures = r.sweep.failures,
                        webhook_retries = r.webhook_retries,
                        "tick"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "sweep failed"),
            }
        }
    }

    /// The sweep at `now`, within the store's sweep budget: due cron occurrences, the
    /// timer hand-over, every queue from where the last sweep stopped, workflow checks,
    /// and, with time left, counter repair.
    pub async fn sweep(&self, now: Timestamp) -> Result<SweepReport, StoreError> {
        let store = &self.store;
        let deadline = Instant::now() + store.engine().sweep_budget();
        let mut report = SweepReport::default();
        match store.cron().fire_due(now).await {
            Ok(n) => report.fired = n,
            Err(e) => report.failures += failed(Service::FireCron, &e),
        }
        let queues = QueueSweep::new(store);
        let (order, cursor) = queues.order().await?;
        report.failures += usize::from(cursor.is_err());
        let cursor = cursor.ok().flatten();
        // The hand-over reads for at most half of what is left of the budget (the queues
        // need the rest); its sends stop at the deadline.
        let read_by = Instant::now() + deadline.saturating_duration_since(Instant::now()) / 2;
        match store
            .engine()
            .hand_over_to_timer(&order, now, read_by, deadline)
            .await
        {
            Ok(left) => report.timer_partitions_left = left,
            Err(e) => report.failures += failed(Service::TimerHandOver, &e),
        }
        let swept = queues.run(&order, cursor.as_deref(), now, deadline).await;
        report.queues = swept.queues;
        report.queues_left = swept.queues_left;
        report.moved = swept.moved;
        report.failures += swept.failures;
        match store.workflows().check_workflows(now, deadline).await {
            Ok(n) => report.workflows = n,
            Err(e) => report.failures += failed(Service::WorkflowCheck, &e),
        }
        // Counters are reports, not state: healing runs last and only with time left.
        if Instant::now() < deadline {
            match store.derived().heal_counters(&order).await {
                Ok(n) => report.healed = n,
                Err(e) => report.failures += failed(Service::CounterHealing, &e),
            }
        }
        Ok(report)
    }

    /// Nudges the jobs waiting for a push endpoint, unless this instance did within
    /// [`PUSH_NUDGE_AFTER`]. A failure is logged and counts as no nudge.
    async fn nudge(&self, now: Timestamp) -> Option<usize> {
        let every = PUSH_NUDGE_AFTER.to_std().unwrap_or(Duration::from_secs(30));
        {
            let mut last = self.last_nudge.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| at.elapsed() < every) {
                return None;
            }
            *last = Some(Instant::now());
        }
        match self
            .store
            .push_endpoints()
            .nudge_waiting(now, now - PUSH_NUDGE_AFTER)
            .await
        {
            Ok(n) => Some(n),
            Err(e) => {
                failed(Service::PushNudge, &e);
                Some(0)
            }
        }
    }
}

/// Logs a service's failure; counts as one.
fn failed(service: Service, e: &StoreError) -> usize {
    tracing::warn!(service = service.name(), error = %e, "service failed; the next tick retries");
    1
}
