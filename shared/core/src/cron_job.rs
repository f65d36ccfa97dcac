//! Cron registrations (ojs-cron.md): parsing and validation of `POST /ojs/v1/cron`, the
//! overlap policies, and the job each occurrence enqueues.

use serde_json::{json, Map, Value};

use crate::cron::CronSchedule;
use crate::error::OjsError;
use crate::fields::{self, Fields};
use crate::job::NewJob;
use crate::time::{self, Timestamp};

/// Longest accepted cron name.
pub const MAX_NAME_LEN: usize = 255;

/// What happens when an occurrence is due while the previous job has not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapPolicy {
    /// Skip the occurrence (the default).
    Skip,
    /// Enqueue regardless.
    Allow,
    /// Cancel the previous job, then enqueue.
    CancelPrevious,
    /// Enqueue now, but the new job waits (`pending`) until the previous one finishes.
    Enqueue,
}

/// What a due occurrence does ([`OverlapPolicy::occurrence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurrence {
    /// Nothing is enqueued.
    Skip,
    /// A job is enqueued.
    Enqueue,
    /// The previous job is cancelled, then a job is enqueued.
    CancelPreviousAndEnqueue,
    /// A job is enqueued `pending`, released when the previous one finishes.
    EnqueueBehindPrevious,
}

impl OverlapPolicy {
    /// What an occurrence does when the previous job is (or is not) still unfinished.
    pub fn occurrence(self, previous_unfinished: bool) -> Occurrence {
        match (self, previous_unfinished) {
            (_, false) | (Self::Allow, true) => Occurrence::Enqueue,
            (Self::Skip, true) => Occurrence::Skip,
            (Self::CancelPrevious, true) => Occurrence::CancelPreviousAndEnqueue,
            (Self::Enqueue, true) => Occurrence::EnqueueBehindPrevious,
        }
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Allow => "allow",
            Self::CancelPrevious => "cancel_previous",
            Self::Enqueue => "enqueue",
        }
    }

    fn parse(raw: &str) -> Result<Self, OjsError> {
        match raw {
            "skip" => Ok(Self::Skip),
            "allow" => Ok(Self::Allow),
            "cancel_previous" => Ok(Self::CancelPrevious),
            "enqueue" => Ok(Self::Enqueue),
            other => Err(OjsError::invalid_request(format!(
                "overlap_policy must be skip, allow, cancel_previous or enqueue, got {other:?}"
            ))
            .with_path("$.overlap_policy")),
        }
    }
}

/// A validated cron registration.
#[derive(Debug, Clone)]
pub struct CronJob {
    /// Unique name, `[a-z0-9][a-z0-9-.]*`.
    pub name: String,
    /// The schedule and its time zone.
    pub schedule: CronSchedule,
    /// Overlap handling.
    pub overlap: OverlapPolicy,
    /// Whether occurrences fire.
    pub enabled: bool,
    /// Free text.
    pub description: Option<String>,
    /// The PUSH body each occurrence enqueues (validated once here).
    pub template: Map<String, Value>,
}

/// The job template: `job_template` (or `job`), else the job's fields beside the
/// schedule's (the spec's shape).
fn template_of(body: &Map<String, Value>) -> Result<Map<String, Value>, OjsError> {
    match body.get("job_template").or_else(|| body.get("job")) {
        Some(Value::Object(t)) => Ok(t.clone()),
        Some(_) => {
            Err(OjsError::invalid_request("job_template must be an object")
                .with_path("$.job_template"))
        }
        None => Ok(["type", "args", "options", "meta"]
            .into_iter()
            .filter_map(|key| Some((key.to_owned(), body.get(key)?.clone())))
            .collect()),
    }
}

impl CronJob {
    /// Gives the template's jobs the tenant the registering request acts for
    /// (ojs-multi-tenancy.md §5.3, as for a PUSH): written into the template's `meta`
    /// when it names none, 400 when it names another.
    pub fn adopt_tenant(&mut self, scope: &crate::tenant::Scope) -> Result<(), OjsError> {
        match crate::tenant::meta_of(&mut self.template) {
            Some(meta) => crate::tenant::adopt(scope, meta, "$.job_template.meta"),
            None => Ok(()),
        }
    }

