//! Tenants (ojs-multi-tenancy.md): every job belongs to one, named by `meta.tenant_id` or
//! the `X-OJS-Tenant` header; a job naming none belongs to the default tenant, `_default`
//! (§15.3), and is stored, indexed and counted exactly as before tenants existed.

use serde_json::{Map, Value};

use crate::error::OjsError;
use crate::ids::string_newtype;
use crate::rate_limit::{Window, MAX_CONCURRENCY};

/// The request header that names the tenant a request acts for (§5.3).
pub const TENANT_HEADER: &str = "X-OJS-Tenant";

/// The tenant of every job that names none (§15.3).
pub const DEFAULT_TENANT: &str = "_default";

/// Where a job's tenant is written in its envelope (§5.1).
pub const META_KEY: &str = "tenant_id";

/// Longest tenant id taken: it becomes part of index keys.
pub const MAX_TENANT_LEN: usize = 128;

/// A tenant other than the default one: matches `^[a-zA-Z0-9][a-zA-Z0-9._:-]*$` (§5.2),
/// at most [`MAX_TENANT_LEN`] bytes. The default tenant is `None` wherever a tenant is
/// optional, so that jobs without tenants keep their keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(String);

impl TenantId {
    /// The tenant named by `raw`: `None` for the default tenant (`_default`), an error
    /// for a name the pattern refuses.
    pub fn parse(raw: &str) -> Result<Option<Self>, OjsError> {
        if raw == DEFAULT_TENANT {
            return Ok(None);
        }
        let mut chars = raw.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
        let rest_ok =
            chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
        if !first_ok || !rest_ok || raw.len() > MAX_TENANT_LEN {
            return Err(OjsError::invalid_request(format!(
                "tenant id {:.64?} must match ^[a-zA-Z0-9][a-zA-Z0-9._:-]*$ (at most {MAX_TENANT_LEN} characters), or be {DEFAULT_TENANT}",
                raw
            )));
        }
        Ok(Some(Self(raw.to_owned())))
    }
}

string_newtype!(TenantId, "The id as written.");

/// The tenant a request acts for: one tenant (the default one included), or any, for a
/// request naming none (an operator's, or a worker serving every tenant).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Scope {
    /// Every tenant.
    #[default]
    Any,
    /// One tenant (`None`: the default tenant).
    One(Option<TenantId>),
}

impl Scope {
    /// Whether a job of `tenant` is visible to this scope.
    pub fn sees(&self, tenant: Option<&TenantId>) -> bool {
        match self {
            Scope::Any => true,
            Scope::One(t) => t.as_ref() == tenant,
        }
    }

    /// The tenant's name for messages and answers (`_default` for the default tenant).
    pub fn name(tenant: Option<&TenantId>) -> &str {
        tenant.map_or(DEFAULT_TENANT, TenantId::as_str)
    }
}

/// The tenant a job's `meta` names: `None` for the default tenant, or when `meta` names
/// none or one the rules refuse (a job stored before tenants were checked is the default
/// tenant's, where it was indexed).
pub fn of_meta(meta: &Map<String, Value>) -> Option<TenantId> {
    meta.get(META_KEY)
        .and_then(Value::as_str)
        .and_then(|raw| TenantId::parse(raw).ok().flatten())
}

/// Checks `meta.tenant_id` of a new job (`path` is where `meta` is in the request).
pub fn check_meta(meta: &Map<String, Value>, path: &str) -> Result<(), OjsError> {
    match meta.get(META_KEY) {
        None => Ok(()),
        Some(Value::String(raw)) => TenantId::parse(raw)
            .map(|_| ())
            .map_err(|e| e.with_path(&format!("{path}.{META_KEY}"))),
        Some(_) => Err(
            OjsError::invalid_request(format!("{META_KEY} must be a string"))
                .with_path(&format!("{path}.{META_KEY}")),
        ),
    }
}

