//! Request body extraction: media type, size limit, JSON syntax, each answered with the
//! OJS error a client can act on.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::FromRequest;
use axum::http::request::Parts;
use axum::http::{header, Request};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use ojs_core::validate::MAX_ENVELOPE_BYTES;
use ojs_core::{ErrorCode, OjsError};
use serde_json::Value;

use crate::error::ApiError;

/// Media types accepted for request bodies.
const ACCEPTED: &[&str] = &["application/openjobspec+json", "application/json"];

/// A JSON request body of at most 1 MiB (one envelope).
pub struct JsonBody(pub Value);

/// A JSON request body that may be left out (an empty body is `None`); one that is sent
/// is read as [`JsonBody`] reads it.
pub struct OptionalJsonBody(pub Option<Value>);

/// Largest batch body (a batch of envelopes): what a Lambda function can receive (6 MB)
/// less headroom.
pub const MAX_BATCH_BYTES: usize = 5 * 1024 * 1024;

/// An oversized body is read and thrown away up to this many times its limit (for at most
/// [`DRAIN_TIME`]) before the 413 is sent: a client still sending it then reads the answer
/// instead of a reset connection. Larger bodies are refused at once.
const DRAIN_FACTOR: usize = 4;
/// Longest time spent throwing away an oversized body.
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// The `Content-Length` a request declares, if any.
pub(crate) fn declared_length(headers: &axum::http::HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

/// Reads a body of at most `limit` bytes; a larger one is answered `envelope_too_large`
/// after the rest of it has been read and discarded (see [`DRAIN_FACTOR`]).
pub(crate) async fn read_limited(
    body: Body,
    declared: Option<usize>,
    limit: usize,
) -> Result<Bytes, OjsError> {
    let too_large = || {
        OjsError::new(
            ErrorCode::EnvelopeTooLarge,
            format!("request body exceeds {limit} bytes"),
        )
    };
    let cap = limit.saturating_mul(DRAIN_FACTOR);
    if declared.is_some_and(|len| len > cap) {
        return Err(too_large());
    }
    let mut over = declared.is_some_and(|len| len > limit);
    let mut stream = body.into_data_stream();
    let mut kept = BytesMut::new();
    let mut seen: usize = 0;
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    loop {
        let next = if over {
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(next) => next,
                Err(_) => break,
            }
        } else {
            stream.next().await
        };
        let chunk = match next {
            None => break,
            Some(Ok(chunk)) => chunk,
            Some(Err(_)) if over => break,
            Some(Err(e)) => {
                return Err(OjsError::new(
                    ErrorCode::InvalidPayload,
                    format!("the request body could not be read: {e}"),
                ))
            }
        };
        seen = seen.saturating_add(chunk.len());
        if seen > cap {
            break;
        }
        if seen > limit {
            over = true;
            kept = BytesMut::new();
        }
        if !over {
            kept.extend_from_slice(&chunk);
        }
    }
    if over {
        Err(too_large())
    } else {
        Ok(kept.freeze())
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, Self::Rejection> {
        read_json(req, MAX_ENVELOPE_BYTES).await.map(Self)
    }
}

impl<S: Send + Sync> FromRequest<S> for OptionalJsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let declared = declared_length(&parts.headers);
        let bytes = read_limited(body, declared, MAX_ENVELOPE_BYTES).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(None));
        }
        let req = Request::from_parts(parts, Body::from(bytes));
        read_json(req, MAX_ENVELOPE_BYTES)
            .await
            .map(|v| Self(Some(v)))
    }
}

/// A JSON body of at most `limit` bytes, of an accepted media type.
pub(crate) async fn read_json(req: Request<Body>, limit: usize) -> Result<Value, ApiError> {
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
        let declared = declared_length(req.headers());
        let bytes = read_limited(req.into_body(), declared, limit).await?;
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            OjsError::new(
                ErrorCode::InvalidPayload,
                format!("request body is not valid JSON: {e}"),
            )
        })?;
        Ok(value)
    }
}

/// The id of the API key a request came with (None when auth is off): what registrations
/// record as `created_by`.
pub struct Caller(pub Option<String>);

/// What a request's head alone gives (not its state, nor its body): each such type is
/// an extractor through [`from_head!`].
pub trait FromHead: Sized {
    /// The answer to a head that gives none.
    type Rejection: axum::response::IntoResponse;
    /// What the head `parts` give.
    fn from_head(parts: &Parts) -> Result<Self, Self::Rejection>;
}