    /// Parses a registration. Accepts the spec's shape (`cron`, `type`, `args`, `options`)
    /// and the conformance suite's (`expression`, `job_template {type, args, options}`).
    pub fn from_json(body: Value) -> Result<Self, OjsError> {
        let body = fields::body(body, "cron registration")?;
        let f = Fields::new(&body, "$");
        let name = match f.present("name")? {
            Value::String(n) if valid_name(n) => n.clone(),
            _ => {
                return Err(f.refuse(
                    "name",
                    &format!("must match [a-z0-9][a-z0-9-.]* (max {MAX_NAME_LEN} chars)"),
                ))
            }
        };
        let Some(Value::String(expression)) = body.get("expression").or_else(|| body.get("cron"))
        else {
            return Err(OjsError::invalid_request(
                "expression (or cron) must be a cron expression string",
            )
            .with_path("$.expression"));
        };
        let schedule = CronSchedule::parse(expression, f.str("timezone")?).map_err(|e| {
            OjsError::invalid_request(format!("invalid cron schedule: {e}"))
                .with_path("$.expression")
        })?;
        let overlap = match f.str("overlap_policy")? {
            None => OverlapPolicy::Skip,
            Some(p) => OverlapPolicy::parse(p)?,
        };
        let enabled = f.bool("enabled")?.unwrap_or(true);
        let description = f.string("description")?;
        let mut template = template_of(&body)?;
        template
            .entry("args")
            .or_insert_with(|| Value::Array(Vec::new()));
        let cron = Self {
            name,
            schedule,
            overlap,
            enabled,
            description,
            template,
        };
        // Validate the template as every occurrence will be pushed, with the meta keys each
        // one adds (at their longest), so a registration accepted now can always fire.
        cron.job_for(&time::max()).map_err(|e| {
            OjsError::new(e.code.nested(), format!("job_template: {}", e.message))
                .with_path("$.job_template")
        })?;
        Ok(cron)
    }

    /// What a new registration must also meet, beyond what a stored one is read with:
    /// occurrences are deduplicated by `overlap_policy`, and a unique policy beside it is
    /// refused rather than stored and ignored (README, "Deliberate choices"; a
    /// registration stored before this rule keeps firing, its `unique` unenforced).
    pub fn check_new(&self) -> Result<(), OjsError> {
        let job = self.job_for(&time::max())?;
        if job.spec.unique.is_some() {
            return Err(OjsError::invalid_request(
                "job_template: a cron template takes no unique policy; overlap_policy (skip, allow, cancel_previous, enqueue) decides what an occurrence does while the last one runs",
            )
            .with_path("$.job_template.unique"));
        }
        Ok(())
    }

    /// The PUSH body for the occurrence due at `fire_time`: the template with
    /// `meta.cron_name` and `meta.cron_triggered_at` added for overlap tracking.
    pub fn job_for(&self, fire_time: &Timestamp) -> Result<NewJob, OjsError> {
        let mut body = self.template.clone();
        let meta = body
            .entry("meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = meta {
            m.insert("cron_name".into(), self.name.clone().into());
            m.insert("cron_triggered_at".into(), time::format(fire_time).into());
        }
        NewJob::from_json(Value::Object(body))
    }

    /// The stored/echoed registration (without system-managed fields).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("name".into(), self.name.clone().into());
        out.insert("expression".into(), self.schedule.expression().into());
        out.insert("cron".into(), self.schedule.expression().into());
        out.insert("timezone".into(), self.schedule.timezone().into());
        out.insert("overlap_policy".into(), self.overlap.as_str().into());
        out.insert("enabled".into(), self.enabled.into());
        if let Some(d) = &self.description {
            out.insert("description".into(), d.clone().into());
        }
        out.insert("job_template".into(), Value::Object(self.template.clone()));
        out
    }
}

/// Whether `name` is a valid registration name (`[a-z0-9][a-z0-9-.]*`, at most
/// `MAX_NAME_LEN` characters): no other name can be registered.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.len() <= MAX_NAME_LEN
}

