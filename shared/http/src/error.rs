//! The one place that turns errors into HTTP: status from the catalogue, OJS error body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ojs_core::{ErrorCode, JobState, OjsError};
use ojs_store::{Missing, StoreError};

/// An error answered to a client. The body is written by the response layer, which
/// knows the request id (see `layer.rs`).
#[derive(Debug)]
pub struct ApiError(pub OjsError);

impl From<OjsError> for ApiError {
    fn from(e: OjsError) -> Self {
        Self(e)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let err = match e {
            StoreError::NotFound(what) => not_found(&what),
            StoreError::Conflict { current } => wrong_state(current),
            StoreError::NotHolder { attempt } => not_the_holder(attempt),
            StoreError::StaleCheckpoint { current } => stale_checkpoint(current),
            StoreError::Duplicate => {
                OjsError::new(ErrorCode::Duplicate, "a job with this id already exists")
            }
            StoreError::UniqueConflict { existing } => OjsError::new(
                ErrorCode::Duplicate,
                format!("a job with the same uniqueness key exists: {existing}"),
            )
            .with_detail("existing_job_id", existing),
            StoreError::QueuePaused { queue, paused_at } => queue_paused(queue, paused_at),
            StoreError::QueueFull {
                queue,
                depth,
                bound,
            } => ojs_core::backpressure::queue_full(&queue, depth, bound),
            StoreError::TenantLimit {
                tenant,
                limit,
                current,
                maximum,
                retry_after_secs,
            } => {
                ojs_core::tenant::limit_exceeded(&tenant, limit, current, maximum, retry_after_secs)
            }
            StoreError::LimitReached(why) => OjsError::new(ErrorCode::ValidationError, why),
            StoreError::Concurrent(what) => OjsError::conflict(format!(
                "{what} changed while this request was made; retry it"
            )),
            StoreError::TooLarge(cause) => OjsError::new(
                ErrorCode::EnvelopeTooLarge,
                format!(
                    "{cause}; a job, with its result and errors, must fit one 400 KB storage item"
                ),
            ),
            StoreError::Throttled(cause) => throttled(&cause),
            StoreError::Invalid(cause) => rejected_as_invalid(&cause),
            StoreError::Backend(cause) | StoreError::Corrupt(cause) => backend_failure(&cause),
        };
        Self(err)
    }
}

/// A state change refused because the job is not in a state it applies to.
/// The 404 of what a request named and the store did not find, with its id as a detail
/// where the client names it in the path.
pub(crate) fn not_found(what: &Missing) -> OjsError {
    match what {
        Missing::Item => OjsError::not_found("not found"),
        Missing::Job(id) => OjsError::not_found(format!("job {id} not found")),
        Missing::DeadLetter(id) => {
            OjsError::not_found(format!("job {id} is not in the dead letter queue"))
        }
        Missing::Workflow(id) => OjsError::not_found(format!("workflow {id} not found")),
        Missing::Worker(id) => OjsError::not_found(format!("worker {id} not found")),
        Missing::Cron(name) => OjsError::not_found(format!("no cron job named {name:?}")),
        Missing::Schema(uri) => {
            OjsError::not_found(format!("no schema registered with URI {uri:?}"))
                .with_detail("uri", uri.as_str())
        }
        Missing::Webhook(id) => {
            OjsError::not_found(format!("no webhook subscription with id {id:?}"))
                .with_detail("id", id.as_str())
        }
        Missing::PushEndpoint(id) => {
            OjsError::not_found(format!("no push endpoint with id {id:?}"))
                .with_detail("id", id.as_str())
        }
        Missing::ApiKey(id) => {
            OjsError::not_found(format!("no API key with id {id:?}")).with_detail("id", id.as_str())
        }
        Missing::Pool(name) => OjsError::not_found(format!("no pool named {name:.128}")),
    }
}

fn wrong_state(current: Option<JobState>) -> OjsError {
    let state = current.map_or("another state", |s| s.as_str());
    let mut err = OjsError::conflict(format!(
        "the job is {state}; the operation is not valid in that state"
    ));
    if let Some(s) = current {
        err = err.with_detail("current_state", s.as_str());
    }
    err
}

