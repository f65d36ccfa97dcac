//! Job rate limits (ojs-rate-limiting.md): `concurrency` (most jobs of a key active at
//! once), window-based `rate` and evenly spaced `throttle` on job starts, per key. The
//! windows slide (§5.2's recommended algorithm: a fixed window lets twice the limit start
//! across a boundary); every limit is checked and counted in the same transaction that
//! claims the job.

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

/// Whether `key` is a rate limit key: `^[a-zA-Z0-9][a-zA-Z0-9._:-]*$` (ojs-rate-limiting.md
/// §6.2), at most 256 characters.
pub fn is_valid_key(key: &str) -> bool {
    key.len() <= 256
        && key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
}

/// Key prefix of queue-level limits (`PUT /admin/queues/{name}/rate-limit`): a job's own
/// `rate_limit.key` may not start with it, so a job's windows never share an item with
/// its queue's.
pub const QUEUE_LIMIT_PREFIX: &str = "queue-limit:";

/// Buckets a sliding window is counted in: a start is counted for one window length
/// after it, plus at most one bucket (a tenth of the window).
pub const BUCKETS: i64 = 10;

/// A sliding window a start must fit into, after merging the windows of every policy
/// that share a key and length: at most `limit` starts in any `len_us` long interval.
///
/// Starts are counted in buckets of a tenth of the window. A start fits when the
/// buckets that overlap the last `len_us` (the oldest one counted whole, which makes the
/// window strict) hold fewer than `limit`. Admitting starts one at a time against every
/// start admitted before (the store serializes them on one item), each recorded no
/// earlier than the last ([`SlidingWindow::recorded_at`]: claimers' clocks disagree by a
/// few milliseconds, and a FETCH reads its clock once), keeps any `len_us` of recorded
/// start times at `limit` or fewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    /// The policy key (the counter item's partition, `RL#{key}`).
    pub key: String,
    /// Window length, microseconds.
    pub len_us: i64,
    /// Starts allowed in any window: the strictest of the merged limits.
    pub limit: u32,
    /// Indexes (into the policies given) of every policy counted by this window.
    pub policies: Vec<usize>,
}

impl SlidingWindow {
    /// Length of one bucket, microseconds.
    pub fn bucket_len(&self) -> i64 {
        (self.len_us / BUCKETS).max(1)
    }

    /// When a start at `now_us` is recorded, given the last one recorded: never before
    /// it, so that buckets older than a window can be forgotten.
    pub fn recorded_at(now_us: i64, last_us: Option<i64>) -> i64 {
        last_us.map_or(now_us, |last| last.max(now_us))
    }

    /// The bucket a start at `at_us` is counted in.
    pub fn bucket(&self, at_us: i64) -> i64 {
        at_us.max(0).div_euclid(self.bucket_len())
    }

    /// The oldest bucket a start at `now_us` counts: the one holding `now_us - len_us`
    /// plus a microsecond, the first instant of the last `len_us`.
    pub fn oldest_counted(&self, now_us: i64) -> i64 {
        self.bucket(now_us.saturating_sub(self.len_us).saturating_add(1))
    }

    /// When `bucket` stops being counted, epoch microseconds: the first start whose
    /// window no longer overlaps it.
    pub fn leaves_at(&self, bucket: i64) -> i64 {
        bucket
            .saturating_add(1)
            .saturating_mul(self.bucket_len())
            .saturating_add(self.len_us - 1)
    }

    /// The sort key of the window's counter item: the window length keeps the windows
    /// of one key apart.
    pub fn sort_key(&self) -> String {
        format!("S#{}", self.len_us)
    }