/// The JSON of a registration plus its system-managed fields.
pub fn view(
    cron: &CronJob,
    created_at: &str,
    next_run_at: Option<&Timestamp>,
    last_run_at: Option<&str>,
    run_count: u64,
) -> Value {
    let mut out = cron.to_json();
    out.insert("created_at".into(), created_at.into());
    out.insert(
        "next_run_at".into(),
        next_run_at
            .filter(|_| cron.enabled)
            .map_or(Value::Null, |t| time::format(t).into()),
    );
    out.insert(
        "last_run_at".into(),
        last_run_at.map_or(Value::Null, Value::from),
    );
    out.insert("run_count".into(), json!(run_count));
    out.insert(
        "status".into(),
        json!(if cron.enabled { "active" } else { "paused" }),
    );
    // The binding (§13.1) and the SDKs read the job's fields beside the schedule.
    if let Some(Value::Object(template)) = out.get("job_template").cloned() {
        for key in ["type", "args", "options", "meta"] {
            if let Some(v) = template.get(key) {
                out.entry(key.to_owned()).or_insert_with(|| v.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_occurrence_follows_its_overlap_policy_only_while_the_previous_job_runs() {
        use Occurrence::*;
        for policy in [
            OverlapPolicy::Skip,
            OverlapPolicy::Allow,
            OverlapPolicy::CancelPrevious,
            OverlapPolicy::Enqueue,
        ] {
            assert_eq!(policy.occurrence(false), Enqueue, "{policy:?}");
        }
        assert_eq!(OverlapPolicy::Skip.occurrence(true), Skip);
        assert_eq!(OverlapPolicy::Allow.occurrence(true), Enqueue);
        assert_eq!(
            OverlapPolicy::CancelPrevious.occurrence(true),
            CancelPreviousAndEnqueue
        );
        assert_eq!(
            OverlapPolicy::Enqueue.occurrence(true),
            EnqueueBehindPrevious
        );
    }

    #[test]
    fn both_request_shapes_parse() {
        let suite = CronJob::from_json(json!({"name": "a-b", "expression": "*/5 * * * *",
            "job_template": {"type": "x.y", "args": [1], "options": {"queue": "q"}}}));
        let suite = suite.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(suite.overlap, OverlapPolicy::Skip);
        assert!(suite.enabled);
        let spec = CronJob::from_json(
            json!({"name": "daily-report", "cron": "0 9 * * *", "timezone": "America/New_York",
            "type": "report.generate", "args": [], "options": {"queue": "reports"}, "overlap_policy": "allow"}),
        );
        let spec = spec.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.schedule.timezone(), "America/New_York");
        assert_eq!(spec.overlap, OverlapPolicy::Allow);
    }

    #[test]
    fn invalid_registrations_are_rejected() {
        for bad in [
            json!({"expression": "* * * * *", "job_template": {"type": "a"}}),
            json!({"name": "Bad", "expression": "* * * * *", "job_template": {"type": "a"}}),
            json!({"name": "a", "expression": "not a valid cron", "job_template": {"type": "a"}}),
            json!({"name": "a", "expression": "99 25 32 13 8", "job_template": {"type": "a"}}),
            json!({"name": "a", "expression": "* * * * *", "timezone": "Mars/Olympus", "job_template": {"type": "a"}}),
            json!({"name": "a", "expression": "* * * * *", "job_template": {"type": "Bad Type"}}),
            json!({"name": "a", "expression": "* * * * *", "overlap_policy": "sometimes", "job_template": {"type": "a"}}),
        ] {
            assert!(CronJob::from_json(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn occurrences_carry_the_cron_name() {
        let c = CronJob::from_json(
            json!({"name": "tick", "expression": "* * * * *", "job_template": {"type": "t.t", "meta": {"k": 1}}}),
        );
        let c = c.unwrap_or_else(|e| panic!("{e}"));
        let job = c.job_for(&time::now()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(job.spec.meta.get("cron_name"), Some(&json!("tick")));
        assert_eq!(job.spec.meta.get("k"), Some(&json!(1)));
    }

    #[test]
    fn a_template_that_could_not_fire_is_refused_at_registration() {
        // Meta that fits PUSH's 64 KiB alone but not with cron_name and cron_triggered_at:
        // refused as PUSH would refuse the occurrence.
        let pad = "x".repeat(crate::validate::MAX_META_BYTES - 20);
        let too_big = CronJob::from_json(json!({"name": "big", "expression": "@every 2s",
            "job_template": {"type": "a.b", "meta": {"pad": pad}}}));
        assert_eq!(
            too_big.err().map(|e| e.code),
            Some(crate::ErrorCode::EnvelopeTooLarge)
        );
        let ok = CronJob::from_json(json!({"name": "small", "expression": "@every 2s",
            "job_template": {"type": "a.b", "meta": {"pad": "x"}}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(ok.job_for(&time::max()).is_ok());
    }
}
