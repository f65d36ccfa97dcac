//! What a write of a stored job means to the outside world: the lifecycle events it
//! implies, read off the job before and after the write. The change stream consumer
//! derives every event this way, so no transition has to remember to emit its own.

use crate::event::{Event, EventKind};
use crate::state::JobState;
use crate::time::Timestamp;
use crate::Job;

/// Who caused an event, as the CloudEvents `source` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A producer or an operator through the API (PUSH, CANCEL, dead letter retry).
    Api,
    /// A worker (FETCH, ACK, FAIL) or a limit applied at its claim.
    Workers,
    /// The scheduler: promotions, expired leases, expiry.
    Scheduler,
}

impl Source {
    /// The CloudEvents `source` URI.
    pub fn as_uri(self) -> &'static str {
        match self {
            Self::Api => "ojs://ojs-serverless/api",
            Self::Workers => "ojs://ojs-serverless/workers",
            Self::Scheduler => "ojs://ojs-serverless/scheduler",
        }
    }
}

/// The events, in order, of a job written as `new` over `old` (`None`: it was created),
/// each with its source. A write that leaves the state as it was (a heartbeat, a
/// setting) implies none, except a new attempt of an active job.
pub fn events_of(old: Option<&Job>, new: &Job) -> Vec<(EventKind, Source)> {
    use EventKind as E;
    use JobState as S;
    let to = new.status.state;
    let Some(old) = old else {
        return match to {
            S::Available => vec![(E::Enqueued, Source::Api)],
            S::Scheduled => vec![(E::Scheduled, Source::Api)],
            _ => Vec::new(),
        };
    };
    let from = old.status.state;
    // A worker's attempt ended in failure: FAIL appended its error.
    let failed = from == S::Active && new.status.errors.len() > old.status.errors.len();
    match (from, to) {
        (S::Active, S::Active) if new.status.attempt > old.status.attempt => {
            vec![(E::Started, Source::Workers)]
        }
        _ if from == to => Vec::new(),
        (_, S::Active) => vec![(E::Started, Source::Workers)],
        (_, S::Completed) => vec![(E::Completed, Source::Workers)],
        (_, S::Cancelled) => vec![(E::Cancelled, Source::Api)],
        (_, S::Retryable) => vec![(E::Failed, Source::Workers), (E::Retrying, Source::Workers)],
        (_, S::Available) if failed => {
            vec![(E::Failed, Source::Workers), (E::Enqueued, Source::Workers)]
        }
        (S::Scheduled | S::Retryable | S::Active, S::Available) => {
            vec![(E::Enqueued, Source::Scheduler)]
        }
        (_, S::Available) => vec![(E::Enqueued, Source::Api)],
        (_, S::Discarded) if failed => {
            vec![
                (E::Failed, Source::Workers),
                (E::Discarded, Source::Workers),
            ]
        }
        // A rate limit's `on_limit: drop` at a claim.
        (S::Available, S::Discarded) => vec![(E::Discarded, Source::Workers)],
        (_, S::Discarded) => vec![(E::Discarded, Source::Scheduler)],
        // A rate limit's `on_limit: reschedule` at a claim.
        (_, S::Scheduled) => vec![(E::Scheduled, Source::Workers)],
        (_, S::Pending) => Vec::new(),
    }
}

