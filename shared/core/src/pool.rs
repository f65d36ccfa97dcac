//! Scheduling pools (ojs-fair-scheduling.md §6, §7, §10.1): a named set of queues and the
//! strategy a FETCH over them follows: `strict` (the FETCH's own queue order, as without
//! a pool), `round_robin` (§7.1: each queue in turn) or `weighted` (§7.3: each queue as
//! often as its weight). A FETCH may also name a strategy and weights itself (§5.2); a
//! pool covering its queues takes precedence.

use serde_json::{json, Map, Value};

use crate::error::{ErrorCode, OjsError};
use crate::fields::Fields;
use crate::ids::QueueName;
use crate::validate::MAX_FETCH_QUEUES;

/// Largest queue weight taken.
pub const MAX_QUEUE_WEIGHT: u64 = 1_000;

/// Longest pool name taken.
pub const MAX_POOL_NAME: usize = 128;

/// How a FETCH over several queues picks the queue it serves first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// The FETCH's queue order: the first queue with a job wins.
    #[default]
    Strict,
    /// Each queue in turn, one job at a time.
    RoundRobin,
    /// Each queue in turn as often as its weight.
    Weighted,
}

impl Strategy {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Strict => "strict",
            Strategy::RoundRobin => "round_robin",
            Strategy::Weighted => "weighted",
        }
    }

    /// Reads a wire name (`round-robin` too).
    pub fn parse(raw: &str, path: &str) -> Result<Self, OjsError> {
        match raw {
            "strict" | "priority" => Ok(Strategy::Strict),
            "round_robin" | "round-robin" => Ok(Strategy::RoundRobin),
            "weighted" => Ok(Strategy::Weighted),
            "least_loaded" | "least-loaded" => Err(OjsError::new(
                ErrorCode::Unsupported,
                "least_loaded is not offered: it needs each worker's active count on every FETCH; use round_robin or weighted",
            )
            .with_path(path)),
            other => Err(OjsError::invalid_request(format!(
                "strategy {other:.32?} must be strict, round_robin or weighted"
            ))
            .with_path(path)),
        }
    }
}

/// A FETCH's scheduling over several queues: its strategy and each queue's weight.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scheduling {
    /// The strategy.
    pub strategy: Strategy,
    /// Weights of queues (1 for a queue not named).
    pub weights: Vec<(QueueName, u64)>,
}

impl Scheduling {
    /// The weight of `queue`.
    pub fn weight_of(&self, queue: &QueueName) -> u64 {
        self.weights
            .iter()
            .find(|(q, _)| q == queue)
            .map_or(1, |(_, w)| *w)
    }

    /// A FETCH body's own `strategy` and `weights` (§5.2); `None` when it names neither.
    pub fn of_fetch(body: &Map<String, Value>) -> Result<Option<Self>, OjsError> {
        let strategy = match Fields::new(body, "$").str("strategy")? {
            None => None,
            Some(s) => Some(Strategy::parse(s, "$.strategy")?),
        };
        let weights = match body.get("weights") {
            None | Some(Value::Null) => None,
            Some(w) => Some(weights_of(w, "$.weights")?),
        };
        Ok(match (strategy, weights) {
            (None, None) => None,
            (s, w) => Some(Self {
                strategy: s.unwrap_or(Strategy::Weighted),
                weights: w.unwrap_or_default(),
            }),
        })
    }
}

/// A pool as an operator defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// Its name.
    pub name: String,
    /// Its queues, in order, and their scheduling.
    pub queues: Vec<QueueName>,
    /// How a FETCH over them picks.
    pub scheduling: Scheduling,
}

fn weight(v: &Value, path: &str) -> Result<u64, OjsError> {
    let w = v.get("weight").unwrap_or(v);
    w.as_u64()
        .filter(|n| (1..=MAX_QUEUE_WEIGHT).contains(n))
        .ok_or_else(|| {
            OjsError::invalid_request(format!(
                "a weight must be an integer from 1 to {MAX_QUEUE_WEIGHT}"
            ))
            .with_path(path)
        })
}

