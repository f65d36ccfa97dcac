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

/// Key prefix of queue-level limits (`PUT /admin/queues/{name}/rate-limit`): a job's own
/// `rate_limit.key` may not start with it, so a job's windows never share an item with
/// its queue's.
pub const QUEUE_LIMIT_PREFIX: &str = "queue-limit:";

/// One window counter item a start must fit into, after merging the windows of every
/// policy that map to the same item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowItem {
    /// The policy key (the item's partition, `RL#{key}`).
    pub key: String,
    /// The window id (`{length µs}#{index}`, the item's sort key after `W#`).
    pub window: String,
    /// Starts allowed in the window: the strictest of the merged limits.
    pub limit: u32,
    /// Window end, epoch microseconds.
    pub end_us: i64,
    /// Indexes (into the policies given) of every policy counted by this item.
    pub policies: Vec<usize>,
}

/// The window items a start at `now_us` must fit into under all of `policies`, each item
/// once: two windows of the same key and length (a `rate` and a `throttle` of the same
/// period, or two policies sharing a key) are the same DynamoDB item, and one
/// TransactWriteItems may not touch an item twice. The merged item keeps the smallest
/// limit, so the start fits every merged window.
pub fn merged_windows(policies: &[&RateLimitPolicy], now_us: i64) -> Vec<WindowItem> {
    let mut out: Vec<WindowItem> = Vec::new();
    for (p, policy) in policies.iter().enumerate() {
        for (window, limit, end_us) in policy.windows(now_us) {
            match out
                .iter_mut()
                .find(|w| w.key == policy.key && w.window == window)
            {
                Some(w) => {
                    w.limit = w.limit.min(limit);
                    if !w.policies.contains(&p) {
                        w.policies.push(p);
                    }
                }
                None => out.push(WindowItem {
                    key: policy.key.clone(),
                    window,
                    limit,
                    end_us,
                    policies: vec![p],
                }),
            }
        }
    }
    out
}

impl RateLimitPolicy {
    /// Parses a job's `options.rate_limit`. Besides the spec's shape it accepts the
    /// conformance suite's `{"max_per_second": N}` (a `rate` of N per second); without a
    /// `key` the limit applies to the job's queue (`queue:<name>`). A key starting with
    /// [`QUEUE_LIMIT_PREFIX`] is refused: that prefix belongs to queue-level limits.
    pub fn from_json(v: &Value, queue: &str) -> Result<Self, OjsError> {
        if v.get("key")
            .and_then(Value::as_str)
            .is_some_and(|k| k.starts_with(QUEUE_LIMIT_PREFIX))
        {
            return Err(bad(format!(
                "rate_limit.key may not start with {QUEUE_LIMIT_PREFIX:?} (reserved for queue-level limits)"
            )));
        }
        Self::from_stored(v, queue)
    }

    /// A queue-level limit of `queue` (`PUT /admin/queues/{name}/rate-limit`): keyed
    /// `queue-limit:<queue>` whatever the body says.
    pub fn for_queue(v: &Value, queue: &str) -> Result<Self, OjsError> {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.insert("key".into(), json!(format!("{QUEUE_LIMIT_PREFIX}{queue}")));
        }
        Self::from_stored(&v, queue)
    }

    /// Parses a policy the store wrote (a job's or a queue's), reserved key prefix
    /// allowed.
    pub fn from_stored(v: &Value, queue: &str) -> Result<Self, OjsError> {
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

/// What a claim refused by rate limits does (ojs-rate-limiting.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The queue's own limit refused: no job of the queue starts in this FETCH.
    QueueLimited,
    /// The job stays available for a later FETCH.
    Wait,
    /// The job is discarded.
    Drop,
    /// The job becomes scheduled at this time (epoch microseconds): when the last of the
    /// refusing limits is expected to allow it.
    Reschedule {
        /// Epoch microseconds.
        at_us: i64,
    },
}

