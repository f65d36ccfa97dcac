//! Idempotency keys of PUSH and batch PUSH: one item per key and API key
//! (`IDEM#<API key id>/<key>`, its own partition), kept for [`ojs_core::idempotency::WINDOW_SECS`] by the table's TTL.
//!
//! The item is claimed before the jobs are written and names their ids, so every try of
//! one request makes the same jobs: a job's write is conditional on its id being new, so
//! a try after a lost answer, a try racing the first, and a try after a process died
//! between the claim and the answer all end with the one set of jobs the claim names. The
//! answer (its status and the ids it answered with: a unique job's `ignore` answers with
//! the job already there) is recorded when it is known, and replayed after.

use ojs_core::idempotency::{IdempotencyKey, WINDOW_SECS};
use ojs_core::time::Timestamp;
use ojs_core::JobId;

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{item_key, job_id_list, job_ids_of, n, s, ts, Item};
use crate::usage::Kind;

/// What an idempotency key's item says about a request that carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyClaim {
    /// The key is new (or its window ended): the request runs and its jobs keep the ids
    /// it claimed.
    Fresh,
    /// The same request (same body) was answered: its status and the jobs it answered
    /// with, in order.
    Answered {
        /// The first answer's status (201, or 200 for a unique job's `ignore`).
        status: u16,
        /// The ids of its jobs.
        ids: Vec<JobId>,
    },
    /// The same request is under way, or died before its answer was recorded: it runs
    /// again with the ids the first try claimed, so it makes (or finds) the same jobs.
    Unfinished {
        /// The ids the first try claimed.
        ids: Vec<JobId>,
    },
    /// Another request body used the key within its window.
    Reused,
}

fn key_item(key: &IdempotencyKey) -> Item {
    item_key(key.partition(), "IDEM")
}

service! {
    /// Idempotency keys of PUSH and batch PUSH.
    IdempotencyKeys over engine: Engine
}

impl IdempotencyKeys<'_> {
    /// Reserves `key` for a request whose body has `fingerprint` and whose jobs will have
    /// `ids`: one conditional PutItem, and a strongly consistent GetItem when the key is
    /// taken.
    pub async fn reserve(
        &self,
        key: &IdempotencyKey,
        fingerprint: &str,
        ids: &[JobId],
        now: Timestamp,
    ) -> Result<KeyClaim, StoreError> {
        // Twice at most: a key found taken and then gone was let go by a refused try.
        for _ in 0..2 {
            if let Some(claim) = self.try_claim(key, fingerprint, ids, now).await? {
                return Ok(claim);
            }
        }
        Err(StoreError::Concurrent(format!(
            "idempotency key {:?}",
            key.as_str()
        )))
    }

    /// One claim of `key`: `None` when it was taken and then let go before it was read.
    async fn try_claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &str,
        ids: &[JobId],
        now: Timestamp,
    ) -> Result<Option<KeyClaim>, StoreError> {
        let out = self
            .engine
            .table
            .put_item()
            .set_item(Some(key_item(key)))
            .item("fp", s(fingerprint))
            .item("ids", job_id_list(ids))
            .item("created_at", ts(&now))
            .item(crate::schema::TTL_ATTRIBUTE, n(key_expiry(now)))
            // A key whose window ended may still be there: TTL deletes it within days.
            .condition_expression("attribute_not_exists(pk) OR #ttl < :now")
            .expression_attribute_names("#ttl", crate::schema::TTL_ATTRIBUTE)
            .expression_attribute_values(":now", n(now.timestamp()))
            .send()
            .await;
        if self.engine.table.took(out)? {
            return Ok(Some(KeyClaim::Fresh));
        }
        let Some(item) = self.engine.table.read_item(key_item(key)).await? else {
            return Ok(None);
        };
        if item
            .get("fp")
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
            != Some(fingerprint)
        {
            return Ok(Some(KeyClaim::Reused));
        }
        let status = item
            .get("status")
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<u16>().ok());
        Ok(Some(match status {
            Some(status) => KeyClaim::Answered {
                status,
                ids: if item.contains_key("answer_ids") {
                    job_ids_of(&item, "answer_ids")
                } else {
                    job_ids_of(&item, "ids")
                },
            },
            None => KeyClaim::Unfinished {
                ids: job_ids_of(&item, "ids"),
            },
        }))
    }

    /// Records the answer a request under `key` gave (`status`, and the ids of the jobs
    /// it answered with when they are not the ones it claimed: a unique job's `ignore`
    /// answers with the job already there), for its replays. One UpdateItem, which keeps
    /// a batch's claimed ids once, not twice.
    pub async fn record_answer(
        &self,
        key: &IdempotencyKey,
        status: u16,
        other_ids: Option<&[JobId]>,
    ) -> Result<(), StoreError> {
        let req = self
            .engine
            .table
            .update_at(key_item(key))
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":status", n(status));
        let req = match other_ids {
            Some(ids) => req
                .update_expression("SET #status = :status, answer_ids = :ids")
                .expression_attribute_values(":ids", job_id_list(ids)),
            None => req.update_expression("SET #status = :status"),
        };
        let out = req.send().await;
        self.engine.table.tally_conditional(Kind::Write, out)?;
        Ok(())
    }

    /// Lets `key` go after its request was refused (a 4xx: nothing was written), so that
    /// the request, corrected, can be sent again under the same key; only while no answer
    /// is recorded and the key is still this body's. One conditional DeleteItem.
    pub async fn release(&self, key: &IdempotencyKey, fingerprint: &str) -> Result<(), StoreError> {
        let out = self
            .engine
            .table
            .delete_at(key_item(key))
            .condition_expression("fp = :fp AND attribute_not_exists(#status)")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":fp", s(fingerprint))
            .send()
            .await;
        self.engine.table.tally_conditional(Kind::Write, out)?;
        Ok(())
    }
}

/// Seconds since the epoch at which a key claimed `now` is forgotten.
pub fn key_expiry(now: Timestamp) -> i64 {
    now.timestamp() + WINDOW_SECS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_lives_in_its_own_partition() {
        let k = IdempotencyKey::parse("batch-42", "h").unwrap_or_else(|e| panic!("{e}"));
        let item = key_item(&k);
        assert_eq!(item["pk"], s("IDEM#/batch-42"));
        assert_eq!(item["sk"], s("IDEM"));
    }

    #[test]
    fn a_key_is_kept_for_its_window() {
        let now = ojs_core::time::now();
        assert_eq!(key_expiry(now) - now.timestamp(), 86_400);
    }
}
