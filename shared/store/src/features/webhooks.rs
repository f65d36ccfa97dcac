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

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValue;
use ojs_core::tenant::{Scope, TenantId};
use ojs_core::time::{self, Timestamp};
use ojs_core::webhook::Subscription;
use serde_json::{json, Value};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{n, s, Item};
use crate::usage::Kind;

pub use ojs_core::webhook::MAX_SUBSCRIPTIONS;

const SUBS_PK: &str = "WEBHOOKS";
const DUE_PK: &str = "WHDUE";
/// How long an attempt's log item is kept (DynamoDB's TTL deletes it after).
pub const LOG_RETENTION_SECS: i64 = 7 * 86_400;
/// Most log items one listing returns.
pub const MAX_LOG_PAGE: usize = 100;
/// How long a claimed retry is left alone before another redrive may take it: longer
/// than an attempt's timeout.
const RETRY_LEASE_US: i64 = 120_000_000;
/// A pending retry not taken within this long after its due time is dropped by TTL (the
/// last retry is due 41 h after the event).
const PENDING_TTL_SECS: i64 = 3 * 86_400;

fn sub_sk(id: &str) -> String {
    format!("S#{id}")
}

fn sub_key(id: &str) -> Item {
    Item::from([
        ("pk".to_owned(), s(SUBS_PK)),
        ("sk".to_owned(), s(sub_sk(id))),
    ])
}

fn log_pk(subscription_id: &str) -> String {
    format!("WHLOG#{subscription_id}")
}

fn get<'a>(item: &'a Item, k: &str) -> Option<&'a String> {
    item.get(k).and_then(|v| v.as_s().ok())
}

fn get_n(item: &Item, k: &str) -> Option<i64> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
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
    /// The API's view (§6.3): never the secret.
    pub fn view(&self) -> Value {
        let mut v = self.subscription.to_doc();
        if let Some(o) = v.as_object_mut() {
            o.insert("id".into(), json!(self.id));
            o.insert("created_at".into(), json!(self.created_at));
            o.insert("created_by".into(), json!(self.created_by));
            o.insert("updated_at".into(), json!(self.updated_at));
            if let Scope::One(t) = &self.tenant {
                o.insert("tenant_id".into(), json!(Scope::name(t.as_ref())));
            }
        }
        v
    }

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
        let mut item = Item::from([
            ("pk".to_owned(), s(SUBS_PK)),
            ("sk".to_owned(), s(sub_sk(&self.id))),
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

/// A delivery waiting for its next attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingDelivery {
    /// `del_<uuidv7>`, the same for every attempt (§7.5).
    pub delivery_id: String,
    /// The subscription it is for.
    pub subscription_id: String,
    /// The event type.
    pub event_type: String,
    /// The event envelope, as sent.
    pub body: String,
    /// The number of the next attempt (2 or more).
    pub attempt: u32,
    /// When it is due (Unix microseconds).
    pub due_us: i64,
}

impl PendingDelivery {
    fn sk(&self) -> String {
        format!("{:020}#{}", self.due_us.max(0), self.delivery_id)
    }

    fn key(&self) -> Item {
        Item::from([
            ("pk".to_owned(), s(DUE_PK)),
            ("sk".to_owned(), s(self.sk())),
        ])
    }

    fn from_item(item: &Item) -> Option<Self> {
        Some(Self {
            delivery_id: get(item, "delivery_id")?.clone(),
            subscription_id: get(item, "subscription_id")?.clone(),
            event_type: get(item, "event_type")?.clone(),
            body: get(item, "body")?.clone(),
            attempt: u32::try_from(get_n(item, "attempt")?).ok()?,
            due_us: get_n(item, "due_us")?,
        })
    }
}

/// One attempt of a delivery, as logged.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryAttempt {
    /// The delivery (stable across attempts).
    pub delivery_id: String,
    /// The subscription.
    pub subscription_id: String,
    /// The event type and the event's id.
    pub event_type: String,
    /// The event's id.
    pub event_id: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The endpoint's status code, if it answered.
    pub status_code: Option<u16>,
    /// How long the attempt took.
    pub duration_ms: u64,
    /// What went wrong (never a secret).
    pub error: Option<String>,
    /// `delivered`, `retrying`, `dead` or `cancelled`.
    pub outcome: &'static str,
    /// When the next attempt is due, when one is.
    pub next_attempt_at: Option<String>,
    /// The event as sent, kept on a dead delivery's last attempt (up to
    /// [`MAX_KEPT_BODY`] bytes) so it can be retried by hand (§7.2).
    pub body: Option<String>,
}