/// The outcome of a claim that `policies` refused: `refused` lists each refusing policy
/// (its index in `policies`) and when it is expected to allow a start (epoch µs).
/// `first_is_queue` says `policies[0]` is the queue's own limit. A job's `drop` wins over
/// `reschedule`, which wins over `wait`: a job that asked to be dropped is never kept.
pub fn refusal(
    policies: &[&RateLimitPolicy],
    first_is_queue: bool,
    refused: &[(usize, i64)],
) -> Refusal {
    if first_is_queue && refused.iter().any(|(p, _)| *p == 0) {
        return Refusal::QueueLimited;
    }
    let wants = |action: OnLimit| {
        refused.iter().any(|(p, _)| {
            policies
                .get(*p)
                .is_some_and(|policy| policy.on_limit == action)
        })
    };
    if wants(OnLimit::Drop) {
        Refusal::Drop
    } else if wants(OnLimit::Reschedule) {
        Refusal::Reschedule {
            at_us: refused.iter().map(|(_, at)| *at).max().unwrap_or(0),
        }
    } else {
        Refusal::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_on_limit(on_limit: &str) -> RateLimitPolicy {
        RateLimitPolicy::from_json(
            &json!({"key": format!("k-{on_limit}"), "concurrency": 1, "on_limit": on_limit}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_refusal_by_the_queues_own_limit_ends_the_queue() {
        let (q, job) = (with_on_limit("wait"), with_on_limit("drop"));
        let policies = [&q, &job];
        assert_eq!(refusal(&policies, true, &[(0, 5)]), Refusal::QueueLimited);
        assert_eq!(
            refusal(&policies, true, &[(1, 5), (0, 9)]),
            Refusal::QueueLimited
        );
        // Without a queue limit the first policy is the job's own.
        assert_eq!(refusal(&policies, false, &[(0, 5)]), Refusal::Wait);
        assert_eq!(refusal(&policies, true, &[(1, 5)]), Refusal::Drop);
    }

    #[test]
    fn drop_wins_over_reschedule_which_wins_over_wait() {
        let (wait, drop, later) = (
            with_on_limit("wait"),
            with_on_limit("drop"),
            with_on_limit("reschedule"),
        );
        let policies = [&wait, &drop, &later];
        assert_eq!(refusal(&policies, false, &[(0, 1)]), Refusal::Wait);
        assert_eq!(
            refusal(&policies, false, &[(0, 1), (1, 2), (2, 3)]),
            Refusal::Drop
        );
        assert_eq!(
            refusal(&policies, false, &[(0, 7), (2, 3)]),
            Refusal::Reschedule { at_us: 7 },
            "rescheduled when the last refusing limit allows it"
        );
        assert_eq!(
            refusal(&policies, false, &[(2, 3), (0, 2)]),
            Refusal::Reschedule { at_us: 3 }
        );
    }

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

    #[test]
    fn queue_limit_prefix_is_reserved() {
        let job = json!({"key": "queue-limit:q", "max_per_second": 1});
        assert!(RateLimitPolicy::from_json(&job, "q").is_err());
        let queue = RateLimitPolicy::for_queue(&json!({"key": "x", "max_per_second": 1}), "q")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(queue.key, "queue-limit:q");
        assert_eq!(
            RateLimitPolicy::from_stored(&queue.to_json(), "q").ok(),
            Some(queue)
        );
    }

    #[test]
    fn windows_of_one_item_merge_to_the_strictest() {
        // rate 10/s and throttle 1/s: both are the 1 s window of the same key.
        let p = RateLimitPolicy::from_json(
            &json!({"key": "k", "rate": {"limit": 10, "period": "PT1S"},
                    "throttle": {"limit": 1, "period": "PT1S"}}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.windows(1_500_000).len(), 2, "two windows, one item");
        let merged = merged_windows(&[&p], 1_500_000);
        assert_eq!(
            merged,
            vec![WindowItem {
                key: "k".into(),
                window: "1000000#1".into(),
                limit: 1,
                end_us: 2_000_000,
                policies: vec![0],
            }]
        );
        // rate 5 per 2 s and throttle 2 per 2 s (one per second): different items.
        let apart = RateLimitPolicy::from_json(
            &json!({"key": "k", "rate": {"limit": 5, "period": "PT2S"},
                    "throttle": {"limit": 2, "period": "PT2S"}}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(merged_windows(&[&apart], 0).len(), 2);
        // Two policies on one key and period (a stored job policy written before the
        // prefix was reserved, say): one item, strictest limit, both policies counted.
        let a = RateLimitPolicy::for_queue(&json!({"max_per_second": 3}), "q")
            .unwrap_or_else(|e| panic!("{e}"));
        let b = RateLimitPolicy::from_stored(
            &json!({"key": "queue-limit:q", "rate": {"limit": 7, "period": "PT1S"}}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let merged = merged_windows(&[&a, &b, &apart], 0);
        assert_eq!(merged.len(), 3);
        assert_eq!(
            (merged[0].limit, merged[0].policies.clone()),
            (3, vec![0, 1])
        );
        let mut items: Vec<(&str, &str)> = merged
            .iter()
            .map(|w| (w.key.as_str(), w.window.as_str()))
            .collect();
        items.sort_unstable();
        items.dedup();
        assert_eq!(items.len(), merged.len(), "each item once");
    }
}