    /// What the buckets (`(bucket, starts)`, any order) leave for a start at `now_us`.
    pub fn assess(&self, counts: &[(i64, u64)], now_us: i64) -> WindowAssessment {
        let counted = self.counted(counts, now_us);
        let total: u64 = counted.iter().map(|(_, c)| c).sum();
        let limit = u64::from(self.limit);
        WindowAssessment {
            remaining: u32::try_from(limit.saturating_sub(total)).unwrap_or(0),
            fits_at_us: self.fits_at_us(counts, now_us, 1).unwrap_or(now_us),
            clear_at_us: counted
                .iter()
                .rev()
                .find(|(_, c)| *c > 0)
                .map_or(now_us, |(b, _)| self.leaves_at(*b)),
        }
    }

    /// When `n` more starts fit, epoch microseconds (`now_us` when they do now): once
    /// the oldest buckets have left the window until at most `limit - n` starts remain
    /// counted. `None` when `n` is over the limit: they never fit at once.
    pub fn fits_at_us(&self, counts: &[(i64, u64)], now_us: i64, n: u64) -> Option<i64> {
        let limit = u64::from(self.limit);
        if n > limit {
            return None;
        }
        let counted = self.counted(counts, now_us);
        let mut left: u64 = counted.iter().map(|(_, c)| c).sum();
        let mut at = now_us;
        for (bucket, c) in &counted {
            if left + n <= limit {
                break;
            }
            left -= c;
            at = self.leaves_at(*bucket);
        }
        Some(at)
    }

    /// The window of `key` whose counter item has sort key `sk` (`S#<length µs>`, as
    /// [`SlidingWindow::sort_key`] writes it), for reading its state: its limit belongs to
    /// the jobs' policies, not to the item, so it is left at the largest.
    pub fn from_sort_key(key: &str, sk: &str) -> Option<Self> {
        let len_us: i64 = sk.strip_prefix("S#")?.parse().ok()?;
        (len_us > 0).then(|| Self {
            key: key.to_owned(),
            len_us,
            limit: u32::MAX,
            policies: Vec::new(),
        })
    }

    /// The starts a start at `now_us` would count (those of the last `len_us`, the
    /// oldest bucket whole).
    pub fn counted_starts(&self, counts: &[(i64, u64)], now_us: i64) -> u64 {
        self.counted(counts, now_us).iter().map(|(_, c)| c).sum()
    }

    /// The buckets a start at `now_us` counts, oldest first.
    fn counted(&self, counts: &[(i64, u64)], now_us: i64) -> Vec<(i64, u64)> {
        let oldest = self.oldest_counted(now_us);
        let mut counted: Vec<(i64, u64)> = counts
            .iter()
            .copied()
            .filter(|(b, _)| *b >= oldest)
            .collect();
        counted.sort_unstable();
        counted
    }

    /// The buckets to store once a start at `now_us` is admitted: the counted ones
    /// (older buckets are dropped, no later start counts them) and this start.
    pub fn with_start(&self, counts: &[(i64, u64)], now_us: i64) -> Vec<(i64, u64)> {
        self.with_starts(counts, now_us, 1)
    }

    /// [`SlidingWindow::with_start`] for `n` starts at once (a batch enqueue).
    pub fn with_starts(&self, counts: &[(i64, u64)], now_us: i64, n: u64) -> Vec<(i64, u64)> {
        let mut out = self.counted(counts, now_us);
        let bucket = self.bucket(now_us);
        match out.iter_mut().find(|(b, _)| *b == bucket) {
            Some((_, c)) => *c += n,
            None => out.push((bucket, n)),
        }
        out
    }
}

/// What a sliding window leaves for a start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowAssessment {
    /// Starts the window still allows now (0: it refuses this one).
    pub remaining: u32,
    /// When the window allows the next start, epoch microseconds (now when it does).
    pub fits_at_us: i64,
    /// When every start it counts has left it (now when it counts none).
    pub clear_at_us: i64,
}