/// `{"queue": weight}` or `{"queue": {"weight": n}}`.
fn weights_of(v: &Value, path: &str) -> Result<Vec<(QueueName, u64)>, OjsError> {
    let obj = v
        .as_object()
        .ok_or_else(|| OjsError::invalid_request("weights must be an object").with_path(path))?;
    if obj.len() > MAX_FETCH_QUEUES {
        return Err(
            OjsError::invalid_request(format!("at most {MAX_FETCH_QUEUES} queues")).with_path(path),
        );
    }
    obj.iter()
        .map(|(q, w)| {
            let at = format!("{path}.{q}");
            Ok((
                QueueName::parse(q).map_err(|e| e.with_path(&at))?,
                weight(w, &at)?,
            ))
        })
        .collect()
}

/// Whether `name` can name a pool: 1 to [`MAX_POOL_NAME`] letters, digits, `-`, `_`,
/// `.` or `:` (a path naming another names no pool).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_POOL_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// A pool's name, from the request's path.
fn check_name(name: &str) -> Result<(), OjsError> {
    if !valid_name(name) {
        return Err(OjsError::invalid_request(format!(
            "a pool name is 1 to {MAX_POOL_NAME} letters, digits, '-', '_', '.' or ':'"
        )));
    }
    Ok(())
}

/// Queues and their weights.
type Weights = Vec<(QueueName, u64)>;

/// A pool's `queues`: a list of names (repeats dropped), or an object of queue weights.
/// The queues in order, and the weights given with them.
fn queues_of(v: Option<&Value>) -> Result<(Vec<QueueName>, Weights), OjsError> {
    let (queues, weights) = match v {
        Some(Value::Array(list)) if !list.is_empty() => {
            let mut queues = Vec::new();
            for (i, q) in list.iter().enumerate() {
                let at = format!("$.queues[{i}]");
                let q = q.as_str().ok_or_else(|| {
                    OjsError::invalid_request("queues must be strings").with_path(&at)
                })?;
                let q = QueueName::parse(q).map_err(|e| e.with_path(&at))?;
                if !queues.contains(&q) {
                    queues.push(q);
                }
            }
            (queues, Vec::new())
        }
        Some(v @ Value::Object(o)) if !o.is_empty() => {
            let weights = weights_of(v, "$.queues")?;
            (weights.iter().map(|(q, _)| q.clone()).collect(), weights)
        }
        _ => {
            return Err(OjsError::invalid_request(
                "queues must be a non-empty list of queue names or an object of queue weights",
            )
            .with_path("$.queues"))
        }
    };
    if queues.len() > MAX_FETCH_QUEUES {
        return Err(OjsError::invalid_request(format!(
            "a pool holds at most {MAX_FETCH_QUEUES} queues"
        ))
        .with_path("$.queues"));
    }
    Ok((queues, weights))
}

impl Pool {
    /// The pool `PUT /admin/pools/{name}` defines: `queues` as a list of names (with
    /// `weights` beside it) or an object of queue to weight; `strategy` (default
    /// `round_robin`). A `concurrency` is refused: pools do not limit workers here.
    pub fn from_json(name: &str, body: &Value) -> Result<Self, OjsError> {
        check_name(name)?;
        let obj = body
            .as_object()
            .ok_or_else(|| OjsError::invalid_request("the body must be a JSON object"))?;
        let f = Fields::new(obj, "$");
        if let Some(n) = obj.get("name").and_then(Value::as_str) {
            if n != name {
                return Err(f.refuse("name", "must be the path's pool name when given"));
            }
        }
        for k in ["concurrency", "starvation_prevention"] {
            if f.get(k).is_some() {
                return Err(OjsError::new(
                    ErrorCode::Unsupported,
                    format!("{k} is not enforced by this server: a pool here orders the queues of a FETCH"),
                )
                .with_path(&f.path_of(k)));
            }
        }
        let strategy = match f.str("strategy")? {
            None => Strategy::RoundRobin,
            Some(s) => Strategy::parse(s, "$.strategy")?,
        };
        let (queues, mut weights) = queues_of(obj.get("queues"))?;
        if let Some(w) = f.get("weights") {
            for (q, n) in weights_of(w.value(), "$.weights")? {
                if !queues.contains(&q) {
                    return Err(OjsError::invalid_request(format!(
                        "weights names {q}, which is not one of the pool's queues"
                    ))
                    .with_path("$.weights"));
                }
                weights.retain(|(have, _)| *have != q);
                weights.push((q, n));
            }
        }
        Ok(Self {
            name: name.to_owned(),
            queues,
            scheduling: Scheduling { strategy, weights },
        })
    }

