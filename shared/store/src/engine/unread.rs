//! Claimed jobs whose payload cannot be read (issue #32). FETCH never delivers an
//! incomplete job, and never leaves one leased silently either:
//!
//! - the payload store failing (an S3 error or timeout, no bucket configured) will
//!   likely pass: the job is given back, `available` at once at the end of its
//!   priority's FIFO, its attempt not counted (no worker saw it);
//! - an object missing, cut or not matching its digest will not heal: the job fails for
//!   good, `discarded` (into the dead letter queue when its policy says so) with the
//!   error `payload_unreadable`, which GET, the listings and the events show.
//!
//! The other claimed jobs of the FETCH are delivered either way. A FETCH that claimed
//! more than its answer can carry in the form it is sent in gives the rest back the same
//! way ([`Engine::give_back_claimed`]).

use futures::future::join_all;
use ojs_core::failure::Failure;
use ojs_core::time::Timestamp;
use ojs_core::{Job, JobState, Transition};

use crate::effects::{FollowUps, Moved};
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item;
use crate::settle::{FailureGuard, FailureOutcome};
use crate::transition::{Field, JobWrite};
use crate::usage::Kind;
use ojs_core::JobId;

/// The error type a job whose payload is missing or damaged fails with.
pub const PAYLOAD_UNREADABLE: &str = "payload_unreadable";

impl Engine {
    /// The claimed jobs whole, in their order, without those whose payload cannot be
    /// read: each of those is given back or failed (see the module), owing the follow-ups
    /// of the failed.
    pub(crate) async fn deliverable(&self, claimed: Vec<Job>, now: Timestamp) -> Moved<Vec<Job>> {
        let tried = join_all(claimed.into_iter().map(|j| self.try_full_job(j))).await;
        let mut whole = Vec::with_capacity(tried.len());
        let mut unread = Vec::new();
        for t in tried {
            match t {
                Ok(job) => whole.push(job),
                Err(failed) => unread.push(failed),
            }
        }
        let settled = join_all(
            unread
                .into_iter()
                .map(|(job, e)| self.settle_unread(job, e, now)),
        )
        .await;
        let owed = settled.into_iter().fold(FollowUps::none(), FollowUps::and);
        Moved::new(whole, owed)
    }

    /// Gives back (a failing payload store) or fails (a damaged payload) a claimed job
    /// whose payload could not be read for `e`, owing the follow-up of a failed one.
    pub(crate) async fn settle_unread(&self, job: Job, e: StoreError, now: Timestamp) -> FollowUps {
        let corrupt = matches!(e, StoreError::Corrupt(_));
        let done = if corrupt {
            self.fail_unreadable(&job, &e, now).await
        } else {
            self.give_back(&job, now).await.map(Moved::done)
        };
        match done {
            Ok(after) => {
                let (after, owed) = after.split();
                tracing::warn!(
                    job_id = %job.id, error = %e, state = after.status.state.as_str(),
                    "a claimed job's payload could not be read; not delivered"
                );
                owed
            }
            // Its lease ends as a crashed worker's would, and the sweep reclaims it.
            Err(w) => {
                tracing::error!(
                    job_id = %job.id, error = %e, write_error = %w,
                    "a claimed job's payload could not be read, and the job stays leased"
                );
                FollowUps::none()
            }
        }
    }

    /// Gives back jobs this FETCH claimed but will not answer (an answer that would pass
    /// its response limit in the form it is sent in): each `available` again at once, its
    /// attempt not counted. One that cannot be given back stays leased until its lease
    /// ends, as a crashed worker's job, and is logged.
    pub async fn give_back_claimed(&self, claimed: Vec<Job>, now: Timestamp) {
        let done = join_all(claimed.iter().map(|job| self.give_back(job, now))).await;
        for (job, r) in claimed.iter().zip(done) {
            if let Err(e) = r {
                tracing::error!(job_id = %job.id, error = %e, "a claimed job could not be given back; it waits out its lease");
            }
        }
    }

    /// `job` (just claimed) `available` again, with the attempt count it had before.
    async fn give_back(&self, job: &Job, now: Timestamp) -> Result<Job, StoreError> {
        let req = JobWrite::new(Transition::Reclaim, self.ready_place(job, &now))
            .from(JobState::Active)
            .version(job.status.version)
            .at_attempt(job.status.attempt)
            .attempt(job.status.attempt.saturating_sub(1))
            .stamp(Field::EnqueuedAt, &now)
            .clear(Field::StartedAt);
        Ok(self.transition_read(job, req).await?.unfinished())
    }

    /// `job` (just claimed) discarded for its damaged payload, as its policy discards.
    async fn fail_unreadable(
        &self,
        job: &Job,
        e: &StoreError,
        now: Timestamp,
    ) -> Result<Moved<Job>, StoreError> {
        let failure = Failure {
            error_type: PAYLOAD_UNREADABLE.into(),
            message: crate::payloads::unreadable_reason(e).into(),
            retryable: false,
            reported: serde_json::Map::new(),
            retry_after: None,
        };
        let outcome = FailureOutcome::GiveUp(job.spec.retry.on_exhaustion);
        self.record_failure(job, &failure, outcome, FailureGuard::Version, now)
            .await
    }
}

impl Engine {
    /// Takes a job the server can no longer read (an item that fails today's validation)
    /// out of the ready and due indexes, with the reason recorded on the item
    /// (`set_aside`), so it stops blocking FETCH and the sweep. Logged as an error: an
    /// operator decides what to do with it.
    pub(crate) async fn set_aside(&self, id: &JobId, why: &str) {
        tracing::error!(job_id = %id, reason = why, "job set aside: it cannot be processed");
        let out = crate::transition::set_aside(why.to_owned())
            .apply(self.table.update_at(item::job_key(id)))
            .send()
            .await;
        if let Err(e) = self.table.tally_existing(Kind::Write, out) {
            tracing::warn!(job_id = %id, error = %e, "job not set aside; tried again when met again");
        }
    }
}
