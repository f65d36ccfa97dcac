//! The schema registry over HTTP (ojs-http-binding.md §15) and its enforcement on PUSH.

use ojs_tests::TestApp;
use reqwest::Method;
use serde_json::{json, Value};

const URI: &str = "urn:ojs:schema:email.send:v1";
const ENCODED: &str = "urn%3Aojs%3Aschema%3Aemail.send%3Av1";

fn email_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "array",
        "prefixItems": [
            {"type": "string", "format": "email", "description": "Recipient email address"},
            {"type": "string", "enum": ["welcome", "password_reset", "invoice"]},
            {"type": "object", "properties": {"locale": {"type": "string"}}}
        ],
        "minItems": 2,
        "maxItems": 3
    })
}

fn registration() -> Value {
    json!({"uri": URI, "type": "email.send", "version": 1, "schema": email_schema()})
}

#[tokio::test]
async fn register_list_get_and_delete_by_encoded_uri() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;

    let created = app
        .call(Method::POST, "/ojs/v1/schemas", Some(registration()))
        .await?;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let s = &created.body["schema"];
    assert_eq!(s["uri"], URI);
    assert_eq!(s["type"], "email.send");
    assert_eq!(s["version"], 1);
    assert!(s["created_at"].as_str().is_some_and(|t| t.ends_with('Z')));

    // A replayed registration is idempotent; a different document under the URI is not.
    let replay = app
        .call(Method::POST, "/ojs/v1/schemas", Some(registration()))
        .await?;
    assert_eq!(replay.status, 200, "{:?}", replay.body);
    assert_eq!(replay.body["schema"]["created_at"], s["created_at"]);
    let mut changed = registration();
    changed["schema"]["minItems"] = json!(3);
    let conflict = app
        .call(Method::POST, "/ojs/v1/schemas", Some(changed))
        .await?;
    assert_eq!(conflict.status, 409, "{:?}", conflict.body);
    assert_eq!(conflict.body["error"]["code"], "duplicate");

    let second = json!({"uri": "https://schemas.example.com/report/v2.json", "type": "report.generate",
        "version": 2, "schema": {"type": "array"}});
    let r = app
        .call(Method::POST, "/ojs/v1/schemas", Some(second))
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);

    let list = app.call(Method::GET, "/ojs/v1/schemas", None).await?;
    assert_eq!(list.status, 200, "{:?}", list.body);
    let uris: Vec<&str> = list.body["schemas"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["uri"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(uris, ["https://schemas.example.com/report/v2.json", URI]);
    assert!(list.body["schemas"][0].get("schema").is_none());
    assert_eq!(
        list.body["pagination"],
        json!({"total": 2, "limit": 50, "offset": 0, "has_more": false, "page": 1, "per_page": 50})
    );
    let page = app
        .call(Method::GET, "/ojs/v1/schemas?limit=1&offset=0", None)
        .await?;
    assert_eq!(page.body["schemas"].as_array().map(Vec::len), Some(1));
    assert_eq!(page.body["pagination"]["has_more"], true);

    let got = app
        .call(Method::GET, &format!("/ojs/v1/schemas/{ENCODED}"), None)
        .await?;
    assert_eq!(got.status, 200, "{:?}", got.body);
    assert_eq!(got.body["schema"]["uri"], URI);
    assert_eq!(got.body["schema"]["schema"], email_schema());
    // A URI with slashes, fully encoded.
    let got = app
        .call(
            Method::GET,
            "/ojs/v1/schemas/https%3A%2F%2Fschemas.example.com%2Freport%2Fv2.json",
            None,
        )
        .await?;
    assert_eq!(got.status, 200, "{:?}", got.body);
    assert_eq!(got.body["schema"]["type"], "report.generate");

    let deleted = app
        .call(Method::DELETE, &format!("/ojs/v1/schemas/{ENCODED}"), None)
        .await?;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    assert_eq!(deleted.body, json!({"deleted": true, "uri": URI}));

    for method in [Method::GET, Method::DELETE] {
        let gone = app
            .call(method.clone(), &format!("/ojs/v1/schemas/{ENCODED}"), None)
            .await?;
        assert_eq!(gone.status, 404, "{method} {:?}", gone.body);
        assert_eq!(gone.body["error"]["code"], "not_found");
        assert_eq!(gone.body["error"]["retryable"], false);
        assert!(gone.body["error"]["request_id"].is_string());
    }
    let list = app.call(Method::GET, "/ojs/v1/schemas", None).await?;
    assert_eq!(list.body["pagination"]["total"], 1);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn invalid_registrations_are_400_and_store_nothing() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    for body in [
        json!({"schema": {"type": "array"}}),
        json!({"uri": "not a uri", "schema": {"type": "array"}}),
        json!({"uri": URI}),
        json!({"uri": URI, "schema": {"type": "arrayish"}}),
        json!({"uri": URI, "schema": {"$schema": "http://json-schema.org/draft-07/schema#"}}),
    ] {
        let r = app
            .call(Method::POST, "/ojs/v1/schemas", Some(body.clone()))
            .await?;
        assert_eq!(r.status, 400, "{body}: {:?}", r.body);
        assert_eq!(r.body["error"]["code"], "invalid_request", "{body}");
    }
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/schemas",
            Some(json!({"uri": URI, "schema": {"$schema": "http://json-schema.org/draft-07/schema#"}})),
        )
        .await?;
    assert_eq!(
        r.body["error"]["details"]["schema_error"],
        "$schema must reference draft 2020-12"
    );
    let list = app.call(Method::GET, "/ojs/v1/schemas", None).await?;
    assert_eq!(list.body["schemas"], json!([]));
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn push_validates_args_against_the_named_schema() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let r = app
        .call(Method::POST, "/ojs/v1/schemas", Some(registration()))
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);

    let ok = app
        .push(json!({"type": "email.send", "schema": URI,
            "args": ["ada@example.com", "welcome", {"locale": "en"}]}))
        .await?;
    assert_eq!(ok.status, 201, "{:?}", ok.body);
    assert_eq!(ok.body["job"]["schema"], URI);

    let id = "019414d4-0000-7000-a000-0000000000aa";
    let bad = app
        .push(json!({"id": id, "type": "email.send", "schema": URI,
            "args": ["not-an-email", "hello", {"locale": 5}]}))
        .await?;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    let err = &bad.body["error"];
    assert_eq!(err["code"], "schema_validation");
    assert_eq!(err["retryable"], false);
    assert_eq!(err["details"]["schema"], URI);
    let errors = err["details"]["validation_errors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let paths: Vec<&str> = errors.iter().filter_map(|e| e["path"].as_str()).collect();
    for want in ["$.args[0]", "$.args[1]", "$.args[2].locale"] {
        assert!(paths.contains(&want), "{want} missing from {errors:?}");
    }
    assert!(errors
        .iter()
        .all(|e| e["message"].as_str().is_some_and(|m| !m.is_empty())));
    // Nothing was written.
    assert_eq!(app.info(id).await?.status, 404);

    let too_few = app
        .push(json!({"type": "email.send", "schema": URI, "args": ["ada@example.com"]}))
        .await?;
    assert_eq!(too_few.status, 400, "{:?}", too_few.body);
    assert_eq!(
        too_few.body["error"]["details"]["validation_errors"][0]["path"],
        "$.args"
    );

    // Jobs without a schema are not validated.
    let free = app
        .push(json!({"type": "email.send", "args": [1, 2, 3, 4]}))
        .await?;
    assert_eq!(free.status, 201, "{:?}", free.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn push_naming_an_unregistered_schema_is_rejected() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    for schema in ["urn:ojs:schema:nobody.home:v1", "not a uri"] {
        let r = app
            .push(json!({"type": "email.send", "schema": schema, "args": ["a@example.com", "welcome"]}))
            .await?;
        assert_eq!(r.status, 400, "{schema}: {:?}", r.body);
        assert_eq!(r.body["error"]["code"], "schema_validation");
        assert_eq!(
            r.body["error"]["details"]["validation_errors"][0]["path"],
            "$.schema"
        );
    }
    // Registered, then deleted: rejected again.
    app.call(Method::POST, "/ojs/v1/schemas", Some(registration()))
        .await?;
    let ok = app
        .push(json!({"type": "email.send", "schema": URI, "args": ["a@example.com", "welcome"]}))
        .await?;
    assert_eq!(ok.status, 201, "{:?}", ok.body);
    app.call(Method::DELETE, &format!("/ojs/v1/schemas/{ENCODED}"), None)
        .await?;
    let r = app
        .push(json!({"type": "email.send", "schema": URI, "args": ["a@example.com", "welcome"]}))
        .await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    app.teardown().await;
    Ok(())
}

#[tokio::test]
async fn a_schema_costs_push_exactly_one_extra_read() -> anyhow::Result<()> {
    // The queue's settings (its depth bound), read by the first push, are remembered for
    // the whole test: only what the schema adds is counted, however slow the machine.
    let store = ojs_tests::fresh_store()
        .await?
        .with_config(|c| c.queue_settings_ttl = std::time::Duration::from_secs(600));
    let app = TestApp::spawn_on_store(store).await?;
    app.call(Method::POST, "/ojs/v1/schemas", Some(registration()))
        .await?;
    let args = json!(["ada@example.com", "welcome"]);
    app.push(json!({"type": "email.send", "args": args, "options": {"queue": "warm"}}))
        .await?;
    let u0 = app.store.usage();
    let plain = app
        .push(json!({"type": "email.send", "args": args, "options": {"queue": "warm"}}))
        .await?;
    let u1 = app.store.usage();
    let checked = app
        .push(json!({"type": "email.send", "schema": URI, "args": args, "options": {"queue": "warm"}}))
        .await?;
    let u2 = app.store.usage();
    assert_eq!((plain.status, checked.status), (201, 201));
    let (without, with) = (u1 - u0, u2 - u1);
    println!(
        "PUSH: {} calls {:.1} RCU; PUSH with schema: {} calls {:.1} RCU",
        without.calls, without.read_units, with.calls, with.read_units
    );
    assert_eq!(with.calls, without.calls + 1);
    app.teardown().await;
    Ok(())
}

/// A workflow's steps and callbacks and a cron template are full envelopes: the schema
/// they name is enforced when the workflow is created or the cron registered, as PUSH
/// enforces it; nothing is written when it refuses (issue #30, one way to create a job).
#[tokio::test]
async fn workflow_steps_callbacks_and_cron_templates_are_checked_against_their_schema(
) -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let r = app
        .call(Method::POST, "/ojs/v1/schemas", Some(registration()))
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let good = json!({"type": "email.send", "schema": URI, "args": ["ada@example.com", "welcome"]});
    let bad = json!({"type": "email.send", "schema": URI, "args": ["not-an-email", "hello"]});

    // A chain whose second step breaks its schema is refused whole.
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "chain", "name": "mail", "steps": [good, bad]})),
        )
        .await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "schema_validation");
    let message = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("$.steps[1]"), "{message}");
    let paths: Vec<&str> = r.body["error"]["details"]["validation_errors"]
        .as_array()
        .map(|e| e.iter().filter_map(|v| v["path"].as_str()).collect())
        .unwrap_or_default();
    assert!(paths.contains(&"$.args[0]"), "{paths:?}");
    // A batch whose callback breaks it, and one naming a schema nobody registered.
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "batch", "steps": [good], "callbacks": {"on_success": bad}})),
        )
        .await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("$.callbacks.on_success")),
        "{:?}",
        r.body
    );
    let r = app
        .call(Method::POST, "/ojs/v1/workflows", Some(json!({"type": "group", "steps": [{"type": "x", "schema": "urn:ojs:schema:nobody:v1", "args": []}]})))
        .await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "schema_validation");
    // Nothing of the refused workflows was written: no step of theirs can be fetched.
    let fetched = app
        .fetch(json!({"queues": ["default"], "count": 10}))
        .await?;
    assert_eq!(fetched.body["jobs"], json!([]), "{:?}", fetched.body);
    // Within the schema, it is created.
    let r = app
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(
                json!({"type": "chain", "steps": [good, good], "callbacks": {"on_complete": good}}),
            ),
        )
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);

    // A cron template is checked when registered.
    let cron = |template: &Value| json!({"name": "mailer", "expression": "0 * * * *", "job_template": template});
    let r = app
        .call(Method::POST, "/ojs/v1/cron", Some(cron(&bad)))
        .await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "schema_validation");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("$.job_template")),
        "{:?}",
        r.body
    );
    let listed = app.call(Method::GET, "/ojs/v1/cron", None).await?;
    assert!(
        !listed.body.to_string().contains("mailer"),
        "{:?}",
        listed.body
    );
    let r = app
        .call(Method::POST, "/ojs/v1/cron", Some(cron(&good)))
        .await?;
    assert!(r.status == 201 || r.status == 200, "{:?}", r.body);
    app.teardown().await;
    Ok(())
}

