//! Queue registry: one small item per queue in the `QUEUES` partition, written once per
//! queue per cold start, so listing queues is a Query, never a Scan.

use std::collections::HashMap;
use std::time::Instant;

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use ojs_core::rate_limit::RateLimitPolicy;
use ojs_core::time::{self, Timestamp};

use crate::error::{is_condition_failure, StoreError};
use crate::item::{s, ts};
use crate::keys;
use crate::usage::Kind;
use crate::Store;

/// A queue as listed by `GET /ojs/v1/queues`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    /// Queue name.
    pub name: String,
    /// When the first job was pushed to it.
    pub created_at: String,
    /// Whether fetching is paused.
    pub paused: bool,
}

impl Store {
    /// Records that `queue` exists (idempotent; skipped when this instance already did).
    pub(crate) async fn register_queue(&self, queue: &str) -> Result<(), StoreError> {
        let known = self
            .known_queues
            .lock()
            .map(|set| set.contains(queue))
            .unwrap_or(false);
        if known {
            return Ok(());
        }
        let out = self
            .client
            .put_item()
            .table_name(self.table())
            .item("pk", s(keys::QUEUES_PK))
            .item("sk", s(keys::queue_sk(queue)))
            .item("name", s(queue))
            .item("created_at", ts(&time::now()))
            .condition_expression("attribute_not_exists(pk)")
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match out {
            Ok(out) => self.usage.record(Kind::Write, out.consumed_capacity()),
            Err(e) if is_condition_failure(&e) => self.usage.record(Kind::Write, None),
            Err(e) => {
                self.usage.record(Kind::Write, None);
                return Err(StoreError::from_sdk(e));
            }
        }
        if let Ok(mut set) = self.known_queues.lock() {
            set.insert(queue.to_owned());
        }
        Ok(())
    }

    /// Every known queue, sorted by name.
    pub async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError> {
        let items = self.query_partition(keys::QUEUES_PK, false).await?;
        Ok(items
            .iter()
            .filter_map(|item| {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
                Some(QueueInfo {
                    name: get("name")?,
                    created_at: get("created_at").unwrap_or_default(),
                    paused: item
                        .get("paused")
                        .and_then(|v| v.as_bool().ok())
                        .copied()
                        .unwrap_or(false),
                })
            })
            .collect())
    }
}

/// A queue's FETCH-time settings.
#[derive(Debug, Clone, Default)]
pub struct QueueSettings {
    /// Not fetched while paused.
    pub paused: bool,
    /// Limit on the queue's job starts, on top of each job's own.
    pub rate_limit: Option<RateLimitPolicy>,
}

/// Queue settings as last read, per queue name, with when they were read.
pub(crate) type SettingsCache = HashMap<String, (Instant, QueueSettings)>;

/// Most queues whose settings one instance remembers (the cache is emptied when full).
const SETTINGS_CACHE_CAP: usize = 10_000;

/// Per-queue job counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Ready to fetch.
    pub available: u64,
    /// Waiting for their time.
    pub scheduled: u64,
    /// Waiting for a retry.
    pub retryable: u64,
    /// Being worked on.
    pub active: u64,
    /// Finished successfully (since the counter was created).
    pub completed: u64,
    /// Failed for good.
    pub discarded: u64,
    /// Cancelled.
    pub cancelled: u64,
}

impl Store {
    /// Pauses or resumes a queue (creating its registry item if the queue is new).
    pub async fn set_paused(&self, queue: &str, paused: bool) -> Result<QueueInfo, StoreError> {
        let now = time::now();
        let out = self
            .client
            .update_item()
            .table_name(self.table())
            .key("pk", s(keys::QUEUES_PK))
            .key("sk", s(keys::queue_sk(queue)))
            .update_expression("SET #name = :name, created_at = if_not_exists(created_at, :now), paused = :paused, paused_at = :now")
            .expression_attribute_names("#name", "name")
            .expression_attribute_values(":name", s(queue))
            .expression_attribute_values(":now", ts(&now))
            .expression_attribute_values(":paused", aws_sdk_dynamodb::types::AttributeValue::Bool(paused))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let out = self.tally(Kind::Write, out)?;
        self.forget_queue_settings(queue);
        if let Ok(mut set) = self.known_queues.lock() {
            set.insert(queue.to_owned());
        }
        Ok(QueueInfo {
            name: queue.to_owned(),
            created_at: out
                .attributes()
                .and_then(|a| a.get("created_at"))
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default(),
            paused,
        })
    }