/// The extractor of each [`FromHead`] type listed.
macro_rules! from_head {
    ($($t:ident $(<$g:ident: $bound:path>)?),* $(,)?) => {$(
        impl<S: Send + Sync $(, $g: $bound)?> axum::extract::FromRequestParts<S>
            for $t $(<$g>)?
        {
            type Rejection = <Self as $crate::extract::FromHead>::Rejection;

            async fn from_request_parts(
                parts: &mut axum::http::request::Parts,
                _state: &S,
            ) -> Result<Self, Self::Rejection> {
                $crate::extract::FromHead::from_head(parts)
            }
        }
    )*};
}
pub(crate) use from_head;

from_head!(Caller, Tenant, ListingTenant, TraceHeaders, CheckedQuery<Q: QueryCheck>);

/// A query string checked as a whole before the handler runs (a listing's page).
pub trait QueryCheck: serde::de::DeserializeOwned {
    /// What a query that passes gives.
    type Checked;
    /// The query checked, or the error that answers it.
    fn check(self) -> Result<Self::Checked, ApiError>;
}

/// The query string as `Q` checks it ([`QueryCheck`]): one that does not decode is
/// axum's own rejection, as with `Query`.
pub struct CheckedQuery<Q: QueryCheck>(pub Q::Checked);

impl<Q: QueryCheck> FromHead for CheckedQuery<Q> {
    type Rejection = axum::response::Response;

    fn from_head(parts: &Parts) -> Result<Self, Self::Rejection> {
        use axum::response::IntoResponse;
        let axum::extract::Query(query) = axum::extract::Query::<Q>::try_from_uri(&parts.uri)
            .map_err(IntoResponse::into_response)?;
        query.check().map(Self).map_err(IntoResponse::into_response)
    }
}

/// Nothing: the part of an extractor that reads no more of the head (`Named`'s lookup
/// on the webhook subscription routes).
impl FromHead for () {
    type Rejection = Infallible;

    fn from_head(_parts: &Parts) -> Result<(), Infallible> {
        Ok(())
    }
}

impl FromHead for Caller {
    type Rejection = Infallible;

    fn from_head(parts: &Parts) -> Result<Self, Infallible> {
        let principal = parts.extensions.get::<crate::auth::Principal>();
        Ok(Caller(principal.map(|p| p.key_id.clone())))
    }
}

/// The tenant a request acts for (ojs-multi-tenancy.md §5.3): the one its `X-OJS-Tenant`
/// header names (`_default` is the default tenant), or any tenant without the header. A
/// header the tenant pattern refuses is 400. A key bound to a tenant acts for that tenant
/// whatever the request says: without the header too, and a header naming another is 403.
pub struct Tenant(pub ojs_core::tenant::Scope);

impl Tenant {
    /// Writes the tenant into a new job's `meta` (`path` is where that `meta` is in the
    /// request), refusing a `meta` that names another one.
    pub fn adopt(
        &self,
        meta: &mut serde_json::Map<String, Value>,
        path: &str,
    ) -> Result<(), ApiError> {
        ojs_core::tenant::adopt(&self.0, meta, path).map_err(ApiError)
    }

    /// Whether the request may see `job`: one of another tenant answers as if it did not
    /// exist.
    pub fn sees(&self, job: &ojs_core::Job) -> bool {
        self.0.sees(job.tenant().as_ref())
    }
}

impl FromHead for Tenant {
    type Rejection = ApiError;

    fn from_head(parts: &Parts) -> Result<Self, ApiError> {
        let bound = parts
            .extensions
            .get::<crate::auth::Principal>()
            .and_then(|p| p.tenant.clone());
        let Some(raw) = parts.headers.get(ojs_core::tenant::TENANT_HEADER) else {
            return Ok(Tenant(match bound {
                Some(t) => ojs_core::tenant::Scope::One(Some(t)),
                None => ojs_core::tenant::Scope::Any,
            }));
        };
        let raw = raw.to_str().map_err(|_| {
            ApiError(OjsError::invalid_request(format!(
                "{} must be a tenant id",
                ojs_core::tenant::TENANT_HEADER
            )))
        })?;
        let tenant = ojs_core::tenant::TenantId::parse(raw.trim())
            .map_err(|e| ApiError(e.with_detail("header", ojs_core::tenant::TENANT_HEADER)))?;
        if let Some(own) = bound.filter(|own| tenant.as_ref() != Some(own)) {
            return Err(ApiError(
                OjsError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "this API key acts for tenant {own} only; {} names {:?}",
                        ojs_core::tenant::TENANT_HEADER,
                        ojs_core::tenant::Scope::name(tenant.as_ref())
                    ),
                )
                .with_detail("tenant", own.as_str()),
            ));
        }
        Ok(Tenant(ojs_core::tenant::Scope::One(tenant)))
    }
}

