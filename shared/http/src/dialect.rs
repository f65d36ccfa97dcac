//! Which of two documented response shapes a request gets, where the OJS documents
//! disagree on the same key.
//!
//! The HTTP binding's prose (§11.2 queue stats, §13.2 cron) and every official SDK use
//! one shape; the OpenAPI document and the conformance suite another, and the two put
//! different types under the same key (`queue` a name or an object, `cron` an expression
//! or the registration), so no single body can serve both. Every official SDK sends
//! `OJS-Version` on every request and the conformance suite does not (README, "Client
//! compatibility"), so that header picks the binding's shape.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::convert::Infallible;

/// The shape a response takes where the documents disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// The HTTP binding's (the request names a spec version with `OJS-Version`).
    Binding,
    /// The OpenAPI document's, which the conformance suite reads.
    OpenApi,
}

impl<S: Send + Sync> FromRequestParts<S> for Dialect {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(if parts.headers.contains_key("ojs-version") {
            Self::Binding
        } else {
            Self::OpenApi
        })
    }
}