/// Largest event body kept with a dead delivery for its manual retry.
pub const MAX_KEPT_BODY: usize = 64 * 1024;

/// A dead delivery's last attempt, as a manual retry needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadDelivery {
    /// The subscription.
    pub subscription_id: String,
    /// The event type.
    pub event_type: String,
    /// The event as sent.
    pub body: String,
    /// The last attempt's number.
    pub attempt: u32,
}

impl DeliveryAttempt {
    fn view(item: &Item) -> Value {
        json!({
            "id": get(item, "delivery_id"),
            "subscription_id": get(item, "subscription_id"),
            "event_type": get(item, "event_type"),
            "event_id": get(item, "event_id"),
            "attempt": get_n(item, "attempt"),
            "status_code": get_n(item, "status_code"),
            "duration_ms": get_n(item, "duration_ms"),
            "error": get(item, "error"),
            "status": get(item, "outcome"),
            "next_attempt_at": get(item, "next_attempt_at"),
            "attempted_at": get(item, "at"),
            "replayable": item.contains_key("body"),
        })
    }
}

/// Webhook subscriptions, their pending retries and their delivery log.
pub struct Webhooks<'a> {
    engine: &'a Engine,
}

impl<'a> Webhooks<'a> {
    /// The service over `engine`.
    pub(crate) fn new(engine: &'a Engine) -> Self {
        Self { engine }
    }
}

