//! What is derived from the table's change stream rather than written by a request:
//! lifecycle events, queue counters and job metrics ([`stream`] applies a batch).
//! Reads the engine's items; never moves a job.

pub(crate) mod counts;
pub(crate) mod events;
pub(crate) mod metrics;
pub(crate) mod stream;
pub(crate) mod tenants;
