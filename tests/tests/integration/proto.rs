//! Protobuf over HTTP: envelopes pushed in one format and read in the other are equal;
//! batches in `BatchEnqueueRequest` and delimited form; 406 and 415 where the format
//! cannot be served or accepted, with nothing written.

use anyhow::Context;
use ojs_tests::TestApp;
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use reqwest::Method;
use serde_json::{json, Value};

const PROTO: &str = "application/openjobspec+proto";

struct Raw {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

async fn raw(
    app: &TestApp,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    accept: Option<&str>,
    body: Vec<u8>,
) -> anyhow::Result<Raw> {
    let mut req = app
        .client
        .request(method, format!("{}{path}", app.base_url));
    if let Some(ct) = content_type {
        req = req.header(CONTENT_TYPE, ct).body(body);
    }
    if let Some(a) = accept {
        req = req.header(ACCEPT, a);
    }
    let res = req.send().await?;
    Ok(Raw {
        status: res.status().as_u16(),
        headers: res.headers().clone(),
        body: res.bytes().await?.to_vec(),
    })
}

/// INFO of job `id`, asked for in Protobuf.
async fn info_in_proto(app: &TestApp, id: &str) -> anyhow::Result<Raw> {
    raw(
        app,
        Method::GET,
        &format!("/ojs/v1/jobs/{id}"),
        None,
        Some(PROTO),
        Vec::new(),
    )
    .await
}

fn json_of(r: &Raw) -> Value {
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

fn content_type(r: &Raw) -> &str {
    r.headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The members a client pushed, as the server reports them.
fn rich_job(queue: &str) -> Value {
    json!({
        "type": "media.transcode",
        "queue": queue,
        "args": [{"url": "s3://b/k.mp4", "sizes": [240, 720], "big": 9007199254740993_u64.to_string(), "ratio": 1.5, "ok": true, "none": null}],
        "meta": {"tenant": "acme", "trace": {"id": "abc"}},
        "priority": 7,
        "tags": ["a", "b"],
        "x-acme-routing": {"zone": "eu"},
    })
}

#[tokio::test]
async fn a_job_pushed_in_protobuf_reads_back_equal_in_json_and_the_reverse() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    // Protobuf in, JSON out.
    let bytes = ojs_proto::json_to_proto(&rich_job("pq"))?;
    let pushed = raw(
        &app,
        Method::POST,
        "/ojs/v1/jobs",
        Some(PROTO),
        Some(PROTO),
        bytes,
    )
    .await?;
    assert_eq!(
        pushed.status,
        201,
        "{}",
        String::from_utf8_lossy(&pushed.body)
    );
    assert_eq!(content_type(&pushed), PROTO);
    let pushed_json = ojs_proto::proto_to_json(&pushed.body)?;
    let id = pushed_json["id"].as_str().context("id")?.to_owned();
    let info = app.info(&id).await?;
    assert_eq!(info.status, 200);
    let fetched = app.fetch(json!({"queues": ["pq"]})).await?;
    let as_json = &fetched.body["jobs"][0];
    for k in ["type", "args", "meta", "priority", "tags", "x-acme-routing"] {
        assert_eq!(as_json[k], rich_job("pq")[k], "{k} after a Protobuf push");
        assert_eq!(
            info.body["job"][k], pushed_json[k],
            "{k}: JSON INFO vs Protobuf answer"
        );
    }

    // JSON in, Protobuf out: INFO as an envelope, FETCH as a delimited stream.
    let pushed = app.push(rich_job("jq")).await?;
    let id = pushed.body["job"]["id"].as_str().context("id")?.to_owned();
    let info = info_in_proto(&app, &id).await?;
    assert_eq!(info.status, 200);
    assert_eq!(content_type(&info), PROTO);
    assert_eq!(ojs_proto::proto_to_json(&info.body)?, pushed.body["job"]);
    let fetch = raw(
        &app,
        Method::POST,
        "/ojs/v1/workers/fetch",
        Some("application/json"),
        Some("application/openjobspec+proto, application/json;q=0.5"),
        json!({"queues": ["jq"]}).to_string().into_bytes(),
    )
    .await?;
    assert_eq!(fetch.status, 200);
    assert_eq!(
        content_type(&fetch),
        "application/openjobspec+proto; delimited=true"
    );
    let jobs = ojs_proto::decode_delimited_jobs(&fetch.body)?;
    assert_eq!(jobs.len(), 1);
    for k in [
        "id",
        "type",
        "args",
        "meta",
        "priority",
        "tags",
        "x-acme-routing",
    ] {
        assert_eq!(jobs[0][k], pushed.body["job"][k], "{k} fetched in Protobuf");
    }
    assert_eq!(jobs[0]["state"], "active");
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn batches_travel_as_batch_requests_and_delimited_streams() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let jobs: Vec<Value> = (0..3)
        .map(|i| json!({"type": "b.job", "queue": "bq", "args": [i]}))
        .collect();
    let request = ojs_proto::json_to_batch_request(&json!({ "jobs": jobs }))?;
    let res = raw(
        &app,
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some(PROTO),
        Some(PROTO),
        request,
    )
    .await?;
    assert_eq!(res.status, 201, "{}", String::from_utf8_lossy(&res.body));
    let answer = ojs_proto::batch_response_to_json(&res.body)?;
    let results = answer["results"].as_array().context("results")?;
    assert_eq!(results.len(), 3);
    assert!(
        results
            .iter()
            .all(|r| r["success"] == true && r["id"].is_string()),
        "{answer}"
    );

    let stream = ojs_proto::encode_delimited_jobs(&jobs)?;
    let res = raw(
        &app,
        Method::POST,
        "/ojs/v1/jobs/batch",
        Some("application/openjobspec+proto; delimited=true"),
        None,
        stream,
    )
    .await?;
    assert_eq!(res.status, 201, "{}", String::from_utf8_lossy(&res.body));
    assert_eq!(json_of(&res)["jobs"].as_array().map(Vec::len), Some(3));
    ojs_tests::after_index_lag().await;
    let fetched = app.fetch(json!({"queues": ["bq"], "count": 10})).await?;
    assert_eq!(fetched.body["jobs"].as_array().map(Vec::len), Some(6));
    app.teardown().await;
    Ok(())
}

/// (what, method, path, Content-Type, Accept, body, status, error code)
type Case = (
    &'static str,
    Method,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Vec<u8>,
    u16,
    &'static str,
);

#[tokio::test]
async fn unservable_formats_get_406_and_415_and_write_nothing() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let job = json!({"type": "n.job", "queue": "nq", "args": []});
    let cases: Vec<Case> = vec![
        (
            "html only",
            Method::POST,
            "/ojs/v1/jobs",
            Some("application/json"),
            Some("text/html"),
            job.to_string().into_bytes(),
            406,
            "not_acceptable",
        ),
        (
            "json refused",
            Method::POST,
            "/ojs/v1/jobs",
            Some("application/json"),
            Some("application/json;q=0"),
            job.to_string().into_bytes(),
            406,
            "not_acceptable",
        ),
        (
            "proto where no envelope is returned",
            Method::GET,
            "/ojs/v1/queues",
            None,
            Some(PROTO),
            Vec::new(),
            406,
            "not_acceptable",
        ),
        (
            "text body",
            Method::POST,
            "/ojs/v1/jobs",
            Some("text/plain"),
            None,
            job.to_string().into_bytes(),
            415,
            "unsupported_media_type",
        ),
        (
            "xml body",
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some("application/xml"),
            None,
            b"<jobs/>".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "proto body on ack",
            Method::POST,
            "/ojs/v1/workers/ack",
            Some(PROTO),
            None,
            vec![1, 2, 3],
            415,
            "unsupported_media_type",
        ),
        (
            "garbage protobuf",
            Method::POST,
            "/ojs/v1/jobs",
            Some(PROTO),
            None,
            vec![0xff, 0xff, 0xff, 0x0f],
            400,
            "invalid_payload",
        ),
        (
            "garbage batch",
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(PROTO),
            None,
            vec![0x0a, 0xff, 0x01],
            400,
            "invalid_payload",
        ),
    ];
    for (what, method, path, ct, accept, body, status, code) in cases {
        let r = raw(&app, method, path, ct, accept, body).await?;
        assert_eq!(
            r.status,
            status,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(json_of(&r)["error"]["code"], code, "{what}");
        assert!(
            content_type(&r).starts_with("application/openjobspec+json"),
            "{what}: error bodies stay JSON"
        );
    }
    assert!(
        app.store.engine().list_queues().await?.is_empty(),
        "a refused request wrote a job"
    );
    app.teardown().await;
    Ok(())
}

/// A server whose answers are bounded at 700 KB, with that bound: a job of 20,000 zeros
/// is about 40 KB of JSON and about 293 KB as base64 Protobuf, so three fit in JSON and
/// two in Protobuf.
async fn spawn_with_tight_bound() -> anyhow::Result<(TestApp, ojs_store::AnswerBound)> {
    let bound = ojs_store::AnswerBound {
        bytes: 700_000,
        reserve: 100_000,
    };
    let store = ojs_tests::fresh_store()
        .await?
        .with_config(|c| c.fetch_answer = bound);
    Ok((TestApp::spawn_on_store(store).await?, bound))
}

/// The dead letter listing answered in Protobuf is bounded by its own bytes (#32): jobs
/// whose JSON page fits whole can be several times larger as base64 Protobuf. The page
/// keeps every job, in order: whole while the rest fit without their args and meta, the
/// rest without them and saying so; the JSON page of the same jobs stays whole.
#[tokio::test]
async fn a_dead_letter_page_answered_in_protobuf_stays_within_its_bound() -> anyhow::Result<()> {
    let (app, bound) = spawn_with_tight_bound().await?;
    let zeros = vec![0; 20_000];
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = app
            .push(
                json!({"type": "proto.dead", "args": [i, zeros], "queue": "pdead",
                "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}),
            )
            .await?;
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(r.body["job"]["id"].as_str().context("id")?.to_owned());
    }
    app.fail_each("pdead", 3, ids.len()).await?;
    ojs_tests::after_index_lag().await;
    let path = "/ojs/v1/dead-letter?queue=pdead&limit=3";
    let page = raw(&app, Method::GET, path, None, Some(PROTO), Vec::new()).await?;
    assert_eq!(page.status, 200, "{}", String::from_utf8_lossy(&page.body));
    let carried = page.body.len().div_ceil(3) * 4;
    assert!(carried <= bound.bytes, "{carried} bytes base64-encoded");
    let jobs = ojs_proto::decode_delimited_jobs(&page.body)?;
    let listed: Vec<&str> = jobs.iter().filter_map(|j| j["id"].as_str()).collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(sorted, want, "every dead job listed");
    // A Protobuf envelope always has args (empty when left out): whole means the zeros.
    let whole: Vec<bool> = jobs
        .iter()
        .map(|j| j["args"][1].as_array().map(Vec::len) == Some(20_000))
        .collect();
    assert_eq!(
        whole,
        [true, true, false],
        "two fit whole, in order ({carried} bytes)"
    );
    assert_eq!(jobs[2]["args"], json!([]), "{}", jobs[2]);
    assert_eq!(jobs[2]["x-ojs-payload"]["resolved"], false, "{}", jobs[2]);
    assert_eq!(jobs[2]["x-ojs-payload"]["errors_omitted"], 1, "{}", jobs[2]);

    let json_page = app.call(Method::GET, path, None).await?;
    assert_eq!(json_page.status, 200, "{}", json_page.body);
    let listed = json_page.body["jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(listed.len(), 3);
    assert!(
        listed.iter().all(|j| j.get("args").is_some()),
        "the JSON page fits whole"
    );
    app.teardown().await;
    Ok(())
}

/// The seed audit's findings on a job's shape (#32): its timeout is the Protobuf form's
/// field 8 (`timeout`, seconds) beside `x-ojs-timeout_ms`; the
/// `extensions` map holds only `x-{vendor}-{name}` keys; members the server does not know
/// inside `retry` and `unique` survive; integers beyond 2^53-1 sent as numbers are refused.
#[tokio::test]
async fn a_jobs_timeout_unknown_members_and_extension_keys_are_as_the_seeds_say(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let pushed = app
        .push(json!({
            "type": "audit.job", "args": [1], "queue": "audit",
            "timeout": 90, "visibility_timeout": 45,
            "retry": {"max_attempts": 4, "x-acme-budget": {"usd": 3}},
            "unique": {"keys": ["type"], "x-acme-scope": "region"},
        }))
        .await?;
    assert_eq!(pushed.status, 201, "{}", pushed.body);
    let id = pushed.body["job"]["id"].as_str().context("id")?.to_owned();
    let job = app.info(&id).await?.body["job"].clone();
    // The JSON view in milliseconds only (the JavaScript SDK reads `timeout` as ms).
    assert_eq!(job["timeout_ms"], 90_000, "{job}");
    assert_eq!(job["visibility_timeout_ms"], 45_000);
    assert!(job.get("timeout").is_none(), "{job}");
    assert_eq!(job["retry"]["x-acme-budget"], json!({"usd": 3}), "{job}");
    assert_eq!(job["retry"]["max_attempts"], 4);
    assert_eq!(job["unique"]["x-acme-scope"], "region", "{job}");

    let info = info_in_proto(&app, &id).await?;
    assert_eq!(info.status, 200);
    let envelope = ojs_proto::Envelope::decode(&info.body)?.message;
    assert_eq!(envelope.timeout, Some(90), "field 8");
    let keys: Vec<&String> = envelope.extensions.keys().collect();
    assert!(!keys.is_empty());
    for key in &keys {
        let named = key
            .strip_prefix("x-")
            .and_then(|rest| rest.split_once('-'))
            .is_some_and(|(vendor, name)| !vendor.is_empty() && !name.is_empty());
        assert!(
            named,
            "extensions key {key:?} is not x-{{vendor}}-{{name}}: {keys:?}"
        );
    }
    assert!(keys.iter().any(|k| *k == "x-ojs-timeout_ms"), "{keys:?}");
    // ...and the Protobuf form reads back as the JSON one, with the seconds beside.
    let mut with_seconds = job.clone();
    with_seconds["timeout"] = json!(90);
    assert_eq!(ojs_proto::proto_to_json(&info.body)?, with_seconds);

    for (body, at) in [
        (
            json!({"type": "audit.big", "args": [9_007_199_254_740_993_u64]}),
            "$.args[0]",
        ),
        (
            json!({"type": "audit.big", "args": [], "meta": {"n": -9_007_199_254_740_993_i64}}),
            "$.meta.n",
        ),
    ] {
        let refused = app.push(body).await?;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(
            refused.body["error"]["details"]["validation_errors"][0]["path"], at,
            "{}",
            refused.body
        );
    }
    // Spec 8.3: the manifest names the extensions by URI for the Protobuf encoding too.
    let manifest = app.call(Method::GET, "/ojs/manifest", None).await?.body;
    let names = manifest["extensions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let uris = manifest["extension_uris"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!uris.is_empty(), "{manifest}");
    assert_eq!(uris.len(), names.len(), "{manifest}");
    // Each name's URI as ojs-extension-lifecycle.md §11 forms it: `urn:ojs:ext:{name}`,
    // `urn:ojs:ext:experimental:{name}`, or a core document's `urn:ojs:spec:{name}`.
    for (name, uri) in names.iter().zip(&uris) {
        let (name, uri) = (name.as_str().unwrap_or("?"), uri.as_str().unwrap_or(""));
        assert!(
            [
                format!("urn:ojs:ext:{name}"),
                format!("urn:ojs:ext:experimental:{name}"),
                format!("urn:ojs:spec:{name}"),
            ]
            .iter()
            .any(|want| want == uri),
            "{name}: {uri}"
        );
    }
    assert_eq!(
        manifest["protobuf"]["extension_uris"],
        json!(uris),
        "{manifest}"
    );
    assert!(uris.contains(&json!("urn:ojs:ext:graceful-shutdown")));
    assert_eq!(manifest["protobuf"]["custom_extensions_prefix"], "x-ojs-");
    let listed = app
        .call(Method::GET, "/ojs/v1/admin/jobs?type=audit.big", None)
        .await?;
    assert_eq!(
        listed.body["jobs"].as_array().map(Vec::len).unwrap_or(0),
        0,
        "{}",
        listed.body
    );
    app.teardown().await;
    Ok(())
}

/// Spec 9.2 inside `retry` and `unique`: fields a newer schema adds to `RetryPolicy` and
/// `UniquePolicy` (any wire type), pushed in Protobuf, come back byte for byte from an
/// INFO in Protobuf. The server holds them as the objects' `x-ojs-proto-unknown-fields`
/// member, which its JSON store keeps like any unknown member.
#[tokio::test]
async fn unknown_fields_inside_retry_and_unique_survive_a_push_and_info_in_protobuf(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    // RetryPolicy knows 1-7: field 9 varint 7, field 15 "abc", field 8 fixed32.
    let retry_unknown = [0x48, 0x07, 0x7a, 0x03, b'a', b'b', b'c', 0x45, 1, 2, 3, 4].to_vec();
    // UniquePolicy knows 1-3: field 4 a group {1: 1}, field 100 fixed64.
    let unique_unknown = [
        &[0x23, 0x08, 0x01, 0x24, 0xa1, 0x06][..],
        &[1, 2, 3, 4, 5, 6, 7, 8],
    ]
    .concat();
    let mut envelope = ojs_proto::Envelope::from_json(&json!({
        "type": "proto.nested", "queue": "pnested", "args": [1],
        "retry": {"max_attempts": 4, "backoff_coefficient": 2.0},
        "unique": {"keys": ["type"], "period": "PT1H"},
    }))?;
    envelope.retry_unknown_fields = retry_unknown.clone();
    envelope.unique_unknown_fields = unique_unknown.clone();
    let pushed = raw(
        &app,
        Method::POST,
        "/ojs/v1/jobs",
        Some(PROTO),
        Some(PROTO),
        envelope.encode(),
    )
    .await?;
    assert_eq!(
        pushed.status,
        201,
        "{}",
        String::from_utf8_lossy(&pushed.body)
    );
    let id = ojs_proto::Envelope::decode(&pushed.body)?.message.id;
    let json_view = app.info(&id).await?.body["job"].clone();
    assert_eq!(json_view["retry"]["max_attempts"], 4, "{json_view}");
    assert_eq!(json_view["unique"]["period"], "PT1H", "{json_view}");

    let info = info_in_proto(&app, &id).await?;
    assert_eq!(info.status, 200);
    assert_eq!(content_type(&info), PROTO);
    for answer in [&pushed.body, &info.body] {
        // Read off the wire without the crate: each submessage ends with its unknown
        // fields, after the known ones.
        let retry = field_payload(answer, 11).context("no retry field")?;
        let unique = field_payload(answer, 12).context("no unique field")?;
        assert!(retry.ends_with(&retry_unknown), "retry {retry:?}");
        assert!(unique.ends_with(&unique_unknown), "unique {unique:?}");
        // ...and through the crate, whose known fields are what was sent.
        let back = ojs_proto::Envelope::decode(answer)?;
        assert_eq!(back.retry_unknown_fields, retry_unknown);
        assert_eq!(back.unique_unknown_fields, unique_unknown);
        let retry_policy = back.message.retry.context("retry")?;
        assert_eq!(retry_policy.max_attempts, Some(4));
        assert_eq!(
            back.message.unique.map(|u| u.period).as_deref(),
            Some("PT1H")
        );
    }
    app.teardown().await;
    Ok(())
}

/// The payload of the single length-delimited top-level field `number` of a message
/// whose top-level fields are varints, fixed-width or length-delimited.
fn field_payload(mut message: &[u8], number: u64) -> Option<&[u8]> {
    fn varint(buf: &mut &[u8]) -> Option<u64> {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let (byte, rest) = buf.split_first()?;
            *buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut found = None;
    while !message.is_empty() {
        let key = varint(&mut message)?;
        let size = match key & 7 {
            0 => {
                varint(&mut message)?;
                0
            }
            1 => 8,
            2 => usize::try_from(varint(&mut message)?).ok()?,
            5 => 4,
            _ => return None,
        };
        let (payload, rest) = message.split_at_checked(size)?;
        if key >> 3 == number && key & 7 == 2 {
            if found.is_some() {
                return None;
            }
            found = Some(payload);
        }
        message = rest;
    }
    found
}

/// A FETCH answered in Protobuf is bounded by its Protobuf form (#32): a number in
/// `args` takes 11 bytes there (a `google.protobuf.Value`) and the binary body travels
/// base64-encoded, so jobs whose JSON answer fits can pass the limit in Protobuf. The
/// answer keeps the jobs that fit; the others are given back (`available`, their attempt
/// not counted) and come with the next FETCH. The same FETCH in JSON takes them all.
#[tokio::test]
async fn a_fetch_answered_in_protobuf_stays_within_its_bound_and_gives_back_the_rest(
) -> anyhow::Result<()> {
    let (app, bound) = spawn_with_tight_bound().await?;
    let zeros = vec![0; 20_000];
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = app
            .push(json!({"type": "proto.big", "args": [i, zeros], "queue": "pbound"}))
            .await?;
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(r.body["job"]["id"].as_str().context("id")?.to_owned());
    }
    ojs_tests::after_index_lag().await;
    let fetch = |count: u32| {
        raw(
            &app,
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some("application/json"),
            Some(PROTO),
            json!({"queues": ["pbound"], "count": count, "worker_id": "pw"})
                .to_string()
                .into_bytes(),
        )
    };
    let first = fetch(3).await?;
    assert_eq!(first.status, 200);
    let jobs = ojs_proto::decode_delimited_jobs(&first.body)?;
    let got: Vec<&str> = jobs.iter().filter_map(|j| j["id"].as_str()).collect();
    assert_eq!(
        got,
        [ids[0].as_str(), ids[1].as_str()],
        "the two that fit, in order"
    );
    assert!(
        first.body.len().div_ceil(3) * 4 <= bound.bytes,
        "{} bytes base64-encoded",
        first.body.len().div_ceil(3) * 4
    );
    let back = app.info(&ids[2]).await?.body["job"].clone();
    assert_eq!(back["state"], "available", "given back: {back}");
    assert_eq!(back["attempt"], 0, "its attempt not counted");

    let second = fetch(3).await?;
    let jobs = ojs_proto::decode_delimited_jobs(&second.body)?;
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], ids[2].as_str());
    assert_eq!(jobs[0]["attempt"], 1);
    assert_eq!(jobs[0]["args"][1].as_array().map(Vec::len), Some(20_000));
    app.teardown().await;
    Ok(())
}