impl Webhooks<'_> {
    /// Stores a new subscription (one conditional PutItem). The API refuses subscriptions
    /// past [`MAX_SUBSCRIPTIONS`] before calling this.
    pub async fn put_webhook(
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
    pub async fn get_webhook(&self, id: &str) -> Result<Option<WebhookEntry>, StoreError> {
        self.engine
            .table
            .read_item(sub_key(id))
            .await?
            .as_ref()
            .map(WebhookEntry::from_item)
            .transpose()
    }

    /// Every subscription, oldest first (one Query of one partition, bounded by
    /// [`MAX_SUBSCRIPTIONS`]). Unreadable items are skipped with a warning.
    pub async fn list_webhooks(&self, consistent: bool) -> Result<Vec<WebhookEntry>, StoreError> {
        let items = self
            .engine
            .table
            .query_partition(SUBS_PK, consistent)
            .await?;
        Ok(crate::item::readable_items(
            &items,
            WebhookEntry::from_item,
            "webhook subscription",
        ))
    }

    /// Replaces subscription `id`'s fields (its secret kept), on condition that it
    /// exists and, when `read_at` is given, was last changed then (a PATCH is a
    /// read-modify-write: a change made meanwhile is not overwritten): NotFound otherwise
    /// (the caller reads it again to tell a deletion from a change). One UpdateItem.
    pub async fn update_webhook(
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
    pub async fn rotate_webhook_secret(
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
    /// subscription `id`'s item, and returns the subscription as written.
    async fn update_subscription(
        &self,
        id: &str,
        req: UpdateItemFluentBuilder,
    ) -> Result<WebhookEntry, StoreError> {
        let out = req
            .set_key(Some(sub_key(id)))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let out = self.engine.table.tally_existing(Kind::Write, out)?;
        WebhookEntry::from_item(out.attributes().unwrap_or(&Item::new()))
    }

    /// Deletes subscription `id` (NotFound when there is none). Its pending retries are
    /// dropped by the redrive, which finds no subscription for them (§6.5).
    pub async fn delete_webhook(&self, id: &str) -> Result<(), StoreError> {
        let out = self
            .engine
            .table
            .delete_item()
            .set_key(Some(sub_key(id)))
            .condition_expression("attribute_exists(pk)")
            .send()
            .await;
        self.engine
            .table
            .tally_existing(Kind::Write, out)
            .map(|_| ())
    }

    /// Logs one attempt (one PutItem, expired by TTL).
    pub async fn log_webhook_attempt(
        &self,
        a: &DeliveryAttempt,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut item = Item::from([
            ("pk".to_owned(), s(log_pk(&a.subscription_id))),
            (
                "sk".to_owned(),
                s(format!("{}#{:02}", a.delivery_id, a.attempt)),
            ),
            ("delivery_id".to_owned(), s(a.delivery_id.clone())),
            ("subscription_id".to_owned(), s(a.subscription_id.clone())),
            ("event_type".to_owned(), s(a.event_type.clone())),
            ("event_id".to_owned(), s(a.event_id.clone())),
            ("attempt".to_owned(), n(a.attempt)),
            ("duration_ms".to_owned(), n(a.duration_ms)),
            ("outcome".to_owned(), s(a.outcome)),
            ("at".to_owned(), s(time::format(&now))),
            ("ttl".to_owned(), n(now.timestamp() + LOG_RETENTION_SECS)),
        ]);
        if let Some(code) = a.status_code {
            item.insert("status_code".into(), n(code));
        }
        if let Some(e) = &a.error {
            item.insert("error".into(), s(e.chars().take(500).collect::<String>()));
        }
        if let Some(at) = &a.next_attempt_at {
            item.insert("next_attempt_at".into(), s(at.clone()));
        }
        if let Some(body) = a.body.as_ref().filter(|b| b.len() <= MAX_KEPT_BODY) {
            item.insert("body".into(), s(body.clone()));
        }
        self.engine.table.put_plain(item).await
    }

    /// The latest attempts logged for subscription `id`, newest first (one Query of at
    /// most `limit` items, `limit` at most [`MAX_LOG_PAGE`]), and whether there are more
    /// (with the cursor to pass as `before`).
    pub async fn webhook_deliveries(
        &self,
        subscription_id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<(Vec<Value>, Option<String>), StoreError> {
        let limit = limit.clamp(1, MAX_LOG_PAGE);
        let mut req = self
            .engine
            .table
            .query_table()
            .expression_attribute_values(":pk", s(log_pk(subscription_id)))
            .scan_index_forward(false)
            .limit(i32::try_from(limit).unwrap_or(100))
            .consistent_read(true);
        req = match before {
            Some(b) => req
                .key_condition_expression("pk = :pk AND sk < :before")
                .expression_attribute_values(":before", s(b)),
            None => req.key_condition_expression("pk = :pk"),
        };
        let out = self.engine.table.tally(Kind::Read, req.send().await)?;
        let items = out.items();
        let next = out
            .last_evaluated_key()
            .and_then(|k| k.get("sk"))
            .and_then(|v| v.as_s().ok())
            .cloned();
        Ok((items.iter().map(DeliveryAttempt::view).collect(), next))
    }

    /// The attempts of delivery `delivery_id`, oldest first, looked for in the logs of
    /// `subscriptions` (one Query each, all at once, of the items of that delivery only;
    /// bounded by [`MAX_SUBSCRIPTIONS`]): its subscription, the attempts' views, and the
    /// last attempt as a manual retry needs it when the delivery is dead and its body
    /// was kept.
    pub async fn find_webhook_delivery(
        &self,
        delivery_id: &str,
        subscriptions: &[String],
    ) -> Result<Option<(String, Vec<Value>, Option<DeadDelivery>)>, StoreError> {
        let prefix = format!("{delivery_id}#");
        let lookups = subscriptions.iter().map(|sub| {
            let prefix = prefix.clone();
            async move {
                let items = self
                    .engine
                    .table
                    .query_partition_prefix(&log_pk(sub), Some(&prefix), true)
                    .await?;
                Ok::<_, StoreError>((sub.clone(), items))
            }
        });
        for found in futures::future::join_all(lookups).await {
            let (sub, items) = found?;
            let Some(last) = items.last() else {
                continue;
            };
            let dead = (get(last, "outcome").map(String::as_str) == Some("dead"))
                .then(|| {
                    Some(DeadDelivery {
                        subscription_id: sub.clone(),
                        event_type: get(last, "event_type")?.clone(),
                        body: get(last, "body")?.clone(),
                        attempt: u32::try_from(get_n(last, "attempt")?).ok()?,
                    })
                })
                .flatten();
            let views = items.iter().map(DeliveryAttempt::view).collect();
            return Ok(Some((sub, views, dead)));
        }
        Ok(None)
    }

    /// Records a delivery's next attempt (one PutItem in `WHDUE`).
    pub async fn schedule_webhook_retry(&self, p: &PendingDelivery) -> Result<(), StoreError> {
        let item = Item::from([
            ("pk".to_owned(), s(DUE_PK)),
            ("sk".to_owned(), s(p.sk())),
            ("delivery_id".to_owned(), s(p.delivery_id.clone())),
            ("subscription_id".to_owned(), s(p.subscription_id.clone())),
            ("event_type".to_owned(), s(p.event_type.clone())),
            ("body".to_owned(), s(p.body.clone())),
            ("attempt".to_owned(), n(p.attempt)),
            ("due_us".to_owned(), n(p.due_us)),
            ("ttl".to_owned(), n(p.due_us / 1_000_000 + PENDING_TTL_SECS)),
        ]);
        self.engine.table.put_plain(item).await
    }

    /// Up to `limit` retries due at `now`, each claimed for this caller (one Query, then
    /// one conditional UpdateItem each: a retry claimed by another redrive whose lease has
    /// not ended is skipped).
    pub async fn claim_due_webhook_retries(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<PendingDelivery>, StoreError> {
        let now_us = now.timestamp_micros();
        let out = self
            .engine
            .table
            .query_table()
            .key_condition_expression("pk = :pk AND sk < :upto")
            .expression_attribute_values(":pk", s(DUE_PK))
            // Every key due at or before now sorts below `<now + 1>#`.
            .expression_attribute_values(":upto", s(format!("{:020}#", now_us + 1)))
            .limit(i32::try_from(limit).unwrap_or(25))
            .send()
            .await;
        let out = self.engine.table.tally(Kind::Read, out)?;
        let mut claimed = Vec::new();
        for item in out.items() {
            let Some(p) = PendingDelivery::from_item(item) else {
                tracing::warn!("skipped an unreadable pending webhook delivery");
                continue;
            };
            let claim = self
                .engine.table.update_item()
                .set_key(Some(p.key()))
                .update_expression("SET claimed_until = :until")
                .condition_expression(
                    "attribute_exists(pk) AND (attribute_not_exists(claimed_until) OR claimed_until < :now)",
                )
                .expression_attribute_values(":until", n(now_us + RETRY_LEASE_US))
                .expression_attribute_values(":now", n(now_us))
                .send()
                .await;
            // Taken by another redrive whose lease runs, or finished: skipped.
            if self
                .engine
                .table
                .tally_conditional(Kind::Write, claim)?
                .is_some()
            {
                claimed.push(p);
            }
        }
        Ok(claimed)
    }

    /// Removes a pending retry once its attempt ended (one DeleteItem).
    pub async fn finish_webhook_retry(&self, p: &PendingDelivery) -> Result<(), StoreError> {
        let out = self
            .engine
            .table
            .delete_item()
            .set_key(Some(p.key()))
            .send()
            .await;
        self.engine.table.tally(Kind::Write, out).map(|_| ())
    }
}
