//! API key scopes and the one table of what every route needs ([`ROUTES`]).
//!
//! A route needs one [`Need`], decided by what it does, not by its path prefix: sending a
//! queue's jobs or every event somewhere (push endpoints, webhook subscriptions), cron
//! registrations, schemas, pausing a queue and its limits are configuration, which the
//! data-plane scopes never grant (ojs-admin-api.md §13.1 gives `ojs:data:write` to
//! "enqueue, ack, fail"). A key holds [`Scope`]s, and each scope grants a set of needs:
//!
//! | scope | grants |
//! |---|---|
//! | `ojs:data:read` | reading jobs, workflows, queues, cron and schemas, the events |
//! | `ojs:data:enqueue` | PUSH, batch PUSH, workflows, CANCEL, dead letter retry and delete |
//! | `ojs:data:process` | FETCH, ACK, FAIL, heartbeats, progress, checkpoints (and Cloudq reserve and delete) |
//! | `ojs:data:write` | both of the above (what every key had before the split) |
//! | `ojs:config:write` | configuration: push endpoints, webhooks, cron, schemas, pause/resume, limits, worker directives (and reading push endpoints and webhooks) |
//! | `ojs:admin:read` | GET under `/ojs/v1/admin/`, reading push endpoints and webhooks |
//! | `ojs:admin:write` | the other admin writes, and everything `ojs:config:write` grants |
//! | `ojs:admin:purge` | purges and bulk delete |
//!
//! A key stored without scopes (every key made before scopes existed) is a data key:
//! `ojs:data:read` and `ojs:data:write`, so it keeps enqueueing and working but no longer
//! configures anything (README, "API keys and scopes").
//!
//! The same table serves the local check ([`check`], in the response layer, before the
//! body is read), the AWS authorizer (`crate::authorizer`), the router's guard (a path
//! the table does not list answers 500, whatever the auth mode, so every test that calls
//! a new route finds it), and the tests that hold it against the router's source (every
//! method of every route), the gateway's routes in `infra/template.yaml` and the README.

use axum::http::Method;
use ojs_core::{ErrorCode, OjsError};

/// One scope a key can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// GET under `/ojs/v1/admin/`, and reading configuration.
    AdminRead,
    /// The other admin writes, and configuration.
    AdminWrite,
    /// Purge and bulk delete.
    AdminPurge,
    /// Data-plane reads.
    DataRead,
    /// Enqueue and process (the spec's data-plane writes).
    DataWrite,
    /// Enqueue only: what a producer needs.
    DataEnqueue,
    /// Process only: what a worker needs.
    DataProcess,
    /// Configuration without the rest of the admin API.
    ConfigWrite,
}

/// What a route does, which decides the scope it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Discovery and liveness (manifest, health): no key at all.
    Public,
    /// Reading jobs, workflows, queues, cron, schemas, events.
    DataRead,
    /// Creating, cancelling and re-enqueueing jobs.
    Enqueue,
    /// Fetching, acknowledging, failing, heartbeats.
    Process,
    /// Reading where jobs and events are sent (push endpoints, webhooks).
    ConfigRead,
    /// Deciding where jobs and events go and how a queue runs.
    ConfigWrite,
    /// Admin reads.
    AdminRead,
    /// Admin writes.
    AdminWrite,
    /// Destroying jobs for good.
    AdminPurge,
}

impl Need {
    /// The scope to name in a refusal and in the README: the narrowest that grants it.
    pub fn scope(self) -> Option<Scope> {
        match self {
            Need::Public => None,
            Need::DataRead => Some(Scope::DataRead),
            Need::Enqueue => Some(Scope::DataEnqueue),
            Need::Process => Some(Scope::DataProcess),
            Need::ConfigRead => Some(Scope::AdminRead),
            Need::ConfigWrite => Some(Scope::ConfigWrite),
            Need::AdminRead => Some(Scope::AdminRead),
            Need::AdminWrite => Some(Scope::AdminWrite),
            Need::AdminPurge => Some(Scope::AdminPurge),
        }
    }

