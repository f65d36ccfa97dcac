//! FETCH: serves the requested queues in their order (each one's lanes in turn), claims
//! from each through the candidate loop (`claim_loop`) and answers with the claimed jobs
//! and the first queue's rate limit window.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Instant;

use futures::future::BoxFuture;
use ojs_core::time::Timestamp;
use ojs_core::{Job, QueueName};

use crate::effects::{Moved, OwingError};
use crate::engine::claim_attempt::LaneClaim;
use crate::engine::fetching::Fetching;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::fetch_order::queue_order;
use crate::queues::QueueSettings;

/// A FETCH.
#[derive(Debug, Clone, Default)]
pub struct FetchRequest {
    /// Queues in preference order.
    pub queues: Vec<QueueName>,
    /// Whose jobs: one tenant's, or any tenant's, taken in turn
    /// ([`crate::keys::Lane`]).
    pub tenant: ojs_core::tenant::Scope,
    /// The FETCH's own strategy over its queues (ojs-fair-scheduling.md §5.2); a pool
    /// holding its queues takes precedence.
    pub scheduling: Option<ojs_core::pool::Scheduling>,
    /// Most jobs to claim.
    pub count: usize,
    /// The claiming worker.
    pub worker_id: Option<String>,
    /// Lease length; the default is 30 s.
    pub visibility_timeout_ms: Option<u64>,
}

/// Whether a FETCH's worker may be handed jobs, asked by the engine only once the FETCH
/// found a job to hand out: the caller's answer (worker states are a feature's, which the
/// engine does not know), so a poll of empty queues costs no read of the worker.
pub(crate) type Admission<'a> =
    Box<dyn FnMut() -> BoxFuture<'a, Result<bool, StoreError>> + Send + 'a>;

/// What FETCH found.
#[derive(Debug, Clone, Default)]
pub struct FetchOutcome {
    /// The claimed jobs.
    pub jobs: Vec<Job>,
    /// The first requested queue's rate limit window, when it has a queue-level limit.
    pub limit: Option<LimitState>,
    /// Whether the ready index showed any job still ready when this FETCH began (claimed,
    /// refused by a limit or lost to another worker). A FETCH that saw none, or only jobs
    /// that had already left (index lag) or that the server cannot read (set aside), may
    /// have run before a just-pushed job reached the index, which is worth looking again
    /// for; one that saw jobs was answered.
    pub saw_ready: bool,
}

/// A rate limit window as `X-RateLimit-*` headers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitState {
    /// Starts allowed per window.
    pub limit: u32,
    /// Starts left in the current window.
    pub remaining: u32,
    /// When the window resets.
    pub reset_at: Timestamp,
}

impl Engine {
    /// Claims up to `count` jobs from the queues, in queue order, each queue by priority
    /// then FIFO, for a worker `admission` lets take jobs (any, without one). Never
    /// returns a job that another worker holds.
    #[tracing::instrument(name = "fetch", level = "error", skip_all, fields(queues = ?req.queues))]
    pub(crate) async fn claim_jobs(
        &self,
        req: &FetchRequest,
        now: Timestamp,
        admission: Option<Admission<'_>>,
    ) -> Result<Moved<FetchOutcome>, OwingError> {
        let ends = Instant::now() + self.config.fetch_budget;
        let mut run = Fetching::new(req.count, self.config.fetch_answer, ends, admission);
        let settings = self.queue_settings(&req.queues).await?;
        let weights = self.fetch_weights(req, &settings).await;
        // An error after some jobs were claimed fails the FETCH (the claimed ones come back
        // at their lease's end), still owing what the jobs it finished on its way owe.
        let claimed = self
            .claim_queues(req, now, &settings, &weights, &mut run)
            .await;
        run.owed.carry(claimed)?;
        if run.out_of_time() {
            // Contention or a slow table used the budget up: the queue was answered, and
            // looking again would only double the wait.
            tracing::info!(
                attempts = run.attempts,
                claimed = run.claimed.len(),
                "FETCH budget spent"
            );
            run.saw_ready = true;
        }
        let claimed = run.claimed;
        let mut owed = run.owed;
        let limit = owed.carry(
            self.limit_state(req, &settings, now, !claimed.is_empty())
                .await,
        )?;
        // Claimed jobs whose request is in the payload bucket come back whole; one whose
        // payload cannot be read is not delivered, and not left leased either.
        let claimed = self.deliverable(claimed, now).await.hand_to(&mut owed);
        let fetched = FetchOutcome {
            jobs: claimed,
            limit,
            saw_ready: run.saw_ready,
        };
        Ok(Moved::new(fetched, owed))
    }

