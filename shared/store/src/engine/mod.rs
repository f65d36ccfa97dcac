//! The engine: every write of a job's state goes through [`transition`] (core's state
//! machine made into conditional writes), and what follows one through [`effects`].
//! PUSH (`jobs`, `batch`, `unique`), FETCH (`claim`, with `concurrency` slots, rate `windows`
//! and its `answer` bound), ACK and
//! FAIL (`jobs`, `settle`), time (`timer`, `sweep`, `backlog`), and the settings PUSH and
//! FETCH obey: a queue's (`queues`: registry, pause, bounds, rate limit), a tenant's
//! (`tenant_config`) and the scheduling pools (`pools`). It uses the DynamoDB
//! layer; features call into it, never the other way round (a finished job's workflow
//! and cron follow-ups are reached through `effects`).

pub(crate) mod answer;
pub(crate) mod backlog;
pub(crate) mod batch;
pub(crate) mod cancel;
pub(crate) mod claim;
pub(crate) mod concurrency;
pub(crate) mod dead_entry;
pub(crate) mod due;
pub(crate) mod effects;
pub(crate) mod fetch_memory;
pub(crate) mod fetch_order;
pub(crate) mod job_item;
pub(crate) mod jobs;
pub(crate) mod limits;
pub(crate) mod pools;
pub(crate) mod queues;
pub(crate) mod settle;
pub(crate) mod sweep;
pub(crate) mod tenant_config;
pub(crate) mod timer;
pub(crate) mod transition;
pub(crate) mod unique;
pub(crate) mod unread;
pub(crate) mod windows;