    /// Pause flag and queue-level rate limit of each of `queues`: remembered per instance
    /// for [`crate::StoreConfig::queue_settings_ttl`], otherwise one BatchGetItem
    /// (eventually consistent). A change made through another instance reaches every FETCH
    /// within that time plus replication (typically well under a second); one made through
    /// this instance at once.
    pub(crate) async fn queue_settings(
        &self,
        queues: &[ojs_core::QueueName],
    ) -> Result<HashMap<String, QueueSettings>, StoreError> {
        let ttl = self.config.queue_settings_ttl;
        let now = Instant::now();
        let mut found = HashMap::new();
        let mut missing = Vec::new();
        match self.settings_cache.lock() {
            Ok(cache) if !ttl.is_zero() => {
                for q in queues {
                    match cache.get(q.as_str()) {
                        Some((at, settings)) if now.duration_since(*at) < ttl => {
                            found.insert(q.as_str().to_owned(), settings.clone());
                        }
                        _ => missing.push(q.clone()),
                    }
                }
            }
            _ => missing = queues.to_vec(),
        }
        if missing.is_empty() {
            return Ok(found);
        }
        let read = self.read_queue_settings(&missing).await?;
        if !ttl.is_zero() {
            if let Ok(mut cache) = self.settings_cache.lock() {
                if cache.len() >= SETTINGS_CACHE_CAP {
                    cache.clear();
                }
                for q in &missing {
                    let settings = read.get(q.as_str()).cloned().unwrap_or_default();
                    cache.insert(q.as_str().to_owned(), (now, settings));
                }
            }
        }
        found.extend(read);
        Ok(found)
    }

    /// Forgets what this instance read of a queue's settings, after changing them.
    fn forget_queue_settings(&self, queue: &str) {
        if let Ok(mut cache) = self.settings_cache.lock() {
            cache.remove(queue);
        }
    }

    /// One BatchGetItem of the settings of `queues` (queues without an item are absent).
    async fn read_queue_settings(
        &self,
        queues: &[ojs_core::QueueName],
    ) -> Result<HashMap<String, QueueSettings>, StoreError> {
        let keys: Vec<_> = queues
            .iter()
            .map(|q| {
                std::collections::HashMap::from([
                    ("pk".to_owned(), s(keys::QUEUES_PK)),
                    ("sk".to_owned(), s(keys::queue_sk(q.as_str()))),
                ])
            })
            .collect();
        if keys.is_empty() {
            return Ok(Default::default());
        }
        let ka = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .projection_expression("#name, paused, rl")
            .expression_attribute_names("#name", "name")
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let out = self
            .client
            .batch_get_item()
            .request_items(self.table(), ka)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let out = self.tally(Kind::Read, out)?;
        Ok(out
            .responses()
            .and_then(|r| r.get(self.table()))
            .into_iter()
            .flatten()
            .filter_map(|i| {
                let name = i.get("name").and_then(|v| v.as_s().ok())?.clone();
                let paused = i
                    .get("paused")
                    .and_then(|v| v.as_bool().ok())
                    .copied()
                    .unwrap_or(false);
                let rate_limit = i
                    .get("rl")
                    .and_then(|v| v.as_s().ok())
                    .and_then(|raw| serde_json::from_str(raw).ok())
                    .and_then(|v| RateLimitPolicy::from_json(&v, &name).ok());
                Some((name, QueueSettings { paused, rate_limit }))
            })
            .collect())
    }

    /// Sets (or with `None` removes) a queue-level rate limit; every job of the queue must
    /// fit it in addition to its own.
    pub async fn set_queue_rate_limit(
        &self,
        queue: &str,
        policy: Option<&RateLimitPolicy>,
    ) -> Result<(), StoreError> {
        let now = time::now();
        let mut req = self
            .client
            .update_item()
            .table_name(self.table())
            .key("pk", s(keys::QUEUES_PK))
            .key("sk", s(keys::queue_sk(queue)))
            .expression_attribute_names("#name", "name")
            .expression_attribute_values(":name", s(queue))
            .expression_attribute_values(":now", ts(&now))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        req = match policy {
            Some(p) => req
                .update_expression(
                    "SET #name = :name, created_at = if_not_exists(created_at, :now), rl = :rl",
                )
                .expression_attribute_values(":rl", crate::item::json(&p.to_json())),
            None => req.update_expression(
                "SET #name = :name, created_at = if_not_exists(created_at, :now) REMOVE rl",
            ),
        };
        let out = req.send().await;
        self.tally(Kind::Write, out)?;
        self.forget_queue_settings(queue);
        Ok(())
    }

