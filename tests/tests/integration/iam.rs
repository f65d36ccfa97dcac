//! Least privilege, checked against the code: each function's workload runs over a
//! DynamoDB client that records every operation it sends (and the parts of each
//! transaction); every recorded action must be granted by that function's policy in
//! `infra/template.yaml`. Granted actions the workload never used are printed, to keep
//! the policies under review. The partition of every item touched is recorded too: no
//! function may touch a partition its policy denies it (`dynamodb:LeadingKeys` Deny
//! statements), nor one outside the partitions an Allow is limited to, matched as IAM
//! matches `dynamodb:LeadingKeys`: against the whole partition key (`PUSH` does not name
//! `PUSH#COUNT`; `EVT#*` names `EVT#<queue>`). The S3, SQS and Lambda calls of the
//! same workloads are recorded too ([`ServiceRecorder`]: the payload bucket of large
//! jobs, the timer queue, push deliveries to a Lambda function), each as the IAM action
//! that authorises it, and an S3 object outside `jobs/` (the prefix every grant names)
//! as an action no policy grants.
//!
//! The stream function's role also grants the reads of the table's stream
//! ([`STREAM_READS`]): the Lambda service makes them, polling for the function before it
//! runs, so no workload here can record them; they are left out of the unused grants, and
//! `scripts/check-template.py` (check "stream") checks they are granted on that stream only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use ojs_http::{app, AppState, AuthMode, Group, HttpConfig};
use ojs_store::{Store, StoreConfig};
use ojs_tests::{fresh_store, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

/// Records the IAM actions behind each DynamoDB request.
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<BTreeSet<String>>>);

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "iam-recorder"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let req = context.request();
        let Some(op) = req
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.split('.').nth(1))
        else {
            return Ok(());
        };
        let body: Value = req
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        let mut actions = Vec::new();
        // The whole partition key, as IAM's dynamodb:LeadingKeys sees it.
        for pk in partition_keys(op, &body) {
            actions.push(format!("dynamodb:{op}@pk:{pk}"));
        }
        if op == "TransactWriteItems" {
            // Each part is authorised by its own action, on its own key.
            for part in body["TransactItems"].as_array().into_iter().flatten() {
                for (kind, action, field) in [
                    ("Put", "PutItem", "Item"),
                    ("Update", "UpdateItem", "Key"),
                    ("Delete", "DeleteItem", "Key"),
                    ("ConditionCheck", "ConditionCheckItem", "Key"),
                ] {
                    if let Some(pk) = part[kind][field]["pk"]["S"].as_str() {
                        actions.push(format!("dynamodb:{action}@pk:{pk}"));
                    }
                }
            }
        }
        if op == "TransactWriteItems" {
            // IAM has no TransactWriteItems action: each part needs its own.
            for part in body["TransactItems"].as_array().into_iter().flatten() {
                for (kind, action) in [
                    ("Put", "PutItem"),
                    ("Update", "UpdateItem"),
                    ("Delete", "DeleteItem"),
                    ("ConditionCheck", "ConditionCheckItem"),
                ] {
                    if part.get(kind).is_some() {
                        actions.push(format!("dynamodb:{action}"));
                    }
                }
            }
        } else {
            actions.push(format!("dynamodb:{op}"));
        }
        if op == "Query" && body.get("IndexName").is_some() {
            actions.push("dynamodb:Query@index".to_owned());
        }
        if let Ok(mut set) = self.0.lock() {
            set.extend(actions);
        }
        Ok(())
    }
}

/// Records the S3, SQS and Lambda requests of a client, as the IAM actions that authorise
/// them, into a [`Recorder`]'s set: from the request itself (S3's method and query, SQS's
/// `X-Amz-Target`, Lambda's Invoke path), as IAM sees it.
#[derive(Debug, Clone)]
struct ServiceRecorder(Arc<Mutex<BTreeSet<String>>>);

impl ServiceRecorder {
    fn sharing(recorder: &Recorder) -> Self {
        Self(recorder.0.clone())
    }
}

impl Intercept for ServiceRecorder {
    fn name(&self) -> &'static str {
        "iam-service-recorder"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let req = context.request();
        let action = service_action(req.method(), req.uri(), req.headers().get("x-amz-target"));
        if let Ok(mut set) = self.0.lock() {
            set.insert(action);
        }
        Ok(())
    }
}

/// The IAM action of an S3, SQS or Lambda request (`?:<method> <uri>` for one this test
/// does not know, which no policy grants).
fn service_action(method: &str, uri: &str, target: Option<&str>) -> String {
    if let Some(op) = target.and_then(|t| t.strip_prefix("AmazonSQS.")) {
        // SQS authorises a batch call by its single call's action (SendMessageBatch needs
        // sqs:SendMessage; there is no sqs:SendMessageBatch).
        return format!("sqs:{}", op.strip_suffix("Batch").unwrap_or(op));
    }
    let after_host = uri
        .split_once("://")
        .map_or(uri, |(_, rest)| rest.find('/').map_or("", |i| &rest[i..]));
    let (path, query) = after_host.split_once('?').unwrap_or((after_host, ""));
    if path.starts_with("/2015-03-31/functions/") && path.ends_with("/invocations") {
        return "lambda:InvokeFunction".to_owned();
    }
    // S3, path style (`/<bucket>/<key>`), as the local endpoint is reached.
    let key = path.trim_start_matches('/').split_once('/').map(|(_, k)| k);
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        return format!("?:{method} {uri}");
    };
    let tagging = query
        .split('&')
        .any(|q| q == "tagging" || q.starts_with("tagging="));
    let action = match (method, tagging) {
        ("PUT", true) => "s3:PutObjectTagging",
        ("PUT", false) => "s3:PutObject",
        ("GET" | "HEAD", false) => "s3:GetObject",
        ("DELETE", false) => "s3:DeleteObject",
        _ => return format!("?:{method} {uri}"),
    };
    if key.starts_with("jobs/") {
        action.to_owned()
    } else {
        format!("{action}@outside-jobs/:{key}")
    }
}

#[test]
fn service_requests_are_named_as_iam_names_them() {
    let cases = [
        ("POST", "http://localhost:5000/", Some("AmazonSQS.SendMessage"), "sqs:SendMessage"),
        ("POST", "http://localhost:5000/", Some("AmazonSQS.SendMessageBatch"), "sqs:SendMessage"),
        (
            "POST",
            "http://localhost:9/2015-03-31/functions/arn%3Aaws%3Alambda%3Aus-east-1%3A1%3Afunction%3Aw/invocations",
            None,
            "lambda:InvokeFunction",
        ),
        ("PUT", "http://localhost:5000/b/jobs/t/1?x-id=PutObject", None, "s3:PutObject"),
        ("PUT", "http://localhost:5000/b/jobs/t/1?tagging", None, "s3:PutObjectTagging"),
        ("GET", "http://localhost:5000/b/jobs/t/1?x-id=GetObject", None, "s3:GetObject"),
        ("HEAD", "http://localhost:5000/b/jobs/t/1", None, "s3:GetObject"),
        ("DELETE", "http://localhost:5000/b/jobs/t/1?x-id=DeleteObject", None, "s3:DeleteObject"),
        ("GET", "http://localhost:5000/b/other/1", None, "s3:GetObject@outside-jobs/:other/1"),
        ("PUT", "http://localhost:5000/b", None, "?:PUT http://localhost:5000/b"),
    ];
    for (method, uri, target, want) in cases {
        assert_eq!(service_action(method, uri, target), want, "{method} {uri}");
    }
}

