//! Failures and overdue jobs: the writes that move an active job on after FAIL, after its
//! lease expires, or after its execution timeout, and the promotion of a due job seen by
//! INFO. Every write is conditional on the version that was read.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use ojs_core::failure::Failure;
use ojs_core::retry::{FailDecision, OnExhaustion};
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobState, Transition};
use serde_json::json;

use crate::effects::{Before, Moved, OwingError};
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item;
use crate::jobs::Fence;
use crate::keys;
use crate::transition::{Field, JobWrite, Place};

/// What a failed attempt leads to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FailureOutcome {
    /// `retryable`, available again after the delay.
    Retry(Duration),
    /// `available` at once (the worker released the job, or its lease expired with
    /// attempts left).
    Requeue,
    /// `discarded`, into the dead letter queue for [`OnExhaustion::DeadLetter`].
    GiveUp(OnExhaustion),
}

/// What a failure's write holds to besides the job being `active` at the attempt read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FailureGuard<'a> {
    /// The version read: the server settles an attempt (its lease or deadline passed, its
    /// payload unreadable) only if nothing moved the job since, so a heartbeat that
    /// extended the lease in between wins.
    Version,
    /// The caller's fence: a worker's FAIL, which its own heartbeats and progress reports
    /// must not turn away by moving the version between its read and its write. The
    /// attempt and state conditions keep a reclaim, a settlement or a cancel out.
    Holder(Fence<'a>),
}

/// Errors kept in a job's `errors` history (the latest ones).
pub(crate) const MAX_KEPT_ERRORS: usize = 20;
/// Largest recorded error; a bigger one keeps its type, message and attempt only.
const MAX_ERROR_BYTES: usize = 6 * 1024;

/// The error as recorded: a worker's oversized report (huge `details`, say) is cut down
/// to what identifies it, so that errors alone cannot outgrow the job's item.
fn bounded_error(error: serde_json::Value) -> serde_json::Value {
    if ojs_core::validate::json_size(&error) <= MAX_ERROR_BYTES {
        return error;
    }
    let mut kept = serde_json::Map::new();
    for (key, max) in [("type", 256), ("code", 256), ("message", 4096)] {
        if let Some(text) = error.get(key).and_then(serde_json::Value::as_str) {
            let mut cut = text.len().min(max);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            kept.insert(key.into(), text[..cut].into());
        }
    }
    for key in ["retryable", "attempt", "occurred_at"] {
        if let Some(v) = error.get(key) {
            kept.insert(key.into(), v.clone());
        }
    }
    kept.insert(
        "details".into(),
        json!({"truncated": format!("the reported error exceeded {MAX_ERROR_BYTES} bytes")}),
    );
    serde_json::Value::Object(kept)
}

/// The error a failure records for `job`'s attempt, marked with the write's id `wid`.
/// The stored entry carries the write id too (read back without it): a retried write
/// finds its own entry in the history even after later transitions have replaced
/// `write_id` (the retry may come seconds later, after the job was retried and
/// completed).
fn recorded_error(
    job: &Job,
    failure: &Failure,
    wid: &AttributeValue,
    now: Timestamp,
) -> serde_json::Value {
    let mut error = bounded_error(failure.to_job_error(job.status.attempt, &now));
    if let (serde_json::Value::Object(e), Ok(w)) = (&mut error, wid.as_s()) {
        e.insert(item::WRITE_MARK.into(), w.clone().into());
    }
    error
}

impl Engine {
    /// Writes the outcome of a failed attempt of `job` (which must still be `active` at
    /// the version and attempt read) and emits the matching events. The job leaves
    /// `active`, so it leaves its holder too: `worker_id` is removed, and the next claim
    /// sets its own (or none).
    pub(crate) async fn record_failure(
        &self,
        job: &Job,
        failure: &Failure,
        outcome: FailureOutcome,
        guard: FailureGuard<'_>,
        now: Timestamp,
    ) -> Result<Moved<Job>, StoreError> {
        let wid = crate::job_item::write_id();
        let error = recorded_error(job, failure, &wid, now);
        let write = self.failure_write(job, &error, &wid, outcome, guard, now);
        let before = Some(Before::of(job));
        // Our own landed write, retried by the SDK, is known by its write id (review #19e:
        // by the error it appended, two settlers of one attempt in the same microsecond
        // would both have taken the write as theirs).
        match outcome {
            // The dead letter entry is written with the job, in one transaction, so the
            // listing (a strongly consistent Query) shows the job once FAIL has answered.
            FailureOutcome::GiveUp(OnExhaustion::DeadLetter) => {
                let sk = keys::dead_sk(&job.spec.queue, &now, &job.id);
                let entry = self.dead_entry_put(&sk, job)?;
                self.transition_with(&job.id, write, entry, before).await
            }
            _ => self.transition(&job.id, write, before).await,
        }
    }

