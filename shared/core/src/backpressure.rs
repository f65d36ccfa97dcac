//! A queue's depth bound (ojs-backpressure.md): how many jobs may wait in it, and when
//! producers are told it is filling up.
//!
//! Depth is the number of jobs waiting to run: `available + scheduled + retryable`
//! (§3). Only the `reject` strategy is offered: an enqueue that would take the queue past
//! its bound is refused whole (§5.1, §9.3). `block` would hold an HTTP request open in a
//! Lambda function billed by the millisecond, and `drop_oldest` discards jobs a producer
//! was told were stored; asking for either is `unsupported`, as is a size bound.

use serde_json::{json, Value};

use crate::error::{ErrorCode, OjsError};
use crate::fields::Fields;

/// The warning threshold when none is given (§6.2).
pub const DEFAULT_WARNING_THRESHOLD: f64 = 0.8;

/// A queue's depth bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backpressure {
    /// Most jobs waiting in the queue; at least 1.
    pub max_depth: u64,
    /// Fraction of `max_depth` from which a successful enqueue carries warning headers,
    /// in (0, 1].
    pub warning_threshold: f64,
}

/// What an enqueue of `adding` jobs meets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// The queue would pass its bound: the whole enqueue is refused.
    Full,
    /// Accepted, at or past the warning threshold: depth / bound after the enqueue.
    Pressure(f64),
    /// Accepted, below the warning threshold.
    Clear,
}

impl Backpressure {
    /// The bound in `body` (the `backpressure` object of
    /// `PUT /ojs/v1/admin/queues/{name}/config`): `Ok(None)` for `null` or `max_depth` 0
    /// (unbounded, §6.2). Errors name the field (`$.backpressure.<field>`).
    pub fn from_json(body: &Value) -> Result<Option<Self>, OjsError> {
        let fields = match body {
            Value::Null => return Ok(None),
            Value::Object(fields) => fields,
            _ => {
                return Err(invalid(
                    "$.backpressure",
                    "backpressure must be an object or null",
                ))
            }
        };
        let f = Fields::new(fields, "$.backpressure")
            .labelled("backpressure.")
            .with_code(ErrorCode::ValidationError);
        let mut max_depth = None;
        let mut warning_threshold = DEFAULT_WARNING_THRESHOLD;
        // In the order sent: the first faulty member is the one refused.
        for (k, v) in fields {
            match k.as_str() {
                "max_depth" => {
                    max_depth = Some(
                        v.as_u64()
                            .ok_or_else(|| f.refuse(k, "must be a non-negative integer"))?,
                    );
                }
                "warning_threshold" => {
                    warning_threshold = v
                        .as_f64()
                        .filter(|t| *t > 0.0 && *t <= 1.0)
                        .ok_or_else(|| f.refuse(k, "must be a number in (0, 1]"))?;
                }
                "strategy" => check_strategy(&f, v)?,
                "max_size_bytes" => check_size_bound(&f, v)?,
                other => {
                    return Err(invalid(
                        &f.path_of(other),
                        &format!("unknown field backpressure.{other}"),
                    ))
                }
            }
        }
        Ok(match max_depth {
            None | Some(0) => None,
            Some(max_depth) => Some(Self {
                max_depth,
                warning_threshold,
            }),
        })
    }

    /// The stored and reported form (`strategy` is always `reject`).
    pub fn to_json(&self) -> Value {
        json!({
            "max_depth": self.max_depth,
            "strategy": "reject",
            "warning_threshold": self.warning_threshold,
        })
    }

    /// What was stored by [`Backpressure::to_json`]; `None` for anything else.
    pub fn from_stored(v: &Value) -> Option<Self> {
        Self::from_json(v).ok().flatten()
    }

