//! Typed store outcomes.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use ojs_core::JobState;

/// Why a store operation did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The item does not exist.
    #[error("not found")]
    NotFound,
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
    /// An item with this key already exists.
    #[error("duplicate")]
    Duplicate,
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
    /// An item could not be mapped back to the model.
    #[error("corrupt item: {0}")]
    Corrupt(String),
}

impl StoreError {
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
            "ValidationException" if err.message().is_some_and(|m| m.contains("size")) => {
                Self::TooLarge(err.message().unwrap_or_default().to_owned())
            }
            "" => Self::Backend(format!(
                "{}",
                aws_sdk_dynamodb::error::DisplayErrorContext(&err)
            )),
            _ => Self::Backend(format!("{code}: {}", err.message().unwrap_or(""))),
        }
    }
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
