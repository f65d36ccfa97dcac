//! Webhook subscriptions (ojs-webhooks.md §5, §6): what a subscription holds, how a
//! request body becomes one (create, and the partial update of PATCH), which events it
//! takes (§5.2), and the retry schedule of its deliveries (§7.2). No I/O here.

use std::time::Duration;

use rand::Rng;
use serde_json::{json, Map, Value};

use crate::error::{ErrorCode, OjsError};
use crate::push::PushTarget;

/// Most subscriptions a server takes (their listing is one Query of one partition).
pub const MAX_SUBSCRIPTIONS: usize = 100;
/// Most subscriptions made for one tenant (ojs-webhooks.md §9.3): its share of
/// [`MAX_SUBSCRIPTIONS`], so that one tenant of a shared stack cannot take them all.
pub const MAX_SUBSCRIPTIONS_PER_TENANT: usize = 20;
/// Longest subscription URL.
pub const MAX_URL_LEN: usize = 2048;
/// Most event patterns, queues or job types in a subscription.
pub const MAX_LIST_LEN: usize = 50;
/// Longest event pattern, queue or job type name.
pub const MAX_NAME_LEN: usize = 255;
/// Most bytes of a subscription's `metadata` (as JSON).
pub const MAX_METADATA_BYTES: usize = 4096;

/// The event type of the §6.6 test delivery.
pub const TEST_EVENT: &str = "webhook.test";

/// §7.2: the delay before each attempt after the first (attempt 2 waits 30 s, ...,
/// attempt 8 waits 24 h): 8 attempts over about 41 hours.
pub const RETRY_DELAYS: [Duration; 7] = [
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
    Duration::from_secs(3600),
    Duration::from_secs(4 * 3600),
    Duration::from_secs(12 * 3600),
    Duration::from_secs(24 * 3600),
];

/// Event categories a pattern may name (ojs-events.md, and this extension's own).
const CATEGORIES: [&str; 6] = ["job", "workflow", "cron", "queue", "worker", "webhook"];

/// The optional §5.2 attribute filter: an event must also be of one of these queues and
/// job types (an empty list takes every one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WebhookFilter {
    /// Queues taken.
    pub queues: Vec<String>,
    /// Job types taken.
    pub job_types: Vec<String>,
}

/// A subscription as stored, without its id and times.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    /// The endpoint (`https://`; `http://` to a private address only in development).
    pub url: String,
    /// Event type patterns: exact names, `<category>.*`, or `*`.
    pub events: Vec<String>,
    /// Whether deliveries are made.
    pub active: bool,
    /// The attribute filter, if any.
    pub filter: Option<WebhookFilter>,
    /// Free key-value pairs for people.
    pub metadata: Option<Map<String, Value>>,
    /// This subscription's attempt timeout in milliseconds (§7.3's 5 to 60 s), instead
    /// of the deployment's (`OJS_WEBHOOK_TIMEOUT_MS`).
    pub timeout_ms: Option<u64>,
}

/// How long a rotated-out secret keeps signing deliveries when the rotation names no
/// grace period (§8.3's recommended 24 hours).
pub const DEFAULT_ROTATION_GRACE_SECS: i64 = 86_400;
/// The longest grace period a rotation may ask for (a week).
pub const MAX_ROTATION_GRACE_SECS: i64 = 7 * 86_400;

/// The grace period of a secret rotation (§8.3), in seconds: `grace_period_seconds` of
/// its body (0 retires the old secret at once, for one that leaked), or the default.
pub fn rotation_grace(body: Option<&Value>) -> Result<i64, OjsError> {
    let Some(body) = body else {
        return Ok(DEFAULT_ROTATION_GRACE_SECS);
    };
    let o = body
        .as_object()
        .ok_or_else(|| invalid("$", "the body must be a JSON object"))?;
    if let Some(k) = o.keys().find(|k| k.as_str() != "grace_period_seconds") {
        return Err(invalid(
            &format!("$.{k}"),
            format!("unknown field {k:?} (grace_period_seconds)"),
        ));
    }
    match o.get("grace_period_seconds") {
        None | Some(Value::Null) => Ok(DEFAULT_ROTATION_GRACE_SECS),
        Some(v) => v
            .as_i64()
            .filter(|s| (0..=MAX_ROTATION_GRACE_SECS).contains(s))
            .ok_or_else(|| {
                invalid(
                    "$.grace_period_seconds",
                    format!(
                        "grace_period_seconds must be an integer from 0 to {MAX_ROTATION_GRACE_SECS}"
                    ),
                )
            }),
    }
}

