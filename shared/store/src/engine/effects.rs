//! What a transition sets off besides its own write, read off the job before and after
//! it and applied in one place.
//!
//! Events, queue counters and metrics come from the change stream (`stream/`); what is
//! left here must follow the write at once, from the request that made it: a concurrency
//! slot given back (so the key's next job can start), the timer armed for a job that now
//! waits for a time, and a finished job's workflow bookkeeping and queued cron successor.
//! All are best effort, each repaired later if the request dies: a slot frees at its
//! lease end, the sweep promotes what a timer missed and settles workflows.

use std::sync::{Arc, Mutex};

use ojs_core::time::Timestamp;

use ojs_core::{Job, JobState};

use crate::engine::Engine;
use crate::timer::TimerTarget;

/// How a job ended, for its workflow's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// Completed.
    Completed,
    /// Discarded.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// A job a transition finished, whose workflow and queued cron occurrence the layer above
/// still has to move on.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub job: Job,
    pub outcome: StepOutcome,
}

/// The jobs finished through one store scope ([`Engine::with_follow_ups`]), in the order
/// they finished. The engine notes them here instead of calling up into the features;
/// the scope's owner takes them and follows them up in a loop.
#[derive(Debug, Clone, Default)]
pub(crate) struct FollowUps(Arc<Mutex<Vec<Finished>>>);

impl FollowUps {
    fn note(&self, finished: Finished) {
        if let Ok(mut list) = self.0.lock() {
            list.push(finished);
        }
    }

    /// What was noted since the last take.
    pub(crate) fn take(&self) -> Vec<Finished> {
        self.0
            .lock()
            .map(|mut list| std::mem::take(&mut *list))
            .unwrap_or_default()
    }
}

/// The job as a transition found it, as far as the effects need it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Before {
    pub state: JobState,
    /// The lease of the attempt that was active, in epoch microseconds.
    pub lease_us: Option<i64>,
}

impl Before {
    pub(crate) fn of(job: &Job) -> Self {
        Self {
            state: job.status.state,
            lease_us: job.status.lease_until.map(|l| l.timestamp_micros()),
        }
    }
}

/// The effects one transition implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Effects {
    /// Give back the job's concurrency slot; `Some(lease)` only while the slot is still
    /// that attempt's (the job may be claimed again at once), `None` whatever holds it.
    pub release_slot: Option<Option<i64>>,
    /// Arm the timer: the job waits until then.
    pub wake_at: Option<Timestamp>,
    /// The job finished: its workflow and a cron occurrence queued behind it move on.
    pub finished: Option<StepOutcome>,
}

impl Effects {
    /// The effects of the write that took a job from `before` (when read; a blind write
    /// such as CANCEL knows only the result) to `after`.
    pub(crate) fn of(before: Option<Before>, after: &Job) -> Self {
        let to = after.status.state;
        let from = before.map(|b| b.state);
        let moved = from != Some(to);
        // Out of `active` (or cancelled blind: it may have been active) the attempt's
        // slot goes back.
        let release_slot = (to != JobState::Active
            && (from == Some(JobState::Active) || from.is_none() && to == JobState::Cancelled))
            .then(|| before.and_then(|b| b.lease_us));
        let wake_at = match to {
            JobState::Retryable if moved => after.status.next_attempt_at,
            JobState::Scheduled if moved => after.spec.scheduled_at,
            _ => None,
        };
        let finished = match to {
            _ if !moved || from.is_some_and(JobState::is_terminal) => None,
            JobState::Completed => Some(StepOutcome::Completed),
            JobState::Cancelled => Some(StepOutcome::Cancelled),
            JobState::Discarded => Some(StepOutcome::Failed),
            _ => None,
        };
        Self {
            release_slot,
            wake_at,
            finished,
        }
    }
}

