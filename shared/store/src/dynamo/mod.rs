//! The DynamoDB layer: the table and its indexes, the mapping of jobs to items, keys,
//! capacity accounting and error classification. It knows nothing of transitions;
//! everything above may use it.

pub(crate) mod batch_read;
pub(crate) mod error;
pub(crate) mod item;
pub(crate) mod keys;
pub(crate) mod partition;
pub mod payloads;
pub(crate) mod registry;
pub(crate) mod request;
pub mod schema;
pub mod sdk;
pub(crate) mod table;
pub(crate) mod usage;
