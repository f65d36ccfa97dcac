//! The standard OJS error catalogue and the error type every layer converts into.

use serde_json::{Map, Value};

/// A standard OJS error code with its HTTP status and retryable flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Malformed HTTP request or missing required fields.
    InvalidRequest,
    /// Malformed body or envelope failing validation.
    InvalidPayload,
    /// Well-formed but semantically invalid values (e.g. a retry policy out of range).
    ValidationError,
    /// Args do not conform to a registered schema.
    SchemaValidation,
    /// The resource does not exist.
    NotFound,
    /// A unique-job constraint (or an existing id) was violated.
    Duplicate,
    /// The operation is not valid in the job's current state.
    Conflict,
    /// The target queue is paused.
    QueuePaused,
    /// A client exceeded a rate limit.
    RateLimited,
    /// The queue is at its depth bound (ojs-backpressure.md §7.1; the catalogue spells
    /// it in capitals, ojs-errors.md §4).
    QueueFull,
    /// A tenant is at one of its limits (ojs-multi-tenancy.md §8.2, spelt as there).
    TenantLimitExceeded,
    /// Backend storage or transport failure.
    BackendError,
    /// An operation timed out.
    Timeout,
    /// The feature is not supported by this server.
    Unsupported,
    /// The envelope exceeds the size limit.
    EnvelopeTooLarge,
    /// The request's media type is not supported.
    UnsupportedMediaType,
    /// The request body's `Content-Encoding` is not one this server decodes
    /// (ojs-payload-limits.md §9.3, `UnsupportedCompression`: 415).
    UnsupportedCompression,
    /// The response media type requested by `Accept` cannot be produced.
    NotAcceptable,
    /// The HTTP method is not allowed on this path.
    MethodNotAllowed,
    /// The request carries no valid credentials.
    Unauthenticated,
    /// The credentials are valid but lack the scope the operation needs.
    Forbidden,
    /// A server bug (for example a storage request the backend rejects as invalid):
    /// retrying the same request cannot help.
    Internal,
}

impl ErrorCode {
    /// The wire string of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidPayload => "invalid_payload",
            Self::ValidationError => "validation_error",
            Self::SchemaValidation => "schema_validation",
            Self::NotFound => "not_found",
            Self::Duplicate => "duplicate",
            Self::Conflict => "conflict",
            Self::QueuePaused => "queue_paused",
            Self::RateLimited => "rate_limited",
            Self::QueueFull => "QUEUE_FULL",
            Self::TenantLimitExceeded => "TENANT_LIMIT_EXCEEDED",
            Self::BackendError => "backend_error",
            Self::Timeout => "timeout",
            Self::Unsupported => "unsupported",
            Self::EnvelopeTooLarge => "envelope_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::UnsupportedCompression => "unsupported_compression",
            Self::NotAcceptable => "not_acceptable",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::Internal => "internal_error",
        }
    }

    /// The HTTP status the code maps to.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidRequest | Self::InvalidPayload | Self::SchemaValidation => 400,
            Self::Unauthenticated => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::NotAcceptable => 406,
            Self::Duplicate | Self::Conflict => 409,
            Self::EnvelopeTooLarge => 413,
            Self::UnsupportedMediaType | Self::UnsupportedCompression => 415,
            Self::QueuePaused | Self::Unsupported | Self::ValidationError => 422,
            Self::RateLimited | Self::QueueFull | Self::TenantLimitExceeded => 429,
            Self::BackendError | Self::Internal => 500,
            Self::Timeout => 504,
        }
    }

    /// The error family, reported as `error.type`: every validation failure is
    /// `validation_error` whatever its code.
    pub fn kind(self) -> &'static str {
        match self {
            Self::InvalidRequest
            | Self::InvalidPayload
            | Self::SchemaValidation
            | Self::ValidationError => "validation_error",
            other => other.as_str(),
        }
    }

    /// The code of an error in a job nested in a larger body (a cron template, a workflow
    /// step or callback): `invalid_request`, but a size limit stays `envelope_too_large`,
    /// as it is for the job pushed alone.
    pub fn nested(self) -> Self {
        match self {
            Self::EnvelopeTooLarge => Self::EnvelopeTooLarge,
            _ => Self::InvalidRequest,
        }
    }

    /// Whether a client may retry the same request unchanged.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::QueuePaused
                | Self::RateLimited
                | Self::QueueFull
                | Self::TenantLimitExceeded
                | Self::BackendError
                | Self::Timeout
        )
    }

    /// A short hint for the error body.
    pub fn hint(self) -> &'static str {
        match self {
            Self::InvalidRequest => "Check the request against the OJS HTTP binding.",
            Self::InvalidPayload => "Send a well-formed UTF-8 JSON body.",
            Self::ValidationError => "Correct the named field; see details.validation_errors.",
            Self::SchemaValidation => "Make args conform to the registered schema.",
            Self::NotFound => "Check the id; terminal jobs are deleted after the retention period.",
            Self::Duplicate => "A job with this id or unique key already exists.",
            Self::Conflict => {
                "The job is not in a state that allows this operation; GET it to see its state."
            }
            Self::QueuePaused => "Resume the queue or retry later.",
            Self::RateLimited => "Retry after the time given in Retry-After.",
            Self::QueueFull => {
                "The queue is at its depth bound: retry after Retry-After, or raise the bound."
            }
            Self::TenantLimitExceeded => {
                "The tenant is at a limit: retry after Retry-After, or ask an operator to raise it."
            }
            Self::BackendError => "Retry with backoff; the storage backend failed.",
            Self::Timeout => "Retry with backoff.",
            Self::Unsupported => "See GET /ojs/manifest for supported features.",
            Self::EnvelopeTooLarge => {
                "Keep envelopes under 1 MiB; pass references instead of blobs."
            }
            Self::UnsupportedMediaType => "Use Content-Type: application/openjobspec+json.",
            Self::UnsupportedCompression => {
                "Send the body uncompressed, or as GET /ojs/manifest lists in limits.supported_compression."
            }
            Self::NotAcceptable => "Accept application/openjobspec+json or application/json.",
            Self::MethodNotAllowed => "See the OJS HTTP binding for the methods of this path.",
            Self::Unauthenticated => {
                "Send 'Authorization: Bearer <API key>' with a valid, unrevoked key."
            }
            Self::Forbidden => {
                "Use an API key created with the scope named in details.required_scope."
            }
            Self::Internal => "A server bug, logged under the request_id; report it.",
        }
    }
}

