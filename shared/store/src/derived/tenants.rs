//! Per-tenant job counts (ojs-multi-tenancy.md §10.2): the change stream consumer sums the
//! moves of a batch's jobs of tenants other than the default one per tenant and queue and
//! adds them with one `ADD` to that pair's counter item (`~TCOUNTS#<tenant>#<queue>` in
//! the `QUEUES` partition), beside the queue's own counters and in the same transaction,
//! so they are applied exactly once too. A tenant's stats are one Query of its items.
//!
//! The default tenant's jobs are counted by their queues' counters only: jobs without
//! tenants cost what they did. Unlike the queues' live counters, a tenant's are not
//! repaired by the sweep when a stream batch is given up.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::TransactWriteItem;
use ojs_core::tenant::TenantId;
use ojs_core::QueueName;

use crate::counts::{counts_key, QueueStats};
use crate::derived::counter_add::CounterAdd;
use crate::derived::Derived;
use crate::error::StoreError;
use crate::item::{n, s, Item};
use crate::keys;

/// What every tenant counter item's sort key starts with (`~` sorts after every queue
/// item; `#` is in neither a tenant id nor a queue name).
const TENANT_COUNTS_PREFIX: &str = "~TCOUNTS#";

/// The attribute of a tenant counter item holding when its first move was applied
/// (microseconds since the epoch).
const FIRST_SEEN: &str = "first_us";

/// Sort key of the counters of `tenant`'s jobs in `queue`.
fn tenant_counts_sk(tenant: &str, queue: &str) -> String {
    format!("{TENANT_COUNTS_PREFIX}{tenant}#{queue}")
}

/// Counter changes of a batch for tenants' jobs, summed per tenant and queue.
#[derive(Debug, Default)]
pub(crate) struct TenantMoves {
    per_item: BTreeMap<(String, String), BTreeMap<&'static str, i64>>,
}

impl TenantMoves {
    /// Adds `delta` to the count of `field` of `tenant`'s jobs in `queue`.
    pub(crate) fn change(
        &mut self,
        tenant: &TenantId,
        queue: &QueueName,
        field: &'static str,
        delta: i64,
    ) {
        *self
            .per_item
            .entry((tenant.to_string(), queue.to_string()))
            .or_default()
            .entry(field)
            .or_default() += delta;
    }

    /// One `ADD` per counter item that changes, which also stamps the item with `now_us`
    /// the first time (`first_us`: when the tenant was first seen in the queue, for the
    /// tenant's `created_at`).
    pub(crate) fn updates(
        self,
        table: &str,
        now_us: i64,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        self.per_item
            .into_iter()
            .filter_map(|((tenant, queue), deltas)| {
                let add = CounterAdd {
                    adds: Vec::new(),
                    then: Some("SET #first = if_not_exists(#first, :first)"),
                    names: HashMap::from([("#first".to_owned(), FIRST_SEEN.to_owned())]),
                    values: HashMap::from([(":first".to_owned(), n(now_us))]),
                };
                let key = counts_key(&tenant_counts_sk(&tenant, &queue));
                add.action(table, key, deltas, "tenant counter update")
            })
            .collect()
    }
}

/// One tenant's counts: per queue, and summed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantStats {
    /// The tenant.
    pub tenant: String,
    /// Its counts in each queue it has jobs in, by queue name.
    pub queues: BTreeMap<String, QueueStats>,
    /// The sum over its queues.
    pub total: QueueStats,
    /// When its first job was counted (the earliest of its queues'), if recorded.
    pub first_seen: Option<ojs_core::time::Timestamp>,
}

