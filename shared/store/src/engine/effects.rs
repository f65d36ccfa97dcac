//! What a transition sets off besides its own write, read off the job before and after
//! it and applied in one place.
//!
//! Events, queue counters and metrics come from the change stream (`stream/`); what is
//! left here must follow the write at once, from the request that made it: a concurrency
//! slot given back (so the key's next job can start), the timer armed for a job that now
//! waits for a time, and a finished job's workflow bookkeeping and queued cron successor.
//! All are best effort, each repaired later if the request dies: a slot frees at its
//! lease end, the sweep promotes what a timer missed and settles workflows.

use ojs_core::time::Timestamp;

use ojs_core::{Job, JobState};

use crate::engine::Engine;
use crate::error::StoreError;
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

/// The jobs a call finished, in the order they finished, whose workflow and queued cron
/// occurrence still have to move on: a value handed up by return to
/// [`crate::Lifecycle`], whose loop runs them (the engine never calls up into the
/// features); dropping one is a compiler warning (`#[must_use]`), an error here.
#[must_use = "a finished job's workflow waits for the sweep unless its follow-ups are handed on"]
#[derive(Debug, Default)]
pub(crate) struct FollowUps(Vec<Finished>);

impl FollowUps {
    /// Nothing finished.
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// These and then `more`.
    pub(crate) fn and(mut self, more: FollowUps) -> Self {
        self.add(more);
        self
    }

    /// `more` owed after these.
    pub(crate) fn add(&mut self, more: FollowUps) {
        self.0.extend(more.0);
    }

    /// The finished jobs, for the loop that follows them up.
    pub(crate) fn into_finished(self) -> Vec<Finished> {
        self.0
    }

    /// `result`, its error owing what is owed so far (taken out of these): for a call
    /// that fails after it finished jobs.
    pub(crate) fn carry<T, E: Into<OwingError>>(
        &mut self,
        result: Result<T, E>,
    ) -> Result<T, OwingError> {
        result.map_err(|e| {
            let e = e.into();
            OwingError {
                error: e.error,
                owed: std::mem::take(self).and(e.owed),
            }
        })
    }
}

/// The error of a call that may fail after it finished jobs, owing their follow-ups: the
/// loop above runs them before it answers the error, as it does after a success. A plain
/// [`StoreError`] converts into one that owes nothing (`?` before anything finished);
/// there is no way back but [`OwingError::split`], so an owing error is not dropped
/// into a plain one unseen.
#[must_use = "a finished job's workflow waits for the sweep unless its follow-ups are handed on"]
#[derive(Debug)]
pub(crate) struct OwingError {
    error: StoreError,
    owed: FollowUps,
}

impl OwingError {
    /// The error and the follow-ups owed.
    pub(crate) fn split(self) -> (StoreError, FollowUps) {
        (self.error, self.owed)
    }
}

impl From<StoreError> for OwingError {
    fn from(error: StoreError) -> Self {
        Self {
            error,
            owed: FollowUps::none(),
        }
    }
}

/// What a call that may finish jobs answers: its value and the [`FollowUps`] it owes.
/// The value is reached only with them ([`Moved::split`]), so a caller hands them on or
/// drops them where a reader sees it.
#[must_use = "a finished job's workflow waits for the sweep unless its follow-ups are handed on"]
#[derive(Debug)]
pub(crate) struct Moved<T> {
    value: T,
    follow_ups: FollowUps,
}

impl<T> Moved<T> {
    /// `value`, owing `follow_ups`.
    pub(crate) fn new(value: T, follow_ups: FollowUps) -> Self {
        Self { value, follow_ups }
    }

    /// `value`, owing nothing.
    pub(crate) fn done(value: T) -> Self {
        Self::new(value, FollowUps::none())
    }

    /// The value, while the follow-ups stay owed.
    pub(crate) fn value(&self) -> &T {
        &self.value
    }

    /// The value and the follow-ups owed.
    pub(crate) fn split(self) -> (T, FollowUps) {
        (self.value, self.follow_ups)
    }

    /// The value, its follow-ups added to `owed` (a caller gathering them over several
    /// calls, to answer them with its own value).
    pub(crate) fn hand_to(self, owed: &mut FollowUps) -> T {
        owed.add(self.follow_ups);
        self.value
    }