    /// The pool as stored and shown.
    pub fn to_json(&self) -> Value {
        let weights: Map<String, Value> = self
            .queues
            .iter()
            .map(|q| (q.to_string(), json!(self.scheduling.weight_of(q))))
            .collect();
        json!({
            "name": self.name,
            "strategy": self.scheduling.strategy.as_str(),
            "queues": self.queues.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "weights": weights,
        })
    }

    /// Whether a FETCH naming `queues` is the pool's: each of them is one of its queues.
    pub fn covers(&self, queues: &[QueueName]) -> bool {
        !queues.is_empty() && queues.iter().all(|q| self.queues.contains(q))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str) -> QueueName {
        QueueName::parse(name).unwrap_or_else(|_| QueueName::default_queue())
    }

    #[test]
    fn a_pool_takes_the_suite_s_shape_and_the_spec_s() {
        let p = Pool::from_json(
            "conformance-pool",
            &json!({"name": "conformance-pool", "strategy": "weighted",
                    "queues": {"high-priority": {"weight": 70}, "low-priority": {"weight": 30}}}),
        );
        let p = p.ok();
        assert_eq!(
            p.as_ref().map(|p| (
                p.scheduling.strategy,
                p.scheduling.weight_of(&q("high-priority"))
            )),
            Some((Strategy::Weighted, 70))
        );
        let p = Pool::from_json(
            "default-workers",
            &json!({"queues": ["default", "email"], "strategy": "weighted", "weights": {"default": 3}}),
        )
        .ok();
        assert_eq!(
            p.as_ref().map(|p| (
                p.scheduling.weight_of(&q("default")),
                p.scheduling.weight_of(&q("email"))
            )),
            Some((3, 1))
        );
        assert!(p
            .as_ref()
            .is_some_and(|p| p.covers(&[q("email")]) && !p.covers(&[q("x")])));
        let rr = Pool::from_json("p", &json!({"queues": ["a"]})).ok();
        assert_eq!(
            rr.map(|p| p.scheduling.strategy),
            Some(Strategy::RoundRobin)
        );
        for bad in [
            json!({"queues": []}),
            json!({"queues": ["a"], "concurrency": 5}),
            json!({"queues": ["a"], "strategy": "least_loaded"}),
            json!({"queues": ["a"], "strategy": "fastest"}),
            json!({"queues": {"a": 0}}),
            json!({"queues": ["a"], "weights": {"b": 2}}),
            json!({"queues": ["a"], "name": "other"}),
            json!({"queues": [5]}),
            json!([]),
        ] {
            assert!(Pool::from_json("p", &bad).is_err(), "{bad}");
        }
        assert!(Pool::from_json("a b", &json!({"queues": ["a"]})).is_err());
    }

    #[test]
    fn a_fetch_may_name_its_own_strategy() {
        let body = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert_eq!(Scheduling::of_fetch(&body(json!({}))).ok(), Some(None));
        let s = Scheduling::of_fetch(&body(json!({"weights": {"a": 5}})))
            .ok()
            .flatten();
        assert_eq!(
            s.map(|s| (s.strategy, s.weight_of(&q("a")), s.weight_of(&q("b")))),
            Some((Strategy::Weighted, 5, 1))
        );
        assert!(Scheduling::of_fetch(&body(json!({"strategy": 3}))).is_err());
    }
}
