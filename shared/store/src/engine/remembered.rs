//! Settings one instance remembers between requests, in process, by name: a queue's
//! (pause, rate limit) and a tenant's. Each is trusted for the settings' time to live
//! after it was read; a zero time to live remembers nothing.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::StoreError;

/// Most names one memory holds: it is emptied when full, so it stays bounded.
const MAX_NAMES: usize = 10_000;

/// Settings as last read, by name, each with when it was read.
pub(crate) struct Remembered<T> {
    read: Mutex<HashMap<String, (Instant, T)>>,
}

impl<T> Default for Remembered<T> {
    fn default() -> Self {
        Self {
            read: Mutex::default(),
        }
    }
}

impl<T: Clone + Default> Remembered<T> {
    /// The settings of `names` (named by `name`): those read within `ttl`, the others as
    /// `read` reads them (the default for a name it does not find), remembered from now.
    pub(crate) async fn recall_or_read<N: Clone, F>(
        &self,
        names: &[N],
        name: impl Fn(&N) -> &str,
        ttl: Duration,
        read: impl FnOnce(Vec<N>) -> F,
    ) -> Result<HashMap<String, T>, StoreError>
    where
        F: Future<Output = Result<HashMap<String, T>, StoreError>>,
    {
        let now = Instant::now();
        let (mut found, missing) = self.recall(names, &name, ttl, now);
        if missing.is_empty() {
            return Ok(found);
        }
        let unread: Vec<String> = missing.iter().map(|n| name(n).to_owned()).collect();
        let mut read = read(missing).await?;
        for n in unread {
            read.entry(n).or_default();
        }
        if !ttl.is_zero() {
            self.remember(now, &read);
        }
        found.extend(read);
        Ok(found)
    }

    /// Forgets what was read of `name` (this instance just changed it).
    pub(crate) fn forget(&self, name: &str) {
        if let Ok(mut read) = self.read.lock() {
            read.remove(name);
        }
    }

    /// The settings of `names` read within `ttl` of `now`, and the names not (all of them
    /// when `ttl` is zero or the memory cannot be locked).
    fn recall<N: Clone>(
        &self,
        names: &[N],
        name: impl Fn(&N) -> &str,
        ttl: Duration,
        now: Instant,
    ) -> (HashMap<String, T>, Vec<N>) {
        let mut found = HashMap::new();
        let mut missing = Vec::new();
        match self.read.lock() {
            Ok(read) if !ttl.is_zero() => {
                for n in names {
                    match read.get(name(n)) {
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

    /// Notes `fresh` as read at `now`.
    fn remember(&self, now: Instant, fresh: &HashMap<String, T>) {
        if let Ok(mut read) = self.read.lock() {
            if read.len() >= MAX_NAMES {
                read.clear();
            }
            for (name, settings) in fresh {
                read.insert(name.clone(), (now, settings.clone()));
            }
        }
    }
}