    /// Every scope that grants it, by wire name (for the 403's details).
    pub fn granted_by(self) -> Vec<&'static str> {
        Scope::ALL
            .into_iter()
            .filter(|s| s.grants(self))
            .map(Scope::as_str)
            .collect()
    }
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 8] = [
        Scope::AdminRead,
        Scope::AdminWrite,
        Scope::AdminPurge,
        Scope::DataRead,
        Scope::DataWrite,
        Scope::DataEnqueue,
        Scope::DataProcess,
        Scope::ConfigWrite,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::AdminRead => "ojs:admin:read",
            Scope::AdminWrite => "ojs:admin:write",
            Scope::AdminPurge => "ojs:admin:purge",
            Scope::DataRead => "ojs:data:read",
            Scope::DataWrite => "ojs:data:write",
            Scope::DataEnqueue => "ojs:data:enqueue",
            Scope::DataProcess => "ojs:data:process",
            Scope::ConfigWrite => "ojs:config:write",
        }
    }

    /// Parses a wire name.
    pub fn parse(raw: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// Whether holding this scope grants `need`.
    pub fn grants(self, need: Need) -> bool {
        match self {
            Scope::AdminRead => matches!(need, Need::AdminRead | Need::ConfigRead),
            Scope::AdminWrite => matches!(need, Need::AdminWrite | Need::ConfigWrite),
            Scope::AdminPurge => need == Need::AdminPurge,
            Scope::DataRead => need == Need::DataRead,
            Scope::DataWrite => matches!(need, Need::Enqueue | Need::Process),
            Scope::DataEnqueue => need == Need::Enqueue,
            Scope::DataProcess => need == Need::Process,
            Scope::ConfigWrite => matches!(need, Need::ConfigWrite | Need::ConfigRead),
        }
    }

    fn bit(self) -> u16 {
        match self {
            Scope::AdminRead => 1,
            Scope::AdminWrite => 1 << 1,
            Scope::AdminPurge => 1 << 2,
            Scope::DataRead => 1 << 3,
            Scope::DataWrite => 1 << 4,
            Scope::DataEnqueue => 1 << 5,
            Scope::DataProcess => 1 << 6,
            Scope::ConfigWrite => 1 << 7,
        }
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u16);

impl Scopes {
    /// The scopes of a key stored without any: data read and write.
    pub const DATA: Scopes = Scopes(0b1_1000);

    /// The set of `scopes`.
    pub fn of(scopes: &[Scope]) -> Scopes {
        Scopes(scopes.iter().fold(0, |acc, s| acc | s.bit()))
    }

    /// The scopes of a stored key: its list, or [`Scopes::DATA`] when it has none
    /// (`None`). Unknown names are ignored (a key cannot gain anything from them).
    pub fn of_stored(names: Option<&[String]>) -> Scopes {
        match names {
            None => Scopes::DATA,
            Some(names) => Scopes::of(
                &names
                    .iter()
                    .filter_map(|n| Scope::parse(n))
                    .collect::<Vec<_>>(),
            ),
        }
    }

    /// Parses a comma- or space-separated list (the `ojs-keys` flag, the authorizer
    /// context); an unknown name is an error naming it.
    pub fn parse_list(raw: &str) -> Result<Scopes, String> {
        let mut out = Vec::new();
        for name in raw
            .split([',', ' '])
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            out.push(Scope::parse(name).ok_or_else(|| {
                format!(
                    "unknown scope {name:?}; scopes are {}",
                    Scope::ALL.map(Scope::as_str).join(", ")
                )
            })?);
        }
        Ok(Scopes::of(&out))
    }

    /// Whether `scope` is in the set.
    pub fn has(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    /// Whether some scope of the set grants `need` (a public route needs none).
    pub fn allow(self, need: Need) -> bool {
        need == Need::Public
            || Scope::ALL
                .into_iter()
                .any(|s| self.has(s) && s.grants(need))
    }

    /// The names, in [`Scope::ALL`] order.
    pub fn names(self) -> Vec<&'static str> {
        Scope::ALL
            .into_iter()
            .filter(|s| self.has(*s))
            .map(Scope::as_str)
            .collect()
    }
}

/// One route of the HTTP API and what it needs. `path` is written as the router writes
/// it: `{name}` is one segment, `{*name}` the rest of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteScope {
    /// `GET`, `POST`, `PUT`, `PATCH` or `DELETE` (HEAD is served as GET).
    pub method: &'static str,
    /// The route's pattern.
    pub path: &'static str,
    /// What it needs.
    pub need: Need,
}

