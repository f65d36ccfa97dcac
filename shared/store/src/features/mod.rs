//! Features built on the engine: workflows, cron, the dead letter queue, workers,
//! admission of enqueues (depth bounds, tenant quotas), registries (schemas, API keys, push endpoints, webhook subscriptions) and the admin API's queries.
//! They move jobs only through the engine's transitions.

pub(crate) mod admin;
pub(crate) mod admission;
pub(crate) mod api_keys;
pub(crate) mod checkpoints;
pub(crate) mod cron;
pub(crate) mod dead_letter;
pub(crate) mod follow_ups;
pub(crate) mod idempotency;
pub(crate) mod push;
pub(crate) mod rate_limits;
pub(crate) mod schemas;
pub(crate) mod wakeups;
pub(crate) mod webhooks;
pub(crate) mod workers;
pub(crate) mod workflow;
