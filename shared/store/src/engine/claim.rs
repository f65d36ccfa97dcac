//! FETCH: promote the queue's due jobs (unless this instance found none due a moment
//! ago), then claim ready candidates in index order, each with one conditional write,
//! moving on when another worker won a candidate.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

use futures::future::BoxFuture;
use ojs_core::job::DEFAULT_VISIBILITY_TIMEOUT_MS;
use ojs_core::rate_limit::RateLimitPolicy;
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, JobState, QueueName, Transition};

use crate::answer::{answer_bytes, AnswerBound};
use crate::due::is_expired_available;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::fetch_order::queue_order;
use crate::item::{self, n, s, Item};
use crate::job_item::{old_item, write_id};
use crate::keys;
use crate::schema::READY_INDEX;
use crate::transition::{Field, JobWrite, Place};

/// How many times FETCH re-queries a queue whose candidates were all taken by others.
const CLAIM_ROUNDS: usize = 4;
/// Entries a FETCH reads beyond its count: the spare ones it moves on to when a
/// candidate was taken.
const PAGE_SPARE: usize = 8;
/// Entries a FETCH reads beyond its count on a contended queue, to spread over.
const CONTENDED_PAGE_SPARE: usize = 96;
/// Claims a FETCH may lose to other workers on one queue before it moves on. Each lost
/// claim is a failed conditional write (one write unit) that another worker won: when
/// fewer jobs wait than workers race for them, a FETCH that walked its whole page would
/// lose once per job left, while answering with less costs nothing and strands nothing.
const LOSSES_PER_QUEUE: usize = 3;

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

/// One FETCH in progress: what it claimed, what it saw, and until when it may start
/// another claim attempt.
struct Fetching<'a> {
    claimed: Vec<Job>,
    /// What the claimed jobs take in the answer ([`crate::answer::answer_bytes`]).
    answer_bytes: usize,
    /// The answer's bound ([`StoreConfig::fetch_answer`]).
    ///
    /// [`StoreConfig::fetch_answer`]: crate::StoreConfig::fetch_answer
    bound: AnswerBound,
    full_limits: FullLimits,
    saw_ready: bool,
    /// Claim attempts made so far.
    attempts: usize,
    /// Who says whether the worker may be handed jobs; none admits any.
    admission: Option<Admission<'a>>,
    /// Its answer, once asked ([`Fetching::admits`]).
    admitted: Option<bool>,
    /// Claims lost to other workers on the queue being claimed from.
    losses_on_queue: usize,
    /// When the FETCH's time budget ends ([`StoreConfig::fetch_budget`]).
    ///
    /// [`StoreConfig::fetch_budget`]: crate::StoreConfig::fetch_budget
    ends: Instant,
    /// How many claimed jobs the queue being claimed from may bring the FETCH to: its
    /// count, or less in a scheduled FETCH's first pass (the queue's share).
    target: usize,
    /// Whether the lane being claimed from listed any job.
    saw_candidates: bool,
    /// Whether the queue being claimed from refused a start by its own rate limit: its
    /// other lanes would be refused as well, so the FETCH moves on to the next queue.
    queue_limited: bool,
}

impl Fetching<'_> {
    /// Whether the worker may be handed jobs: asked once per FETCH, when there is a job
    /// to hand it.
    async fn admits(&mut self) -> Result<bool, StoreError> {
        if let Some(known) = self.admitted {
            return Ok(known);
        }
        let Some(ask) = self.admission.as_mut() else {
            return Ok(true);
        };
        let takes = ask().await?;
        self.admitted = Some(takes);
        Ok(takes)
    }

    /// Whether the budget is spent. The first attempt is always made, so a FETCH that
    /// finds a job claims it however slow the table is.
    fn out_of_time(&self) -> bool {
        self.attempts > 0 && Instant::now() >= self.ends
    }

    /// Whether the FETCH stops: its count is met, its answer has no room for another
    /// job, or its time is up.
    fn done(&self, count: usize) -> bool {
        self.claimed.len() >= count
            || !self.bound.room_for_another(self.answer_bytes)
            || self.out_of_time()
    }

    fn won(&mut self, job: Job) {
        self.answer_bytes = self.answer_bytes.saturating_add(answer_bytes(&job));
        self.claimed.push(job);
    }
}