/// The range of a subscription's `timeout_ms` (§7.3: 5 to 60 seconds).
pub const TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 5_000..=60_000;

fn parse_timeout(v: &Value) -> Result<Option<u64>, OjsError> {
    if v.is_null() {
        return Ok(None);
    }
    v.as_u64()
        .filter(|ms| TIMEOUT_MS_RANGE.contains(ms))
        .map(Some)
        .ok_or_else(|| {
            invalid(
                "$.timeout_ms",
                format!(
                    "timeout_ms must be an integer of milliseconds from {} to {}",
                    TIMEOUT_MS_RANGE.start(),
                    TIMEOUT_MS_RANGE.end()
                ),
            )
        })
}

fn invalid(path: &str, message: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::InvalidRequest, message).with_path(path)
}

/// Shortest signing secret a subscription may bring (the suite's `whk_test_get_001`).
pub const MIN_CALLER_SECRET_CHARS: usize = 16;
/// Longest signing secret a subscription may bring.
pub const MAX_CALLER_SECRET_CHARS: usize = 256;

/// Takes the `secret` a subscription request brings out of `body`, if any: the
/// conformance suite and several SDKs send one, though §6.1 says the server generates
/// it. 16 to 256 printable ASCII characters; anything else is `400` on `$.secret`.
/// Without one the server generates it ([`new_secret`]).
pub fn take_caller_secret(body: &mut Value) -> Result<Option<String>, OjsError> {
    let Some(raw) = body.as_object_mut().and_then(|o| o.remove("secret")) else {
        return Ok(None);
    };
    match raw {
        Value::Null => Ok(None),
        Value::String(s)
            if (MIN_CALLER_SECRET_CHARS..=MAX_CALLER_SECRET_CHARS).contains(&s.len())
                && s.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Ok(Some(s))
        }
        _ => Err(invalid(
            "$.secret",
            format!(
                "secret must be {MIN_CALLER_SECRET_CHARS} to {MAX_CALLER_SECRET_CHARS} printable ASCII characters (or left out: the server generates one)"
            ),
        )),
    }
}

/// A new signing secret: `whsec_` and 32 random bytes in hex.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    let mut out = String::from("whsec_");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Checks a subscription URL: an `https://` URL with a host and no credentials (plain
/// `http://` only to a loopback or private IP literal when `allow_private`), never a
/// Lambda ARN. The caller resolves a host name and checks its addresses.
pub fn parse_url(raw: &str, allow_private: bool) -> Result<String, OjsError> {
    if raw.is_empty() || raw.len() > MAX_URL_LEN {
        return Err(invalid(
            "$.url",
            format!("url must be 1 to {MAX_URL_LEN} characters"),
        ));
    }
    if raw.starts_with("arn:") {
        return Err(invalid("$.url", "url must be an https:// URL"));
    }
    match PushTarget::parse(raw, allow_private) {
        Ok(_) => Ok(raw.to_owned()),
        Err(e) => Err(invalid("$.url", e.message.replace("endpoint", "url"))),
    }
}