    /// The verdict for `adding` more jobs on a queue `depth` deep.
    pub fn judge(&self, depth: u64, adding: u64) -> Verdict {
        let after = depth.saturating_add(adding);
        if after > self.max_depth {
            return Verdict::Full;
        }
        // Both are at most u64::MAX; the ratio only feeds a header with two decimals.
        let pressure = after as f64 / self.max_depth as f64;
        if pressure >= self.warning_threshold {
            Verdict::Pressure(pressure)
        } else {
            Verdict::Clear
        }
    }
}

/// Seconds a producer refused by a full queue is told to wait (`Retry-After`): the
/// queue drains at its workers' pace, which the server does not know, so a few seconds.
pub const RETRY_AFTER_SECS: u64 = 5;

/// The `QUEUE_FULL` refusal (429, §7.1), its figures in `details` (the headers'
/// `X-OJS-Queue-Depth` and `X-OJS-Queue-Bound` are made from them).
pub fn queue_full(queue: &str, depth: u64, bound: u64) -> OjsError {
    OjsError::new(
        ErrorCode::QueueFull,
        format!("queue '{queue}' has reached its depth bound ({bound})"),
    )
    .with_detail("queue", queue)
    .with_detail("depth", depth)
    .with_detail("bound", bound)
    .with_detail("strategy", "reject")
    .with_detail("retry_after_seconds", RETRY_AFTER_SECS)
}

/// `strategy`: only `reject` is offered.
fn check_strategy(f: &Fields, v: &Value) -> Result<(), OjsError> {
    match v.as_str() {
        Some("reject") => Ok(()),
        Some("block" | "drop_oldest") => Err(OjsError::new(
            ErrorCode::Unsupported,
            format!(
                "backpressure strategy {v} is not supported by this server; \
                 use \"reject\" (an enqueue past the bound is answered 429 \
                 QUEUE_FULL with Retry-After)"
            ),
        )
        .with_path(&f.path_of("strategy"))),
        _ => Err(f.refuse(
            "strategy",
            "must be one of \"reject\", \"block\", \"drop_oldest\"",
        )),
    }
}

/// `max_size_bytes`: only 0, no size bound, is taken.
fn check_size_bound(f: &Fields, v: &Value) -> Result<(), OjsError> {
    match v.as_u64() {
        Some(0) => Ok(()),
        Some(_) => Err(OjsError::new(
            ErrorCode::Unsupported,
            "a size bound (backpressure.max_size_bytes) is not supported by \
             this server; bound the queue's depth with max_depth",
        )
        .with_path(&f.path_of("max_size_bytes"))),
        None => Err(f.refuse("max_size_bytes", "must be a non-negative integer")),
    }
}