/// The table partition keys (`pk`) a request names: its key or item, every key or item of
/// a batch, and the partition a table Query reads (index queries name index partitions,
/// which `dynamodb:LeadingKeys` does not govern here).
fn partition_keys(op: &str, body: &Value) -> Vec<String> {
    let pk = |v: &Value| v["pk"]["S"].as_str().map(str::to_owned);
    let mut out = Vec::new();
    match op {
        "GetItem" | "DeleteItem" | "UpdateItem" => out.extend(pk(&body["Key"])),
        "PutItem" => out.extend(pk(&body["Item"])),
        "BatchGetItem" => {
            for table in body["RequestItems"].as_object().into_iter().flatten() {
                for k in table.1["Keys"].as_array().into_iter().flatten() {
                    out.extend(pk(k));
                }
            }
        }
        "BatchWriteItem" => {
            for table in body["RequestItems"].as_object().into_iter().flatten() {
                for w in table.1.as_array().into_iter().flatten() {
                    out.extend(pk(&w["PutRequest"]["Item"]));
                    out.extend(pk(&w["DeleteRequest"]["Key"]));
                }
            }
        }
        "Query" if body.get("IndexName").is_none() => {
            let expr = body["KeyConditionExpression"].as_str().unwrap_or_default();
            if let Some(placeholder) = regex::Regex::new(r"\bpk\s*=\s*(:\w+)")
                .ok()
                .and_then(|re| re.captures(expr))
                .and_then(|c| c.get(1))
            {
                out.extend(
                    body["ExpressionAttributeValues"][placeholder.as_str()]["S"]
                        .as_str()
                        .map(str::to_owned),
                );
            }
        }
        _ => {}
    }
    out
}

impl Recorder {
    fn take(&self) -> BTreeSet<String> {
        self.0
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }
}

/// The payload bucket of large jobs and the timer queue as a deployed stack has them,
/// over S3 and SQS clients that record their requests into `recorder`.
async fn recording_services(
    sdk: &aws_config::SdkConfig,
    recorder: &Recorder,
) -> anyhow::Result<(ojs_store::Payloads, ojs_store::Timer)> {
    let s3 = ojs_store::Payloads::client_from_env(sdk);
    let s3 = aws_sdk_s3::Client::from_conf(
        s3.config()
            .to_builder()
            .interceptor(ServiceRecorder::sharing(recorder))
            .build(),
    );
    let payloads = ojs_store::Payloads::new(s3, ojs_tests::TEST_PAYLOAD_BUCKET);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let url = sqs
        .create_queue()
        .queue_name(format!("ojs-iam-timer-{}", uuid::Uuid::now_v7().simple()))
        .send()
        .await?
        .queue_url()
        .context("the timer queue's URL")?
        .to_owned();
    let sqs = aws_sdk_sqs::Client::from_conf(
        sqs.config()
            .to_builder()
            .interceptor(ServiceRecorder::sharing(recorder))
            .build(),
    );
    Ok((payloads, ojs_store::Timer::new(sqs, url)))
}

/// A store over `table` whose clients record operations.
fn recording_store(
    base: &Store,
    recorder: &Recorder,
    services: &(ojs_store::Payloads, ojs_store::Timer),
) -> Store {
    let conf = base_client_config()
        .to_builder()
        .interceptor(recorder.clone())
        .build();
    // Pushes to paused queues refused (template parameter PausedQueuePush=reject): PUSH
    // then reads the queue's settings, which the policy must allow too.
    Store::new(
        aws_sdk_dynamodb::Client::from_conf(conf),
        StoreConfig {
            reject_paused_pushes: true,
            ..StoreConfig::for_table(base.table())
        },
    )
    .with_payloads(services.0.clone())
    .with_timer(services.1.clone())
}

fn base_client_config() -> aws_sdk_dynamodb::Config {
    CLIENT_CONFIG.get().cloned().unwrap_or_else(|| {
        aws_sdk_dynamodb::Config::builder()
            .http_client(ojs_store::https_client())
            .build()
    })
}

static CLIENT_CONFIG: std::sync::OnceLock<aws_sdk_dynamodb::Config> = std::sync::OnceLock::new();

/// The DynamoDB actions (and whether index queries are allowed) of each function's
/// policy in the template.
fn template_policies() -> anyhow::Result<BTreeMap<String, BTreeSet<String>>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");
    let raw = std::fs::read_to_string(path)?;
    // CloudFormation tags (!Ref, !GetAtt, !Sub) are not YAML serde understands: drop them.
    let untagged = regex::Regex::new(r"!(Ref|GetAtt|Sub|Join|If|Equals|Not|Select|Split)\b")?
        .replace_all(&raw, "");
    let doc: serde_yaml::Value = serde_yaml::from_str(&untagged)?;
    let mut out = BTreeMap::new();
    let resources = doc["Resources"].as_mapping().context("Resources")?;
    for (name, res) in resources {
        if res["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let mut actions = BTreeSet::new();
        for policy in res["Properties"]["Policies"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            for st in policy["Statement"].as_sequence().into_iter().flatten() {
                if st["Effect"].as_str() == Some("Deny") {
                    continue;
                }
                let resources: Vec<String> = match &st["Resource"] {
                    serde_yaml::Value::Sequence(s) => s
                        .iter()
                        .filter_map(|r| r.as_str().map(str::to_owned))
                        .collect(),
                    serde_yaml::Value::String(r) => vec![r.clone()],
                    _ => Vec::new(),
                };
                let on_index = resources.iter().any(|r| r.contains("/index/"));
                for a in st["Action"].as_sequence().into_iter().flatten() {
                    if let Some(a) = a.as_str() {
                        actions.insert(a.to_owned());
                        if a == "dynamodb:Query" && on_index {
                            actions.insert("dynamodb:Query@index".to_owned());
                        }
                    }
                }
            }
        }
        out.insert(name.as_str().unwrap_or_default().to_owned(), actions);
    }
    Ok(out)
}

/// Reads of the table's stream, granted to the stream function for its event source
/// mapping: the Lambda service calls them with the function's role, our code never does.
const STREAM_READS: [&str; 4] = [
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
];

/// Functions whose workload here covers everything they do: every DynamoDB action their
/// policy grants (but [`STREAM_READS`]) must be used, not only printed when unused.
const EXACT_POLICIES: [&str; 1] = ["StreamFunction"];

/// A `dynamodb:LeadingKeys` rule of a function's policy: the actions it covers
/// (`dynamodb:*` for all) and the partitions it names, exactly (`StringEquals`) or by
/// pattern (`StringLike`, such as `EVT#*`).
#[derive(Debug)]
struct PartitionRule {
    deny: bool,
    actions: Vec<String>,
    partitions: Vec<String>,
    patterns: Vec<String>,
}

impl PartitionRule {
    fn covers(&self, action: &str) -> bool {
        self.actions
            .iter()
            .any(|a| a == "dynamodb:*" || a == action)
    }

    /// Whether the rule names the partition key `pk` (the whole key, as IAM compares
    /// `dynamodb:LeadingKeys`): exactly (`StringEquals`), or by a pattern matching it
    /// (`StringLike`: `EVT#*` names `EVT#<queue>`, not `EVT` nor `EVTX`; `PUSH` names
    /// `PUSH`, not `PUSH#COUNT`).
    fn names(&self, pk: &str) -> bool {
        self.partitions.iter().any(|p| p == pk) || self.patterns.iter().any(|p| glob_matches(p, pk))
    }
}

/// IAM's `StringLike`: `*` any characters (none included), `?` one, the rest literal.
fn glob_matches(pattern: &str, value: &str) -> bool {
    let glob = regex::escape(pattern)
        .replace(r"\*", ".*")
        .replace(r"\?", ".");
    regex::Regex::new(&format!("^{glob}$")).is_ok_and(|re| re.is_match(value))
}

/// The partition family of a key (the part before its first `#`), for the printout.
fn family(pk: &str) -> &str {
    pk.split('#').next().unwrap_or_default()
}

