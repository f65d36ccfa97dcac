//! The Cloudq protocol v0.1.0 as a compatibility binding over the same store, at the
//! server's root as the protocol has it (`POST /:queue`, `GET /:queue`, `DELETE
//! /:queue/:id`) and under `/cloudq/` too:
//!
//! - `POST /{queue}` with `{"job": {"klass", "args"}}` (or the bare `{"klass",
//!   "args"}`) enqueues an OJS job with `type` = klass: the PUSH path.
//! - `GET /{queue}` reserves the next job, `{"job": {"klass", "args", "id"}}`, or
//!   answers `{"status": "empty"}`: the FETCH claim, so a Cloudq client and an OJS worker
//!   never get the same job.
//! - `DELETE /{queue}/{id}` completes a reserved job: the ACK.
//!
//! The server's own root paths win over a queue of the same name (`GET /health`,
//! `/ready`, `/metrics`): such a queue is reached under `/cloudq/`.
//!
//! Reservations are fenced like OJS attempts: a reserve claims the job under the worker id
//! [`CLOUDQ_WORKER`], and a DELETE is an ACK under that worker id. So a DELETE completes
//! only an attempt a Cloudq reserve took, never one an OJS worker holds (named or not),
//! and a lapsed reservation's DELETE after an OJS worker claimed the job again is `409`.
//! (Cloudq has no reservation token: a lapsed reservation's DELETE after another Cloudq
//! reserve took the job still completes it.)
//!
//! Other answers are Cloudq's `{"status": "success" | "error", "message"}` with
//! `Content-Type: application/json`. A reserved job that is not deleted within its lease
//! (30 s by default) becomes available again, like an OJS job whose worker died.
//!
//! Names: a Cloudq klass is any string ("the object name you would like to perform the
//! job") and its queues free-form, while OJS types and queues are lowercase. A klass that
//! is already an OJS type is used as is; a class name maps to one (`Archive` ->
//! `archive`, `Mail::SendDigest` -> `mail.send_digest`); any other string to
//! `cloudq.<its letters and digits, lowercased, other runs as _>` (`send email!` ->
//! `cloudq.send_email_`). The exact klass is kept in `meta.cloudq_klass`, so a reserve
//! gives it back unchanged. A queue name is lowercased with `_` as `-`
//! (`archive_queue` -> `archive-queue`), the queue OJS workers fetch from.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use axum::Router;
use ojs_core::validate::MAX_ENVELOPE_BYTES;
use ojs_core::{time, ErrorCode, Job, JobId, JobType, NewJob, OjsError, QueueName};
use ojs_store::{AckRequest, FetchRequest, PushOutcome, StoreError};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::layer::OwnContentType;
use crate::AppState;

/// The worker id a Cloudq reservation holds its attempt under.
pub(crate) const CLOUDQ_WORKER: &str = "cloudq";

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/cloudq/{queue}", post(enqueue_job).get(reserve_job))
        .route("/cloudq/{queue}/{id}", delete(delete_job))
        .route("/{queue}", post(enqueue_job).get(reserve_job))
        .route("/{queue}/{id}", delete(delete_job))
}

async fn enqueue_job(
    State(app): State<AppState>,
    Path(queue): Path<String>,
    body: Bytes,
) -> Response {
    push(&app, &queue, &body).await.unwrap_or_else(failure)
}

async fn reserve_job(State(app): State<AppState>, Path(queue): Path<String>) -> Response {
    reserve(&app, &queue).await.unwrap_or_else(failure)
}

async fn delete_job(
    State(app): State<AppState>,
    Path((queue, id)): Path<(String, String)>,
) -> Response {
    complete(&app, &queue, &id).await.unwrap_or_else(failure)
}

/// The OJS queue of a Cloudq queue name.
fn cloudq_queue(raw: &str) -> Result<QueueName, OjsError> {
    QueueName::parse(&raw.to_ascii_lowercase().replace('_', "-"))
}

/// The OJS job type of a klass: itself when it is one, else the class path in snake case
/// (`Mail::SendDigest` -> `mail.send_digest`). None for names that are neither.
fn klass_to_type(klass: &str) -> Option<String> {
    if JobType::parse(klass).is_ok() {
        return Some(klass.to_owned());
    }
    let mut segments = Vec::new();
    for segment in klass.split("::") {
        let chars: Vec<char> = segment.chars().collect();
        if !chars.first().is_some_and(char::is_ascii_alphabetic)
            || !chars.iter().all(|c| c.is_ascii_alphanumeric() || *c == '_')
        {
            return None;
        }
        let mut out = String::new();
        for (i, c) in chars.iter().enumerate() {
            let boundary = c.is_ascii_uppercase()
                && i > 0
                && (chars[i - 1].is_ascii_lowercase()
                    || chars[i - 1].is_ascii_digit()
                    || chars.get(i + 1).is_some_and(char::is_ascii_lowercase)
                        && chars[i - 1].is_ascii_uppercase());
            if boundary {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        segments.push(out);
    }
    let ty = segments.join(".");
    JobType::parse(&ty).is_ok().then_some(ty)
}

/// The OJS job type of any klass: [`klass_to_type`]'s when it has one, else
/// `cloudq.` and the klass's ASCII letters and digits, lowercased, every other run of
/// characters as one `_` (a leading digit or `_` gets a `k` before it), cut to fit.
fn type_of_klass(klass: &str) -> String {
    if let Some(ty) = klass_to_type(klass) {
        return ty;
    }
    let mut name = String::new();
    for c in klass.chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_lowercase());
        } else if !name.ends_with('_') {
            name.push('_');
        }
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name.insert(0, 'k');
    }
    const PREFIX: &str = "cloudq.";
    name.truncate(JobType::MAX_LEN - PREFIX.len());
    format!("{PREFIX}{name}")
}

