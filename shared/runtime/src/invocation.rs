//! Logging of every Lambda function: JSON lines, each carrying the span it was logged in,
//! so an endpoint's request is found by its request id and an event function's batch by
//! the Lambda request id (`span.request_id`) or its X-Ray trace (`span.xray_trace_id`).

/// JSON log lines on stdout (CloudWatch's JSON log format; the runtime adds the time),
/// filtered by `RUST_LOG`, with the current span's fields on every line. Endpoint and
/// event functions alike call it, so their lines read the same.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_current_span(true)
        .with_span_list(false)
        .without_time()
        .init();
}

/// The span of one invocation: its Lambda request id, and its X-Ray trace id when Lambda
/// sends one (`Tracing: Active`). At ERROR level so that no `RUST_LOG` that lets a line
/// through filters out the span that names it (a span below the filter is not recorded).
pub fn invocation_span(request_id: &str, xray_trace_id: Option<&str>) -> tracing::Span {
    tracing::error_span!(
        "invocation",
        request_id = %request_id,
        xray_trace_id = xray_trace_id.unwrap_or("-"),
    )
}
