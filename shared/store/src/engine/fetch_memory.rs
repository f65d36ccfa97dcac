//! What one instance's FETCH remembers between requests, in process: queues where it
//! lately lost claims (it spreads over their candidates), queue shards whose due query
//! found nothing (it skips the next), and lanes found empty (they take no first turn).
//! Bounded, and never needed for correctness: a cold instance remembers nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ojs_core::QueueName;

/// How long a queue counts as contended after this instance lost a claim on it.
const CONTENTION_MEMORY: Duration = Duration::from_secs(2);

/// Keys this instance noted lately, each with when: a bounded memory of one process.
pub(crate) struct Recent<K>(Mutex<HashMap<K, Instant>>);

impl<K> Default for Recent<K> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + std::hash::Hash + Clone> Recent<K> {
    /// Most keys remembered (the map is cleared past it).
    const MAX_QUEUES: usize = 1_000;

    pub(crate) fn note(&self, key: &K) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= Self::MAX_QUEUES && !map.contains_key(key) {
                map.clear();
            }
            map.insert(key.clone(), Instant::now());
        }
    }

    pub(crate) fn within(&self, key: &K, memory: Duration) -> bool {
        self.0
            .lock()
            .is_ok_and(|map| map.get(key).is_some_and(|at| at.elapsed() < memory))
    }
}

/// Lanes of a queue with tenants in which this instance's FETCH for any tenant lately
/// found no job, each with the lane turn it was found so: for [`quiet_turns`] turns it
/// takes no first turn and comes after the others (still read when they leave room), so
/// an empty lane (often the default tenant's) gives its turns to the lanes with work by
/// their weights, not all to the lane after it. Counted in turns, not time: a job pushed
/// into it elsewhere waits at most that many FETCHes of this instance that found work in
/// other lanes; one this instance pushes ends its quiet at once.
#[derive(Default)]
pub(crate) struct QuietLanes(Mutex<HashMap<crate::keys::Lane, usize>>);

/// How many lane turns a lane found empty stays behind the others when its queue has
/// `lanes` lanes: two rounds of them (four turns at the least). A small tenant's lane is
/// empty between its jobs, and a job arriving in it (or one the ready index shows only
/// after its lag, so that the first read after the PUSH misses it) waits out that quiet:
/// 16 turns there made a small tenant beside a flood wait about 16 of the flood's FETCHes
/// per job (bench section 8). Two rounds keep that to twice the turns round-robin gives
/// it anyway, and the extra reads of empty lanes to at most one every two turns however
/// many lanes the queue has.
pub(crate) fn quiet_turns(lanes: usize) -> usize {
    lanes.saturating_mul(2).max(4)
}

impl QuietLanes {
    pub(crate) fn note(&self, lane: &crate::keys::Lane, turn: usize) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= 1_000 && !map.contains_key(lane) {
                map.clear();
            }
            map.insert(lane.clone(), turn);
        }
    }

    /// Whether `lane`, one of `lanes` of its queue, is still quiet at `turn`.
    pub(crate) fn quiet(&self, lane: &crate::keys::Lane, turn: usize, lanes: usize) -> bool {
        self.0.lock().is_ok_and(|map| {
            map.get(lane)
                .is_some_and(|at| turn.wrapping_sub(*at) < quiet_turns(lanes))
        })
    }

    pub(crate) fn forget(&self, lane: &crate::keys::Lane) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(lane);
        }
    }
}

/// Queues on which this instance lately lost a claim to another worker. A FETCH of such a
/// queue spreads over the first priority's candidates instead of writing to the head that
/// every racing worker writes to (32 workers lost about 6 claims per job that way).
pub(crate) type Contention = Recent<QueueName>;

impl Contention {
    pub(crate) fn lost_on(&self, queue: &QueueName) {
        self.note(queue);
    }

    pub(crate) fn recent(&self, queue: &QueueName) -> bool {
        self.within(queue, CONTENTION_MEMORY)
    }
}

/// Shards of a queue whose due entries this instance lately found none of: a FETCH
/// within [`crate::StoreConfig::quiet_due_memory`] of that skips the due query (one
/// DynamoDB call, about a quarter of a FETCH's CPU) and claims from the ready index at
/// once.
pub(crate) type QuietDue = Recent<(QueueName, u16)>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_counts_as_contended_for_a_while_after_a_lost_claim() {
        let contention = Contention::default();
        let q = QueueName::parse("q").unwrap_or_else(|_| QueueName::default_queue());
        let other = QueueName::default_queue();
        assert!(!contention.recent(&q));
        contention.lost_on(&q);
        assert!(contention.recent(&q));
        assert!(!contention.recent(&other));
        if let Ok(mut map) = contention.0.lock() {
            map.insert(q.clone(), Instant::now() - CONTENTION_MEMORY);
        }
        assert!(!contention.recent(&q));
    }

    #[test]
    fn the_contention_memory_stays_bounded() {
        let contention = Contention::default();
        for i in 0..Contention::MAX_QUEUES + 5 {
            let q =
                QueueName::parse(&format!("q{i}")).unwrap_or_else(|_| QueueName::default_queue());
            contention.lost_on(&q);
        }
        let len = contention.0.lock().map(|m| m.len()).unwrap_or_default();
        assert!(len <= Contention::MAX_QUEUES, "{len}");
        assert!(len >= 5, "{len}");
    }

    #[test]
    fn a_lane_found_empty_stays_behind_for_its_turns_then_comes_back() {
        let lane = crate::keys::Lane::default_of(&QueueName::default_queue());
        let quiet = QuietLanes::default();
        assert!(!quiet.quiet(&lane, 5, 2));
        quiet.note(&lane, 5);
        // Two lanes: four turns (the least); ten lanes: two rounds of them.
        assert!(quiet.quiet(&lane, 5, 2) && quiet.quiet(&lane, 5 + 3, 2));
        assert!(!quiet.quiet(&lane, 5 + 4, 2));
        assert!(quiet.quiet(&lane, 5 + 19, 10) && !quiet.quiet(&lane, 5 + 20, 10));
        quiet.forget(&lane);
        assert!(!quiet.quiet(&lane, 6, 2));
        // Bounded: past 1,000 lanes the memory starts again.
        quiet.note(&lane, 7);
        let other = |i: usize| crate::keys::Lane {
            queue: QueueName::default_queue(),
            tenant: ojs_core::tenant::TenantId::parse(&format!("t{i}"))
                .ok()
                .flatten(),
        };
        for i in 0..999 {
            quiet.note(&other(i), 7);
        }
        assert!(quiet.quiet(&lane, 8, 2), "1,000 lanes are remembered");
        quiet.note(&other(0), 8);
        assert!(quiet.quiet(&lane, 8, 2), "a lane noted again is no new one");
        quiet.note(&other(1_000), 8);
        assert!(!quiet.quiet(&lane, 8, 2) && quiet.quiet(&other(1_000), 8, 2));
    }
}