async fn push(app: &AppState, queue: &str, body: &[u8]) -> Result<Response, ApiError> {
    let queue = cloudq_queue(queue)?;
    let (klass, args) = parse_job(body)?;
    let ty = type_of_klass(&klass);
    let mut envelope = json!({"type": ty, "queue": queue.as_str(), "args": args});
    if ty != klass {
        envelope["meta"] = json!({ "cloudq_klass": klass });
    }
    let new = NewJob::from_json(envelope)?;
    super::schemas::check_args(app, &new).await?;
    let job = Job::enqueue(new, time::now());
    let id = match app.store.lifecycle().put_job(&job).await? {
        PushOutcome::Existing(existing) | PushOutcome::CreatedAs(existing) => existing.id,
        PushOutcome::Created => job.id,
    };
    tracing::info!(job_id = %id, queue = %queue, "cloudq job pushed");
    Ok(answer(
        StatusCode::OK,
        json!({"status": "success", "message": format!("job {id} queued")}),
    ))
}

/// The klass and args of a POST body, `{"job": {...}}` or the bare job.
fn parse_job(body: &[u8]) -> Result<(String, Vec<Value>), OjsError> {
    if body.len() > MAX_ENVELOPE_BYTES {
        return Err(OjsError::new(
            ErrorCode::EnvelopeTooLarge,
            format!("the job exceeds {MAX_ENVELOPE_BYTES} bytes"),
        ));
    }
    let shape = || {
        OjsError::invalid_request(
            "the body must be {\"job\": {\"klass\": \"...\", \"args\": [...]}} or {\"klass\": \"...\", \"args\": [...]}",
        )
    };
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| OjsError::invalid_request(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(mut outer) = value else {
        return Err(shape());
    };
    let mut job = match outer.remove("job") {
        Some(Value::Object(job)) => job,
        Some(_) => return Err(shape()),
        None => outer,
    };
    let klass = match job.remove("klass") {
        Some(Value::String(k)) => k,
        Some(_) => return Err(OjsError::invalid_request("klass must be a string")),
        None => return Err(OjsError::invalid_request("klass is required")),
    };
    if klass.is_empty() {
        return Err(OjsError::invalid_request("klass must not be empty"));
    }
    match job.remove("args") {
        Some(Value::Array(args)) => Ok((klass, args)),
        Some(_) => Err(OjsError::invalid_request("args must be an array")),
        None => Err(OjsError::invalid_request("args is required (an array)")),
    }
}

async fn reserve(app: &AppState, queue: &str) -> Result<Response, ApiError> {
    let req = FetchRequest {
        queues: vec![cloudq_queue(queue)?],
        count: 1,
        worker_id: Some(CLOUDQ_WORKER.to_owned()),
        visibility_timeout_ms: None,
        tenant: ojs_core::tenant::Scope::Any,
        scheduling: None,
    };
    let mut outcome = app.store.workers().fetch(&req, time::now()).await?;
    if !outcome.saw_ready && !app.config.fetch_recheck.is_zero() {
        // As FETCH does: a just-pushed job may take a few ms to reach the index.
        tokio::time::sleep(app.config.fetch_recheck).await;
        outcome = app.store.workers().fetch(&req, time::now()).await?;
    }
    let Some(job) = outcome.jobs.first() else {
        return Ok(answer(StatusCode::OK, json!({"status": "empty"})));
    };
    tracing::info!(job_id = %job.id, queue = %job.spec.queue, "cloudq job reserved");
    Ok(answer(
        StatusCode::OK,
        json!({"job": {"klass": klass_of(job), "args": job.spec.args, "id": job.id.to_string()}}),
    ))
}

/// The klass a Cloudq client pushed (or the type, for jobs pushed over OJS).
fn klass_of(job: &Job) -> &str {
    job.spec
        .meta
        .get("cloudq_klass")
        .and_then(Value::as_str)
        .unwrap_or(job.spec.job_type.as_str())
}

async fn complete(app: &AppState, queue: &str, id: &str) -> Result<Response, ApiError> {
    let queue = cloudq_queue(queue)?;
    let not_found = || OjsError::not_found(format!("no job {id} in queue {queue}"));
    let job_id = JobId::parse(id).map_err(|_| not_found())?;
    // An id means something only under its own queue.
    match app.store.engine().get_job(&job_id).await? {
        Some(job) if job.spec.queue == queue => {}
        _ => return Err(not_found().into()),
    }
    let ack = AckRequest {
        id: job_id,
        result: None,
        worker_id: Some(CLOUDQ_WORKER.to_owned()),
        attempt: None,
    };
    let job = app
        .store
        .lifecycle()
        .ack_job(&ack, time::now())
        .await
        .map_err(|e| match e {
            StoreError::Conflict { current } => ApiError(OjsError::conflict(format!(
                "job {id} is {}, not reserved: only a reserved job can be deleted",
                current.map_or("in another state", |s| s.as_str())
            ))),
            StoreError::NotHolder { .. } => ApiError(OjsError::conflict(format!(
                "job {id} is not reserved by Cloudq: its reservation lapsed and an OJS worker \
                 holds it now, or an OJS worker fetched it"
            ))),
            other => other.into(),
        })?;
    tracing::info!(job_id = %job.id, queue = %queue, "cloudq job deleted");
    Ok(answer(
        StatusCode::OK,
        json!({"status": "success", "message": format!("job {id} deleted")}),
    ))
}

/// A Cloudq answer: JSON as `application/json`, which every Cloudq client parses.
fn answer(status: StatusCode, body: Value) -> Response {
    let mut res = (status, body.to_string()).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res.extensions_mut().insert(OwnContentType);
    res
}

/// An error in Cloudq's shape, with the HTTP status the OJS error catalogue gives it.
fn failure(err: ApiError) -> Response {
    let message = err.0.message.clone();
    let status = err.into_response().status();
    let mut res = answer(status, json!({"status": "error", "message": message}));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // As the OJS routes do: a storage outage is worth a retry, after a pause.
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_bodies() {
        let ok = |body: Value| parse_job(body.to_string().as_bytes()).ok();
        let expected = Some(("archive".to_owned(), vec![json!({"data": "foobar"})]));
        assert_eq!(
            ok(json!({"job": {"klass": "archive", "args": [{"data": "foobar"}]}})),
            expected
        );
        assert_eq!(
            ok(json!({"klass": "archive", "args": [{"data": "foobar"}]})),
            expected
        );
        assert!(ok(json!({"job": {"klass": "Archive", "args": []}})).is_some());
        // A klass is any string (seed 004): not only class names.
        assert!(ok(json!({"job": {"klass": "Arch ive", "args": []}})).is_some());
        assert!(ok(json!({"job": {"klass": "::Archive", "args": []}})).is_some());
        for bad in [
            json!({"job": {"klass": "", "args": []}}),
            json!({"job": {"klass": "archive", "args": "x"}}),
            json!({"job": {"klass": "archive"}}),
            json!({"job": {"args": []}}),
            json!({"job": {"klass": 7, "args": []}}),
            json!({"job": ["archive"]}),
            json!(["archive", []]),
        ] {
            assert_eq!(ok(bad.clone()), None, "{bad}");
        }
        assert!(parse_job(b"{not json").is_err());
    }

    #[test]
    fn class_names_map_to_job_types_and_queues_to_ojs_queues() {
        for (klass, ty) in [
            ("archive", Some("archive")),
            ("email.send", Some("email.send")),
            ("Archive", Some("archive")),
            ("Mail::SendDigest", Some("mail.send_digest")),
            ("HTTPFetcher", Some("http_fetcher")),
            ("Report2Pdf", Some("report2_pdf")),
            ("Has Space", None),
            ("9Lives", None),
            ("", None),
        ] {
            assert_eq!(klass_to_type(klass).as_deref(), ty, "{klass}");
        }
        for (klass, ty) in [
            ("Mail::SendDigest", "mail.send_digest".to_owned()),
            ("send email!", "cloudq.send_email_".to_owned()),
            ("WELCOME-MAIL", "cloudq.welcome_mail".to_owned()),
            ("9Lives", "cloudq.k9lives".to_owned()),
            ("::Archive", "cloudq.k_archive".to_owned()),
            ("été", "cloudq.k_t_".to_owned()),
            (
                &"X y".repeat(200),
                format!("cloudq.{}", "x_y".repeat(200))[..255].to_owned(),
            ),
        ] {
            let got = type_of_klass(klass);
            assert_eq!(got, ty, "{klass}");
            assert!(JobType::parse(&got).is_ok(), "{got}");
        }
        assert_eq!(
            cloudq_queue("archive_queue")
                .map(|q| q.as_str().to_owned())
                .ok(),
            Some("archive-queue".to_owned())
        );
        assert!(cloudq_queue("bad queue").is_err());
    }
}
