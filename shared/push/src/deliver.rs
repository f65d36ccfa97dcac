//! One delivery (§2.2): the signed POST of a claimed job to its endpoint, and what its
//! answer comes to (§2.3, §7.1). The secret never reaches a log line or an error.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ojs_core::push::{
    delivery_error, read_answer, signature, PushAnswer, PushTarget, MAX_ANSWER_BYTES,
};
use ojs_core::Job;
use ojs_store::PushEntry;
use serde_json::json;

/// Sends `job` to `endpoint`: the delivery id (new for every attempt) and the answer.
pub(crate) async fn deliver(
    http: &reqwest::Client,
    lambda: &aws_sdk_lambda::Client,
    endpoint: &PushEntry,
    job: &Job,
    allow_private: bool,
) -> (String, PushAnswer) {
    let delivery_id = format!("del_{}", uuid::Uuid::now_v7());
    let answer = match &endpoint.endpoint.target {
        PushTarget::Url(url) => post(http, url, endpoint, job, &delivery_id, allow_private).await,
        PushTarget::Lambda(arn) => {
            crate::invoke::invoke(lambda, arn, endpoint, job, &delivery_id).await
        }
    };
    (delivery_id, answer)
}

/// The §2.2 body: the job as the API shows it, the worker id its claim holds, and the
/// delivery id.
fn body(job: &Job, worker_id: &str, delivery_id: &str) -> Vec<u8> {
    json!({
        "job": job.to_json(),
        "worker_id": worker_id,
        "delivery_id": delivery_id,
    })
    .to_string()
    .into_bytes()
}

/// §8.3: how long the function should remember a delivery id: every attempt's timeout
/// plus every backoff between attempts.
fn idempotency_window_secs(job: &Job, timeout_ms: u64) -> u64 {
    let retry = &job.spec.retry;
    let attempts = u64::from(retry.max_attempts.max(1));
    let backoff: u64 = (1..retry.max_attempts.max(1))
        .map(|n| retry.base_delay(n).as_secs())
        .sum();
    attempts
        .saturating_mul(timeout_ms.div_ceil(1000))
        .saturating_add(backoff)
}

/// The signed POST of `job` to `url` and what its answer comes to.
async fn post(
    http: &reqwest::Client,
    url: &str,
    endpoint: &PushEntry,
    job: &Job,
    delivery_id: &str,
    allow_private: bool,
) -> PushAnswer {
    // An IP literal never reaches the resolver: judge it again here, as registered
    // rules may have changed (OJS_PUSH_ALLOW_PRIVATE turned off).
    if let Err(e) = PushTarget::parse(url, allow_private) {
        return PushAnswer::Failed(delivery_error("push_forbidden_target", e.message, false));
    }
    let timeout_ms = endpoint.endpoint.timeout_ms;
    let sent = signed_request(http, url, endpoint, job, delivery_id)
        .send()
        .await;
    let mut response = match sent {
        Ok(r) => r,
        Err(e) => return transport_failure(&e, timeout_ms),
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| ojs_core::push::parse_retry_after(v, ojs_core::time::now()));
    match answer_of(&mut response, timeout_ms).await {
        Ok(answer) => read_answer(status, retry_after, &answer),
        Err(failed) => failed,
    }
}

/// The §2.2 request of `job`: its body signed with the endpoint's secret, the delivery's
/// headers and the job's trace, within the endpoint's timeout.
fn signed_request(
    http: &reqwest::Client,
    url: &str,
    endpoint: &PushEntry,
    job: &Job,
    delivery_id: &str,
) -> reqwest::RequestBuilder {
    let payload = body(job, &endpoint.worker_id(), delivery_id);
    let timestamp = unix_seconds().to_string();
    let signed = signature(
        endpoint.endpoint.signing_secret.as_bytes(),
        &timestamp,
        &payload,
    );
    with_trace(http.post(url), job)
        .timeout(Duration::from_millis(endpoint.endpoint.timeout_ms))
        .header("content-type", "application/json")
        .header("x-ojs-delivery-id", delivery_id)
        .header("x-ojs-job-id", job.id.to_string())
        .header(
            "x-ojs-idempotency-window",
            idempotency_window_secs(job, endpoint.endpoint.timeout_ms).to_string(),
        )
        .header("x-ojs-timestamp", &timestamp)
        .header("x-ojs-signature", signed)
        .body(payload)
}

/// `request` with the job's trace (its meta's W3C context), so the receiver's work joins
/// it.
fn with_trace(mut request: reqwest::RequestBuilder, job: &Job) -> reqwest::RequestBuilder {
    if let Some(parent) = ojs_core::trace::of_meta(&job.spec.meta) {
        request = request.header("traceparent", parent.header());
        if let Some(state) = job
            .spec
            .meta
            .get(ojs_core::trace::TRACESTATE)
            .and_then(|v| v.as_str())
        {
            request = request.header("tracestate", state);
        }
    }
    request
}

/// The endpoint's answer, read within the request's timeout and only up to
/// [`MAX_ANSWER_BYTES`]: a larger one, or one cut off, is the delivery's failure.
async fn answer_of(
    response: &mut reqwest::Response,
    timeout_ms: u64,
) -> Result<Vec<u8>, PushAnswer> {
    let mut answer: Vec<u8> = Vec::new();
    loop {
        match response.chunk().await {
            Ok(None) => return Ok(answer),
            Ok(Some(c)) if answer.len() + c.len() <= MAX_ANSWER_BYTES => {
                answer.extend_from_slice(&c)
            }
            Ok(Some(_)) => {
                return Err(PushAnswer::Failed(delivery_error(
                    "push_invalid_response",
                    format!("the endpoint's answer is larger than {MAX_ANSWER_BYTES} bytes"),
                    true,
                )))
            }
            Err(e) => return Err(transport_failure(&e, timeout_ms)),
        }
    }
}

/// Seconds since the Unix epoch, as signatures' timestamps count them.
pub(crate) fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// A failure of the transport (§7.1): timeouts and connection errors are retryable.
fn transport_failure(e: &reqwest::Error, timeout_ms: u64) -> PushAnswer {
    if e.is_timeout() {
        return PushAnswer::Failed(delivery_error(
            "push_timeout",
            format!("the endpoint did not answer within timeout_ms ({timeout_ms} ms)"),
            true,
        ));
    }
    let cause = error_chain(e);
    PushAnswer::Failed(delivery_error(
        "push_connection",
        format!("the endpoint could not be reached: {cause}"),
        true,
    ))
}

/// A transport failure's message with its causes. reqwest's names the URL and cause,
/// never a header, so no signature or secret is in it.
pub(crate) fn error_chain(e: &reqwest::Error) -> String {
    let mut cause = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause.push_str(": ");
        cause.push_str(&s.to_string());
        source = s.source();
    }
    cause
}
