//! The ids and names routes' paths carry, as [`PathParam`](crate::extract::PathParam)
//! parses them: one not of the form this server hands out names nothing, and is answered
//! at once with the 404 a lookup would give, without the lookup. Each knows that 404
//! ([`PathId::missing`]) for when the lookup finds nothing.

use ojs_core::OjsError;
use ojs_store::Missing;

use crate::error::{not_found, ApiError};
use crate::extract::FromPathParam;

/// An id a path names that the store may not find.
pub(crate) trait PathId {
    /// The 404 of the id naming nothing.
    fn missing(&self) -> ApiError;
}

/// `entry`, or the 404 of `id` when the store found none.
pub(crate) fn found<T>(id: &impl PathId, entry: Option<T>) -> Result<T, ApiError> {
    entry.ok_or_else(|| id.missing())
}

/// Declares the id types of registrations: `$valid` decides the form of an id, and
/// `$missing` is the store's name of what it names, whose 404 answers an id of another
/// form or one not found.
macro_rules! path_ids {
    ($($(#[$doc:meta])* $name:ident: $valid:expr => $missing:path;)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name(pub String);

        impl FromPathParam for $name {
            fn from_path_param(raw: &str) -> Result<Self, OjsError> {
                let valid: fn(&str) -> bool = $valid;
                if valid(raw) {
                    Ok(Self(raw.to_owned()))
                } else {
                    Err(not_found(&$missing(raw.to_owned())))
                }
            }
        }

        impl PathId for $name {
            fn missing(&self) -> ApiError {
                ApiError(not_found(&$missing(self.0.clone())))
            }
        }
    )*};
}

path_ids! {
    /// A push endpoint's id: `pe_` and a UUID.
    PushEndpointId: |raw| is_prefixed_uuid(raw, "pe_") => Missing::PushEndpoint;
    /// A schema's URI: one a schema can be registered under.
    SchemaUri: ojs_core::schema_registry::is_valid_uri => Missing::Schema;
    /// A cron job's name: one a cron job can be registered under (so also a key to hand
    /// the store, not over its size).
    CronName: ojs_core::cron_job::valid_name => Missing::Cron;
    /// A scheduling pool's name: one a pool can be defined under.
    PoolName: ojs_core::pool::valid_name => Missing::Pool;
}

impl PathId for ojs_core::JobId {
    fn missing(&self) -> ApiError {
        ApiError(not_found(&Missing::Job(self.to_string())))
    }
}

/// A worker's id: what a heartbeat accepts as one (1 to 256 characters).
pub(crate) struct WorkerId(pub String);

impl FromPathParam for WorkerId {
    fn from_path_param(raw: &str) -> Result<Self, OjsError> {
        if raw.is_empty() || raw.len() > 256 {
            return Err(OjsError::not_found(format!("worker {raw:.64} not found")));
        }
        Ok(Self(raw.to_owned()))
    }
}

impl PathId for WorkerId {
    fn missing(&self) -> ApiError {
        ApiError(not_found(&Missing::Worker(self.0.clone())))
    }
}

/// A workflow's id: a UUID, hyphenated in lower case as the store keeps it (a path that
/// is no UUID is a 400).
pub(crate) struct WorkflowId(pub String);

impl FromPathParam for WorkflowId {
    fn from_path_param(raw: &str) -> Result<Self, OjsError> {
        uuid::Uuid::parse_str(raw)
            .map(|u| Self(u.hyphenated().to_string()))
            .map_err(|_| OjsError::invalid_request(format!("{raw:?} is not a workflow id")))
    }
}

/// Whether `id` is `prefix` and a UUID, the form of the ids this server hands out for
/// push endpoints, webhook subscriptions and deliveries.
pub(crate) fn is_prefixed_uuid(id: &str, prefix: &str) -> bool {
    let is_uuid = |u: &str| u.len() == 36 && u.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    id.strip_prefix(prefix).is_some_and(is_uuid)
}
