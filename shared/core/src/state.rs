//! The eight-state job lifecycle and the one function that decides every transition.

use std::fmt;
use std::str::FromStr;

/// A job's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for its `scheduled_at` time.
    Scheduled,
    /// Ready to be fetched.
    Available,
    /// Staged, awaiting external activation.
    Pending,
    /// Claimed by a worker.
    Active,
    /// Finished successfully (terminal).
    Completed,
    /// Failed, waiting for its next attempt.
    Retryable,
    /// Stopped by CANCEL (terminal).
    Cancelled,
    /// Failed permanently (terminal).
    Discarded,
}

/// Every state, in lifecycle order.
pub const ALL_STATES: [JobState; 8] = [
    JobState::Scheduled,
    JobState::Available,
    JobState::Pending,
    JobState::Active,
    JobState::Completed,
    JobState::Retryable,
    JobState::Cancelled,
    JobState::Discarded,
];

impl JobState {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Available => "available",
            Self::Pending => "pending",
            Self::Active => "active",
            Self::Completed => "completed",
            Self::Retryable => "retryable",
            Self::Cancelled => "cancelled",
            Self::Discarded => "discarded",
        }
    }

    /// Whether no further transition may leave this state (manual dead-letter retry aside).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Cancelled | Self::Discarded)
    }

    /// The state reached from `self` by `transition`, or an error naming both.
    ///
    /// This is the single source of truth for the state machine of ojs-core section 6.3;
    /// the store turns the `from` states accepted here into DynamoDB conditions.
    pub fn apply(self, transition: Transition) -> Result<JobState, InvalidTransition> {
        use JobState::*;
        use Transition::*;
        let to = match (self, transition) {
            (Scheduled, Promote) | (Retryable, Promote) | (Pending, Activate) => Available,
            (Available, Claim) => Active,
            (Active, Ack) => Completed,
            (Active, FailRetry) => Retryable,
            (Active, FailDiscard) => Discarded,
            (Active, Reclaim) => Available,
            (Scheduled | Available | Pending | Active | Retryable, Cancel) => Cancelled,
            (Scheduled | Available | Pending | Retryable, Expire) => Discarded,
            (Available, Defer) => Scheduled,
            (Available, Drop) => Discarded,
            (Active, Extend) => Active,
            (Discarded, RetryDead) => Available,
            (Discarded | Cancelled, Revive) => Available,
            _ => {
                return Err(InvalidTransition {
                    from: self,
                    transition,
                })
            }
        };
        Ok(to)
    }

    /// The states from which `transition` is legal.
    pub fn sources(transition: Transition) -> Vec<JobState> {
        ALL_STATES
            .into_iter()
            .filter(|s| s.apply(transition).is_ok())
            .collect()
    }

    /// Which of the store's secondary entries a job in this state has: the ready index
    /// exactly while it can be claimed, the due index while something happens to it at a
    /// known time, a retention deadline (or a dead letter entry) once it is finished.
    pub fn indexing(self) -> Indexing {
        let (ready, due, finished) = match self {
            Self::Available => (true, Due::IfExpiring, false),
            Self::Scheduled | Self::Retryable | Self::Active => (false, Due::Always, false),
            Self::Pending => (false, Due::Never, false),
            Self::Completed | Self::Cancelled | Self::Discarded => (false, Due::Never, true),
        };
        Indexing {
            ready,
            due,
            finished,
        }
    }
}

/// The secondary entries of a job in one state ([`JobState::indexing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Indexing {
    /// In the ready index, where FETCH finds it.
    pub ready: bool,
    /// In the due index, where the sweep finds it at its time.
    pub due: Due,
    /// Kept until its retention ends, or in the dead letter queue until an operator acts.
    pub finished: bool,
}

/// When a job is in the due index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Always: its start time, next attempt, or lease and deadline.
    Always,
    /// Only when it has an `expires_at`, so the sweep discards it unfetched.
    IfExpiring,
    /// Never.
    Never,
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown state string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for JobState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_STATES
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// An event that moves a job between states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    /// A scheduled or retryable job's time has come.
    Promote,
    /// A pending job is activated.
    Activate,
    /// A worker claims the job (FETCH).
    Claim,
    /// The worker reports success (ACK).
    Ack,
    /// The worker reports failure and the policy retries.
    FailRetry,
    /// The worker reports failure and the policy gives up.
    FailDiscard,
    /// An active job's lease expired and it is re-queued.
    Reclaim,
    /// CANCEL.
    Cancel,
    /// The job passed `expires_at` before it started.
    Expire,
    /// An operator retries a dead-lettered job.
    RetryDead,
    /// A rate limit refused the job and its `on_limit` reschedules it.
    Defer,
    /// A rate limit refused the job and its `on_limit` drops it.
    Drop,
    /// The holder extends its lease (heartbeat).
    Extend,
    /// An operator retries a finished job that is not in the dead letter queue.
    Revive,
}

