//! The circuit breaker of ojs-serverless.md §7.2.5-6, per endpoint and per process: after
//! [`TRIP_AFTER`] consecutive delivery errors (timeouts, connection errors, 5xx, 429,
//! unreadable answers; not the handler's own failures, which say the endpoint works) the
//! endpoint gets no delivery for the cooldown, its jobs staying available to other
//! endpoints and polling workers; then one delivery tests it (half-open): a success closes
//! the circuit, another delivery error opens it again. Kept in memory: the stream function
//! runs one instance per stream shard, so each instance learns an endpoint's health on its
//! own within a few deliveries, at no DynamoDB cost.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Consecutive delivery errors that open the circuit (§7.2.5's recommendation).
pub const TRIP_AFTER: u32 = 5;

#[derive(Default)]
struct State {
    failures: u32,
    open_until: Option<Instant>,
    probing: bool,
}

/// The breakers of every endpoint this process delivers to.
#[derive(Default)]
pub(crate) struct Breakers {
    cooldown: Duration,
    states: Mutex<HashMap<String, State>>,
}

impl Breakers {
    pub(crate) fn new(cooldown: Duration) -> Self {
        Self {
            cooldown,
            states: Mutex::default(),
        }
    }

    /// Whether a delivery to `endpoint` may start now; in the half-open state, only the
    /// one that gets `true` (it must report back with [`Breakers::record`] or
    /// [`Breakers::unused`]).
    pub(crate) fn allow(&self, endpoint: &str) -> bool {
        let Ok(mut states) = self.states.lock() else {
            return true;
        };
        let state = states.entry(endpoint.to_owned()).or_default();
        match state.open_until {
            None => true,
            Some(until) if Instant::now() < until => false,
            Some(_) if state.probing => false,
            Some(_) => {
                state.probing = true;
                true
            }
        }
    }

    /// The delivery `allow` let through did not happen (the job was taken elsewhere).
    pub(crate) fn unused(&self, endpoint: &str) {
        if let Ok(mut states) = self.states.lock() {
            if let Some(state) = states.get_mut(endpoint) {
                state.probing = false;
            }
        }
    }

    /// Records a delivery's outcome: `delivery_error` when the transport failed.
    /// Returns true when this outcome opened the circuit.
    pub(crate) fn record(&self, endpoint: &str, delivery_error: bool) -> bool {
        let Ok(mut states) = self.states.lock() else {
            return false;
        };
        let state = states.entry(endpoint.to_owned()).or_default();
        if !delivery_error {
            *state = State::default();
            return false;
        }
        state.failures += 1;
        let trips = state.probing || state.failures >= TRIP_AFTER;
        state.probing = false;
        if trips {
            state.open_until = Some(Instant::now() + self.cooldown);
        }
        trips
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_delivery_errors_and_probes_once_after_the_cooldown() {
        let b = Breakers::new(Duration::from_millis(30));
        for _ in 0..TRIP_AFTER - 1 {
            assert!(b.allow("e") && !b.record("e", true));
        }
        // A handler's own failure resets the count.
        assert!(!b.record("e", false));
        for _ in 0..TRIP_AFTER - 1 {
            assert!(!b.record("e", true));
        }
        assert!(b.record("e", true));
        assert!(!b.allow("e"));
        assert!(b.allow("other"));
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.allow("e"), "half-open: one probe");
        assert!(!b.allow("e"), "only one");
        b.unused("e");
        assert!(b.allow("e"));
        assert!(b.record("e", true), "a failed probe opens it again");
        assert!(!b.allow("e"));
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.allow("e"));
        assert!(!b.record("e", false));
        assert!(b.allow("e") && b.allow("e"), "closed again");
    }
}
