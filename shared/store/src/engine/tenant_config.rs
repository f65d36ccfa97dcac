//! Tenant settings (ojs-multi-tenancy.md §8-10): one small item per configured tenant in
//! the `TENANTS` partition (its fairness weight and hard limits), changed through the
//! admin API and read by every instance within [`crate::StoreConfig::queue_settings_ttl`]
//! (no restart, §15.1). A FETCH for any tenant reads the weights of a queue's tenants; a
//! PUSH of a tenant's job reads that tenant's limits, and its counts only when it has one.

use std::collections::HashMap;
use std::time::Duration;

use ojs_core::rate_limit::{Window, MAX_CONCURRENCY};
use ojs_core::tenant::{TenantConfig, TenantId};
use ojs_core::time;

use crate::batch_read::BatchRead;
use crate::engine::remembered::Remembered;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{n, s, ts, Item};
use crate::usage::Kind;

/// Partition of every tenant's settings.
const TENANTS_PK: &str = "TENANTS";

fn tenant_key(tenant: &str) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(TENANTS_PK)),
        ("sk".to_owned(), s(format!("T#{tenant}"))),
    ])
}

fn config_of(item: &Item) -> TenantConfig {
    let num = |k: &str| {
        item.get(k)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let max_enqueue_rate = match (num("enqueue_limit"), num("enqueue_period_us")) {
        (Some(limit), Some(period_us)) if limit > 0 && period_us > 0 => Some(Window {
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            period: Duration::from_micros(period_us),
        }),
        _ => None,
    };
    TenantConfig {
        fairness_weight: num("weight"),
        max_queue_depth: num("max_queue_depth"),
        max_scheduled: num("max_scheduled"),
        max_concurrency: num("max_concurrency").map(|c| {
            u32::try_from(c)
                .unwrap_or(MAX_CONCURRENCY)
                .min(MAX_CONCURRENCY)
        }),
        max_enqueue_rate,
    }
}

/// A tenant's settings as stored, with when they were first stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantRecord {
    /// The settings.
    pub config: TenantConfig,
    /// When the tenant's settings were first stored (`None` for settings stored before
    /// the time was kept).
    pub created_at: Option<time::Timestamp>,
}

fn record_of(item: &Item) -> TenantRecord {
    TenantRecord {
        config: config_of(item),
        created_at: item
            .get(CREATED)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
            .and_then(time::from_micros),
    }
}

/// The attribute of when a tenant's settings were first stored (microseconds).
const CREATED: &str = "created_us";

/// What this instance remembers of tenants' settings: their items, read eventually
/// consistent.
pub(crate) fn remembered_configs() -> Remembered<TenantConfig> {
    Remembered::new(
        tenant_key,
        |i| Some((tenant_of(i)?, config_of(i))),
        BatchRead {
            consistent: false,
            projection: None,
        },
    )
}

fn tenant_of(item: &Item) -> Option<String> {
    item.get("sk")?
        .as_s()
        .ok()?
        .strip_prefix("T#")
        .map(str::to_owned)
}

impl Engine {
    /// Stores `config` as `tenant`'s settings (one PutItem; this instance obeys it at
    /// once, others within the settings' time to live).
    pub async fn put_tenant_config(
        &self,
        tenant: &TenantId,
        config: &TenantConfig,
        created_at: time::Timestamp,
    ) -> Result<(), StoreError> {
        let mut item = tenant_key(tenant.as_str());
        item.insert("tenant".into(), s(tenant.as_str()));
        item.insert("updated_at".into(), ts(&time::now()));
        item.insert(CREATED.into(), n(created_at.timestamp_micros()));
        let rate = config.max_enqueue_rate;
        for (k, v) in [
            ("weight", config.fairness_weight),
            ("max_queue_depth", config.max_queue_depth),
            ("max_scheduled", config.max_scheduled),
            ("max_concurrency", config.max_concurrency.map(u64::from)),
            ("enqueue_limit", rate.map(|w| u64::from(w.limit))),
            (
                "enqueue_period_us",
                rate.map(|w| u64::try_from(w.period.as_micros()).unwrap_or(u64::MAX)),
            ),
        ] {
            if let Some(v) = v {
                item.insert(k.into(), n(v));
            }
        }
        let out = self.table.put_item().set_item(Some(item)).send().await;
        self.table.tally(Kind::Write, out)?;
        self.tenant_config_cache.forget(tenant.as_str());
        Ok(())
    }