const fn r(method: &'static str, path: &'static str, need: Need) -> RouteScope {
    RouteScope { method, path, need }
}

/// Every route the server serves and what it needs; README, "API keys and scopes",
/// prints the same table. A path missing here answers 500 (see the module docs).
pub const ROUTES: &[RouteScope] = &[
    // Discovery and liveness.
    r("GET", "/ojs/manifest", Need::Public),
    r("GET", "/ojs/v1/health", Need::Public),
    r("GET", "/health", Need::Public),
    r("GET", "/ready", Need::Public),
    r("GET", "/metrics", Need::AdminRead),
    r("GET", "/ojs/v1/events", Need::DataRead),
    // Producers.
    r("POST", "/ojs/v1/jobs", Need::Enqueue),
    r("POST", "/ojs/v1/jobs/batch", Need::Enqueue),
    r("GET", "/ojs/v1/jobs/{id}", Need::DataRead),
    r("GET", "/ojs/v1/jobs/{id}/progress", Need::DataRead),
    r("DELETE", "/ojs/v1/jobs/{id}", Need::Enqueue),
    r("POST", "/ojs/v1/workflows", Need::Enqueue),
    r("GET", "/ojs/v1/workflows/{id}", Need::DataRead),
    r("DELETE", "/ojs/v1/workflows/{id}", Need::Enqueue),
    r("GET", "/ojs/v1/dead-letter", Need::DataRead),
    r("POST", "/ojs/v1/dead-letter/{id}/retry", Need::Enqueue),
    r("DELETE", "/ojs/v1/dead-letter/{id}", Need::Enqueue),
    r("POST", "/cloudq/{queue}", Need::Enqueue),
    r("POST", "/{queue}", Need::Enqueue),
    // Workers.
    r("POST", "/ojs/v1/workers/fetch", Need::Process),
    r("POST", "/ojs/v1/workers/ack", Need::Process),
    r("POST", "/ojs/v1/jobs/{id}/ack", Need::Process),
    r("POST", "/ojs/v1/workers/nack", Need::Process),
    r("POST", "/ojs/v1/workers/heartbeat", Need::Process),
    r("POST", "/ojs/v1/workers/beat", Need::Process),
    r("GET", "/ojs/v1/workers/{id}/health", Need::Process),
    r("POST", "/ojs/v1/workers/progress", Need::Process),
    r("PUT", "/ojs/v1/jobs/{id}/progress", Need::Process),
    // ojs-durable-execution.md: a worker saves, reads and clears its job's checkpoint.
    r("PUT", "/ojs/v1/jobs/{id}/checkpoint", Need::Process),
    r("POST", "/ojs/v1/jobs/{id}/checkpoint", Need::Process),
    r("GET", "/ojs/v1/jobs/{id}/checkpoint", Need::Process),
    r("DELETE", "/ojs/v1/jobs/{id}/checkpoint", Need::Process),
    r("GET", "/cloudq/{queue}", Need::Process),
    r("DELETE", "/cloudq/{queue}/{id}", Need::Process),
    r("GET", "/{queue}", Need::Process),
    r("DELETE", "/{queue}/{id}", Need::Process),
    // Reading queues, cron and schemas.
    r("GET", "/ojs/v1/queues", Need::DataRead),
    r("GET", "/ojs/v1/queues/{name}", Need::DataRead),
    r("GET", "/ojs/v1/queues/{name}/stats", Need::DataRead),
    r("GET", "/ojs/v1/cron", Need::DataRead),
    r("GET", "/ojs/v1/rate-limits/{key}", Need::DataRead),
    r("GET", "/ojs/v1/schemas", Need::DataRead),
    r("GET", "/ojs/v1/schemas/{*uri}", Need::DataRead),
    // Configuration.
    r("POST", "/ojs/v1/queues/{name}/pause", Need::ConfigWrite),
    r("POST", "/ojs/v1/queues/{name}/resume", Need::ConfigWrite),
    r("POST", "/ojs/v1/cron", Need::ConfigWrite),
    r("DELETE", "/ojs/v1/cron/{name}", Need::ConfigWrite),
    r("POST", "/ojs/v1/schemas", Need::ConfigWrite),
    r("DELETE", "/ojs/v1/schemas/{*uri}", Need::ConfigWrite),
    r("GET", "/ojs/v1/push/endpoints", Need::ConfigRead),
    r("POST", "/ojs/v1/push/endpoints", Need::ConfigWrite),
    r("GET", "/ojs/v1/push/endpoints/{id}", Need::ConfigRead),
    r("DELETE", "/ojs/v1/push/endpoints/{id}", Need::ConfigWrite),
    r("GET", "/ojs/v1/webhooks/subscriptions", Need::ConfigRead),
    r("POST", "/ojs/v1/webhooks/subscriptions", Need::ConfigWrite),
    r(
        "GET",
        "/ojs/v1/webhooks/subscriptions/{id}",
        Need::ConfigRead,
    ),
    r(
        "PATCH",
        "/ojs/v1/webhooks/subscriptions/{id}",
        Need::ConfigWrite,
    ),
    r(
        "DELETE",
        "/ojs/v1/webhooks/subscriptions/{id}",
        Need::ConfigWrite,
    ),
    r(
        "POST",
        "/ojs/v1/webhooks/subscriptions/{id}/rotate-secret",
        Need::ConfigWrite,
    ),
    r(
        "POST",
        "/ojs/v1/webhooks/subscriptions/{id}/test",
        Need::ConfigWrite,
    ),
    r(
        "GET",
        "/ojs/v1/webhooks/subscriptions/{id}/deliveries",
        Need::ConfigRead,
    ),
    r("GET", "/ojs/v1/webhooks/deliveries", Need::ConfigRead),
    r("GET", "/ojs/v1/webhooks/deliveries/{id}", Need::ConfigRead),
    r(
        "POST",
        "/ojs/v1/webhooks/deliveries/{id}/retry",
        Need::ConfigWrite,
    ),
    r(
        "POST",
        "/ojs/v1/admin/queues/{name}/pause",
        Need::ConfigWrite,
    ),
    r(
        "POST",
        "/ojs/v1/admin/queues/{name}/resume",
        Need::ConfigWrite,
    ),
    r(
        "PUT",
        "/ojs/v1/admin/queues/{name}/config",
        Need::ConfigWrite,
    ),
    r(
        "PUT",
        "/ojs/v1/admin/queues/{name}/rate-limit",
        Need::ConfigWrite,
    ),
    r(
        "DELETE",
        "/ojs/v1/admin/queues/{name}/rate-limit",
        Need::ConfigWrite,
    ),
    r(
        "POST",
        "/ojs/v1/admin/workers/{id}/{directive}",
        Need::ConfigWrite,
    ),
    // The admin API.
    r("GET", "/ojs/v1/admin/stats", Need::AdminRead),
    r("GET", "/ojs/v1/admin/stats/history", Need::AdminRead),
    r("GET", "/ojs/v1/admin/queues", Need::AdminRead),
    r("GET", "/ojs/v1/admin/queues/{name}", Need::AdminRead),
    r(
        "POST",
        "/ojs/v1/admin/queues/{name}/recount",
        Need::AdminWrite,
    ),
    r(
        "DELETE",
        "/ojs/v1/admin/queues/{name}/jobs",
        Need::AdminPurge,
    ),
    r("GET", "/ojs/v1/admin/jobs", Need::AdminRead),
    r("GET", "/ojs/v1/admin/jobs/{id}", Need::AdminRead),
    r("PATCH", "/ojs/v1/admin/jobs/{id}", Need::AdminWrite),
    r("POST", "/ojs/v1/admin/jobs/{id}/retry", Need::AdminWrite),
    r("POST", "/ojs/v1/admin/jobs/{id}/cancel", Need::AdminWrite),
    r("POST", "/ojs/v1/admin/jobs/bulk/delete", Need::AdminPurge),
    r("POST", "/ojs/v1/admin/jobs/bulk/{action}", Need::AdminWrite),
    r("GET", "/ojs/v1/admin/workers", Need::AdminRead),
    r("DELETE", "/ojs/v1/admin/workers/{id}", Need::AdminWrite),
    r("GET", "/ojs/v1/admin/dead-letter", Need::AdminRead),
    r("DELETE", "/ojs/v1/admin/dead-letter", Need::AdminPurge),
    r("GET", "/ojs/v1/admin/dead-letter/stats", Need::AdminRead),
    r("POST", "/ojs/v1/admin/dead-letter/retry", Need::AdminWrite),
    r(
        "POST",
        "/ojs/v1/admin/dead-letter/{id}/retry",
        Need::AdminWrite,
    ),
    r("DELETE", "/ojs/v1/admin/dead-letter/{id}", Need::AdminWrite),
    r("GET", "/ojs/v1/admin/system/maintenance", Need::AdminRead),
    r("POST", "/ojs/v1/admin/system/maintenance", Need::AdminWrite),
    r("GET", "/ojs/v1/admin/system/config", Need::AdminRead),
    r("GET", "/ojs/v1/admin/schemas", Need::AdminRead),
    r("GET", "/ojs/v1/admin/schemas/{type}", Need::AdminRead),
    r(
        "GET",
        "/ojs/v1/admin/schemas/{type}/versions",
        Need::AdminRead,
    ),
    r(
        "GET",
        "/ojs/v1/admin/schemas/{type}/{version}",
        Need::AdminRead,
    ),
    r(
        "PUT",
        "/ojs/v1/admin/schemas/{type}/{version}",
        Need::AdminWrite,
    ),
    r(
        "DELETE",
        "/ojs/v1/admin/schemas/{type}/{version}",
        Need::AdminWrite,
    ),
    r("GET", "/ojs/v1/admin/tenants", Need::AdminRead),
    r("GET", "/ojs/v1/admin/tenants/{id}", Need::AdminRead),
    r("PUT", "/ojs/v1/admin/tenants/{id}", Need::AdminWrite),
    r("DELETE", "/ojs/v1/admin/tenants/{id}", Need::AdminWrite),
    r("PUT", "/ojs/v1/admin/tenants/{id}/limits", Need::AdminWrite),
    r("GET", "/ojs/v1/admin/tenants/{id}/stats", Need::AdminRead),
    r("GET", "/ojs/v1/admin/tenants/{id}/jobs", Need::AdminRead),
    r("GET", "/ojs/v1/admin/pools", Need::AdminRead),
    r("GET", "/ojs/v1/admin/pools/{name}", Need::AdminRead),
    r("PUT", "/ojs/v1/admin/pools/{name}", Need::AdminWrite),
    r("DELETE", "/ojs/v1/admin/pools/{name}", Need::AdminWrite),
    r("GET", "/ojs/v1/admin/scheduling/stats", Need::AdminRead),
    r(
        "GET",
        "/ojs/v1/admin/keys/{id}/registrations",
        Need::AdminRead,
    ),
];

