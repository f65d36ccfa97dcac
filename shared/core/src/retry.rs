//! Retry policies (ojs-retry.md): parsing with defaults, validation, backoff and the
//! retry-or-give-up decision.

use std::time::Duration;

use rand::Rng;
use serde_json::{json, Map, Value};

use crate::duration;
use crate::error::{ErrorCode, OjsError};
use crate::fields::Fields;

/// How the delay grows between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backoff {
    /// `initial_interval` every time.
    Constant,
    /// `initial_interval * n`.
    Linear,
    /// `initial_interval * coefficient^(n-1)` (the default).
    Exponential,
    /// `initial_interval * n^coefficient`.
    Polynomial,
}

impl Backoff {
    fn as_str(self) -> &'static str {
        match self {
            Self::Constant => "none",
            Self::Linear => "linear",
            Self::Exponential => "exponential",
            Self::Polynomial => "polynomial",
        }
    }

    fn parse(raw: &str) -> Option<Self> {
        match raw {
            "none" | "constant" | "fixed" => Some(Self::Constant),
            "linear" => Some(Self::Linear),
            "exponential" => Some(Self::Exponential),
            "polynomial" => Some(Self::Polynomial),
            _ => None,
        }
    }
}

/// What happens when attempts are exhausted or the error is non-retryable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnExhaustion {
    /// Discard the job (the default).
    Discard,
    /// Discard the job and list it in the dead letter queue.
    DeadLetter,
}

/// A job's effective retry policy: the client's fields merged over the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts including the first; 0 and 1 both mean "never retry".
    pub max_attempts: u32,
    /// Delay before the first retry.
    pub initial_interval: Duration,
    /// Growth factor (>= 1.0).
    pub backoff_coefficient: f64,
    /// Cap on any single delay, applied before and after jitter.
    pub max_interval: Duration,
    /// Multiply the delay by a uniform factor in [0.5, 1.5).
    pub jitter: bool,
    /// Error types that skip retries (exact, or prefix with a `.*` suffix).
    pub non_retryable_errors: Vec<String>,
    /// Terminal action.
    pub on_exhaustion: OnExhaustion,
    /// Delay growth strategy.
    pub backoff: Backoff,
    /// Members the server does not know (a newer extension's, a vendor's), kept and given
    /// back as sent: the JSON format asks implementations to preserve unknown fields.
    pub extensions: Map<String, Value>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_interval: Duration::from_secs(1),
            backoff_coefficient: 2.0,
            max_interval: Duration::from_secs(300),
            jitter: true,
            non_retryable_errors: Vec::new(),
            on_exhaustion: OnExhaustion::Discard,
            backoff: Backoff::Exponential,
            extensions: Map::new(),
        }
    }
}

/// The outcome of a failed attempt under a policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FailDecision {
    /// Try again after this delay.
    Retry(Duration),
    /// Give up.
    GiveUp(OnExhaustion),
}

/// camelCase spellings of the policy's fields, as some SDKs send them.
const CAMEL_CASE_FIELDS: [(&str, &str); 7] = [
    ("maxAttempts", "max_attempts"),
    ("initialInterval", "initial_interval"),
    ("backoffCoefficient", "backoff_coefficient"),
    ("maxInterval", "max_interval"),
    ("nonRetryableErrors", "non_retryable_errors"),
    ("onExhaustion", "on_exhaustion"),
    ("backoffType", "backoff_type"),
];

/// The members [`RetryPolicy::from_json`] reads (after the camelCase spellings are
/// mapped); any other member is kept in [`RetryPolicy::extensions`].
const KNOWN_FIELDS: [&str; 12] = [
    "max_attempts",
    "initial_interval",
    "initial_interval_ms",
    "max_interval",
    "max_interval_ms",
    "backoff_coefficient",
    "jitter",
    "non_retryable_errors",
    "on_exhaustion",
    "backoff_strategy",
    "backoff_type",
    "backoff",
];