/// A unique policy on a workflow's job or a cron template is refused with a 400 naming
/// it, not stored and ignored (README, "Deliberate choices").
#[tokio::test]
async fn a_unique_policy_on_a_workflow_job_or_a_cron_template_is_refused() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let unique = json!({"type": "u.job", "args": [1], "unique": {"keys": ["type", "args"]}});
    let plain = json!({"type": "u.job", "args": [1]});
    for (what, body, path) in [
        (
            "step",
            json!({"type": "chain", "steps": [plain, unique]}),
            "$.steps[1].unique",
        ),
        (
            "callback",
            json!({"type": "batch", "steps": [plain], "callbacks": {"on_complete": unique}}),
            "$.callbacks.on_complete.unique",
        ),
    ] {
        let r = app
            .call(Method::POST, "/ojs/v1/workflows", Some(body))
            .await?;
        assert_eq!(r.status, 400, "{what}: {:?}", r.body);
        assert_eq!(r.body["error"]["code"], "invalid_request", "{what}");
        assert!(r.body.to_string().contains(path), "{what}: {:?}", r.body);
    }
    let r = app
        .call(Method::POST, "/ojs/v1/cron", Some(json!({"name": "uniq", "expression": "0 * * * *",
            "job_template": {"type": "u.job", "args": [], "options": {"unique": {"keys": ["type"]}}}})))
        .await?;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert!(
        r.body.to_string().contains("overlap_policy"),
        "{:?}",
        r.body
    );
    app.teardown().await;
    Ok(())
}

