//! Content negotiation between the JSON baseline and the Protobuf wire format
//! (`application/openjobspec+proto`, ojs-protobuf-format §3): the endpoints that take
//! or return job envelopes accept Protobuf bodies and answer in Protobuf when `Accept`
//! prefers it. Handlers only ever see and produce JSON: this module translates at the
//! edge. Error bodies stay JSON.
//!
//! | endpoint | Protobuf request | Protobuf response |
//! |---|---|---|
//! | `POST /ojs/v1/jobs` | `JobEnvelope` | `JobEnvelope` |
//! | `POST /ojs/v1/jobs/batch` | `BatchEnqueueRequest`, or a delimited stream | `BatchEnqueueResponse` |
//! | `GET`/`DELETE /ojs/v1/jobs/{id}`, `POST /ojs/v1/dead-letter/{id}/retry` | - | `JobEnvelope` |
//! | `POST /ojs/v1/workers/fetch`, `GET /ojs/v1/dead-letter` | - | delimited stream of `JobEnvelope`s |

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, Method, Request};
use axum::response::Response;
use ojs_core::validate::MAX_ENVELOPE_BYTES;
use ojs_core::{ErrorCode, OjsError};
use serde_json::Value;

use crate::extract::MAX_BATCH_BYTES;
use crate::layer::OwnContentType;

/// The Protobuf media type.
pub(crate) const OJS_PROTO: &str = "application/openjobspec+proto";
const OJS_PROTO_DELIMITED: &str = "application/openjobspec+proto; delimited=true";
const JSON_TYPES: [&str; 2] = ["application/openjobspec+json", "application/json"];

/// What an endpoint exchanges in envelopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Envelopes {
    /// Takes and returns one envelope (PUSH).
    Push,
    /// Takes a batch, returns per-job results (batch PUSH).
    Batch,
    /// Returns one envelope (`{"job": ...}`).
    One,
    /// Returns a list (`{"jobs": [...]}`).
    List,
    /// No envelopes: JSON only.
    None,
}

impl Envelopes {
    /// The kind of `method path`.
    pub(crate) fn of(method: &Method, path: &str) -> Self {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        match (method.as_str(), segments.as_slice()) {
            ("POST", ["", "ojs", "v1", "jobs"]) => Self::Push,
            ("POST", ["", "ojs", "v1", "jobs", "batch"]) => Self::Batch,
            ("GET" | "DELETE", ["", "ojs", "v1", "jobs", _]) => Self::One,
            ("POST", ["", "ojs", "v1", "dead-letter", _, "retry"]) => Self::One,
            ("POST", ["", "ojs", "v1", "workers", "fetch"]) => Self::List,
            ("GET", ["", "ojs", "v1", "dead-letter"]) => Self::List,
            _ => Self::None,
        }
    }

    /// The largest body the endpoint reads, after any `Content-Encoding` is undone: a
    /// batch's, or one envelope's.
    pub(crate) fn body_limit(self) -> usize {
        match self {
            Self::Batch => MAX_BATCH_BYTES,
            _ => MAX_ENVELOPE_BYTES,
        }
    }
}

/// Whether the route answers text of its own (`GET /metrics`: Prometheus text), which
/// no Accept header can change.
pub(crate) fn produces_text(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD) && path == "/metrics"
}

/// The format of the answer (also in the request's extensions, for the handler).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Proto,
}

struct Range {
    essence: String,
    q: f32,
}

fn ranges(accept: &str) -> Vec<Range> {
    accept
        .split(',')
        .map(|range| {
            let mut parts = range.split(';');
            let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .filter_map(|q| q.trim().parse::<f32>().ok())
                .next()
                .unwrap_or(1.0);
            Range { essence, q }
        })
        .filter(|r| !r.essence.is_empty())
        .collect()
}

