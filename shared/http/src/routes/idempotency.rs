//! Idempotency keys on PUSH and batch PUSH (ojs-bulk-operations.md §10-11): the
//! `Idempotency-Key` header, or the body's `idempotency_key` (the header wins when both
//! are sent). A request sent again with its key within 24 hours is answered as the first
//! time (status and jobs, as they are now, with `Idempotent-Replayed: true`) and creates
//! nothing; the same key with another body is 422. See `ojs_store::KeyClaim` for how
//! every try of one request makes the same jobs.

use axum::body::Body;
use axum::extract::FromRequest;
use axum::http::{HeaderMap, HeaderValue, Request};
use axum::response::Response;
use ojs_core::idempotency::{fingerprint, reused_with_another_body, IdempotencyKey};
use ojs_core::time::Timestamp;
use ojs_core::{JobId, OjsError};
use ojs_store::KeyClaim;
use serde_json::Value;

use crate::error::ApiError;
use crate::extract::{read_json, Caller, FromHead};
use crate::AppState;

/// The JSON body of a PUSH (of at most `LIMIT` bytes) with its idempotency key taken out
/// ([`Idempotent::take`]), after the body is read; the key is the calling API key's own.
pub(crate) struct IdempotentBody<const LIMIT: usize>(pub Option<Idempotent>, pub Value);

impl<S: Send + Sync, const LIMIT: usize> FromRequest<S> for IdempotentBody<LIMIT> {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, _state: &S) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let Ok(Caller(caller)) = Caller::from_head(&parts);
        let headers = parts.headers.clone();
        let mut body = read_json(Request::from_parts(parts, body), LIMIT).await?;
        let idempotent = Idempotent::take(&headers, &mut body, caller.as_deref())?;
        Ok(Self(idempotent, body))
    }
}

/// The header (ojs-bulk-operations.md §11).
pub(crate) const HEADER: &str = "idempotency-key";

/// An enqueue's key and its body's fingerprint.
pub(crate) struct Idempotent {
    key: IdempotencyKey,
    fingerprint: String,
}

impl Idempotent {
    /// The key of the request with `headers` and `body`, the body's `idempotency_key`
    /// taken out of it (it is no job field); `None` without one. The fingerprint is the
    /// body's without the key, so a key sent in the header or the body is one request.
    /// `caller`: the API key the request came with, whose keys these are.
    pub(crate) fn take(
        headers: &HeaderMap,
        body: &mut Value,
        caller: Option<&str>,
    ) -> Result<Option<Self>, OjsError> {
        let in_body = match body
            .as_object_mut()
            .and_then(|o| o.remove("idempotency_key"))
        {
            None => None,
            Some(Value::String(k)) => Some(k),
            Some(_) => {
                return Err(
                    OjsError::invalid_request("idempotency_key must be a string")
                        .with_path("$.idempotency_key"),
                )
            }
        };
        let key = match headers.get(HEADER) {
            Some(v) => Some(IdempotencyKey::parse(
                v.to_str().map_err(|_| {
                    OjsError::invalid_request("the Idempotency-Key header must be text")
                        .with_path("Idempotency-Key")
                })?,
                "Idempotency-Key",
            )?),
            None => in_body
                .map(|k| IdempotencyKey::parse(&k, "$.idempotency_key"))
                .transpose()?,
        };
        Ok(key.map(|key| Self {
            key: key.owned_by(caller),
            fingerprint: fingerprint(body),
        }))
    }

    /// Claims the key for jobs `ids`; a key used with another body is refused.
    pub(crate) async fn claim(
        &self,
        app: &AppState,
        ids: &[JobId],
        now: Timestamp,
    ) -> Result<KeyClaim, ApiError> {
        match app
            .store
            .idempotency_keys()
            .reserve(&self.key, &self.fingerprint, ids, now)
            .await?
        {
            KeyClaim::Reused => Err(reused_with_another_body(&self.key).into()),
            claim => Ok(claim),
        }
    }