#[test]
fn leading_keys_are_matched_against_the_whole_partition_key() {
    let rule = PartitionRule {
        deny: false,
        actions: vec!["dynamodb:PutItem".into()],
        partitions: vec!["PUSH".into(), "WHDUE".into()],
        patterns: vec!["PUSHQ#*".into(), "EVT#*".into()],
    };
    // The review's case (F9): PUSH#COUNT is not PUSH, though its family is.
    assert!(rule.names("PUSH"));
    assert!(!rule.names("PUSH#COUNT"));
    assert!(rule.names("PUSHQ#emails"));
    assert!(rule.names("EVT#default#3"));
    assert!(!rule.names("EVT"), "EVT#* needs the '#'");
    assert!(!rule.names("PUSHQ"));
    assert!(!rule.names("WHDUE#1"));
    assert!(glob_matches("JOB#??", "JOB#ab") && !glob_matches("JOB#??", "JOB#abc"));
}

/// Every function's `dynamodb:LeadingKeys` rules: Deny statements with
/// `ForAnyValue:StringEquals` (or `StringLike`) and Allow statements limited by
/// `ForAllValues:StringEquals` (or `StringLike`).
fn template_partition_rules() -> anyhow::Result<BTreeMap<String, Vec<PartitionRule>>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");
    let raw = std::fs::read_to_string(path)?;
    let untagged = regex::Regex::new(r"!(Ref|GetAtt|Sub|Join|If|Equals|Not|Select|Split)\b")?
        .replace_all(&raw, "");
    let doc: serde_yaml::Value = serde_yaml::from_str(&untagged)?;
    let strings = |v: &serde_yaml::Value| -> Vec<String> {
        match v {
            serde_yaml::Value::Sequence(s) => s
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect(),
            serde_yaml::Value::String(x) => vec![x.clone()],
            _ => Vec::new(),
        }
    };
    let mut out = BTreeMap::new();
    for (name, res) in doc["Resources"].as_mapping().context("Resources")? {
        if res["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let mut rules = Vec::new();
        for policy in res["Properties"]["Policies"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            for st in policy["Statement"].as_sequence().into_iter().flatten() {
                let deny = st["Effect"].as_str() == Some("Deny");
                let set = if deny { "ForAnyValue" } else { "ForAllValues" };
                let keys = |operator: &str| {
                    strings(&st["Condition"][format!("{set}:{operator}")]["dynamodb:LeadingKeys"])
                };
                let (partitions, patterns) = (keys("StringEquals"), keys("StringLike"));
                if partitions.is_empty() && patterns.is_empty() {
                    continue;
                }
                rules.push(PartitionRule {
                    deny,
                    actions: strings(&st["Action"]),
                    partitions,
                    patterns,
                });
            }
        }
        out.insert(name.as_str().unwrap_or_default().to_owned(), rules);
    }
    Ok(out)
}

/// A server of one endpoint group over a recording store, with the in-function key check
/// off, as deployed (the HTTP API's authorizer checks keys before a function runs).
struct GroupServer {
    base: String,
    key: String,
    client: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

impl GroupServer {
    async fn start(store: Store, group: Group, key: String) -> anyhow::Result<Self> {
        let router = app(
            AppState::new(
                store,
                HttpConfig {
                    auth: AuthMode::Off,
                    ..HttpConfig::default()
                },
            ),
            &[group],
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            base,
            key,
            client: reqwest::Client::new(),
            server,
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut req = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let res = req.send().await?;
        let status = res.status().as_u16();
        Ok((
            status,
            serde_json::from_slice(&res.bytes().await?).unwrap_or(Value::Null),
        ))
    }
}

impl Drop for GroupServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Registers a push endpoint `endpoint` for `queue` (through the unrecorded setup server's
/// store) and pushes a job there: the job, as stored.
async fn job_for_endpoint(
    setup: &TestApp,
    endpoint: &str,
    queue: &str,
) -> anyhow::Result<ojs_core::Job> {
    let registration = json!({
        "endpoint": endpoint,
        "job_types": ["iam.stream"],
        "queues": [queue],
        "config": {"signing_secret": "whsec_iam_0123456789"},
    });
    setup
        .store
        .push_endpoints()
        .put(
            &ojs_core::push::PushEndpoint::from_json(&registration, true)?,
            None,
            ojs_core::time::now(),
        )
        .await?;
    let pushed = setup
        .push(json!({"type": "iam.stream", "queue": queue, "args": []}))
        .await?;
    setup
        .store
        .engine()
        .get_job(&ojs_core::JobId::parse(&id(&pushed.body))?)
        .await?
        .with_context(|| format!("the job pushed to {queue}"))
}

fn id(v: &Value) -> String {
    v["job"]["id"].as_str().unwrap_or_default().to_owned()
}

fn expect(what: &str, got: (u16, Value), ok: &[u16]) -> anyhow::Result<Value> {
    anyhow::ensure!(ok.contains(&got.0), "{what}: {} {}", got.0, got.1);
    Ok(got.1)
}

#[test]
fn every_dynamodb_action_a_function_uses_is_granted_by_its_policy() -> anyhow::Result<()> {
    // The workload is one deep future: polling it needs more than a test thread's 2 MiB
    // of stack, so it runs on a runtime's worker threads with more.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_stack_size(16 << 20)
        .enable_all()
        .build()?;
    runtime.block_on(async { tokio::spawn(Box::pin(every_function_s_workload())).await? })
}

/// Each function's calls, recorded, then checked against its policy.
async fn every_function_s_workload() -> anyhow::Result<()> {
    let (base, _) = ojs_tests::with_payloads(fresh_store().await?).await?;
    let setup = TestApp::spawn_on_store(base).await?;
    let sdk = ojs_store::sdk_config().await;
    let _ = CLIENT_CONFIG.set(ojs_store::client_for(&sdk).config().clone());
    let key = ojs_http::auth::issue_key(&setup.store, "iam").await?.key;
    let recorder = Recorder::default();
    let services = recording_services(&sdk, &recorder).await?;
    let store = recording_store(&setup.store, &recorder, &services);
    // A request over the item's limit: its args are kept in the payload bucket.
    let large_args = json!(["x".repeat(300 * 1024)]);
    let mut used: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();

    // Shared fixtures, written through the unrecorded setup server.
    let push = |q: &str, extra: Value| {
        let mut j = json!({"type": "iam.job", "queue": q, "args": [1]});
        if let (Some(o), Some(e)) = (j.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        j
    };

    // ---- jobs
    let s = GroupServer::start(store.clone(), Group::Jobs, key.clone()).await?;
    let a = expect(
        "push",
        s.call(Method::POST, "/ojs/v1/jobs", Some(push("iq", json!({}))))
            .await?,
        &[201],
    )?;
    let later = ojs_core::time::format(&(ojs_core::time::now() + chrono::Duration::minutes(5)));
    expect(
        "push scheduled",
        s.call(
            Method::POST,
            "/ojs/v1/jobs",
            Some(push("iq", json!({"scheduled_at": later}))),
        )
        .await?,
        &[201],
    )?;
    let large = expect(
        "push large",
        s.call(
            Method::POST,
            "/ojs/v1/jobs",
            Some(push("iq", json!({"args": large_args.clone()}))),
        )
        .await?,
        &[201],
    )?;
    expect(
        "info large",
        s.call(Method::GET, &format!("/ojs/v1/jobs/{}", id(&large)), None)
            .await?,
        &[200],
    )?;
    let unique = json!({"unique": {"keys": ["type", "args"], "on_conflict": "replace"}});
    expect(
        "push unique",
        s.call(
            Method::POST,
            "/ojs/v1/jobs",
            Some(push("iq", unique.clone())),
        )
        .await?,
        &[201],
    )?;
    expect(
        "push unique again",
        s.call(Method::POST, "/ojs/v1/jobs", Some(push("iq", unique)))
            .await?,
        &[201],
    )?;
    expect(
        "batch",
        s.call(
            Method::POST,
            "/ojs/v1/jobs/batch",
            Some(json!({"jobs": [push("iq", json!({})), push("iq", json!({}))]})),
        )
        .await?,
        &[201],
    )?;
    expect(
        "info",
        s.call(Method::GET, &format!("/ojs/v1/jobs/{}", id(&a)), None)
            .await?,
        &[200],
    )?;
    expect(
        "cancel",
        s.call(Method::DELETE, &format!("/ojs/v1/jobs/{}", id(&a)), None)
            .await?,
        &[200],
    )?;
    let wf = setup
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "chain", "name": "iam", "steps": [
        {"type": "iam.a", "args": []}, {"type": "iam.b", "args": []}]})),
        )
        .await?;
    if let Some(step) = wf.body["workflow"]["jobs"][0]["id"]
        .as_str()
        .or(wf.body["workflow"]["steps"][0]["job_id"].as_str())
    {
        expect(
            "cancel step",
            s.call(Method::DELETE, &format!("/ojs/v1/jobs/{step}"), None)
                .await?,
            &[200, 409],
        )?;
    }
    used.insert("JobsFunction", recorder.take());
    drop(s);