/// The tenant a listing keeps to (the events listing, the admin job and dead letter
/// listings): its `tenant` parameter (`_default`: the jobs of none; absent or blank:
/// every tenant's), within the tenant the request acts for ([`Tenant`]). A key bound to
/// a tenant lists its own tenant's alone, a parameter naming another being 403; a request
/// whose `X-OJS-Tenant` names one tenant and whose parameter another is 400.
pub struct ListingTenant {
    acts_for: ojs_core::tenant::Scope,
    bound: bool,
}

impl ListingTenant {
    /// The tenants listed, given the `tenant` parameter `raw` (`path` names it in a 400).
    pub fn scope(
        &self,
        raw: Option<&str>,
        path: &str,
    ) -> Result<ojs_core::tenant::Scope, ApiError> {
        use ojs_core::tenant::Scope;
        let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
            return Ok(self.acts_for.clone());
        };
        let named = ojs_core::tenant::TenantId::parse(raw).map_err(|e| e.with_path(path))?;
        match &self.acts_for {
            Scope::One(own) if *own != named => {
                let own = Scope::name(own.as_ref());
                let named = Scope::name(named.as_ref());
                Err(ApiError(if self.bound {
                    OjsError::new(
                        ErrorCode::Forbidden,
                        format!("this API key acts for tenant {own} only; {path} names {named:?}"),
                    )
                    .with_detail("tenant", own)
                } else {
                    OjsError::invalid_request(format!(
                        "{} names tenant {own}; {path} names {named:?}",
                        ojs_core::tenant::TENANT_HEADER
                    ))
                    .with_path(path)
                }))
            }
            _ => Ok(Scope::One(named)),
        }
    }
}

impl FromHead for ListingTenant {
    type Rejection = ApiError;

    fn from_head(parts: &Parts) -> Result<Self, ApiError> {
        let Tenant(acts_for) = Tenant::from_head(parts)?;
        let bound = parts
            .extensions
            .get::<crate::auth::Principal>()
            .is_some_and(|p| p.tenant.is_some());
        Ok(Self { acts_for, bound })
    }
}

/// The request's W3C trace context headers (`traceparent`, `tracestate`), as sent: a job
/// created by the request adopts them when its `meta` has no trace of its own
/// ([`ojs_core::trace::adopt`]).
pub struct TraceHeaders {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl TraceHeaders {
    /// Adds this request's trace to `meta` unless it names one.
    pub fn adopt_into(&self, meta: &mut serde_json::Map<String, Value>) {
        ojs_core::trace::adopt(
            meta,
            self.traceparent.as_deref(),
            self.tracestate.as_deref(),
        );
    }
}

impl FromHead for TraceHeaders {
    type Rejection = Infallible;

