//! Queue registry: one small item per queue in the `QUEUES` partition, written once per
//! queue per cold start, so listing queues is a Query, never a Scan.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use ojs_core::backpressure::Backpressure;
use ojs_core::rate_limit::RateLimitPolicy;
use ojs_core::time::{self, Timestamp};

use crate::batch_read::BatchRead;
use crate::engine::remembered::Remembered;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{item_key, s, ts, Item};
use crate::keys;
use crate::usage::Kind;

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

impl Engine {
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
            .table
            .put_item()
            .item("pk", s(keys::QUEUES_PK))
            .item("sk", s(keys::queue_sk(queue)))
            .item("name", s(queue))
            .item("created_at", ts(&time::now()))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        // Registered already (by another instance): as good.
        self.table.tally_conditional(Kind::Write, out)?;
        if let Ok(mut set) = self.known_queues.lock() {
            set.insert(queue.to_owned());
        }
        Ok(())
    }

    /// Records that `lane` exists: its queue, and for a tenant's lane the tenant in the
    /// queue's `tenants` set (one UpdateItem, which also creates the queue's item), so a
    /// FETCH for any tenant and the counters' repair know where to read. Once per lane
    /// per cold start, like the queue.
    pub(crate) async fn register_lane(&self, lane: &keys::Lane) -> Result<(), StoreError> {
        // A job is coming: this instance's FETCH reads the lane in its turn again.
        self.quiet_lanes.forget(lane);
        let Some(tenant) = &lane.tenant else {
            return self.register_queue(lane.queue.as_str()).await;
        };
        let queue = lane.queue.as_str();
        let known_as = format!("{queue}\u{0}{tenant}");
        let known = self
            .known_queues
            .lock()
            .map(|set| set.contains(&known_as))
            .unwrap_or(false);
        if known {
            return Ok(());
        }
        let out = self
            .queue_update(queue, &time::now())
            .update_expression(
                "SET #name = :name, created_at = if_not_exists(created_at, :now) ADD tenants :tenant",
            )
            .expression_attribute_values(
                ":tenant",
                aws_sdk_dynamodb::types::AttributeValue::Ss(vec![tenant.to_string()]),
            )
            .send()
            .await;
        self.table.tally(Kind::Write, out)?;
        // This instance's next FETCH for any tenant reads the new lane at once.
        self.settings_cache.forget(queue);
        if let Ok(mut set) = self.known_queues.lock() {
            set.insert(queue.to_owned());
            set.insert(known_as);
        }
        Ok(())
    }

    /// The lanes of each of `queues` (settings as [`Engine::queue_settings`] remembers
    /// them).
    pub(crate) async fn lanes(
        &self,
        queues: &[ojs_core::QueueName],
    ) -> Result<Vec<keys::Lane>, StoreError> {
        let settings = self.queue_settings(queues).await?;
        Ok(queues
            .iter()
            .flat_map(|q| {
                let tenants = settings.get(q.as_str()).map(|st| st.tenants.as_slice());
                keys::Lane::all_of(q, tenants.unwrap_or_default())
            })
            .collect())
    }

    /// Every known queue, sorted by name.
    pub async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError> {
        // Queue items only: the counter items in the same partition are not read.
        let items = self
            .table
            .query_partition_prefix(keys::QUEUES_PK, Some(keys::QUEUE_SK_PREFIX), false)
            .await?;
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
    /// When the queue was last paused or resumed.
    pub paused_at: Option<String>,
    /// The queue's depth bound, if it has one.
    pub backpressure: Option<Backpressure>,
    /// Tenants other than the default one that have had jobs in the queue, sorted (each
    /// has its own ready partitions: [`keys::Lane`]).
    pub tenants: Vec<ojs_core::tenant::TenantId>,
}

/// A queue past its warning threshold after an accepted enqueue (ojs-backpressure.md
/// §7.3): what the warning headers say.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePressure {
    /// The queue.
    pub queue: String,
    /// Its depth with the enqueued jobs.
    pub depth: u64,
    /// Its `max_depth`.
    pub bound: u64,
    /// `depth / bound`.
    pub pressure: f64,
}

impl Engine {
    /// Pauses or resumes a queue (creating its registry item if the queue is new).
    pub async fn set_paused(&self, queue: &str, paused: bool) -> Result<QueueInfo, StoreError> {
        let now = time::now();
        let out = self
            .queue_update(queue, &now)
            .update_expression("SET #name = :name, created_at = if_not_exists(created_at, :now), paused = :paused, paused_at = :now")
            .expression_attribute_values(":paused", aws_sdk_dynamodb::types::AttributeValue::Bool(paused))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await;
        let out = self.table.tally(Kind::Write, out)?;
        self.settings_cache.forget(queue);
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
        self.settings_cache
            .recall_or_read(&self.table, queues, |q| q.as_str(), ttl)
            .await
    }

