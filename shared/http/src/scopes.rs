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
    /// Whether a key bound to a tenant may call it: the route acts for the request's
    /// tenant only (crate::extract::Tenant), webhook subscriptions included (a tenant's
    /// receive its jobs' events only), or lists what keeps to the request's tenant
    /// (crate::extract::ListingTenant: the events, and with `ojs:admin:read` the admin job
    /// and dead letter listings, a job's admin view, the tenants listing (its own alone)
    /// and its own tenant's view and stats). The rest (queue listings, push endpoints,
    /// cron, the rest of the admin API) are not filtered by tenant, so such a key is
    /// refused them.
    pub tenant: bool,
}

/// The rows of [`ROUTES`], one a line: the method, the pattern, the [`Need`], and
/// `tenant` where a key bound to a tenant may call the route ([`RouteScope::tenant`]).
macro_rules! routes {
    (@tenant) => {
        false
    };
    (@tenant tenant) => {
        true
    };
    ($($method:ident $path:literal $need:ident $($tenant:ident)?;)*) => {
        &[$(RouteScope {
            method: stringify!($method),
            path: $path,
            need: Need::$need,
            tenant: routes!(@tenant $($tenant)?),
        }),*]
    };
}

/// Every route the server serves and what it needs; README, "API keys and scopes",
/// prints the same table. A path missing here answers 500 (see the module docs).
pub const ROUTES: &[RouteScope] = routes! {
    // Discovery and liveness.
    GET    "/ojs/manifest"                                     Public;
    GET    "/ojs/v1/health"                                    Public;
    GET    "/health"                                           Public;
    GET    "/ready"                                            Public;
    GET    "/metrics"                                          AdminRead;
    GET    "/ojs/v1/events"                                    DataRead    tenant;
    // Producers.
    POST   "/ojs/v1/jobs"                                      Enqueue     tenant;
    POST   "/ojs/v1/jobs/batch"                                Enqueue     tenant;
    GET    "/ojs/v1/jobs/{id}"                                 DataRead    tenant;
    GET    "/ojs/v1/jobs/{id}/progress"                        DataRead    tenant;
    DELETE "/ojs/v1/jobs/{id}"                                 Enqueue     tenant;
    POST   "/ojs/v1/workflows"                                 Enqueue     tenant;
    GET    "/ojs/v1/workflows/{id}"                            DataRead;
    DELETE "/ojs/v1/workflows/{id}"                            Enqueue;
    GET    "/ojs/v1/dead-letter"                               DataRead    tenant;
    POST   "/ojs/v1/dead-letter/{id}/retry"                    Enqueue     tenant;
    DELETE "/ojs/v1/dead-letter/{id}"                          Enqueue     tenant;
    POST   "/cloudq/{queue}"                                   Enqueue;
    POST   "/{queue}"                                          Enqueue;
    // Workers.
    POST   "/ojs/v1/workers/fetch"                             Process     tenant;
    POST   "/ojs/v1/workers/ack"                               Process     tenant;
    POST   "/ojs/v1/jobs/{id}/ack"                             Process     tenant;
    POST   "/ojs/v1/workers/nack"                              Process     tenant;
    POST   "/ojs/v1/workers/heartbeat"                         Process     tenant;
    POST   "/ojs/v1/workers/beat"                              Process     tenant;
    GET    "/ojs/v1/workers/{id}/health"                       Process;
    POST   "/ojs/v1/workers/progress"                          Process     tenant;
    PUT    "/ojs/v1/jobs/{id}/progress"                        Process     tenant;
    // ojs-durable-execution.md: a worker saves, reads and clears its job's checkpoint.
    PUT    "/ojs/v1/jobs/{id}/checkpoint"                      Process;
    POST   "/ojs/v1/jobs/{id}/checkpoint"                      Process;
    GET    "/ojs/v1/jobs/{id}/checkpoint"                      Process;
    DELETE "/ojs/v1/jobs/{id}/checkpoint"                      Process;
    GET    "/cloudq/{queue}"                                   Process;
    DELETE "/cloudq/{queue}/{id}"                              Process;
    GET    "/{queue}"                                          Process;
    DELETE "/{queue}/{id}"                                     Process;
    // Reading queues, cron and schemas.
    GET    "/ojs/v1/queues"                                    DataRead;
    GET    "/ojs/v1/queues/{name}"                             DataRead    tenant;
    GET    "/ojs/v1/queues/{name}/stats"                       DataRead    tenant;
    GET    "/ojs/v1/cron"                                      DataRead;
    GET    "/ojs/v1/rate-limits/{key}"                         DataRead;
    GET    "/ojs/v1/schemas"                                   DataRead;
    GET    "/ojs/v1/schemas/{*uri}"                            DataRead;
    // Configuration.
    POST   "/ojs/v1/queues/{name}/pause"                       ConfigWrite;
    POST   "/ojs/v1/queues/{name}/resume"                      ConfigWrite;
    POST   "/ojs/v1/cron"                                      ConfigWrite;
    DELETE "/ojs/v1/cron/{name}"                               ConfigWrite;
    POST   "/ojs/v1/schemas"                                   ConfigWrite;
    DELETE "/ojs/v1/schemas/{*uri}"                            ConfigWrite;
    GET    "/ojs/v1/push/endpoints"                            ConfigRead;
    POST   "/ojs/v1/push/endpoints"                            ConfigWrite;
    GET    "/ojs/v1/push/endpoints/{id}"                       ConfigRead;
    DELETE "/ojs/v1/push/endpoints/{id}"                       ConfigWrite;
    GET    "/ojs/v1/webhooks/subscriptions"                    ConfigRead  tenant;
    POST   "/ojs/v1/webhooks/subscriptions"                    ConfigWrite tenant;
    GET    "/ojs/v1/webhooks/subscriptions/{id}"               ConfigRead  tenant;
    PATCH  "/ojs/v1/webhooks/subscriptions/{id}"               ConfigWrite tenant;
    DELETE "/ojs/v1/webhooks/subscriptions/{id}"               ConfigWrite tenant;
    POST   "/ojs/v1/webhooks/subscriptions/{id}/rotate-secret" ConfigWrite tenant;
    POST   "/ojs/v1/webhooks/subscriptions/{id}/test"          ConfigWrite tenant;
    GET    "/ojs/v1/webhooks/subscriptions/{id}/deliveries"    ConfigRead  tenant;
    GET    "/ojs/v1/webhooks/deliveries"                       ConfigRead  tenant;
    GET    "/ojs/v1/webhooks/deliveries/{id}"                  ConfigRead  tenant;
    POST   "/ojs/v1/webhooks/deliveries/{id}/retry"            ConfigWrite tenant;
    POST   "/ojs/v1/admin/queues/{name}/pause"                 ConfigWrite;
    POST   "/ojs/v1/admin/queues/{name}/resume"                ConfigWrite;
    PUT    "/ojs/v1/admin/queues/{name}/config"                ConfigWrite;
    PUT    "/ojs/v1/admin/queues/{name}/rate-limit"            ConfigWrite;
    DELETE "/ojs/v1/admin/queues/{name}/rate-limit"            ConfigWrite;
    POST   "/ojs/v1/admin/workers/{id}/{directive}"            ConfigWrite;
    // The admin API.
    GET    "/ojs/v1/admin/stats"                               AdminRead;
    GET    "/ojs/v1/admin/stats/history"                       AdminRead;
    GET    "/ojs/v1/admin/queues"                              AdminRead;
    GET    "/ojs/v1/admin/queues/{name}"                       AdminRead;
    POST   "/ojs/v1/admin/queues/{name}/recount"               AdminWrite;
    DELETE "/ojs/v1/admin/queues/{name}/jobs"                  AdminPurge;
    GET    "/ojs/v1/admin/jobs"                                AdminRead   tenant;
    GET    "/ojs/v1/admin/jobs/{id}"                           AdminRead   tenant;
    PATCH  "/ojs/v1/admin/jobs/{id}"                           AdminWrite;
    POST   "/ojs/v1/admin/jobs/{id}/retry"                     AdminWrite;
    POST   "/ojs/v1/admin/jobs/{id}/cancel"                    AdminWrite;
    POST   "/ojs/v1/admin/jobs/bulk/delete"                    AdminPurge;
    POST   "/ojs/v1/admin/jobs/bulk/{action}"                  AdminWrite;
    GET    "/ojs/v1/admin/workers"                             AdminRead;
    DELETE "/ojs/v1/admin/workers/{id}"                        AdminWrite;
    GET    "/ojs/v1/admin/dead-letter"                         AdminRead   tenant;
    DELETE "/ojs/v1/admin/dead-letter"                         AdminPurge;
    GET    "/ojs/v1/admin/dead-letter/stats"                   AdminRead;
    POST   "/ojs/v1/admin/dead-letter/retry"                   AdminWrite;
    POST   "/ojs/v1/admin/dead-letter/{id}/retry"              AdminWrite;
    DELETE "/ojs/v1/admin/dead-letter/{id}"                    AdminWrite;
    GET    "/ojs/v1/admin/system/maintenance"                  AdminRead;
    POST   "/ojs/v1/admin/system/maintenance"                  AdminWrite;
    GET    "/ojs/v1/admin/system/config"                       AdminRead;
    GET    "/ojs/v1/admin/schemas"                             AdminRead;
    GET    "/ojs/v1/admin/schemas/{type}"                      AdminRead;
    GET    "/ojs/v1/admin/schemas/{type}/versions"             AdminRead;
    GET    "/ojs/v1/admin/schemas/{type}/{version}"            AdminRead;
    PUT    "/ojs/v1/admin/schemas/{type}/{version}"            AdminWrite;
    DELETE "/ojs/v1/admin/schemas/{type}/{version}"            AdminWrite;
    GET    "/ojs/v1/admin/tenants"                             AdminRead   tenant;
    GET    "/ojs/v1/admin/tenants/{id}"                        AdminRead   tenant;
    PUT    "/ojs/v1/admin/tenants/{id}"                        AdminWrite;
    DELETE "/ojs/v1/admin/tenants/{id}"                        AdminWrite;
    PUT    "/ojs/v1/admin/tenants/{id}/limits"                 AdminWrite;
    GET    "/ojs/v1/admin/tenants/{id}/stats"                  AdminRead   tenant;
    GET    "/ojs/v1/admin/tenants/{id}/jobs"                   AdminRead   tenant;
    GET    "/ojs/v1/admin/pools"                               AdminRead;
    GET    "/ojs/v1/admin/pools/{name}"                        AdminRead;
    PUT    "/ojs/v1/admin/pools/{name}"                        AdminWrite;
    DELETE "/ojs/v1/admin/pools/{name}"                        AdminWrite;
    GET    "/ojs/v1/admin/scheduling/stats"                    AdminRead;
    GET    "/ojs/v1/admin/keys/{id}/registrations"             AdminRead;
};

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

/// Ok when a key bound to a tenant (`tenant`) may make the request
/// ([`RouteScope::tenant`]), else the 403: a key of any tenant may make every request its
/// scopes allow.
pub fn check_tenant(tenant: Option<&str>, method: &Method, path: &str) -> Result<(), OjsError> {
    let Some(tenant) = tenant else {
        return Ok(());
    };
    match route(method, path) {
        Some(r) if !r.tenant => Err(OjsError::new(
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
