//! FETCH's candidates: the ready index's entries of a lane's shard, read in index order
//! (priority, then FIFO).

use ojs_core::rate_limit::RateLimitPolicy;
use ojs_core::{JobId, QueueName};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{s, Item};
use crate::keys;
use crate::schema::READY_INDEX;

/// A ready-index entry.
pub(crate) struct Candidate {
    pub(crate) id: JobId,
    pub(crate) ready_sk: String,
    /// The job's own lease length, when it sets one.
    pub(super) lease_ms: Option<u64>,
    /// The job's execution timeout, when it has one.
    pub(super) timeout_ms: Option<u64>,
    /// The job's rate limit, when it has one.
    pub(super) rate_limit: Option<RateLimitPolicy>,
    /// Why the job cannot be claimed as stored (its rate limit no longer reads).
    pub(super) unreadable: Option<String>,
}

impl Candidate {
    /// A job the change stream saw become available, claimed for a push endpoint.
    pub(crate) fn for_push(
        id: JobId,
        ready_sk: String,
        timeout_ms: Option<u64>,
        rate_limit: Option<RateLimitPolicy>,
    ) -> Self {
        Self {
            id,
            ready_sk,
            lease_ms: None,
            timeout_ms,
            rate_limit,
            unreadable: None,
        }
    }

    /// The candidate a ready-index entry of `queue` lists, if it reads as one.
    fn of_entry(i: &Item, queue: &QueueName) -> Option<Self> {
        let num = |k: &str| {
            i.get(k)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok())
        };
        // A stored policy that no longer reads (rules tightened since it was stored)
        // must not silently become "no limit" (review #19h): the job is set aside like
        // any other item the server cannot read.
        let (rate_limit, unreadable) = match i.get("rl").and_then(|v| v.as_s().ok()) {
            None => (None, None),
            Some(raw) => match serde_json::from_str::<serde_json::Value>(raw)
                .map_err(|e| e.to_string())
                .and_then(|v| {
                    RateLimitPolicy::from_stored(&v, queue.as_str()).map_err(|e| e.message)
                }) {
                Ok(p) => (Some(p), None),
                Err(why) => (None, Some(format!("stored rate_limit: {why}"))),
            },
        };
        Some(Self {
            id: id_of(i)?,
            ready_sk: i.get("gsi1sk")?.as_s().ok()?.clone(),
            lease_ms: num("lease_ms"),
            timeout_ms: num("timeout_ms"),
            rate_limit,
            unreadable,
        })
    }
}

impl Engine {
    /// Up to `limit` entries of `lane`'s ready partition `shard`, in index order.
    pub(crate) async fn ready_candidates(
        &self,
        lane: &crate::keys::Lane,
        shard: u16,
        limit: i32,
    ) -> Result<Vec<Candidate>, StoreError> {
        // A page may come back short of `limit` (DynamoDB's 1 MB page): read on.
        let mut items = Vec::new();
        let query = self
            .table
            .query_index(&READY_INDEX)
            .key_condition_expression("gsi1pk = :pk")
            .expression_attribute_values(":pk", s(keys::ready_pk(lane, shard)));
        let mut pages = self.table.pages(query);
        let read = |items: &Vec<Item>| i32::try_from(items.len()).unwrap_or(limit);
        while let Some(out) = pages.next_limited(Some(limit - read(&items))).await? {
            items.extend(out.items().iter().cloned());
            if read(&items) >= limit {
                break;
            }
        }
        Ok(items
            .iter()
            .filter_map(|i| Candidate::of_entry(i, &lane.queue))
            .collect())
    }
}

/// The job a job item or index entry belongs to, by its key.
pub(crate) fn id_of(item: &Item) -> Option<JobId> {
    let pk = item.get("pk")?.as_s().ok()?;
    JobId::parse(pk.strip_prefix("JOB#")?).ok()
}
