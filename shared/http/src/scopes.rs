//! API key scopes (ojs-admin-api.md §13.1) and the scope each request needs.
//!
//! A key carries a set of scopes; a key stored without any (every key made before scopes
//! existed) is a data key: `ojs:data:read` and `ojs:data:write`. Admin endpoints
//! (`/ojs/v1/admin/...`) need `ojs:admin:read` for GET and `ojs:admin:write` for the rest,
//! except the destructive ones (purge, bulk delete), which need `ojs:admin:purge`. Every
//! other endpoint needs `ojs:data:read` for GET and `ojs:data:write` for the rest. No
//! scope implies another: a dashboard key is typically `ojs:admin:read,ojs:data:read`.

use axum::http::Method;
use ojs_core::{ErrorCode, OjsError};

/// One scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// GET under `/ojs/v1/admin/`.
    AdminRead,
    /// POST, PUT, PATCH, DELETE under `/ojs/v1/admin/`.
    AdminWrite,
    /// Purge and bulk delete.
    AdminPurge,
    /// Data-plane reads.
    DataRead,
    /// Data-plane writes.
    DataWrite,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 5] = [
        Scope::AdminRead,
        Scope::AdminWrite,
        Scope::AdminPurge,
        Scope::DataRead,
        Scope::DataWrite,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::AdminRead => "ojs:admin:read",
            Scope::AdminWrite => "ojs:admin:write",
            Scope::AdminPurge => "ojs:admin:purge",
            Scope::DataRead => "ojs:data:read",
            Scope::DataWrite => "ojs:data:write",
        }
    }

    /// Parses a wire name.
    pub fn parse(raw: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    fn bit(self) -> u8 {
        match self {
            Scope::AdminRead => 1,
            Scope::AdminWrite => 2,
            Scope::AdminPurge => 4,
            Scope::DataRead => 8,
            Scope::DataWrite => 16,
        }
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    /// The scopes of a key stored without any: data read and write.
    pub const DATA: Scopes = Scopes(8 | 16);

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

    /// The names, in [`Scope::ALL`] order.
    pub fn names(self) -> Vec<&'static str> {
        Scope::ALL
            .into_iter()
            .filter(|s| self.has(*s))
            .map(Scope::as_str)
            .collect()
    }
}

/// Whether `path` is an admin endpoint.
fn is_admin(path: &str) -> bool {
    path.starts_with("/ojs/v1/admin/")
}

/// Whether an admin request destroys jobs for good: purging a queue or the dead letter
/// queue, bulk delete.
fn is_purge(method: &Method, path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/ojs/v1/admin/") else {
        return false;
    };
    let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    matches!(
        (method, segments.as_slice()),
        (&Method::DELETE, ["queues", _, "jobs"] | ["dead-letter"])
            | (&Method::POST, ["jobs", "bulk", "delete"])
    )
}

/// The scope a request needs.
pub fn required(method: &Method, path: &str) -> Scope {
    let read = method == Method::GET || method == Method::HEAD;
    if is_admin(path) {
        if is_purge(method, path) {
            Scope::AdminPurge
        } else if read {
            Scope::AdminRead
        } else {
            Scope::AdminWrite
        }
    } else if read {
        Scope::DataRead
    } else {
        Scope::DataWrite
    }
}