/// Writes the tenant a request acts for into a new job's `meta` (§5.3): a header names
/// the tenant of a job whose `meta` names none; a `meta` naming another one is refused
/// (400). A request for any tenant leaves `meta` as it is.
pub fn adopt(scope: &Scope, meta: &mut Map<String, Value>, path: &str) -> Result<(), OjsError> {
    let Scope::One(tenant) = scope else {
        return Ok(());
    };
    if meta.contains_key(META_KEY) {
        check_meta(meta, path)?;
        if of_meta(meta).as_ref() != tenant.as_ref() {
            return Err(OjsError::invalid_request(format!(
                "meta.{META_KEY} names tenant {:.64?} but the request acts for tenant {:?} ({TENANT_HEADER})",
                meta.get(META_KEY).and_then(Value::as_str).unwrap_or_default(),
                Scope::name(tenant.as_ref()),
            ))
            .with_path(&format!("{path}.{META_KEY}")));
        }
        return Ok(());
    }
    if let Some(t) = tenant {
        meta.insert(META_KEY.into(), Value::String(t.as_str().to_owned()));
    }
    Ok(())
}

/// The `meta` of a job body where [`crate::NewJob`] reads it (`options` first), made when the
/// body has none; `None` when what is there is not an object (refused when pushed).
pub fn meta_of(body: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    let present = |o: &Map<String, Value>, k: &str| o.get(k).is_some_and(|v| !v.is_null());
    let in_options = body
        .get("options")
        .and_then(Value::as_object)
        .and_then(|o| ["meta", "metadata"].into_iter().find(|k| present(o, k)));
    if let Some(k) = in_options {
        return body
            .get_mut("options")?
            .as_object_mut()?
            .get_mut(k)?
            .as_object_mut();
    }
    let k = match ["meta", "metadata"].into_iter().find(|k| present(body, k)) {
        Some(k) => k,
        None => {
            body.insert("meta".into(), Value::Object(Map::new()));
            "meta"
        }
    };
    body.get_mut(k)?.as_object_mut()
}

/// Largest fairness weight taken.
pub const MAX_WEIGHT: u64 = 1_000;

/// How long a producer refused by a tenant limit is told to wait.
pub const RETRY_AFTER_SECS: u64 = 30;

/// An operator's settings for one tenant (§8.1, §10.1): its share of a shared queue's
/// FETCHes and its hard limits. Limits this server does not enforce are refused when
/// set, never stored to be ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantConfig {
    /// Its weight in a FETCH for any tenant (§7.2; 1 when not set).
    pub fairness_weight: Option<u64>,
    /// Most available + scheduled + retryable jobs it may have (§8.1).
    pub max_queue_depth: Option<u64>,
    /// Most scheduled jobs it may have (§8.1).
    pub max_scheduled: Option<u64>,
    /// Most of its jobs active at once, across every queue (§8.1; 0 holds all back), at
    /// most [`MAX_CONCURRENCY`]: its holders share one storage item, as a rate limit
    /// key's do.
    pub max_concurrency: Option<u32>,
    /// Most enqueues per period (§8.1), counted in a sliding window.
    pub max_enqueue_rate: Option<Window>,
}

/// Partition key part of a tenant's `max_concurrency` holders: `#` is outside both the
/// tenant and the rate limit key patterns, so no job's own key can name this item.
pub fn concurrency_key(tenant: &TenantId) -> String {
    format!("tenant#{tenant}")
}

/// Partition key part of a tenant's `max_enqueue_rate` window (see [`concurrency_key`]).
pub fn enqueue_key(tenant: &TenantId) -> String {
    format!("tenant-enqueue#{tenant}")
}

impl TenantConfig {
    /// The weight FETCH gives the tenant.
    pub fn weight(&self) -> u64 {
        self.fairness_weight.unwrap_or(1)
    }

    /// Whether an enqueue must be judged against the tenant's counts.
    pub fn limits_enqueue(&self) -> bool {
        self.max_queue_depth.is_some() || self.max_scheduled.is_some()
    }