    /// A FETCH for any tenant weighs the tenants of its queues (1 each unless set).
    async fn fetch_weights(
        &self,
        req: &FetchRequest,
        settings: &HashMap<String, QueueSettings>,
    ) -> HashMap<String, u64> {
        match req.tenant {
            ojs_core::tenant::Scope::Any => {
                let tenants: Vec<&ojs_core::tenant::TenantId> =
                    settings.values().flat_map(|s| s.tenants.iter()).collect();
                self.tenant_weights(&tenants).await.unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "tenant weights unread; every tenant weighs 1");
                    HashMap::new()
                })
            }
            ojs_core::tenant::Scope::One(_) => HashMap::new(),
        }
    }

    /// Claims from the queues in the order they are served, each one's share of the
    /// count in a first pass: all of it in the FETCH's order (strict), or by turns and
    /// weights, with a second pass over the queues that gave all they were asked.
    async fn claim_queues(
        &self,
        req: &FetchRequest,
        now: Timestamp,
        settings: &HashMap<String, QueueSettings>,
        weights: &HashMap<String, u64>,
        run: &mut Fetching<'_>,
    ) -> Result<(), StoreError> {
        let scheduling = self.scheduling_of(req).await;
        let (order, shares) = queue_order(
            &req.queues,
            scheduling.as_ref(),
            req.count,
            self.queue_turn
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed) as u64,
        );
        let passes = if scheduling.is_some() { 2 } else { 1 };
        let mut dry: Vec<&QueueName> = Vec::new();
        for pass in 0..passes {
            for (queue, share) in order.iter().zip(&shares) {
                if run.done(req.count) || run.admitted == Some(false) {
                    return Ok(());
                }
                if dry.contains(queue) {
                    continue;
                }
                let queue_settings = settings.get(queue.as_str()).cloned().unwrap_or_default();
                if queue_settings.paused {
                    continue;
                }
                run.target = if pass == 0 {
                    (run.claimed.len() + share).min(req.count)
                } else {
                    req.count
                };
                let lanes = self
                    .claim_lanes(queue, &queue_settings, req, now, weights, run)
                    .await?;
                if lanes.is_break() {
                    return Ok(());
                }
                // A queue that gave less than it was asked has nothing more for the
                // second pass.
                if run.claimed.len() < run.target {
                    dry.push(queue);
                }
            }
        }
        Ok(())
    }

    /// Claims from the lanes of one queue (one, or its tenants' in turn) up to the
    /// FETCH's target; `Break` when the FETCH stops here.
    async fn claim_lanes(
        &self,
        queue: &QueueName,
        queue_settings: &QueueSettings,
        req: &FetchRequest,
        now: Timestamp,
        weights: &HashMap<String, u64>,
        run: &mut Fetching<'_>,
    ) -> Result<ControlFlow<()>, StoreError> {
        let queue_limit = queue_settings.rate_limit.as_ref();
        let lanes = self.fetch_lanes(queue, &queue_settings.tenants, &req.tenant, weights);
        let shared = lanes.len() > 1;
        run.queue_limited = false;
        for lane in lanes {
            if run.done(run.target) || run.admitted == Some(false) || run.queue_limited {
                break;
            }
            let limits = match self.lane_limits(&lane, queue_limit).await {
                Ok(limits) => limits,
                Err(e) => return run.stop_early(e),
            };
            // A tenant found at its `max_concurrency` in this FETCH (in another
            // queue) has nothing to start here either: not even its ready query.
            if limits
                .tenant
                .as_ref()
                .is_some_and(|t| run.full_limits.concurrency.contains_key(&t.key))
            {
                run.saw_ready = true;
                continue;
            }
            run.saw_candidates = false;
            let at = LaneClaim {
                lane: &lane,
                req,
                now,
                limits: &limits,
            };
            let claimed = self.claim_from(&at, run).await;
            if shared && claimed.is_ok() {
                if run.saw_candidates {
                    self.quiet_lanes.forget(&lane);
                } else {
                    let turn = self.lane_turn.load(std::sync::atomic::Ordering::Relaxed);
                    self.quiet_lanes.note(&lane, turn);
                }
            }
            if let Err(e) = claimed {
                return run.stop_early(e);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The first requested queue's rate limit window with a queue-level limit, for the
    /// answer's headers. They are advisory, the claimed jobs are not: once any is claimed
    /// (`claimed_any`), a window that cannot be read is left unknown.
    async fn limit_state(
        &self,
        req: &FetchRequest,
        settings: &HashMap<String, QueueSettings>,
        now: Timestamp,
        claimed_any: bool,
    ) -> Result<Option<LimitState>, StoreError> {
        let Some(policy) = req.queues.iter().find_map(|q| {
            settings
                .get(q.as_str())
                .and_then(|st| st.rate_limit.clone())
        }) else {
            return Ok(None);
        };
        match self.window_state(&policy, now).await {
            Ok(state) => Ok(state.map(|(limit, remaining, reset_at)| LimitState {
                limit,
                remaining,
                reset_at,
            })),
            Err(e) if claimed_any => {
                tracing::warn!(error = %e, "rate limit window unknown");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