impl Engine {
    /// Applies what the transition of `after` set off (see [`Effects`]); called by the
    /// writer ([`Engine::transition`]) only, after every transition it makes.
    pub(super) async fn apply_effects(&self, after: &Job, effects: Effects) {
        if let Some(lease) = effects.release_slot {
            self.release_slot(after, lease).await;
        }
        if let Some(at) = effects.wake_at {
            let target = TimerTarget::Job {
                job_id: after.id.to_string(),
            };
            self.arm_timer(vec![(target, at)]).await;
        }
        if let Some(outcome) = effects.finished {
            let finished = Finished {
                job: after.clone(),
                outcome,
            };
            match self.follow_ups() {
                Some(scope) => scope.note(finished),
                // Every entry point that can finish a job opens a scope (the layer test
                // `finishing_entry_points_follow_up` lists them); were one missed, the
                // sweep's workflow check would still move the workflow on.
                None => tracing::error!(
                    job_id = %after.id,
                    "a job finished outside a follow-up scope; its workflow waits for the sweep"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ojs_core::time;

    use super::*;

    fn job(state: JobState) -> Job {
        let new = ojs_core::job::NewJob::from_json(serde_json::json!({"type": "t", "args": []}))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut job = Job::enqueue(new, time::now());
        job.status.state = state;
        job
    }

    fn before(state: JobState, lease_us: Option<i64>) -> Option<Before> {
        Some(Before { state, lease_us })
    }

    #[test]
    fn an_ack_gives_back_the_slot_and_finishes_the_step() {
        let e = Effects::of(before(JobState::Active, Some(7)), &job(JobState::Completed));
        assert_eq!(e.release_slot, Some(Some(7)));
        assert_eq!(e.finished, Some(StepOutcome::Completed));
        assert_eq!(e.wake_at, None);
    }

    #[test]
    fn a_retry_gives_back_the_slot_and_wakes_at_the_next_attempt() {
        let mut after = job(JobState::Retryable);
        let next = time::after_ms(time::now(), 5_000);
        after.status.next_attempt_at = Some(next);
        let e = Effects::of(before(JobState::Active, Some(9)), &after);
        assert_eq!(e.release_slot, Some(Some(9)));
        assert_eq!(e.wake_at, Some(next));
        assert_eq!(e.finished, None);
    }

    #[test]
    fn a_blind_cancel_gives_back_whatever_slot_and_finishes_the_step() {
        let e = Effects::of(None, &job(JobState::Cancelled));
        assert_eq!(e.release_slot, Some(None));
        assert_eq!(e.finished, Some(StepOutcome::Cancelled));
    }

    #[test]
    fn a_job_that_never_ran_has_no_slot_to_give_back() {
        for (from, to) in [
            (JobState::Available, JobState::Discarded),
            (JobState::Scheduled, JobState::Discarded),
            (JobState::Available, JobState::Scheduled),
            (JobState::Scheduled, JobState::Available),
        ] {
            let e = Effects::of(before(from, None), &job(to));
            assert_eq!(e.release_slot, None, "{from} -> {to}");
        }
        let e = Effects::of(before(JobState::Available, None), &job(JobState::Discarded));
        assert_eq!(e.finished, Some(StepOutcome::Failed));
    }

    #[test]
    fn a_deferred_job_wakes_at_its_new_time() {
        let mut after = job(JobState::Scheduled);
        let at = time::after_ms(time::now(), 60_000);
        after.spec.scheduled_at = Some(at);
        let e = Effects::of(before(JobState::Available, None), &after);
        assert_eq!(e.wake_at, Some(at));
        // A lease extension stays active: nothing follows.
        let e = Effects::of(before(JobState::Active, Some(1)), &job(JobState::Active));
        assert_eq!(
            e,
            Effects {
                release_slot: None,
                wake_at: None,
                finished: None
            }
        );
    }

    #[test]
    fn only_a_blind_cancel_or_leaving_active_gives_a_slot_back() {
        // A cancel that read the job knows it never ran.
        let e = Effects::of(before(JobState::Available, None), &job(JobState::Cancelled));
        assert_eq!(e.release_slot, None);
        // A blind write that did not cancel releases nothing.
        let e = Effects::of(None, &job(JobState::Completed));
        assert_eq!(e.release_slot, None);
    }

    #[test]
    fn a_write_that_keeps_the_state_wakes_and_finishes_nothing() {
        let mut retrying = job(JobState::Retryable);
        retrying.status.next_attempt_at = Some(time::now());
        let e = Effects::of(before(JobState::Retryable, None), &retrying);
        assert_eq!(e.wake_at, None);
        let mut scheduled = job(JobState::Scheduled);
        scheduled.spec.scheduled_at = Some(time::now());
        let e = Effects::of(before(JobState::Scheduled, None), &scheduled);
        assert_eq!(e.wake_at, None);
        let e = Effects::of(before(JobState::Completed, None), &job(JobState::Completed));
        assert_eq!(e.finished, None);
        // Finished once: a job that was already finished does not finish again.
        let e = Effects::of(before(JobState::Cancelled, None), &job(JobState::Discarded));
        assert_eq!(e.finished, None);
    }

    #[test]
    fn a_job_revived_from_a_terminal_state_finishes_nothing() {
        let e = Effects::of(before(JobState::Discarded, None), &job(JobState::Available));
        assert_eq!(e.finished, None);
        assert_eq!(e.release_slot, None);
    }
}
