//! Parsing of the admin API's job filters and pages (ojs-admin-api.md §7.1, §8), and the
//! ordering and paging of what a listing found: pure functions, tested here.

use std::cmp::Ordering;

use ojs_core::tenant::{Scope, TenantId};
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobState, OjsError, QueueName};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Default and largest `per_page` (§7.1).
pub(crate) const DEFAULT_PER_PAGE: usize = 20;
pub(crate) const MAX_PER_PAGE: usize = 100;

/// A filter as the query string or a bulk body gives it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawFilter {
    pub queue: Option<String>,
    pub state: Option<String>,
    #[serde(rename = "type")]
    pub job_type: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    /// A tenant's id (`_default`: the jobs of no tenant).
    pub tenant: Option<String>,
}

/// A job type filter: exact, or a prefix (`email.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TypeMatch {
    Exact(String),
    Prefix(String),
}

impl TypeMatch {
    fn parse(raw: &str) -> TypeMatch {
        match raw.strip_suffix('*') {
            Some(prefix) => TypeMatch::Prefix(prefix.to_owned()),
            None => TypeMatch::Exact(raw.to_owned()),
        }
    }

    fn matches(&self, t: &str) -> bool {
        match self {
            TypeMatch::Exact(e) => t == e,
            TypeMatch::Prefix(p) => t.starts_with(p.as_str()),
        }
    }
}

/// A validated filter.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub queue: Option<QueueName>,
    pub state: Option<JobState>,
    pub job_type: Option<TypeMatch>,
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    /// The tenant whose jobs pass (`Any`: every tenant's).
    pub tenant: Scope,
}

fn present(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl RawFilter {
    /// Validates; `path` prefixes the field names of errors (`$.filter` for bulk bodies).
    pub(crate) fn parse(&self, path: &str) -> Result<Filter, OjsError> {
        let queue = present(&self.queue)
            .map(|q| QueueName::parse(q).map_err(|e| e.with_path(&format!("{path}.queue"))))
            .transpose()?;
        let state = present(&self.state)
            .map(|s| {
                let state = s.parse::<JobState>().map_err(|_| {
                    OjsError::invalid_request(format!("unknown state {s:?}"))
                        .with_path(&format!("{path}.state"))
                })?;
                if state == JobState::Pending {
                    return Err(OjsError::invalid_request(
                        "pending jobs (workflow steps waiting for their dependencies) are in no \
                         index and cannot be listed; list the workflow instead",
                    )
                    .with_path(&format!("{path}.state")));
                }
                Ok(state)
            })
            .transpose()?;
        let at = |v: &Option<String>, name: &str| {
            present(v)
                .map(|raw| time::parse(raw, &format!("{path}.{name}")))
                .transpose()
        };
        Ok(Filter {
            queue,
            state,
            job_type: present(&self.job_type).map(TypeMatch::parse),
            since: at(&self.since, "since")?,
            until: at(&self.until, "until")?,
            tenant: match present(&self.tenant) {
                Some(raw) => Scope::One(
                    TenantId::parse(raw).map_err(|e| e.with_path(&format!("{path}.tenant")))?,
                ),
                None => Scope::Any,
            },
        })
    }
}

impl Filter {
    /// Whether the filter needs each job's own fields (type, creation time, tenant), so
    /// that a listing must read every job it found, not only one page of them.
    pub(crate) fn needs_jobs(&self) -> bool {
        self.job_type.is_some()
            || self.since.is_some()
            || self.until.is_some()
            || self.tenant != Scope::Any
    }

    /// Whether `job` passes the filter (its current state included).
    pub(crate) fn matches(&self, job: &Job) -> bool {
        self.state.is_none_or(|s| job.status.state == s)
            && self.queue.as_ref().is_none_or(|q| &job.spec.queue == q)
            && self
                .job_type
                .as_ref()
                .is_none_or(|t| t.matches(job.spec.job_type.as_str()))
            && self.since.is_none_or(|t| job.status.created_at > t)
            && self.until.is_none_or(|t| job.status.created_at < t)
            && self.tenant.sees(job.tenant().as_ref())
    }
}

/// Sort field and order (§7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortField {
    CreatedAt,
    ScheduledAt,
    Priority,
}

/// Page, size and order of a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Paging {
    pub page: usize,
    pub per_page: usize,
    pub sort: SortField,
    pub descending: bool,
}

/// The paging part of a listing's query string.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawPaging {
    pub page: Option<String>,
    pub per_page: Option<String>,
    pub sort: Option<String>,
    pub order: Option<String>,
}