/// An ACK, FAIL or heartbeat fenced on an attempt or worker that no longer holds the job.
fn not_the_holder(attempt: u32) -> OjsError {
    OjsError::conflict(format!(
        "the job's current attempt ({attempt}) is not the caller's: the worker_id or \
         attempt named is not the current holder's (a late call from an earlier attempt, \
         or another worker's claim)"
    ))
    .with_detail("current_state", JobState::Active.as_str())
    .with_detail("current_attempt", attempt)
}

/// A checkpoint whose sequence does not follow the one stored.
fn stale_checkpoint(current: Option<u64>) -> OjsError {
    let stored = current.map_or("none".to_owned(), |c| c.to_string());
    OjsError::conflict(format!(
        "the checkpoint's sequence does not follow the stored one ({stored}): \
         a newer checkpoint is kept"
    ))
    .with_detail(
        "current_sequence",
        current.map_or(serde_json::Value::Null, Into::into),
    )
}

fn queue_paused(queue: String, paused_at: Option<String>) -> OjsError {
    let mut err = OjsError::new(
        ErrorCode::QueuePaused,
        format!("Queue '{queue}' is currently paused. Jobs cannot be enqueued or fetched."),
    )
    .with_detail("queue", queue);
    if let Some(at) = paused_at {
        err = err.with_detail("paused_at", at);
    }
    err
}

fn throttled(cause: &str) -> OjsError {
    tracing::warn!(%cause, "storage throttled");
    OjsError::new(
        ErrorCode::BackendError,
        "storage is throttling requests; retry with backoff",
    )
}

/// Not an outage: DynamoDB refused a request this server built.
fn rejected_as_invalid(cause: &str) -> OjsError {
    tracing::error!(%cause, "storage rejected the request as invalid (a bug)");
    OjsError::new(
        ErrorCode::Internal,
        "the storage backend rejected this request as invalid; this is a server \
         bug, logged with the request id",
    )
}

fn backend_failure(cause: &str) -> OjsError {
    tracing::error!(%cause, "storage failure");
    OjsError::new(
        ErrorCode::BackendError,
        "storage backend failure; retry with backoff",
    )
}

/// Marks an error response so the layer renders its body.
#[derive(Debug, Clone)]
pub(crate) struct PendingError(pub OjsError);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match self.0.code {
            // A backend failure whose cause is throttling or an outage is 503.
            ErrorCode::BackendError => StatusCode::SERVICE_UNAVAILABLE,
            code => StatusCode::from_u16(code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        };
        let mut res = status.into_response();
        res.extensions_mut().insert(PendingError(self.0));
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_entity_is_a_404_naming_it() {
        let check = |what: Missing, message: &str, detail: Option<(&str, &str)>| {
            let ApiError(e) = ApiError::from(StoreError::NotFound(what.clone()));
            assert_eq!(e.code, ErrorCode::NotFound, "{what:?}");
            assert_eq!(e.message, message, "{what:?}");
            if let Some((key, value)) = detail {
                let value = serde_json::json!(value);
                assert_eq!(e.details.get(key), Some(&value), "{what:?}");
            }
        };
        for (what, message) in [
            (Missing::Job("j".into()), "job j not found"),
            (
                Missing::DeadLetter("j".into()),
                "job j is not in the dead letter queue",
            ),
            (Missing::Workflow("w".into()), "workflow w not found"),
            (Missing::Worker("w".into()), "worker w not found"),
            (Missing::Cron("c".into()), "no cron job named \"c\""),
            (Missing::Item, "not found"),
        ] {
            check(what, message, None);
        }
        let schema = Missing::Schema("u".into());
        check(
            schema,
            "no schema registered with URI \"u\"",
            Some(("uri", "u")),
        );
        // What a client names by id in the path comes back as the `id` detail.
        let by_id = [
            (
                Missing::Webhook as fn(String) -> Missing,
                "webhook subscription",
            ),
            (Missing::PushEndpoint, "push endpoint"),
            (Missing::ApiKey, "API key"),
        ];
        for (what, noun) in by_id {
            let message = format!("no {noun} with id \"x\"");
            check(what("x".into()), &message, Some(("id", "x")));
        }
    }
}
