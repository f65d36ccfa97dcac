//! Direct invocation of a Lambda function (RequestResponse), for the SDKs' direct
//! handlers (Python `direct_handler`, JS `directHandler`). Those read the event as the job
//! itself, so the payload is the job's JSON with `delivery_id` and `worker_id` added at
//! its top level (where §2.2 nests the job under `job`); they answer
//! `{"status", "job_id", "error": "<message>"}`, read like an HTTP answer's body. No
//! signature: IAM authenticates the call, and the stack's policy limits which functions
//! may be invoked (template parameter `PushFunctionArns`). The SDK's endpoint is the
//! standard one (`AWS_ENDPOINT_URL_LAMBDA` overrides it: tests point it at a fake Invoke
//! API).

use std::time::Duration;

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use ojs_core::push::{delivery_error, read_answer, PushAnswer, MAX_ANSWER_BYTES};
use ojs_core::Job;
use ojs_store::PushEntry;
use serde_json::Value;

pub(crate) async fn invoke(
    lambda: &aws_sdk_lambda::Client,
    arn: &str,
    endpoint: &PushEntry,
    job: &Job,
    delivery_id: &str,
) -> PushAnswer {
    let mut event = job.to_json();
    if let Value::Object(o) = &mut event {
        o.insert("delivery_id".into(), Value::from(delivery_id));
        o.insert("worker_id".into(), Value::from(endpoint.worker_id()));
    }
    let timeout_ms = endpoint.endpoint.timeout_ms;
    let call = lambda
        .invoke()
        .function_name(arn)
        .invocation_type(InvocationType::RequestResponse)
        .payload(Blob::new(event.to_string().into_bytes()))
        .send();
    let out = match tokio::time::timeout(Duration::from_millis(timeout_ms), call).await {
        Err(_) => {
            return PushAnswer::Failed(delivery_error(
                "push_timeout",
                format!("the function did not answer within timeout_ms ({timeout_ms} ms)"),
                true,
            ))
        }
        Ok(Err(e)) => return invoke_failure(&e),
        Ok(Ok(out)) => out,
    };
    let payload = out.payload().map(|b| b.as_ref()).unwrap_or_default();
    if payload.len() > MAX_ANSWER_BYTES {
        return PushAnswer::Failed(delivery_error(
            "push_invalid_response",
            format!("the function's answer is larger than {MAX_ANSWER_BYTES} bytes"),
            true,
        ));
    }
    // The handler threw (or the runtime failed): the payload is Lambda's error object.
    if let Some(kind) = out.function_error() {
        let message = serde_json::from_slice::<Value>(payload)
            .ok()
            .and_then(|v| v["errorMessage"].as_str().map(str::to_owned))
            .unwrap_or_default();
        return PushAnswer::Failed(delivery_error(
            "push_function_error",
            format!("the function failed ({kind}): {message}"),
            true,
        ));
    }
    let status = u16::try_from(out.status_code()).unwrap_or(500);
    // A direct invoke answers with the function's payload, never a Retry-After.
    read_answer(status, None, payload)
}

/// A failed Invoke call (§7.1): a missing function or a refused permission will not
/// change by retrying; throttling and service errors will.
fn invoke_failure<E, R>(e: &aws_sdk_lambda::error::SdkError<E, R>) -> PushAnswer
where
    E: aws_sdk_lambda::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = e
        .as_service_error()
        .and_then(|s| s.code())
        .unwrap_or_default()
        .to_owned();
    let text = aws_sdk_lambda::error::DisplayErrorContext(e).to_string();
    let retryable = !matches!(
        code.as_str(),
        "ResourceNotFoundException"
            | "AccessDeniedException"
            | "InvalidParameterValueException"
            | "RequestTooLargeException"
    ) && !text.contains("AccessDenied");
    // A missing function or a refused permission disables the endpoint (§7.2.2-3).
    let kind = if retryable {
        "push_invoke_error"
    } else {
        "push_invoke_refused"
    };
    PushAnswer::Failed(delivery_error(
        kind,
        format!("invoking the function failed: {text}"),
        retryable,
    ))
}
