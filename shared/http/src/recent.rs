//! The queues this instance lately pushed to, so that its own FETCH of them does not run
//! ahead of the ready index.
//!
//! A job reaches the ready index (a GSI) some milliseconds after its PUSH was answered,
//! and `OJS_FETCH_RECHECK_MS` covers that for a FETCH that found nothing: it looks once
//! more. A FETCH of several queues that finds the first empty but the second not has no
//! such second look, and would claim the second queue's job although the first's, pushed
//! just before, is only not indexed yet (the queues are tried in the order given, ojs-core
//! §7.2). When this instance answered a PUSH to one of the FETCH's queues less than the
//! recheck time ago, the FETCH waits out the rest of that time first. It costs a wait only
//! there, never an extra query, and only where one process serves both PUSH and FETCH
//! (`make dev`, the tests, the conformance suite). On AWS the jobs and workers functions
//! are different Lambda functions, each with its own instances; there a producer's job can
//! still reach another queue's FETCH within the index's lag.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ojs_core::QueueName;

/// Entries kept before the stale ones are dropped (a bound on memory, not on queues).
const CAP: usize = 1024;

/// When this instance last answered a PUSH to each queue.
#[derive(Debug, Default)]
pub(crate) struct RecentPushes {
    at: Mutex<HashMap<String, Instant>>,
}

impl RecentPushes {
    /// Notes a PUSH to `queue` answered at `now`.
    pub(crate) fn note(&self, queue: &str, now: Instant, settle: Duration) {
        if settle.is_zero() {
            return;
        }
        let Ok(mut at) = self.at.lock() else {
            return;
        };
        if at.len() >= CAP && !at.contains_key(queue) {
            at.retain(|_, t| now.saturating_duration_since(*t) < settle);
            if at.len() >= CAP {
                at.clear();
            }
        }
        at.insert(queue.to_owned(), now);
    }

    /// How long a FETCH of `queues` at `now` should wait for this instance's PUSHes to
    /// them to be `settle` old (zero when none is younger).
    pub(crate) fn wait(&self, queues: &[QueueName], now: Instant, settle: Duration) -> Duration {
        let Ok(at) = self.at.lock() else {
            return Duration::ZERO;
        };
        queues
            .iter()
            .filter_map(|q| at.get(q.as_str()))
            .map(|t| settle.saturating_sub(now.saturating_duration_since(*t)))
            .max()
            .unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str) -> QueueName {
        match QueueName::parse(name) {
            Ok(q) => q,
            Err(e) => panic!("{name}: {e:?}"),
        }
    }

    const SETTLE: Duration = Duration::from_millis(100);

    #[test]
    fn a_fetch_waits_for_the_youngest_push_to_its_queues_to_settle() {
        let recent = RecentPushes::default();
        let t0 = Instant::now();
        recent.note("high", t0 + Duration::from_millis(30), SETTLE);
        recent.note("low", t0, SETTLE);
        recent.note("other", t0 + Duration::from_millis(90), SETTLE);
        let at = t0 + Duration::from_millis(40);
        // "high" was pushed 10 ms before: 90 ms to go; "low" 40 ms before: 60 ms.
        assert_eq!(
            recent.wait(&[q("high"), q("low")], at, SETTLE),
            Duration::from_millis(90)
        );
        assert_eq!(
            recent.wait(&[q("low")], at, SETTLE),
            Duration::from_millis(60)
        );
        // Pushes to queues the FETCH does not name do not hold it.
        assert_eq!(recent.wait(&[q("unpushed")], at, SETTLE), Duration::ZERO);
        // Settled pushes hold nothing.
        let later = t0 + Duration::from_millis(130);
        assert_eq!(
            recent.wait(&[q("high"), q("low")], later, SETTLE),
            Duration::ZERO
        );
        // A later PUSH restarts its queue's time.
        recent.note("low", later, SETTLE);
        assert_eq!(recent.wait(&[q("low")], later, SETTLE), SETTLE);
    }

    #[test]
    fn without_a_recheck_time_nothing_is_kept_or_waited_for() {
        let recent = RecentPushes::default();
        let now = Instant::now();
        recent.note("high", now, Duration::ZERO);
        assert_eq!(recent.wait(&[q("high")], now, SETTLE), Duration::ZERO);
    }

    #[test]
    fn stale_entries_make_room_and_fresh_ones_survive_the_cap() {
        let recent = RecentPushes::default();
        let t0 = Instant::now();
        for i in 0..CAP {
            recent.note(&format!("old-{i}"), t0, SETTLE);
        }
        let now = t0 + Duration::from_millis(50);
        recent.note("fresh", now, SETTLE);
        // Nothing was stale yet: the map was cleared, the new entry kept.
        assert_eq!(recent.wait(&[q("fresh")], now, SETTLE), SETTLE);
        let later = t0 + Duration::from_millis(500);
        for i in 0..CAP - 1 {
            recent.note(&format!("new-{i}"), later, SETTLE);
        }
        // Full again, with "fresh" stale: it is dropped, the young ones stay.
        recent.note("newest", later, SETTLE);
        let len = recent.at.lock().map(|at| at.len()).ok();
        assert_eq!(len, Some(CAP));
        assert_eq!(recent.wait(&[q("new-0")], later, SETTLE), SETTLE);
        assert_eq!(recent.wait(&[q("fresh")], later, SETTLE), Duration::ZERO);
    }
}
