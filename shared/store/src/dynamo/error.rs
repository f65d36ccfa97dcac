//! Typed store outcomes.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use ojs_core::JobState;

/// What a [`StoreError::NotFound`] did not find. The table layer knows only that an item
/// is missing ([`Missing::Item`]); the engine and the services name what they looked for
/// ([`StoreError::naming`]), so the HTTP layer answers each 404 from the error alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// An item whose meaning the layer that missed it does not know.
    Item,
    /// A job, by id.
    Job(String),
    /// A job that is not in the dead letter queue, by id.
    DeadLetter(String),
    /// A workflow, by id.
    Workflow(String),
    /// A worker, by id.
    Worker(String),
    /// A cron registration, by name.
    Cron(String),
    /// A schema registration, by URI.
    Schema(String),
    /// A webhook subscription, by id.
    Webhook(String),
    /// A push endpoint registration, by id.
    PushEndpoint(String),
    /// An API key, by id.
    ApiKey(String),
    /// A scheduling pool, by name.
    Pool(String),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Item => write!(f, "item"),
            Self::Job(id) => write!(f, "job {id}"),
            Self::DeadLetter(id) => write!(f, "dead letter job {id}"),
            Self::Workflow(id) => write!(f, "workflow {id}"),
            Self::Worker(id) => write!(f, "worker {id}"),
            Self::Cron(name) => write!(f, "cron {name:?}"),
            Self::Schema(uri) => write!(f, "schema {uri:?}"),
            Self::Webhook(id) => write!(f, "webhook subscription {id:?}"),
            Self::PushEndpoint(id) => write!(f, "push endpoint {id:?}"),
            Self::ApiKey(id) => write!(f, "API key {id:?}"),
            Self::Pool(name) => write!(f, "pool {name:?}"),
        }
    }
}

/// Why a store operation did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// What the operation names does not exist.
    #[error("{0} not found")]
    NotFound(Missing),
    /// The item exists but is not in a state that allows the operation.
    #[error("conflict: job is {}", current.map_or("in another state", JobState::as_str))]
    Conflict {
        /// The state found, when known.
        current: Option<JobState>,
    },
    /// The job is active, but its current attempt is not the caller's: the attempt or
    /// worker id the caller named is not the current holder's (a late ACK, FAIL or
    /// heartbeat of an earlier attempt, or another worker's claim).
    #[error("not the holder: the job is active at attempt {attempt}")]
    NotHolder {
        /// The job's current attempt.
        attempt: u32,
    },
    /// A checkpoint save named a sequence that does not follow the stored checkpoint's
    /// (a stale or repeated save): the newer checkpoint is kept.
    #[error("stale checkpoint: the stored sequence is {current:?}")]
    StaleCheckpoint {
        /// The stored checkpoint's sequence (none when there is no checkpoint).
        current: Option<u64>,
    },
    /// An item with this key already exists.
    #[error("duplicate")]
    Duplicate,
    /// A registry is full (push endpoints): the request is refused until one is deleted.
    #[error("{0}")]
    LimitReached(String),
    /// A registry changed while this write was made from what was read before it (two
    /// registrations racing for the last place): reading again and retrying can succeed.
    #[error("concurrent change: {0}")]
    Concurrent(String),
    /// A live job holds the uniqueness key.
    #[error("unique key held by job {existing}")]
    UniqueConflict {
        /// The job holding the key.
        existing: String,
    },
    /// The target queue is paused and this deployment refuses pushes to paused queues.
    #[error("queue {queue} is paused")]
    QueuePaused {
        /// The queue.
        queue: String,
        /// When it was paused, when known.
        paused_at: Option<String>,
    },
    /// The queue is at its depth bound (ojs-backpressure.md): the enqueue of `adding` jobs
    /// on a queue `depth` deep would pass `bound`; nothing was written.
    #[error("queue {queue} is full: depth {depth}, bound {bound}")]
    QueueFull {
        /// The queue.
        queue: String,
        /// Jobs waiting in it (available, scheduled, retryable), as counted.
        depth: u64,
        /// Its `max_depth`.
        bound: u64,
    },
    /// An enqueue that would take a tenant past one of its limits (ojs-multi-tenancy.md
    /// §8.2); nothing was written.
    #[error("tenant {tenant} is at its {limit}: {current} of {maximum}")]
    TenantLimit {
        /// The tenant.
        tenant: String,
        /// Which limit (`max_queue_depth`, `max_scheduled`).
        limit: &'static str,
        /// What it has, as counted.
        current: u64,
        /// The limit.
        maximum: u64,
        /// When the producer may try again, seconds.
        retry_after_secs: u64,
    },
    /// The item would exceed DynamoDB's 400 KB item limit (or the job's share of it):
    /// the request itself is too large, retrying it cannot help.
    #[error("too large: {0}")]
    TooLarge(String),
    /// DynamoDB throttled the request after the SDK's retries.
    #[error("throttled: {0}")]
    Throttled(String),
    /// Any other backend failure (network, 5xx, timeout).
    #[error("backend: {0}")]
    Backend(String),
    /// DynamoDB rejected the request as invalid (a `ValidationException` that is not a
    /// size limit): a bug in how the request was built, not an outage. Retrying the same
    /// request cannot help.
    #[error("invalid storage request: {0}")]
    Invalid(String),
    /// An item could not be mapped back to the model.
    #[error("corrupt item: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// An item missed by a layer that did not know what it was, named as `what` (other
    /// errors, and a `NotFound` already named, unchanged).
    #[must_use]
    pub fn naming(self, what: impl FnOnce() -> Missing) -> Self {
        match self {
            Self::NotFound(Missing::Item) => Self::NotFound(what()),
            other => other,
        }
    }

    /// A missing item, not yet named.
    pub(crate) fn missing() -> Self {
        Self::NotFound(Missing::Item)
    }

    /// A stored value the model refuses (`e` says why): a corrupt item.
    pub(crate) fn corrupt(e: ojs_core::OjsError) -> Self {
        Self::Corrupt(e.message)
    }

    /// Whether the same request may succeed if sent again soon: throttling, or a backend
    /// failure (network, 5xx, timeout) the SDK's own retries did not outlast.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, Self::Throttled(_) | Self::Backend(_))
    }

    /// Classifies an SDK error. Conditional-check failures are handled at each call site,
    /// where it is known what the condition meant.
    pub(crate) fn from_sdk<E, R>(err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug,
    {
        let code = err.code().unwrap_or("").to_owned();
        match code.as_str() {
            "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "RequestLimitExceeded" => Self::Throttled(code),
            "ValidationException" => {
                let message = err.message().unwrap_or_default().to_owned();
                if is_size_limit(&message) {
                    Self::TooLarge(message)
                } else {
                    Self::Invalid(message)
                }
            }
            "" => Self::Backend(format!(
                "{}",
                aws_sdk_dynamodb::error::DisplayErrorContext(&err)
            )),
            _ => Self::Backend(format!("{code}: {}", err.message().unwrap_or(""))),
        }
    }
}