    /// With `OJS_PAUSED_QUEUE_PUSH=reject`: [`StoreError::QueuePaused`] when one of
    /// `queues` is paused (settings as [`Engine::queue_settings`] remembers them). Without
    /// it, nothing to check: a paused queue takes jobs and only stops delivering them.
    pub(crate) async fn refuse_if_paused(&self, queues: &[&str]) -> Result<(), StoreError> {
        if !self.config.reject_paused_pushes {
            return Ok(());
        }
        let names: Vec<ojs_core::QueueName> = queues
            .iter()
            .filter_map(|q| ojs_core::QueueName::parse(q).ok())
            .collect();
        let settings = self.queue_settings(&names).await?;
        for q in queues {
            if let Some(st) = settings.get(*q).filter(|st| st.paused) {
                return Err(StoreError::QueuePaused {
                    queue: (*q).to_owned(),
                    paused_at: st.paused_at.clone(),
                });
            }
        }
        Ok(())
    }

    /// An UpdateItem of `queue`'s registry item, with the values that create it when it
    /// is new (`#name = :name, created_at = if_not_exists(created_at, :now)`).
    fn queue_update(&self, queue: &str, now: &Timestamp) -> UpdateItemFluentBuilder {
        self.table
            .update_item()
            .key("pk", s(keys::QUEUES_PK))
            .key("sk", s(keys::queue_sk(queue)))
            .expression_attribute_names("#name", "name")
            .expression_attribute_values(":name", s(queue))
            .expression_attribute_values(":now", ts(now))
    }

    /// Sets (or with `None` removes) a queue's depth bound (ojs-backpressure.md §6).
    pub async fn set_queue_backpressure(
        &self,
        queue: &str,
        bound: Option<&Backpressure>,
    ) -> Result<(), StoreError> {
        self.set_queue_setting(queue, "bp", bound.map(Backpressure::to_json))
            .await
    }

    /// Sets `attr` of `queue`'s registry item to `value`, or removes it (`None`),
    /// registering the queue if it was not; this instance then reads its settings afresh.
    async fn set_queue_setting(
        &self,
        queue: &str,
        attr: &'static str,
        value: Option<serde_json::Value>,
    ) -> Result<(), StoreError> {
        const REGISTER: &str = "SET #name = :name, created_at = if_not_exists(created_at, :now)";
        let now = time::now();
        let req = self
            .queue_update(queue, &now)
            .expression_attribute_names("#setting", attr);
        let req = match value {
            Some(v) => req
                .update_expression(format!("{REGISTER}, #setting = :setting"))
                .expression_attribute_values(":setting", crate::item::json(&v)),
            None => req.update_expression(format!("{REGISTER} REMOVE #setting")),
        };
        let out = req.send().await;
        self.table.tally(Kind::Write, out)?;
        self.settings_cache.forget(queue);
        Ok(())
    }

    /// Sets (or with `None` removes) a queue-level rate limit; every job of the queue must
    /// fit it in addition to its own.
    pub async fn set_queue_rate_limit(
        &self,
        queue: &str,
        policy: Option<&RateLimitPolicy>,
    ) -> Result<(), StoreError> {
        self.set_queue_setting(queue, "rl", policy.map(RateLimitPolicy::to_json))
            .await
    }

    /// The state of a rate limit's first window at `now`: (limit, starts left, when the
    /// window counts no start any more).
    pub(crate) async fn window_state(
        &self,
        policy: &RateLimitPolicy,
        now: Timestamp,
    ) -> Result<Option<(u32, u32, Timestamp)>, StoreError> {
        let Some(window) = ojs_core::rate_limit::merged_windows(&[policy])
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let now_us = now.timestamp_micros();
        let read = self.read_window(&window, now_us).await?;
        Ok(time::from_micros(read.assessment.clear_at_us)
            .map(|reset| (window.limit, read.assessment.remaining, reset)))
    }
}

/// What this instance remembers of queues' settings: their registry items, read
/// eventually consistent and only the attributes the settings are made of.
pub(crate) fn remembered_settings() -> Remembered<QueueSettings> {
    Remembered::new(
        |queue| item_key(keys::QUEUES_PK, keys::queue_sk(queue)),
        settings_of,
        BatchRead {
            consistent: false,
            projection: Some((
                "#name, paused, paused_at, rl, bp, tenants",
                &[("#name", "name")],
            )),
        },
    )
}

/// The name and settings a queue's registry item holds (`None` without a name).
fn settings_of(i: &Item) -> Option<(String, QueueSettings)> {
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
        .and_then(|v| RateLimitPolicy::from_stored(&v, &name).ok());
    let paused_at = i.get("paused_at").and_then(|v| v.as_s().ok()).cloned();
    let mut tenants: Vec<_> = i
        .get("tenants")
        .and_then(|v| v.as_ss().ok())
        .into_iter()
        .flatten()
        .filter_map(|t| ojs_core::tenant::TenantId::parse(t).ok().flatten())
        .collect();
    tenants.sort();
    Some((
        name,
        QueueSettings {
            paused,
            rate_limit,
            paused_at,
            backpressure: stored_backpressure(i),
            tenants,
        },
    ))
}

/// The depth bound stored on a queue's registry item (`bp`), if any.
pub(crate) fn stored_backpressure(item: &Item) -> Option<Backpressure> {
    item.get("bp")
        .and_then(|v| v.as_s().ok())
        .and_then(|raw| serde_json::from_str(raw).ok())
        .and_then(|v| Backpressure::from_stored(&v))
}