/// Moves to `from` a candidate picked (by `pick`, from the range it is given) among the
/// ones from `from` on that share `candidates[from]`'s priority. Racing workers so spread
/// over the jobs of the highest priority waiting instead of all writing to its head, and
/// no job of a lower priority goes ahead of it.
fn spread<T>(
    candidates: &mut [T],
    from: usize,
    priority: impl Fn(&T) -> &str,
    pick: impl FnOnce(Range<usize>) -> usize,
) {
    let Some(first) = candidates.get(from) else {
        return;
    };
    let level = priority(first);
    let run = candidates[from..]
        .iter()
        .take_while(|c| priority(c) == level)
        .count();
    if run > 1 {
        let chosen = pick(from..from + run).clamp(from, from + run - 1);
        candidates.swap(from, chosen);
    }
}

/// The priority part of a ready-index sort key.
fn priority_of(c: &Candidate) -> &str {
    c.ready_sk.split('#').next().unwrap_or_default()
}

/// A ready-index entry.
pub(crate) struct Candidate {
    pub(crate) id: JobId,
    pub(crate) ready_sk: String,
    /// The job's own lease length, when it sets one.
    lease_ms: Option<u64>,
    /// The job's execution timeout, when it has one.
    timeout_ms: Option<u64>,
    /// The job's rate limit, when it has one.
    rate_limit: Option<RateLimitPolicy>,
    /// Why the job cannot be claimed as stored (its rate limit no longer reads).
    unreadable: Option<String>,
}

impl Candidate {
    /// A job the change stream saw become available, claimed for a push endpoint.
    pub(crate) fn for_push(
        id: JobId,
        ready_sk: String,
        timeout_ms: Option<u64>,
        rate_limit: Option<RateLimitPolicy>,
    ) -> Self {
        Self {
            id,
            ready_sk,
            lease_ms: None,
            timeout_ms,
            rate_limit,
            unreadable: None,
        }
    }
}

/// Outcome of one claim attempt.
pub(crate) enum Claim {
    Won(Box<Job>),
    /// Someone else claimed it after this FETCH began: a competitor.
    Lost,
    /// The index still listed a job that had left `available` with no claim since this
    /// FETCH began (index lag: claimed earlier, cancelled, ...), or one the server cannot
    /// read (set aside): no competitor, so the FETCH goes on in index order.
    Stale,
    /// The queue's own rate limit refused it: no other candidate of the queue can start.
    QueueLimited,
    /// Its tenant's `max_concurrency` refused it: no other candidate of the lane can
    /// start (the lane is the tenant's).
    TenantLimited,
    /// Its `expires_at` had passed: expired on the spot, no competitor.
    Expired,
    /// Its own rate limit refused it (it waits, or was rescheduled or dropped as its
    /// `on_limit` says): no competitor, and the candidates behind it may still start.
    Refused,
}

/// The limits every candidate of one lane is claimed under besides its own rate limit.
#[derive(Debug, Clone, Default)]
pub(crate) struct LaneLimits {
    /// The queue's rate limit: a refusal ends the queue for the FETCH.
    pub(crate) queue: Option<RateLimitPolicy>,
    /// The tenant's `max_concurrency`: a refusal ends the lane.
    pub(crate) tenant: Option<RateLimitPolicy>,
}

impl Engine {
    /// The limits of `lane` whose queue's rate limit is `queue` (the tenant's settings
    /// as this instance remembers them).
    pub(crate) async fn lane_limits(
        &self,
        lane: &crate::keys::Lane,
        queue: Option<&RateLimitPolicy>,
    ) -> Result<LaneLimits, StoreError> {
        Ok(LaneLimits {
            queue: queue.cloned(),
            tenant: self.tenant_slot_policy(lane.tenant.as_ref()).await?,
        })
    }
}