    /// The settings of `PUT /admin/tenants/{id}`: `fairness_weight` and `limits`. A field
    /// left out keeps its value in `base` (so `PUT .../limits` changes limits only); one
    /// sent as `null` removes it.
    pub fn merged(base: &Self, body: &Value, limits_only: bool) -> Result<Self, OjsError> {
        let obj = body
            .as_object()
            .ok_or_else(|| OjsError::invalid_request("the body must be a JSON object"))?;
        let mut out = base.clone();
        let limits = if limits_only {
            Some(body)
        } else {
            if let Some(w) = obj.get("fairness_weight") {
                out.fairness_weight = bounded(w, "$.fairness_weight", 1, MAX_WEIGHT)?;
            }
            for k in ["priority_boost"] {
                if obj.get(k).is_some_and(|v| !v.is_null()) {
                    return Err(unsupported(k, &format!("$.{k}")));
                }
            }
            obj.get("limits").filter(|l| !l.is_null())
        };
        if let Some(limits) = limits {
            let l = limits.as_object().ok_or_else(|| {
                OjsError::invalid_request("limits must be an object").with_path("$.limits")
            })?;
            let at = |k: &str| {
                if limits_only {
                    format!("$.{k}")
                } else {
                    format!("$.limits.{k}")
                }
            };
            if let Some(v) = l.get("max_queue_depth") {
                out.max_queue_depth = bounded(v, &at("max_queue_depth"), 0, u64::MAX >> 11)?;
            }
            if let Some(v) = l.get("max_scheduled") {
                out.max_scheduled = bounded(v, &at("max_scheduled"), 0, u64::MAX >> 11)?;
            }
            if let Some(v) = l.get("max_concurrency") {
                out.max_concurrency =
                    bounded(v, &at("max_concurrency"), 0, u64::from(MAX_CONCURRENCY))?
                        .map(|c| u32::try_from(c).unwrap_or(MAX_CONCURRENCY));
            }
            if let Some(v) = l.get("max_enqueue_rate") {
                out.max_enqueue_rate = enqueue_rate(v, &at("max_enqueue_rate"))?;
            }
        }
        Ok(out)
    }

    /// The settings as the admin API shows them.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "fairness_weight": self.weight(),
            "limits": {
                "max_queue_depth": self.max_queue_depth,
                "max_scheduled": self.max_scheduled,
                "max_concurrency": self.max_concurrency,
                "max_enqueue_rate": self.max_enqueue_rate.map(|w| serde_json::json!({
                    "limit": w.limit,
                    "period": crate::duration::format(w.period),
                })),
            },
        })
    }
}

/// `max_enqueue_rate`: `{"limit": n, "period": "PT1M"}` (n from 1, a period longer than
/// zero and at most a day), or null.
fn enqueue_rate(v: &Value, path: &str) -> Result<Option<Window>, OjsError> {
    if v.is_null() {
        return Ok(None);
    }
    let bad = || {
        OjsError::invalid_request(
            "must be {\"limit\": a positive integer, \"period\": an ISO 8601 duration longer than zero, at most P1D}, or null",
        )
        .with_path(path)
    };
    let limit = v
        .get("limit")
        .and_then(Value::as_u64)
        .and_then(|l| u32::try_from(l).ok())
        .filter(|l| *l > 0)
        .ok_or_else(bad)?;
    let period = v
        .get("period")
        .and_then(Value::as_str)
        .and_then(crate::duration::parse)
        .filter(|p| !p.is_zero() && *p <= std::time::Duration::from_secs(86_400))
        .ok_or_else(bad)?;
    Ok(Some(Window { limit, period }))
}

fn bounded(v: &Value, path: &str, min: u64, max: u64) -> Result<Option<u64>, OjsError> {
    if v.is_null() {
        return Ok(None);
    }
    v.as_u64()
        .filter(|n| (min..=max).contains(n))
        .map(Some)
        .ok_or_else(|| {
            OjsError::invalid_request(format!("must be an integer from {min} to {max}, or null"))
                .with_path(path)
        })
}

