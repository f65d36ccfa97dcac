//! Batches: `BatchEnqueueRequest`/`BatchEnqueueResponse` and delimited job streams.

use prost::Message;
use serde_json::{json, Map, Value};

use crate::v1::{BatchEnqueueResponse, BatchResult, JobError};
use crate::{envelope, wire, ProtoError};

/// Field number of `BatchEnqueueRequest.jobs`.
const JOBS_FIELD: u32 = 1;

/// Decodes a `BatchEnqueueRequest` into the JSON batch `{"jobs": [...]}`. Each job
/// keeps its own unknown fields; unknown fields of the request itself are dropped (the
/// JSON batch has no place for them).
pub fn batch_request_to_json(bytes: &[u8]) -> Result<Value, ProtoError> {
    let fields =
        wire::split_fields(bytes).map_err(|r| ProtoError::decode("BatchEnqueueRequest", r))?;
    let mut jobs = Vec::new();
    for field in fields.iter().filter(|f| f.number == JOBS_FIELD) {
        if field.wire_type != 2 {
            return Err(ProtoError::decode(
                "BatchEnqueueRequest",
                "field 1 (jobs) must be length-delimited",
            ));
        }
        let index = jobs.len();
        jobs.push(crate::proto_to_json(field.payload).map_err(|e| e.in_item("jobs", index))?);
    }
    Ok(json!({ "jobs": jobs }))
}

/// Encodes a JSON batch (`{"jobs": [...]}` or a bare array) as a `BatchEnqueueRequest`.
pub fn json_to_batch_request(batch: &Value) -> Result<Vec<u8>, ProtoError> {
    let jobs = match batch {
        Value::Object(o) => o.get("jobs").and_then(Value::as_array),
        Value::Array(a) => Some(a),
        _ => None,
    }
    .ok_or_else(|| ProtoError::Shape {
        what: "the batch".into(),
        expected: "{\"jobs\": [...]} or an array of jobs",
    })?;
    let mut out = Vec::new();
    for (index, job) in jobs.iter().enumerate() {
        let bytes = crate::json_to_proto(job).map_err(|e| e.in_item("jobs", index))?;
        wire::write_varint(u64::from(JOBS_FIELD << 3 | 2), &mut out);
        wire::push_delimited(&bytes, &mut out);
    }
    Ok(out)
}

/// Encodes a JSON batch answer as a `BatchEnqueueResponse`. Accepts the server's
/// success body `{"jobs": [job, ...]}` (every job succeeded, in request order), its
/// all-or-nothing failure body `{"error": {"details": {"errors": [{"index", "code",
/// "message"}, ...]}}}` (or `"details": {"index": n}` for one job), and the generic
/// `{"results": [{"index", "id", "success", "error"}, ...]}`.
pub fn json_to_batch_response(answer: &Value) -> Result<Vec<u8>, ProtoError> {
    let shape = || ProtoError::Shape {
        what: "the batch response".into(),
        expected: "an object with jobs, results, or an error with per-job details",
    };
    let o = answer.as_object().ok_or_else(shape)?;
    let results = if let Some(jobs) = o.get("jobs") {
        let jobs = jobs.as_array().ok_or_else(shape)?;
        jobs.iter()
            .enumerate()
            .map(|(i, job)| {
                Ok(BatchResult {
                    index: index(i)?,
                    id: job
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .into(),
                    success: true,
                    error: None,
                })
            })
            .collect::<Result<Vec<_>, ProtoError>>()?
    } else if let Some(results) = o.get("results") {
        let results = results.as_array().ok_or_else(shape)?;
        results
            .iter()
            .enumerate()
            .map(|(i, r)| result_from_json(r).map_err(|e| e.in_item("results", i)))
            .collect::<Result<Vec<_>, _>>()?
    } else if let Some(error) = o.get("error") {
        let details = error.get("details");
        let failures = match details.and_then(|d| d.get("errors")) {
            Some(Value::Array(errors)) => errors.iter().collect(),
            // A conflict names one job; its message is the whole error's.
            _ if details.and_then(|d| d.get("index")).is_some() => vec![error],
            _ => return Err(shape()),
        };
        failures
            .into_iter()
            .enumerate()
            .map(|(i, f)| failure_from_json(f, details).map_err(|e| e.in_item("errors", i)))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        return Err(shape());
    };
    Ok(BatchEnqueueResponse { results }.encode_to_vec())
}

