//! Reading a PUSH body, or a stored job, into a [`NewJob`]. Each member is read in the
//! order the refusals have always come in, so a body with several faults is refused for
//! the same one as before.

use serde_json::{Map, Value};

use super::{JobSpec, NewJob, MAX_PRIORITY, MIN_PRIORITY, SYSTEM_MANAGED};
use crate::error::OjsError;
use crate::fields::Field;
use crate::ids::{JobId, JobType, QueueName};
use crate::retry::RetryPolicy;
use crate::time::{self, Timestamp};
use crate::validate;

/// The body's members: each taken from `options` when set there (the HTTP binding), else
/// from the top level (the JSON wire format). What is left of `fields` at the end are the
/// extensions.
struct Envelope {
    fields: Map<String, Value>,
    options: Map<String, Value>,
    /// The lenient read-back of a stored job ([`NewJob::parse`]).
    stored: bool,
}

impl Envelope {
    /// The first of `keys` set (not null) in `options`, else at the top level, with its
    /// path. Every one of `keys` leaves the top level either way.
    fn take(&mut self, keys: &[&str]) -> Option<(String, Value)> {
        let from_options = keys.iter().find_map(|k| {
            self.options
                .get(*k)
                .filter(|v| !v.is_null())
                .map(|v| (format!("$.options.{k}"), v.clone()))
        });
        let mut from_top = None;
        for k in keys {
            if let Some(v) = self.fields.remove(*k) {
                if from_top.is_none() && !v.is_null() {
                    from_top = Some((format!("$.{k}"), v));
                }
            }
        }
        from_options.or(from_top)
    }

    fn id(&mut self) -> Result<Option<JobId>, OjsError> {
        let Some((p, v)) = self.take(&["id"]) else {
            return Ok(None);
        };
        let raw = Field::new(&v, &p, "id").str()?;
        JobId::parse(raw).map(Some).map_err(|e| e.with_path(&p))
    }

    fn specversion(&mut self) -> Result<(), OjsError> {
        match self.take(&["specversion"]) {
            Some((p, v)) if v.as_str() != Some(crate::SPEC_VERSION) => {
                Err(OjsError::invalid_request(format!(
                    "specversion must be \"{}\"",
                    crate::SPEC_VERSION
                ))
                .with_path(&p))
            }
            _ => Ok(()),
        }
    }

    fn job_type(&mut self) -> Result<JobType, OjsError> {
        let (p, v) = self
            .take(&["type"])
            .ok_or_else(|| OjsError::invalid_request("type is required").with_path("$.type"))?;
        JobType::parse(Field::new(&v, &p, "type").str()?)
    }

    fn args(&mut self) -> Result<Vec<Value>, OjsError> {
        let (_, v) = self
            .take(&["args"])
            .ok_or_else(|| OjsError::invalid_request("args is required").with_path("$.args"))?;
        validate::check_args(&v)?;
        // Jobs stored before the check are read back as they are.
        if !self.stored {
            validate::check_safe_integers(&v, "$.args")?;
        }
        match v {
            Value::Array(a) => Ok(a),
            other => Err(Field::new(&other, "$.args", "args").refuse("must be a JSON array")),
        }
    }

    fn queue(&mut self) -> Result<QueueName, OjsError> {
        match self.take(&["queue"]) {
            None => Ok(QueueName::default_queue()),
            Some((p, v)) => QueueName::parse(Field::new(&v, &p, "queue").str()?),
        }
    }

    /// `options.metadata` is the name the conformance suite uses for `meta`.
    fn meta(&mut self) -> Result<Map<String, Value>, OjsError> {
        let Some((p, v)) = self.take(&["meta", "metadata"]) else {
            return Ok(Map::new());
        };
        let m = Field::new(&v, &p, "meta").object()?;
        validate::limit_size(&v, validate::MAX_META_BYTES, &p)?;
        if !self.stored {
            validate::check_safe_integers(&v, &p)?;
            crate::tenant::check_meta(m, &p)?;
        }
        Ok(m.clone())
    }