impl RawPaging {
    pub(crate) fn parse(&self) -> Result<Paging, OjsError> {
        let num = |v: &Option<String>, name: &str, default: usize, max: usize| match present(v) {
            None => Ok(default),
            Some(raw) => raw
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    OjsError::invalid_request(format!("{name} must be an integer from 1 to {max}"))
                        .with_path(&format!("$.{name}"))
                }),
        };
        let sort = match present(&self.sort) {
            None | Some("created_at") => SortField::CreatedAt,
            Some("scheduled_at") => SortField::ScheduledAt,
            Some("priority") => SortField::Priority,
            Some(other) => {
                return Err(OjsError::invalid_request(format!(
                    "sort must be created_at, scheduled_at or priority (got {other:?})"
                ))
                .with_path("$.sort"))
            }
        };
        let descending = match present(&self.order) {
            None | Some("desc") => true,
            Some("asc") => false,
            Some(other) => {
                return Err(OjsError::invalid_request(format!(
                    "order must be asc or desc (got {other:?})"
                ))
                .with_path("$.order"))
            }
        };
        Ok(Paging {
            page: num(&self.page, "page", 1, 100_000)?,
            per_page: num(&self.per_page, "per_page", DEFAULT_PER_PAGE, MAX_PER_PAGE)?,
            sort,
            descending,
        })
    }
}

impl Paging {
    /// Index of the first item of the page.
    pub(crate) fn offset(&self) -> usize {
        (self.page - 1).saturating_mul(self.per_page)
    }

    /// Whether the order needs each job's fields: ids (UUIDv7, time-ordered) give the
    /// creation order without reading the jobs.
    pub(crate) fn needs_jobs(&self) -> bool {
        self.sort != SortField::CreatedAt
    }

    /// Sorts jobs by the chosen field (ties by id), in the chosen order.
    pub(crate) fn sort(&self, jobs: &mut [Job]) {
        let key = |j: &Job| match self.sort {
            SortField::CreatedAt => (0i64, j.status.created_at.timestamp_micros()),
            SortField::ScheduledAt => (
                0,
                j.spec
                    .scheduled_at
                    .unwrap_or(j.status.created_at)
                    .timestamp_micros(),
            ),
            SortField::Priority => (i64::from(j.spec.priority), 0),
        };
        jobs.sort_by(|a, b| {
            let o = key(a).cmp(&key(b)).then_with(|| a.id.cmp(&b.id));
            if self.descending {
                o.reverse()
            } else {
                o
            }
        });
    }

    /// Orders ids by creation (UUIDv7 ids sort by their creation time).
    pub(crate) fn sort_ids<T: Ord>(&self, ids: &mut [T]) {
        ids.sort_by(|a, b| {
            let o = a.cmp(b);
            if self.descending {
                o.reverse()
            } else {
                o
            }
        });
    }

    /// The `pagination` object of a listing of `total` items.
    pub(crate) fn pagination(&self, total: usize) -> Value {
        json!({"total": total, "page": self.page, "per_page": self.per_page})
    }

    /// A listing's body: the page's `items`, and the `pagination` of `total` items.
    pub(crate) fn listing(&self, items: Vec<Value>, total: usize) -> Value {
        json!({"items": items, "pagination": self.pagination(total)})
    }

    /// The page of `jobs` (all a listing found), sorted, each as `view` shows it; and how
    /// many jobs there are.
    pub(crate) fn page_of(
        &self,
        jobs: &mut [Job],
        view: impl FnMut(&Job) -> Value,
    ) -> (Vec<Value>, usize) {
        self.sort(jobs);
        let page = jobs
            .iter()
            .skip(self.offset())
            .take(self.per_page)
            .map(view)
            .collect();
        (page, jobs.len())
    }
}

/// The list view of a job (§7.1): the summary fields, and the time fields it has.
pub(crate) fn summary(job: &Job) -> Value {
    let full = job.to_json();
    let mut out = Map::new();
    for k in [
        "id",
        "type",
        "queue",
        "state",
        "priority",
        "attempt",
        "max_attempts",
        "created_at",
        "enqueued_at",
        "scheduled_at",
        "started_at",
        "completed_at",
        "cancelled_at",
        "discarded_at",
    ] {
        if let Some(v) = full.get(k).filter(|v| !v.is_null()) {
            out.insert(k.into(), v.clone());
        }
    }
    out.insert("attempt".into(), job.status.attempt.into());
    out.insert("priority".into(), job.spec.priority.into());
    Value::Object(out)
}

