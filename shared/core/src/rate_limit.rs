//! Job rate limits (ojs-rate-limiting.md): `concurrency` (most jobs of a key active at
//! once), window-based `rate` and evenly spaced `throttle` on job starts, per key. The
//! windows are fixed windows; every limit is checked and counted in the same transaction
//! that claims the job.

use std::time::Duration;

use serde_json::{json, Value};

use crate::error::{ErrorCode, OjsError};

/// At most `limit` starts per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Starts allowed per period.
    pub limit: u32,
    /// Window length.
    pub period: Duration,
}

/// What happens to a job whose start the limit refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLimit {
    /// Stay available; a later FETCH takes it (the default, non-lossy).
    Wait,
    /// Discard it.
    Drop,
    /// Move it to `scheduled`, due when the limit is expected to allow it (non-lossy).
    Reschedule,
}

/// A validated rate limit policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitPolicy {
    /// Partition key shared by every job it limits.
    pub key: String,
    /// Most jobs of the key active at once (0 holds every job back).
    pub concurrency: Option<u32>,
    /// Window-based limit.
    pub rate: Option<Window>,
    /// Even spacing: `limit` starts per `period`, at most one per `period / limit`.
    pub throttle: Option<Window>,
    /// Refusal handling.
    pub on_limit: OnLimit,
}

/// Largest `concurrency`: the key's active holders live in one DynamoDB item (about
/// 50 bytes each), which every claim and release rewrites.
pub const MAX_CONCURRENCY: u32 = 100;

fn bad(message: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::ValidationError, message).with_path("$.options.rate_limit")
}

fn window(v: &Value, what: &str) -> Result<Window, OjsError> {
    let limit = v
        .get("limit")
        .and_then(Value::as_u64)
        .and_then(|l| u32::try_from(l).ok())
        .filter(|l| *l > 0)
        .ok_or_else(|| bad(format!("{what}.limit must be a positive integer")))?;
    let period = v
        .get("period")
        .and_then(Value::as_str)
        .and_then(crate::duration::parse)
        .filter(|p| !p.is_zero())
        .ok_or_else(|| {
            bad(format!(
                "{what}.period must be an ISO 8601 duration such as PT1M"
            ))
        })?;
    Ok(Window { limit, period })
}

impl RateLimitPolicy {
    /// Parses `options.rate_limit`. Besides the spec's shape it accepts the conformance
    /// suite's `{"max_per_second": N}` (a `rate` of N per second); without a `key` the
    /// limit applies to the job's queue (`queue:<name>`).
    pub fn from_json(v: &Value, queue: &str) -> Result<Self, OjsError> {
        let obj = v
            .as_object()
            .ok_or_else(|| bad("rate_limit must be an object"))?;
        let key = match obj.get("key") {
            None | Some(Value::Null) => format!("queue:{queue}"),
            Some(Value::String(k))
                if !k.is_empty()
                    && k.len() <= 256
                    && k.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c)) =>
            {
                k.clone()
            }
            Some(_) => {
                return Err(bad(
                    "rate_limit.key must match ^[a-zA-Z0-9][a-zA-Z0-9._:-]*$",
                ))
            }
        };
        let concurrency = match obj.get("concurrency") {
            None | Some(Value::Null) => None,
            Some(c) => Some(
                c.as_u64()
                    .and_then(|c| u32::try_from(c).ok())
                    .filter(|c| *c <= MAX_CONCURRENCY)
                    .ok_or_else(|| {
                        bad(format!(
                            "concurrency must be an integer from 0 to {MAX_CONCURRENCY}"
                        ))
                    })?,
            ),
        };
        let mut rate = obj
            .get("rate")
            .filter(|r| !r.is_null())
            .map(|r| window(r, "rate"))
            .transpose()?;
        if let Some(n) = obj.get("max_per_second") {
            let limit = n
                .as_u64()
                .and_then(|l| u32::try_from(l).ok())
                .filter(|l| *l > 0)
                .ok_or_else(|| bad("max_per_second must be a positive integer"))?;
            rate = Some(Window {
                limit,
                period: Duration::from_secs(1),
            });
        }
        let throttle = obj
            .get("throttle")
            .filter(|t| !t.is_null())
            .map(|t| window(t, "throttle"))
            .transpose()?;
        if rate.is_none() && throttle.is_none() && concurrency.is_none() {
            return Err(bad(
                "rate_limit needs concurrency, rate, throttle or max_per_second",
            ));
        }
        let on_limit = match obj.get("on_limit").and_then(Value::as_str) {
            None | Some("wait") => OnLimit::Wait,
            Some("drop") => OnLimit::Drop,
            Some("reschedule") => OnLimit::Reschedule,
            Some(other) => {
                return Err(bad(format!(
                    "on_limit must be wait, reschedule or drop, got {other:?}"
                )))
            }
        };
        Ok(Self {
            key,
            concurrency,
            rate,
            throttle,
            on_limit,
        })
    }

    /// The normalised form stored with the job (and projected into the ready index).
    pub fn to_json(&self) -> Value {
        let w = |w: &Window| json!({"limit": w.limit, "period": crate::duration::format(w.period)});
        json!({
            "key": self.key,
            "concurrency": self.concurrency,
            "rate": self.rate.as_ref().map(w),
            "throttle": self.throttle.as_ref().map(w),
            "on_limit": match self.on_limit {
                OnLimit::Wait => "wait",
                OnLimit::Drop => "drop",
                OnLimit::Reschedule => "reschedule",
            },
        })
    }

    /// The fixed windows a start at `now_us` must fit into: (window id, limit, window end
    /// in epoch microseconds). A throttle of N per P is a window of P/N holding one start.
    pub fn windows(&self, now_us: i64) -> Vec<(String, u32, i64)> {
        let mut out = Vec::new();
        let mut add = |period: Duration, limit: u32| {
            let len = i64::try_from(period.as_micros()).unwrap_or(i64::MAX).max(1);
            let index = now_us.div_euclid(len);
            out.push((format!("{len}#{index}"), limit, (index + 1) * len));
        };
        if let Some(r) = &self.rate {
            add(r.period, r.limit);
        }
        if let Some(t) = &self.throttle {
            add(t.period / t.limit.max(1), 1);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_windows() {
        let p = RateLimitPolicy::from_json(&json!({"max_per_second": 1}), "q")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.key, "queue:q");
        let w = p.windows(1_500_000);
        assert_eq!(w, vec![("1000000#1".to_owned(), 1, 2_000_000)]);
        let spec = RateLimitPolicy::from_json(
            &json!({"key": "stripe-api", "rate": {"limit": 100, "period": "PT1M"},
            "throttle": {"limit": 10, "period": "PT1S"}}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.windows(0).len(), 2);
        assert_eq!(
            spec.windows(0)[1].0,
            "100000#0",
            "10 per second: one start per 100 ms"
        );
        assert_eq!(
            RateLimitPolicy::from_json(&spec.to_json(), "q").ok(),
            Some(spec)
        );
        for bad in [
            json!({}),
            json!({"key": "-x", "max_per_second": 1}),
            json!({"rate": {"limit": 0, "period": "PT1S"}}),
            json!({"max_per_second": 1, "on_limit": "explode"}),
        ] {
            assert!(RateLimitPolicy::from_json(&bad, "q").is_err(), "{bad}");
        }
    }
}