    /// `tenant`'s settings (a strongly consistent GetItem); `None` when it has none.
    pub async fn get_tenant_config(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<TenantRecord>, StoreError> {
        Ok(self
            .table
            .read_item(tenant_key(tenant.as_str()))
            .await?
            .as_ref()
            .map(record_of))
    }

    /// Removes `tenant`'s settings (its jobs and counts stay); whether it had any.
    pub async fn delete_tenant_config(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        let held = self
            .table
            .delete_returning(tenant_key(tenant.as_str()))
            .await?;
        self.tenant_config_cache.forget(tenant.as_str());
        Ok(held.is_some())
    }

    /// Every configured tenant with its settings, by tenant (one Query: an admin read).
    pub async fn list_tenant_configs(&self) -> Result<Vec<(String, TenantRecord)>, StoreError> {
        let items = self.table.query_partition(TENANTS_PK, true).await?;
        Ok(items
            .iter()
            .filter_map(|i| Some((tenant_of(i)?, record_of(i))))
            .collect())
    }

    /// The settings of `tenants` (the default of a tenant without any): remembered per
    /// instance for the settings' time to live, else one BatchGetItem per 100 (eventually
    /// consistent).
    pub(crate) async fn tenant_configs(
        &self,
        tenants: &[&TenantId],
    ) -> Result<HashMap<String, TenantConfig>, StoreError> {
        let ttl = self.config.queue_settings_ttl;
        self.tenant_config_cache
            .recall_or_read(&self.table, tenants, |t| t.as_str(), ttl)
            .await
    }

    /// The weight of each of `tenants` in a FETCH for any tenant (1 without settings).
    pub(crate) async fn tenant_weights(
        &self,
        tenants: &[&TenantId],
    ) -> Result<HashMap<String, u64>, StoreError> {
        if tenants.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(self
            .tenant_configs(tenants)
            .await?
            .into_iter()
            .map(|(t, c)| (t, c.weight()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;

    #[test]
    fn settings_read_back_from_their_item() {
        let mut item = tenant_key("acme");
        item.insert("weight".into(), n(7));
        item.insert("max_scheduled".into(), n(3));
        item.insert("max_concurrency".into(), n(4));
        item.insert("enqueue_limit".into(), n(10));
        item.insert("enqueue_period_us".into(), n(60_000_000));
        item.insert("junk".into(), AttributeValue::Bool(true));
        assert_eq!(tenant_of(&item).as_deref(), Some("acme"));
        assert_eq!(record_of(&item).created_at, None);
        item.insert(CREATED.into(), n(1_700_000_000_000_000i64));
        assert_eq!(
            record_of(&item).created_at,
            time::from_micros(1_700_000_000_000_000)
        );
        assert_eq!(
            config_of(&item),
            TenantConfig {
                fairness_weight: Some(7),
                max_queue_depth: None,
                max_scheduled: Some(3),
                max_concurrency: Some(4),
                max_enqueue_rate: Some(Window {
                    limit: 10,
                    period: Duration::from_secs(60),
                }),
            }
        );
        // A concurrency past the largest is read as the largest; a rate missing its
        // period is no rate.
        item.insert("max_concurrency".into(), n(1_000));
        item.remove("enqueue_period_us");
        let c = config_of(&item);
        assert_eq!(
            (c.max_concurrency, c.max_enqueue_rate),
            (Some(MAX_CONCURRENCY), None)
        );
    }
}