/// The answer's format for `Accept`, or 406 when it allows nothing this endpoint can
/// produce. JSON wins ties (it is the baseline).
pub(crate) fn response_format(headers: &HeaderMap, kind: Envelopes) -> Result<Format, OjsError> {
    let Some(accept) = headers.get(header::ACCEPT) else {
        return Ok(Format::Json);
    };
    let not_acceptable = || {
        let produced = if kind == Envelopes::None {
            "application/openjobspec+json or application/json"
        } else {
            "application/openjobspec+json, application/json or application/openjobspec+proto"
        };
        OjsError::new(
            ErrorCode::NotAcceptable,
            format!("this endpoint produces {produced}"),
        )
    };
    let accept = accept.to_str().map_err(|_| not_acceptable())?;
    let ranges = ranges(accept);
    if ranges.is_empty() {
        return Ok(Format::Json);
    }
    let best = |matches: &dyn Fn(&str) -> bool| {
        ranges
            .iter()
            .filter(|r| matches(&r.essence))
            .map(|r| r.q)
            .fold(0.0_f32, f32::max)
    };
    let json_q = best(&|e| JSON_TYPES.contains(&e) || e == "*/*" || e == "application/*");
    let proto_q = best(&|e| e == OJS_PROTO);
    if kind != Envelopes::None && proto_q > 0.0 && proto_q > json_q {
        Ok(Format::Proto)
    } else if json_q > 0.0 {
        Ok(Format::Json)
    } else {
        Err(not_acceptable())
    }
}

fn media_type(headers: &HeaderMap) -> Option<(String, bool)> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let mut parts = ct.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let delimited = parts.any(|p| {
        p.trim()
            .replace(' ', "")
            .eq_ignore_ascii_case("delimited=true")
    });
    Some((essence, delimited))
}

/// Turns a Protobuf request body into the JSON its handler expects (PUSH and batch
/// PUSH); any other endpoint refuses Protobuf bodies with 415.
pub(crate) async fn decode_request(
    req: Request<Body>,
    kind: Envelopes,
) -> Result<Request<Body>, OjsError> {
    let Some((essence, delimited)) = media_type(req.headers()) else {
        return Ok(req);
    };
    if essence != OJS_PROTO {
        return Ok(req);
    }
    if !matches!(kind, Envelopes::Push | Envelopes::Batch) {
        return Err(OjsError::new(
            ErrorCode::UnsupportedMediaType,
            "Protobuf bodies are accepted by PUSH and batch PUSH only; send JSON here",
        ));
    }
    let limit = kind.body_limit();
    let (mut parts, body) = req.into_parts();
    let declared = crate::extract::declared_length(&parts.headers);
    let bytes = crate::extract::read_limited(body, declared, limit).await?;
    let bad = |e: ojs_proto::ProtoError| {
        OjsError::new(
            ErrorCode::InvalidPayload,
            format!("invalid Protobuf body: {e}"),
        )
    };
    let json = match (kind, delimited) {
        (Envelopes::Push, _) => ojs_proto::proto_to_json(&bytes).map_err(bad)?,
        (_, true) => {
            serde_json::json!({ "jobs": ojs_proto::decode_delimited_jobs(&bytes).map_err(bad)? })
        }
        (_, false) => ojs_proto::batch_request_to_json(&bytes).map_err(bad)?,
    };
    let text = json.to_string();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openjobspec+json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Request::from_parts(parts, Body::from(text)))
}

/// A job view with the JSON format's `timeout` (whole seconds, rounded up) beside its
/// `timeout_ms`, for the Protobuf form's field 8 (`timeout`, seconds): a Protobuf reader
/// finds the timeout in the schema's field. The JSON view itself has no `timeout`: the
/// JavaScript SDK reads a job's `timeout` as milliseconds.
pub(crate) fn with_timeout_seconds(view: &Value) -> Value {
    let mut view = view.clone();
    if let Some(ms) = view.get("timeout_ms").and_then(Value::as_u64) {
        if let Some(o) = view.as_object_mut() {
            o.entry("timeout").or_insert(ms.div_ceil(1000).into());
        }
    }
    view
}

/// Bytes a FETCH answer's job `view` takes in the delimited Protobuf stream as Lambda
/// carries it: its `JobEnvelope` and length prefix, base64-encoded (a binary body travels
/// so in Lambda's response envelope). None when the view has no Protobuf form.
pub(crate) fn delimited_answer_bytes(view: &Value) -> Option<usize> {
    let encoded = ojs_proto::json_to_proto(&with_timeout_seconds(view))
        .ok()?
        .len();
    // The length prefix is a varint: at most 10 bytes.
    let framed = encoded.saturating_add(10);
    Some(framed.div_ceil(3).saturating_mul(4))
}

