//! Webhook subscriptions (ojs-webhooks.md §6), their pending retries (§7.2) and their
//! delivery log.
//!
//! - Subscriptions: one item each in the `WEBHOOKS` partition (sort key `S#<id>`), at most
//!   [`MAX_SUBSCRIPTIONS`]: the API and the dispatcher list them with one Query of that
//!   small partition, never a Scan. The signing secret is an attribute of its own, never
//!   part of [`WebhookEntry::view`].
//! - Retries: a failed attempt that may be retried becomes an item of `WHDUE` whose sort
//!   key starts with its due time, so the sweep's redrive finds the due ones with one
//!   Query (`sk <= now`). Claimed by a conditional UpdateItem (a lease), deleted when the
//!   attempt ends: a process dying mid-attempt leaves it to the next redrive after the
//!   lease. Only failed deliveries are written there; a first attempt that succeeds costs
//!   no write but its log line.
//! - Log: one item per attempt in `WHLOG#<subscription id>` (sort key: the delivery id, a
//!   UUIDv7, then the attempt), expired by TTL after [`LOG_RETENTION_SECS`].

mod delivery_log;
mod retries;

pub use delivery_log::{
    DeadDelivery, DeliveryAttempt, LOG_RETENTION_SECS, MAX_KEPT_BODY, MAX_LOG_PAGE,
};
pub use ojs_core::webhook::MAX_SUBSCRIPTIONS;
pub use retries::PendingDelivery;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use ojs_core::tenant::{Scope, TenantId};
use ojs_core::time::{self, Timestamp};
use ojs_core::webhook::Subscription;
use serde_json::Value;

use crate::engine::Engine;
use crate::error::{Missing, StoreError};
use crate::item::{n, s, Item};
use crate::registry::Registry;
use crate::usage::Kind;

/// Every subscription, by id.
const SUBSCRIPTIONS: Registry<WebhookEntry> = Registry {
    pk: "WEBHOOKS",
    sk: |id| format!("S#{id}"),
    read: WebhookEntry::from_item,
    missing: Missing::Webhook,
};

fn get<'a>(item: &'a Item, k: &str) -> Option<&'a String> {
    item.get(k).and_then(|v| v.as_s().ok())
}

fn get_n(item: &Item, k: &str) -> Option<i64> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// The item at `key` of delivery `delivery_id` (of an `event_type` event to subscription
/// `subscription_id`) with `more`: the attributes the delivery log and a pending retry
/// both name a delivery by, then their own.
fn delivery_item<const N: usize>(
    key: Item,
    (delivery_id, subscription_id, event_type): (&str, &str, &str),
    more: [(&str, AttributeValue); N],
) -> Item {
    let named = [
        ("delivery_id", s(delivery_id)),
        ("subscription_id", s(subscription_id)),
        ("event_type", s(event_type)),
    ];
    let mut item = key;
    item.extend(
        named
            .into_iter()
            .chain(more)
            .map(|(k, v)| (k.to_owned(), v)),
    );
    item
}

/// A stored subscription.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookEntry {
    /// `sub_<uuidv7>`.
    pub id: String,
    /// The subscription.
    pub subscription: Subscription,
    /// The signing secret.
    pub secret: String,
    /// The secret before the last rotation and until when (Unix seconds) deliveries are
    /// signed with it too (§8.3).
    pub previous_secret: Option<(String, i64)>,
    /// When it was created.
    pub created_at: String,
    /// The id of the API key that created it (None: keys were off, or before keys were
    /// recorded).
    pub created_by: Option<String>,
    /// The tenant whose jobs' events it receives, set by the request that created it
    /// (its key's tenant, or its `X-OJS-Tenant`; ojs-webhooks.md §9.3), never changed:
    /// [`Scope::Any`] for an operator's, which receives every tenant's.
    pub tenant: Scope,
    /// When it was last changed.
    pub updated_at: String,
}