    // ---- workers
    let s = GroupServer::start(store.clone(), Group::Workers, key.clone()).await?;
    for extra in [
        json!({}),
        json!({"retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}),
        json!({"retry": {"max_attempts": 3}}),
    ] {
        setup.push(push("wq", extra)).await?;
    }
    let fetched = expect(
        "fetch",
        s.call(
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": ["wq"], "count": 3, "worker_id": "w"})),
        )
        .await?,
        &[200],
    )?;
    let ids: Vec<String> = fetched["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["id"].as_str().map(str::to_owned))
        .collect();
    anyhow::ensure!(ids.len() == 3, "fetched {fetched}");
    expect(
        "heartbeat",
        s.call(
            Method::POST,
            "/ojs/v1/workers/heartbeat",
            Some(json!({"worker_id": "w", "active_jobs": ids})),
        )
        .await?,
        &[200],
    )?;
    expect(
        "ack",
        s.call(
            Method::POST,
            "/ojs/v1/workers/ack",
            Some(json!({"job_id": ids[0]})),
        )
        .await?,
        &[200],
    )?;
    for j in &ids[1..] {
        expect(
            "nack",
            s.call(
                Method::POST,
                "/ojs/v1/workers/nack",
                Some(json!({"job_id": j, "error": {"code": "x", "message": "boom"}})),
            )
            .await?,
            &[200],
        )?;
    }
    expect(
        "workers",
        s.call(Method::GET, "/ojs/v1/admin/workers", None).await?,
        &[200],
    )?;
    expect(
        "quiet",
        s.call(Method::POST, "/ojs/v1/admin/workers/w/quiet", None)
            .await?,
        &[200, 202],
    )?;
    // A quiet worker is assigned nothing: it runs again before it fetches again.
    expect(
        "resume",
        s.call(Method::POST, "/ojs/v1/admin/workers/w/resume", None)
            .await?,
        &[200, 202],
    )?;
    expect(
        "health",
        s.call(Method::GET, "/ojs/v1/workers/w/health", None)
            .await?,
        &[200],
    )?;
    // A workflow step's ACK runs the workflow bookkeeping.
    setup
        .call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "group", "name": "iam-g", "jobs": [
        {"type": "iam.g", "queue": "wfq", "args": []}]})),
        )
        .await?;
    let f = expect(
        "fetch step",
        s.call(
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": ["wfq"]})),
        )
        .await?,
        &[200],
    )?;
    if let Some(j) = f["jobs"][0]["id"].as_str() {
        // A progress report: the lease extension's write with the progress in it.
        expect(
            "progress",
            s.call(
                Method::PUT,
                &format!("/ojs/v1/jobs/{j}/progress"),
                Some(json!({"progress": 0.5})),
            )
            .await?,
            &[200],
        )?;
        expect(
            "read progress",
            s.call(Method::GET, &format!("/ojs/v1/jobs/{j}/progress"), None)
                .await?,
            &[200],
        )?;
        expect(
            "ack step",
            s.call(
                Method::POST,
                "/ojs/v1/workers/ack",
                Some(json!({"job_id": j})),
            )
            .await?,
            &[200],
        )?;
    }
    // A large job: its args come from the payload bucket.
    setup
        .push(push("wq-large", json!({"args": large_args.clone()})))
        .await?;
    ojs_tests::after_index_lag().await;
    let fetched = expect(
        "fetch large",
        s.call(
            Method::POST,
            "/ojs/v1/workers/fetch",
            Some(json!({"queues": ["wq-large"], "worker_id": "w"})),
        )
        .await?,
        &[200],
    )?;
    anyhow::ensure!(
        fetched["jobs"][0]["args"] == large_args,
        "fetch large: the args did not come back"
    );
    let j = fetched["jobs"][0]["id"].as_str().unwrap_or_default();
    expect(
        "ack large",
        s.call(
            Method::POST,
            "/ojs/v1/workers/ack",
            Some(json!({"job_id": j})),
        )
        .await?,
        &[200],
    )?;
    used.insert("WorkersFunction", recorder.take());
    drop(s);

    // ---- queues
    let s = GroupServer::start(store.clone(), Group::Queues, key.clone()).await?;
    expect(
        "queues",
        s.call(Method::GET, "/ojs/v1/queues", None).await?,
        &[200],
    )?;
    expect(
        "stats",
        s.call(Method::GET, "/ojs/v1/queues/wq/stats", None).await?,
        &[200],
    )?;
    expect(
        "pause",
        s.call(Method::POST, "/ojs/v1/queues/wq/pause", None)
            .await?,
        &[200],
    )?;
    // A job that became available while the queue was paused, of a type a push endpoint
    // takes: the resume nudges it (the ready index, the job, its mark).
    let endpoint = ojs_core::push::PushEndpoint::from_json(
        &json!({
            "endpoint": "http://127.0.0.1:9/",
            "job_types": ["iam.job"],
            "queues": ["wq"],
            "config": {"max_concurrency": 1, "timeout_ms": 1000, "signing_secret": "s".repeat(32)},
        }),
        true,
    )?;
    let registered = setup
        .store
        .push_endpoints()
        .put(&endpoint, None, ojs_core::time::now())
        .await?;
    setup.push(push("wq", json!({}))).await?;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    expect(
        "resume",
        s.call(Method::POST, "/ojs/v1/queues/wq/resume", None)
            .await?,
        &[200],
    )?;
    // The scheduler's nudge below is to find only its own job.
    setup.store.push_endpoints().delete(&registered.id).await?;
    expect(
        "rate",
        s.call(
            Method::PUT,
            "/ojs/v1/admin/queues/wq/rate-limit",
            Some(json!({"rate": {"limit": 5, "period": "PT1S"}})),
        )
        .await?,
        &[200],
    )?;
    expect(
        "unrate",
        s.call(Method::DELETE, "/ojs/v1/admin/queues/wq/rate-limit", None)
            .await?,
        &[200, 204],
    )?;
    expect(
        "recount",
        s.call(Method::POST, "/ojs/v1/admin/queues/wq/recount", None)
            .await?,
        &[200],
    )?;
    // Push endpoint registrations (served by the queues function): register, list, get,
    // delete.
    let push_registration = json!({
        "endpoint": "https://example.com/ojs",
        "job_types": ["iam.push"],
        "queues": ["iam-push"],
        "config": {"signing_secret": "whsec_iam_0123456789"},
    });
    let endpoint = ojs_core::push::PushEndpoint::from_json(&push_registration, true)?;
    let entry = store
        .push_endpoints()
        .put(&endpoint, None, ojs_core::time::now())
        .await?;
    store.push_endpoints().list().await?;
    store.push_endpoints().get(&entry.id).await?;
    store.push_endpoints().delete(&entry.id).await?;
    // Webhook subscriptions (served by the queues function): create, list, get, update,
    // rotate, the log of a test delivery and its listing, delete.
    let sub = ojs_core::webhook::Subscription::from_json(
        &json!({"url": "https://example.com/hook", "events": ["job.*"]}),
        true,
    )?;
    let hook = store
        .webhooks()
        .put(
            &sub,
            "whsec_iam".into(),
            None,
            &Default::default(),
            ojs_core::time::now(),
        )
        .await?;
    store.webhooks().list(true).await?;
    store.webhooks().get(&hook.id).await?;
    store
        .webhooks()
        .update(
            &hook.id,
            &sub,
            Some(&hook.updated_at),
            ojs_core::time::now(),
        )
        .await?;
    store
        .webhooks()
        .rotate_secret(&hook.id, "whsec_iam2".into(), 0, ojs_core::time::now())
        .await?;
    store
        .webhooks()
        .log_attempt(
            &ojs_store::DeliveryAttempt {
                delivery_id: "del_iam".into(),
                subscription_id: hook.id.clone(),
                event_type: "webhook.test".into(),
                event_id: "evt_iam".into(),
                attempt: 1,
                status_code: Some(200),
                duration_ms: 1,
                error: None,
                outcome: "delivered",
                next_attempt_at: None,
                body: None,
            },
            ojs_core::time::now(),
        )
        .await?;
    store.webhooks().deliveries(&hook.id, 10, None).await?;
    store
        .webhooks()
        .find_delivery("del_iam", std::slice::from_ref(&hook.id))
        .await?;
    // A manual retry of a dead delivery records its pending retry.
    store
        .webhooks()
        .schedule_retry(&ojs_store::PendingDelivery {
            delivery_id: "del_iam".into(),
            subscription_id: hook.id.clone(),
            event_type: "webhook.test".into(),
            body: "{}".into(),
            attempt: 2,
            due_us: ojs_core::time::now().timestamp_micros() + 3_600_000_000,
        })
        .await?;
    store.webhooks().delete(&hook.id).await?;
    expect(
        "rate limit inspect",
        s.call(Method::GET, "/ojs/v1/rate-limits/iam-key", None)
            .await?,
        &[200],
    )?;
    used.insert("QueuesFunction", recorder.take());
    drop(s);

    // ---- system
    let s = GroupServer::start(store.clone(), Group::System, key.clone()).await?;
    expect(
        "manifest",
        s.call(Method::GET, "/ojs/manifest", None).await?,
        &[200],
    )?;
    expect(
        "health",
        s.call(Method::GET, "/ojs/v1/health", None).await?,
        &[200],
    )?;
    expect(
        "events",
        s.call(Method::GET, "/ojs/v1/events", None).await?,
        &[200],
    )?;
    expect("ready", s.call(Method::GET, "/ready", None).await?, &[200])?;
    expect(
        "metrics",
        s.call(Method::GET, "/metrics", None).await?,
        &[200],
    )?;
    used.insert("SystemFunction", recorder.take());
    drop(s);

    // ---- dead letter (the discarded job of the workers part is there)
    let s = GroupServer::start(store.clone(), Group::DeadLetter, key.clone()).await?;
    let dead = expect(
        "dead",
        s.call(Method::GET, "/ojs/v1/dead-letter", None).await?,
        &[200],
    )?;
    let dead_ids: Vec<String> = dead["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["id"].as_str().map(str::to_owned))
        .collect();
    if let Some(d) = dead_ids.first() {
        expect(
            "dead retry",
            s.call(
                Method::POST,
                &format!("/ojs/v1/dead-letter/{d}/retry"),
                None,
            )
            .await?,
            &[200],
        )?;
    }
    setup
        .push(push(
            "dq",
            json!({"retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}),
        ))
        .await?;
    let f = setup.fetch(json!({"queues": ["dq"]})).await?;
    setup
        .nack(json!({"job_id": f.body["jobs"][0]["id"], "error": {"message": "x"}}))
        .await?;
    expect(
        "dead delete",
        s.call(
            Method::DELETE,
            &format!(
                "/ojs/v1/dead-letter/{}",
                f.body["jobs"][0]["id"].as_str().unwrap_or_default()
            ),
            None,
        )
        .await?,
        &[200, 204],
    )?;
    used.insert("DeadLetterFunction", recorder.take());
    drop(s);

    // ---- admin (the dashboard's API): a queue with an available, a cancelled, a
    // completed and a dead-lettered job, then every kind of admin call.
    let a1 = id(&setup.push(push("aq", json!({}))).await?.body);
    let a2 = id(&setup.push(push("aq", json!({}))).await?.body);
    setup.cancel(&a2).await?;
    setup
        .push(push(
            "aq",
            json!({"priority": 9, "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}),
        ))
        .await?;
    ojs_tests::after_index_lag().await;
    let f = setup.fetch(json!({"queues": ["aq"], "count": 1})).await?;
    let dead = f.body["jobs"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    setup
        .nack(json!({"job_id": dead, "error": {"message": "x"}}))
        .await?;
    let done = id(&setup.push(push("aq", json!({"priority": 5}))).await?.body);
    // Ahead of a1 by priority once the ready index shows it (within the GSI's lag a FETCH
    // may still see only a1, on AWS too).
    ojs_tests::after_index_lag().await;
    let f = setup.fetch(json!({"queues": ["aq"], "count": 1})).await?;
    anyhow::ensure!(f.body["jobs"][0]["id"] == done.as_str(), "{}", f.body);
    setup.ack(json!({"job_id": done})).await?;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let s = GroupServer::start(store.clone(), Group::Admin, key.clone()).await?;
    for path in [
        "/ojs/v1/admin/stats",
        "/ojs/v1/admin/stats/history",
        "/ojs/v1/admin/queues",
        "/ojs/v1/admin/queues/aq",
        "/ojs/v1/admin/jobs?queue=aq",
        "/ojs/v1/admin/jobs?type=iam.job",
        &format!("/ojs/v1/admin/jobs/{a1}"),
        "/ojs/v1/admin/dead-letter",
        "/ojs/v1/admin/dead-letter/stats",
        "/ojs/v1/admin/system/maintenance",
        "/ojs/v1/admin/system/config",
        "/ojs/v1/admin/schemas",
        "/ojs/v1/admin/scheduling/stats",
    ] {
        expect(path, s.call(Method::GET, path, None).await?, &[200])?;
    }
    let confirm = |filter: Value| Some(json!({"filter": filter, "confirm": true}));
    for (what, method, path, body) in [
        (
            "admin retry",
            Method::POST,
            format!("/ojs/v1/admin/jobs/{a2}/retry"),
            None,
        ),
        (
            "admin cancel",
            Method::POST,
            format!("/ojs/v1/admin/jobs/{a2}/cancel"),
            None,
        ),
        (
            "bulk retry",
            Method::POST,
            "/ojs/v1/admin/jobs/bulk/retry".to_owned(),
            confirm(json!({"queue": "aq", "state": "cancelled"})),
        ),
        (
            "bulk cancel",
            Method::POST,
            "/ojs/v1/admin/jobs/bulk/cancel".to_owned(),
            confirm(json!({"queue": "aq", "state": "available"})),
        ),
        (
            "bulk delete",
            Method::POST,
            "/ojs/v1/admin/jobs/bulk/delete".to_owned(),
            confirm(json!({"queue": "aq", "state": "cancelled"})),
        ),
        (
            "dead retry",
            Method::POST,
            format!("/ojs/v1/admin/dead-letter/{dead}/retry"),
            None,
        ),
        (
            "purge",
            Method::DELETE,
            "/ojs/v1/admin/queues/aq/jobs".to_owned(),
            Some(json!({"states": ["completed"], "confirm": true})),
        ),
        (
            "dead purge",
            Method::DELETE,
            "/ojs/v1/admin/dead-letter".to_owned(),
            Some(json!({"confirm": true})),
        ),
        (
            "pause",
            Method::POST,
            "/ojs/v1/admin/queues/aq/pause".to_owned(),
            None,
        ),
        (
            "maintenance on",
            Method::POST,
            "/ojs/v1/admin/system/maintenance".to_owned(),
            Some(json!({"enabled": true})),
        ),
        (
            "maintenance off",
            Method::POST,
            "/ojs/v1/admin/system/maintenance".to_owned(),
            Some(json!({"enabled": false})),
        ),
        (
            "config",
            Method::PUT,
            "/ojs/v1/admin/queues/aq/config".to_owned(),
            Some(json!({"rate_limit": {"limit": 5, "period": "PT1M"}})),
        ),
    ] {
        expect(what, s.call(method, &path, body).await?, &[200])?;
    }
    expect(
        "deregister",
        s.call(Method::DELETE, "/ojs/v1/admin/workers/nobody", None)
            .await?,
        &[404],
    )?;
    used.insert("AdminFunction", recorder.take());
    drop(s);

    // ---- cron
    let s = GroupServer::start(store.clone(), Group::Cron, key.clone()).await?;
    expect("cron add", s.call(Method::POST, "/ojs/v1/cron", Some(json!({"name": "iam-cron", "expression": "*/5 * * * *", "job_template": {"type": "iam.cron", "args": []}}))).await?, &[200, 201])?;
    expect(
        "cron list",
        s.call(Method::GET, "/ojs/v1/cron", None).await?,
        &[200],
    )?;
    expect(
        "cron del",
        s.call(Method::DELETE, "/ojs/v1/cron/iam-cron", None)
            .await?,
        &[200, 204],
    )?;
    used.insert("CronFunction", recorder.take());
    drop(s);

    // ---- schemas
    let s = GroupServer::start(store.clone(), Group::Schemas, key.clone()).await?;
    let uri = "urn:iam:schema";
    expect("schema add", s.call(Method::POST, "/ojs/v1/schemas", Some(json!({"uri": uri, "type": "iam.s", "version": "1.0.0", "schema": {"type": "array"}}))).await?, &[201])?;
    expect(
        "schema list",
        s.call(Method::GET, "/ojs/v1/schemas", None).await?,
        &[200],
    )?;
    expect(
        "schema get",
        s.call(Method::GET, &format!("/ojs/v1/schemas/{uri}"), None)
            .await?,
        &[200],
    )?;
    expect(
        "schema del",
        s.call(Method::DELETE, &format!("/ojs/v1/schemas/{uri}"), None)
            .await?,
        &[200, 204],
    )?;
    // The versioned registry is served here too (admin key: the group server's key is
    // the test's full-scope key).
    let v = "/ojs/v1/admin/schemas/iam.v/1";
    expect(
        "schema version put",
        s.call(Method::PUT, v, Some(json!({"schema": {"type": "array"}})))
            .await?,
        &[201],
    )?;
    expect(
        "schema version get",
        s.call(Method::GET, v, None).await?,
        &[200],
    )?;
    expect(
        "schema versions",
        s.call(Method::GET, "/ojs/v1/admin/schemas/iam.v/versions", None)
            .await?,
        &[200],
    )?;
    expect(
        "schema version del",
        s.call(Method::DELETE, v, None).await?,
        &[200],
    )?;
    used.insert("SchemasFunction", recorder.take());
    drop(s);

    // ---- workflows
    let s = GroupServer::start(store.clone(), Group::Workflows, key.clone()).await?;
    let w = expect(
        "wf create",
        s.call(
            Method::POST,
            "/ojs/v1/workflows",
            Some(json!({"type": "chain", "name": "iam-w", "steps": [
        {"type": "iam.a", "args": []}, {"type": "iam.b", "args": []}]})),
        )
        .await?,
        &[201],
    )?;
    let wid = w["workflow"]["id"].as_str().unwrap_or_default().to_owned();
    expect(
        "wf get",
        s.call(Method::GET, &format!("/ojs/v1/workflows/{wid}"), None)
            .await?,
        &[200],
    )?;
    expect(
        "wf cancel",
        s.call(Method::DELETE, &format!("/ojs/v1/workflows/{wid}"), None)
            .await?,
        &[200],
    )?;
    used.insert("WorkflowsFunction", recorder.take());
    drop(s);

    // ---- cloudq: publish, reserve (a FETCH), delete (an ACK), and a reserve of an empty
    // queue.
    let s = GroupServer::start(store.clone(), Group::Cloudq, key.clone()).await?;
    expect(
        "cloudq publish",
        s.call(
            Method::POST,
            "/cloudq/iam-cq",
            Some(json!({"job": {"klass": "iam.cloudq", "args": [1]}})),
        )
        .await?,
        &[200, 201],
    )?;
    let reserved = expect(
        "cloudq reserve",
        s.call(Method::GET, "/cloudq/iam-cq", None).await?,
        &[200],
    )?;
    let cq = reserved["job"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(!cq.is_empty(), "cloudq reserve: {reserved}");
    expect(
        "cloudq delete",
        s.call(Method::DELETE, &format!("/cloudq/iam-cq/{cq}"), None)
            .await?,
        &[200],
    )?;
    expect(
        "cloudq reserve empty",
        s.call(Method::GET, "/cloudq/iam-cq-empty", None).await?,
        &[200, 404],
    )?;
    used.insert("CloudqFunction", recorder.take());
    drop(s);

    // ---- scheduler: a sweep with due jobs, an expired lease and a due cron.
    setup.push(push("sq", json!({"scheduled_at": ojs_core::time::format(&(ojs_core::time::now() + chrono::Duration::milliseconds(200)))}))).await?;
    setup
        .push(push("sq", json!({"visibility_timeout": "PT1S"})))
        .await?;
    setup
        .fetch(json!({"queues": ["sq"], "visibility_timeout": 1}))
        .await?;
    let c = setup.call(Method::POST, "/ojs/v1/cron", Some(json!({"name": "iam-sweep", "expression": "@every 1s", "job_template": {"type": "iam.cron", "args": []}}))).await?;
    anyhow::ensure!(
        matches!(c.status, 200 | 201),
        "cron: {} {}",
        c.status,
        c.body
    );
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    ojs_tests::sweep(&store, ojs_core::time::now()).await?;
    // A webhook retry due now, to an address that refuses: made (its subscription read,
    // the claim, the log line, the next retry) and removed.
    let hook = setup
        .store
        .webhooks()
        .put(
            &ojs_core::webhook::Subscription::from_json(
                &json!({"url": "http://127.0.0.1:9/iam", "events": ["job.*"]}),
                true,
            )?,
            "whsec_iam".into(),
            None,
            &Default::default(),
            ojs_core::time::now(),
        )
        .await?;
    setup
        .store
        .webhooks()
        .schedule_retry(&ojs_store::PendingDelivery {
            delivery_id: "del_iam_retry".into(),
            subscription_id: hook.id.clone(),
            event_type: "job.enqueued".into(),
            body: "{}".into(),
            attempt: 2,
            due_us: ojs_core::time::now().timestamp_micros() - 1,
        })
        .await?;
    let slow = vec![std::time::Duration::from_secs(60); 3];
    let webhooks = ojs_push::WebhookDispatcher::new(
        store.clone(),
        ojs_push::WebhookConfig::local(true, slow.clone()),
    )
    .map_err(anyhow::Error::msg)?;
    let retried = webhooks.redrive().await;
    anyhow::ensure!(retried == 1, "webhook redrive: {retried} retries made");
    // The nudge of a job left waiting for a push endpoint (the registry read, the ready
    // index, the job read, its mark).
    setup
        .store
        .push_endpoints()
        .put(
            &ojs_core::push::PushEndpoint::from_json(
                &json!({"endpoint": "https://example.com/ojs", "job_types": ["iam.nudge"],
                    "queues": ["iam-nudge"], "config": {"signing_secret": "whsec_iam_0123456789"}}),
                true,
            )?,
            None,
            ojs_core::time::now(),
        )
        .await?;
    setup
        .push(json!({"type": "iam.nudge", "queue": "iam-nudge", "args": []}))
        .await?;
    let now = ojs_core::time::now();
    let nudged = store.push_endpoints().nudge_waiting(now, now).await?;
    anyhow::ensure!(nudged == 1, "push nudge: {nudged} nudged");
    // The redrive of a stream batch given up on: its position taken off the failure queue,
    // its records read again from the stream (not recorded: a Streams client) and applied
    // (the transaction, and the marker read when a run was applied before; only the calls
    // are checked here), the message deleted.
    let (arn, records) = ojs_tests::stream_records(setup.store.table()).await?;
    let mut batch: Vec<Value> = records
        .into_iter()
        .filter(super::stream_redrive::is_job_record)
        .collect();
    batch.drain(..batch.len().saturating_sub(2));
    let streams =
        ojs_store::streams_client_for(&sdk, &ojs_tests::fault_proxy::raw_dynamodb_endpoint());
    let shard = super::stream_redrive::only_shard(&streams, &arn).await?;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let failures = sqs
        .create_queue()
        .queue_name(format!(
            "ojs-iam-stream-failures-{}",
            uuid::Uuid::now_v7().simple()
        ))
        .send()
        .await?
        .queue_url()
        .context("the stream failure queue's URL")?
        .to_owned();
    let delivery_queue = sqs
        .create_queue()
        .queue_name(format!(
            "ojs-iam-deliveries-{}",
            uuid::Uuid::now_v7().simple()
        ))
        .send()
        .await?
        .queue_url()
        .context("the delivery queue's URL")?
        .to_owned();
    sqs.send_message()
        .queue_url(&failures)
        .message_body(super::stream_redrive::invocation_record(
            &arn, &shard, &batch,
        ))
        .send()
        .await?;
    let sqs = aws_sdk_sqs::Client::from_conf(
        sqs.config()
            .to_builder()
            .interceptor(ServiceRecorder::sharing(&recorder))
            .build(),
    );
    // The batch's deliveries (the webhook subscription above takes every job event)
    // planned and sent to the delivery queue.
    let pushes = ojs_push::Dispatcher::new(
        store.clone(),
        ojs_push::lambda_client(&sdk),
        ojs_push::PushConfig::local(true),
    )
    .map_err(anyhow::Error::msg)?;
    let deliveries = ojs_push::PlannedDeliveries::new(
        ojs_push::Planner::new(pushes, webhooks.clone()),
        ojs_push::DeliveryQueue::Sqs {
            client: sqs.clone(),
            url: delivery_queue,
        },
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let redriven = ojs_store::StreamRedrive::new(sqs, streams, failures)
        .with_deliveries(Arc::new(deliveries))
        .run(store.derived(), deadline)
        .await;
    anyhow::ensure!(
        redriven.batches == 1 && redriven.deliveries > 0,
        "stream redrive: {redriven:?}"
    );
    used.insert("SchedulerFunction", recorder.take());

    // ---- timer: a job due now and a cron occurrence.
    let t = setup.push(push("tq", json!({"scheduled_at": ojs_core::time::format(&(ojs_core::time::now() + chrono::Duration::milliseconds(100)))}))).await?;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let due_us = ojs_core::time::now().timestamp_micros();
    store
        .wakeups()
        .handle_timer(&json!({"kind": "job", "job_id": id(&t.body), "due_us": due_us}).to_string())
        .await?;
    store
        .wakeups()
        .handle_timer(&json!({"kind": "cron", "name": "iam-sweep", "due_us": due_us}).to_string())
        .await?;
    used.insert("TimerFunction", recorder.take());

    // ---- stream: one batch of job changes, as the stream function's handler hands the
    // records of a Lambda stream event to `apply_changes`: jobs created, claimed,
    // completed, cancelled and deleted (by TTL), in two queues, and a record of another
    // item (ignored). Event pages (Put in EVT#<queue>), counter ADDs (Update in QUEUES)
    // and the batch's marker (Put in STREAM#<sequence number>), one transaction; the
    // batch delivered again reads the marker (GetItem) and writes nothing. Its stream
    // reads are the Lambda service's (STREAM_READS).
    let job = |queue: &str, state: ojs_core::JobState| -> anyhow::Result<ojs_core::Job> {
        let new = ojs_core::NewJob::from_json(
            json!({"type": "iam.stream", "args": [], "options": {"queue": queue}}),
        )?;
        let mut job = ojs_core::Job::enqueue(new, ojs_core::time::now());
        job.status.state = state;
        Ok(job)
    };
    let moved = |from: &ojs_core::Job, to: ojs_core::JobState| {
        let mut job = from.clone();
        job.status.state = to;
        job.status.version += 1;
        job
    };
    let created = job("iam-stream", ojs_core::JobState::Available)?;
    let claimed = moved(&created, ojs_core::JobState::Active);
    let completed = moved(&claimed, ojs_core::JobState::Completed);
    let scheduled = job("iam-stream-2", ojs_core::JobState::Scheduled)?;
    let cancelled = moved(&scheduled, ojs_core::JobState::Cancelled);
    let expired = job("iam-stream-2", ojs_core::JobState::Available)?;
    let other_item = ojs_store::Change {
        old: None,
        new: Some(std::collections::HashMap::from([
            (
                "pk".to_owned(),
                aws_sdk_dynamodb::types::AttributeValue::S("QUEUES".into()),
            ),
            (
                "sk".to_owned(),
                aws_sdk_dynamodb::types::AttributeValue::S("iam-stream".into()),
            ),
        ])),
        at: None,
        sequence: None,
    };
    let changes = [
        ojs_store::Change::between(None, Some(&created)),
        ojs_store::Change::between(Some(&created), Some(&claimed)),
        ojs_store::Change::between(Some(&claimed), Some(&completed)),
        ojs_store::Change::between(None, Some(&scheduled)),
        ojs_store::Change::between(Some(&scheduled), Some(&cancelled)),
        ojs_store::Change::between(Some(&expired), None),
        other_item,
    ];
    let changes: Vec<ojs_store::Change> = changes
        .into_iter()
        .enumerate()
        .map(|(i, c)| c.with_sequence(format!("{}", 7_000_000_000_000_000_000_u64 + i as u64)))
        .collect();
    let applied = store.derived().apply_changes(&changes).await?;
    anyhow::ensure!(
        applied.jobs == 6 && applied.unreadable == 0 && applied.events > 0,
        "stream batch: {applied:?}"
    );
    let again = store.derived().apply_changes(&changes).await?;
    anyhow::ensure!(
        again.replayed == 6 && again.events == 0,
        "stream batch again: {again:?}"
    );
    // Push delivery: a job made available on a queue with an endpoint is claimed,
    // delivered (a loopback endpoint answering completed) and acknowledged.
    let completed = || axum::routing::post(|| async { axum::Json(json!({"status": "completed"})) });
    let (endpoint_url, endpoint_server) =
        ojs_tests::serve_on_loopback(axum::Router::new().route("/", completed())).await?;
    let pushed_job = job_for_endpoint(&setup, &format!("{endpoint_url}/"), "iam-push").await?;
    // And a push endpoint that is a Lambda function, invoked directly (a fake Invoke API
    // answering as an SDK's direct handler does), through a client that records.
    let (invoke_url, invoke_server) = ojs_tests::serve_on_loopback(
        axum::Router::new().route("/2015-03-31/functions/{name}/invocations", completed()),
    )
    .await?;
    let invoked_job = job_for_endpoint(
        &setup,
        "arn:aws:lambda:us-east-1:123456789012:function:iam-worker",
        "iam-push-fn",
    )
    .await?;
    let lambda = ojs_push::lambda_client(&sdk);
    let lambda = aws_sdk_lambda::Client::from_conf(
        lambda
            .config()
            .to_builder()
            .endpoint_url(&invoke_url)
            .interceptor(ServiceRecorder::sharing(&recorder))
            .build(),
    );
    let dispatcher =
        ojs_push::Dispatcher::new(store.clone(), lambda, ojs_push::PushConfig::local(true))
            .map_err(anyhow::Error::msg)?;
    let webhooks =
        ojs_push::WebhookDispatcher::new(store.clone(), ojs_push::WebhookConfig::local(true, slow))
            .map_err(anyhow::Error::msg)?;
    // Planning the batch's deliveries: the queue's endpoints and the subscriptions.
    let planner = ojs_push::Planner::new(dispatcher.clone(), webhooks.clone());
    let planned = planner
        .plan(&[
            ojs_store::Change::between(None, Some(&pushed_job)),
            ojs_store::Change::between(None, Some(&invoked_job)),
        ])
        .await?;
    let pushes = planned
        .iter()
        .filter(|d| matches!(d, ojs_push::Delivery::Push { .. }))
        .count();
    anyhow::ensure!(
        pushes == 2 && planned.len() > pushes,
        "planned deliveries: {planned:?}"
    );
    used.insert("StreamFunction", recorder.take());

    // ---- deliveries: the planned push offer (the job read again, claimed, delivered to
    // a loopback endpoint answering completed, acknowledged) and webhook first attempts
    // (the subscription above refuses: its retry is recorded), as DeliveryFunction makes
    // them from DeliveryQueue.
    let deliverer = ojs_push::Deliverer::new(dispatcher, webhooks);
    for delivery in &planned {
        deliverer.deliver(delivery).await?;
    }
    endpoint_server.abort();
    invoke_server.abort();
    let settled = setup
        .store
        .engine()
        .get_job(&invoked_job.id)
        .await?
        .context("the job for the function")?;
    anyhow::ensure!(
        settled.status.state == ojs_core::JobState::Completed,
        "push delivery to a function: {:?}",
        settled.status.state
    );
    let settled = setup
        .store
        .engine()
        .get_job(&pushed_job.id)
        .await?
        .context("the pushed job")?;
    anyhow::ensure!(
        settled.status.state == ojs_core::JobState::Completed,
        "push delivery: {:?}",
        settled.status.state
    );
    // The catch-up a delivery runs when jobs were left waiting (endpoints full).
    store
        .push_endpoints()
        .ready_jobs(
            &ojs_core::QueueName::parse("iam-push")?,
            10,
            ojs_core::time::now(),
        )
        .await?;
    used.insert("DeliveryFunction", recorder.take());

    // ---- authorizer: a valid key (a GetItem of its record) and a wrong one.
    let auth = ojs_http::Authenticator::new(AuthMode::ApiKey, store.clone());
    let event = |k: &str| {
        json!({"headers": {"authorization": format!("Bearer {k}")}, "rawPath": "/ojs/v1/jobs",
            "requestContext": {"http": {"method": "POST", "path": "/ojs/v1/jobs"}}})
    };
    let verdict = ojs_http::authorizer::authorize_request(&auth, &event(&key))
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    anyhow::ensure!(verdict["isAuthorized"] == true, "authorizer: {verdict}");
    let wrong = format!(
        "{}{}",
        &key[..key.len() - 1],
        if key.ends_with('0') { '1' } else { '0' }
    );
    let verdict = ojs_http::authorizer::authorize_request(&auth, &event(&wrong))
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
    anyhow::ensure!(verdict["isAuthorized"] == false, "authorizer: {verdict}");
    used.insert("AuthorizerFunction", recorder.take());

    // ---- keys: create, list, what a key registered, revoke (and disable what it
    // registered: a push endpoint, a webhook subscription and a cron job of its own).
    let created = ojs_http::key_admin::administer_keys(
        &store,
        &json!({"action": "create", "name": "iam-admin"}),
    )
    .await?;
    let by = created["id"].as_str().map(str::to_owned);
    store
        .push_endpoints()
        .put(
            &ojs_core::push::PushEndpoint::from_json(
                &json!({"endpoint": "https://example.com/keys", "job_types": ["iam.keys"],
                    "queues": ["iam-keys"], "config": {"signing_secret": "whsec_iam_0123456789"}}),
                true,
            )?,
            by.as_deref(),
            ojs_core::time::now(),
        )
        .await?;
    store
        .webhooks()
        .put(
            &ojs_core::webhook::Subscription::from_json(
                &json!({"url": "http://127.0.0.1:9/keys", "events": ["job.*"]}),
                true,
            )?,
            "whsec_iam_keys".into(),
            by.as_deref(),
            &Default::default(),
            ojs_core::time::now(),
        )
        .await?;
    store
        .cron()
        .put(
            &ojs_core::cron_job::CronJob::from_json(json!({
                "name": "iam-keys", "expression": "0 0 1 1 *",
                "job_template": {"type": "iam.keys", "args": []}}))?,
            by.as_deref(),
            ojs_core::time::now(),
        )
        .await?;
    // The registrations above are the setup, not the keys function's calls.
    let _ = recorder.take();
    ojs_http::key_admin::administer_keys(&store, &json!({"action": "list"})).await?;
    ojs_http::key_admin::administer_keys(
        &store,
        &json!({"action": "registrations", "id": created["id"]}),
    )
    .await?;
    let revoked = ojs_http::key_admin::administer_keys(
        &store,
        &json!({"action": "revoke", "id": created["id"], "disable_registrations": true}),
    )
    .await?;
    anyhow::ensure!(
        revoked["disabled"]["push_endpoints"]
            .as_array()
            .map(Vec::len)
            == Some(1)
            && revoked["disabled"]["webhook_subscriptions"]
                .as_array()
                .map(Vec::len)
                == Some(1)
            && revoked["disabled"]["cron_jobs"] == json!(["iam-keys"]),
        "keys: {revoked}"
    );
    used.insert("KeysFunction", recorder.take());

    let policies = template_policies()?;
    let rules = template_partition_rules()?;
    let mut missing = Vec::new();
    for (function, actions) in &used {
        let granted = policies
            .get(*function)
            .with_context(|| format!("{function} not in the template"))?;
        anyhow::ensure!(
            !actions.is_empty(),
            "{function}: the workload recorded nothing"
        );
        let fn_rules = rules.get(*function).map(Vec::as_slice).unwrap_or_default();
        for a in actions {
            if let Some((action, pk)) = a.split_once("@pk:") {
                // As IAM decides: any Deny naming the partition refuses; among the Allows
                // limited to partitions, one naming it is enough.
                let covering: Vec<&PartitionRule> =
                    fn_rules.iter().filter(|r| r.covers(action)).collect();
                for r in covering.iter().filter(|r| r.deny && r.names(pk)) {
                    missing.push(format!(
                        "{function} uses {action} on partition {pk}, which its policy denies ({r:?})"
                    ));
                }
                let allows: Vec<&&PartitionRule> = covering.iter().filter(|r| !r.deny).collect();
                if !allows.is_empty() && !allows.iter().any(|r| r.names(pk)) {
                    missing.push(format!(
                        "{function} uses {action} on partition {pk}, which its policy does not allow ({allows:?})"
                    ));
                }
            } else if !granted.contains(a) {
                missing.push(format!("{function} uses {a}"));
            }
        }
        let unused: Vec<&String> = granted
            .iter()
            .filter(|g| {
                g.starts_with("dynamodb:")
                    && !actions.contains(*g)
                    && !STREAM_READS.contains(&g.as_str())
            })
            .collect();
        if EXACT_POLICIES.contains(function) && !unused.is_empty() {
            missing.push(format!(
                "{function} is granted {unused:?}, which its workload never uses"
            ));
        }
        let partitions: BTreeSet<&str> = actions
            .iter()
            .filter_map(|a| a.split_once("@pk:").map(|(_, pk)| family(pk)))
            .collect();
        anyhow::ensure!(
            !partitions.is_empty(),
            "{function}: no partition key recorded"
        );
        let actions: BTreeSet<&str> = actions
            .iter()
            .filter(|a| !a.contains("@pk:"))
            .map(String::as_str)
            .collect();
        eprintln!("{function}: partition families {partitions:?}");
        eprintln!("{function}: uses {actions:?}; granted but unused here: {unused:?}");
    }
    // Every function the template defines was exercised (a new one needs a workload).
    for function in policies.keys() {
        anyhow::ensure!(
            used.contains_key(function.as_str()),
            "{function} has no workload in this test"
        );
    }
    assert!(
        missing.is_empty(),
        "actions missing from policies: {missing:#?}"
    );
    setup.teardown().await;
    Ok(())
}
