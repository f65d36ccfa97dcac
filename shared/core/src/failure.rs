//! The error a worker reports with FAIL, normalised into the job's `error` object.

use serde_json::{Map, Value};

use crate::error::OjsError;
use crate::time::{self, Timestamp};

/// A failure report from a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// Error type/class used for `non_retryable_errors` matching.
    pub error_type: String,
    /// Human-readable message.
    pub message: String,
    /// Whether the worker considers the failure transient (default true).
    pub retryable: bool,
    /// The object as the worker sent it (code, details, backtrace...), kept verbatim.
    pub reported: Map<String, Value>,
    /// The least delay before a next attempt the failing side asked for (a push
    /// endpoint's `Retry-After`), honoured up to [`Failure::MAX_RETRY_AFTER`].
    pub retry_after: Option<std::time::Duration>,
}

impl Failure {
    /// Longest message kept.
    const MAX_MESSAGE: usize = 4096;
    /// Longest `Retry-After` honoured: an endpoint cannot park a job for longer.
    pub const MAX_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

    /// The delay before the next attempt: the retry policy's `policy_delay`, or longer
    /// when the failing side asked for more (at most [`Failure::MAX_RETRY_AFTER`]).
    pub fn retry_delay(&self, policy_delay: std::time::Duration) -> std::time::Duration {
        match self.retry_after {
            Some(asked) => policy_delay.max(asked.min(Self::MAX_RETRY_AFTER)),
            None => policy_delay,
        }
    }
    /// Most backtrace frames kept.
    const MAX_FRAMES: usize = 50;

    /// Parses FAIL's `error` field. Accepts the core shape (`type`, `message`, `backtrace`)
    /// and the HTTP binding's (`code`, `message`, `retryable`, `details`); a missing
    /// error object is recorded as an unspecified failure.
    pub fn from_json(value: Option<&Value>) -> Result<Self, OjsError> {
        let obj = match value {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(Value::String(s)) => {
                let mut o = Map::new();
                o.insert("message".into(), Value::String(s.clone()));
                o
            }
            Some(_) => {
                return Err(
                    OjsError::invalid_request("error must be an object").with_path("$.error")
                )
            }
        };
        let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_owned);
        let error_type = text("type")
            .or_else(|| text("code"))
            .unwrap_or_else(|| "error".to_owned());
        let mut message = text("message").unwrap_or_else(|| "job failed".to_owned());
        if message.len() > Self::MAX_MESSAGE {
            let mut cut = Self::MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let retryable = match obj.get("retryable") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(
                    OjsError::invalid_request("error.retryable must be a boolean")
                        .with_path("$.error.retryable"),
                )
            }
        };
        let mut reported = obj;
        if let Some(Value::Array(frames)) = reported.get_mut("backtrace") {
            frames.truncate(Self::MAX_FRAMES);
        }
        Ok(Self {
            error_type,
            message,
            retryable,
            reported,
            retry_after: None,
        })
    }

    /// The job `error` object: what the worker sent, plus `type`, `message`, the attempt
    /// and when it happened.
    pub fn to_job_error(&self, attempt: u32, at: &Timestamp) -> Value {
        let mut obj = self.reported.clone();
        obj.insert("type".into(), Value::String(self.error_type.clone()));
        // SDKs differ on the key they read (Go: `code`, Rust: `type`); carry both.
        obj.entry("code")
            .or_insert_with(|| Value::String(self.error_type.clone()));
        obj.entry("details")
            .or_insert_with(|| Value::Object(Map::new()));
        obj.insert("message".into(), Value::String(self.message.clone()));
        obj.insert("retryable".into(), Value::Bool(self.retryable));
        obj.insert("attempt".into(), Value::from(attempt));
        obj.insert("occurred_at".into(), Value::String(time::format(at)));
        Value::Object(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn a_retry_after_lengthens_the_policy_delay_never_shortens_it() {
        let mut f = Failure::from_json(None).unwrap_or_else(|e| panic!("{e}"));
        let secs = Duration::from_secs;
        assert_eq!(f.retry_delay(secs(5)), secs(5));
        f.retry_after = Some(secs(30));
        assert_eq!(f.retry_delay(secs(5)), secs(30));
        assert_eq!(f.retry_delay(secs(60)), secs(60));
        f.retry_after = Some(secs(86_400));
        assert_eq!(f.retry_delay(secs(5)), Failure::MAX_RETRY_AFTER);
        assert_eq!(f.retry_delay(secs(7_200)), secs(7_200));
    }

    #[test]
    fn binding_shape_gets_a_type_from_code() {
        let f = Failure::from_json(Some(&json!({"code": "handler_error", "message": "boom", "retryable": false, "details": {"a": 1}}))).ok();
        let f = f.unwrap_or_else(|| panic!("parse"));
        assert_eq!(f.error_type, "handler_error");
        assert!(!f.retryable);
        let e = f.to_job_error(2, &crate::time::now());
        assert_eq!(e["type"], "handler_error");
        assert_eq!(e["code"], "handler_error");
        assert_eq!(e["details"]["a"], 1);
        assert_eq!(e["attempt"], 2);
    }

    #[test]
    fn missing_error_is_a_generic_retryable_failure() {
        let f = Failure::from_json(None).unwrap_or_else(|e| panic!("{e}"));
        assert!(f.retryable);
        assert_eq!(f.error_type, "error");
        assert!(Failure::from_json(Some(&json!(42))).is_err());
        assert!(Failure::from_json(Some(&json!({"retryable": "yes"}))).is_err());
    }
}
