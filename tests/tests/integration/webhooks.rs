//! Webhooks (ojs-webhooks.md): the subscription API, and deliveries from the change
//! stream to receivers on loopback that verify every signature with their subscription's
//! secret (an HMAC computed here, not the server's function), retries that go through the
//! table, and the delivery log.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const SUBS: &str = "/ojs/v1/webhooks/subscriptions";

/// HMAC-SHA256 (RFC 2104), hex.
fn hmac_hex(key: &[u8], message: &[u8]) -> String {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    outer.iter().map(|b| format!("{b:02x}")).collect()
}

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Got {
    headers: HeaderMap,
    body: Value,
    /// Whether `X-OJS-Signature` holds `sha256=HMAC(secret, timestamp "." body)`.
    signed: bool,
    /// When it arrived.
    at: Instant,
}

/// A webhook receiver on loopback: answers the statuses queued (then 200) and records
/// every request, checking its signature with the secret set after the subscription is
/// created.
#[derive(Clone, Default)]
struct Receiver {
    secret: Arc<Mutex<String>>,
    answers: Arc<Mutex<VecDeque<u16>>>,
    always: Arc<Mutex<Option<u16>>>,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    async fn start(&self) -> anyhow::Result<String> {
        async fn handle(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
            let h = |k: &str| {
                headers
                    .get(k)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            let secret = r.secret.lock().map(|s| s.clone()).unwrap_or_default();
            let mut message = h("x-ojs-timestamp").into_bytes();
            message.push(b'.');
            message.extend_from_slice(&body);
            let expected = format!("sha256={}", hmac_hex(secret.as_bytes(), &message));
            let signed = !secret.is_empty()
                && h("x-ojs-signature")
                    .split(',')
                    .any(|s| s.trim() == expected);
            if let Ok(mut got) = r.got.lock() {
                got.push(Got {
                    headers: headers.clone(),
                    body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    signed,
                    at: Instant::now(),
                });
            }
            let always = r.always.lock().ok().and_then(|a| *a);
            let next = r.answers.lock().ok().and_then(|mut a| a.pop_front());
            StatusCode::from_u16(next.or(always).unwrap_or(200)).unwrap_or(StatusCode::OK)
        }
        let router = Router::new()
            .route("/hook", post(handle))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(format!("http://{addr}/hook"))
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().map(|g| g.clone()).unwrap_or_default()
    }

    async fn wait_for(&self, n: usize, within: Duration) -> Vec<Got> {
        let until = Instant::now() + within;
        while self.got().len() < n && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.got()
    }
}

fn header(g: &Got, k: &str) -> String {
    g.headers
        .get(k)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Creates a subscription; returns its id and secret and hands the secret to `receiver`.
async fn subscribe(app: &TestApp, receiver: &Receiver, body: Value) -> anyhow::Result<String> {
    let r = app.call(Method::POST, SUBS, Some(body)).await?;
    anyhow::ensure!(r.status == 201, "create: {} {:?}", r.status, r.body);
    let secret = r.body["secret"].as_str().unwrap_or_default().to_owned();
    anyhow::ensure!(secret.starts_with("whsec_"), "{:?}", r.body);
    if let Ok(mut s) = receiver.secret.lock() {
        *s = secret;
    }
    Ok(r.body["id"].as_str().unwrap_or_default().to_owned())
}

async fn run_job(app: &TestApp, queue: &str) -> anyhow::Result<String> {
    run_job_as(app, None, queue).await
}

/// Pushes a job for `tenant` (the `X-OJS-Tenant` header; `None`: no tenant), has a worker
/// of every tenant fetch and complete it; returns its id.
async fn run_job_as(app: &TestApp, tenant: Option<&str>, queue: &str) -> anyhow::Result<String> {
    let job = json!({"type": "report.build", "args": [1], "options": {"queue": queue}});
    let pushed = app
        .call_as(tenant, Method::POST, "/ojs/v1/jobs", Some(job))
        .await?;
    anyhow::ensure!(pushed.status == 201, "{:?}", pushed.body);
    let id = pushed.body["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The strict layer lags the ready index as AWS may: FETCH until the job shows (a
    // bound for a loaded machine, not a guess at the lag).
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let fetched = app
            .fetch(json!({"queues": [queue], "worker_id": "w1"}))
            .await?;
        if fetched.body["jobs"][0]["id"] == id.as_str() {
            break;
        }
        anyhow::ensure!(Instant::now() < until, "fetch: {:?}", fetched.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let acked = app
        .ack(json!({"job_id": id, "result": {"ok": true}, "worker_id": "w1"}))
        .await?;
    anyhow::ensure!(acked.status == 200, "ack: {:?}", acked.body);
    Ok(id)
}

async fn deliveries(app: &TestApp, sub: &str) -> anyhow::Result<Vec<Value>> {
    let r = app
        .call(Method::GET, &format!("{SUBS}/{sub}/deliveries"), None)
        .await?;
    anyhow::ensure!(r.status == 200, "{:?}", r.body);
    Ok(r.body["deliveries"].as_array().cloned().unwrap_or_default())
}

async fn got_flaky_id(app: &TestApp, sub: &str) -> anyhow::Result<String> {
    Ok(deliveries(app, sub).await?[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

fn config(delays_ms: &[u64]) -> ojs_push::WebhookConfig {
    ojs_push::WebhookConfig::local(
        true,
        delays_ms
            .iter()
            .map(|ms| Duration::from_millis(*ms))
            .collect(),
    )
}

#[tokio::test]
async fn subscription_crud_validation_and_secrecy() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_webhooks(config(&[1000])).await?;
    let created = app
        .call(
            Method::POST,
            SUBS,
            Some(json!({
                "url": "https://example.com/hooks",
                "events": ["job.completed", "job.*"],
                "filter": {"queues": ["payments"]},
                "metadata": {"owner": "team-a"},
            })),
        )
        .await?;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["id"].as_str().unwrap_or_default().to_owned();
    let secret = created.body["secret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(id.starts_with("sub_"), "{:?}", created.body);
    assert!(secret.starts_with("whsec_") && secret.len() > 40);
    assert_eq!(created.body["active"], true);
    assert_eq!(created.body["events"], json!(["job.completed", "job.*"]));
    assert_eq!(created.body["filter"]["queues"], json!(["payments"]));
    assert_eq!(created.body["metadata"]["owner"], "team-a");

    assert_eq!(
        created.body["subscription"]["id"],
        json!(id),
        "also under subscription"
    );
    let got = app.call(Method::GET, &format!("{SUBS}/{id}"), None).await?;
    assert_eq!(got.status, 200);
    assert!(got.body.get("secret").is_none(), "{:?}", got.body);
    assert_eq!(got.body["url"], "https://example.com/hooks");
    // The fields at the top level and under `subscription` (the suite and SDKs read it).
    let view = got.body["subscription"].clone();
    let mut bare = got.body.clone();
    if let Some(o) = bare.as_object_mut() {
        o.remove("subscription");
    }
    assert_eq!(bare, view);
    let listed = app.call(Method::GET, SUBS, None).await?;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body["subscriptions"], json!([view]));
    assert_eq!(listed.body["pagination"]["total"], 1);

    // PATCH is partial.
    let patched = app
        .call(
            Method::PATCH,
            &format!("{SUBS}/{id}"),
            Some(json!({"events": ["job.failed"], "active": false})),
        )
        .await?;
    assert_eq!(patched.status, 200, "{:?}", patched.body);
    assert_eq!(patched.body["events"], json!(["job.failed"]));
    assert_eq!(patched.body["active"], false);
    assert_eq!(patched.body["url"], "https://example.com/hooks");
    assert_eq!(patched.body["metadata"]["owner"], "team-a");
    let again = app.call(Method::GET, &format!("{SUBS}/{id}"), None).await?;
    assert_eq!(again.body["active"], false);
    assert_eq!(again.body["events"], json!(["job.failed"]));

    // Bad bodies: 400 naming the field.
    for (method, path, body, field) in [
        (
            Method::POST,
            SUBS.to_owned(),
            json!({"events": ["*"]}),
            "$.url",
        ),
        (
            Method::POST,
            SUBS.to_owned(),
            json!({"url": "ftp://example.com/x", "events": ["*"]}),
            "$.url",
        ),
        (
            Method::POST,
            SUBS.to_owned(),
            json!({"url": "https://example.com/x", "events": ["job.completed", "nope"]}),
            "$.events[1]",
        ),
        (
            Method::POST,
            SUBS.to_owned(),
            json!({"url": "https://example.com/x", "events": []}),
            "$.events",
        ),
        (
            Method::POST,
            SUBS.to_owned(),
            json!({"url": "https://example.com/x", "events": ["*"], "secret": "mine"}),
            "$.secret",
        ),
        (
            Method::PATCH,
            format!("{SUBS}/{id}"),
            json!({"secret": "whk_a_secret_of_mine"}),
            "$.secret",
        ),
        (
            Method::POST,
            SUBS.to_owned(),
            json!({"url": format!("https://example.com/{}", "x".repeat(3000)), "events": ["*"]}),
            "$.url",
        ),
        (
            Method::PATCH,
            format!("{SUBS}/{id}"),
            json!({"events": "job.completed"}),
            "$.events",
        ),
        (
            Method::PATCH,
            format!("{SUBS}/{id}"),
            json!({"active": "yes"}),
            "$.active",
        ),
        (
            Method::PATCH,
            format!("{SUBS}/{id}"),
            json!({"filter": {"queues": "q"}}),
            "$.filter.queues",
        ),
    ] {
        let r = app.call(method.clone(), &path, Some(body.clone())).await?;
        assert_eq!(r.status, 400, "{method} {body}: {:?}", r.body);
        assert_eq!(r.body["error"]["code"], "invalid_request", "{:?}", r.body);
        assert!(
            r.body["error"].to_string().contains(field),
            "{body}: {field} not named in {:?}",
            r.body
        );
    }

    // Rotation answers a new secret once.
    let rotated = app
        .call(Method::POST, &format!("{SUBS}/{id}/rotate-secret"), None)
        .await?;
    assert_eq!(rotated.status, 200, "{:?}", rotated.body);
    let new_secret = rotated.body["secret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);

    // No answer but the create's and the rotation's carries a secret.
    let answers = [
        app.call(Method::GET, &format!("{SUBS}/{id}"), None).await?,
        app.call(Method::GET, SUBS, None).await?,
        app.call(
            Method::PATCH,
            &format!("{SUBS}/{id}"),
            Some(json!({"active": true})),
        )
        .await?,
        app.call(Method::GET, &format!("{SUBS}/{id}/deliveries"), None)
            .await?,
    ];
    for r in &answers {
        assert_eq!(r.status, 200, "{:?}", r.body);
        let text = r.body.to_string();
        assert!(
            !text.contains(&secret) && !text.contains(&new_secret) && !text.contains("whsec_"),
            "secret leaked: {text}"
        );
    }

    // Unknown ids: 404 with the OJS error body.
    let missing = "sub_01900000-0000-7000-8000-000000000000";
    for (method, path, body) in [
        (Method::GET, format!("{SUBS}/{missing}"), None),
        (
            Method::PATCH,
            format!("{SUBS}/{missing}"),
            Some(json!({"active": false})),
        ),
        (Method::DELETE, format!("{SUBS}/{missing}"), None),
        (
            Method::POST,
            format!("{SUBS}/{missing}/rotate-secret"),
            None,
        ),
        (Method::GET, format!("{SUBS}/{missing}/deliveries"), None),
        (Method::GET, format!("{SUBS}/nope"), None),
    ] {
        let r = app.call(method.clone(), &path, body).await?;
        assert_eq!(r.status, 404, "{method} {path}: {:?}", r.body);
        assert_eq!(r.body["error"]["code"], "not_found");
    }

    let deleted = app
        .call(Method::DELETE, &format!("{SUBS}/{id}"), None)
        .await?;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    let gone = app.call(Method::GET, &format!("{SUBS}/{id}"), None).await?;
    assert_eq!(gone.status, 404);
    let listed = app.call(Method::GET, SUBS, None).await?;
    assert_eq!(listed.body["subscriptions"], json!([]));

    // A subscription may bring its own secret (the suite and several SDKs send one); it
    // is answered once, like a generated one, and signs its deliveries.
    let own = app
        .call(
            Method::POST,
            SUBS,
            Some(json!({"url": "https://example.com/own", "events": ["*"], "secret": "whk_brought_by_the_caller"})),
        )
        .await?;
    assert_eq!(own.status, 201, "{:?}", own.body);
    assert_eq!(own.body["secret"], "whk_brought_by_the_caller");
    let own_id = own.body["id"].as_str().unwrap_or_default();
    let stored = app.store.webhooks().get(own_id).await?;
    assert_eq!(
        stored.map(|w| w.secret),
        Some("whk_brought_by_the_caller".to_owned())
    );
    Ok(())
}

#[tokio::test]
async fn private_and_metadata_addresses_are_refused() -> anyhow::Result<()> {
    // The default settings: OJS_PUSH_ALLOW_PRIVATE off.
    let app = TestApp::spawn().await?;
    for url in [
        "https://127.0.0.1/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://10.1.2.3/hook",
        "https://localhost:8443/hook",
        "http://127.0.0.1:9/hook",
    ] {
        let r = app
            .call(
                Method::POST,
                SUBS,
                Some(json!({"url": url, "events": ["*"]})),
            )
            .await?;
        assert_eq!(r.status, 400, "{url}: {:?}", r.body);
        assert!(
            r.body["error"].to_string().contains("$.url"),
            "{:?}",
            r.body
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_job_lifecycle_delivers_signed_subscribed_events_only() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_webhooks(config(&[1000])).await?;
    let receiver = Receiver::default();
    let url = receiver.start().await?;
    let sub = subscribe(
        &app,
        &receiver,
        json!({"url": url, "events": ["job.started", "job.completed"], "filter": {"queues": ["wh"]}}),
    )
    .await?;
    // Subscribed to everything but inactive, and subscribed to another queue: nothing.
    let idle = Receiver::default();
    let idle_url = idle.start().await?;
    subscribe(
        &app,
        &idle,
        json!({"url": idle_url, "events": ["*"], "active": false}),
    )
    .await?;
    let other = Receiver::default();
    let other_url = other.start().await?;
    subscribe(
        &app,
        &other,
        json!({"url": other_url, "events": ["*"], "filter": {"queues": ["elsewhere"]}}),
    )
    .await?;

    let job_id = run_job(&app, "wh").await?;
    let got = receiver.wait_for(2, Duration::from_secs(10)).await;
    // Whatever else might come (job.enqueued would be a bug) arrives within this too.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let got_all = receiver.got();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got_all.len(),
        2,
        "unsubscribed events delivered: {got_all:?}"
    );
    let mut types: Vec<String> = got
        .iter()
        .map(|g| g.body["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    types.sort();
    assert_eq!(types, ["job.completed", "job.started"]);
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let mut delivery_ids = Vec::new();
    for g in &got {
        assert!(g.signed, "bad signature: {:?}", g.headers);
        assert_eq!(header(g, "content-type"), "application/json");
        assert!(header(g, "user-agent").starts_with("OJS-Webhook/"));
        assert_eq!(
            header(g, "x-ojs-event-type"),
            g.body["type"].as_str().unwrap_or("?")
        );
        assert_eq!(header(g, "x-ojs-subscription-id"), sub);
        let ts: u64 = header(g, "x-ojs-timestamp").parse()?;
        assert!(ts.abs_diff(now) < 300, "timestamp {ts} vs {now}");
        let del = header(g, "x-ojs-delivery-id");
        assert!(del.starts_with("del_"), "{del}");
        delivery_ids.push(del);
        assert_eq!(g.body["specversion"], "1.0");
        assert_eq!(g.body["subject"], job_id.as_str());
        assert_eq!(g.body["data"]["job_id"], job_id.as_str());
        assert_eq!(g.body["data"]["queue"], "wh");
        assert!(g.body["id"].as_str().is_some_and(|i| i.starts_with("evt_")));
    }
    assert_ne!(delivery_ids[0], delivery_ids[1]);
    // A delivered event is the stored one: same id, so a receiver can match the events
    // API's copy or drop a duplicate.
    let stored = app
        .call(
            Method::GET,
            "/ojs/v1/events?queues=wh&types=job.started,job.completed",
            None,
        )
        .await?;
    let mut stored_ids: Vec<&str> = stored.body["events"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["id"].as_str()).collect())
        .unwrap_or_default();
    let mut delivered_ids: Vec<&str> = got.iter().filter_map(|g| g.body["id"].as_str()).collect();
    stored_ids.sort_unstable();
    delivered_ids.sort_unstable();
    assert_eq!(delivered_ids, stored_ids, "{:?}", stored.body);
    let completed = got
        .iter()
        .find(|g| g.body["type"] == "job.completed")
        .map(|g| g.body.clone())
        .unwrap_or_default();
    assert_eq!(completed["data"]["result"], json!({"ok": true}));
    assert!(
        idle.got().is_empty(),
        "inactive subscription got {:?}",
        idle.got()
    );
    assert!(
        other.got().is_empty(),
        "filtered-out subscription got {:?}",
        other.got()
    );

    // The log: one delivered attempt each, with its status and duration. An attempt is
    // logged after its answer, so the receiver may have both before the log does.
    let logged_by = Instant::now() + Duration::from_secs(10);
    let mut log = deliveries(&app, &sub).await?;
    while log.len() < 2 && Instant::now() < logged_by {
        tokio::time::sleep(Duration::from_millis(50)).await;
        log = deliveries(&app, &sub).await?;
    }
    assert_eq!(log.len(), 2, "{log:?}");
    for d in &log {
        assert_eq!(d["attempt"], 1);
        assert_eq!(d["status_code"], 200);
        assert_eq!(d["status"], "delivered");
        assert!(d["duration_ms"].is_u64());
        assert!(delivery_ids.iter().any(|i| d["id"] == i.as_str()), "{d}");
    }

    // §6.6: the test event reaches the endpoint, signed, and is answered.
    let tested = app
        .call(Method::POST, &format!("{SUBS}/{sub}/test"), None)
        .await?;
    assert_eq!(tested.status, 200, "{:?}", tested.body);
    assert_eq!(tested.body["success"], true);
    assert_eq!(tested.body["status_code"], 200);
    let got = receiver.wait_for(3, Duration::from_secs(5)).await;
    assert_eq!(got.len(), 3);
    assert_eq!(got[2].body["type"], "webhook.test");
    assert!(got[2].signed);

    // Rotated: both secrets sign during the transition, so a receiver with either verifies.
    let rotated = app
        .call(Method::POST, &format!("{SUBS}/{sub}/rotate-secret"), None)
        .await?;
    let new_secret = rotated.body["secret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    app.call(Method::POST, &format!("{SUBS}/{sub}/test"), None)
        .await?;
    if let Ok(mut s) = receiver.secret.lock() {
        *s = new_secret;
    }
    app.call(Method::POST, &format!("{SUBS}/{sub}/test"), None)
        .await?;
    let got = receiver.wait_for(5, Duration::from_secs(5)).await;
    assert!(got[3].signed && got[4].signed, "{:?}", &got[3..]);
    assert_eq!(
        header(&got[4], "x-ojs-signature")
            .matches("sha256=")
            .count(),
        2
    );
    Ok(())
}

#[tokio::test]
async fn failed_deliveries_are_retried_through_the_table_and_logged() -> anyhow::Result<()> {
    // One retry 300 ms after a failure (the §7.2 schedule's 30 s, shortened).
    let app = TestApp::spawn_with_webhooks(config(&[300])).await?;
    let flaky = Receiver::default();
    if let Ok(mut a) = flaky.answers.lock() {
        a.push_back(500);
    }
    let flaky_url = flaky.start().await?;
    let flaky_sub = subscribe(
        &app,
        &flaky,
        json!({"url": flaky_url, "events": ["job.completed"]}),
    )
    .await?;
    let down = Receiver::default();
    if let Ok(mut a) = down.always.lock() {
        *a = Some(503);
    }
    let down_url = down.start().await?;
    let down_sub = subscribe(
        &app,
        &down,
        json!({"url": down_url, "events": ["job.completed"]}),
    )
    .await?;
    let gone = Receiver::default();
    if let Ok(mut a) = gone.always.lock() {
        *a = Some(404);
    }
    let gone_url = gone.start().await?;
    let gone_sub = subscribe(
        &app,
        &gone,
        json!({"url": gone_url, "events": ["job.completed"]}),
    )
    .await?;

    run_job(&app, "retries").await?;
    // No retry is due later than 300 ms after its failure: what has not come in 10 s will
    // not come.
    let got = flaky.wait_for(2, Duration::from_secs(10)).await;
    down.wait_for(2, Duration::from_secs(10)).await;
    gone.wait_for(1, Duration::from_secs(10)).await;
    // An attempt is logged after its answer: wait for each log to show the attempts
    // received (its last one settled), then for anything more that would come.
    let logged = |sub: &str, n: usize, last: &'static str| {
        let (app, sub) = (&app, sub.to_owned());
        ojs_tests::poll_until(
            Duration::from_secs(10),
            move || {
                let sub = sub.clone();
                async move { deliveries(app, &sub).await }
            },
            move |log: &Vec<Value>| log.len() >= n && log[0]["status"] == last,
        )
    };
    logged(&flaky_sub, 2, "delivered").await?;
    logged(&down_sub, 2, "dead").await?;
    logged(&gone_sub, 1, "dead").await?;
    // Whatever more would come (a third attempt, a retry of a 404) is due by now and made
    // within two 200 ms redrives; a slow machine can only make this check miss one.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // 500 then 200: two attempts of one delivery (the same id), both signed.
    assert_eq!(flaky.got().len(), 2, "{:?}", flaky.got());
    assert!(got.iter().all(|g| g.signed));
    assert_eq!(
        header(&got[0], "x-ojs-delivery-id"),
        header(&got[1], "x-ojs-delivery-id")
    );
    assert_eq!(got[0].body, got[1].body);
    let log = deliveries(&app, &flaky_sub).await?;
    assert_eq!(log.len(), 2, "{log:?}");
    // Newest first.
    assert_eq!(log[0]["attempt"], 2);
    assert_eq!(log[0]["status_code"], 200);
    assert_eq!(log[0]["status"], "delivered");
    assert_eq!(log[1]["attempt"], 1);
    assert_eq!(log[1]["status_code"], 500);
    assert_eq!(log[1]["status"], "retrying");
    assert!(log[1]["next_attempt_at"].is_string());
    assert!(log[1]["error"].as_str().is_some_and(|e| e.contains("500")));
    assert_eq!(log[0]["id"], log[1]["id"]);

    // Always 503: retried until the schedule ends (2 attempts here), then dead.
    assert_eq!(down.got().len(), 2, "{:?}", down.got());
    let log = deliveries(&app, &down_sub).await?;
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0]["status"], "dead");
    assert_eq!(log[1]["status"], "retrying");

    // The dead delivery, looked up by id (in every subscription's log, or in one), and
    // retried by hand once its receiver is back: a third attempt, same delivery id.
    let dead_id = log[0]["id"].as_str().unwrap_or_default().to_owned();
    for path in [
        format!("/ojs/v1/webhooks/deliveries/{dead_id}"),
        format!("/ojs/v1/webhooks/deliveries/{dead_id}?subscription_id={down_sub}"),
    ] {
        let r = app.call(Method::GET, &path, None).await?;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.body["subscription_id"], down_sub.as_str());
        assert_eq!(r.body["status"], "dead");
        assert_eq!(r.body["attempts"].as_array().map(Vec::len), Some(2));
        assert_eq!(r.body["attempts"][0]["attempt"], 1);
    }
    if let Ok(mut a) = down.always.lock() {
        *a = None;
    }
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/webhooks/deliveries/{dead_id}/retry"),
            None,
        )
        .await?;
    assert_eq!(r.status, 202, "{:?}", r.body);
    let got = down.wait_for(3, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 3);
    assert!(got[2].signed);
    assert_eq!(header(&got[2], "x-ojs-delivery-id"), dead_id);
    assert_eq!(got[2].body, got[0].body);
    // The attempt is logged after its answer: wait for the line.
    let until = Instant::now() + Duration::from_secs(5);
    let mut log = deliveries(&app, &down_sub).await?;
    while log[0]["attempt"] != 3 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        log = deliveries(&app, &down_sub).await?;
    }
    assert_eq!(log[0]["attempt"], 3, "{log:?}");
    assert_eq!(log[0]["status"], "delivered");
    // Only a dead delivery is retried; an unknown one is 404.
    let flaky_id = got_flaky_id(&app, &flaky_sub).await?;
    let r = app
        .call(
            Method::POST,
            &format!("/ojs/v1/webhooks/deliveries/{flaky_id}/retry"),
            None,
        )
        .await?;
    assert_eq!(r.status, 409, "{:?}", r.body);
    let r = app
        .call(
            Method::GET,
            "/ojs/v1/webhooks/deliveries/del_01900000-0000-7000-8000-000000000000",
            None,
        )
        .await?;
    assert_eq!(r.status, 404, "{:?}", r.body);

    // 404: a client error is not retried (§7.1).
    assert_eq!(gone.got().len(), 1, "{:?}", gone.got());
    let log = deliveries(&app, &gone_sub).await?;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["status"], "dead");
    assert_eq!(log[0]["status_code"], 404);

    // The spec's listing of deliveries, by subscription.
    let r = app
        .call(
            Method::GET,
            &format!("/ojs/v1/webhooks/deliveries?subscription_id={flaky_sub}&limit=1"),
            None,
        )
        .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["deliveries"].as_array().map(Vec::len), Some(1));
    assert_eq!(r.body["pagination"]["has_more"], true);
    let cursor = r.body["pagination"]["next_cursor"]
        .as_str()
        .unwrap_or_default();
    let r = app
        .call(
            Method::GET,
            &format!(
                "/ojs/v1/webhooks/deliveries?subscription_id={flaky_sub}&limit=1&cursor={cursor}"
            ),
            None,
        )
        .await?;
    assert_eq!(r.body["deliveries"][0]["attempt"], 1, "{:?}", r.body);
    Ok(())
}

#[tokio::test]
async fn retries_of_a_deleted_or_deactivated_subscription_are_cancelled() -> anyhow::Result<()> {
    // The retry is due 5 s after the failure: the subscription is gone by then (two calls
    // away, however loaded the machine).
    let delay = Duration::from_secs(5);
    let app = TestApp::spawn_with_webhooks(config(&[delay.as_millis() as u64])).await?;
    let failing = Receiver::default();
    if let Ok(mut a) = failing.always.lock() {
        *a = Some(500);
    }
    let url = failing.start().await?;
    let deleted = subscribe(
        &app,
        &failing,
        json!({"url": url, "events": ["job.completed"]}),
    )
    .await?;
    let paused = Receiver::default();
    if let Ok(mut a) = paused.always.lock() {
        *a = Some(500);
    }
    let paused_url = paused.start().await?;
    let deactivated = subscribe(
        &app,
        &paused,
        json!({"url": paused_url, "events": ["job.completed"]}),
    )
    .await?;
    run_job(&app, "cancel").await?;
    let failed = failing.wait_for(1, Duration::from_secs(10)).await;
    let paused_failed = paused.wait_for(1, Duration::from_secs(10)).await;
    let (Some(first), Some(second)) = (failed.first(), paused_failed.first()) else {
        anyhow::bail!("no first attempt: {failed:?} {paused_failed:?}");
    };
    // Each retry is due `delay` after its first attempt's failure.
    let due = first.at.max(second.at) + delay;
    let r = app
        .call(Method::DELETE, &format!("{SUBS}/{deleted}"), None)
        .await?;
    assert_eq!(r.status, 200);
    let r = app
        .call(
            Method::PATCH,
            &format!("{SUBS}/{deactivated}"),
            Some(json!({"enabled": false})),
        )
        .await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["active"], false);
    anyhow::ensure!(
        Instant::now() < due,
        "the DELETE and PATCH took longer than the {delay:?} retry delay: nothing proved"
    );
    // Past the retries' time (a moment after these arrivals) and a few 200 ms redrives:
    // they would have been made.
    tokio::time::sleep_until((due + Duration::from_secs(1)).into()).await;
    assert_eq!(failing.got().len(), 1, "{:?}", failing.got());
    assert_eq!(paused.got().len(), 1, "{:?}", paused.got());
    // And a job run now reaches neither.
    run_job(&app, "cancel").await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(paused.got().len(), 1);
    assert_eq!(failing.got().len(), 1);
    Ok(())
}

/// What a delivery costs in DynamoDB calls and units (docs/cost.md, "Webhooks"): a first
/// attempt that succeeds is the batch's subscription listing and one log line; one that
/// fails adds its pending retry; the retry's redrive is the due Query, the claim, the
/// subscription read, the log line and the removal.
///
/// Behind the strict layer's rules alone: its pages cut short at random (which AWS does
/// only at 1 MB) once made the one-subscription listing two Queries (a CI run of
/// 85b3ad8: `calls: 3`), and the counts here are exact.
#[tokio::test]
async fn delivery_cost_is_one_log_write_when_the_first_attempt_succeeds() -> anyhow::Result<()> {
    let app = TestApp::spawn_rules_only().await?;
    let receiver = Receiver::default();
    if let Ok(mut a) = receiver.answers.lock() {
        a.push_back(500);
    }
    let url = receiver.start().await?;
    let sub = ojs_core::webhook::Subscription::from_json(
        &json!({"url": url, "events": ["job.enqueued"]}),
        true,
    )?;
    let entry = app
        .store
        .webhooks()
        .put(
            &sub,
            "whsec_cost".into(),
            None,
            &Default::default(),
            ojs_core::time::now(),
        )
        .await?;
    if let Ok(mut s) = receiver.secret.lock() {
        *s = entry.secret.clone();
    }
    let pushed = app
        .push(json!({"type": "cost.hook", "args": [], "options": {"queue": "cost"}}))
        .await?;
    let id = ojs_core::JobId::parse(pushed.body["job"]["id"].as_str().unwrap_or_default())?;
    let job = app
        .store
        .engine()
        .get_job(&id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no job"))?;
    let change = ojs_store::Change::between(None, Some(&job));
    let webhooks = ojs_push::WebhookDispatcher::new(app.store.clone(), config(&[0, 0]))
        .map_err(anyhow::Error::msg)?;

    // First attempt answered 500: listing, log line, pending retry.
    let (n, failed) =
        ojs_store::measured(webhooks.deliver_changes(std::slice::from_ref(&change))).await;
    assert_eq!(n, 1);
    // Retried (due at once): due Query, claim, subscription read, log line, removal.
    let (made, retried) = ojs_store::measured(webhooks.redrive()).await;
    assert_eq!(made, 1);
    // A first attempt that succeeds: listing and log line.
    let (n, ok) =
        ojs_store::measured(webhooks.deliver_changes(std::slice::from_ref(&change))).await;
    assert_eq!(n, 1);
    println!("webhook delivery cost: failed first attempt {failed:?}; its retry {retried:?}; delivered first attempt {ok:?}");
    assert_eq!(receiver.got().len(), 3);
    assert!(receiver.got().iter().all(|g| g.signed));
    assert_eq!(ok.calls, 2, "{ok:?}");
    assert!(ok.write_units <= 1.0, "{ok:?}");
    assert_eq!(failed.calls, 3, "{failed:?}");
    assert!(failed.write_units <= 2.0, "{failed:?}");
    assert_eq!(retried.calls, 6, "{retried:?}");
    assert!(retried.write_units <= 3.0, "{retried:?}");
    Ok(())
}

#[tokio::test]
async fn a_subscriptions_own_timeout_cuts_a_slow_receiver_short() -> anyhow::Result<()> {
    // The deployment waits 30 s; the subscription only 5 s, and its receiver takes 7 s.
    let mut cfg = config(&[60_000]);
    cfg.timeout = Duration::from_secs(30);
    let app = TestApp::spawn_with_webhooks(cfg).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/slow", listener.local_addr()?);
    tokio::spawn(async move {
        let router = Router::new().route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(7)).await;
                StatusCode::OK
            }),
        );
        let _ = axum::serve(listener, router).await;
    });
    let r = app
        .call(
            Method::POST,
            SUBS,
            Some(json!({"url": url, "events": ["job.enqueued"], "timeout_ms": 5000})),
        )
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.body["timeout_ms"], 5000, "{:?}", r.body);
    let sub = r.body["id"].as_str().unwrap_or_default().to_owned();
    app.push(json!({"type": "slow.hook", "args": [], "options": {"queue": "slowhook"}}))
        .await?;
    // Logged after the 5 s cut; under the deployment's 30 s it would come only later.
    let until = Instant::now() + Duration::from_secs(25);
    let logged = loop {
        let d = deliveries(&app, &sub).await?;
        if !d.is_empty() || Instant::now() > until {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(logged.len(), 1, "{logged:?}");
    let attempt = &logged[0];
    assert_eq!(attempt["error"], "timeout", "{attempt}");
    // Cut at the subscription's 5 s, not the deployment's 30 s (the receiver would answer
    // 200 at 7 s, so a timeout is one of the two): the bound is 30 s, not the machine.
    let ms = attempt["duration_ms"].as_u64().unwrap_or_default();
    assert!((4_900..30_000).contains(&ms), "{attempt}");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_rotation_with_no_grace_retires_the_old_secret_at_once() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_webhooks(config(&[60_000])).await?;
    let receiver = Receiver::default();
    let url = receiver.start().await?;
    let id = subscribe(
        &app,
        &receiver,
        json!({"url": url, "events": ["job.enqueued"]}),
    )
    .await?;
    let path = format!("{SUBS}/{id}/rotate-secret");
    let rotate = |body: Option<Value>| app.call(Method::POST, &path, body);
    for bad in [
        json!({"grace_period_seconds": -1}),
        json!({"grace_period_seconds": "1"}),
        json!({"grace": 1}),
    ] {
        let r = rotate(Some(bad.clone())).await?;
        assert_eq!(r.status, 400, "{bad}: {:?}", r.body);
    }
    // The default keeps the old secret signing for a day: two signatures.
    let kept = rotate(None).await?;
    assert_eq!(kept.status, 200, "{:?}", kept.body);
    let at = |r: &ojs_tests::Reply, k: &str| {
        r.body[k]
            .as_str()
            .and_then(|t| ojs_core::time::parse(t, "$").ok())
            .map(|t| (t - ojs_core::time::now()).num_seconds())
    };
    assert!(at(&kept, "previous_secret_expires_at").is_some_and(|s| (86_300..=86_400).contains(&s)));
    // A leaked secret is retired at once: one signature, the new secret's.
    let retired = rotate(Some(json!({"grace_period_seconds": 0}))).await?;
    assert_eq!(retired.status, 200, "{:?}", retired.body);
    assert!(at(&retired, "previous_secret_expires_at").is_some_and(|s| s <= 0));
    if let Ok(mut s) = receiver.secret.lock() {
        *s = retired.body["secret"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    }
    app.push(json!({"type": "rot.job", "args": [], "options": {"queue": "rot"}}))
        .await?;
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1);
    assert!(got[0].signed, "signed with the new secret");
    let signatures = header(&got[0], "x-ojs-signature");
    assert_eq!(signatures.split(',').count(), 1, "{signatures}");
    app.teardown().await;
    Ok(())
}

/// A traced job's events carry its trace (CloudEvents' distributed tracing extension) in
/// the body and as the W3C headers a receiver's tracing reads (issue #36).
#[tokio::test]
async fn a_traced_jobs_events_carry_its_traceparent() -> anyhow::Result<()> {
    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let app = TestApp::spawn_with_webhooks(config(&[1000])).await?;
    let receiver = Receiver::default();
    let url = receiver.start().await?;
    subscribe(
        &app,
        &receiver,
        json!({"url": url, "events": ["job.enqueued"], "filter": {"queues": ["traced"]}}),
    )
    .await?;
    let pushed = app
        .push(json!({"type": "t.traced", "args": [], "meta": {"traceparent": TRACE, "tracestate": "v=1"},
            "options": {"queue": "traced"}}))
        .await?;
    assert_eq!(pushed.status, 201, "{:?}", pushed.body);
    let got = receiver.wait_for(1, Duration::from_secs(10)).await;
    let first = got.first().ok_or_else(|| anyhow::anyhow!("no delivery"))?;
    assert_eq!(first.body["traceparent"], TRACE, "{}", first.body);
    assert_eq!(first.body["tracestate"], "v=1", "{}", first.body);
    assert_eq!(header(first, "traceparent"), TRACE);
    assert_eq!(header(first, "tracestate"), "v=1");
    app.teardown().await;
    Ok(())
}

/// ojs-webhooks.md §9.3: a subscription made for a tenant receives that tenant's jobs'
/// events only (the default tenant's too is a tenant), and requests for another tenant
/// neither list, read, change, rotate, test nor delete it; an operator's subscription
/// receives every tenant's and an operator sees every subscription.
#[tokio::test]
async fn a_tenants_subscription_receives_its_own_jobs_events_and_is_its_own() -> anyhow::Result<()>
{
    let app = TestApp::spawn_with_webhooks(config(&[1000])).await?;
    let q = "wh-tenants";
    let events = json!(["job.completed"]);
    let mut receivers = Vec::new();
    let mut subs = Vec::new();
    for tenant in [Some("acme"), Some("_default"), None] {
        let receiver = Receiver::default();
        let url = receiver.start().await?;
        let r = app
            .call_as(
                tenant,
                Method::POST,
                SUBS,
                Some(json!({"url": url, "events": events, "filter": {"queues": [q]}})),
            )
            .await?;
        anyhow::ensure!(r.status == 201, "{tenant:?}: {} {:?}", r.status, r.body);
        assert_eq!(r.body["tenant_id"], json!(tenant), "{:?}", r.body);
        if let Ok(mut s) = receiver.secret.lock() {
            *s = r.body["secret"].as_str().unwrap_or_default().to_owned();
        }
        receivers.push(receiver);
        subs.push(r.body["id"].as_str().unwrap_or_default().to_owned());
    }
    let (acme, default, operator) = (&receivers[0], &receivers[1], &receivers[2]);

    let acme_job = run_job_as(&app, Some("acme"), q).await?;
    let globex_job = run_job_as(&app, Some("globex"), q).await?;
    let plain_job = run_job_as(&app, None, q).await?;
    let all = operator.wait_for(3, Duration::from_secs(30)).await;
    let subjects = |got: &[Got]| -> Vec<String> {
        let mut s: Vec<String> = got
            .iter()
            .map(|g| g.body["subject"].as_str().unwrap_or_default().to_owned())
            .collect();
        s.sort();
        s
    };
    let mut every = vec![acme_job.clone(), globex_job, plain_job.clone()];
    every.sort();
    assert_eq!(subjects(&all), every, "the operator's subscription");
    acme.wait_for(1, Duration::from_secs(30)).await;
    default.wait_for(1, Duration::from_secs(30)).await;
    // The dispatcher handles each stream batch's events together: what the operator's
    // subscription got, the others got or never will.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(subjects(&acme.got()), [acme_job], "acme's subscription");
    assert_eq!(
        subjects(&default.got()),
        [plain_job],
        "the default tenant's subscription"
    );
    assert!(acme.got().iter().all(|g| g.signed));

    // Another tenant's requests do not see acme's subscription.
    let acme_sub = &subs[0];
    let listed = |r: &ojs_tests::Reply| -> Vec<String> {
        let mut ids: Vec<String> = r.body["subscriptions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        ids
    };
    let r = app.call_as(Some("globex"), Method::GET, SUBS, None).await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert!(listed(&r).is_empty(), "{:?}", r.body);
    let r = app.call_as(Some("acme"), Method::GET, SUBS, None).await?;
    assert_eq!(listed(&r), std::slice::from_ref(acme_sub), "{:?}", r.body);
    let mut everyone = subs.clone();
    everyone.sort();
    assert_eq!(listed(&app.call(Method::GET, SUBS, None).await?), everyone);
    let one = format!("{SUBS}/{acme_sub}");
    for (method, path, body) in [
        (Method::GET, one.clone(), None),
        (Method::PATCH, one.clone(), Some(json!({"active": false}))),
        (Method::POST, format!("{one}/rotate-secret"), None),
        (Method::POST, format!("{one}/test"), None),
        (Method::GET, format!("{one}/deliveries"), None),
        (
            Method::GET,
            format!("/ojs/v1/webhooks/deliveries?subscription_id={acme_sub}"),
            None,
        ),
        (Method::DELETE, one.clone(), None),
    ] {
        let r = app
            .call_as(Some("globex"), method.clone(), &path, body)
            .await?;
        assert_eq!(r.status, 404, "{method} {path}: {:?}", r.body);
    }
    // A delivery looked up without its subscription: only among the tenant's own.
    let delivery = header(&acme.got()[0], "x-ojs-delivery-id");
    let path = format!("/ojs/v1/webhooks/deliveries/{delivery}");
    let r = app
        .call_as(Some("globex"), Method::GET, &path, None)
        .await?;
    assert_eq!(r.status, 404, "{:?}", r.body);
    let r = app.call_as(Some("acme"), Method::GET, &path, None).await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["subscription_id"], acme_sub.as_str(), "{:?}", r.body);
    let r = app.call_as(Some("acme"), Method::GET, &one, None).await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        r.body["active"], true,
        "globex's PATCH changed it: {:?}",
        r.body
    );
    let r = app
        .call_as(Some("acme"), Method::DELETE, &one, None)
        .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    app.teardown().await;
    Ok(())
}