fn invalid(path: &str, message: &str) -> OjsError {
    OjsError::new(ErrorCode::ValidationError, message).with_path(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(body: Value) -> Result<Option<Backpressure>, OjsError> {
        Backpressure::from_json(&body)
    }

    /// A bound of `max_depth` jobs, under pressure from `warning_threshold` of it.
    fn bound_of(max_depth: u64, warning_threshold: f64) -> Backpressure {
        Backpressure {
            max_depth,
            warning_threshold,
        }
    }

    /// `body => path code` rows, one a line: a refused `backpressure` body, the path its
    /// refusal names and the refusal's code.
    macro_rules! refusals {
        ($($body:tt => $path:literal $code:ident;)*) => {
            [$((json!($body), $path, ErrorCode::$code)),*]
        };
    }

    #[test]
    fn a_bound_takes_its_fields_and_defaults_the_threshold() {
        assert_eq!(
            bound(json!({"max_depth": 10, "strategy": "reject", "warning_threshold": 0.5})),
            Ok(Some(bound_of(10, 0.5)))
        );
        assert_eq!(
            bound(json!({"max_depth": 3})),
            Ok(Some(bound_of(3, DEFAULT_WARNING_THRESHOLD)))
        );
        assert_eq!(
            bound(json!({"max_depth": 3, "warning_threshold": 1})),
            Ok(Some(bound_of(3, 1.0)))
        );
    }

    #[test]
    fn no_bound_zero_or_null_is_unbounded() {
        assert_eq!(bound(Value::Null), Ok(None));
        assert_eq!(bound(json!({})), Ok(None));
        assert_eq!(
            bound(json!({"max_depth": 0, "strategy": "reject"})),
            Ok(None)
        );
        assert_eq!(bound(json!({"max_size_bytes": 0})), Ok(None));
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        let cases = refusals! {
            {"max_depth": -1} => "$.backpressure.max_depth" ValidationError;
            {"max_depth": 1.5} => "$.backpressure.max_depth" ValidationError;
            {"max_depth": "9"} => "$.backpressure.max_depth" ValidationError;
            {"max_depth": 9, "warning_threshold": 0} => "$.backpressure.warning_threshold" ValidationError;
            {"max_depth": 9, "warning_threshold": 1.01} => "$.backpressure.warning_threshold" ValidationError;
            {"max_depth": 9, "strategy": "wait"} => "$.backpressure.strategy" ValidationError;
            {"max_depth": 9, "strategy": "block"} => "$.backpressure.strategy" Unsupported;
            {"max_depth": 9, "strategy": "drop_oldest"} => "$.backpressure.strategy" Unsupported;
            {"max_size_bytes": 1024} => "$.backpressure.max_size_bytes" Unsupported;
            {"max_size_bytes": "big"} => "$.backpressure.max_size_bytes" ValidationError;
            {"max_depht": 9} => "$.backpressure.max_depht" ValidationError;
            [1] => "$.backpressure" ValidationError;
        };
        for (body, path, code) in cases {
            let Err(err) = bound(body.clone()) else {
                panic!("{body} was accepted");
            };
            assert_eq!(err.code, code, "{body}");
            assert_eq!(err.details["validation_errors"][0]["path"], path, "{body}");
        }
    }

    #[test]
    fn the_stored_form_reads_back() {
        let b = bound_of(50_000, 0.8);
        assert_eq!(
            b.to_json(),
            json!({"max_depth": 50_000, "strategy": "reject", "warning_threshold": 0.8})
        );
        assert_eq!(Backpressure::from_stored(&b.to_json()), Some(b));
        assert_eq!(Backpressure::from_stored(&json!("junk")), None);
    }

    #[test]
    fn an_enqueue_past_the_bound_is_full_and_one_to_the_bound_is_not() {
        let b = bound_of(2, 0.8);
        assert_eq!(b.judge(0, 1), Verdict::Clear);
        assert_eq!(b.judge(1, 1), Verdict::Pressure(1.0));
        assert_eq!(b.judge(2, 1), Verdict::Full);
        assert_eq!(b.judge(0, 3), Verdict::Full, "a batch is judged whole");
        assert_eq!(b.judge(u64::MAX, 1), Verdict::Full);
    }

    #[test]
    fn pressure_starts_at_the_threshold() {
        let b = bound_of(10, 0.5);
        assert_eq!(b.judge(3, 1), Verdict::Clear);
        assert_eq!(b.judge(4, 1), Verdict::Pressure(0.5));
        assert_eq!(b.judge(6, 1), Verdict::Pressure(0.7));
        assert_eq!(b.judge(9, 1), Verdict::Pressure(1.0));
        assert_eq!(b.judge(10, 0), Verdict::Pressure(1.0));
    }

    #[test]
    fn the_refusal_carries_its_figures() {
        let e = queue_full("q", 2, 2);
        assert_eq!(e.code, ErrorCode::QueueFull);
        assert_eq!(e.code.as_str(), "QUEUE_FULL");
        assert_eq!(e.code.http_status(), 429);
        assert!(e.code.retryable());
        assert_eq!(e.details["depth"], 2);
        assert_eq!(e.details["bound"], 2);
        assert_eq!(e.details["queue"], "q");
        assert_eq!(e.details["retry_after_seconds"], RETRY_AFTER_SECS);
        assert!(e.message.contains("(2)"), "{}", e.message);
    }
}