/// The versioned registry (ojs-job-versioning.md §11, ojs-schema-registry.md §4): a
/// version registered under the admin routes is the registration `/ojs/v1/schemas` shows
/// under `urn:ojs:schema:{type}:v{version}`, and the other way round; latest is the
/// highest version, not the last registered; a taken version with another document is 409.
#[tokio::test]
async fn versioned_registry_is_the_uri_registry_by_type_and_version() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let v2 = json!({"schema": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}});
    let r = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/schemas/invoice.generate/2.0",
            Some(v2.clone()),
        )
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.body["type"], "invoice.generate");
    assert_eq!(r.body["version"], "2.0");
    assert_eq!(r.body["uri"], "urn:ojs:schema:invoice.generate:v2");
    // The same registration again is 200; another document under 2.0, or spelled 2, is 409.
    let again = app
        .call(
            Method::PUT,
            "/ojs/v1/admin/schemas/invoice.generate/2.0",
            Some(v2),
        )
        .await?;
    assert_eq!(again.status, 200, "{:?}", again.body);
    let other = json!({"schema": {"type": "array"}});
    for path in [
        "/ojs/v1/admin/schemas/invoice.generate/2.0",
        "/ojs/v1/admin/schemas/invoice.generate/2",
    ] {
        let c = app.call(Method::PUT, path, Some(other.clone())).await?;
        assert_eq!(c.status, 409, "{path}: {:?}", c.body);
        assert_eq!(c.body["error"]["code"], "duplicate");
    }
    // Version 1 through the URI registry, registered after 2.0: the latest stays 2.0.
    let v1 = json!({"uri": "urn:ojs:schema:invoice.generate:v1", "type": "invoice.generate",
        "version": 1, "schema": {"type": "array", "prefixItems": [{"type": "string"}]}});
    let r = app.call(Method::POST, "/ojs/v1/schemas", Some(v1)).await?;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let got = app
        .call(
            Method::GET,
            "/ojs/v1/admin/schemas/invoice.generate/1",
            None,
        )
        .await?;
    assert_eq!(got.status, 200, "{:?}", got.body);
    assert_eq!(got.body["version"], 1);
    assert_eq!(got.body["schema"]["prefixItems"][0]["type"], "string");
    let latest = app
        .call(Method::GET, "/ojs/v1/admin/schemas/invoice.generate", None)
        .await?;
    assert_eq!(latest.body["version"], "2.0", "{:?}", latest.body);
    let listed = app
        .call(
            Method::GET,
            "/ojs/v1/admin/schemas/invoice.generate/versions",
            None,
        )
        .await?;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let versions = &listed.body["versions"];
    assert_eq!(versions.as_array().map(Vec::len), Some(2), "{versions}");
    assert_eq!(versions[0]["version"], "2.0");
    assert_eq!(versions[0]["is_latest"], true);
    assert_eq!(versions[1]["version"], 1);
    assert_eq!(versions[1]["is_latest"], false);
    // The URI registry shows the admin registration.
    let by_uri = app
        .call(
            Method::GET,
            "/ojs/v1/schemas/urn%3Aojs%3Aschema%3Ainvoice.generate%3Av2",
            None,
        )
        .await?;
    assert_eq!(by_uri.status, 200, "{:?}", by_uri.body);
    assert_eq!(by_uri.body["schema"]["version"], "2.0");

    // Deleting 2.0 makes 1 the latest; deleting it again is 404.
    let d = app
        .call(
            Method::DELETE,
            "/ojs/v1/admin/schemas/invoice.generate/2.0",
            None,
        )
        .await?;
    assert_eq!(d.status, 200, "{:?}", d.body);
    let d = app
        .call(
            Method::DELETE,
            "/ojs/v1/admin/schemas/invoice.generate/2",
            None,
        )
        .await?;
    assert_eq!(d.status, 404, "{:?}", d.body);
    let latest = app
        .call(Method::GET, "/ojs/v1/admin/schemas/invoice.generate", None)
        .await?;
    assert_eq!(latest.body["version"], 1, "{:?}", latest.body);
    let d = app
        .call(
            Method::DELETE,
            "/ojs/v1/admin/schemas/invoice.generate/1",
            None,
        )
        .await?;
    assert_eq!(d.status, 200, "{:?}", d.body);
    for path in [
        "/ojs/v1/admin/schemas/invoice.generate",
        "/ojs/v1/admin/schemas/invoice.generate/versions",
        "/ojs/v1/admin/schemas/invoice.generate/1",
    ] {
        assert_eq!(
            app.call(Method::GET, path, None).await?.status,
            404,
            "{path}"
        );
    }
    app.teardown().await;
    Ok(())
}

