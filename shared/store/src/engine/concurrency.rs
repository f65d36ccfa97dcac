//! Concurrency limits (`rate_limit.concurrency`): the jobs of a key that may be active
//! at once. One item per key, `RL#<key>` / `ACTIVE`, holds the active jobs as a map
//! `holders: {job id -> lease end (epoch µs)}` and a version `v`.
//!
//! - A claim reads the item, counts the holders whose lease has not ended, and (if
//!   below the limit) adds itself, drops ended holders and bumps `v`, conditioned on
//!   the `v` it read, in the same transaction as the claim: two claimers racing for the
//!   last slot cannot both win.
//! - Every transition out of `active` removes the job's holder entry; a heartbeat
//!   extends it first.
//! - A worker that dies never releases: its entry ends with its lease, the same moment
//!   the job itself becomes reclaimable, so a crash holds a slot for at most one lease.
//!
//! A tenant's `max_concurrency` (ojs-multi-tenancy.md §8.1) is such a key,
//! `RL#tenant#{id}`, taken by every claim of the tenant's jobs while its settings (as
//! this instance remembers them, [`crate::StoreConfig::queue_settings_ttl`]) set one.
//! Releases and heartbeats follow the settings too: a limit set while jobs were active
//! finds them holding nothing (a failed conditional write each), and one removed leaves
//! its holders to end with their leases.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::builders::UpdateBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, Update};
use ojs_core::rate_limit::{OnLimit, RateLimitPolicy};
use ojs_core::tenant::{self, TenantId};
use ojs_core::time::Timestamp;
use ojs_core::Job;

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{item_key, n, Item};
use crate::usage::Kind;

/// How many times [`Engine::take_slot`] reads a slot item again after losing its version
/// to a racing taker.
const TAKE_ROUNDS: usize = 5;

fn holders_key(key: &str) -> Item {
    item_key(format!("RL#{key}"), "ACTIVE")
}

/// What a claim found for one concurrency-limited key.
pub(crate) enum Slot {
    /// A slot is free: add this update to the claim's transaction.
    Free(Box<Update>),
    /// Every slot is held; the earliest holder's lease ends at this time (µs).
    Full { frees_at_us: Option<i64> },
}

/// The concurrency policy of a job, if its rate limit has one.
pub(crate) fn policy_of(job: &Job) -> Option<RateLimitPolicy> {
    job.spec
        .rate_limit
        .as_ref()
        .and_then(|rl| RateLimitPolicy::from_stored(rl, job.spec.queue.as_str()).ok())
        .filter(|p| p.concurrency.is_some())
}

