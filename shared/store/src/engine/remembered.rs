//! Settings one instance remembers between requests, in process, by name: a queue's
//! (pause, rate limit) and a tenant's. Each is trusted for the settings' time to live
//! after it was read; a zero time to live remembers nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Settings as last read, by name, each with when it was read.
pub(crate) type Remembered<T> = HashMap<String, (Instant, T)>;

/// The settings of `names` (named by `name`) that `memory` holds read within `ttl` of
/// `now`, and the names it does not (all of them when `ttl` is zero or the memory cannot
/// be locked).
pub(crate) fn recall<N: Clone, T: Clone>(
    memory: &Mutex<Remembered<T>>,
    names: &[N],
    name: impl Fn(&N) -> &str,
    ttl: Duration,
    now: Instant,
) -> (HashMap<String, T>, Vec<N>) {
    let mut found = HashMap::new();
    let mut missing = Vec::new();
    match memory.lock() {
        Ok(memory) if !ttl.is_zero() => {
            for n in names {
                match memory.get(name(n)) {
                    Some((at, settings)) if now.duration_since(*at) < ttl => {
                        found.insert(name(n).to_owned(), settings.clone());
                    }
                    _ => missing.push(n.clone()),
                }
            }
        }
        _ => missing = names.to_vec(),
    }
    (found, missing)
}

/// Notes `read` (by name) in `memory` as read at `now`, unless `ttl` is zero; a memory
/// holding `cap` names or more is emptied first, so it stays bounded.
pub(crate) fn remember<T>(
    memory: &Mutex<Remembered<T>>,
    ttl: Duration,
    cap: usize,
    now: Instant,
    read: impl IntoIterator<Item = (String, T)>,
) {
    if ttl.is_zero() {
        return;
    }
    if let Ok(mut memory) = memory.lock() {
        if memory.len() >= cap {
            memory.clear();
        }
        for (name, settings) in read {
            memory.insert(name, (now, settings));
        }
    }
}