    fn priority(&mut self) -> Result<i32, OjsError> {
        let Some((p, v)) = self.take(&["priority"]) else {
            return Ok(0);
        };
        v.as_i64()
            .filter(|n| (MIN_PRIORITY..=MAX_PRIORITY).contains(n))
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| {
                Field::new(&v, &p, "priority").refuse(&format!(
                    "must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}"
                ))
            })
    }

    /// `ms_key` in milliseconds, else `secs_key` in seconds; both are checked.
    fn millis(&mut self, ms_key: &str, secs_key: &str, max: u64) -> Result<Option<u64>, OjsError> {
        let ms = millis(self.take(&[ms_key]), 1, max)?;
        let secs = millis(self.take(&[secs_key]), 1000, max)?;
        Ok(ms.or(secs))
    }

    fn unique(&mut self) -> Result<Option<Value>, OjsError> {
        let Some((p, v)) = self.take(&["unique"]) else {
            return Ok(None);
        };
        Field::new(&v, &p, "unique").object()?;
        crate::unique::UniquePolicy::from_json(&v)?;
        Ok(Some(v))
    }

    fn rate_limit(&mut self, queue: &QueueName) -> Result<Option<Value>, OjsError> {
        let Some((_, v)) = self.take(&["rate_limit"]) else {
            return Ok(None);
        };
        let policy = if self.stored {
            crate::rate_limit::RateLimitPolicy::from_stored(&v, queue.as_str())?
        } else {
            crate::rate_limit::RateLimitPolicy::from_json(&v, queue.as_str())?
        };
        Ok(Some(policy.to_json()))
    }

    fn schema(&mut self) -> Result<Option<String>, OjsError> {
        match self.take(&["schema"]) {
            None => Ok(None),
            Some((_, Value::String(s))) if !s.is_empty() => Ok(Some(s)),
            Some((p, v)) => Err(Field::new(&v, &p, "schema").refuse("must be a URI string")),
        }
    }

    fn tags(&mut self) -> Result<Vec<String>, OjsError> {
        match self.take(&["tags"]) {
            None => Ok(Vec::new()),
            Some((p, v)) => Field::new(&v, &p, "tags").strings(),
        }
    }

    /// The members left: unknown ones, kept for forward compatibility, less those the
    /// server manages (ignored on PUSH, ojs-core 5.3).
    fn extensions(mut self) -> Result<Map<String, Value>, OjsError> {
        for key in SYSTEM_MANAGED {
            self.fields.remove(*key);
        }
        validate::limit_size(
            &Value::Object(self.fields.clone()),
            validate::MAX_EXTENSION_BYTES,
            "$",
        )?;
        Ok(self.fields)
    }
}

impl NewJob {
    /// [`NewJob::from_json`], or with `stored` the lenient read-back of a stored job:
    /// a rule added since it was written (such as the reserved `queue-limit:` rate-limit
    /// key prefix) must not turn an existing job into a corrupt item.
    pub(super) fn parse(value: Value, stored: bool) -> Result<Self, OjsError> {
        let Value::Object(mut fields) = value else {
            return Err(OjsError::invalid_request(
                "the job envelope must be a JSON object",
            ));
        };
        let options = match fields.remove("options") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(Field::new(&other, "$.options", "options").refuse("must be an object"))
            }
        };
        let mut e = Envelope {
            fields,
            options,
            stored,
        };
        let id = e.id()?;
        e.specversion()?;
        let job_type = e.job_type()?;
        let args = e.args()?;
        let queue = e.queue()?;
        let meta = e.meta()?;
        let priority = e.priority()?;
        let timeout_ms = e.millis("timeout_ms", "timeout", validate::MAX_TIMEOUT_MS)?;
        let visibility_timeout_ms = e.millis(
            "visibility_timeout_ms",
            "visibility_timeout",
            validate::MAX_VISIBILITY_MS,
        )?;
        let now = time::now();
        let scheduled_at = timestamp(e.take(&["delay_until", "scheduled_at"]), now)?;
        let expires_at = timestamp(e.take(&["expires_at"]), now)?;
        let retry = match e.take(&["retry"]) {
            None => RetryPolicy::default(),
            Some((p, v)) => RetryPolicy::from_json(&v, &p)?,
        };
        let unique = e.unique()?;
        let rate_limit = e.rate_limit(&queue)?;
        let schema = e.schema()?;
        let tags = e.tags()?;
        Ok(Self {
            id,
            spec: JobSpec {
                job_type,
                queue,
                args,
                meta,
                priority,
                timeout_ms,
                visibility_timeout_ms,
                scheduled_at,
                expires_at,
                retry,
                unique,
                rate_limit,
                schema,
                tags,
                extensions: e.extensions()?,
            },
        })
    }
}

/// A duration field in units of `unit_ms`, refused above `max_ms`.
fn millis(
    field: Option<(String, Value)>,
    unit_ms: u64,
    max_ms: u64,
) -> Result<Option<u64>, OjsError> {
    let Some((p, v)) = field else {
        return Ok(None);
    };
    v.as_u64()
        .and_then(|n| n.checked_mul(unit_ms))
        .filter(|ms| *ms <= max_ms)
        .map(Some)
        .ok_or_else(|| {
            Field::new(&v, &p, &p).refuse(&format!(
                "must be a non-negative integer of at most {max_ms} ms"
            ))
        })
}

fn timestamp(
    field: Option<(String, Value)>,
    now: Timestamp,
) -> Result<Option<Timestamp>, OjsError> {
    match field {
        None => Ok(None),
        Some((p, Value::String(s))) => time::parse_at(&s, &p, now).map(Some),
        Some((p, v)) => Err(Field::new(&v, &p, &p).refuse("must be an RFC 3339 string")),
    }
}