/// Whether `pattern` is one a subscription may hold: `*`, `<category>.*`, or an event
/// name `<category>.<name>` of lowercase letters, digits and `_` / `.`.
fn valid_pattern(pattern: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let Some((category, rest)) = pattern.split_once('.') else {
        return false;
    };
    CATEGORIES.contains(&category)
        && (rest == "*"
            || (!rest.is_empty()
                && !rest.starts_with('.')
                && !rest.ends_with('.')
                && rest
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')))
}

fn string_list(v: &Value, path: &str, required: bool) -> Result<Vec<String>, OjsError> {
    let Some(items) = v.as_array() else {
        return Err(invalid(path, format!("{path} must be an array of strings")));
    };
    if required && items.is_empty() {
        return Err(invalid(path, format!("{path} must not be empty")));
    }
    if items.len() > MAX_LIST_LEN {
        return Err(invalid(
            path,
            format!("{path} holds at most {MAX_LIST_LEN} entries"),
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let s = item
            .as_str()
            .ok_or_else(|| invalid(&at, format!("{at} must be a string")))?;
        if s.is_empty() || s.len() > MAX_NAME_LEN {
            return Err(invalid(
                &at,
                format!("{at} must be 1 to {MAX_NAME_LEN} characters"),
            ));
        }
        if !out.iter().any(|o: &String| o == s) {
            out.push(s.to_owned());
        }
    }
    Ok(out)
}

fn parse_events(v: &Value) -> Result<Vec<String>, OjsError> {
    let events = string_list(v, "$.events", true)?;
    if let Some((i, bad)) = events.iter().enumerate().find(|(_, e)| !valid_pattern(e)) {
        return Err(invalid(
            &format!("$.events[{i}]"),
            format!(
                "unknown event pattern {bad:?}: use an event type (job.completed), a category wildcard (job.*) or *"
            ),
        ));
    }
    Ok(events)
}

fn parse_filter(v: &Value) -> Result<Option<WebhookFilter>, OjsError> {
    if v.is_null() {
        return Ok(None);
    }
    let o = v
        .as_object()
        .ok_or_else(|| invalid("$.filter", "filter must be an object"))?;
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "queues" | "job_types"))
    {
        return Err(invalid(
            &format!("$.filter.{k}"),
            format!("unknown filter field {k:?} (queues, job_types)"),
        ));
    }
    let list = |k: &str| match o.get(k) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => string_list(v, &format!("$.filter.{k}"), false),
    };
    Ok(Some(WebhookFilter {
        queues: list("queues")?,
        job_types: list("job_types")?,
    }))
}

fn parse_metadata(v: &Value) -> Result<Option<Map<String, Value>>, OjsError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(o) if v.to_string().len() <= MAX_METADATA_BYTES => Ok(Some(o.clone())),
        Value::Object(_) => Err(invalid(
            "$.metadata",
            format!("metadata must be at most {MAX_METADATA_BYTES} bytes of JSON"),
        )),
        _ => Err(invalid("$.metadata", "metadata must be an object")),
    }
}

fn parse_active(v: &Value) -> Result<bool, OjsError> {
    v.as_bool()
        .ok_or_else(|| invalid("$.active", "active must be a boolean"))
}

/// Fields a body may carry (`enabled` is taken as an alias of `active`).
const FIELDS: [&str; 7] = [
    "url",
    "events",
    "active",
    "enabled",
    "filter",
    "metadata",
    "timeout_ms",
];

fn object(body: &Value) -> Result<&Map<String, Value>, OjsError> {
    let o = body
        .as_object()
        .ok_or_else(|| invalid("$", "the body must be a JSON object"))?;
    if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        let why = if k == "secret" {
            "the secret is generated by the server; rotate it with POST .../rotate-secret"
                .to_owned()
        } else {
            format!("unknown field {k:?}")
        };
        return Err(invalid(&format!("$.{k}"), why));
    }
    Ok(o)
}