impl Transition {
    /// The one state this transition leads to, whatever legal state it starts from.
    pub fn target(self) -> JobState {
        use JobState::*;
        use Transition::*;
        match self {
            Promote | Activate | Reclaim | RetryDead | Revive => Available,
            Claim | Extend => Active,
            Ack => Completed,
            FailRetry => Retryable,
            FailDiscard | Expire | Drop => Discarded,
            Cancel => Cancelled,
            Defer => Scheduled,
        }
    }

    /// A lowercase name for messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Promote => "promote",
            Self::Activate => "activate",
            Self::Claim => "fetch",
            Self::Ack => "ack",
            Self::FailRetry | Self::FailDiscard => "nack",
            Self::Reclaim => "reclaim",
            Self::Cancel => "cancel",
            Self::Expire => "expire",
            Self::RetryDead | Self::Revive => "retry",
            Self::Defer => "reschedule",
            Self::Drop => "drop",
            Self::Extend => "extend",
        }
    }
}

/// A transition that the state machine forbids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {} a job in state {from}", transition.as_str())]
pub struct InvalidTransition {
    /// The job's current state.
    pub from: JobState,
    /// The refused transition.
    pub transition: Transition,
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    const ALL_TRANSITIONS: [Transition; 14] = [
        Transition::Promote,
        Transition::Activate,
        Transition::Claim,
        Transition::Ack,
        Transition::FailRetry,
        Transition::FailDiscard,
        Transition::Reclaim,
        Transition::Cancel,
        Transition::Expire,
        Transition::RetryDead,
        Transition::Defer,
        Transition::Drop,
        Transition::Extend,
        Transition::Revive,
    ];

    #[test]
    fn string_form_round_trips() {
        for s in ALL_STATES {
            assert_eq!(s.as_str().parse::<JobState>(), Ok(s));
        }
        assert!("running".parse::<JobState>().is_err());
    }

    #[test]
    fn exactly_the_spec_edges_are_allowed() {
        let mut edges: Vec<(JobState, JobState)> = Vec::new();
        for from in ALL_STATES {
            for t in ALL_TRANSITIONS {
                if let Ok(to) = from.apply(t) {
                    edges.push((from, to));
                }
            }
        }
        edges.sort_by_key(|(a, b)| (a.as_str(), b.as_str()));
        edges.dedup();
        let mut expected = vec![
            (Scheduled, Available),
            (Retryable, Available),
            (Pending, Available),
            (Available, Active),
            (Active, Completed),
            (Active, Retryable),
            (Active, Discarded),
            (Active, Available),
            (Scheduled, Cancelled),
            (Available, Cancelled),
            (Pending, Cancelled),
            (Active, Cancelled),
            (Retryable, Cancelled),
            (Scheduled, Discarded),
            (Available, Discarded),
            (Pending, Discarded),
            (Retryable, Discarded),
            (Discarded, Available),
            (Available, Scheduled),
            (Active, Active),
            (Cancelled, Available),
        ];
        expected.sort_by_key(|(a, b)| (a.as_str(), b.as_str()));
        assert_eq!(edges, expected);
    }

    #[test]
    fn terminal_states_have_no_exit_but_an_operators_retry() {
        for t in ALL_TRANSITIONS {
            assert!(Completed.apply(t).is_err(), "completed {t:?}");
            assert_eq!(Cancelled.apply(t).is_ok(), t == Transition::Revive, "{t:?}");
            assert_eq!(
                Discarded.apply(t).is_ok(),
                matches!(t, Transition::RetryDead | Transition::Revive),
                "{t:?}"
            );
        }
    }

    #[test]
    fn every_transition_has_one_target_whatever_its_source() {
        for t in ALL_TRANSITIONS {
            let sources = JobState::sources(t);
            assert!(!sources.is_empty(), "{t:?} has no source");
            for from in sources {
                assert_eq!(from.apply(t), Ok(t.target()), "{from} {t:?}");
            }
        }
    }

    #[test]
    fn only_an_available_job_is_in_the_ready_index() {
        for state in ALL_STATES {
            let i = state.indexing();
            assert_eq!(i.ready, state == Available, "{state}");
            assert_eq!(i.finished, state.is_terminal(), "{state}");
            let due = match state {
                Scheduled | Retryable | Active => Due::Always,
                Available => Due::IfExpiring,
                _ => Due::Never,
            };
            assert_eq!(i.due, due, "{state}");
        }
    }

    #[test]
    fn named_invalid_transitions_are_refused() {
        assert!(Available.apply(Transition::Ack).is_err());
        assert!(Scheduled.apply(Transition::Claim).is_err());
        assert!(Retryable.apply(Transition::Claim).is_err());
        assert!(Discarded.apply(Transition::Claim).is_err());
        assert_eq!(
            JobState::sources(Transition::Ack),
            vec![Active],
            "only an active job can be acked"
        );
    }
}