/// The sliding windows a start must fit into under all of `policies`, each counter
/// once: two windows of the same key and length (a `rate` and a `throttle` of the same
/// period, or two policies sharing a key) count the same DynamoDB items, and one
/// TransactWriteItems may not touch an item twice. The merged window keeps the smallest
/// limit, so the start fits every merged window.
pub fn merged_windows(policies: &[&RateLimitPolicy]) -> Vec<SlidingWindow> {
    let mut out: Vec<SlidingWindow> = Vec::new();
    for (p, policy) in policies.iter().enumerate() {
        for (len_us, limit) in policy.windows() {
            match out
                .iter_mut()
                .find(|w| w.key == policy.key && w.len_us == len_us)
            {
                Some(w) => {
                    w.limit = w.limit.min(limit);
                    if !w.policies.contains(&p) {
                        w.policies.push(p);
                    }
                }
                None => out.push(SlidingWindow {
                    key: policy.key.clone(),
                    len_us,
                    limit,
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
            Some(Value::String(k)) if is_valid_key(k) => k.clone(),
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

    /// The windows a start must fit into: (length µs, limit). A throttle of N per P is a
    /// window of P/N holding one start.
    pub fn windows(&self) -> Vec<(i64, u32)> {
        let len = |period: Duration| i64::try_from(period.as_micros()).unwrap_or(i64::MAX).max(1);
        let mut out = Vec::new();
        if let Some(r) = &self.rate {
            out.push((len(r.period), r.limit));
        }
        if let Some(t) = &self.throttle {
            out.push((len(t.period / t.limit.max(1)), 1));
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
    fn n_starts_fit_once_enough_buckets_have_left() {
        let w = SlidingWindow {
            key: "k".into(),
            len_us: 1_000_000,
            limit: 3,
            policies: Vec::new(),
        };
        // Buckets of 100 ms: a start at 1.0 s and one at 1.2 s, seen at 1.5 s.
        let counts = [(10, 1), (12, 1)];
        let now = 1_500_000;
        assert_eq!(w.fits_at_us(&counts, now, 1), Some(now));
        assert_eq!(w.fits_at_us(&counts, now, 2), Some(w.leaves_at(10)));
        assert_eq!(w.fits_at_us(&counts, now, 3), Some(w.leaves_at(12)));
        assert_eq!(w.fits_at_us(&counts, now, 4), None, "over the limit");
        assert_eq!(w.assess(&counts, now).fits_at_us, now);
        assert_eq!(
            w.with_starts(&counts, now, 2),
            vec![(10, 1), (12, 1), (15, 2)]
        );
        assert_eq!(w.with_starts(&[(15, 1)], now, 3), vec![(15, 4)]);
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
        assert_eq!(p.windows(), vec![(1_000_000, 1)]);
        let spec = RateLimitPolicy::from_json(
            &json!({"key": "stripe-api", "rate": {"limit": 100, "period": "PT1M"},
            "throttle": {"limit": 10, "period": "PT1S"}}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            spec.windows(),
            vec![(60_000_000, 100), (100_000, 1)],
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

    fn one_per_second() -> SlidingWindow {
        SlidingWindow {
            key: "k".into(),
            len_us: 1_000_000,
            limit: 1,
            policies: vec![0],
        }
    }

    #[test]
    fn a_window_counts_every_bucket_overlapping_its_length() {
        let w = one_per_second();
        assert_eq!(w.bucket_len(), 100_000);
        assert_eq!(w.bucket(1_250_000), 12);
        assert_eq!(
            w.oldest_counted(1_250_000),
            2,
            "the bucket holding 0.250001 s"
        );
        assert_eq!(w.oldest_counted(1_299_999), 3);
        assert_eq!(w.oldest_counted(50_000), 0, "never before the epoch");
        assert_eq!(w.leaves_at(12), 2_299_999);
        // A length that buckets do not divide still counts its whole length.
        let odd = SlidingWindow {
            len_us: 1_005,
            ..one_per_second()
        };
        assert_eq!(odd.bucket_len(), 100);
        assert_eq!(odd.oldest_counted(5_000), 39, "from 3.996 ms");
        let tiny = SlidingWindow {
            len_us: 3,
            ..one_per_second()
        };
        assert_eq!((tiny.bucket_len(), tiny.oldest_counted(10)), (1, 8));
        assert_eq!(w.sort_key(), "S#1000000");
        assert_eq!(SlidingWindow::recorded_at(5, Some(9)), 9, "a late clock");
        assert_eq!(SlidingWindow::recorded_at(5, Some(2)), 5);
        assert_eq!(SlidingWindow::recorded_at(5, None), 5);
    }

    #[test]
    fn a_start_refuses_the_next_until_a_whole_window_has_passed() {
        let w = one_per_second();
        // One start at 1.25 s (bucket 12).
        let counts = [(12, 1)];
        // A fixed window would allow 1.95 s and 2.05 s; the sliding one refuses them.
        for at in [1_260_000, 1_950_000, 2_050_000, 2_250_000, 2_299_998] {
            let a = w.assess(&counts, at);
            assert_eq!(
                (a.remaining, a.fits_at_us, a.clear_at_us),
                (0, 2_299_999, 2_299_999),
                "at {at}"
            );
        }
        let later = w.assess(&counts, 2_299_999);
        assert_eq!(
            (later.remaining, later.fits_at_us, later.clear_at_us),
            (1, 2_299_999, 2_299_999)
        );
        assert_eq!(w.assess(&[], 5).remaining, 1);
        // A start recorded ahead of this claimer's clock counts too.
        assert_eq!(w.assess(&[(15, 1)], 1_250_000).remaining, 0);
    }

    #[test]
    fn the_next_start_fits_when_enough_old_buckets_leave() {
        let w = SlidingWindow {
            limit: 3,
            ..one_per_second()
        };
        // Starts: 1 in bucket 10, 2 in bucket 14, none since; bucket 2 is long gone.
        let counts = [(14, 2), (10, 1), (2, 5)];
        let a = w.assess(&counts, 1_500_000);
        assert_eq!(a.remaining, 0);
        assert_eq!(a.fits_at_us, 2_099_999, "bucket 10 leaves at 2.1 s");
        let b = w.assess(&counts, 2_099_999);
        assert_eq!((b.remaining, b.fits_at_us), (1, 2_099_999));
        assert_eq!(b.clear_at_us, 2_499_999, "bucket 14 leaves last");
        assert_eq!(w.assess(&[(14, 0)], 1_500_000).clear_at_us, 1_500_000);
        assert_eq!(
            w.with_start(&counts, 1_550_000),
            vec![(10, 1), (14, 2), (15, 1)],
            "the gone bucket dropped, the start added"
        );
        assert_eq!(w.with_start(&[(15, 1)], 1_550_000), vec![(15, 2)]);
    }

    /// A claimer admitting starts one at a time on a window: what it stored, what it let in.
    #[derive(Debug)]
    struct Claimer {
        window: SlidingWindow,
        stored: Vec<(i64, u64)>,
        starts: Vec<i64>,
    }

    impl Claimer {
        fn assess(&self, now: i64) -> WindowAssessment {
            self.window.assess(&self.stored, now)
        }

        fn start(&mut self, now: i64) {
            self.stored = self.window.with_start(&self.stored, now);
            self.starts.push(now);
        }
    }

    /// A claimer with no starts yet, on a window of 1-3 starts per 1-4,999 µs.
    fn claimer() -> impl proptest::strategy::Strategy<Value = Claimer> {
        use proptest::strategy::Strategy;
        (1u32..4, 1i64..5_000).prop_map(|(limit, len_us)| Claimer {
            window: SlidingWindow {
                key: "k".into(),
                len_us,
                limit,
                policies: vec![0],
            },
            stored: Vec::new(),
            starts: Vec::new(),
        })
    }

    proptest::proptest! {
        /// Admitting attempts one at a time by `assess` never lets more than `limit`
        /// starts into any interval of the window's length, and refuses a start only
        /// while one that long (give or take a bucket) holds `limit`, telling when the
        /// next fits.
        #[test]
        fn admitted_starts_never_exceed_the_limit_in_any_window(
            mut c in claimer(),
            gaps in proptest::collection::vec(0i64..2_000, 1..60),
        ) {
            let (limit, len_us) = (c.window.limit, c.window.len_us);
            let bucket_len = c.window.bucket_len();
            let mut now = 0;
            for gap in gaps {
                now += gap;
                let a = c.assess(now);
                let in_len = c.starts.iter().filter(|s| **s > now - len_us).count();
                let in_len_and_bucket = c
                    .starts
                    .iter()
                    .filter(|s| **s > now - len_us - bucket_len)
                    .count();
                if a.remaining > 0 {
                    proptest::prop_assert!(in_len < limit as usize);
                    proptest::prop_assert_eq!(a.fits_at_us, now);
                    c.start(now);
                } else {
                    proptest::prop_assert!(in_len_and_bucket >= limit as usize);
                    proptest::prop_assert!(a.fits_at_us > now);
                    proptest::prop_assert!(a.fits_at_us < now + len_us + bucket_len);
                    proptest::prop_assert!(c.assess(a.fits_at_us).remaining > 0);
                    proptest::prop_assert_eq!(c.assess(a.fits_at_us - 1).remaining, 0);
                }
            }
        }

        /// Claimers' clocks disagree (a FETCH reads its clock once, then claims for a
        /// while): whatever order their clocks come in, no `len_us` of recorded times
        /// holds more than `limit` starts.
        #[test]
        fn clocks_out_of_order_still_keep_every_window(
            mut c in claimer(),
            times in proptest::collection::vec(0i64..20_000, 1..80),
        ) {
            for now in times {
                let now = SlidingWindow::recorded_at(now, c.starts.last().copied());
                if c.assess(now).remaining > 0 {
                    c.start(now);
                }
            }
            proptest::prop_assert!(c.starts.windows(2).all(|p| p[0] <= p[1]));
            let limit = c.window.limit as usize;
            for pair in c.starts.windows(limit + 1) {
                proptest::prop_assert!(pair[limit] - pair[0] >= c.window.len_us, "{:?}", pair);
            }
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
    fn windows_of_one_key_and_length_merge_to_the_strictest() {
        // rate 10/s and throttle 1/s: both are the 1 s window of the same key.
        let p = RateLimitPolicy::from_json(
            &json!({"key": "k", "rate": {"limit": 10, "period": "PT1S"},
                    "throttle": {"limit": 1, "period": "PT1S"}}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.windows().len(), 2, "two windows, one set of counters");
        assert_eq!(merged_windows(&[&p]), vec![one_per_second()]);
        // rate 5 per 2 s and throttle 2 per 2 s (one per second): different counters.
        let apart = RateLimitPolicy::from_json(
            &json!({"key": "k", "rate": {"limit": 5, "period": "PT2S"},
                    "throttle": {"limit": 2, "period": "PT2S"}}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(merged_windows(&[&apart]).len(), 2);
        // Two policies on one key and period (a stored job policy written before the
        // prefix was reserved, say): one window, strictest limit, both policies counted.
        let a = RateLimitPolicy::for_queue(&json!({"max_per_second": 3}), "q")
            .unwrap_or_else(|e| panic!("{e}"));
        let b = RateLimitPolicy::from_stored(
            &json!({"key": "queue-limit:q", "rate": {"limit": 7, "period": "PT1S"}}),
            "q",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let merged = merged_windows(&[&a, &b, &apart]);
        assert_eq!(merged.len(), 3);
        assert_eq!(
            (merged[0].limit, merged[0].policies.clone()),
            (3, vec![0, 1])
        );
        let mut counters: Vec<(&str, i64)> =
            merged.iter().map(|w| (w.key.as_str(), w.len_us)).collect();
        counters.sort_unstable();
        counters.dedup();
        assert_eq!(counters.len(), merged.len(), "each counter once");
    }
}
