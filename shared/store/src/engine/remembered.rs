//! Settings one instance remembers between requests, in process, by name: a queue's
//! (pause, rate limit) and a tenant's. Each kind is kept in one partition, one item a
//! name, read in BatchGetItems (eventually consistent) when not remembered; each read is
//! trusted for the settings' time to live after it was read; a zero time to live
//! remembers nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::batch_read::BatchRead;
use crate::dynamo::table::Table;
use crate::error::StoreError;
use crate::item::Item;

/// Most names one memory holds: it is emptied when full, so it stays bounded.
const MAX_NAMES: usize = 10_000;

/// Settings as last read, by name, each with when it was read, and where and how they
/// are read.
pub(crate) struct Remembered<T> {
    read: Mutex<HashMap<String, (Instant, T)>>,
    /// The key of the item of the settings of a name.
    key: fn(&str) -> Item,
    /// The name and settings an item holds (`None`: not an item of settings).
    settings_of: fn(&Item) -> Option<(String, T)>,
    /// How the items are read.
    how: BatchRead,
}

impl<T> Remembered<T> {
    /// Nothing remembered yet of the settings at `key`, read by `settings_of` as `how`
    /// says.
    pub(crate) fn new(
        key: fn(&str) -> Item,
        settings_of: fn(&Item) -> Option<(String, T)>,
        how: BatchRead,
    ) -> Self {
        Self {
            read: Mutex::default(),
            key,
            settings_of,
            how,
        }
    }
}

impl<T: Clone + Default> Remembered<T> {
    /// The settings of `names` (named by `name`): those read within `ttl`, the others
    /// from `table` in BatchGetItems of at most 100 (the default for a name without an
    /// item), remembered from now.
    pub(crate) async fn recall_or_read<N: Clone>(
        &self,
        table: &Table,
        names: &[N],
        name: impl Fn(&N) -> &str,
        ttl: Duration,
    ) -> Result<HashMap<String, T>, StoreError> {
        let now = Instant::now();
        let (mut found, missing) = self.recall(names, &name, ttl, now);
        if missing.is_empty() {
            return Ok(found);
        }
        let keys = missing.iter().map(|n| (self.key)(name(n))).collect();
        let mut read: HashMap<String, T> = table
            .batch_get(keys, &self.how)
            .await?
            .iter()
            .filter_map(self.settings_of)
            .collect();
        for n in &missing {
            read.entry(name(n).to_owned()).or_default();
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
