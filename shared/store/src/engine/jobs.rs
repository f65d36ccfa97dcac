//! PUSH, INFO, CANCEL, ACK and FAIL: one conditional write each (FAIL reads first, to
//! apply the job's retry policy, and writes under the version it read).

use ojs_core::failure::Failure;
use ojs_core::retry::FailDecision;
use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId, JobState, Transition};
use serde_json::Value;

use crate::effects::{Before, Moved, OwingError};
use crate::engine::Engine;
use crate::error::{Missing, StoreError};
use crate::item::{self, ts, Item};
use crate::job_item::write_id;
use crate::settle::{FailureGuard, FailureOutcome};
use crate::transition::{Field, JobWrite, Place};
use crate::unique::PushOutcome;
use ojs_core::unique::UniquePolicy;

/// An ACK.
#[derive(Debug, Clone)]
pub struct AckRequest {
    /// The job.
    pub id: JobId,
    /// The handler's result, if any.
    pub result: Option<Value>,
    /// When given, the ACK is refused unless this worker holds the current attempt.
    pub worker_id: Option<String>,
    /// When given, the ACK is refused unless this is the job's current attempt (the
    /// `attempt` FETCH returned): a late ACK of an earlier attempt cannot complete a
    /// later one, whatever worker id it carries.
    pub attempt: Option<u32>,
}

/// A FAIL.
#[derive(Debug, Clone, Copy)]
pub struct FailRequest<'a> {
    /// The job.
    pub id: &'a JobId,
    /// What went wrong, as the worker reported it.
    pub failure: &'a Failure,
    /// The attempt the caller holds; only its holder fails it.
    pub fence: Fence<'a>,
    /// The worker releases the job instead: `available` again at once.
    pub requeue: bool,
}

/// What a caller names of the attempt it holds: the fence of ACK, FAIL and heartbeat.
/// Each field given must match the job's current attempt; a caller that names nothing
/// is fenced by the job being `active` only (the spec's ACK by job id alone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fence<'a> {
    /// Must be the current holder's worker id (a claim without one has no holder, so
    /// no named worker holds it).
    pub worker_id: Option<&'a str>,
    /// Must be the job's current attempt number.
    pub attempt: Option<u32>,
}

impl Fence<'_> {
    /// Whether `job`'s current attempt is the one this fence names.
    pub(crate) fn admits(&self, job: &Job) -> bool {
        self.worker_id
            .is_none_or(|w| job.status.worker_id.as_deref() == Some(w))
            && self.attempt.is_none_or(|a| job.status.attempt == a)
    }

    /// Adds the fence to a write's condition, with the values it names. The conditional
    /// write, not the read before it, decides.
    pub(crate) fn guard(&self, mut write: JobWrite) -> JobWrite {
        if let Some(w) = self.worker_id {
            write = write.held_by(w);
        }
        if let Some(a) = self.attempt {
            write = write.at_attempt(a);
        }
        write
    }
}

/// The refusal of a fenced write whose condition failed on `old`: [`StoreError::NotHolder`]
/// when the job is still active (under another attempt or holder), else `None` (the
/// usual conflict by state applies).
pub(crate) fn not_holder(old: Option<&Item>) -> Option<StoreError> {
    let old = old?;
    if item::state_of(old) != Some(JobState::Active) {
        return None;
    }
    let attempt = old
        .get("attempt")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Some(StoreError::NotHolder { attempt })
}

/// What FAIL did.
#[derive(Debug, Clone)]
pub struct FailOutcome {
    /// The job after the transition (`retryable` or `discarded`).
    pub job: Job,
}

impl Engine {
    /// Stores a new job; [`StoreError::Duplicate`] if its id exists. Owes the cancel of
    /// a job its unique policy replaced.
    #[tracing::instrument(name = "push", level = "error", skip_all, fields(job_id = %job.id, queue = %job.spec.queue))]
    pub(crate) async fn put_job_moved(&self, job: &Job) -> Result<Moved<PushOutcome>, OwingError> {
        // Sizes are checked before anything is written (a refused job registers nothing).
        let body = self.offload_body(job)?;
        self.refuse_if_paused(&[job.spec.queue.as_str()]).await?;
        self.register_lane(&crate::keys::Lane::of(job)).await?;
        let policy = match &job.spec.unique {
            Some(u) => Some(UniquePolicy::from_json(u).map_err(StoreError::corrupt)?),
            None => None,
        };
        if let Some(policy) = policy {
            let outcome = self
                .put_unique(job, &policy, body, job.status.created_at)
                .await?;
            match outcome.value() {
                PushOutcome::Created => self.after_push(job).await,
                PushOutcome::CreatedAs(stored) => self.after_push(stored).await,
                PushOutcome::Existing(_) => {}
            }
            return Ok(outcome);
        }
        Ok(Moved::done(self.put_plain(job, body).await?))
    }

    /// Stores a new job without a uniqueness policy (`body` as for
    /// [`Engine::put_unique`]); nothing is owed.
    async fn put_plain(&self, job: &Job, body: Option<Vec<u8>>) -> Result<PushOutcome, StoreError> {
        let (job_item, payload) = self.new_job_item(job, body).await?;
        let taken = self.table.put_unless_taken(job_item).await;
        // The write took when it succeeded, or when the SDK retried it after its answer was
        // lost and the item it finds is this very job, recognised by its creation instant
        // (immutable).
        let written = match &taken {
            Ok(None) => true,
            Ok(Some(existing)) => existing.get("created_at") == Some(&ts(&job.status.created_at)),
            Err(_) => false,
        };
        self.settle_offload(payload.as_ref(), written).await;
        taken?;
        if !written {
            return Err(StoreError::Duplicate);
        }
        self.after_push(job).await;
        Ok(PushOutcome::Created)
    }

