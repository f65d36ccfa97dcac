//! Push endpoint registrations (ojs-serverless.md §2.1) and the claim of one job for a
//! delivery.
//!
//! A registration is one item in the `PUSH` partition (sort key `E#<id>`, listed by the
//! API) plus one copy per queue it serves in `PUSHQ#<queue>` (same sort key), written
//! and deleted together in one transaction. The dispatcher reads the endpoints of a
//! job's queue with one Query of that small partition (at most a handful of items), never
//! a Scan and never the whole registry.
//!
//! The signing secret is stored in the items (DynamoDB encrypts them at rest) and never
//! leaves the store through [`PushEntry::view`].

mod delivery;

pub use delivery::{served_queues, PushClaim, ReadyJob, SlotHold, PUSH_NUDGE_AFTER};

use aws_sdk_dynamodb::types::{Delete, TransactWriteItem, Update};
use ojs_core::push::PushEndpoint;
use ojs_core::rate_limit::{OnLimit, RateLimitPolicy};
use ojs_core::time::{self, Timestamp};
use ojs_core::QueueName;
use serde_json::{json, Value};

use crate::engine::Engine;
use crate::error::{Missing, StoreError};
use crate::item::{self, s, Item};
use crate::registry::Registry;

/// Every registration, by id: the API's listing, in partition `PUSH` (the queues'
/// copies are elsewhere).
const ENDPOINTS: Registry<PushEntry> = Registry {
    pk: "PUSH",
    sk: entry_sk,
    read: PushEntry::from_item,
    missing: Missing::PushEndpoint,
};
/// Most registrations the store takes: the listing is one Query of one partition.
pub const MAX_PUSH_ENDPOINTS: usize = 100;
/// The item counting the registrations (outside the listing's partition). Every write of
/// the registry sets it to the count its listing found, plus or minus one, conditioned on
/// it still holding that count: two registrations racing for the last place cannot both
/// pass [`MAX_PUSH_ENDPOINTS`]; the loser is told to retry.
const COUNT_PK: &str = "PUSH#COUNT";
fn queue_pk(queue: &QueueName) -> String {
    format!("PUSHQ#{queue}")
}

/// The partitions holding a registration: the listing's, and one per queue it serves
/// (written and deleted together).
fn entry_pks(queues: &[QueueName]) -> impl Iterator<Item = String> + '_ {
    std::iter::once(ENDPOINTS.pk.to_owned()).chain(queues.iter().map(queue_pk))
}

fn entry_sk(id: &str) -> String {
    format!("E#{id}")
}

/// A stored registration.
#[derive(Debug, Clone, PartialEq)]
pub struct PushEntry {
    /// Its id (`pe_<uuid>`).
    pub id: String,
    /// The registration, with its secret.
    pub endpoint: PushEndpoint,
    /// When it was registered.
    pub created_at: String,
    /// The id of the API key that registered it (None: keys were off, or before keys
    /// were recorded).
    pub created_by: Option<String>,
    /// Why and when deliveries to it stopped (ojs-serverless.md §7.2: the endpoint
    /// answered 404, 401 or 403, which retrying cannot fix): `(at, reason)`.
    pub disabled: Option<(String, String)>,
}

impl PushEntry {
    /// The worker id its deliveries claim jobs under (the holder the ACK and FAIL of a
    /// delivery are fenced by).
    pub fn worker_id(&self) -> String {
        format!("push_{}", self.id)
    }

    /// The concurrency key of its in-flight deliveries.
    fn slot_policy(&self) -> RateLimitPolicy {
        RateLimitPolicy {
            key: format!("push:{}", self.id),
            concurrency: Some(self.endpoint.max_concurrency),
            rate: None,
            throttle: None,
            on_limit: OnLimit::Wait,
        }
    }

    fn to_item(&self, pk: String) -> Item {
        let e = &self.endpoint;
        let doc = json!({
            "endpoint": e.target.as_str(),
            "job_types": e.job_types.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            "queues": e.queues.iter().map(QueueName::as_str).collect::<Vec<_>>(),
            "config": {
                "max_concurrency": e.max_concurrency,
                "timeout_ms": e.timeout_ms,
                "signing_secret": e.signing_secret,
            },
        });
        let mut item = Item::from([
            ("pk".to_owned(), s(pk)),
            ("sk".to_owned(), s(entry_sk(&self.id))),
            ("id".to_owned(), s(self.id.clone())),
            ("doc".to_owned(), s(doc.to_string())),
            ("created_at".to_owned(), s(self.created_at.clone())),
        ]);
        if let Some(by) = &self.created_by {
            item.insert("created_by".to_owned(), s(by.clone()));
        }
        item
    }

    fn from_item(item: &Item) -> Result<Self, StoreError> {
        let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok());
        let doc: Value = get("doc")
            .and_then(|raw| serde_json::from_str(raw).ok())
            .ok_or_else(|| StoreError::Corrupt("push endpoint item without doc".into()))?;
        // Read back as registered: an address allowed then is not re-judged here (every
        // delivery checks the resolved address itself).
        let endpoint = PushEndpoint::from_json(&doc, true)
            .map_err(|e| StoreError::Corrupt(format!("push endpoint: {}", e.message)))?;
        Ok(Self {
            id: get("id").cloned().unwrap_or_default(),
            endpoint,
            created_at: get("created_at").cloned().unwrap_or_default(),
            created_by: get("created_by").cloned(),
            disabled: get("disabled_at").map(|at| {
                (
                    at.clone(),
                    get("disabled_reason").cloned().unwrap_or_default(),
                )
            }),
        })
    }
}

