//! A job's W3C trace context (issue #36; ojs-distributed-tracing.md §6): taken from the
//! PUSH's `traceparent` header when the job's `meta` names none, kept in `meta` through
//! the lifecycle, sent on to its push endpoint, and named by the log lines of the
//! requests that create and settle it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// PUSH `body` with the W3C headers given.
async fn push_traced(
    app: &TestApp,
    path: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> anyhow::Result<(u16, Value)> {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", app.base_url))
        .header("content-type", "application/json")
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = req.send().await?;
    Ok((res.status().as_u16(), res.json().await?))
}

#[tokio::test]
async fn a_job_without_a_trace_of_its_own_adopts_the_requests() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let headers = [("traceparent", TRACE), ("tracestate", "vendor=7")];
    let (status, body) = push_traced(
        &app,
        "/ojs/v1/jobs",
        json!({"type": "t.trace", "args": []}),
        &headers,
    )
    .await?;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["job"]["meta"],
        json!({"traceparent": TRACE, "tracestate": "vendor=7"})
    );

    // A job's own trace is never replaced, and an invalid header is ignored.
    let own = "00-11111111111111111111111111111111-2222222222222222-00";
    let (_, body) = push_traced(
        &app,
        "/ojs/v1/jobs",
        json!({"type": "t.trace", "args": [], "meta": {"traceparent": own, "k": 1}}),
        &headers,
    )
    .await?;
    assert_eq!(body["job"]["meta"], json!({"traceparent": own, "k": 1}));
    let (_, body) = push_traced(
        &app,
        "/ojs/v1/jobs",
        json!({"type": "t.trace", "args": []}),
        &[("traceparent", "00-zz-00-01")],
    )
    .await?;
    assert_eq!(body["job"]["meta"], json!({}));

    // Each job of a batch adopts it, and FETCH and GET give it back.
    let (status, body) = push_traced(
        &app,
        "/ojs/v1/jobs/batch",
        json!({"jobs": [{"type": "t.trace", "args": [], "options": {"queue": "tb"}}]}),
        &headers,
    )
    .await?;
    assert_eq!(status, 201, "{body}");
    let id = body["jobs"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(body["jobs"][0]["meta"]["traceparent"], TRACE);
    ojs_tests::after_index_lag().await;
    let fetched = app.fetch(json!({"queues": ["tb"]})).await?;
    assert_eq!(
        fetched.body["jobs"][0]["meta"]["traceparent"], TRACE,
        "{:?}",
        fetched.body
    );
    assert_eq!(
        app.info(&id).await?.body["job"]["meta"]["traceparent"],
        TRACE
    );
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_push_delivery_carries_the_jobs_trace() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_push().await?;
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let recorded = Arc::clone(&seen);
    let router = axum::Router::new().route(
        "/",
        axum::routing::post(move |headers: HeaderMap| {
            let recorded = Arc::clone(&recorded);
            async move {
                let h = |k: &str| {
                    headers
                        .get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned()
                };
                if let Ok(mut s) = recorded.lock() {
                    s.push((h("traceparent"), h("tracestate")));
                }
                axum::Json(json!({"status": "completed", "result": {"ok": true}}))
            }
        }),
    );
    let (url, _server) = ojs_tests::serve_on_loopback(router).await?;
    let r = app
        .call(Method::POST, "/ojs/v1/push/endpoints", Some(json!({
            "endpoint": format!("{url}/"), "job_types": ["t.pushed"], "queues": ["pt"],
            "config": {"max_concurrency": 2, "timeout_ms": 5000, "signing_secret": "whsec_test_0123456789abcdef"}})))
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let pushed = app
        .push(json!({"type": "t.pushed", "args": [], "meta": {"traceparent": TRACE, "tracestate": "v=2"}, "options": {"queue": "pt"}}))
        .await?;
    let id = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let done = ojs_tests::poll_until(
        Duration::from_secs(20),
        || async { Ok(app.info(&id).await?.body["job"]["state"].clone()) },
        |state| state == "completed",
    )
    .await?;
    assert_eq!(done, "completed");
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(seen, vec![(TRACE.to_owned(), "v=2".to_owned())]);
    app.teardown().await;
    Ok(())
}