impl Subscription {
    /// A subscription from a create body (§6.1): `url` and `events` required.
    pub fn from_json(body: &Value, allow_private: bool) -> Result<Self, OjsError> {
        let o = object(body)?;
        let url = o
            .get("url")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("$.url", "url is required (a string)"))?;
        let events = o
            .get("events")
            .ok_or_else(|| invalid("$.events", "events is required"))?;
        let active = match o.get("active").or_else(|| o.get("enabled")) {
            None => true,
            Some(v) => parse_active(v)?,
        };
        Ok(Self {
            url: parse_url(url, allow_private)?,
            events: parse_events(events)?,
            active,
            filter: parse_filter(o.get("filter").unwrap_or(&Value::Null))?,
            metadata: parse_metadata(o.get("metadata").unwrap_or(&Value::Null))?,
            timeout_ms: parse_timeout(o.get("timeout_ms").unwrap_or(&Value::Null))?,
        })
    }

    /// This subscription with a PATCH body's fields (§6.4) applied: only the fields
    /// present change; `filter` or `metadata` set to null are removed.
    pub fn patched(&self, body: &Value, allow_private: bool) -> Result<Self, OjsError> {
        let o = object(body)?;
        let mut next = self.clone();
        if let Some(v) = o.get("url") {
            let url = v
                .as_str()
                .ok_or_else(|| invalid("$.url", "url must be a string"))?;
            next.url = parse_url(url, allow_private)?;
        }
        if let Some(v) = o.get("events") {
            next.events = parse_events(v)?;
        }
        if let Some(v) = o.get("active").or_else(|| o.get("enabled")) {
            next.active = parse_active(v)?;
        }
        if let Some(v) = o.get("filter") {
            next.filter = parse_filter(v)?;
        }
        if let Some(v) = o.get("metadata") {
            next.metadata = parse_metadata(v)?;
        }
        if let Some(v) = o.get("timeout_ms") {
            next.timeout_ms = parse_timeout(v)?;
        }
        Ok(next)
    }

    /// Whether an event of `event_type` about a job of `queue` and `job_type` is to be
    /// delivered (§5.2): an active subscription, a matching pattern, and the filter.
    pub fn takes(&self, event_type: &str, queue: Option<&str>, job_type: Option<&str>) -> bool {
        self.active
            && self.events.iter().any(|p| pattern_matches(p, event_type))
            && self.filter.as_ref().is_none_or(|f| {
                let within = |list: &[String], v: Option<&str>| {
                    list.is_empty() || v.is_some_and(|v| list.iter().any(|l| l == v))
                };
                within(&f.queues, queue) && within(&f.job_types, job_type)
            })
    }

    /// The stored document (everything but the secret, which is stored apart).
    pub fn to_doc(&self) -> Value {
        let mut o = Map::new();
        o.insert("url".into(), json!(self.url));
        o.insert("events".into(), json!(self.events));
        o.insert("active".into(), json!(self.active));
        if let Some(f) = &self.filter {
            o.insert(
                "filter".into(),
                json!({"queues": f.queues, "job_types": f.job_types}),
            );
        }
        if let Some(m) = &self.metadata {
            o.insert("metadata".into(), Value::Object(m.clone()));
        }
        if let Some(ms) = self.timeout_ms {
            o.insert("timeout_ms".into(), json!(ms));
        }
        Value::Object(o)
    }

    /// Reads back [`Subscription::to_doc`] (a URL allowed then is not judged again:
    /// every delivery checks the address it connects to).
    pub fn from_doc(doc: &Value) -> Result<Self, OjsError> {
        let mut doc = doc.clone();
        if let Some(f) = doc.get_mut("filter").and_then(Value::as_object_mut) {
            f.retain(|_, v| v.as_array().is_some_and(|a| !a.is_empty()));
        }
        let o = object(&doc)?;
        Ok(Self {
            url: o
                .get("url")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            events: parse_events(o.get("events").unwrap_or(&Value::Null))?,
            active: o.get("active").and_then(Value::as_bool).unwrap_or(true),
            filter: parse_filter(o.get("filter").unwrap_or(&Value::Null))?,
            metadata: parse_metadata(o.get("metadata").unwrap_or(&Value::Null))?,
            timeout_ms: parse_timeout(o.get("timeout_ms").unwrap_or(&Value::Null))?,
        })
    }

    /// The timeout of one attempt: this subscription's own, or `default`.
    pub fn attempt_timeout(&self, default: std::time::Duration) -> std::time::Duration {
        self.timeout_ms
            .map_or(default, std::time::Duration::from_millis)
    }
}

/// §5.2: `*` takes everything, `job.*` every `job.` event, any other pattern only itself.
pub fn pattern_matches(pattern: &str, event_type: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some("") => true,
        Some(prefix) if prefix.ends_with('.') => event_type.starts_with(prefix),
        _ => pattern == event_type,
    }
}