/// Bad registrations of the versioned registry are 400 and store nothing.
#[tokio::test]
async fn versioned_registrations_refuse_bad_input() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let good = json!({"schema": {"type": "array"}});
    for (path, body) in [
        ("/ojs/v1/admin/schemas/a.b/1", json!({})),
        ("/ojs/v1/admin/schemas/a.b/1", json!({"schema": 5})),
        (
            "/ojs/v1/admin/schemas/a.b/1",
            json!({"schema": {"type": 5}}),
        ),
        (
            "/ojs/v1/admin/schemas/a.b/1",
            json!({"type": "c.d", "schema": {"type": "array"}}),
        ),
        (
            "/ojs/v1/admin/schemas/a.b/1",
            json!({"version": 2, "schema": {"type": "array"}}),
        ),
        ("/ojs/v1/admin/schemas/a.b/01", good.clone()),
        ("/ojs/v1/admin/schemas/a.b/1.2.3.4", good.clone()),
        ("/ojs/v1/admin/schemas/a.b/v1", good.clone()),
        ("/ojs/v1/admin/schemas/Bad Type/1", good.clone()),
    ] {
        let r = app.call(Method::PUT, path, Some(body.clone())).await?;
        assert_eq!(r.status, 400, "{path} {body}: {:?}", r.body);
    }
    assert_eq!(
        app.call(Method::GET, "/ojs/v1/admin/schemas/a.b/versions", None)
            .await?
            .status,
        404
    );
    app.teardown().await;
    Ok(())
}