impl RetryPolicy {
    /// Parses a retry object, merging present fields over the defaults (ojs-retry section 8).
    /// Accepts ISO 8601 durations and the `*_ms` integer aliases some SDKs send.
    pub fn from_json(value: &Value, path: &str) -> Result<Self, OjsError> {
        let obj = value.as_object().ok_or_else(|| {
            OjsError::invalid_request(format!("{path} must be an object")).with_path(path)
        })?;
        let obj = &snake_cased(obj);
        // A policy with values out of range is well-formed JSON the server cannot act on.
        let f = Fields::new(obj, path)
            .labelled(&format!("{path}."))
            .with_code(ErrorCode::ValidationError);
        let bad = |field: &str, what: &str| f.refuse(field, what);
        let mut policy = Self::default();
        if let Some(v) = f.member("max_attempts") {
            policy.max_attempts = v.expect(
                |v| v.as_u64().and_then(|n| u32::try_from(n).ok()),
                "must be a non-negative integer",
            )?;
        }
        if let Some(d) =
            interval(obj, "initial_interval").map_err(|w| bad("initial_interval", w))?
        {
            policy.initial_interval = d;
        }
        if let Some(d) = interval(obj, "max_interval").map_err(|w| bad("max_interval", w))? {
            policy.max_interval = d;
        }
        if let Some(v) = f.member("backoff_coefficient") {
            policy.backoff_coefficient = v.expect(
                |v| {
                    v.as_f64()
                        .filter(|c| c.is_finite() && *c >= 1.0 && *c <= 100.0)
                },
                "must be a number from 1.0 to 100",
            )?;
        }
        if let Some(v) = f.member("jitter") {
            policy.jitter = v.bool()?;
        }
        if let Some(v) = f.member("non_retryable_errors") {
            policy.non_retryable_errors = v.strings()?;
        }
        if let Some(v) = f.member("on_exhaustion") {
            policy.on_exhaustion = v.expect(
                |v| match v.as_str()? {
                    "discard" => Some(OnExhaustion::Discard),
                    "dead_letter" => Some(OnExhaustion::DeadLetter),
                    _ => None,
                },
                "must be \"discard\" or \"dead_letter\"",
            )?;
        }
        for key in ["backoff_strategy", "backoff_type", "backoff"] {
            if let Some(v) = f.member(key) {
                policy.backoff = v.expect(
                    |v| v.as_str().and_then(Backoff::parse),
                    "must be none, linear, exponential or polynomial",
                )?;
            }
        }
        policy.extensions = obj
            .iter()
            .filter(|(k, _)| !KNOWN_FIELDS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if policy.max_interval < policy.initial_interval {
            return Err(bad(
                "max_interval",
                "must not be shorter than initial_interval",
            ));
        }
        Ok(policy)
    }

    /// The canonical JSON form (durations as ISO 8601), with the unknown members kept.
    pub fn to_json(&self) -> Value {
        let known = json!({
            "max_attempts": self.max_attempts,
            "initial_interval": duration::format(self.initial_interval),
            "backoff_coefficient": self.backoff_coefficient,
            "max_interval": duration::format(self.max_interval),
            "jitter": self.jitter,
            "non_retryable_errors": self.non_retryable_errors,
            "on_exhaustion": match self.on_exhaustion {
                OnExhaustion::Discard => "discard",
                OnExhaustion::DeadLetter => "dead_letter",
            },
            "backoff_strategy": self.backoff.as_str(),
        });
        if self.extensions.is_empty() {
            return known;
        }
        let mut out = self.extensions.clone();
        if let Value::Object(known) = known {
            out.extend(known);
        }
        Value::Object(out)
    }

    /// The delay before retry number `retry` (1 = the first retry), capped, without jitter.
    pub fn base_delay(&self, retry: u32) -> Duration {
        let n = f64::from(retry.max(1));
        let initial = self.initial_interval.as_secs_f64();
        let raw = match self.backoff {
            Backoff::Constant => initial,
            Backoff::Linear => initial * n,
            Backoff::Exponential => initial * self.backoff_coefficient.powf(n - 1.0),
            Backoff::Polynomial => initial * n.powf(self.backoff_coefficient),
        };
        let capped = raw.min(self.max_interval.as_secs_f64());
        Duration::try_from_secs_f64(capped).unwrap_or(self.max_interval)
    }

    /// The delay before retry number `retry`, with jitter applied as the spec requires:
    /// cap, multiply by a factor in [0.5, 1.5), cap again.
    pub fn delay(&self, retry: u32, rng: &mut impl Rng) -> Duration {
        let base = self.base_delay(retry);
        if !self.jitter {
            return base;
        }
        let factor: f64 = rng.random_range(0.5..1.5);
        base.mul_f64(factor).min(self.max_interval)
    }

    /// Whether `error_type` is listed as non-retryable (exact, or `prefix.*`).
    pub fn is_non_retryable(&self, error_type: &str) -> bool {
        self.non_retryable_errors
            .iter()
            .any(|entry| match entry.strip_suffix(".*") {
                Some(prefix) => error_type
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('.')),
                None => entry == error_type,
            })
    }