/// Whether a `ValidationException` message is one of DynamoDB's size limits: an item
/// over 400 KB, a key attribute over its limit, or a transaction over 4 MB. These, and
/// only these, mean the request itself is too large.
pub(crate) fn is_size_limit(message: &str) -> bool {
    const SIZE_LIMITS: [&str; 6] = [
        // PutItem / UpdateItem / a transaction's item.
        "Item size has exceeded the maximum allowed size",
        "Item size to update has exceeded the maximum allowed size",
        // Key attributes.
        "Size of hashkey has exceeded the maximum size limit",
        "Aggregated size of all range keys has exceeded the size limit",
        // TransactWriteItems as a whole.
        "Transaction request cannot be larger than 4 MB",
        // BatchWriteItem as a whole.
        "Request size has exceeded the maximum allowed size",
    ];
    SIZE_LIMITS.iter().any(|limit| message.contains(limit))
}

/// The cancellation reason codes of a cancelled TransactWriteItems, in action order
/// (`None` for any other error).
pub(crate) fn cancellation_codes<R>(
    err: &SdkError<aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError, R>,
) -> Option<Vec<String>> {
    match err.as_service_error() {
        Some(
            aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(t),
        ) => Some(
            t.cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None").to_owned())
                .collect(),
        ),
        _ => None,
    }
}

/// Whether an SDK error is a failed condition.
pub(crate) fn is_condition_failure<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> bool {
    err.code() == Some("ConditionalCheckFailedException")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;

    fn validation(message: &str) -> StoreError {
        let meta = ErrorMetadata::builder()
            .code("ValidationException")
            .message(message)
            .build();
        StoreError::from_sdk(SdkError::<GetItemError, ()>::service_error(
            GetItemError::generic(meta),
            (),
        ))
    }

    #[test]
    fn naming_names_only_a_missing_item_not_yet_named() {
        let job = || Missing::Job("j1".into());
        assert!(matches!(
            StoreError::missing().naming(job),
            StoreError::NotFound(Missing::Job(id)) if id == "j1"
        ));
        // Named below already: the lower layer knew better.
        let worker = StoreError::NotFound(Missing::Worker("w".into())).naming(job);
        assert!(matches!(worker, StoreError::NotFound(Missing::Worker(_))));
        // Not a NotFound: unchanged.
        let conflict = StoreError::Conflict { current: None }.naming(job);
        assert!(matches!(conflict, StoreError::Conflict { current: None }));
        assert_eq!(
            StoreError::NotFound(job()).to_string(),
            "job j1 not found",
            "the log line names it too"
        );
    }

    #[test]
    fn validation_exceptions_are_never_retryable_backend_errors() {
        for too_large in [
            "Item size has exceeded the maximum allowed size",
            "Item size to update has exceeded the maximum allowed size",
            "One or more parameter values were invalid: Size of hashkey has exceeded the maximum size limit of 2048 bytes",
            "One or more parameter values were invalid: Aggregated size of all range keys has exceeded the size limit of 1024 bytes",
            "Transaction request cannot be larger than 4 MB",
        ] {
            assert!(
                matches!(validation(too_large), StoreError::TooLarge(_)),
                "{too_large}"
            );
        }
        for bug in [
            "Transaction request cannot include multiple operations on one item",
            "Provided list of item keys contains duplicates",
            "Too many items requested for the BatchGetItem call",
            // Contains "size" but is no size limit.
            "1 validation error detected: Value at 'pageSize' failed to satisfy constraint",
            "Invalid UpdateExpression: Syntax error",
        ] {
            assert!(matches!(validation(bug), StoreError::Invalid(_)), "{bug}");
        }
    }
}
