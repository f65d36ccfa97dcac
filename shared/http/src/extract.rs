//! Request body extraction: media type, size limit, JSON syntax, each answered with the
//! OJS error a client can act on.

use axum::body::Body;
use axum::extract::FromRequest;
use axum::http::{header, Request};
use ojs_core::validate::MAX_ENVELOPE_BYTES;
use ojs_core::{ErrorCode, OjsError};
use serde_json::Value;

use crate::error::ApiError;

/// Media types accepted for request bodies.
const ACCEPTED: &[&str] = &["application/openjobspec+json", "application/json"];

/// A JSON request body of at most 1 MiB (one envelope).
pub struct JsonBody(pub Value);

/// A JSON request body of at most [`MAX_BATCH_BYTES`] (a batch of envelopes).
pub struct BatchBody(pub Value);

/// Largest batch body: what a Lambda function can receive (6 MB) less headroom.
pub const MAX_BATCH_BYTES: usize = 5 * 1024 * 1024;

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, Self::Rejection> {
        read_json(req, MAX_ENVELOPE_BYTES).await.map(Self)
    }
}

impl<S: Send + Sync> FromRequest<S> for BatchBody {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, Self::Rejection> {
        read_json(req, MAX_BATCH_BYTES).await.map(Self)
    }
}

async fn read_json(req: Request<Body>, limit: usize) -> Result<Value, ApiError> {
    {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let essence = ct
                .to_str()
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if !ACCEPTED.contains(&essence.as_str()) {
                return Err(OjsError::new(
                    ErrorCode::UnsupportedMediaType,
                    format!(
                        "unsupported Content-Type {essence:?}; send application/openjobspec+json"
                    ),
                )
                .into());
            }
        }
        let too_large = || {
            OjsError::new(
                ErrorCode::EnvelopeTooLarge,
                format!("request body exceeds {limit} bytes"),
            )
        };
        if let Some(len) = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
        {
            if len > limit {
                return Err(too_large().into());
            }
        }
        let bytes = axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|_| too_large())?;
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            OjsError::new(
                ErrorCode::InvalidPayload,
                format!("request body is not valid JSON: {e}"),
            )
        })?;
        Ok(value)
    }
}