/// The holders a holders item lists (job id, lease end in µs); none without the item.
fn holders_of(item: Option<&Item>) -> HashMap<String, i64> {
    item.and_then(|i| i.get("holders"))
        .and_then(|h| h.as_m().ok())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_n().ok()?.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// `update` adding `job_id` to a holders item at version `v`, whose `holders` were read.
/// Ended holders are dropped while we hold the version that saw them.
fn join_holders(
    mut update: UpdateBuilder,
    v: String,
    holders: &HashMap<String, i64>,
    job_id: &str,
    lease_until_us: i64,
    now_us: i64,
) -> UpdateBuilder {
    let ended: Vec<&String> = holders
        .iter()
        .filter(|(id, until)| **until <= now_us && id.as_str() != job_id)
        .map(|(id, _)| id)
        .collect();
    let mut expression = "SET holders.#me = :lease, v = v + :one".to_owned();
    if !ended.is_empty() {
        let names: Vec<String> = (0..ended.len()).map(|i| format!("holders.#e{i}")).collect();
        expression.push_str(&format!(" REMOVE {}", names.join(", ")));
    }
    for (i, id) in ended.iter().enumerate() {
        update = update.expression_attribute_names(format!("#e{i}"), (*id).clone());
    }
    update
        .update_expression(expression)
        .condition_expression("v = :v")
        .expression_attribute_names("#me", job_id)
        .expression_attribute_values(":lease", n(lease_until_us))
        .expression_attribute_values(":v", AttributeValue::N(v))
        .expression_attribute_values(":one", n(1))
}

impl Engine {
    /// The concurrency policy of `tenant`'s `max_concurrency`, when its settings have one
    /// (remembered per instance; the default tenant has no settings).
    pub(crate) async fn tenant_slot_policy(
        &self,
        tenant: Option<&TenantId>,
    ) -> Result<Option<RateLimitPolicy>, StoreError> {
        let Some(tenant) = tenant else {
            return Ok(None);
        };
        let configs = self.tenant_configs(&[tenant]).await?;
        Ok(configs
            .get(tenant.as_str())
            .and_then(|c| c.max_concurrency)
            .map(|limit| RateLimitPolicy {
                key: tenant::concurrency_key(tenant),
                concurrency: Some(limit),
                rate: None,
                throttle: None,
                on_limit: OnLimit::Wait,
            }))
    }

    /// The slot keys `job` holds while active: its own rate limit's and its tenant's.
    async fn slot_keys_of(&self, job: &Job) -> Vec<String> {
        let mut keys: Vec<String> = policy_of(job).map(|p| p.key).into_iter().collect();
        match self.tenant_slot_policy(job.tenant().as_ref()).await {
            Ok(Some(p)) => keys.push(p.key),
            Ok(None) => {}
            // Its slot then frees at lease end.
            Err(e) => {
                tracing::warn!(job_id = %job.id, error = %e, "tenant settings unread; its slot is left to its lease")
            }
        }
        keys
    }

    /// Reads `policy`'s holders and prepares the update taking a slot for `job_id` until
    /// `lease_until_us` (one strongly consistent GetItem).
    pub(crate) async fn concurrency_slot(
        &self,
        policy: &RateLimitPolicy,
        job_id: &str,
        lease_until_us: i64,
        now_us: i64,
    ) -> Result<Slot, StoreError> {
        let limit = policy.concurrency.unwrap_or(u32::MAX) as usize;
        let item = self.table.read_item(holders_key(&policy.key)).await?;
        let holders = holders_of(item.as_ref());
        let live: Vec<i64> = holders
            .iter()
            .filter(|(id, until)| **until > now_us && id.as_str() != job_id)
            .map(|(_, until)| *until)
            .collect();
        if live.len() >= limit {
            return Ok(Slot::Full {
                frees_at_us: live.iter().min().copied(),
            });
        }
        let version = item
            .as_ref()
            .and_then(|i| i.get("v"))
            .and_then(|v| v.as_n().ok())
            .cloned();
        let update = Update::builder()
            .table_name(self.table())
            .set_key(Some(holders_key(&policy.key)));
        let has_holders = item.as_ref().is_some_and(|i| i.contains_key("holders"));
        let first_holder =
            || AttributeValue::M(HashMap::from([(job_id.to_owned(), n(lease_until_us))]));
        let update = match version {
            // The last holder removed the map (release_holder): a new one, on the version.
            Some(v) if !has_holders => update
                .update_expression("SET holders = :holders, v = v + :one")
                .condition_expression("v = :v")
                .expression_attribute_values(":holders", first_holder())
                .expression_attribute_values(":v", AttributeValue::N(v))
                .expression_attribute_values(":one", n(1)),
            None => update
                .update_expression("SET holders = :holders, v = :one")
                .condition_expression("attribute_not_exists(pk)")
                .expression_attribute_values(":holders", first_holder())
                .expression_attribute_values(":one", n(1)),
            Some(v) => join_holders(update, v, &holders, job_id, lease_until_us, now_us),
        };
        update
            .build()
            .map(|u| Slot::Free(Box::new(u)))
            .map_err(|e| StoreError::Backend(e.to_string()))
    }

    /// Takes a slot of `policy` for `holder` until `lease_until_us` on its own (one
    /// GetItem, one conditional UpdateItem), outside any claim transaction: push delivery
    /// takes its endpoint's slot first, then claims the job with a plain conditional write,
    /// and gives the slot back if the claim loses. False when every slot is held.
    pub(crate) async fn take_slot(
        &self,
        policy: &RateLimitPolicy,
        holder: &str,
        lease_until_us: i64,
        now_us: i64,
    ) -> Result<bool, StoreError> {
        // A racing taker moving the version is not a full endpoint: read again.
        for _ in 0..TAKE_ROUNDS {
            if let Some(taken) = self
                .try_take_slot(policy, holder, lease_until_us, now_us)
                .await?
            {
                return Ok(taken);
            }
        }
        Ok(false)
    }

    /// One round of [`Engine::take_slot`]: `None` when a racing taker won the version.
    async fn try_take_slot(
        &self,
        policy: &RateLimitPolicy,
        holder: &str,
        lease_until_us: i64,
        now_us: i64,
    ) -> Result<Option<bool>, StoreError> {
        let Slot::Free(update) = self
            .concurrency_slot(policy, holder, lease_until_us, now_us)
            .await?
        else {
            return Ok(Some(false));
        };
        // A racing taker moved the version: `None`, read again.
        Ok(self.table.update_alone(&update).await?.map(|()| true))
    }

    /// Gives back `job`'s slots, if its rate limit or its tenant has a concurrency
    /// limit: every transition out of `active` does (ACK, FAIL, CANCEL, and the timeout
    /// and lease-end paths, review #17). `attempt_lease_us` is the lease of the attempt
    /// that ends, when the job may be claimed again at once (a retry without delay): the
    /// entry is removed only while it is that attempt's, never the next one's. Best
    /// effort: if this fails, the slot frees itself when the lease ends.
    pub(crate) async fn release_slot(&self, job: &Job, attempt_lease_us: Option<i64>) {
        for key in self.slot_keys_of(job).await {
            self.release_holder(&key, &job.id.to_string(), attempt_lease_us)
                .await;
        }
    }

    /// Removes `holder` from `key`'s holders (only while its lease is `lease_us`, when
    /// given). The last holder removes the whole map rather than leaving it empty:
    /// DynamoDB Local's stream renders an empty map as `{}`, which no SDK can read, and
    /// one such record would stop the in-process stream consumer. One UpdateItem when
    /// others hold slots, two when it was the last.
    pub(crate) async fn release_holder(&self, key: &str, holder: &str, lease_us: Option<i64>) {
        for (expression, size) in [
            ("REMOVE holders.#job", "size(holders) > :one"),
            ("REMOVE holders SET v = v + :one", "size(holders) = :one"),
        ] {
            let mut condition = format!("attribute_exists(holders.#job) AND {size}");
            let mut req = self
                .table
                .update_at(holders_key(key))
                .update_expression(expression)
                .expression_attribute_names("#job", holder)
                .expression_attribute_values(":one", n(1));
            if let Some(lease) = lease_us {
                condition.push_str(" AND holders.#job = :lease");
                req = req.expression_attribute_values(":lease", n(lease));
            }
            let out = req.condition_expression(condition).send().await;
            match self.table.tally_conditional(Kind::Write, out) {
                Ok(Some(_)) => return,
                // Its condition failed: the next expression, if any.
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%key, %holder, error = %e, "concurrency slot not released; it frees at lease end");
                    return;
                }
            }
        }
    }

    /// Extends `job`'s slot to its new lease end (heartbeat), before the job's own lease
    /// is extended: a failure here fails the heartbeat, so a job never holds its lease
    /// longer than its slot (review #17: a slot that ended first let another job in). A
    /// slot that ended meanwhile (dropped by a claim once its lease was over) is not
    /// brought back.
    pub(crate) async fn extend_slot(
        &self,
        job: &Job,
        lease_until: &Timestamp,
    ) -> Result<(), StoreError> {
        for key in self.slot_keys_of(job).await {
            let out = self
                .table
                .update_at(holders_key(&key))
                .update_expression("SET holders.#job = :lease")
                .condition_expression("attribute_exists(holders.#job)")
                .expression_attribute_names("#job", job.id.to_string())
                .expression_attribute_values(":lease", n(lease_until.timestamp_micros()))
                .send()
                .await;
            if !self.table.took(out)? {
                tracing::warn!(job_id = %job.id, %key, "concurrency slot already ended; the lease is extended alone");
            }
        }
        Ok(())
    }
}