/// Limits found full during one FETCH, and when each frees (epoch µs): later candidates
/// of the same key are refused without reading its items again.
#[derive(Default)]
pub(crate) struct FullLimits {
    /// Concurrency keys.
    pub(crate) concurrency: HashMap<String, i64>,
    /// Windows, by key and length.
    pub(crate) windows: HashMap<(String, i64), i64>,
}

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
    ) -> Result<FetchOutcome, StoreError> {
        let mut run = Fetching {
            claimed: Vec::new(),
            answer_bytes: 0,
            bound: self.config.fetch_answer,
            full_limits: FullLimits::default(),
            saw_ready: false,
            attempts: 0,
            admission,
            admitted: None,
            losses_on_queue: 0,
            ends: Instant::now() + self.config.fetch_budget,
            target: req.count,
            saw_candidates: false,
            queue_limited: false,
        };
        let settings = self.queue_settings(&req.queues).await?;
        // A FETCH for any tenant weighs the tenants of its queues (1 each unless set).
        let weights = match req.tenant {
            ojs_core::tenant::Scope::Any => {
                let tenants: Vec<&ojs_core::tenant::TenantId> =
                    settings.values().flat_map(|s| s.tenants.iter()).collect();
                self.tenant_weights(&tenants).await.unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "tenant weights unread; every tenant weighs 1");
                    HashMap::new()
                })
            }
            ojs_core::tenant::Scope::One(_) => HashMap::new(),
        };
        // The order queues are served in, and each one's share of the count in a first
        // pass: all of it in the FETCH's order (strict), or by turns and weights.
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
        'passes: for pass in 0..passes {
            for (queue, share) in order.iter().zip(&shares) {
                if run.done(req.count) || run.admitted == Some(false) {
                    break 'passes;
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
                let queue_limit = queue_settings.rate_limit.as_ref();
                let lanes = self.fetch_lanes(queue, &queue_settings.tenants, &req.tenant, &weights);
                let shared = lanes.len() > 1;
                run.queue_limited = false;
                for lane in lanes {
                    if run.done(run.target) || run.admitted == Some(false) || run.queue_limited {
                        break;
                    }
                    let limits = match self.lane_limits(&lane, queue_limit).await {
                        Ok(limits) => limits,
                        Err(e) if run.claimed.is_empty() => return Err(e),
                        Err(e) => {
                            tracing::warn!(error = %e, claimed = run.claimed.len(), "FETCH stopped early");
                            break 'passes;
                        }
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
                    let claimed = self.claim_from(&lane, req, now, &limits, &mut run).await;
                    if shared && claimed.is_ok() {
                        if run.saw_candidates {
                            self.quiet_lanes.forget(&lane);
                        } else {
                            let turn = self.lane_turn.load(std::sync::atomic::Ordering::Relaxed);
                            self.quiet_lanes.note(&lane, turn);
                        }
                    }
                    if let Err(e) = claimed {
                        if run.claimed.is_empty() {
                            return Err(e);
                        }
                        // Jobs already claimed are leased to this worker: answering 503
                        // would strand them until their lease ends. Deliver them instead.
                        tracing::warn!(error = %e, claimed = run.claimed.len(), "FETCH stopped early");
                        break 'passes;
                    }
                }
                // A queue that gave less than it was asked has nothing more for the
                // second pass.
                if run.claimed.len() < run.target {
                    dry.push(queue);
                }
            }
        }
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
        let limit = match req.queues.iter().find_map(|q| {
            settings
                .get(q.as_str())
                .and_then(|st| st.rate_limit.clone())
        }) {
            Some(policy) => match self.window_state(&policy, now).await {
                Ok(state) => state.map(|(limit, remaining, reset_at)| LimitState {
                    limit,
                    remaining,
                    reset_at,
                }),
                // The headers are advisory; the claimed jobs are not.
                Err(e) if !claimed.is_empty() => {
                    tracing::warn!(error = %e, "rate limit window unknown");
                    None
                }
                Err(e) => return Err(e),
            },
            None => None,
        };
        // Claimed jobs whose request is in the payload bucket come back whole; one whose
        // payload cannot be read is not delivered, and not left leased either.
        let claimed = self.deliverable(claimed, now).await;
        Ok(FetchOutcome {
            jobs: claimed,
            limit,
            saw_ready: run.saw_ready,
        })
    }

    /// Claims from one lane of a queue, up to the request's count. A sharded queue is
    /// walked shard by shard from a random one, so racing workers start apart.
    async fn claim_from(
        &self,
        lane: &crate::keys::Lane,
        req: &FetchRequest,
        now: Timestamp,
        limits: &LaneLimits,
        run: &mut Fetching<'_>,
    ) -> Result<(), StoreError> {
        run.losses_on_queue = 0;
        let shards = self.queue_shards();
        let first = if shards > 1 {
            rand::random_range(0..shards)
        } else {
            0
        };
        for k in 0..shards {
            if run.done(run.target) {
                break;
            }
            let shard = (first + k) % shards;
            let queue_done = self
                .claim_from_shard(lane, shard, req, now, limits, run)
                .await?;
            if queue_done {
                break;
            }
        }
        Ok(())
    }

    /// Claims from one shard of a lane. True when the lane is done for this FETCH: its
    /// queue's or its tenant's limit refused a start, or other workers won
    /// [`LOSSES_PER_QUEUE`] claims.
    async fn claim_from_shard(
        &self,
        lane: &crate::keys::Lane,
        shard: u16,
        req: &FetchRequest,
        now: Timestamp,
        limits: &LaneLimits,
        run: &mut Fetching<'_>,
    ) -> Result<bool, StoreError> {
        let queue = &lane.queue;
        if !self
            .quiet_due
            .within(&(queue.clone(), shard), self.config.quiet_due_memory)
        {
            self.promote_due_shard(queue, shard, now).await?;
        }
        for _ in 0..CLAIM_ROUNDS {
            if run.done(run.target) {
                break;
            }
            let wanted = run.target.saturating_sub(run.claimed.len());
            let contended = self.contention.recent(queue);
            let spare = if contended {
                CONTENDED_PAGE_SPARE
            } else {
                PAGE_SPARE
            };
            let page = wanted.saturating_add(spare).min(100) as i32;
            let mut candidates = self.ready_candidates(lane, shard, page).await?;
            run.saw_candidates |= !candidates.is_empty();
            if !candidates.is_empty() && !run.admits().await? {
                // A quiet, draining or terminating worker is assigned nothing
                // (ojs-graceful-shutdown.md §5.1); looking again would not change that.
                run.saw_ready = true;
                return Ok(true);
            }
            let exhausted = candidates.len() < page as usize;
            // Strict index order holds whenever nobody competes.
            if contended {
                spread(&mut candidates, 0, priority_of, rand::random_range);
            }
            let mut lost_any = false;
            let mut next = 0;
            while next < candidates.len() && !run.out_of_time() {
                let c = &candidates[next];
                // An entry of a job this FETCH claimed in an earlier round, still listed
                // behind the index's lag: not another worker's competition (taken for
                // one, it would reorder the rest of the page), and not worth a write.
                let ours = run.claimed.iter().any(|j| j.id == c.id);
                let claimed_as_stored = match &c.unreadable {
                    _ if ours => Ok(Claim::Stale),
                    Some(why) => Err(StoreError::Corrupt(why.clone())),
                    None => {
                        run.attempts += 1;
                        self.claim(lane, c, req, now, limits, &mut run.full_limits)
                            .await
                    }
                };
                let outcome = match claimed_as_stored {
                    // A job the server can no longer read never blocks the queue. It was
                    // never deliverable and nobody competed for it: like an entry the
                    // index still lists, it answers nothing, so a FETCH that saw only such
                    // jobs looks again for a just-pushed one behind them.
                    Err(StoreError::Corrupt(why)) => {
                        self.set_aside(&c.id, &why).await;
                        Claim::Stale
                    }
                    other => other?,
                };
                next += 1;
                // Only entries that left `available` before this FETCH began (or were set
                // aside) mean the index has not caught up; anything else is a queue that
                // was answered.
                run.saw_ready |= !matches!(outcome, Claim::Stale);
                match outcome {
                    Claim::Won(job) => run.won(*job),
                    Claim::Stale | Claim::Expired => lost_any = true,
                    // Not a competitor, so not counted as one; but a page of waiting jobs
                    // is read past (wider, from a random one of its priority) by the next
                    // round, or a job with no limit behind them would wait with them.
                    Claim::Refused => {
                        lost_any = true;
                        self.contention.lost_on(queue);
                        spread(&mut candidates, next, priority_of, rand::random_range);
                    }
                    Claim::Lost => {
                        lost_any = true;
                        self.contention.lost_on(queue);
                        run.losses_on_queue += 1;
                        if run.losses_on_queue >= LOSSES_PER_QUEUE {
                            return Ok(true);
                        }
                        // Other workers are taking this page head first: try another of
                        // the same priority next instead of following them down the list.
                        spread(&mut candidates, next, priority_of, rand::random_range);
                    }
                    Claim::QueueLimited => {
                        run.queue_limited = true;
                        return Ok(true);
                    }
                    Claim::TenantLimited => return Ok(true),
                }
                if run.done(run.target) {
                    break;
                }
            }
            if run.done(run.target) || exhausted && !lost_any {
                break;
            }
        }
        Ok(false)
    }

    /// Claims one given candidate (push delivery): the job, or `None` when it is no longer
    /// available or a limit refuses it now.
    pub(crate) async fn claim_one(
        &self,
        lane: &crate::keys::Lane,
        c: &Candidate,
        req: &FetchRequest,
        now: Timestamp,
        limits: &LaneLimits,
    ) -> Result<Option<Job>, StoreError> {
        match self
            .claim(lane, c, req, now, limits, &mut FullLimits::default())
            .await?
        {
            Claim::Won(job) => Ok(Some(*job)),
            Claim::Lost
            | Claim::Stale
            | Claim::QueueLimited
            | Claim::TenantLimited
            | Claim::Expired
            | Claim::Refused => Ok(None),
        }
    }

    pub(crate) async fn ready_candidates(
        &self,
        lane: &crate::keys::Lane,
        shard: u16,
        limit: i32,
    ) -> Result<Vec<Candidate>, StoreError> {
        let queue = &lane.queue;
        // A page may come back short of `limit` (DynamoDB's 1 MB page): read on.
        let mut items = Vec::new();
        let query = self
            .table
            .query_index(&READY_INDEX)
            .key_condition_expression("gsi1pk = :pk")
            .expression_attribute_values(":pk", s(keys::ready_pk(lane, shard)));
        let mut pages = self.table.pages(query);
        let read = |items: &Vec<Item>| i32::try_from(items.len()).unwrap_or(limit);
        while let Some(out) = pages.next_limited(Some(limit - read(&items))).await? {
            items.extend(out.items().iter().cloned());
            if read(&items) >= limit {
                break;
            }
        }
        Ok(items
            .iter()
            .filter_map(|i| {
                let num = |k: &str| {
                    i.get(k)
                        .and_then(|v| v.as_n().ok())
                        .and_then(|v| v.parse().ok())
                };
                // A stored policy that no longer reads (rules tightened since it was
                // stored) must not silently become "no limit" (review #19h): the job is
                // set aside like any other item the server cannot read.
                let (rate_limit, unreadable) = match i.get("rl").and_then(|v| v.as_s().ok()) {
                    None => (None, None),
                    Some(raw) => match serde_json::from_str::<serde_json::Value>(raw)
                        .map_err(|e| e.to_string())
                        .and_then(|v| {
                            RateLimitPolicy::from_stored(&v, queue.as_str()).map_err(|e| e.message)
                        }) {
                        Ok(p) => (Some(p), None),
                        Err(why) => (None, Some(format!("stored rate_limit: {why}"))),
                    },
                };
                Some(Candidate {
                    id: id_of(i)?,
                    ready_sk: i.get("gsi1sk")?.as_s().ok()?.clone(),
                    lease_ms: num("lease_ms"),
                    timeout_ms: num("timeout_ms"),
                    rate_limit,
                    unreadable,
                })
            })
            .collect())
    }

    async fn claim(
        &self,
        lane: &crate::keys::Lane,
        c: &Candidate,
        req: &FetchRequest,
        now: Timestamp,
        limits: &LaneLimits,
        full_limits: &mut FullLimits,
    ) -> Result<Claim, StoreError> {
        // A claim is stamped when it is made, not when its FETCH began: a FETCH that
        // waited on the index or on other claims must not start a lease, an execution
        // timeout or a rate window in the past.
        let began = now;
        let now = now.max(time::now());
        let lease_ms = req
            .visibility_timeout_ms
            .or(c.lease_ms)
            .unwrap_or(DEFAULT_VISIBILITY_TIMEOUT_MS);
        let lease_until = time::after_ms(now, lease_ms);
        let deadline = c.timeout_ms.map(|t| time::after_ms(now, t));
        // The due entry wakes the sweep at whichever comes first.
        let due = deadline.map_or(lease_until, |d| d.min(lease_until));
        let priority = c
            .ready_sk
            .get(..3)
            .and_then(|p| p.parse::<i32>().ok())
            .map_or(0, |k| 100 - k);
        let wid = write_id();
        // The condition re-checks the ready entry this FETCH read, so a stale entry (the
        // job moved and came back) never claims under an old read.
        let mut write = JobWrite::new(
            Transition::Claim,
            Place::Due {
                pk: self.due_pk(&lane.queue, &c.id),
                sk: keys::due_sk(&due, priority, lane.tenant.as_ref(), &c.id),
            },
        )
        .set("attempt = attempt + :one")
        .value(":one", n(1))
        .stamp(Field::StartedAt, &now)
        .lease_until(&lease_until)
        .write_id(&wid)
        .when("gsi1sk = :rsk AND (attribute_not_exists(expires_us) OR expires_us > :nowus)")
        .value(":rsk", s(c.ready_sk.clone()))
        .value(":nowus", n(now.timestamp_micros()))
        // The new attempt's holder is the claimer, or nobody: a claim without a worker id
        // never inherits a previous holder's, whose late calls would then pass its fence.
        .worker(req.worker_id.as_deref());
        write = match deadline {
            Some(d) => write
                .set("deadline_us = :deadline")
                .value(":deadline", n(d.timestamp_micros())),
            None => write.remove("deadline_us"),
        };
        let parts = write.parts()?;
        // The queue's limit first: its refusal ends the queue for this FETCH; then the
        // tenant's, whose refusal ends the lane.
        let policies: Vec<&RateLimitPolicy> = limits
            .queue
            .iter()
            .chain(limits.tenant.as_ref())
            .chain(c.rate_limit.as_ref())
            .collect();
        if !policies.is_empty() {
            let shared = crate::engine::limits::Shared {
                queue: limits.queue.is_some(),
                tenant_at: limits
                    .tenant
                    .as_ref()
                    .map(|_| usize::from(limits.queue.is_some())),
            };
            return self
                .claim_limited(
                    c,
                    &policies,
                    shared,
                    parts,
                    (lease_until.timestamp_micros(), now),
                    full_limits,
                )
                .await;
        }
        let out = parts.apply(self.update(&c.id)).send().await;
        let expired = match &out {
            Err(e) => old_item(e)
                .filter(|old| is_expired_available(old, &now))
                .cloned(),
            Ok(_) => None,
        };
        // Gone, set aside (by this FETCH, say, its entry still listed behind the lag), or
        // out of `available` without a claim since this FETCH began (claimed earlier,
        // cancelled, discarded): the index entry was stale. Only a job claimed since this
        // FETCH began means another worker competes for the queue.
        let stale = match &out {
            Err(e) => old_item(e).is_none_or(|old| {
                let claimed_since = old
                    .get("started_at")
                    .and_then(|v| v.as_s().ok())
                    .and_then(|t| ojs_core::time::parse(t, "started_at").ok())
                    .is_some_and(|t| t >= began);
                old.contains_key("set_aside")
                    || item::state_of(old) != Some(JobState::Available) && !claimed_since
            }),
            Ok(_) => false,
        };
        // A claim that landed but whose answer was lost, retried by the SDK, is still ours
        // while the job is active under it; delivering it beats leaving it to its lease.
        let ours = |old: &Item| {
            old.get("write_id") == Some(&wid) && item::state_of(old) == Some(JobState::Active)
        };
        match self.finish_own_update(out, ours) {
            Ok(job) => Ok(Claim::Won(Box::new(job))),
            Err(StoreError::Conflict { .. } | StoreError::NotFound) => {
                if let Some(old) = expired {
                    self.expire_job(&item::job_from_item(&old)?, now).await?;
                    return Ok(Claim::Expired);
                }
                Ok(if stale { Claim::Stale } else { Claim::Lost })
            }
            Err(e) => Err(e),
        }
    }
}