    /// Reads a job with a strongly consistent read, its request whole
    /// ([`Engine::full_job`]): what GET answers.
    pub async fn get_full_job(&self, id: &JobId) -> Result<Option<Job>, StoreError> {
        match self.get_job(id).await? {
            Some(job) => self.full_job(job).await.map(Some),
            None => Ok(None),
        }
    }

    /// The timer of a stored job.
    pub(crate) async fn after_push(&self, job: &Job) {
        if let (JobState::Scheduled, Some(at)) = (job.status.state, job.spec.scheduled_at) {
            let target = crate::timer::TimerTarget::Job {
                job_id: job.id.to_string(),
            };
            self.arm_timer(vec![(target, at)]).await;
        }
    }

    /// Completes an active job. The answer shows the job whole ([`Engine::shown_job`]), as
    /// do CANCEL's and FAIL's.
    #[tracing::instrument(name = "ack", level = "error", skip_all, fields(job_id = %ack.id))]
    pub(crate) async fn ack_job_moved(
        &self,
        ack: &AckRequest,
        now: Timestamp,
    ) -> Result<Moved<Job>, StoreError> {
        let wid = write_id();
        let write = JobWrite::new(
            Transition::Ack,
            Place::Retained {
                ttl: self.expiry(&now),
            },
        )
        .stamp(Field::CompletedAt, &now)
        .write_id(&wid)
        .clear(Field::Error)
        .result(ack.result.as_ref());
        // Only the current attempt's holder completes it: what the ACK names of its
        // attempt is part of the condition, so a claim between any read and this write
        // cannot slip through.
        let fence = Fence {
            worker_id: ack.worker_id.as_deref(),
            attempt: ack.attempt,
        };
        // The condition held the job active; which lease it had is not read.
        let before = Before {
            state: JobState::Active,
            lease_us: None,
        };
        let (done, follow_ups) = self
            .transition(
                &ack.id,
                fence.guard(write).refusing_other_holders(),
                Some(before),
            )
            .await?
            .split();
        Ok(Moved::new(self.shown_job(done).await, follow_ups))
    }

    /// Records a failed attempt and applies the job's retry policy: `retryable` with a
    /// next attempt time, or `discarded` (into the dead letter queue when the policy says
    /// so). With `requeue`, the worker releases the job: it is available again at once.
    /// Only the holder of the current attempt, as `fence` names it, can fail it: the
    /// write is conditional on the job being active at the attempt read and on the fence,
    /// not on the version, which the holder's own heartbeats move.
    #[tracing::instrument(name = "fail", level = "error", skip_all, fields(job_id = %fail.id))]
    pub(crate) async fn fail_job_moved(
        &self,
        fail: FailRequest<'_>,
        now: Timestamp,
    ) -> Result<Moved<FailOutcome>, StoreError> {
        let FailRequest {
            id,
            failure,
            mut fence,
            requeue,
        } = fail;
        let mut tries = 0;
        loop {
            tries += 1;
            let job = self
                .get_job(id)
                .await?
                .ok_or_else(|| StoreError::NotFound(Missing::Job(id.to_string())))?;
            if job.status.state != JobState::Active {
                return Err(StoreError::Conflict {
                    current: Some(job.status.state),
                });
            }
            if !fence.admits(&job) {
                return Err(StoreError::NotHolder {
                    attempt: job.status.attempt,
                });
            }
            // A FAIL that found attempt n fails attempt n or nothing, even when the
            // caller named no attempt and the job is reclaimed before a second try.
            fence.attempt = Some(job.status.attempt);
            match self.fail_read(&job, failure, fence, requeue, now).await {
                // The job is still active but not at the attempt or holder read: it was
                // reclaimed between the read and the write. Read again; the fence decides
                // on what is there now.
                Err(StoreError::Conflict {
                    current: Some(JobState::Active),
                }) if tries < 3 => continue,
                Err(StoreError::Conflict {
                    current: Some(JobState::Active),
                }) => {
                    return Err(StoreError::NotHolder {
                        attempt: job.status.attempt,
                    })
                }
                Ok(failed) => {
                    let (job, follow_ups) = failed.split();
                    let job = self.shown_job(job).await;
                    return Ok(Moved::new(FailOutcome { job }, follow_ups));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// FAIL of `job` as read (active, and held by the caller as `fence` names it).
    async fn fail_read(
        &self,
        job: &Job,
        failure: &Failure,
        fence: Fence<'_>,
        requeue: bool,
        now: Timestamp,
    ) -> Result<Moved<Job>, StoreError> {
        let outcome = if requeue {
            FailureOutcome::Requeue
        } else {
            match job.spec.retry.decide(
                job.status.attempt,
                &failure.error_type,
                failure.retryable,
                &mut rand::rng(),
            ) {
                FailDecision::Retry(delay) => FailureOutcome::Retry(failure.retry_delay(delay)),
                FailDecision::GiveUp(exhaustion) => FailureOutcome::GiveUp(exhaustion),
            }
        };
        self.record_failure(job, failure, outcome, FailureGuard::Holder(fence), now)
            .await
    }
}