/// When the write that made `job` (from `old`) happen took place, as its own timestamps
/// say, for an event of `kind`; `fallback` when the job does not record it (a rate
/// limit's reschedule). Recorded times make an event's time, and so its id, the same
/// however often and wherever its change is rendered.
pub fn event_time(kind: EventKind, old: Option<&Job>, job: &Job, fallback: Timestamp) -> Timestamp {
    let s = &job.status;
    let recorded = match kind {
        EventKind::Enqueued => s.enqueued_at,
        EventKind::Scheduled => old.is_none().then_some(s.created_at),
        EventKind::Started => s.started_at,
        EventKind::Completed => s.completed_at,
        // A failed attempt records when it failed by where it sent the job.
        EventKind::Failed | EventKind::Retrying => match s.state {
            JobState::Retryable => {
                s.next_attempt_at
                    .zip(s.retry_delay_ms)
                    .and_then(|(next, ms)| {
                        next.checked_sub_signed(chrono::Duration::try_milliseconds(
                            i64::try_from(ms).ok()?,
                        )?)
                    })
            }
            JobState::Discarded => s.discarded_at,
            JobState::Available => s.enqueued_at,
            _ => None,
        },
        EventKind::Discarded => s.discarded_at.or(s.completed_at),
        EventKind::Cancelled => s.cancelled_at,
    };
    recorded.unwrap_or(fallback)
}