    /// After the request ran: its answer recorded for replays, or, when it was refused
    /// with a 4xx (nothing written), the key let go so a corrected request may use it.
    /// A failure here leaves the key unfinished, which a replay resolves by running the
    /// request again with the same job ids; so it is logged, not answered.
    /// `outcome`: the answer's status and the ids of its jobs when they are not the
    /// ones claimed, or the refusal's status.
    pub(crate) async fn settle(
        &self,
        app: &AppState,
        outcome: Result<(u16, Option<&[JobId]>), u16>,
    ) {
        let done = match outcome {
            Ok((status, other_ids)) => {
                app.store
                    .idempotency_keys()
                    .record_answer(&self.key, status, other_ids)
                    .await
            }
            Err(status) if status < 500 => {
                app.store
                    .idempotency_keys()
                    .release(&self.key, &self.fingerprint)
                    .await
            }
            Err(_) => Ok(()),
        };
        if let Err(e) = done {
            tracing::warn!(error = %e, key = %self.key.as_str(), "idempotency key not settled");
        }
    }
}

/// Marks an answer as the replay of an earlier one (the header Stripe's API and the
/// IETF draft's examples use).
pub(crate) fn replayed(mut res: Response) -> Response {
    res.headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    res
}

/// The refusal of a replay whose jobs are gone (deleted past their retention, within the
/// key's 24 hours only if retention is shorter).
pub(crate) fn jobs_gone() -> ApiError {
    OjsError::conflict(
        "the jobs this idempotency key's request created no longer exist; use a new key",
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn take(
        headers: &[(&'static str, &'static str)],
        body: Value,
    ) -> (Result<Option<Idempotent>, OjsError>, Value) {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(*k, HeaderValue::from_static(v));
        }
        let mut body = body;
        let out = Idempotent::take(&map, &mut body, None);
        (out, body)
    }

    #[test]
    fn the_header_wins_and_the_body_field_is_taken_out() {
        let (k, body) = take(
            &[("idempotency-key", "from-header")],
            json!({"type": "t", "args": [], "idempotency_key": "from-body"}),
        );
        let k = k.ok().flatten().map(|k| k.key.as_str().to_owned());
        assert_eq!(k.as_deref(), Some("from-header"));
        assert_eq!(body, json!({"type": "t", "args": []}));
        let (k, body) = take(
            &[],
            json!({"type": "t", "args": [], "idempotency_key": "b"}),
        );
        assert_eq!(
            k.ok()
                .flatten()
                .map(|k| k.key.as_str().to_owned())
                .as_deref(),
            Some("b")
        );
        assert_eq!(body, json!({"type": "t", "args": []}));
        let (k, _) = take(&[], json!({"type": "t", "args": []}));
        assert!(matches!(k, Ok(None)));
    }

    #[test]
    fn the_key_in_the_header_or_the_body_is_one_request() {
        let (a, _) = take(
            &[("idempotency-key", "k")],
            json!({"type": "t", "args": [1]}),
        );
        let (b, _) = take(
            &[],
            json!({"args": [1], "type": "t", "idempotency_key": "k"}),
        );
        let fp = |r: Result<Option<Idempotent>, OjsError>| r.ok().flatten().map(|i| i.fingerprint);
        let (a, b) = (fp(a), fp(b));
        assert!(a.is_some());
        assert_eq!(a, b);
    }

    #[test]
    fn bad_keys_are_refused_naming_where_they_came_from() {
        let (k, _) = take(&[], json!({"type": "t", "idempotency_key": 7}));
        assert!(
            matches!(k, Err(e) if e.details["validation_errors"][0]["path"] == "$.idempotency_key")
        );
        let (k, _) = take(&[], json!({"type": "t", "idempotency_key": ""}));
        assert!(
            matches!(k, Err(e) if e.details["validation_errors"][0]["path"] == "$.idempotency_key")
        );
        let long: &'static str = Box::leak("x".repeat(257).into_boxed_str());
        let (k, _) = take(&[("idempotency-key", long)], json!({"type": "t"}));
        assert!(
            matches!(k, Err(e) if e.details["validation_errors"][0]["path"] == "Idempotency-Key")
        );
    }
}