/// How specifically `pattern` matches `path`, segment by segment (a literal beats a
/// parameter, which beats a wildcard), or None when it does not match.
fn specificity(pattern: &str, path: &str) -> Option<Vec<u8>> {
    let mut want = pattern.trim_start_matches('/').split('/');
    let mut have = path.trim_start_matches('/').split('/');
    let mut rank = Vec::new();
    loop {
        match (want.next(), have.next()) {
            (None, None) => return Some(rank),
            (Some(w), Some(h)) if w.starts_with("{*") => {
                // The rest of the path, at least one non-empty segment.
                return (!h.is_empty()).then(|| {
                    rank.push(0);
                    rank
                });
            }
            (Some(w), Some(h)) if w.starts_with('{') => {
                if h.is_empty() {
                    return None;
                }
                rank.push(1);
            }
            (Some(w), Some(h)) if w == h => rank.push(2),
            _ => return None,
        }
    }
}

fn same_method(route: &RouteScope, method: &Method) -> bool {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    route.method == method
}

/// The route a request reaches: among the rows of its method whose pattern matches the
/// path, the most specific (as the router picks). None for a path and method the API
/// does not serve.
pub fn route(method: &Method, path: &str) -> Option<&'static RouteScope> {
    ROUTES
        .iter()
        .filter(|r| same_method(r, method))
        .filter_map(|r| specificity(r.path, path).map(|rank| (rank, r)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, r)| r)
}