/// The rendered events of a job written as `new` over `old`.
pub fn render_events(old: Option<&Job>, new: &Job, now: Timestamp) -> Vec<Event> {
    events_of(old, new)
        .into_iter()
        .map(|(kind, source)| {
            Event::for_job(kind, new, &event_time(kind, old, new, now), source.as_uri())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::NewJob;
    use crate::time;
    use serde_json::json;
    use EventKind as E;
    use JobState as S;

    fn job(state: JobState) -> Job {
        let new = NewJob::from_json(json!({"type": "t", "args": [], "options": {"queue": "q"}}));
        let mut job = Job::enqueue(new.unwrap_or_else(|e| panic!("{e}")), time::now());
        job.status.state = state;
        job
    }

    fn moved(from: JobState, to: JobState) -> (Job, Job) {
        let old = job(from);
        let mut new = old.clone();
        new.status.state = to;
        (old, new)
    }

    fn kinds(old: Option<&Job>, new: &Job) -> Vec<EventKind> {
        events_of(old, new).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn a_created_job_is_enqueued_scheduled_or_silent() {
        assert_eq!(kinds(None, &job(S::Available)), [E::Enqueued]);
        assert_eq!(kinds(None, &job(S::Scheduled)), [E::Scheduled]);
        assert_eq!(kinds(None, &job(S::Pending)), []);
        assert_eq!(events_of(None, &job(S::Available))[0].1, Source::Api);
    }

    #[test]
    fn each_move_implies_its_events() {
        let cases = [
            (S::Available, S::Active, vec![E::Started]),
            (S::Active, S::Completed, vec![E::Completed]),
            (S::Active, S::Retryable, vec![E::Failed, E::Retrying]),
            (S::Active, S::Available, vec![E::Enqueued]),
            (S::Scheduled, S::Available, vec![E::Enqueued]),
            (S::Retryable, S::Available, vec![E::Enqueued]),
            (S::Pending, S::Available, vec![E::Enqueued]),
            (S::Discarded, S::Available, vec![E::Enqueued]),
            (S::Available, S::Cancelled, vec![E::Cancelled]),
            (S::Active, S::Cancelled, vec![E::Cancelled]),
            (S::Scheduled, S::Discarded, vec![E::Discarded]),
            (S::Available, S::Discarded, vec![E::Discarded]),
            (S::Available, S::Scheduled, vec![E::Scheduled]),
            (S::Completed, S::Completed, vec![]),
            (S::Active, S::Active, vec![]),
        ];
        for (from, to, want) in cases {
            let (old, new) = moved(from, to);
            assert_eq!(kinds(Some(&old), &new), want, "{from} -> {to}");
        }
    }

    #[test]
    fn a_failed_attempt_is_told_apart_by_its_new_error() {
        for (to, last) in [(S::Available, E::Enqueued), (S::Discarded, E::Discarded)] {
            let (old, mut new) = moved(S::Active, to);
            new.status.errors.push(json!({"message": "boom"}));
            assert_eq!(kinds(Some(&old), &new), [E::Failed, last], "{to}");
            assert!(events_of(Some(&old), &new)
                .iter()
                .all(|(_, s)| *s == Source::Workers));
        }
        // Without a new error the move is a lease that ran out, or an expiry.
        for (to, event) in [(S::Available, E::Enqueued), (S::Discarded, E::Discarded)] {
            let (old, new) = moved(S::Active, to);
            let want = [(event, Source::Scheduler)];
            assert_eq!(events_of(Some(&old), &new), want, "{to}");
        }
    }

    #[test]
    fn each_source_names_its_part_of_the_service() {
        assert_eq!(Source::Api.as_uri(), "ojs://ojs-serverless/api");
        assert_eq!(Source::Workers.as_uri(), "ojs://ojs-serverless/workers");
        assert_eq!(Source::Scheduler.as_uri(), "ojs://ojs-serverless/scheduler");
    }

    #[test]
    fn a_discard_is_told_apart_by_where_the_job_was() {
        // Dropped by a rate limit at a worker's claim, or given up on by the scheduler.
        for (from, source) in [
            (S::Available, Source::Workers),
            (S::Retryable, Source::Scheduler),
        ] {
            let (old, new) = moved(from, S::Discarded);
            assert_eq!(
                events_of(Some(&old), &new),
                [(E::Discarded, source)],
                "{from}"
            );
        }
    }

    #[test]
    fn a_new_attempt_of_an_active_job_starts_again() {
        let (old, mut new) = moved(S::Active, S::Active);
        new.status.attempt = old.status.attempt + 1;
        assert_eq!(kinds(Some(&old), &new), [E::Started]);
    }

    #[test]
    fn events_take_the_time_the_job_recorded() {
        let (old, mut new) = moved(S::Active, S::Completed);
        let started = time::now();
        let done = time::after(started, std::time::Duration::from_millis(1500));
        new.status.started_at = Some(started);
        new.status.completed_at = Some(done);
        let later = time::after(done, std::time::Duration::from_secs(5));
        let events = render_events(Some(&old), &new, later);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].body["time"], time::format(&done));
        assert_eq!(events[0].body["data"]["duration_ms"], 1500);
        assert_eq!(events[0].body["source"], Source::Workers.as_uri());
        assert_eq!(event_time(E::Failed, Some(&old), &new, later), later);
    }

    #[test]
    fn a_failed_attempt_takes_the_time_it_failed_wherever_it_went() {
        let failed_at = time::now();
        let later = time::after(failed_at, std::time::Duration::from_secs(5));
        let (old, mut retrying) = moved(S::Active, S::Retryable);
        retrying.status.retry_delay_ms = Some(2_000);
        retrying.status.next_attempt_at = Some(time::after(
            failed_at,
            std::time::Duration::from_millis(2_000),
        ));
        let (_, mut discarded) = moved(S::Active, S::Discarded);
        discarded.status.discarded_at = Some(failed_at);
        let (_, mut requeued) = moved(S::Active, S::Available);
        requeued.status.enqueued_at = Some(failed_at);
        for job in [&retrying, &discarded, &requeued] {
            for kind in [E::Failed, E::Retrying] {
                assert_eq!(
                    event_time(kind, Some(&old), job, later),
                    failed_at,
                    "{kind:?}"
                );
            }
        }
        // A job pushed for later was scheduled when it was created; a reschedule by a
        // rate limit records no time.
        let created = job(S::Scheduled);
        assert_eq!(
            event_time(E::Scheduled, None, &created, later),
            created.status.created_at
        );
        assert_eq!(event_time(E::Scheduled, Some(&old), &created, later), later);
        // The same change rendered twice gives the same events, ids included.
        let (old, mut new) = moved(S::Active, S::Retryable);
        new.status.errors.push(json!({"message": "boom"}));
        new.status.retry_delay_ms = Some(1_000);
        new.status.next_attempt_at = Some(later);
        let first = render_events(Some(&old), &new, time::now());
        let again = render_events(Some(&old), &new, later);
        assert_eq!(first.len(), 2);
        assert_eq!(first, again);
    }
}