pub(crate) fn id_of(item: &Item) -> Option<JobId> {
    let pk = item.get("pk")?.as_s().ok()?;
    JobId::parse(pk.strip_prefix("JOB#")?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level<'a>(c: &'a &str) -> &'a str {
        c.split('#').next().unwrap_or_default()
    }

    #[test]
    fn spread_picks_only_among_the_first_priority() {
        let page = ["1#a", "1#b", "1#c", "2#d", "2#e"];
        let mut offered = None;
        let mut order = page;
        spread(&mut order, 0, level, |r| {
            offered = Some(r.clone());
            r.end - 1
        });
        assert_eq!(offered, Some(0..3));
        assert_eq!(order, ["1#c", "1#b", "1#a", "2#d", "2#e"]);
    }

    #[test]
    fn spread_from_the_middle_keeps_what_came_before() {
        let mut order = ["1#a", "1#b", "1#c", "1#d", "2#e"];
        let mut offered = None;
        spread(&mut order, 2, level, |r| {
            offered = Some(r.clone());
            r.end - 1
        });
        assert_eq!(offered, Some(2..4));
        assert_eq!(order, ["1#a", "1#b", "1#d", "1#c", "2#e"]);
    }

    #[test]
    fn spread_leaves_a_lone_candidate_and_an_empty_page_alone() {
        let mut order = ["1#a", "2#b", "2#c"];
        spread(&mut order, 0, level, |_| panic!("nothing to pick from"));
        assert_eq!(order, ["1#a", "2#b", "2#c"]);
        let mut empty: [&str; 0] = [];
        spread(&mut empty, 0, level, |_| panic!("nothing to pick from"));
        spread(&mut order, 3, level, |_| panic!("nothing to pick from"));
        // A pick outside the range it was given still stays within the priority.
        let mut order = ["1#a", "1#b", "2#c"];
        spread(&mut order, 0, level, |_| 7);
        assert_eq!(order, ["1#b", "1#a", "2#c"]);
    }

    #[test]
    fn a_candidates_priority_is_its_sort_keys_first_part() {
        let id =
            JobId::parse("01a20f62-cb55-7106-98fc-771d12482429").unwrap_or_else(|e| panic!("{e}"));
        let sk = crate::keys::ready_sk(7, &time::now(), &id);
        let c = Candidate::for_push(id, sk.clone(), None, None);
        assert_eq!(priority_of(&c), sk.split('#').next().unwrap_or("?"));
        assert_eq!(priority_of(&c).len(), 3, "{sk}");
        let other =
            Candidate::for_push(id, crate::keys::ready_sk(8, &time::now(), &id), None, None);
        assert_ne!(priority_of(&c), priority_of(&other));
    }
}
