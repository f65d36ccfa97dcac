//! API keys and CORS over HTTP: requests without a valid key are refused with 401 and
//! the OJS error body before anything is written; browsers get CORS answers only for the
//! configured origins, never `*` while keys are required.

use ojs_http::auth::issue_key;
use ojs_http::{AuthMode, HttpConfig};
use ojs_tests::TestApp;
use reqwest::{Method, RequestBuilder};
use serde_json::{json, Value};

fn keyed() -> HttpConfig {
    HttpConfig {
        auth: AuthMode::ApiKey,
        cors_origins: vec!["https://app.example.com".into()],
        ..HttpConfig::default()
    }
}

async fn send(req: RequestBuilder) -> anyhow::Result<(u16, reqwest::header::HeaderMap, Value)> {
    let res = req.send().await?;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = serde_json::from_slice(&res.bytes().await?).unwrap_or(Value::Null);
    Ok((status, headers, body))
}

fn push_req(app: &TestApp, path_suffix: &str, id: &str) -> RequestBuilder {
    app.client
        .post(format!("{}/ojs/v1/jobs{path_suffix}", app.base_url))
        .header("content-type", "application/openjobspec+json")
        .body(json!({"id": id, "type": "auth.probe", "queue": "auth-q", "args": [1]}).to_string())
}