    /// The write of a failed attempt's `outcome`: where the job goes, with `error`
    /// recorded and the history kept, under `guard`.
    fn failure_write(
        &self,
        job: &Job,
        error: &serde_json::Value,
        wid: &AttributeValue,
        outcome: FailureOutcome,
        guard: FailureGuard<'_>,
        now: Timestamp,
    ) -> JobWrite {
        let (transition, place) = self.failure_place(job, outcome, now);
        let write = JobWrite::new(transition, place)
            .at_attempt(job.status.attempt)
            .error(error)
            .error_history(&job.status.errors, error)
            .write_id(wid);
        let write = match guard {
            FailureGuard::Version => write.version(job.status.version),
            FailureGuard::Holder(fence) => fence.guard(write),
        };
        match outcome {
            FailureOutcome::Retry(delay) => write.retry_at(&time::after(now, delay), delay),
            FailureOutcome::Requeue => write.stamp(Field::EnqueuedAt, &now).clear(Field::StartedAt),
            FailureOutcome::GiveUp(_) => write
                .stamp(Field::CompletedAt, &now)
                .stamp(Field::DiscardedAt, &now),
        }
    }

    /// The transition a failed attempt's `outcome` makes, and where it leaves the job.
    fn failure_place(
        &self,
        job: &Job,
        outcome: FailureOutcome,
        now: Timestamp,
    ) -> (Transition, Place) {
        match outcome {
            FailureOutcome::Retry(delay) => {
                let next = time::after(now, delay);
                (
                    Transition::FailRetry,
                    Place::Due {
                        pk: self.due_pk(&job.spec.queue, &job.id),
                        sk: keys::job_due_sk(job, &next),
                    },
                )
            }
            FailureOutcome::Requeue => (Transition::Reclaim, self.ready_place(job, &now)),
            // Dead-lettered jobs stay until an operator retries or deletes them; plain
            // discards expire with the retention period.
            FailureOutcome::GiveUp(OnExhaustion::DeadLetter) => (
                Transition::FailDiscard,
                Place::DeadLetter {
                    sk: keys::dead_sk(&job.spec.queue, &now, &job.id),
                },
            ),
            FailureOutcome::GiveUp(OnExhaustion::Discard) => (
                Transition::FailDiscard,
                Place::Retained {
                    ttl: self.expiry(&now),
                },
            ),
        }
    }

    /// Moves `job` on if it is overdue at `now`: an active job past its execution
    /// deadline fails with a `timeout` error under its retry policy; one past its lease is
    /// re-queued while attempts remain and given up otherwise; a scheduled or retryable
    /// job whose time has come becomes available. `None` when nothing was due or another
    /// writer moved the job first; owes the follow-up of a job it finished.
    #[tracing::instrument(name = "settle", level = "error", skip_all, fields(job_id = %job.id, queue = %job.spec.queue))]
    pub(crate) async fn settle_moved(
        &self,
        job: &Job,
        now: Timestamp,
    ) -> Result<Moved<Option<Job>>, StoreError> {
        let st = &job.status;
        let result = match st.state {
            JobState::Active if st.deadline.is_some_and(|d| d <= now) => {
                let failure = Failure {
                    error_type: "timeout".into(),
                    message: format!(
                        "execution exceeded the job's timeout of {} ms",
                        job.spec.timeout_ms.unwrap_or(0)
                    ),
                    retryable: true,
                    reported: serde_json::Map::new(),
                    retry_after: None,
                };
                let outcome =
                    match job
                        .spec
                        .retry
                        .decide(st.attempt, "timeout", true, &mut rand::rng())
                    {
                        FailDecision::Retry(delay) => FailureOutcome::Retry(delay),
                        FailDecision::GiveUp(e) => FailureOutcome::GiveUp(e),
                    };
                self.record_failure(job, &failure, outcome, FailureGuard::Version, now)
                    .await
            }
            JobState::Active if st.lease_until.is_some_and(|l| l <= now) => {
                let failure = Failure {
                    error_type: "visibility_timeout".into(),
                    message: "the worker's lease expired before ACK or FAIL".into(),
                    retryable: true,
                    reported: serde_json::Map::new(),
                    retry_after: None,
                };
                let outcome = if st.attempt >= job.spec.retry.max_attempts {
                    FailureOutcome::GiveUp(job.spec.retry.on_exhaustion)
                } else {
                    FailureOutcome::Requeue
                };
                self.record_failure(job, &failure, outcome, FailureGuard::Version, now)
                    .await
            }
            JobState::Scheduled | JobState::Available | JobState::Retryable | JobState::Pending
                if job.spec.expires_at.is_some_and(|e| e <= now) =>
            {
                self.expire_job(job, now).await
            }
            JobState::Scheduled | JobState::Retryable if due_at(job).is_some_and(|t| t <= now) => {
                self.promote_job(job, now).await.map(Moved::done)
            }
            _ => return Ok(Moved::done(None)),
        };
        match result {
            Ok(moved) => Ok(moved.map(Some)),
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(Moved::done(None)),
            Err(e) => Err(e),
        }
    }

    /// A due scheduled/retryable job becomes available (condition: the version read).
    async fn promote_job(&self, job: &Job, now: Timestamp) -> Result<Job, StoreError> {
        let write = JobWrite::new(Transition::Promote, self.ready_place(job, &now))
            .from(job.status.state)
            .version(job.status.version)
            .stamp(Field::EnqueuedAt, &now)
            .clear(Field::NextAttemptAt);
        Ok(self.transition_read(job, write).await?.unfinished())
    }