/// A tenant holds at most its share of the stack's subscriptions (20 of 100), so one
/// tenant of a shared stack cannot take them all: its 21st is 400 and names the cap,
/// while another tenant and an operator still subscribe.
#[tokio::test]
async fn a_tenant_holds_at_most_its_share_of_subscriptions() -> anyhow::Result<()> {
    let app = TestApp::spawn_with_webhooks(config(&[1000])).await?;
    let body = json!({"url": "http://127.0.0.1:9/hook", "events": ["job.completed"]});
    let create = |tenant: Option<&'static str>| {
        let body = body.clone();
        let app = &app;
        async move { app.call_as(tenant, Method::POST, SUBS, Some(body)).await }
    };
    for i in 0..ojs_core::webhook::MAX_SUBSCRIPTIONS_PER_TENANT {
        let r = create(Some("acme")).await?;
        anyhow::ensure!(
            r.status == 201,
            "acme's #{}: {} {:?}",
            i + 1,
            r.status,
            r.body
        );
    }
    let r = create(Some("acme")).await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(
        r.body["error"]["details"]["tenant_id"], "acme",
        "{:?}",
        r.body
    );
    assert_eq!(r.body["error"]["details"]["maximum"], 20, "{:?}", r.body);
    for tenant in [Some("globex"), None] {
        let r = create(tenant).await?;
        assert_eq!(r.status, 201, "{tenant:?}: {:?}", r.body);
    }
    // A deleted one gives its place back.
    let mine = app.call_as(Some("acme"), Method::GET, SUBS, None).await?;
    let first = mine.body["subscriptions"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = app
        .call_as(
            Some("acme"),
            Method::DELETE,
            &format!("{SUBS}/{first}"),
            None,
        )
        .await?;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(create(Some("acme")).await?.status, 201);
    app.teardown().await;
    Ok(())
}