/// What an attempt's answer comes to (§7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: delivered.
    Delivered,
    /// 5xx, 429, a timeout or a connection error: tried again after the schedule's delay
    /// (or the 429's `Retry-After`), unless no attempt is left.
    Retry,
    /// Any other 4xx (and redirects beyond what is followed): not retried.
    Dead,
}

impl Outcome {
    /// The outcome of an HTTP status (`None`: no answer, a timeout or connection error).
    pub fn of(status: Option<u16>) -> Self {
        match status {
            Some(200..=299) => Self::Delivered,
            None | Some(429) | Some(500..=599) => Self::Retry,
            Some(_) => Self::Dead,
        }
    }
}

/// The delay before attempt `next` (2 or more) under `delays` (one per retry), or `None`
/// when no attempt is left.
pub fn delay_before(delays: &[Duration], next: u32) -> Option<Duration> {
    let i = usize::try_from(next.checked_sub(2)?).ok()?;
    delays.get(i).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exactly_by_category_or_all() {
        assert!(pattern_matches("*", "job.completed"));
        assert!(pattern_matches("job.*", "job.failed"));
        assert!(!pattern_matches("job.*", "workflow.completed"));
        assert!(pattern_matches("job.completed", "job.completed"));
        assert!(!pattern_matches("job.completed", "job.completed.x"));
        assert!(!pattern_matches("job.complete", "job.completed"));
    }

    #[test]
    fn bodies_are_validated_field_by_field() {
        let ok = json!({"url": "https://example.com/h", "events": ["job.*", "job.completed"]});
        let s = Subscription::from_json(&ok, false).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(s.active);
        assert!(s.takes("job.started", Some("q"), Some("t")));
        assert!(!s.takes("workflow.completed", None, None));
        let path = |body: Value| {
            Subscription::from_json(&body, false)
                .err()
                .map(|e| Value::Object(e.details).to_string())
                .unwrap_or_default()
        };
        assert!(path(json!({"events": ["*"]})).contains("$.url"));
        assert!(path(json!({"url": "http://example.com", "events": ["*"]})).contains("$.url"));
        assert!(path(json!({"url": "https://10.0.0.1/", "events": ["*"]})).contains("$.url"));
        assert!(path(json!({"url": "https://a.com", "events": []})).contains("$.events"));
        assert!(path(json!({"url": "https://a.com", "events": ["nope"]})).contains("$.events[0]"));
        assert!(
            path(json!({"url": "https://a.com", "events": ["*"], "secret": "x"}))
                .contains("$.secret"),
            "a PATCH or a body the create route did not take the secret out of"
        );
        let mut with = json!({"url": "https://a.com", "secret": "whk_test_get_001"});
        assert_eq!(
            take_caller_secret(&mut with).ok().flatten().as_deref(),
            Some("whk_test_get_001")
        );
        assert_eq!(
            with,
            json!({"url": "https://a.com"}),
            "taken out of the body"
        );
        for bad in [
            json!("short"),
            json!(7),
            json!("has a space in it ok"),
            json!("x".repeat(257)),
        ] {
            let mut body = json!({"secret": bad});
            let err = take_caller_secret(&mut body).err();
            assert!(
                err.is_some_and(|e| e.to_string().contains("secret")),
                "{bad}"
            );
        }
        assert_eq!(
            take_caller_secret(&mut json!({"secret": null})).ok(),
            Some(None)
        );
        assert_eq!(take_caller_secret(&mut json!({})).ok(), Some(None));
        assert!(
            path(json!({"url": "https://a.com", "events": ["*"], "filter": {"x": []}}))
                .contains("$.filter.x")
        );
        let big = "x".repeat(MAX_METADATA_BYTES);
        assert!(
            path(json!({"url": "https://a.com", "events": ["*"], "metadata": {"a": big}}))
                .contains("$.metadata")
        );
    }

    #[test]
    fn filters_and_patches_apply() {
        let body = json!({"url": "https://a.com", "events": ["job.completed"],
            "filter": {"queues": ["payments"]}});
        let s = Subscription::from_json(&body, false).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(s.takes("job.completed", Some("payments"), Some("t")));
        assert!(!s.takes("job.completed", Some("other"), Some("t")));
        let off = s
            .patched(&json!({"active": false}), false)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(!off.takes("job.completed", Some("payments"), Some("t")));
        assert_eq!(off.url, s.url);
        let back = Subscription::from_doc(&s.to_doc()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(back, s);
    }

    #[test]
    fn a_subscription_may_set_its_own_timeout_within_five_to_sixty_seconds() {
        let body = |t: Value| json!({"url": "https://a.com", "events": ["*"], "timeout_ms": t});
        let default = std::time::Duration::from_secs(30);
        let s =
            Subscription::from_json(&body(json!(5000)), false).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            s.attempt_timeout(default),
            std::time::Duration::from_secs(5)
        );
        assert_eq!(s.to_doc()["timeout_ms"], 5000);
        let back = Subscription::from_doc(&s.to_doc()).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(back, s);
        assert!(Subscription::from_json(&body(json!(60_000)), false).is_ok());
        for bad in [
            json!(4999),
            json!(60_001),
            json!("5000"),
            json!(-1),
            json!(5000.5),
        ] {
            let e = Subscription::from_json(&body(bad.clone()), false);
            let e = e.err().unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(
                e.details["validation_errors"][0]["path"], "$.timeout_ms",
                "{bad}"
            );
        }
        let plain =
            Subscription::from_json(&json!({"url": "https://a.com", "events": ["*"]}), false)
                .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(plain.attempt_timeout(default), default);
        assert!(plain.to_doc().get("timeout_ms").is_none());
        let set = plain
            .patched(&json!({"timeout_ms": 10_000}), false)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(set.timeout_ms, Some(10_000));
        let cleared = set
            .patched(&json!({"timeout_ms": null}), false)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(cleared.timeout_ms, None);
        assert!(set.patched(&json!({"timeout_ms": 1}), false).is_err());
    }

    #[test]
    fn a_rotation_names_its_grace_period_or_gets_a_day() {
        assert_eq!(rotation_grace(None), Ok(DEFAULT_ROTATION_GRACE_SECS));
        assert_eq!(
            rotation_grace(Some(&json!({}))),
            Ok(DEFAULT_ROTATION_GRACE_SECS)
        );
        let grace = |v: Value| rotation_grace(Some(&json!({"grace_period_seconds": v})));
        assert_eq!(grace(Value::Null), Ok(DEFAULT_ROTATION_GRACE_SECS));
        assert_eq!(grace(json!(0)), Ok(0));
        assert_eq!(grace(json!(3600)), Ok(3600));
        assert_eq!(
            grace(json!(MAX_ROTATION_GRACE_SECS)),
            Ok(MAX_ROTATION_GRACE_SECS)
        );
        for bad in [
            json!(-1),
            json!(MAX_ROTATION_GRACE_SECS + 1),
            json!("60"),
            json!(1.5),
        ] {
            let e = grace(bad.clone())
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(
                e.details["validation_errors"][0]["path"],
                "$.grace_period_seconds"
            );
        }
        assert!(rotation_grace(Some(&json!([]))).is_err());
        assert!(rotation_grace(Some(&json!({"grace": 5}))).is_err());
    }

    #[test]
    fn outcomes_and_schedule_follow_the_spec() {
        assert_eq!(Outcome::of(Some(204)), Outcome::Delivered);
        assert_eq!(Outcome::of(Some(500)), Outcome::Retry);
        assert_eq!(Outcome::of(Some(429)), Outcome::Retry);
        assert_eq!(Outcome::of(None), Outcome::Retry);
        assert_eq!(Outcome::of(Some(404)), Outcome::Dead);
        assert_eq!(
            delay_before(&RETRY_DELAYS, 2),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            delay_before(&RETRY_DELAYS, 8),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(delay_before(&RETRY_DELAYS, 9), None);
        assert!(new_secret().starts_with("whsec_"));
        assert_ne!(new_secret(), new_secret());
    }
}