    /// The value changed by `f`, owing the same.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Moved<U> {
        Moved::new(f(self.value), self.follow_ups)
    }

    /// The value of a transition that cannot finish a job (its target state is not
    /// terminal: a promotion, a give back, a deferral): nothing is owed. Were something
    /// owed after all, it is logged and left to the sweep's workflow check.
    pub(crate) fn unfinished(self) -> T {
        for f in self.follow_ups.0 {
            tracing::error!(job_id = %f.job.id, "a transition thought unfinishing finished a job; its workflow waits for the sweep");
        }
        self.value
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
    /// Applies what the transition of `after` set off (see [`Effects`]) and answers the
    /// follow-up it owes; called by the writer ([`Engine::transition`]) only, after every
    /// transition it makes.
    pub(super) async fn apply_effects(&self, after: &Job, effects: Effects) -> FollowUps {
        if let Some(lease) = effects.release_slot {
            self.release_slot(after, lease).await;
        }
        if let Some(at) = effects.wake_at {
            let target = TimerTarget::Job {
                job_id: after.id.to_string(),
            };
            self.arm_timer(vec![(target, at)]).await;
        }
        FollowUps(
            effects
                .finished
                .map(|outcome| Finished {
                    job: after.clone(),
                    outcome,
                })
                .into_iter()
                .collect(),
        )
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

    fn finished(state: JobState, outcome: StepOutcome) -> FollowUps {
        FollowUps(vec![Finished {
            job: job(state),
            outcome,
        }])
    }

    #[test]
    fn follow_ups_are_handed_on_with_the_value_in_the_order_they_finished() {
        let mut owed = FollowUps::none();
        let first = Moved::new(1, finished(JobState::Completed, StepOutcome::Completed));
        let second =
            Moved::new(2, finished(JobState::Cancelled, StepOutcome::Cancelled)).map(|v| v * 10);
        assert_eq!(first.hand_to(&mut owed) + second.hand_to(&mut owed), 21);
        let done = Moved::done("x");
        assert_eq!(*done.value(), "x");
        let (value, none) = done.split();
        assert_eq!(value, "x");
        let all = owed
            .and(none)
            .and(finished(JobState::Discarded, StepOutcome::Failed));
        let outcomes: Vec<StepOutcome> = all.into_finished().iter().map(|f| f.outcome).collect();
        assert_eq!(
            outcomes,
            [
                StepOutcome::Completed,
                StepOutcome::Cancelled,
                StepOutcome::Failed
            ]
        );
    }

    fn outcomes(owed: FollowUps) -> Vec<StepOutcome> {
        owed.into_finished().iter().map(|f| f.outcome).collect()
    }

    #[test]
    fn an_error_after_a_finish_carries_what_was_owed_and_what_it_owed_itself() {
        let mut owed = finished(JobState::Completed, StepOutcome::Completed);
        assert_eq!(owed.carry(Ok::<_, StoreError>(3)).ok(), Some(3));
        let inner = owed.carry(Err::<(), _>(StoreError::Duplicate));
        let (error, carried) = inner.err().map(OwingError::split).unzip();
        assert!(matches!(error, Some(StoreError::Duplicate)));
        // An owing error met later carries both, the earlier finished jobs first.
        let mut more = finished(JobState::Discarded, StepOutcome::Failed);
        let outer = more.carry(Err::<(), _>(OwingError {
            error: StoreError::Duplicate,
            owed: carried.unwrap_or_default(),
        }));
        let (_, all) = outer.err().map(OwingError::split).unzip();
        assert_eq!(
            outcomes(all.unwrap_or_default()),
            [StepOutcome::Failed, StepOutcome::Completed]
        );
        assert!(
            outcomes(owed).is_empty() && outcomes(more).is_empty(),
            "taken out"
        );
        let plain: OwingError = StoreError::Duplicate.into();
        assert!(outcomes(plain.split().1).is_empty());
    }

    #[test]
    fn an_unfinishing_value_answers_its_value_even_when_something_was_owed() {
        assert_eq!(Moved::done(7).unfinished(), 7);
        let owed = Moved::new(8, finished(JobState::Completed, StepOutcome::Completed));
        assert_eq!(owed.unfinished(), 8);
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