/// The routes a key bound to a tenant may call: those that act for the request's tenant
/// only (crate::extract::Tenant), webhook subscriptions included (a tenant's receive its
/// jobs' events only), and the listings that keep to the request's tenant
/// (crate::extract::ListingTenant: the events, and with `ojs:admin:read` the admin job
/// and dead letter listings, a job's admin view, the tenants listing (its own alone) and
/// its own tenant's view and stats). The rest (queue listings, push
/// endpoints, cron, the rest of the admin API) are not filtered by tenant, so such a key
/// is refused them.
const TENANT_ROUTES: &[(&str, &str)] = &[
    ("GET", "/ojs/v1/events"),
    ("GET", "/ojs/v1/admin/jobs"),
    ("GET", "/ojs/v1/admin/jobs/{id}"),
    ("GET", "/ojs/v1/admin/dead-letter"),
    ("GET", "/ojs/v1/admin/tenants"),
    ("GET", "/ojs/v1/admin/tenants/{id}/jobs"),
    ("GET", "/ojs/v1/admin/tenants/{id}"),
    ("GET", "/ojs/v1/admin/tenants/{id}/stats"),
    ("POST", "/ojs/v1/jobs"),
    ("POST", "/ojs/v1/jobs/batch"),
    ("GET", "/ojs/v1/jobs/{id}"),
    ("DELETE", "/ojs/v1/jobs/{id}"),
    ("POST", "/ojs/v1/workers/fetch"),
    ("POST", "/ojs/v1/workers/ack"),
    ("POST", "/ojs/v1/jobs/{id}/ack"),
    ("POST", "/ojs/v1/workers/nack"),
    ("POST", "/ojs/v1/workers/heartbeat"),
    ("POST", "/ojs/v1/workers/beat"),
    ("POST", "/ojs/v1/workers/progress"),
    ("GET", "/ojs/v1/jobs/{id}/progress"),
    ("PUT", "/ojs/v1/jobs/{id}/progress"),
    ("POST", "/ojs/v1/workflows"),
    ("GET", "/ojs/v1/queues/{name}"),
    ("GET", "/ojs/v1/queues/{name}/stats"),
    ("GET", "/ojs/v1/dead-letter"),
    ("POST", "/ojs/v1/dead-letter/{id}/retry"),
    ("DELETE", "/ojs/v1/dead-letter/{id}"),
    ("GET", "/ojs/v1/webhooks/subscriptions"),
    ("POST", "/ojs/v1/webhooks/subscriptions"),
    ("GET", "/ojs/v1/webhooks/subscriptions/{id}"),
    ("PATCH", "/ojs/v1/webhooks/subscriptions/{id}"),
    ("DELETE", "/ojs/v1/webhooks/subscriptions/{id}"),
    ("POST", "/ojs/v1/webhooks/subscriptions/{id}/rotate-secret"),
    ("POST", "/ojs/v1/webhooks/subscriptions/{id}/test"),
    ("GET", "/ojs/v1/webhooks/subscriptions/{id}/deliveries"),
    ("GET", "/ojs/v1/webhooks/deliveries"),
    ("GET", "/ojs/v1/webhooks/deliveries/{id}"),
    ("POST", "/ojs/v1/webhooks/deliveries/{id}/retry"),
];

