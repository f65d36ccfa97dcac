//! The webhook delivery log: one item per attempt in `WHLOG#<subscription id>` (sort key:
//! the delivery id, a UUIDv7, then the attempt), expired by TTL after
//! [`LOG_RETENTION_SECS`].

use ojs_core::time::{self, Timestamp};
use serde_json::{json, Value};

use super::{delivery_item, get, get_n, Webhooks};
use crate::error::StoreError;
use crate::item::{item_key, n, s, Item};
use crate::usage::Kind;

/// How long an attempt's log item is kept (DynamoDB's TTL deletes it after).
pub const LOG_RETENTION_SECS: i64 = 7 * 86_400;
/// Most log items one listing returns.
pub const MAX_LOG_PAGE: usize = 100;
fn log_pk(subscription_id: &str) -> String {
    format!("WHLOG#{subscription_id}")
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

impl Webhooks<'_> {
    /// Logs one attempt (one PutItem, expired by TTL).
    pub async fn log_attempt(&self, a: &DeliveryAttempt, now: Timestamp) -> Result<(), StoreError> {
        let mut item = delivery_item(
            item_key(
                log_pk(&a.subscription_id),
                format!("{}#{:02}", a.delivery_id, a.attempt),
            ),
            (&a.delivery_id, &a.subscription_id, &a.event_type),
            [
                ("event_id", s(&a.event_id)),
                ("attempt", n(a.attempt)),
                ("duration_ms", n(a.duration_ms)),
                ("outcome", s(a.outcome)),
                ("at", s(time::format(&now))),
                ("ttl", n(now.timestamp() + LOG_RETENTION_SECS)),
            ],
        );
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
    pub async fn deliveries(
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
    pub async fn find_delivery(
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
}