/// PUSH of a job carrying `version` is checked against that version's registered schema;
/// a version with no schema, and an unversioned job, are not checked.
#[tokio::test]
async fn push_checks_a_versioned_job_against_its_version() -> anyhow::Result<()> {
    let app = TestApp::spawn().await?;
    let v2 =
        json!({"schema": {"type": "array", "prefixItems": [{"type": "string"}], "minItems": 1}});
    let r = app
        .call(Method::PUT, "/ojs/v1/admin/schemas/report.make/2", Some(v2))
        .await?;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let push = |version: Value, args: Value| {
        let mut job = json!({"type": "report.make", "args": args});
        if !version.is_null() {
            job["version"] = version;
        }
        app.call(Method::POST, "/ojs/v1/jobs", Some(job))
    };
    let bad = push(json!(2), json!([5])).await?;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(bad.body["error"]["code"], "schema_validation");
    assert_eq!(
        bad.body["error"]["details"]["schema"],
        "urn:ojs:schema:report.make:v2"
    );
    // "2.0" is version 2.
    assert_eq!(push(json!("2.0"), json!([5])).await?.status, 400);
    assert_eq!(push(json!(2), json!(["ok"])).await?.status, 201);
    assert_eq!(push(json!(3), json!([5])).await?.status, 201);
    assert_eq!(push(Value::Null, json!([5])).await?.status, 201);
    app.teardown().await;
    Ok(())
}