    /// Decides what follows a failure of attempt `attempt` (1-based).
    pub fn decide(
        &self,
        attempt: u32,
        error_type: &str,
        retryable: bool,
        rng: &mut impl Rng,
    ) -> FailDecision {
        if !retryable || self.is_non_retryable(error_type) || attempt >= self.max_attempts {
            FailDecision::GiveUp(self.on_exhaustion)
        } else {
            FailDecision::Retry(self.delay(attempt, rng))
        }
    }
}

/// The policy's members with their camelCase spellings as snake_case ones: the
/// JavaScript SDK passes a workflow step's retry policy on in camelCase. A member sent
/// both ways keeps its snake_case value.
fn snake_cased(obj: &Map<String, Value>) -> Map<String, Value> {
    let mut obj = obj.clone();
    for (camel, snake) in CAMEL_CASE_FIELDS {
        if let Some(v) = obj.remove(camel) {
            obj.entry(snake.to_owned()).or_insert(v);
        }
    }
    obj
}

fn interval(obj: &Map<String, Value>, field: &str) -> Result<Option<Duration>, &'static str> {
    const TOO_LONG: &str = "must be at most 30 days (P30D)";
    let within = |d: Duration| {
        if d <= crate::validate::MAX_RETRY_INTERVAL {
            Ok(Some(d))
        } else {
            Err(TOO_LONG)
        }
    };
    if let Some(v) = obj.get(field) {
        let raw = v.as_str().ok_or("must be an ISO 8601 duration string")?;
        return duration::parse(raw)
            .ok_or("must be an ISO 8601 duration such as PT1S")
            .and_then(within);
    }
    if let Some(v) = obj.get(&format!("{field}_ms")) {
        return v
            .as_u64()
            .map(Duration::from_millis)
            .ok_or("must be a non-negative integer of milliseconds")
            .and_then(within);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn policy(v: Value) -> RetryPolicy {
        RetryPolicy::from_json(&v, "$.retry").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn unknown_members_are_kept_and_given_back() {
        let p = policy(
            json!({"max_attempts": 4, "x-acme-budget": {"usd": 3}, "initial_interval_ms": 500}),
        );
        assert_eq!(p.max_attempts, 4);
        assert_eq!(p.initial_interval, Duration::from_millis(500));
        let out = p.to_json();
        assert_eq!(out["x-acme-budget"], json!({"usd": 3}));
        // Known members are not kept twice, and the canonical ones win.
        assert!(out.get("initial_interval_ms").is_none(), "{out}");
        assert_eq!(out["max_attempts"], 4);
        assert_eq!(policy(out.clone()), p, "the stored form reads back equal");
        assert!(policy(json!({"maxAttempts": 2})).extensions.is_empty());
        assert!(policy(json!({}))
            .to_json()
            .as_object()
            .is_some_and(|o| o.len() == 8));
    }

    #[test]
    fn partial_policy_merges_over_defaults() {
        let p = policy(json!({"max_attempts": 5}));
        assert_eq!(p.max_attempts, 5);
        assert_eq!(p.initial_interval, Duration::from_secs(1));
        assert!(p.jitter);
        assert_eq!(p.on_exhaustion, OnExhaustion::Discard);
    }

    #[test]
    fn rejects_invalid_policies() {
        for bad in [
            json!("three"),
            json!({"max_attempts": -1}),
            json!({"max_attempts": 1.5}),
            json!({"backoff_coefficient": 0.5}),
            json!({"initial_interval": "1s"}),
            json!({"initial_interval": 1000}),
            json!({"on_exhaustion": "explode"}),
            json!({"non_retryable_errors": [1]}),
            json!({"initial_interval": "PT10M", "max_interval": "PT1M"}),
        ] {
            assert!(RetryPolicy::from_json(&bad, "$.retry").is_err(), "{bad}");
        }
    }

    #[test]
    fn schedules_match_the_spec_tables() {
        let exp = policy(json!({"jitter": false}));
        let secs: Vec<u64> = (1..=10).map(|n| exp.base_delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        let lin = policy(json!({"initial_interval": "PT5S", "backoff_strategy": "linear"}));
        assert_eq!(lin.base_delay(3).as_secs(), 15);
        let con = policy(json!({"initial_interval": "PT5S", "backoff_strategy": "none"}));
        assert_eq!(con.base_delay(4).as_secs(), 5);
        let poly = policy(json!({"backoff_coefficient": 4.0, "backoff_strategy": "polynomial"}));
        assert_eq!(
            (1..=5)
                .map(|n| poly.base_delay(n).as_secs())
                .collect::<Vec<_>>(),
            [1, 16, 81, 256, 300]
        );
    }

    #[test]
    fn prefix_matching() {
        let p = policy(json!({"non_retryable_errors": ["validation.payload_invalid", "auth.*"]}));
        assert!(p.is_non_retryable("validation.payload_invalid"));
        assert!(!p.is_non_retryable("validation.schema_error"));
        assert!(p.is_non_retryable("auth.token_expired"));
        assert!(!p.is_non_retryable("auth"));
        assert!(!p.is_non_retryable("external.auth.failure"));
    }

    #[test]
    fn decisions() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let p = policy(json!({"max_attempts": 3, "jitter": false}));
        assert_eq!(
            p.decide(1, "x", true, &mut rng),
            FailDecision::Retry(Duration::from_secs(1))
        );
        assert_eq!(
            p.decide(3, "x", true, &mut rng),
            FailDecision::GiveUp(OnExhaustion::Discard)
        );
        assert_eq!(
            p.decide(1, "x", false, &mut rng),
            FailDecision::GiveUp(OnExhaustion::Discard)
        );
        let zero = policy(json!({"max_attempts": 0}));
        assert!(matches!(
            zero.decide(1, "x", true, &mut rng),
            FailDecision::GiveUp(_)
        ));
    }

    #[test]
    fn json_round_trip() {
        let p = policy(
            json!({"max_attempts": 7, "initial_interval": "PT0.5S", "on_exhaustion": "dead_letter", "jitter": false}),
        );
        assert_eq!(RetryPolicy::from_json(&p.to_json(), "$").ok(), Some(p));
    }

    proptest! {
        #[test]
        fn jitter_stays_within_bounds(retry in 1u32..40, init_ms in 1u64..60_000, coeff in 1.0f64..5.0, seed: u64) {
            let p = RetryPolicy { initial_interval: Duration::from_millis(init_ms), backoff_coefficient: coeff, ..RetryPolicy::default() };
            let base = p.base_delay(retry);
            prop_assert!(base <= p.max_interval);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let d = p.delay(retry, &mut rng);
            prop_assert!(d >= base.mul_f64(0.5).saturating_sub(Duration::from_nanos(1)));
            prop_assert!(d <= p.max_interval);
            prop_assert!(d < base.mul_f64(1.5) + Duration::from_nanos(1));
        }

        #[test]
        fn base_delay_is_monotonic(retry in 1u32..60, coeff in 1.0f64..4.0) {
            let p = RetryPolicy { backoff_coefficient: coeff, ..RetryPolicy::default() };
            prop_assert!(p.base_delay(retry) <= p.base_delay(retry + 1));
        }
    }
}
#[cfg(test)]
mod conformance_policy {
    #[test]
    fn dlq_policy_parses() {
        let v = serde_json::json!({"max_attempts":1,"initial_interval":"PT1S","backoff_coefficient":1,"max_interval":"PT5M","jitter":false,"non_retryable_errors":[],"on_exhaustion":"dead_letter"});
        let r = super::RetryPolicy::from_json(&v, "$.retry");
        assert!(r.is_ok(), "{r:?}");
    }
}