service! {
    /// Push endpoints: their registry, claims of jobs for delivery and the nudges of waiting jobs.
    PushEndpoints over engine: Engine
}

impl PushEndpoints<'_> {
    /// Stores a new registration under a fresh id: its listing item, one item per queue
    /// and the registry's count, in one transaction (2 + queues writes, after one Query of
    /// the listing). [`StoreError::LimitReached`] past [`MAX_PUSH_ENDPOINTS`];
    /// [`StoreError::Concurrent`] when another registration or deletion went first.
    pub async fn put(
        &self,
        endpoint: &PushEndpoint,
        created_by: Option<&str>,
        now: Timestamp,
    ) -> Result<PushEntry, StoreError> {
        let listed = self.list().await?.len();
        if listed >= MAX_PUSH_ENDPOINTS {
            return Err(StoreError::LimitReached(format!(
                "at most {MAX_PUSH_ENDPOINTS} push endpoints may be registered; delete one first"
            )));
        }
        let entry = PushEntry {
            id: format!("pe_{}", uuid::Uuid::now_v7()),
            endpoint: endpoint.clone(),
            created_at: time::format(&now),
            created_by: created_by.map(str::to_owned),
            disabled: None,
        };
        let mut items = Vec::new();
        for pk in entry_pks(&endpoint.queues) {
            items.push(self.engine.table.put_new(entry.to_item(pk))?);
        }
        items.push(self.count_update(listed, listed + 1)?);
        self.write_registry(items).await?;
        Ok(entry)
    }

    /// The registry count's move from `listed` (what the listing just found) to `to`.
    fn count_update(&self, listed: usize, to: usize) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(self.engine.table())
            .key("pk", s(COUNT_PK))
            .key("sk", s(COUNT_PK))
            .update_expression("SET n = :to")
            // A registry older than its count item counts from its listing.
            .condition_expression("attribute_not_exists(n) OR n = :listed")
            .expression_attribute_values(":to", item::n(to as i64))
            .expression_attribute_values(":listed", item::n(listed as i64))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Writes a registry transaction; a refused condition means another write of the
    /// registry went first.
    async fn write_registry(&self, items: Vec<TransactWriteItem>) -> Result<(), StoreError> {
        match self.engine.table.transact(items).await {
            Err(e) if crate::error::cancellation_codes(&e).is_some() => {
                Err(StoreError::Concurrent("the push endpoint registry".into()))
            }
            out => out.map(|_| ()).map_err(StoreError::from_sdk),
        }
    }

    /// The registration `id`, if any (one strongly consistent GetItem).
    pub async fn get(&self, id: &str) -> Result<Option<PushEntry>, StoreError> {
        ENDPOINTS.get(&self.engine.table, id).await
    }

    /// Every registration, oldest first (one strongly consistent Query; bounded by
    /// [`MAX_PUSH_ENDPOINTS`]).
    pub async fn list(&self) -> Result<Vec<PushEntry>, StoreError> {
        ENDPOINTS.list(&self.engine.table).await
    }

    /// The registrations serving `queue` (one Query of `PUSHQ#<queue>`: the dispatch
    /// path's lookup). Unreadable items are skipped with a warning.
    pub async fn of_queue(&self, queue: &QueueName) -> Result<Vec<PushEntry>, StoreError> {
        self.engine
            .table
            .list_readable(
                &queue_pk(queue),
                false,
                PushEntry::from_item,
                "push endpoint",
            )
            .await
    }

    /// Stops deliveries to `entry` (§7.2.2-3: it answered 404, 401 or 403): its listing
    /// and queue items record when and why, in one transaction (1 + queues writes). Its
    /// queues' jobs stay available to polling workers; registering it again resumes.
    pub async fn disable(
        &self,
        entry: &PushEntry,
        reason: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut items = Vec::new();
        for pk in entry_pks(&entry.endpoint.queues) {
            let update = Update::builder()
                .table_name(self.engine.table())
                .key("pk", s(pk))
                .key("sk", s(entry_sk(&entry.id)))
                .update_expression("SET disabled_at = :at, disabled_reason = :why")
                .condition_expression("attribute_exists(pk) AND attribute_not_exists(disabled_at)")
                .expression_attribute_values(":at", s(time::format(&now)))
                .expression_attribute_values(
                    ":why",
                    s(reason.chars().take(500).collect::<String>()),
                )
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            items.push(TransactWriteItem::builder().update(update).build());
        }
        match self.engine.table.transact(items).await {
            // Deleted meanwhile, or disabled by another delivery first: nothing to do.
            Err(e) if crate::error::cancellation_codes(&e).is_some() => Ok(()),
            out => out.map_err(StoreError::from_sdk),
        }
    }

    /// Removes registration `id` and its queue items in one transaction; NotFound when
    /// there is none. Deliveries in flight finish; no new one starts.
    pub async fn delete(&self, id: &str) -> Result<PushEntry, StoreError> {
        let listing = self.list().await?;
        let entry = listing
            .iter()
            .find(|e| e.id == id)
            .cloned()
            .ok_or_else(|| ENDPOINTS.not_found(id))?;
        let mut items = Vec::new();
        for pk in entry_pks(&entry.endpoint.queues) {
            let delete = Delete::builder()
                .table_name(self.engine.table())
                .key("pk", s(pk))
                .key("sk", s(entry_sk(id)))
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            items.push(TransactWriteItem::builder().delete(delete).build());
        }
        items.push(self.count_update(listing.len(), listing.len() - 1)?);
        self.write_registry(items).await?;
        Ok(entry)
    }
}