#[tokio::test]
async fn requests_without_a_valid_key_get_401_and_write_nothing() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(keyed()).await?;
    let good = issue_key(&app.store, "tests").await?;
    let id = uuid::Uuid::now_v7().to_string();
    let wrong_secret = format!("{}{}", &good.key[..good.key.len() - 1], {
        if good.key.ends_with('0') {
            '1'
        } else {
            '0'
        }
    });
    let unknown_id = format!("ojs_ffffffffffff_{}", "ab".repeat(32));
    let attempts: Vec<(&str, RequestBuilder)> = vec![
        ("no header", push_req(&app, "", &id)),
        (
            "key in the query string",
            push_req(&app, &format!("?api_key={}", good.key), &id),
        ),
        (
            "key in another header",
            push_req(&app, "", &id).header("x-api-key", &good.key),
        ),
        (
            "basic scheme",
            push_req(&app, "", &id).header("authorization", format!("Basic {}", good.key)),
        ),
        (
            "bare key",
            push_req(&app, "", &id).header("authorization", &good.key),
        ),
        (
            "malformed key",
            push_req(&app, "", &id).header("authorization", "Bearer ojs_nothex_123"),
        ),
        (
            "wrong secret",
            push_req(&app, "", &id).header("authorization", format!("Bearer {wrong_secret}")),
        ),
        (
            "unknown key id",
            push_req(&app, "", &id).header("authorization", format!("Bearer {unknown_id}")),
        ),
        (
            "two headers, one good",
            push_req(&app, "", &id)
                .header("authorization", format!("Bearer {}", good.key))
                .header("authorization", "Bearer x"),
        ),
    ];
    for (what, req) in attempts {
        let (status, headers, body) = send(req).await?;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(body["error"]["code"], "unauthenticated", "{what}");
        assert_eq!(body["error"]["retryable"], false, "{what}");
        assert!(body["error"]["request_id"].is_string(), "{what}");
        assert_eq!(
            headers
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer"),
            "{what}"
        );
        let text = body.to_string();
        assert!(
            !text.contains(&good.key[17..]),
            "{what}: the error echoes the secret"
        );
    }
    // Reads and worker calls are refused the same way.
    for (method, path) in [
        (Method::GET, format!("/ojs/v1/jobs/{id}")),
        (Method::POST, "/ojs/v1/workers/fetch".to_owned()),
        (Method::GET, "/ojs/v1/queues".to_owned()),
        (Method::GET, "/ojs/v1/nowhere".to_owned()),
    ] {
        let (status, _, body) = send(
            app.client
                .request(method, format!("{}{path}", app.base_url)),
        )
        .await?;
        assert_eq!(status, 401, "{path}: {body}");
    }
    let job_id = ojs_core::JobId::parse(&id)?;
    assert!(
        app.store.engine().get_job(&job_id).await?.is_none(),
        "a refused push was written"
    );
    assert!(
        app.store.engine().list_queues().await?.is_empty(),
        "a refused push made a queue"
    );

    // The issued key works, for producers and workers.
    let bearer = format!("Bearer {}", good.key);
    let (status, _, body) = send(push_req(&app, "", &id).header("authorization", &bearer)).await?;
    assert_eq!(status, 201, "{body}");
    let (status, _, body) = send(
        app.client
            .post(format!("{}/ojs/v1/workers/fetch", app.base_url))
            .header("authorization", &bearer)
            .header("content-type", "application/json")
            .body(json!({"queues": ["auth-q"], "worker_id": "w1"}).to_string()),
    )
    .await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobs"][0]["id"], id.as_str());
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn discovery_and_health_need_no_key() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(keyed()).await?;
    for path in ["/ojs/manifest", "/ojs/v1/health"] {
        let (status, _, body) = send(app.client.get(format!("{}{path}", app.base_url))).await?;
        assert_eq!(status, 200, "{path}: {body}");
    }
    // Only GET: a POST to the manifest path still needs a key.
    let (status, _, _) = send(app.client.post(format!("{}/ojs/manifest", app.base_url))).await?;
    assert_eq!(status, 401);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_revoked_key_is_refused() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(keyed()).await?;
    let key = issue_key(&app.store, "revoked").await?;
    let listed = app.store.api_keys().list().await?;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].hash.starts_with("$argon2id$"));
    assert!(
        !listed[0].hash.contains(&key.key[17..]),
        "the secret is stored"
    );
    app.store
        .api_keys()
        .revoke(&key.record.id, ojs_core::time::now())
        .await?;
    let id = uuid::Uuid::now_v7().to_string();
    let (status, _, body) =
        send(push_req(&app, "", &id).header("authorization", format!("Bearer {}", key.key)))
            .await?;
    assert_eq!(status, 401, "{body}");
    // Revoking an unknown key is a not-found, not a silent success.
    assert!(app
        .store
        .api_keys()
        .revoke("000000000000", ojs_core::time::now())
        .await
        .is_err());
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn cors_answers_only_listed_origins() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_config(keyed()).await?;
    let preflight = |origin: &str| {
        app.client
            .request(Method::OPTIONS, format!("{}/ojs/v1/jobs", app.base_url))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
    };
    let (status, headers, _) = send(preflight("https://app.example.com")).await?;
    assert_eq!(status, 204);
    assert_eq!(
        headers
            .get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("https://app.example.com")
    );
    let allowed = headers
        .get("access-control-allow-headers")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(allowed.contains("authorization"), "{allowed}");
    let (status, headers, _) = send(preflight("https://evil.example.com")).await?;
    assert_eq!(status, 204);
    assert!(headers.get("access-control-allow-origin").is_none());
    // Preflights, answered before auth, and a plain OPTIONS carry the headers the HTTP
    // binding puts on every response.
    let plain = app
        .client
        .request(Method::OPTIONS, format!("{}/ojs/v1/jobs", app.base_url));
    for request in [preflight("https://app.example.com"), plain] {
        let (status, headers, _) = send(request.header("x-request-id", "req-options-1")).await?;
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header("ojs-version"), Some("1.0"), "{status}");
        assert_eq!(header("x-request-id"), Some("req-options-1"), "{status}");
        assert_eq!(
            header("content-type"),
            Some("application/openjobspec+json"),
            "{status}"
        );
    }

    // Actual responses (even a 401) carry the origin only when it is listed.
    for (origin, expect) in [
        ("https://app.example.com", Some("https://app.example.com")),
        ("https://evil.example.com", None),
    ] {
        let (status, headers, _) = send(
            app.client
                .get(format!("{}/ojs/v1/queues", app.base_url))
                .header("origin", origin),
        )
        .await?;
        assert_eq!(status, 401);
        assert_eq!(
            headers
                .get("access-control-allow-origin")
                .and_then(|v| v.to_str().ok()),
            expect
        );
    }
    app.teardown().await;

    // A wildcard is ignored while keys are required.
    let app = TestApp::spawn_with_config(HttpConfig {
        auth: AuthMode::ApiKey,
        cors_origins: vec!["*".into()],
        ..HttpConfig::default()
    })
    .await?;
    let (_, headers, _) = send(
        app.client
            .get(format!("{}/ojs/manifest", app.base_url))
            .header("origin", "https://anyone.example"),
    )
    .await?;
    assert!(headers.get("access-control-allow-origin").is_none());
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn request_ids_that_could_inject_headers_are_replaced() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    for hostile in ["a b", "x\tSet-Cookie: a=b", &"r".repeat(500), "é-non-ascii"] {
        let Ok(value) = reqwest::header::HeaderValue::from_bytes(hostile.as_bytes()) else {
            continue;
        };
        let (_, headers, _) = send(
            app.client
                .get(format!("{}/ojs/v1/health", app.base_url))
                .header("x-request-id", value),
        )
        .await?;
        let echoed = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            echoed.starts_with("req_"),
            "{hostile:?} echoed as {echoed:?}"
        );
    }
    let (_, headers, _) = send(
        app.client
            .get(format!("{}/ojs/v1/health", app.base_url))
            .header("x-request-id", "trace-123"),
    )
    .await?;
    assert_eq!(
        headers.get("x-request-id").and_then(|v| v.to_str().ok()),
        Some("trace-123")
    );
    app.teardown().await;
    Ok(())
}