/// Ok when `scopes` allow the request, else the 403 to answer.
pub fn check(scopes: Scopes, method: &Method, path: &str) -> Result<(), OjsError> {
    let need = required(method, path);
    if scopes.has(need) {
        return Ok(());
    }
    Err(OjsError::new(
        ErrorCode::Forbidden,
        format!(
            "this API key lacks the scope {} that {method} {path} needs",
            need.as_str()
        ),
    )
    .with_detail("required_scope", need.as_str())
    .with_detail("key_scopes", scopes.names()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_needs_its_scope() {
        let cases = [
            (Method::GET, "/ojs/v1/admin/queues", Scope::AdminRead),
            (Method::HEAD, "/ojs/v1/admin/jobs", Scope::AdminRead),
            (
                Method::POST,
                "/ojs/v1/admin/queues/q/pause",
                Scope::AdminWrite,
            ),
            (
                Method::PUT,
                "/ojs/v1/admin/queues/q/config",
                Scope::AdminWrite,
            ),
            (Method::DELETE, "/ojs/v1/admin/workers/w", Scope::AdminWrite),
            (
                Method::DELETE,
                "/ojs/v1/admin/dead-letter/x",
                Scope::AdminWrite,
            ),
            (
                Method::POST,
                "/ojs/v1/admin/jobs/bulk/retry",
                Scope::AdminWrite,
            ),
            (
                Method::POST,
                "/ojs/v1/admin/jobs/bulk/delete",
                Scope::AdminPurge,
            ),
            (
                Method::DELETE,
                "/ojs/v1/admin/queues/q/jobs",
                Scope::AdminPurge,
            ),
            (
                Method::DELETE,
                "/ojs/v1/admin/dead-letter",
                Scope::AdminPurge,
            ),
            (
                Method::DELETE,
                "/ojs/v1/admin/dead-letter/",
                Scope::AdminPurge,
            ),
            (Method::GET, "/ojs/v1/admin/queues/q/jobs", Scope::AdminRead),
            (Method::GET, "/ojs/v1/jobs/x", Scope::DataRead),
            (Method::POST, "/ojs/v1/jobs", Scope::DataWrite),
            (Method::DELETE, "/ojs/v1/jobs/x", Scope::DataWrite),
            (Method::POST, "/ojs/v1/workers/fetch", Scope::DataWrite),
            (Method::GET, "/ojs/v1/administrator", Scope::DataRead),
        ];
        for (method, path, want) in cases {
            assert_eq!(required(&method, path), want, "{method} {path}");
        }
    }

    #[test]
    fn stored_keys_without_scopes_are_data_keys() {
        assert_eq!(Scopes::of_stored(None), Scopes::DATA);
        assert!(Scopes::DATA.has(Scope::DataRead) && Scopes::DATA.has(Scope::DataWrite));
        assert!(!Scopes::DATA.has(Scope::AdminRead));
        let admin = vec!["ojs:admin:read".to_owned(), "nonsense".to_owned()];
        let s = Scopes::of_stored(Some(&admin));
        assert!(s.has(Scope::AdminRead));
        assert!(!s.has(Scope::DataRead));
        assert_eq!(s.names(), ["ojs:admin:read"]);
        assert_eq!(Scopes::of_stored(Some(&[])), Scopes::default());
    }

    #[test]
    fn lists_parse_and_unknown_names_are_refused() {
        let s =
            Scopes::parse_list("ojs:admin:read, ojs:data:read ojs:admin:purge").unwrap_or_default();
        assert_eq!(
            s.names(),
            ["ojs:admin:read", "ojs:admin:purge", "ojs:data:read"]
        );
        assert!(Scopes::parse_list("ojs:admin:all").is_err());
        // Named twice is still granted once.
        let twice = Scopes::parse_list("ojs:admin:read,ojs:admin:read").unwrap_or_default();
        assert!(twice.has(Scope::AdminRead));
        assert!(Scopes::of(&[Scope::DataWrite, Scope::DataWrite]).has(Scope::DataWrite));
        assert_eq!(Scopes::parse_list(""), Ok(Scopes::default()));
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.as_str()), Some(scope));
            assert_eq!(Scopes::of(&[scope]).names(), [scope.as_str()]);
        }
    }

    #[test]
    fn a_missing_scope_is_a_403_naming_it() {
        let err = check(Scopes::DATA, &Method::GET, "/ojs/v1/admin/stats")
            .err()
            .map(|e| (e.code, e.details["required_scope"].clone()));
        assert_eq!(err, Some((ErrorCode::Forbidden, "ojs:admin:read".into())));
        assert!(check(Scopes::DATA, &Method::POST, "/ojs/v1/jobs").is_ok());
        let read_only = Scopes::of(&[Scope::AdminRead, Scope::DataRead]);
        assert!(check(read_only, &Method::GET, "/ojs/v1/admin/queues").is_ok());
        assert!(check(read_only, &Method::POST, "/ojs/v1/admin/queues/q/pause").is_err());
        assert!(check(read_only, &Method::POST, "/ojs/v1/jobs").is_err());
        let writer = Scopes::of(&[Scope::AdminWrite]);
        assert!(check(writer, &Method::DELETE, "/ojs/v1/admin/queues/q/jobs").is_err());
    }
}