fn unsupported(field: &str, path: &str) -> OjsError {
    OjsError::new(
        crate::error::ErrorCode::Unsupported,
        format!("{field} is not enforced by this server; it takes fairness_weight, max_queue_depth, max_scheduled, max_concurrency and max_enqueue_rate"),
    )
    .with_path(path)
}

/// The 429 of an enqueue a tenant limit refuses (§8.2), to be tried again after
/// `retry_after_secs`.
pub fn limit_exceeded(
    tenant: &str,
    limit: &str,
    current: u64,
    maximum: u64,
    retry_after_secs: u64,
) -> OjsError {
    OjsError::new(
        crate::error::ErrorCode::TenantLimitExceeded,
        format!("Tenant '{tenant}' has exceeded {limit} ({maximum})"),
    )
    .with_detail("tenant_id", tenant)
    .with_detail("limit", limit)
    .with_detail("current", current)
    .with_detail("maximum", maximum)
    .with_detail("retry_after_seconds", retry_after_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn tenant_ids_follow_the_pattern() {
        for ok in ["acme", "a", "tenant_acme-corp", "A1.b:c-d_e", "9"] {
            assert!(matches!(TenantId::parse(ok), Ok(Some(_))), "{ok}");
        }
        assert!(matches!(TenantId::parse("_default"), Ok(None)));
        let long = "a".repeat(MAX_TENANT_LEN + 1);
        for bad in [
            "",
            "-a",
            ".a",
            "_a",
            "a#b",
            "a b",
            "a/b",
            "é",
            long.as_str(),
        ] {
            assert!(TenantId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(TenantId::parse(&"a".repeat(MAX_TENANT_LEN)).is_ok());
    }

    #[test]
    fn the_header_fills_meta_and_a_conflict_is_refused() {
        let acme = Scope::One(TenantId::parse("acme").ok().flatten());
        let mut m = meta(json!({"x": 1}));
        assert!(adopt(&acme, &mut m, "$.meta").is_ok());
        assert_eq!(m.get(META_KEY), Some(&json!("acme")));
        let mut same = meta(json!({"tenant_id": "acme"}));
        assert!(adopt(&acme, &mut same, "$.meta").is_ok());
        let mut other = meta(json!({"tenant_id": "beta"}));
        let e = adopt(&acme, &mut other, "$.meta").err();
        assert_eq!(
            e.as_ref()
                .map(|e| e.details["validation_errors"][0]["path"].clone()),
            Some(json!("$.meta.tenant_id"))
        );
        // The default tenant by header: meta stays without a tenant, and naming another
        // one is still a conflict.
        let default = Scope::One(None);
        let mut m = Map::new();
        assert!(adopt(&default, &mut m, "$.meta").is_ok() && m.is_empty());
        assert!(adopt(&default, &mut meta(json!({"tenant_id": "acme"})), "$.meta").is_err());
        assert!(adopt(
            &default,
            &mut meta(json!({"tenant_id": "_default"})),
            "$.meta"
        )
        .is_ok());
        // Any tenant: meta as it is.
        let mut m = meta(json!({"tenant_id": "beta"}));
        assert!(adopt(&Scope::Any, &mut m, "$.meta").is_ok());
        assert_eq!(of_meta(&m).map(|t| t.to_string()), Some("beta".into()));
    }

    #[test]
    fn meta_tenants_are_checked_and_read() {
        assert!(check_meta(&meta(json!({"tenant_id": 5})), "$.meta").is_err());
        assert!(check_meta(&meta(json!({"tenant_id": "a b"})), "$.meta").is_err());
        assert!(check_meta(&meta(json!({"tenant_id": "ab"})), "$.meta").is_ok());
        assert!(check_meta(&meta(json!({})), "$.meta").is_ok());
        // A stored job whose tenant no longer reads is the default tenant's.
        assert_eq!(of_meta(&meta(json!({"tenant_id": "a b"}))), None);
        assert_eq!(of_meta(&meta(json!({"tenant_id": "_default"}))), None);
    }

    #[test]
    fn a_scope_sees_its_own_tenant_only() {
        let a = TenantId::parse("a").ok().flatten();
        let b = TenantId::parse("b").ok().flatten();
        assert!(Scope::Any.sees(a.as_ref()) && Scope::Any.sees(None));
        assert!(Scope::One(a.clone()).sees(a.as_ref()));
        assert!(!Scope::One(a.clone()).sees(b.as_ref()));
        assert!(!Scope::One(a).sees(None));
        assert!(Scope::One(None).sees(None));
    }

    #[test]
    fn tenant_settings_merge_and_refuse_what_is_not_enforced() {
        let base = TenantConfig::default();
        let c = TenantConfig::merged(
            &base,
            &json!({"fairness_weight": 10, "limits": {"max_queue_depth": 5}}),
            false,
        );
        let c = c.unwrap_or_default();
        assert_eq!(
            (c.weight(), c.max_queue_depth, c.max_scheduled),
            (10, Some(5), None)
        );
        assert!(c.limits_enqueue());
        // Limits only: the weight stays; null removes a limit.
        let l = TenantConfig::merged(
            &c,
            &json!({"max_scheduled": 2, "max_queue_depth": null}),
            true,
        )
        .unwrap_or_default();
        assert_eq!(
            (l.weight(), l.max_queue_depth, l.max_scheduled),
            (10, None, Some(2))
        );
        assert_eq!(TenantConfig::default().weight(), 1);
        assert!(!TenantConfig::default().limits_enqueue());
        for (bad, limits_only) in [
            (json!({"fairness_weight": 0}), false),
            (json!({"fairness_weight": 1001}), false),
            (json!({"fairness_weight": "x"}), false),
            (json!({"limits": {"max_concurrency": 101}}), false),
            (json!({"max_concurrency": -1}), true),
            (json!({"max_concurrency": "3"}), true),
            (
                json!({"max_enqueue_rate": {"limit": 0, "period": "PT1M"}}),
                true,
            ),
            (
                json!({"max_enqueue_rate": {"limit": 1, "period": "P2D"}}),
                true,
            ),
            (
                json!({"max_enqueue_rate": {"limit": 1, "period": "PT0S"}}),
                true,
            ),
            (json!({"max_enqueue_rate": {"limit": 1}}), true),
            (json!({"max_enqueue_rate": 5}), true),
            (json!({"priority_boost": 1}), false),
            (json!({"limits": 3}), false),
            (json!({"max_queue_depth": -1}), true),
            (json!([1]), false),
        ] {
            assert!(
                TenantConfig::merged(&base, &bad, limits_only).is_err(),
                "{bad}"
            );
        }
        let e = limit_exceeded("acme", "max_queue_depth", 5, 5, 7);
        assert_eq!(e.code.http_status(), 429);
        assert_eq!(e.code.as_str(), "TENANT_LIMIT_EXCEEDED");
        assert_eq!(e.details.get("maximum"), Some(&json!(5)));
        assert_eq!(e.details.get("retry_after_seconds"), Some(&json!(7)));
    }

    #[test]
    fn concurrency_and_enqueue_rate_limits_are_taken_and_shown() {
        let c = TenantConfig::merged(
            &TenantConfig::default(),
            &json!({"limits": {"max_concurrency": 0,
                               "max_enqueue_rate": {"limit": 5, "period": "PT1M"}}}),
            false,
        )
        .unwrap_or_default();
        assert_eq!(c.max_concurrency, Some(0));
        let rate = Window {
            limit: 5,
            period: std::time::Duration::from_secs(60),
        };
        assert_eq!(c.max_enqueue_rate, Some(rate));
        assert!(!c.limits_enqueue(), "a rate is not judged against counts");
        let shown = c.to_json();
        assert_eq!(shown["limits"]["max_concurrency"], json!(0));
        assert_eq!(
            shown["limits"]["max_enqueue_rate"],
            json!({"limit": 5, "period": "PT60S"})
        );
        // The largest concurrency and the longest and shortest periods are taken.
        let edge = TenantConfig::merged(
            &c,
            &json!({"max_concurrency": MAX_CONCURRENCY,
                    "max_enqueue_rate": {"limit": 1, "period": "P1D"}}),
            true,
        )
        .unwrap_or_default();
        assert_eq!(edge.max_concurrency, Some(MAX_CONCURRENCY));
        assert_eq!(
            edge.max_enqueue_rate.map(|w| w.period),
            Some(std::time::Duration::from_secs(86_400))
        );
        let short = TenantConfig::merged(
            &c,
            &json!({"max_enqueue_rate": {"limit": 1, "period": "PT0.5S"}}),
            true,
        )
        .unwrap_or_default();
        assert_eq!(
            short.max_enqueue_rate.map(|w| w.period),
            Some(std::time::Duration::from_millis(500))
        );
        // Null removes them.
        let none = TenantConfig::merged(
            &c,
            &json!({"max_concurrency": null, "max_enqueue_rate": null}),
            true,
        )
        .unwrap_or_default();
        assert_eq!((none.max_concurrency, none.max_enqueue_rate), (None, None));
        let acme = TenantId::parse("acme").ok().flatten();
        let keys = acme.map(|t| (concurrency_key(&t), enqueue_key(&t)));
        assert_eq!(
            keys,
            Some(("tenant#acme".into(), "tenant-enqueue#acme".into()))
        );
    }

    #[test]
    fn a_bodys_meta_is_found_where_a_job_reads_it() {
        let body = |v: Value| v.as_object().cloned().unwrap_or_default();
        let mut in_options = body(json!({"meta": {"a": 1}, "options": {"meta": {"b": 2}}}));
        meta_of(&mut in_options).map(|m| m.insert("t".into(), json!(1)));
        assert_eq!(in_options["options"]["meta"], json!({"b": 2, "t": 1}));
        assert_eq!(in_options["meta"], json!({"a": 1}));
        let mut top = body(json!({"metadata": {"a": 1}, "meta": null}));
        meta_of(&mut top).map(|m| m.insert("t".into(), json!(1)));
        assert_eq!(top["metadata"], json!({"a": 1, "t": 1}));
        let mut none = body(json!({"type": "x"}));
        meta_of(&mut none).map(|m| m.insert("t".into(), json!(1)));
        assert_eq!(none["meta"], json!({"t": 1}));
        assert!(meta_of(&mut body(json!({"meta": 3}))).is_none());
    }

    #[test]
    fn names_bounds_and_views() {
        let acme = TenantId::parse("acme").ok().flatten();
        assert_eq!(Scope::name(acme.as_ref()), "acme");
        assert_eq!(Scope::name(None), DEFAULT_TENANT);
        let big = u64::MAX >> 11;
        let c = TenantConfig::merged(
            &TenantConfig::default(),
            &json!({"max_queue_depth": big, "max_scheduled": big}),
            true,
        );
        assert_eq!(
            c.map(|c| (c.max_queue_depth, c.max_scheduled)).ok(),
            Some((Some(big), Some(big)))
        );
        assert!(TenantConfig::merged(
            &TenantConfig::default(),
            &json!({"max_queue_depth": big + 1}),
            true
        )
        .is_err());
        assert!(TenantConfig::merged(
            &TenantConfig::default(),
            &json!({"max_scheduled": big + 1}),
            true
        )
        .is_err());
        let view = TenantConfig {
            fairness_weight: None,
            max_queue_depth: Some(3),
            max_scheduled: None,
            ..TenantConfig::default()
        }
        .to_json();
        assert_eq!(
            view,
            json!({"fairness_weight": 1, "limits": {"max_queue_depth": 3, "max_scheduled": null,
                   "max_concurrency": null, "max_enqueue_rate": null}})
        );
    }
}
