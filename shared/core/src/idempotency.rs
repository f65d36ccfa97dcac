//! Idempotency keys of PUSH and batch PUSH (ojs-bulk-operations.md §10, the
//! `Idempotency-Key` header): a retried enqueue carrying the key of an earlier one gets
//! that one's answer instead of new jobs.
//!
//! What a key is, how long it is remembered, and how a request is recognised as the same
//! request again (its body's fingerprint) live here; the store keeps one small item per
//! key.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{ErrorCode, OjsError};

/// Longest key (§10.2: "at most 256 characters").
pub const MAX_KEY_CHARS: usize = 256;

/// How long a key and its answer are kept (§10.2: at least 24 hours).
pub const WINDOW_SECS: i64 = 24 * 60 * 60;

/// A valid idempotency key: 1 to 256 characters, none of them a control character,
/// and whose it is: keys are per API key (as an account's are in Stripe's API), so two
/// producers sharing a stack never answer each other's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    key: String,
    owner: Option<String>,
}

impl IdempotencyKey {
    /// The key in `raw`, or `invalid_request` naming `path` (the header or the body
    /// field it came from).
    pub fn parse(raw: &str, path: &str) -> Result<Self, OjsError> {
        let chars = raw.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS || raw.chars().any(char::is_control) {
            return Err(OjsError::invalid_request(format!(
                "an idempotency key is 1 to {MAX_KEY_CHARS} characters, none of them a \
                 control character"
            ))
            .with_path(path));
        }
        Ok(Self {
            key: raw.to_owned(),
            owner: None,
        })
    }

    /// The same key, as `owner`'s (the id of the API key the request came with).
    pub fn owned_by(mut self, owner: Option<&str>) -> Self {
        self.owner = owner.map(str::to_owned);
        self
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.key
    }

    /// Where the key is kept: its owner's (none without API keys) and the key, apart
    /// (an API key id never holds a `/`).
    pub fn partition(&self) -> String {
        format!("IDEM#{}/{}", self.owner.as_deref().unwrap_or(""), self.key)
    }
}

/// The fingerprint of a request body: SHA-256 of its JSON with every object's keys in
/// order, hex. Two bodies with the same fields and values have the same fingerprint,
/// whatever order their keys were sent in.
pub fn fingerprint(body: &Value) -> String {
    hex(&Sha256::digest(canonical(body).as_bytes()))
}

/// `v` as compact JSON with every object's keys in order.
fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(k) {
                    write_canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The refusal of a key sent again with another body (422, as the IETF draft
/// "The Idempotency-Key HTTP Header Field" §2.7 answers a reused key).
pub fn reused_with_another_body(key: &IdempotencyKey) -> OjsError {
    OjsError::new(
        ErrorCode::ValidationError,
        "this idempotency key was used with another request body in the last 24 hours; \
         use a new key for a new request",
    )
    .with_detail("idempotency_key", key.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_1_to_256_characters_without_control_characters() {
        assert!(IdempotencyKey::parse("import-batch-42", "h").is_ok());
        assert!(IdempotencyKey::parse(&"é".repeat(256), "h").is_ok());
        for bad in [
            String::new(),
            "k".repeat(257),
            "a\nb".into(),
            "a\u{0}".into(),
        ] {
            let Err(e) = IdempotencyKey::parse(&bad, "$.idempotency_key") else {
                panic!("{bad:?} was accepted");
            };
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{bad:?}");
            assert_eq!(
                e.details["validation_errors"][0]["path"], "$.idempotency_key",
                "{bad:?}"
            );
        }
        assert_eq!(
            IdempotencyKey::parse("k-1", "h").map(|k| k.key),
            Ok("k-1".into())
        );
        assert_eq!(
            IdempotencyKey::parse("k-1", "h").map(|k| k.as_str().to_owned()),
            Ok("k-1".into())
        );
    }

    #[test]
    fn a_fingerprint_ignores_key_order_and_nothing_else() {
        let a = json!({"type": "t", "args": [1, {"x": 1, "y": [true, null]}], "options": {"queue": "q", "priority": 2}});
        let b = json!({"options": {"priority": 2, "queue": "q"}, "args": [1, {"y": [true, null], "x": 1}], "type": "t"});
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_eq!(fingerprint(&a).len(), 64);
        for other in [
            json!({"type": "t", "args": [1, {"x": 2, "y": [true, null]}], "options": {"queue": "q", "priority": 2}}),
            json!({"type": "t", "args": [{"x": 1, "y": [true, null]}, 1], "options": {"queue": "q", "priority": 2}}),
            json!({"type": "t", "args": [1, {"x": 1, "y": [true, null]}], "options": {"queue": "q"}}),
            json!({"type": "t", "args": [1, {"x": 1, "y": [true, null]}], "options": {"queue": "q", "priority": "2"}}),
        ] {
            assert_ne!(fingerprint(&a), fingerprint(&other), "{other}");
        }
        assert_eq!(
            canonical(&json!({"b": {"d": null, "c": "x\"y"}, "a": [1, 2.5, [], {}]})),
            r#"{"a":[1,2.5,[],{}],"b":{"c":"x\"y","d":null}}"#
        );
        // Known value: the empty object's SHA-256.
        assert_eq!(
            fingerprint(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn keys_are_kept_apart_per_owner() {
        let k = IdempotencyKey::parse("a/b#c", "h").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(k.partition(), "IDEM#/a/b#c");
        let mine = k.clone().owned_by(Some("0123456789ab"));
        assert_eq!(mine.partition(), "IDEM#0123456789ab/a/b#c");
        assert_eq!(mine.as_str(), "a/b#c");
        assert_ne!(mine, k);
        assert_eq!(mine.owned_by(None), k);
    }

    #[test]
    fn a_key_is_kept_the_24_hours_the_spec_asks() {
        assert_eq!(WINDOW_SECS, 86_400);
    }

    #[test]
    fn a_reused_key_is_refused_naming_it() {
        let k = IdempotencyKey::parse("k-9", "h").unwrap_or_else(|e| panic!("{e}"));
        let e = reused_with_another_body(&k);
        assert_eq!(e.code.http_status(), 422);
        assert_eq!(e.details["idempotency_key"], "k-9");
    }
}