/// The detail view of a job (§7.2): the full envelope, `errors` always present, and the
/// times gathered under `metadata`.
pub(crate) fn detail(job: &Job) -> Value {
    let mut full = match job.to_json() {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    full.entry("errors").or_insert_with(|| json!([]));
    if !full.contains_key(ojs_core::job::PAYLOAD_VIEW_KEY) {
        // An incomplete job (args and meta not brought back) says so, without an empty
        // `meta` that would look like its own.
        full.entry("meta").or_insert_with(|| json!({}));
    }
    full.insert("attempt".into(), job.status.attempt.into());
    let mut metadata = Map::new();
    for k in [
        "created_at",
        "enqueued_at",
        "started_at",
        "scheduled_at",
        "completed_at",
        "cancelled_at",
        "discarded_at",
    ] {
        metadata.insert(k.into(), full.get(k).cloned().unwrap_or(Value::Null));
    }
    full.insert("metadata".into(), Value::Object(metadata));
    Value::Object(full)
}

/// Orders two optional timestamps, absent first.
pub(crate) fn older(a: Option<Timestamp>, b: Timestamp) -> bool {
    a.is_some_and(|a| a.cmp(&b) == Ordering::Less)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::job::NewJob;

    fn job(t: &str, q: &str, priority: i32) -> Job {
        let new =
            NewJob::from_json(json!({"type": t, "args": [], "queue": q, "priority": priority}))
                .unwrap_or_else(|e| panic!("{e}"));
        Job::enqueue(new, time::now())
    }

    /// What a query string of one `field` gives: a [`RawFilter`] or a [`RawPaging`].
    fn one_field<T: serde::de::DeserializeOwned>(field: &str, value: &str) -> T {
        serde_json::from_value(json!({ field: value }))
            .unwrap_or_else(|e| panic!("{field}={value}: {e}"))
    }

    #[test]
    fn a_tenant_filter_passes_that_tenants_jobs_only() {
        let of = |tenant: Option<&str>| {
            let mut body = json!({"type": "t", "args": []});
            if let Some(t) = tenant {
                body["meta"] = json!({"tenant_id": t});
            }
            let new = NewJob::from_json(body).unwrap_or_else(|e| panic!("{e}"));
            Job::enqueue(new, time::now())
        };
        let filter = |raw: &str| {
            RawFilter {
                tenant: Some(raw.into()),
                ..Default::default()
            }
            .parse("$")
        };
        let acme = filter("acme").unwrap_or_else(|e| panic!("{e}"));
        assert!(acme.needs_jobs(), "a job's tenant is on the job");
        assert!(acme.matches(&of(Some("acme"))));
        assert!(!acme.matches(&of(Some("beta"))));
        assert!(!acme.matches(&of(None)));
        let default = filter("_default").unwrap_or_else(|e| panic!("{e}"));
        assert!(default.needs_jobs());
        assert!(default.matches(&of(None)));
        assert!(!default.matches(&of(Some("acme"))));
        let any = filter(" ").unwrap_or_else(|e| panic!("{e}"));
        assert!(!any.needs_jobs());
        assert!(any.matches(&of(Some("acme"))) && any.matches(&of(None)));
        let bad = filter("no tenant!").err().map(|e| e.details);
        assert!(
            bad.is_some_and(|d| Value::Object(d).to_string().contains("$.tenant")),
            "a bad tenant names its field"
        );
    }

    #[test]
    fn filters_parse_and_refuse_what_cannot_be_listed() {
        let raw = RawFilter {
            queue: Some("email".into()),
            state: Some("discarded".into()),
            job_type: Some("email.*".into()),
            since: Some("2026-01-01T00:00:00Z".into()),
            until: Some(" ".into()),
            tenant: None,
        };
        let f = raw.parse("$").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.state, Some(JobState::Discarded));
        assert_eq!(f.job_type, Some(TypeMatch::Prefix("email.".into())));
        assert!(f.since.is_some() && f.until.is_none());
        assert!(f.needs_jobs());
        assert!(!RawFilter::default()
            .parse("$")
            .unwrap_or_default()
            .needs_jobs());
        let t = "2026-01-01T00:00:00Z";
        for (field, value) in [("type", "a"), ("since", t), ("until", t)] {
            let one: RawFilter = one_field(field, value);
            assert!(one.parse("$").unwrap_or_default().needs_jobs(), "{one:?}");
        }
        let by_state = RawFilter {
            state: Some("active".into()),
            queue: Some("q".into()),
            ..Default::default()
        };
        assert!(!by_state.parse("$").unwrap_or_default().needs_jobs());
        for (field, value) in [
            ("state", "pending"),
            ("state", "done"),
            ("queue", "Bad Queue"),
            ("since", "yesterday"),
        ] {
            let bad: RawFilter = one_field(field, value);
            assert!(bad.parse("$.filter").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_filter_matches_on_every_field() {
        let j = job("email.send", "email", 0);
        let created = time::format(&j.status.created_at);
        let f = |raw: RawFilter| raw.parse("$").unwrap_or_default();
        assert!(f(RawFilter::default()).matches(&j));
        for (field, value, matches) in [
            ("type", "email.*", true),
            ("type", "email.send", true),
            ("type", "email", false),
            ("queue", "other", false),
            ("state", "active", false),
            ("state", j.status.state.as_str(), true),
            ("since", "2999-01-01T00:00:00Z", false),
            ("until", "2999-01-01T00:00:00Z", true),
            ("until", "2000-01-01T00:00:00Z", false),
            ("since", "2000-01-01T00:00:00Z", true),
            // Both bounds are strict: a job created exactly at one is out.
            ("since", created.as_str(), false),
            ("until", created.as_str(), false),
        ] {
            assert_eq!(
                f(one_field(field, value)).matches(&j),
                matches,
                "{field} {value}"
            );
        }
    }

    #[test]
    fn paging_defaults_limits_and_order() {
        let p = RawPaging::default()
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (p.page, p.per_page, p.sort, p.descending),
            (1, 20, SortField::CreatedAt, true)
        );
        assert_eq!(p.offset(), 0);
        assert!(!p.needs_jobs(), "ids give the creation order");
        let p = RawPaging {
            page: Some("3".into()),
            per_page: Some("100".into()),
            sort: Some("priority".into()),
            order: Some("asc".into()),
        }
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (p.offset(), p.sort, p.descending),
            (200, SortField::Priority, false)
        );
        assert!(p.needs_jobs());
        for (field, value) in [
            ("page", "0"),
            ("per_page", "101"),
            ("per_page", "x"),
            ("sort", "id"),
            ("order", "up"),
        ] {
            let bad: RawPaging = one_field(field, value);
            assert!(bad.parse().is_err(), "{bad:?}");
        }
        assert_eq!(
            p.pagination(7),
            json!({"total": 7, "page": 3, "per_page": 100})
        );
    }

    #[test]
    fn sorting_by_priority_and_ids() {
        let mut jobs = vec![job("a", "q", 1), job("b", "q", 5), job("c", "q", -2)];
        let p = |sort, descending| Paging {
            page: 1,
            per_page: 20,
            sort,
            descending,
        };
        p(SortField::Priority, true).sort(&mut jobs);
        let prio: Vec<i32> = jobs.iter().map(|j| j.spec.priority).collect();
        assert_eq!(prio, [5, 1, -2]);
        p(SortField::Priority, false).sort(&mut jobs);
        let prio: Vec<i32> = jobs.iter().map(|j| j.spec.priority).collect();
        assert_eq!(prio, [-2, 1, 5]);
        let mut ids = vec![2, 9, 4];
        p(SortField::CreatedAt, true).sort_ids(&mut ids);
        assert_eq!(ids, [9, 4, 2]);
        p(SortField::CreatedAt, false).sort_ids(&mut ids);
        assert_eq!(ids, [2, 4, 9]);
    }

    #[test]
    fn views_carry_the_fields_the_dashboard_reads() {
        let j = job("email.send", "email", 3);
        let s = summary(&j);
        let mut keys: Vec<&str> = s
            .as_object()
            .map_or(vec![], |o| o.keys().map(String::as_str).collect());
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "attempt",
                "created_at",
                "enqueued_at",
                "id",
                "max_attempts",
                "priority",
                "queue",
                "state",
                "type",
            ],
            "{s}"
        );
        assert_eq!(s["priority"], 3);
        let d = detail(&j);
        assert_eq!(d["errors"], json!([]));
        assert_eq!(d["metadata"]["created_at"], s["created_at"]);
        assert!(d["args"].is_array());
    }

    #[test]
    fn older_than() {
        let now = time::now();
        assert!(!older(None, now));
        assert!(older(Some(now - chrono::Duration::seconds(1)), now));
        assert!(!older(Some(now), now));
    }
}