/// A writer for the test's own subscriber: every log line, kept.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    /// Everything written so far.
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().map(|b| b.clone()).unwrap_or_default()).into_owned()
    }

    /// The lines written so far that are JSON, parsed.
    fn parsed(&self) -> Vec<Value> {
        self.text()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The request log lines of a traced job's PUSH, FETCH and ACK name its trace, and every
/// line logged while a request is handled carries the request's id (its span).
#[tokio::test]
async fn a_traced_jobs_request_lines_name_its_trace() -> anyhow::Result<()> {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = TestApp::spawn().await?;
    let pushed = app
        .push(json!({"type": "t.logged", "args": [], "meta": {"traceparent": TRACE}, "options": {"queue": "logged"}}))
        .await?;
    let id = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ojs_tests::after_index_lag().await;
    let fetched = app.fetch(json!({"queues": ["logged"]})).await?;
    assert_eq!(fetched.body["jobs"][0]["id"], id.as_str());
    assert_eq!(app.ack(json!({"job_id": id})).await?.status, 200);
    app.teardown().await;
    let text = lines.text();
    let parsed = lines.parsed();
    let requests: Vec<&Value> = parsed
        .iter()
        .filter(|l| l["fields"]["message"] == "request" && l["fields"]["job_id"] == id.as_str())
        .collect();
    let paths: Vec<&str> = requests
        .iter()
        .filter_map(|l| l["fields"]["path"].as_str())
        .collect();
    for want in [
        "/ojs/v1/jobs",
        "/ojs/v1/workers/fetch",
        "/ojs/v1/workers/ack",
    ] {
        assert!(
            paths.contains(&want),
            "no request line for {want} in {paths:?}"
        );
    }
    for line in &requests {
        assert_eq!(line["fields"]["trace_id"], TRACE_ID, "{line}");
    }
    // The handler's own line ("job pushed") is inside the request's span.
    let pushed_line = parsed
        .iter()
        .find(|l| l["fields"]["message"] == "job pushed" && l["fields"]["job_id"] == id.as_str())
        .ok_or_else(|| anyhow::anyhow!("no 'job pushed' line in {text}"))?;
    let request_id = pushed
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(
        pushed_line["span"]["request_id"], request_id,
        "{pushed_line}"
    );
    Ok(())
}

/// A traced job too large for its item (its args and meta in the payload bucket) is still
/// named by the change stream's line with its trace: the item keeps the `traceparent`.
/// A small traced job pushed after it is the control: the stream applies records in
/// order, so once its line is there, the large job's would be too.
#[tokio::test]
async fn the_stream_line_of_a_large_traced_job_names_its_trace() -> anyhow::Result<()> {
    const LARGE_TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (store, _) = ojs_tests::with_payloads(ojs_tests::fresh_store().await?).await?;
    let app = TestApp::spawn_on_store(store).await?;
    let large = app
        .push(json!({"type": "t.large", "args": ["x".repeat(300 * 1024)],
            "meta": {"traceparent": format!("00-{LARGE_TRACE_ID}-b7ad6b7169203331-01")},
            "options": {"queue": "traced-large"}}))
        .await?;
    assert_eq!(large.status, 201, "{}", large.body);
    let small = app
        .push(
            json!({"type": "t.small", "args": [], "meta": {"traceparent": TRACE},
            "options": {"queue": "traced-large"}}),
        )
        .await?;
    assert_eq!(small.status, 201, "{}", small.body);
    // Its args and meta come back whole: the item's trace is only a copy.
    let info = app
        .call(
            Method::GET,
            &format!(
                "/ojs/v1/jobs/{}",
                large.body["job"]["id"].as_str().unwrap_or_default()
            ),
            None,
        )
        .await?;
    assert_eq!(
        info.body["job"]["args"][0].as_str().map(str::len),
        Some(300 * 1024)
    );
    assert_eq!(
        info.body["job"]["meta"],
        json!({"traceparent": format!("00-{LARGE_TRACE_ID}-b7ad6b7169203331-01")})
    );
    let change_traces = || -> Vec<String> {
        lines
            .parsed()
            .into_iter()
            .filter(|l| l["fields"]["message"] == "job change")
            .filter_map(|l| l["fields"]["trace_id"].as_str().map(str::to_owned))
            .collect()
    };
    // The in-process stream applies what the table's stream holds when caught up (a
    // stats read does that first); its records reach the stream within a second or so.
    let traces = ojs_tests::poll_until(
        Duration::from_secs(30),
        || async {
            app.store.catch_up().await;
            Ok(change_traces())
        },
        |traces| traces.iter().any(|t| t == TRACE_ID),
    )
    .await?;
    app.teardown().await;
    assert!(
        traces.iter().any(|t| t == TRACE_ID),
        "the stream applied neither job: {traces:?}"
    );
    assert!(
        traces.iter().any(|t| t == LARGE_TRACE_ID),
        "no stream line names the large job's trace: {traces:?}"
    );
    Ok(())
}

/// The store's entry points run in spans naming their job (and queue), inside the
/// request's span: a line the engine logs while it PUSHes, FETCHes or ACKs a job carries
/// the job's id, its queue and the request's id, so a job's lines can be followed from
/// the HTTP functions into the engine (issue #30). Seen here through each span's close
/// event, which lists the spans it is nested in.
#[tokio::test]
async fn engine_spans_name_the_job_inside_the_request_span() -> anyhow::Result<()> {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_span_list(true)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = TestApp::spawn().await?;
    let pushed = app
        .push(json!({"type": "t.spans", "args": [], "options": {"queue": "spanned"}}))
        .await?;
    let id = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ojs_tests::after_index_lag().await;
    let fetched = app.fetch(json!({"queues": ["spanned"]})).await?;
    assert_eq!(fetched.body["jobs"][0]["id"], id.as_str());
    let acked = app.ack(json!({"job_id": id})).await?;
    assert_eq!(acked.status, 200);
    app.teardown().await;
    let text = lines.text();
    let closed: Vec<Value> = lines
        .parsed()
        .into_iter()
        .filter(|l| l["fields"]["message"] == "close")
        .collect();
    let request_id_of = |reply: &ojs_tests::Reply| {
        reply
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    for (name, field, value, reply) in [
        ("push", "job_id", id.as_str(), &pushed),
        ("push", "queue", "spanned", &pushed),
        ("ack", "job_id", id.as_str(), &acked),
    ] {
        let line = closed
            .iter()
            .find(|l| l["span"]["name"] == name && l["span"][field] == value)
            .ok_or_else(|| anyhow::anyhow!("no {name} span with {field} {value} in {text}"))?;
        let outer = line["spans"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "request"))
            .ok_or_else(|| anyhow::anyhow!("the {name} span is in no request span: {line}"))?;
        assert_eq!(outer["request_id"], request_id_of(reply).as_str(), "{line}");
    }
    let fetch = closed
        .iter()
        .find(|l| l["span"]["name"] == "fetch")
        .ok_or_else(|| anyhow::anyhow!("no fetch span in {text}"))?;
    assert!(
        fetch["span"]["queues"]
            .as_str()
            .is_some_and(|q| q.contains("spanned")),
        "{fetch}"
    );
    Ok(())
}
