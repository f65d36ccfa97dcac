//! What a FETCH does with a candidate its limits refuse: a rate limit's window full, a
//! concurrency key's slots taken. Claimed under the limit's item in one transaction, or
//! left, deferred (`on_limit: reschedule`) or dropped (`on_limit: discard`) as the job's
//! policy says (ojs-rate-limiting.md §6).

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{TransactWriteItem, Update};
use ojs_core::rate_limit::{self, RateLimitPolicy, Refusal, SlidingWindow};
use ojs_core::time::Timestamp;
use ojs_core::{Job, JobState, Transition};

use crate::concurrency::Slot;
use crate::effects::{FollowUps, Moved};
use crate::engine::candidates::Candidate;
use crate::engine::claim_attempt::Claim;
use crate::engine::fetching::FullLimits;
use crate::engine::windows::WindowRead;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{self};
use crate::keys;
use crate::transition::{Field, JobWrite, Place, WriteParts};
use crate::usage::Kind;
use ojs_core::JobId;

/// Which of a claim's policies are the lane's rather than the job's own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shared {
    /// The first policy is the queue's rate limit.
    pub(crate) queue: bool,
    /// The index of the tenant's `max_concurrency` policy, when it has one.
    pub(crate) tenant_at: Option<usize>,
}

impl Engine {
    /// A claim that must fit the job's rate limits: concurrency slots and window
    /// counters are taken in the same transaction as the claim, so a start is counted
    /// exactly when it happens, across every Lambda instance. A refused job stays
    /// available, or is rescheduled or dropped as its `on_limit` says.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn claim_limited(
        &self,
        c: &Candidate,
        policies: &[&RateLimitPolicy],
        shared: Shared,
        claim: WriteParts,
        (lease_until_us, now): (i64, Timestamp),
        full_limits: &mut FullLimits,
    ) -> Result<Moved<Claim>, StoreError> {
        let now_us = now.timestamp_micros();
        // Concurrency first: a full key needs no transaction at all.
        let (slots, full) = self
            .concurrency_slots(c, policies, lease_until_us, now_us, full_limits)
            .await?;
        if !full.is_empty() {
            return self.refused(c, policies, shared, &full, now).await;
        }
        // Each window once: one transaction may not touch an item twice.
        let windows = rate_limit::merged_windows(policies);
        let (reads, full) = self.window_reads(&windows, now_us, full_limits).await?;
        // A full window needs no transaction either.
        if !full.is_empty() {
            return self.refused(c, policies, shared, &full, now).await;
        }
        let mut tx = self.table.transact_write();
        for (w, read) in windows.iter().zip(&reads) {
            let start = self.record_start(w, read)?;
            tx = tx.transact_items(TransactWriteItem::builder().update(start).build());
        }
        for slot in slots {
            tx = tx.transact_items(TransactWriteItem::builder().update(slot).build());
        }
        let wid = claim.values.get(":wid").cloned();
        let claim = Update::builder()
            .table_name(self.table())
            .set_key(Some(item::job_key(&c.id)))
            .update_expression(claim.update)
            .condition_expression(claim.condition)
            .set_expression_attribute_names(Some(claim.names))
            .set_expression_attribute_values(Some(claim.values))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        tx = tx.transact_items(TransactWriteItem::builder().update(claim).build());
        match self.table.metered(Kind::Write, tx.send().await) {
            // Transactions return no item: read the claimed job back.
            Ok(_) => Ok(Moved::done(
                match self.read_back_claim(&c.id, wid.as_ref()).await? {
                    Some(job) => Claim::Won(Box::new(job)),
                    None => Claim::Lost,
                },
            )),
            Err(e) => {
                let Some(TransactWriteItemsError::TransactionCanceledException(_)) =
                    e.as_service_error()
                else {
                    // No answer after the SDK's retries: the claim may have landed, and
                    // then the job is ours to deliver, not to leave to its lease.
                    let cause = StoreError::from_sdk(e);
                    return match self.read_back_claim(&c.id, wid.as_ref()).await {
                        Ok(Some(job)) => Ok(Moved::done(Claim::Won(Box::new(job)))),
                        _ => Err(cause),
                    };
                };
                // A start recorded by another claimer since the window was read, a slot
                // lost to a racing claimer or a job claimed by someone else: a lost race.
                Ok(Moved::done(Claim::Lost))
            }
        }
    }

    /// The concurrency slots of `policies` for `c`: the updates taking the free ones,
    /// and the full ones (policy index, when expected to free, µs), also noted in
    /// `full_limits`. One found full earlier in the FETCH is not read again.
    async fn concurrency_slots(
        &self,
        c: &Candidate,
        policies: &[&RateLimitPolicy],
        lease_until_us: i64,
        now_us: i64,
        full_limits: &mut FullLimits,
    ) -> Result<(Vec<Update>, Vec<(usize, i64)>), StoreError> {
        let mut slots = Vec::new();
        let mut full = Vec::new();
        for (p, policy) in policies.iter().enumerate() {
            if policy.concurrency.is_none() {
                continue;
            }
            if let Some(at) = full_limits.concurrency.get(&policy.key) {
                full.push((p, *at));
                continue;
            }
            match self
                .concurrency_slot(policy, &c.id.to_string(), lease_until_us, now_us)
                .await?
            {
                Slot::Free(update) => slots.push(*update),
                // Expected to free when the earliest holder's lease ends.
                Slot::Full { frees_at_us } => {
                    let at = frees_at_us.unwrap_or(now_us + 1_000_000);
                    full_limits.concurrency.insert(policy.key.clone(), at);
                    full.push((p, at));
                }
            }
        }
        Ok((slots, full))
    }

    /// The windows read: those with room, and the policies of the full ones (policy
    /// index, when expected to fit, µs), also noted in `full_limits`. One found full
    /// earlier in the FETCH is not read again.
    async fn window_reads(
        &self,
        windows: &[SlidingWindow],
        now_us: i64,
        full_limits: &mut FullLimits,
    ) -> Result<(Vec<WindowRead>, Vec<(usize, i64)>), StoreError> {
        let mut reads = Vec::with_capacity(windows.len());
        let mut full = Vec::new();
        for w in windows {
            let id = (w.key.clone(), w.len_us);
            let fits_at_us = match full_limits.windows.get(&id) {
                Some(at) => *at,
                None => {
                    let read = self.read_window(w, now_us).await?;
                    let at = read.assessment.fits_at_us;
                    if read.assessment.remaining > 0 {
                        reads.push(read);
                        continue;
                    }
                    full_limits.windows.insert(id, at);
                    at
                }
            };
            full.extend(w.policies.iter().map(|p| (*p, fits_at_us)));
        }
        Ok((reads, full))
    }

    /// What a refusal by `refused` (policy index, when it expects to allow the job, µs)
    /// does: end the queue for this FETCH (a queue limit), end the lane (the tenant's
    /// limit: the job waits), or leave the job available, reschedule it or drop it, as
    /// the refusing policies say (drop wins, then reschedule).
    async fn refused(
        &self,
        c: &Candidate,
        policies: &[&RateLimitPolicy],
        shared: Shared,
        refused: &[(usize, i64)],
        now: Timestamp,
    ) -> Result<Moved<Claim>, StoreError> {
        let decision = rate_limit::refusal(policies, shared.queue, refused);
        if decision == Refusal::QueueLimited {
            return Ok(Moved::done(Claim::QueueLimited));
        }
        // A tenant at its limit is not the job's doing: it waits, whatever its own
        // `on_limit` says.
        if shared
            .tenant_at
            .is_some_and(|t| refused.iter().any(|(p, _)| *p == t))
        {
            return Ok(Moved::done(Claim::TenantLimited));
        }
        if decision == Refusal::Wait {
            return Ok(Moved::done(Claim::Refused));
        }
        // Read again: the job may have moved since its ready entry was read.
        let mut owed = FollowUps::none();
        if let Some(job) = self.get_job(&c.id).await? {
            if job.status.state == JobState::Available {
                match decision {
                    Refusal::Reschedule { at_us } => {
                        let at = ojs_core::time::from_micros(at_us)
                            .unwrap_or(now + chrono::Duration::seconds(1));
                        self.reschedule_rate_limited(&job, at).await?;
                    }
                    _ => owed = self.drop_rate_limited(&job, now).await?,
                }
            }
        }
        Ok(Moved::new(Claim::Refused, owed))
    }

    /// `on_limit: reschedule`: the job becomes `scheduled` at `at`, when its limit is
    /// expected to allow it (ojs-rate-limiting.md §6).
    async fn reschedule_rate_limited(&self, job: &Job, at: Timestamp) -> Result<(), StoreError> {
        let mut spec = job.spec.clone();
        spec.scheduled_at = Some(at);
        let write = JobWrite::new(
            Transition::Defer,
            Place::Due {
                pk: self.due_pk(&job.spec.queue, &job.id),
                sk: keys::job_due_sk(job, &at),
            },
        )
        .version(job.status.version)
        .request(&spec)
        .clear(Field::EnqueuedAt);
        match self.transition_read(job, write).await {
            Ok(deferred) => {
                deferred.unfinished();
                Ok(())
            }
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `on_limit: drop`: discard a job its rate limit refused, owing its follow-up.
    async fn drop_rate_limited(&self, job: &Job, now: Timestamp) -> Result<FollowUps, StoreError> {
        let failure = ojs_core::failure::Failure {
            error_type: "rate_limited".into(),
            message: "dropped: its rate limit was reached (on_limit: drop)".into(),
            retryable: false,
            reported: serde_json::Map::new(),
            retry_after: None,
        };
        let error = failure.to_job_error(job.status.attempt, &now);
        let write = JobWrite::new(
            Transition::Drop,
            Place::Retained {
                ttl: self.expiry(&now),
            },
        )
        .version(job.status.version)
        .stamp(Field::DiscardedAt, &now)
        .error(&error);
        match self.transition_read(job, write).await {
            Ok(dropped) => Ok(dropped.split().1),
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(FollowUps::none()),
            Err(e) => Err(e),
        }
    }
}

impl Engine {
    /// The job a claim transaction wrote, read back (review #19d): delivered only while
    /// it is still active under this claim's write id (a CANCEL may come between the
    /// transaction and the read), and the read is tried again before giving up, since a
    /// claimed job that is not delivered loses an attempt when its lease ends.
    pub(crate) async fn read_back_claim(
        &self,
        id: &JobId,
        wid: Option<&aws_sdk_dynamodb::types::AttributeValue>,
    ) -> Result<Option<Job>, StoreError> {
        let mut last = None;
        for pause_ms in [0, 20, 100] {
            tokio::time::sleep(std::time::Duration::from_millis(pause_ms)).await;
            match self.table.read_item(item::job_key(id)).await {
                Ok(Some(item))
                    if wid.is_some()
                        && item.get("write_id") == wid
                        && item::state_of(&item) == Some(JobState::Active) =>
                {
                    return item::job_from_item(&item).map(Some)
                }
                Ok(_) => return Ok(None),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(StoreError::missing))
    }
}