impl TenantStats {
    fn add(&mut self, queue: &str, item: &Item) {
        let mut counts = QueueStats::default();
        counts.add_counts(item);
        self.total.add_counts(item);
        self.queues.insert(queue.to_owned(), counts);
        let first = item
            .get(FIRST_SEEN)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
            .and_then(ojs_core::time::from_micros);
        self.first_seen = match (self.first_seen, first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

impl Derived {
    /// The counts of `tenant`'s jobs (one strongly consistent Query of its counter items,
    /// after the local stream caught up); `None` when it never had a job.
    pub async fn tenant_stats(&self, tenant: &TenantId) -> Result<Option<TenantStats>, StoreError> {
        let prefix = format!("{TENANT_COUNTS_PREFIX}{tenant}#");
        Ok(self.read_tenant_counts(&prefix).await?.into_iter().next())
    }

    /// Every tenant that had a job, with its counts, sorted by tenant (one Query of the
    /// tenant counter items: an admin read, a page per 1 MB of them).
    pub async fn list_tenants(&self) -> Result<Vec<TenantStats>, StoreError> {
        self.read_tenant_counts(TENANT_COUNTS_PREFIX).await
    }

    /// The counter items whose sort keys start with `prefix`, grouped by tenant.
    async fn read_tenant_counts(&self, prefix: &str) -> Result<Vec<TenantStats>, StoreError> {
        self.catch_up().await;
        let query = self
            .engine
            .table
            .query_table()
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(keys::QUEUES_PK))
            .expression_attribute_values(":prefix", s(prefix))
            .consistent_read(true);
        let items = self.engine.table.pages(query).items().await?;
        let mut by_tenant: BTreeMap<String, TenantStats> = BTreeMap::new();
        for item in &items {
            let Some((tenant, queue)) = crate::item::get_s(item, "sk")
                .and_then(|sk| sk.strip_prefix(TENANT_COUNTS_PREFIX))
                .and_then(|rest| rest.split_once('#'))
            else {
                continue;
            };
            by_tenant
                .entry(tenant.to_owned())
                .or_insert_with(|| TenantStats {
                    tenant: tenant.to_owned(),
                    ..Default::default()
                })
                .add(queue, item);
        }
        Ok(by_tenant.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_are_summed_per_tenant_and_queue() {
        let a = TenantId::parse("a").ok().flatten();
        let q = QueueName::parse("q").ok();
        let r = QueueName::parse("r").ok();
        let mut m = TenantMoves::default();
        if let (Some(a), Some(q), Some(r)) = (&a, &q, &r) {
            m.change(a, q, "available", 1);
            m.change(a, q, "available", -1);
            m.change(a, q, "active", 1);
            m.change(a, r, "available", 1);
        }
        let updates = m.updates("t", 7).unwrap_or_default();
        // Both items change: q's available nets to zero but its active does not.
        assert_eq!(updates.len(), 2);
        let exprs: Vec<String> = updates
            .iter()
            .filter_map(|u| u.update().map(|u| u.update_expression().to_owned()))
            .collect();
        let expr = "ADD #f0 :d0 SET #first = if_not_exists(#first, :first)";
        assert_eq!(exprs, vec![expr, expr]);
        let firsts: Vec<_> = updates
            .iter()
            .filter_map(|u| {
                u.update()?
                    .expression_attribute_values()?
                    .get(":first")
                    .cloned()
            })
            .collect();
        assert_eq!(firsts, vec![n(7), n(7)]);
        let keys: Vec<String> = updates
            .iter()
            .filter_map(|u| u.update()?.key().get("sk")?.as_s().ok().cloned())
            .collect();
        assert_eq!(keys, vec!["~TCOUNTS#a#q", "~TCOUNTS#a#r"]);
    }

    #[test]
    fn a_batch_whose_moves_cancel_out_writes_nothing() {
        let mut m = TenantMoves::default();
        if let (Ok(Some(a)), Ok(q)) = (TenantId::parse("a"), QueueName::parse("q")) {
            m.change(&a, &q, "available", 1);
            m.change(&a, &q, "available", -1);
        }
        assert!(m.updates("t", 7).is_ok_and(|u| u.is_empty()));
    }

    #[test]
    fn a_tenant_was_first_seen_when_its_earliest_queue_was() {
        let item = |first: Option<i64>| {
            let mut i = Item::from([("available".to_owned(), n(1))]);
            if let Some(f) = first {
                i.insert(FIRST_SEEN.to_owned(), n(f));
            }
            i
        };
        let mut stats = TenantStats::default();
        stats.add("q", &item(None));
        assert_eq!(stats.first_seen, None);
        stats.add("r", &item(Some(2_000_000)));
        stats.add("s", &item(Some(1_000_000)));
        stats.add("t", &item(Some(3_000_000)));
        stats.add("u", &item(None));
        assert_eq!(stats.first_seen, ojs_core::time::from_micros(1_000_000));
        assert_eq!(stats.total.available, 5);
    }
}