    fn from_head(parts: &Parts) -> Result<Self, Infallible> {
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        Ok(Self {
            traceparent: header("traceparent"),
            tracestate: header("tracestate"),
        })
    }
}

/// A route's one path parameter, parsed into `T` before the handler runs: a value `T`
/// refuses is answered with `T`'s own error, the one its `parse` gives. A handler that
/// also reads a body takes [`BodyAndPath`] instead, so that a body's error keeps
/// answering first.
pub struct PathParam<T>(pub T);

/// A request body `B` and the route's one path parameter `T`, parsed after the body as
/// [`PathParam`] parses it: a body's error answers before the parameter's.
pub struct BodyAndPath<B, T>(pub B, pub T);

/// What a path parameter parses into (an id the handler acts on).
pub trait FromPathParam: Sized {
    /// `raw` as the router decoded it, or the error that answers it.
    fn from_path_param(raw: &str) -> Result<Self, OjsError>;
}

impl FromPathParam for ojs_core::JobId {
    fn from_path_param(raw: &str) -> Result<Self, OjsError> {
        Self::parse(raw)
    }
}

impl FromPathParam for ojs_core::QueueName {
    fn from_path_param(raw: &str) -> Result<Self, OjsError> {
        Self::parse(raw)
    }
}

impl<S: Send + Sync, T: FromPathParam> axum::extract::FromRequestParts<S> for PathParam<T> {
    type Rejection = axum::response::Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        use axum::response::IntoResponse;
        let raw = raw_path_param(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        T::from_path_param(&raw)
            .map(Self)
            .map_err(|e| ApiError(e).into_response())
    }
}

impl<S, B, T> FromRequest<S> for BodyAndPath<B, T>
where
    S: Send + Sync,
    B: FromRequest<S, Rejection = ApiError>,
    T: FromPathParam,
{
    type Rejection = axum::response::Response;

    async fn from_request(req: Request<Body>, state: &S) -> Result<Self, Self::Rejection> {
        use axum::response::IntoResponse;
        let (mut parts, body) = req.into_parts();
        let raw = raw_path_param(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let body = B::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let param = T::from_path_param(&raw).map_err(|e| ApiError(e).into_response())?;
        Ok(Self(body, param))
    }
}

/// The route's one path parameter as decoded; one that does not decode is axum's own
/// rejection, as with `Path`.
pub(crate) async fn raw_path_param<S: Send + Sync>(
    parts: &mut axum::http::request::Parts,
    state: &S,
) -> Result<String, axum::extract::rejection::PathRejection> {
    use axum::extract::FromRequestParts;
    let axum::extract::Path(raw) =
        axum::extract::Path::<String>::from_request_parts(parts, state).await?;
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// A body of `chunks` chunks of 1,000 bytes that counts the bytes pulled from it.
    fn counted_body(chunks: usize) -> (Body, Arc<AtomicUsize>) {
        let pulled = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&pulled);
        let stream = futures::stream::iter(0..chunks).map(move |_| {
            counter.fetch_add(1_000, Ordering::SeqCst);
            Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; 1_000]))
        });
        (Body::from_stream(stream), pulled)
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_returned_whole() {
        let (body, _) = counted_body(10);
        let read = read_limited(body, Some(10_000), 10_000).await;
        assert_eq!(read.map(|b| b.len()).ok(), Some(10_000));
    }

    #[tokio::test]
    async fn an_oversized_body_is_read_to_its_end_before_the_refusal() {
        // Declared and undeclared: either way the client's whole body is taken in.
        for declared in [Some(30_000), None] {
            let (body, pulled) = counted_body(30);
            let read = read_limited(body, declared, 10_000).await;
            assert!(
                matches!(&read, Err(e) if e.code == ErrorCode::EnvelopeTooLarge),
                "{read:?}"
            );
            assert_eq!(pulled.load(Ordering::SeqCst), 30_000, "{declared:?}");
        }
    }

    #[tokio::test]
    async fn a_body_beyond_the_drain_cap_is_not_read_to_its_end() {
        let (body, pulled) = counted_body(100);
        let read = read_limited(body, None, 10_000).await;
        assert!(matches!(&read, Err(e) if e.code == ErrorCode::EnvelopeTooLarge));
        assert!(pulled.load(Ordering::SeqCst) <= 41_000);
        // Declared beyond the cap: refused without reading anything.
        let (body, pulled) = counted_body(100);
        assert!(read_limited(body, Some(100_000), 10_000).await.is_err());
        assert_eq!(pulled.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_listings_tenant_is_its_parameter_within_the_requests_tenant() {
        use ojs_core::tenant::{Scope, TenantId};
        let id = |t: &str| TenantId::parse(t).unwrap_or_else(|e| panic!("{e}"));
        let listing = |acts_for: Scope, bound: bool| ListingTenant { acts_for, bound };
        let code = |r: Result<Scope, ApiError>| r.err().map(|e| e.0.code.http_status());
        // An operator: every tenant, or the one named (`_default`: the jobs of none).
        let any = listing(Scope::Any, false);
        assert_eq!(any.scope(None, "$.tenant").ok(), Some(Scope::Any));
        assert_eq!(any.scope(Some(" "), "$.tenant").ok(), Some(Scope::Any));
        assert_eq!(
            any.scope(Some("acme"), "$.tenant").ok(),
            Some(Scope::One(id("acme")))
        );
        assert_eq!(
            any.scope(Some("_default"), "$.tenant").ok(),
            Some(Scope::One(None))
        );
        let bad = any.scope(Some("no tenant!"), "$.tenant").err();
        assert!(
            bad.is_some_and(|e| Value::Object(e.0.details).to_string().contains("$.tenant")),
            "a bad tenant names its parameter"
        );
        // A key bound to acme: acme's alone, another named is 403.
        let acme = listing(Scope::One(id("acme")), true);
        assert_eq!(
            acme.scope(None, "$.tenant").ok(),
            Some(Scope::One(id("acme")))
        );
        assert_eq!(
            acme.scope(Some("acme"), "$.tenant").ok(),
            Some(Scope::One(id("acme")))
        );
        assert_eq!(code(acme.scope(Some("beta"), "$.tenant")), Some(403));
        assert_eq!(code(acme.scope(Some("_default"), "$.tenant")), Some(403));
        // An X-OJS-Tenant header naming one tenant and the parameter another: 400.
        let header = listing(Scope::One(None), false);
        assert_eq!(code(header.scope(Some("acme"), "$.tenant")), Some(400));
        assert_eq!(header.scope(None, "$.tenant").ok(), Some(Scope::One(None)));
    }
}