/// An OJS error: a catalogue code, a message, and optional details.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct OjsError {
    /// The catalogue code.
    pub code: ErrorCode,
    /// A human-readable message (never a secret or a full payload).
    pub message: String,
    /// Structured details, e.g. `validation_errors` or the current job state.
    pub details: Map<String, Value>,
}

impl OjsError {
    /// An error with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Map::new(),
        }
    }

    /// `invalid_request` (400).
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// `not_found` (404).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// `conflict` (409).
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }

    /// Records the JSON path of the offending field in `details.validation_errors`.
    pub fn with_path(mut self, path: &str) -> Self {
        let entry = serde_json::json!({ "path": path, "message": self.message });
        match self.details.get_mut("validation_errors") {
            Some(Value::Array(list)) => list.push(entry),
            _ => {
                self.details
                    .insert("validation_errors".into(), Value::Array(vec![entry]));
            }
        }
        self
    }

    /// Adds one detail.
    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_matches_the_http_binding() {
        let table = [
            (ErrorCode::InvalidRequest, "invalid_request", 400, false),
            (ErrorCode::InvalidPayload, "invalid_payload", 400, false),
            (ErrorCode::SchemaValidation, "schema_validation", 400, false),
            (ErrorCode::NotFound, "not_found", 404, false),
            (ErrorCode::Duplicate, "duplicate", 409, false),
            (ErrorCode::QueuePaused, "queue_paused", 422, true),
            (ErrorCode::Unsupported, "unsupported", 422, false),
            (ErrorCode::RateLimited, "rate_limited", 429, true),
            (ErrorCode::QueueFull, "QUEUE_FULL", 429, true),
            (ErrorCode::BackendError, "backend_error", 500, true),
            (
                ErrorCode::EnvelopeTooLarge,
                "envelope_too_large",
                413,
                false,
            ),
            (
                ErrorCode::UnsupportedCompression,
                "unsupported_compression",
                415,
                false,
            ),
        ];
        for (code, s, status, retryable) in table {
            assert_eq!(code.as_str(), s);
            assert_eq!(code.http_status(), status, "{s}");
            assert_eq!(code.retryable(), retryable, "{s}");
        }
    }

    #[test]
    fn a_nested_job_keeps_only_the_size_limit_code() {
        assert_eq!(
            ErrorCode::EnvelopeTooLarge.nested(),
            ErrorCode::EnvelopeTooLarge
        );
        for code in [ErrorCode::ValidationError, ErrorCode::InvalidPayload] {
            assert_eq!(code.nested(), ErrorCode::InvalidRequest);
        }
    }

    #[test]
    fn with_path_accumulates() {
        let e = OjsError::invalid_request("bad")
            .with_path("$.a")
            .with_path("$.b");
        assert_eq!(
            e.details["validation_errors"].as_array().map(Vec::len),
            Some(2)
        );
    }
}