/// Re-encodes a successful JSON answer in Protobuf. An answer that cannot be encoded
/// (which would be a bug) is sent as JSON rather than lost: the handler's effects
/// (e.g. a FETCH's claims) already happened.
pub(crate) async fn encode_response(res: Response, kind: Envelopes) -> Response {
    if !res.status().is_success() {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let encoded = serde_json::from_slice::<Value>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|json| {
            let result = match kind {
                Envelopes::Push | Envelopes::One => {
                    ojs_proto::json_to_proto(&with_timeout_seconds(&json["job"]))
                        .map(|b| (b, OJS_PROTO))
                }
                Envelopes::Batch => {
                    ojs_proto::json_to_batch_response(&json).map(|b| (b, OJS_PROTO))
                }
                Envelopes::List => {
                    let jobs: Vec<Value> = json["jobs"]
                        .as_array()
                        .map(|jobs| jobs.iter().map(with_timeout_seconds).collect())
                        .unwrap_or_default();
                    ojs_proto::encode_delimited_jobs(&jobs).map(|b| (b, OJS_PROTO_DELIMITED))
                }
                Envelopes::None => return Err("no envelope".to_owned()),
            };
            result.map_err(|e| e.to_string())
        });
    match encoded {
        Ok((proto, media)) => {
            parts
                .headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
            parts.headers.remove(header::CONTENT_LENGTH);
            parts.extensions.insert(OwnContentType);
            Response::from_parts(parts, Body::from(Bytes::from(proto)))
        }
        Err(e) => {
            tracing::error!(error = %e, "answer could not be encoded in Protobuf; sent as JSON");
            Response::from_parts(parts, Body::from(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(header::ACCEPT, v);
        }
        h
    }

    #[test]
    fn accept_picks_the_preferred_producible_format() {
        let push = Envelopes::Push;
        assert_eq!(response_format(&HeaderMap::new(), push), Ok(Format::Json));
        assert_eq!(response_format(&accept("*/*"), push), Ok(Format::Json));
        assert_eq!(response_format(&accept(OJS_PROTO), push), Ok(Format::Proto));
        assert_eq!(
            response_format(
                &accept("application/openjobspec+proto, application/json;q=0.5"),
                push
            ),
            Ok(Format::Proto)
        );
        assert_eq!(
            response_format(
                &accept("application/json, application/openjobspec+proto;q=0.5"),
                push
            ),
            Ok(Format::Json)
        );
        assert_eq!(
            response_format(&accept("application/openjobspec+proto, */*"), push),
            Ok(Format::Json),
            "a tie goes to the JSON baseline"
        );
        assert!(response_format(&accept("text/html"), push).is_err());
        assert!(response_format(&accept("application/json;q=0"), push).is_err());
        // Where no envelope is returned, Protobuf alone cannot be served.
        assert!(response_format(&accept(OJS_PROTO), Envelopes::None).is_err());
        assert_eq!(
            response_format(
                &accept("application/openjobspec+proto, application/json;q=0.1"),
                Envelopes::None
            ),
            Ok(Format::Json)
        );
    }

    #[test]
    fn endpoints_are_classified_by_method_and_path() {
        let cases = [
            (Method::POST, "/ojs/v1/jobs", Envelopes::Push),
            (Method::POST, "/ojs/v1/jobs/batch", Envelopes::Batch),
            (Method::GET, "/ojs/v1/jobs/abc", Envelopes::One),
            (Method::POST, "/ojs/v1/workers/fetch", Envelopes::List),
            (Method::POST, "/ojs/v1/workers/ack", Envelopes::None),
            (Method::GET, "/ojs/v1/queues", Envelopes::None),
        ];
        for (method, path, want) in cases {
            assert_eq!(Envelopes::of(&method, path), want, "{method} {path}");
        }
    }
}