/// Decodes a `BatchEnqueueResponse` as `{"results": [{"index", "id", "success",
/// "error"}, ...]}` (members at their default are omitted, except `success`).
pub fn batch_response_to_json(bytes: &[u8]) -> Result<Value, ProtoError> {
    let response = BatchEnqueueResponse::decode(bytes)
        .map_err(|e| ProtoError::decode("BatchEnqueueResponse", e))?;
    let results = response
        .results
        .iter()
        .map(|r| {
            let mut o = Map::new();
            o.insert("index".into(), r.index.into());
            if !r.id.is_empty() {
                o.insert("id".into(), r.id.clone().into());
            }
            o.insert("success".into(), r.success.into());
            if let Some(e) = &r.error {
                o.insert("error".into(), Value::Object(envelope::error_json(e)));
            }
            Value::Object(o)
        })
        .collect();
    Ok(json!({ "results": Value::Array(results) }))
}

/// Decodes a length-delimited stream of `JobEnvelope`s (`application/openjobspec+proto;
/// delimited=true`): each message is preceded by its length as a varint, the standard
/// Protobuf delimited framing.
pub fn decode_delimited_jobs(bytes: &[u8]) -> Result<Vec<Value>, ProtoError> {
    wire::split_delimited(bytes)?
        .into_iter()
        .enumerate()
        .map(|(i, job)| crate::proto_to_json(job).map_err(|e| e.in_item("jobs", i)))
        .collect()
}

/// Encodes jobs as a length-delimited stream (inverse of [`decode_delimited_jobs`]).
pub fn encode_delimited_jobs(jobs: &[Value]) -> Result<Vec<u8>, ProtoError> {
    let mut out = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let bytes = crate::json_to_proto(job).map_err(|e| e.in_item("jobs", i))?;
        wire::push_delimited(&bytes, &mut out);
    }
    Ok(out)
}

fn index(i: usize) -> Result<i32, ProtoError> {
    i32::try_from(i).map_err(|_| ProtoError::field("index", format!("{i} exceeds int32")))
}

fn int32(v: Option<&Value>, name: &str) -> Result<i32, ProtoError> {
    v.and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| ProtoError::field(name, "must be an integer in the int32 range"))
}

fn job_error(v: &Value) -> Result<JobError, ProtoError> {
    let o = v.as_object().ok_or_else(|| ProtoError::Shape {
        what: "error".into(),
        expected: "a JSON object",
    })?;
    let mut e = JobError::default();
    for (k, member) in o {
        // Members JobError has no field for (retryable, details...) are not carried.
        envelope::fit_error_member(k, member, &mut e);
    }
    if e.r#type.is_empty() {
        if let Some(code) = o.get("code").and_then(Value::as_str) {
            e.r#type = code.to_owned();
        }
    }
    Ok(e)
}

fn result_from_json(r: &Value) -> Result<BatchResult, ProtoError> {
    Ok(BatchResult {
        index: int32(r.get("index"), "index")?,
        id: r
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .into(),
        success: r.get("success").and_then(Value::as_bool).unwrap_or(false),
        error: r.get("error").map(job_error).transpose()?,
    })
}

fn failure_from_json(f: &Value, details: Option<&Value>) -> Result<BatchResult, ProtoError> {
    let index_value = f
        .get("index")
        .or_else(|| details.and_then(|d| d.get("index")));
    Ok(BatchResult {
        index: int32(index_value, "index")?,
        id: String::new(),
        success: false,
        error: Some(job_error(f)?),
    })
}