impl WebhookEntry {
    /// Whether a request acting for `scope` may see and manage it: an operator's request
    /// (any tenant) every subscription, a tenant's only those it created.
    pub fn visible_to(&self, scope: &Scope) -> bool {
        matches!(scope, Scope::Any) || *scope == self.tenant
    }

    /// Whether it receives an event of a job of `tenant` (`None`: the default tenant).
    pub fn receives_tenant(&self, tenant: Option<&TenantId>) -> bool {
        self.tenant.sees(tenant)
    }

    /// The secrets deliveries are signed with at `now` (Unix seconds): the current one,
    /// and the previous one during its transition period.
    pub fn signing_secrets(&self, now_secs: i64) -> Vec<&str> {
        let mut out = vec![self.secret.as_str()];
        if let Some((old, until)) = &self.previous_secret {
            if *until > now_secs {
                out.push(old);
            }
        }
        out
    }

    fn to_item(&self) -> Item {
        let mut item = SUBSCRIPTIONS.key(&self.id);
        item.extend([
            ("id".to_owned(), s(self.id.clone())),
            ("doc".to_owned(), s(self.subscription.to_doc().to_string())),
            ("secret".to_owned(), s(self.secret.clone())),
            ("created_at".to_owned(), s(self.created_at.clone())),
            ("updated_at".to_owned(), s(self.updated_at.clone())),
        ]);
        if let Some((old, until)) = &self.previous_secret {
            item.insert("prev_secret".into(), s(old.clone()));
            item.insert("prev_until".into(), n(until));
        }
        if let Some(by) = &self.created_by {
            item.insert("created_by".into(), s(by.clone()));
        }
        if let Scope::One(t) = &self.tenant {
            item.insert("tenant".into(), s(Scope::name(t.as_ref()).to_owned()));
        }
        item
    }

    fn from_item(item: &Item) -> Result<Self, StoreError> {
        let doc: Value = get(item, "doc")
            .and_then(|raw| serde_json::from_str(raw).ok())
            .ok_or_else(|| StoreError::Corrupt("webhook subscription without doc".into()))?;
        let subscription = Subscription::from_doc(&doc)
            .map_err(|e| StoreError::Corrupt(format!("webhook subscription: {}", e.message)))?;
        Ok(Self {
            id: get(item, "id").cloned().unwrap_or_default(),
            subscription,
            secret: get(item, "secret").cloned().unwrap_or_default(),
            previous_secret: get(item, "prev_secret")
                .map(|p| (p.clone(), get_n(item, "prev_until").unwrap_or(0))),
            created_at: get(item, "created_at").cloned().unwrap_or_default(),
            created_by: get(item, "created_by").cloned(),
            tenant: match get(item, "tenant") {
                None => Scope::Any,
                Some(raw) => Scope::One(TenantId::parse(raw).map_err(|e| {
                    StoreError::Corrupt(format!("webhook subscription tenant: {}", e.message))
                })?),
            },
            updated_at: get(item, "updated_at").cloned().unwrap_or_default(),
        })
    }
}

service! {
    /// Webhook subscriptions, their pending retries and their delivery log.
    Webhooks over engine: Engine
}

