//! The Open Job Spec model, free of any AWS, HTTP or Lambda dependency.
//!
//! - [`ids`]: validated newtypes for job id, job type and queue name.
//! - [`state`]: the eight-state lifecycle and its one transition function.
//! - [`job`]: the job envelope, enqueue parsing/validation and JSON rendering.
//! - [`retry`]: retry policies and backoff math.
//! - [`error`]: the standard error catalogue.
//! - [`time`] and [`duration`]: RFC 3339 timestamps and ISO 8601 durations.

pub mod backpressure;
pub mod change;
pub mod checkpoint;
pub mod cron;
pub mod cron_job;
pub mod duration;
pub mod error;
pub mod event;
pub mod failure;
pub mod fields;
pub mod idempotency;
pub mod ids;
pub mod job;
pub mod pool;
pub mod progress;
pub mod push;
pub mod rate_limit;
pub mod retry;
pub mod schema_registry;
pub mod state;
pub mod tenant;
pub mod time;
pub mod trace;
pub mod unique;
pub mod validate;
pub mod webhook;
pub mod workflow;

pub use error::{ErrorCode, OjsError};
pub use ids::{JobId, JobType, QueueName};
pub use job::{Job, NewJob};
pub use retry::RetryPolicy;
pub use state::{Due, Indexing, JobState, Transition};

/// The OJS specification version this implementation speaks.
pub const SPEC_VERSION: &str = "1.0";
