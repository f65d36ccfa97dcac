//! Pending webhook retries: a failed attempt that may be retried becomes an item of
//! `WHDUE` whose sort key starts with its due time, so the sweep's redrive finds the due
//! ones with one Query (`sk <= now`). Claimed by a conditional UpdateItem (a lease),
//! deleted when the attempt ends.

use ojs_core::time::Timestamp;

use super::{delivery_item, get, get_n, Webhooks};
use crate::error::StoreError;
use crate::item::{item_key, n, s, Item};
use crate::usage::Kind;

const DUE_PK: &str = "WHDUE";
/// How long a claimed retry is left alone before another redrive may take it: longer
/// than an attempt's timeout.
const RETRY_LEASE_US: i64 = 120_000_000;
/// A pending retry not taken within this long after its due time is dropped by TTL (the
/// last retry is due 41 h after the event).
const PENDING_TTL_SECS: i64 = 3 * 86_400;

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
        item_key(DUE_PK, self.sk())
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

impl Webhooks<'_> {
    /// Records a delivery's next attempt (one PutItem in `WHDUE`).
    pub async fn schedule_retry(&self, p: &PendingDelivery) -> Result<(), StoreError> {
        let item = delivery_item(
            p.key(),
            (&p.delivery_id, &p.subscription_id, &p.event_type),
            [
                ("body", s(&p.body)),
                ("attempt", n(p.attempt)),
                ("due_us", n(p.due_us)),
                ("ttl", n(p.due_us / 1_000_000 + PENDING_TTL_SECS)),
            ],
        );
        self.engine.table.put_plain(item).await
    }

    /// Up to `limit` retries due at `now`, each claimed for this caller (one Query, then
    /// one conditional UpdateItem each: a retry claimed by another redrive whose lease has
    /// not ended is skipped).
    pub async fn claim_due_retries(
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
                .engine.table.update_at(p.key())
                .update_expression("SET claimed_until = :until")
                .condition_expression(
                    "attribute_exists(pk) AND (attribute_not_exists(claimed_until) OR claimed_until < :now)",
                )
                .expression_attribute_values(":until", n(now_us + RETRY_LEASE_US))
                .expression_attribute_values(":now", n(now_us))
                .send()
                .await;
            // Taken by another redrive whose lease runs, or finished: skipped.
            if self.engine.table.took(claim)? {
                claimed.push(p);
            }
        }
        Ok(claimed)
    }

    /// Removes a pending retry once its attempt ended (one DeleteItem).
    pub async fn finish_retry(&self, p: &PendingDelivery) -> Result<(), StoreError> {
        let out = self.engine.table.delete_at(p.key()).send().await;
        self.engine.table.tally(Kind::Write, out).map(|_| ())
    }
}