/// Ok when a key bound to a tenant (`tenant`) may make the request, else the 403: a key of
/// any tenant may make every request its scopes allow.
pub fn check_tenant(tenant: Option<&str>, method: &Method, path: &str) -> Result<(), OjsError> {
    let Some(tenant) = tenant else {
        return Ok(());
    };
    match route(method, path) {
        Some(r) if !TENANT_ROUTES.contains(&(r.method, r.path)) => Err(OjsError::new(
            ErrorCode::Forbidden,
            format!("{method} {path} is not open to a key bound to tenant {tenant}: it does not keep to one tenant's jobs"),
        )
        .with_detail("tenant", tenant)),
        _ => Ok(()),
    }
}

/// The 403 of a key that lacks what `need` asks.
fn forbidden(scopes: Scopes, need: Need, method: &Method, path: &str) -> OjsError {
    let name = need.scope().map_or("", Scope::as_str);
    OjsError::new(
        ErrorCode::Forbidden,
        format!("this API key lacks the scope {name} that {method} {path} needs"),
    )
    .with_detail("required_scope", name)
    .with_detail("granted_by", need.granted_by())
    .with_detail("key_scopes", scopes.names())
}

/// Ok when `scopes` allow the request (or the API serves no such route: the router
/// answers it), else the 403 to answer.
pub fn check(scopes: Scopes, method: &Method, path: &str) -> Result<(), OjsError> {
    match route(method, path) {
        Some(route) if !scopes.allow(route.need) => {
            Err(forbidden(scopes, route.need, method, path))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
