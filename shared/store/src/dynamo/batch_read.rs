//! Reading items by key in bulk, within DynamoDB's documented BatchGetItem rules: at most
//! 100 keys a call, no key twice, and keys that come back unprocessed (throttling, the
//! 16 MB answer limit) asked for again until none is left.

use std::collections::HashSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::{KeysAndAttributes, ReturnConsumedCapacity};

use crate::dynamo::table::Table;
use crate::error::StoreError;
use crate::item::Item;
use crate::usage::Kind;

/// Most keys one BatchGetItem may name.
pub(crate) const MAX_BATCH_GET: usize = 100;
/// Calls made for keys that keep coming back unprocessed before giving up with
/// [`StoreError::Throttled`] (never a silently short answer).
const MAX_ROUNDS: u32 = 8;

/// How to read.
#[derive(Debug, Clone, Default)]
pub(crate) struct BatchRead {
    /// Strongly consistent reads.
    pub consistent: bool,
    /// A projection expression and its attribute names.
    pub projection: Option<(&'static str, &'static [(&'static str, &'static str)])>,
}

impl Table {
    /// The items of `keys` that exist, in no particular order. Duplicate keys are read once.
    pub(crate) async fn batch_get(
        &self,
        keys: Vec<Item>,
        how: &BatchRead,
    ) -> Result<Vec<Item>, StoreError> {
        let mut seen = HashSet::new();
        let keys: Vec<Item> = keys
            .into_iter()
            .filter(|k| seen.insert(key_text(k)))
            .collect();
        let mut found = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_BATCH_GET) {
            let mut pending = chunk.to_vec();
            let mut round = 0;
            while !pending.is_empty() {
                if round == MAX_ROUNDS {
                    return Err(StoreError::Throttled(
                        "keys still unprocessed after repeated BatchGetItem calls".into(),
                    ));
                }
                if round > 0 {
                    tokio::time::sleep(backoff(round)).await;
                }
                round += 1;
                let mut ka = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .consistent_read(how.consistent);
                if let Some((expression, names)) = how.projection {
                    ka = ka.projection_expression(expression);
                    for (k, v) in names {
                        ka = ka.expression_attribute_names(*k, *v);
                    }
                }
                let ka = ka.build().map_err(|e| StoreError::Backend(e.to_string()))?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(self.name(), ka)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await;
                let out = self.tally(Kind::Read, out)?;
                if let Some(items) = out.responses().and_then(|r| r.get(self.name())) {
                    found.extend(items.iter().cloned());
                }
                pending = out
                    .unprocessed_keys()
                    .and_then(|u| u.get(self.name()))
                    .map(|k| k.keys().to_vec())
                    .unwrap_or_default();
            }
        }
        Ok(found)
    }
}

/// Jittered exponential backoff before round `round` (1-based) of unprocessed keys.
pub(crate) fn backoff(round: u32) -> Duration {
    let base_ms = 25u64 << round.min(6);
    Duration::from_millis(rand::random_range(base_ms / 2..=base_ms))
}

/// A key's identity, for de-duplication.
fn key_text(key: &Item) -> String {
    let mut parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    parts.sort();
    parts.join("\u{1f}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::s;

    #[test]
    fn keys_compare_by_content() {
        let a = Item::from([("pk".to_owned(), s("A")), ("sk".to_owned(), s("1"))]);
        let b = Item::from([("sk".to_owned(), s("1")), ("pk".to_owned(), s("A"))]);
        let c = Item::from([("pk".to_owned(), s("A")), ("sk".to_owned(), s("2"))]);
        assert_eq!(key_text(&a), key_text(&b));
        assert_ne!(key_text(&a), key_text(&c));
    }

    #[test]
    fn backoff_grows_and_stays_bounded() {
        for round in 1..20 {
            let d = backoff(round);
            let cap = 25u64 << round.min(6);
            assert!(d >= Duration::from_millis(cap / 2) && d <= Duration::from_millis(cap));
        }
    }
}
