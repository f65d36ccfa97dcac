//! One claim attempt: a candidate claimed with one conditional write (or, under limits,
//! one transaction with the limits' items), and what its failure says about the queue.

use aws_sdk_dynamodb::types::AttributeValue;
use ojs_core::job::DEFAULT_VISIBILITY_TIMEOUT_MS;
use ojs_core::rate_limit::RateLimitPolicy;
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobState, Transition};

use crate::claim::FetchRequest;
use crate::due::is_expired_available;
use crate::effects::Moved;
use crate::engine::candidates::Candidate;
use crate::engine::fetching::FullLimits;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{self, Item};
use crate::job_item::{old_item, write_id, UpdateResult};
use crate::keys;
use crate::transition::{Field, JobWrite, Place};

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

/// A lane being claimed from (by a FETCH, or a push delivery): the request, when it
/// began, and the limits every candidate of the lane is claimed under.
pub(crate) struct LaneClaim<'a> {
    pub(crate) lane: &'a crate::keys::Lane,
    pub(crate) req: &'a FetchRequest,
    pub(crate) now: Timestamp,
    pub(crate) limits: &'a LaneLimits,
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

    /// Claims one given candidate (push delivery): the job, or `None` when it is no longer
    /// available or a limit refuses it now; owes the follow-up of a job the attempt
    /// finished instead (expired, or dropped by its rate limit).
    pub(crate) async fn claim_one(
        &self,
        at: &LaneClaim<'_>,
        c: &Candidate,
    ) -> Result<Moved<Option<Job>>, StoreError> {
        let claimed = self.claim(at, c, &mut FullLimits::default()).await?;
        Ok(claimed.map(|claim| match claim {
            Claim::Won(job) => Some(*job),
            Claim::Lost
            | Claim::Stale
            | Claim::QueueLimited
            | Claim::TenantLimited
            | Claim::Expired
            | Claim::Refused => None,
        }))
    }

    /// Claims candidate `c` of the lane `at`, under the limits found full so far in the
    /// FETCH (noting the ones it finds full).
    pub(crate) async fn claim(
        &self,
        at: &LaneClaim<'_>,
        c: &Candidate,
        full_limits: &mut FullLimits,
    ) -> Result<Moved<Claim>, StoreError> {
        let limits = at.limits;
        // A claim is stamped when it is made, not when its FETCH began: a FETCH that
        // waited on the index or on other claims must not start a lease, an execution
        // timeout or a rate window in the past.
        let began = at.now;
        let now = at.now.max(time::now());
        let (write, lease_until, wid) = self.claim_write(at.lane, c, at.req, now);
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
        self.claim_answered(out, &wid, began, now).await
    }

    /// The claim's write (to be made at `now`), with the lease's end and the write's id.
    fn claim_write(
        &self,
        lane: &crate::keys::Lane,
        c: &Candidate,
        req: &FetchRequest,
        now: Timestamp,
    ) -> (JobWrite, Timestamp, AttributeValue) {
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
        let write = JobWrite::new(
            Transition::Claim,
            Place::Due {
                pk: self.due_pk(&lane.queue, &c.id),
                sk: keys::due_sk(&due, priority, lane.tenant.as_ref(), &c.id),
            },
        )
        .next_attempt()
        .stamp(Field::StartedAt, &now)
        .lease_until(&lease_until)
        .deadline(deadline.as_ref())
        .write_id(&wid)
        .listed_ready_unexpired(&c.ready_sk, &now)
        // The new attempt's holder is the claimer, or nobody: a claim without a worker id
        // never inherits a previous holder's, whose late calls would then pass its fence.
        .worker(req.worker_id.as_deref());
        (write, lease_until, wid)
    }

    /// What a claim's conditional write (id `wid`, made at `now` by a FETCH that began
    /// at `began`) answered, as the claim's outcome.
    async fn claim_answered(
        &self,
        out: UpdateResult,
        wid: &AttributeValue,
        began: Timestamp,
        now: Timestamp,
    ) -> Result<Moved<Claim>, StoreError> {
        let (expired, stale) = match &out {
            Err(e) => (
                old_item(e)
                    .filter(|old| is_expired_available(old, &now))
                    .cloned(),
                stale_entry(old_item(e), began),
            ),
            Ok(_) => (None, false),
        };
        // A claim that landed but whose answer was lost, retried by the SDK, is still ours
        // while the job is active under it; delivering it beats leaving it to its lease.
        let ours = |old: &Item| {
            old.get("write_id") == Some(wid) && item::state_of(old) == Some(JobState::Active)
        };
        match self.finish_own_update(out, ours) {
            Ok(job) => Ok(Moved::done(Claim::Won(Box::new(job)))),
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => {
                if let Some(old) = expired {
                    let expired = self.expire_job(&item::job_from_item(&old)?, now).await?;
                    return Ok(expired.map(|_| Claim::Expired));
                }
                Ok(Moved::done(if stale { Claim::Stale } else { Claim::Lost }))
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether a failed claim's item (`old`, none when gone) shows its index entry was stale:
/// gone, set aside (by this FETCH, say, its entry still listed behind the lag), or out of
/// `available` without a claim since the FETCH began (claimed earlier, cancelled,
/// discarded). Only a job claimed since the FETCH began means another worker competes
/// for the queue.
fn stale_entry(old: Option<&Item>, began: Timestamp) -> bool {
    old.is_none_or(|old| {
        let claimed_since = old
            .get("started_at")
            .and_then(|v| v.as_s().ok())
            .and_then(|t| ojs_core::time::parse(t, "started_at").ok())
            .is_some_and(|t| t >= began);
        old.contains_key("set_aside")
            || item::state_of(old) != Some(JobState::Available) && !claimed_since
    })
}