    /// The state of a rate limit's first window at `now`: (limit, starts left, window end).
    pub(crate) async fn window_state(
        &self,
        policy: &RateLimitPolicy,
        now: Timestamp,
    ) -> Result<Option<(u32, u32, Timestamp)>, StoreError> {
        let Some((window, limit, end_us)) =
            policy.windows(now.timestamp_micros()).into_iter().next()
        else {
            return Ok(None);
        };
        let out = self
            .client
            .get_item()
            .table_name(self.table())
            .key("pk", s(format!("RL#{}", policy.key)))
            .key("sk", s(format!("W#{window}")))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let out = self.tally(Kind::Read, out)?;
        let used = out
            .item()
            .and_then(|i| i.get("starts"))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0);
        Ok(time::from_micros(end_us).map(|end| (limit, limit.saturating_sub(used), end)))
    }

    /// Counts for one queue: live states from the sparse indexes (a COUNT Query of the
    /// ready index and a keys-and-state Query of the due index), terminal states from
    /// atomic counters added by each terminal transition. A sharded queue is counted shard
    /// by shard.
    pub async fn queue_stats(&self, queue: &ojs_core::QueueName) -> Result<QueueStats, StoreError> {
        let mut stats = QueueStats::default();
        for shard in 0..self.queue_shards() {
            self.count_live(queue, shard, &mut stats).await?;
        }
        self.count_finished(queue, &mut stats).await?;
        Ok(stats)
    }

    /// Adds one shard's live jobs to `stats`.
    async fn count_live(
        &self,
        queue: &ojs_core::QueueName,
        shard: u16,
        stats: &mut QueueStats,
    ) -> Result<(), StoreError> {
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(self.table())
                .index_name(crate::schema::READY_INDEX.name)
                .key_condition_expression("gsi1pk = :pk")
                .expression_attribute_values(":pk", s(keys::ready_pk(queue, shard)))
                .select(aws_sdk_dynamodb::types::Select::Count)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            let out = self.tally(Kind::Read, out)?;
            stats.available += u64::try_from(out.count()).unwrap_or(0);
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        loop {
            let out = self
                .client
                .query()
                .table_name(self.table())
                .index_name(crate::schema::DUE_INDEX.name)
                .key_condition_expression("gsi2pk = :pk")
                .expression_attribute_values(":pk", s(keys::due_pk(queue, shard)))
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            let out = self.tally(Kind::Read, out)?;
            for i in out.items() {
                match i
                    .get("state")
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                {
                    Some("scheduled") => stats.scheduled += 1,
                    Some("retryable") => stats.retryable += 1,
                    Some("active") => stats.active += 1,
                    // An available job with an expiry also sits in the due index; it was
                    // counted from the ready index already.
                    _ => {}
                }
            }
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// Sets the terminal-state counts of `stats` from the queue's counters.
    async fn count_finished(
        &self,
        queue: &ojs_core::QueueName,
        stats: &mut QueueStats,
    ) -> Result<(), StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table())
            .key("pk", s(keys::QUEUES_PK))
            .key("sk", s(keys::queue_counts_sk(queue.as_str())))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        let out = self.tally(Kind::Read, out)?;
        if let Some(item) = out.item() {
            let get = |k: &str| {
                item.get(k)
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            stats.completed = get("completed");
            stats.discarded = get("discarded");
            stats.cancelled = get("cancelled");
        }
        Ok(())
    }

    /// Counts a terminal transition (`ADD`, never read-modify-write). Best effort: a
    /// failure is logged, the transition itself already happened.
    pub(crate) async fn count_terminal(&self, queue: &str, state: ojs_core::JobState) {
        let out = self
            .client
            .update_item()
            .table_name(self.table())
            .key("pk", s(keys::QUEUES_PK))
            .key("sk", s(keys::queue_counts_sk(queue)))
            .update_expression("ADD #state :one")
            .expression_attribute_names("#state", state.as_str())
            .expression_attribute_values(":one", crate::item::n(1))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match out {
            Ok(out) => self.usage.record(Kind::Write, out.consumed_capacity()),
            Err(e) => {
                self.usage.record(Kind::Write, None);
                tracing::warn!(error = %StoreError::from_sdk(e), queue, "terminal counter not updated");
            }
        }
    }
}