impl Webhooks<'_> {
    /// Stores a new subscription (one conditional PutItem). The API refuses subscriptions
    /// past [`MAX_SUBSCRIPTIONS`] before calling this.
    pub async fn put(
        &self,
        subscription: &Subscription,
        secret: String,
        created_by: Option<&str>,
        tenant: &Scope,
        now: Timestamp,
    ) -> Result<WebhookEntry, StoreError> {
        let at = time::format(&now);
        let entry = WebhookEntry {
            id: format!("sub_{}", uuid::Uuid::now_v7()),
            subscription: subscription.clone(),
            secret,
            previous_secret: None,
            created_at: at.clone(),
            created_by: created_by.map(str::to_owned),
            tenant: tenant.clone(),
            updated_at: at,
        };
        let out = self
            .engine
            .table
            .put_item()
            .set_item(Some(entry.to_item()))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        self.engine.table.tally(Kind::Write, out)?;
        Ok(entry)
    }

    /// Subscription `id`, if any (one strongly consistent GetItem).
    pub async fn get(&self, id: &str) -> Result<Option<WebhookEntry>, StoreError> {
        SUBSCRIPTIONS.get(&self.engine.table, id).await
    }

    /// Every subscription, oldest first (one Query of one partition, bounded by
    /// [`MAX_SUBSCRIPTIONS`]). Unreadable items are skipped with a warning.
    pub async fn list(&self, consistent: bool) -> Result<Vec<WebhookEntry>, StoreError> {
        self.engine
            .table
            .list_readable(
                SUBSCRIPTIONS.pk,
                consistent,
                WebhookEntry::from_item,
                "webhook subscription",
            )
            .await
    }

    /// Replaces subscription `id`'s fields (its secret kept), on condition that it
    /// exists and, when `read_at` is given, was last changed then (a PATCH is a
    /// read-modify-write: a change made meanwhile is not overwritten): NotFound otherwise
    /// (the caller reads it again to tell a deletion from a change). One UpdateItem.
    pub async fn update(
        &self,
        id: &str,
        subscription: &Subscription,
        read_at: Option<&str>,
        now: Timestamp,
    ) -> Result<WebhookEntry, StoreError> {
        let (condition, prev) = match read_at {
            Some(at) => (
                "attribute_exists(pk) AND updated_at = :prev",
                Some(s(at.to_owned())),
            ),
            None => ("attribute_exists(pk)", None),
        };
        let req = self
            .engine
            .table
            .update_item()
            .update_expression("SET doc = :doc, updated_at = :at")
            .condition_expression(condition)
            .set_expression_attribute_values(
                prev.map(|p| std::collections::HashMap::from([(":prev".to_owned(), p)])),
            )
            .expression_attribute_values(":doc", s(subscription.to_doc().to_string()))
            .expression_attribute_values(":at", s(time::format(&now)));
        self.update_subscription(id, req).await
    }

    /// Gives subscription `id` the secret `secret`; the one it replaces keeps signing
    /// deliveries until `grace_until` (Unix seconds, §8.3). NotFound when there is none.
    pub async fn rotate_secret(
        &self,
        id: &str,
        secret: String,
        grace_until: i64,
        now: Timestamp,
    ) -> Result<WebhookEntry, StoreError> {
        let req = self
            .engine
            .table
            .update_item()
            .update_expression(
                "SET prev_secret = secret, prev_until = :until, secret = :new, updated_at = :at",
            )
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":until", n(grace_until))
            .expression_attribute_values(":new", s(secret))
            .expression_attribute_values(":at", s(time::format(&now)));
        self.update_subscription(id, req).await
    }

    /// Sends `req` (an UpdateItem conditional on the subscription existing) on
    /// subscription `id`'s item, and returns the subscription as written (NotFound
    /// naming it when the condition fails).
    async fn update_subscription(
        &self,
        id: &str,
        req: UpdateItemFluentBuilder,
    ) -> Result<WebhookEntry, StoreError> {
        let req = req.set_key(Some(SUBSCRIPTIONS.key(id)));
        let written = self
            .engine
            .table
            .update_returning(req)
            .await
            .map_err(SUBSCRIPTIONS.naming(id))?;
        WebhookEntry::from_item(&written.unwrap_or_default())
    }

    /// Deletes subscription `id` (NotFound when there is none). Its pending retries are
    /// dropped by the redrive, which finds no subscription for them (§6.5).
    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        self.engine
            .table
            .delete_existing(SUBSCRIPTIONS.key(id))
            .await
            .map_err(SUBSCRIPTIONS.naming(id))
    }
}