    /// Where a job that becomes available at `now` is listed: at the back of its
    /// priority in the ready index, and at its expiry in the due index if it has one.
    pub(crate) fn ready_place(&self, job: &Job, now: &Timestamp) -> Place {
        Place::Ready {
            pk: self.ready_pk(&keys::Lane::of(job), &job.id),
            sk: keys::ready_sk(job.spec.priority, now, &job.id),
            expiry: self.expiry_entry(job),
        }
    }

    /// The due entry of a job with an `expires_at`, listed while it is available so the
    /// sweep discards it even if nobody fetches its queue.
    pub(crate) fn expiry_entry(&self, job: &Job) -> Option<(String, String)> {
        job.spec.expires_at.map(|expires| {
            (
                self.due_pk(&job.spec.queue, &job.id),
                keys::job_due_sk(job, &expires),
            )
        })
    }

    /// Lists an available job that came back by a write that could not know its expiry
    /// (the sweep's promotion, which reads only the due entry) at that expiry: one extra
    /// write, only for jobs that have one.
    pub(crate) async fn watch_expiry(&self, job: &Job) -> Result<(), StoreError> {
        if job.status.state != JobState::Available {
            return Ok(());
        }
        let Some(expiry) = self.expiry_entry(job) else {
            return Ok(());
        };
        let out = crate::transition::list_expiry(expiry, job.status.version)
            .apply(self.update(&job.id))
            .send()
            .await;
        match self.finish_update(out) {
            Ok(_) | Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Discards a job that has not started and whose `expires_at` has passed: it is never
    /// delivered (`completed_at` stays unset: it never ran).
    pub(crate) async fn expire_job(
        &self,
        job: &Job,
        now: Timestamp,
    ) -> Result<Moved<Job>, StoreError> {
        let write = JobWrite::new(
            Transition::Expire,
            Place::Retained {
                ttl: self.expiry(&now),
            },
        )
        .from(job.status.state)
        .version(job.status.version)
        .stamp(Field::DiscardedAt, &now)
        .error(&expired_error(&now));
        self.transition_read(job, write).await
    }

    /// Reads a job and settles it first if it is overdue, so INFO never shows a job
    /// still active after its lease or deadline, or waiting after its time; the job's
    /// request whole ([`Engine::full_job`]). A payload that is missing or damaged does not
    /// hide the job: it is shown incomplete and says so ([`Engine::shown_job`]); a payload
    /// store failing is an error (the request may be tried again). Owes the follow-up of
    /// a job its settling finished.
    pub(crate) async fn get_job_settled_moved(
        &self,
        id: &ojs_core::JobId,
        now: Timestamp,
    ) -> Result<Moved<Option<Job>>, OwingError> {
        let Some(job) = self.get_job(id).await? else {
            return Ok(Moved::done(None));
        };
        let (settled, mut follow_ups) = self.settle_moved(&job, now).await?.split();
        let job = match settled {
            Some(settled) => settled,
            // Lost a race with another writer: read what it wrote.
            None if is_overdue(&job, now) => match follow_ups.carry(self.get_job(id).await)? {
                Some(job) => job,
                None => return Ok(Moved::new(None, follow_ups)),
            },
            None => job,
        };
        // The job's payload unread (its bucket unreachable) fails the read, not what
        // the settling owes.
        let shown = match self.try_full_job(job).await {
            Ok(job) => job,
            Err((job, e @ StoreError::Corrupt(_))) => crate::payloads::marked_unreadable(job, &e),
            Err((_, e)) => return follow_ups.carry(Err(e)),
        };
        Ok(Moved::new(Some(shown), follow_ups))
    }
}

/// When a waiting job becomes available.
fn due_at(job: &Job) -> Option<Timestamp> {
    match job.status.state {
        JobState::Scheduled => job.spec.scheduled_at,
        JobState::Retryable => job.status.next_attempt_at,
        _ => None,
    }
}

/// Whether [`crate::Lifecycle::settle`] would move the job at `now`.
pub(crate) fn is_overdue(job: &Job, now: Timestamp) -> bool {
    let st = &job.status;
    match st.state {
        JobState::Active => {
            st.deadline.is_some_and(|d| d <= now) || st.lease_until.is_some_and(|l| l <= now)
        }
        JobState::Scheduled | JobState::Available | JobState::Retryable | JobState::Pending
            if job.spec.expires_at.is_some_and(|e| e <= now) =>
        {
            true
        }
        JobState::Scheduled | JobState::Retryable => due_at(job).is_some_and(|t| t <= now),
        _ => false,
    }
}

/// The error recorded on a job discarded because its `expires_at` passed.
pub(crate) fn expired_error(now: &Timestamp) -> serde_json::Value {
    json!({
        "type": "expired",
        "code": "expired",
        "message": "the job's expires_at passed before it started",
        "occurred_at": time::format(now),
    })
}
