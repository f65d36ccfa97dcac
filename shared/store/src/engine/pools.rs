//! Scheduling pools (ojs-fair-scheduling.md §6, §10.1): one item per pool in the `POOLS`
//! partition, its definition as JSON. A FETCH over two queues or more follows the
//! strategy of the first pool (by name) that holds all its queues; the list is read once
//! per [`crate::StoreConfig::queue_settings_ttl`] per instance, and never for a FETCH of
//! one queue, which has nothing to order.

use std::time::Instant;

use ojs_core::pool::Pool;
use ojs_core::time;
use ojs_core::QueueName;

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{s, ts, Item};
use crate::usage::Kind;

/// Partition of every pool.
const POOLS_PK: &str = "POOLS";

fn pool_key(name: &str) -> Item {
    std::collections::HashMap::from([
        ("pk".to_owned(), s(POOLS_PK)),
        ("sk".to_owned(), s(format!("P#{name}"))),
    ])
}

fn pool_of(item: &Item) -> Option<Pool> {
    let name = item.get("sk")?.as_s().ok()?.strip_prefix("P#")?;
    let raw = item.get("spec")?.as_s().ok()?;
    let spec: serde_json::Value = serde_json::from_str(raw).ok()?;
    Pool::from_json(name, &spec).ok()
}

/// The pools as last listed, with when.
pub(crate) type PoolCache = Option<(Instant, Vec<Pool>)>;

impl Engine {
    /// Stores `pool` (one PutItem); true when it is new. This instance follows it at
    /// once, others within the settings' time to live.
    pub async fn put_pool(&self, pool: &Pool) -> Result<bool, StoreError> {
        let mut item = pool_key(&pool.name);
        item.insert("spec".into(), s(pool.to_json().to_string()));
        item.insert("updated_at".into(), ts(&time::now()));
        let out = self
            .table
            .put_item()
            .set_item(Some(item))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await;
        let out = self.table.tally(Kind::Write, out)?;
        self.forget_pools();
        Ok(out.attributes().is_none_or(|a| a.is_empty()))
    }

    /// Removes pool `name`; whether it existed.
    pub async fn delete_pool(&self, name: &str) -> Result<bool, StoreError> {
        let held = self.table.delete_returning(pool_key(name)).await?;
        self.forget_pools();
        Ok(held.is_some())
    }

    /// Pool `name`, if one is stored (one strongly consistent GetItem).
    pub async fn pool(&self, name: &str) -> Result<Option<Pool>, StoreError> {
        Ok(self
            .table
            .read_item(pool_key(name))
            .await?
            .as_ref()
            .and_then(pool_of))
    }

    /// Every pool, by name (one strongly consistent Query).
    pub async fn list_pools(&self) -> Result<Vec<Pool>, StoreError> {
        let items = self.table.query_partition(POOLS_PK, true).await?;
        Ok(items.iter().filter_map(pool_of).collect())
    }

    /// The pool a FETCH naming `queues` follows: the first that holds them all (pools as
    /// this instance lately listed them). `None` for a FETCH of fewer than two queues.
    pub(crate) async fn pool_for(&self, queues: &[QueueName]) -> Result<Option<Pool>, StoreError> {
        if queues.len() < 2 {
            return Ok(None);
        }
        let ttl = self.config.queue_settings_ttl;
        let cached = self
            .pool_cache
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .filter(|(at, _)| !ttl.is_zero() && at.elapsed() < ttl);
        let pools = match cached {
            Some((_, pools)) => pools,
            None => {
                let pools = self.list_pools().await?;
                if let Ok(mut c) = self.pool_cache.lock() {
                    *c = Some((Instant::now(), pools.clone()));
                }
                pools
            }
        };
        Ok(pools.into_iter().find(|p| p.covers(queues)))
    }

    fn forget_pools(&self) {
        if let Ok(mut c) = self.pool_cache.lock() {
            *c = None;
        }
    }
}
