//! The engine: every write of a job's state goes through [`transition`] (core's state
//! machine made into conditional writes), and what follows one through [`effects`].
//! PUSH (`jobs`, `batch`, `unique`), FETCH (`claim`: queues and lanes; `claim_loop`: the
//! candidate loop over `candidates`; `claim_attempt`: one claim, under `limits` with
//! `concurrency` slots and rate `windows`; `fetching`: the FETCH in progress and its
//! `answer` bound), ACK and FAIL (`jobs`, `settle`), time (`timer`, `sweep`, `backlog`),
//! and the settings PUSH and FETCH obey: a queue's (`queues`: registry, pause, bounds,
//! rate limit), a tenant's (`tenant_config`), both `remembered` per instance, and the
//! scheduling pools (`pools`). It uses the DynamoDB layer; features call into it, never
//! the other way round (a finished job's workflow and cron follow-ups are reached
//! through `effects`).

pub(crate) mod answer;
pub(crate) mod backlog;
pub(crate) mod batch;
pub(crate) mod cancel;
pub(crate) mod candidates;
pub(crate) mod claim;
pub(crate) mod claim_attempt;
pub(crate) mod claim_loop;
pub(crate) mod concurrency;
pub(crate) mod dead_entry;
pub(crate) mod due;
pub(crate) mod effects;
pub(crate) mod fetch_memory;
pub(crate) mod fetch_order;
pub(crate) mod fetching;
pub(crate) mod job_item;
pub(crate) mod jobs;
pub(crate) mod limits;
pub(crate) mod offload;
pub(crate) mod pools;
pub(crate) mod queues;
pub(crate) mod remembered;
pub(crate) mod settle;
pub(crate) mod sweep;
pub(crate) mod tenant_config;
pub(crate) mod timer;
pub(crate) mod transition;
pub(crate) mod unique;
pub(crate) mod unread;
pub(crate) mod windows;
pub(crate) mod writer;

use std::collections::HashSet;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::answer::AnswerBound;
use crate::dynamo::table::Table;
use crate::keys;
use crate::payloads::Payloads;
use crate::timer::Timer;
use crate::usage::UsageSnapshot;
use crate::StoreConfig;

/// The engine: the table, the settings and the per-instance memories of what PUSH and
/// FETCH obey. Everything above holds one (cheap to clone); it holds nothing above it, so
/// no engine method can call into the change stream's side or a feature.
#[derive(Clone)]
pub struct Engine {
    /// The table, the one way to DynamoDB.
    pub(crate) table: Table,
    pub(crate) config: Arc<StoreConfig>,
    /// The timer queue, when configured.
    pub(crate) timer: Option<Timer>,
    /// Queues this instance has already registered, so PUSH writes the queue item once
    /// per queue per cold start rather than on every job.
    pub(crate) known_queues: Arc<Mutex<HashSet<String>>>,
    /// Queue settings read by FETCH, with when they were read.
    pub(crate) settings_cache: Arc<remembered::Remembered<queues::QueueSettings>>,
    /// Queues on which this instance lately lost claims (FETCH spreads over them).
    pub(crate) contention: Arc<fetch_memory::Contention>,
    /// Queue shards whose due query this instance lately found empty (FETCH skips it).
    pub(crate) quiet_due: Arc<fetch_memory::QuietDue>,
    /// Which lane of a queue with tenants this instance's next FETCH for any tenant
    /// starts at (round robin).
    pub(crate) lane_turn: Arc<AtomicUsize>,
    /// Lanes this instance's FETCH lately found empty (they take no first turn).
    pub(crate) quiet_lanes: Arc<fetch_memory::QuietLanes>,
    /// Tenants' settings read by FETCH and PUSH, with when they were read.
    pub(crate) tenant_config_cache: Arc<remembered::Remembered<ojs_core::tenant::TenantConfig>>,
    /// The scheduling pools as this instance lately listed them.
    pub(crate) pool_cache: Arc<Mutex<pools::PoolCache>>,
    /// Which queue of a pooled FETCH this instance's next one starts at.
    pub(crate) queue_turn: Arc<AtomicUsize>,
    /// The bucket of requests too large for their item, when configured
    /// (`OJS_PAYLOAD_BUCKET`); without it such a request is refused.
    pub(crate) payloads: Option<Payloads>,
}

impl Engine {
    /// An engine over `client` with `config`.
    pub(crate) fn new(client: aws_sdk_dynamodb::Client, config: StoreConfig) -> Self {
        Self {
            table: Table::new(client, &config.table),
            config: Arc::new(config),
            timer: None,
            known_queues: Arc::default(),
            settings_cache: Arc::new(queues::remembered_settings()),
            contention: Arc::default(),
            quiet_due: Arc::default(),
            lane_turn: Arc::default(),
            quiet_lanes: Arc::default(),
            tenant_config_cache: Arc::new(tenant_config::remembered_configs()),
            pool_cache: Arc::default(),
            queue_turn: Arc::default(),
            payloads: None,
        }
    }

    /// The same engine with its settings changed by `change`.
    pub(crate) fn reconfigured(&mut self, change: impl FnOnce(&mut StoreConfig)) {
        let mut config = (*self.config).clone();
        change(&mut config);
        self.config = Arc::new(config);
    }

    /// The bucket of large requests, when configured.
    pub fn payloads(&self) -> Option<&Payloads> {
        self.payloads.as_ref()
    }

    /// How many shards each queue has.
    pub fn queue_shards(&self) -> u16 {
        self.config.queue_shards
    }

    /// The ready-index partition that holds `id` when it is available.
    pub(crate) fn ready_pk(&self, lane: &keys::Lane, id: &ojs_core::JobId) -> String {
        keys::ready_pk(lane, keys::shard_of(id, self.queue_shards()))
    }

    /// The due-index partition that holds `id` when it waits for a time.
    pub(crate) fn due_pk(&self, queue: &ojs_core::QueueName, id: &ojs_core::JobId) -> String {
        keys::due_pk(queue, keys::shard_of(id, self.queue_shards()))
    }

    /// The timer queue, when configured.
    pub fn timer(&self) -> Option<&Timer> {
        self.timer.as_ref()
    }

    /// How long one sweep may run ([`StoreConfig::sweep_budget`]).
    pub fn sweep_budget(&self) -> Duration {
        self.config.sweep_budget
    }

    /// How many bytes of jobs one answer may carry ([`StoreConfig::fetch_answer`]).
    pub fn answer_bound(&self) -> AnswerBound {
        self.config.fetch_answer
    }

    /// The table name.
    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// The CloudWatch namespace metrics are printed under (`OJS_METRICS=emf`), if any.
    pub fn metrics_namespace(&self) -> Option<&str> {
        self.config.metrics_namespace.as_deref()
    }

    /// DynamoDB calls and capacity consumed by this engine so far.
    pub fn usage(&self) -> UsageSnapshot {
        self.table.usage()
    }
}
