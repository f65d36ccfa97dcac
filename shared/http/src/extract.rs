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

/// A JSON request body of at most 1 MiB.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, Self::Rejection> {
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
                format!("request body exceeds {MAX_ENVELOPE_BYTES} bytes"),
            )
        };
        if let Some(len) = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
        {
            if len > MAX_ENVELOPE_BYTES {
                return Err(too_large().into());
            }
        }
        let bytes = axum::body::to_bytes(req.into_body(), MAX_ENVELOPE_BYTES)
            .await
            .map_err(|_| too_large())?;
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            OjsError::new(
                ErrorCode::InvalidPayload,
                format!("request body is not valid JSON: {e}"),
            )
        })?;
        Ok(Self(value))
    }
}
