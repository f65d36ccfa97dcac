//! API key administration as commands (JSON in, JSON out), shared by the `keys` Lambda
//! function (invoked with `aws lambda invoke`, so a deployed stack needs no local Rust
//! build to get its first key) and the `ojs-keys` command line tool.
//!
//! ```text
//! {"action": "create", "name": "<label>", "scopes": ["ojs:admin:read", ...]}
//!                                          -> {"id", "name", "created_at", "scopes", "key"}
//! {"action": "create", "name": "<label>", "tenant": "<tenant id>"}
//!                                          -> the same, with "tenant"
//! {"action": "list"}                       -> {"keys": [{"id", "name", "created_at", "revoked_at", "scopes"}]}
//! {"action": "revoke", "id": "<key id>"}   -> {"revoked": "<key id>"}
//! {"action": "revoke", "id": "<key id>", "disable_registrations": true}
//!                                          -> {"revoked", "disabled": {"push_endpoints", ...}}
//! {"action": "registrations", "id": "<key id>"}
//!                                          -> {"key_id", "push_endpoints", "webhook_subscriptions", "cron_jobs", "schemas"}
//! ```
//!
//! What a key registered stays in force when the key is revoked unless the revoke asks
//! for `disable_registrations` ([`crate::registrations`]).
//!
//! A created key's secret appears only in the answer to `create`; the table keeps its
//! Argon2id hash. `scopes` (a list, or one comma-separated string) is optional: a key
//! created without it is a data key (`ojs:data:read`, `ojs:data:write`; see
//! [`crate::scopes`]).

use ojs_store::{Store, StoreError};
use serde_json::{json, Value};

use crate::auth::issue_tenant_key;
use crate::scopes::{Scope, Scopes};

/// Longest key label accepted.
const MAX_NAME_LEN: usize = 128;

/// Why a key command was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum KeyAdminError {
    /// The command is not one of the documented shapes.
    #[error("bad key command: {0}")]
    BadCommand(String),
    /// The table refused or failed.
    #[error("key store: {0}")]
    Store(#[from] StoreError),
}

fn text<'a>(command: &'a Value, field: &str) -> Result<&'a str, KeyAdminError> {
    command[field]
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| KeyAdminError::BadCommand(format!("'{field}' must be a non-empty string")))
}

/// The `scopes` of a create command: absent or null (a data key), a list of names, or
/// one comma- or space-separated string.
fn scopes_of(command: &Value) -> Result<Option<Scopes>, KeyAdminError> {
    let raw = match &command["scopes"] {
        Value::Null => return Ok(None),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| KeyAdminError::BadCommand("'scopes' must hold strings".into()))
            })
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        _ => {
            return Err(KeyAdminError::BadCommand(
                "'scopes' must be a list of scope names".into(),
            ))
        }
    };
    let scopes = Scopes::parse_list(&raw).map_err(KeyAdminError::BadCommand)?;
    if scopes == Scopes::default() {
        return Err(KeyAdminError::BadCommand(
            "'scopes' names no scope; leave it out for a data key".into(),
        ));
    }
    Ok(Some(scopes))
}

/// The `tenant` of a create command: absent or null (a key of any tenant), or the tenant
/// the key is bound to. Such a key takes data scopes, `ojs:config:write` and
/// `ojs:admin:read`, not the admin writes: of the configuration routes it reaches only its
/// tenant's webhook subscriptions, of the admin API only the job and dead letter listings
/// and a job's view, kept to its tenant's jobs (`scopes::check_tenant` closes the rest to
/// it); the admin writes act on every tenant's jobs.
fn tenant_of(
    command: &Value,
    scopes: Option<Scopes>,
) -> Result<Option<ojs_core::tenant::TenantId>, KeyAdminError> {
    let raw = match &command["tenant"] {
        Value::Null => return Ok(None),
        Value::String(s) => s.trim(),
        _ => {
            return Err(KeyAdminError::BadCommand(
                "'tenant' must be a tenant id".into(),
            ))
        }
    };
    let tenant = ojs_core::tenant::TenantId::parse(raw)
        .map_err(|e| KeyAdminError::BadCommand(e.message))?
        .ok_or_else(|| {
            KeyAdminError::BadCommand(
                "'tenant' names the default tenant; a key for its jobs only is not offered".into(),
            )
        })?;
    let admin = [Scope::AdminWrite, Scope::AdminPurge];
    if scopes.is_some_and(|s| admin.into_iter().any(|a| s.has(a))) {
        return Err(KeyAdminError::BadCommand(
            "a tenant's key takes data scopes, ojs:config:write and ojs:admin:read only (ojs:data:*, its tenant's webhook subscriptions, the admin job and dead letter listings of its tenant's jobs): the admin writes are not filtered by tenant".into(),
        ));
    }
    Ok(Some(tenant))
}

/// Carries out one key command on `store` (see the module docs).
pub async fn administer_keys(store: &Store, command: &Value) -> Result<Value, KeyAdminError> {
    match command["action"].as_str() {
        Some("create") => {
            let name = text(command, "name")?;
            if name.chars().count() > MAX_NAME_LEN || name.chars().any(char::is_control) {
                return Err(KeyAdminError::BadCommand(format!(
                    "'name' must be at most {MAX_NAME_LEN} printable characters"
                )));
            }
            let scopes = scopes_of(command)?;
            let tenant = tenant_of(command, scopes)?;
            let issued = issue_tenant_key(store, name, scopes, tenant.as_ref()).await?;
            tracing::info!(key_id = %issued.record.id, "API key created");
            Ok(json!({
                "id": issued.record.id,
                "name": issued.record.name,
                "created_at": issued.record.created_at,
                "scopes": Scopes::of_stored(issued.record.scopes.as_deref()).names(),
                "tenant": issued.record.tenant,
                "key": issued.key,
            }))
        }
        Some("list") => {
            let keys: Vec<Value> = store
                .api_keys().list()
                .await?
                .into_iter()
                .map(|k| {
                    json!({"id": k.id, "name": k.name, "created_at": k.created_at, "revoked_at": k.revoked_at, "scopes": Scopes::of_stored(k.scopes.as_deref()).names(), "tenant": k.tenant})
                })
                .collect();
            Ok(json!({ "keys": keys }))
        }
        Some("revoke") => {
            let id = text(command, "id")?;
            let disable = match &command["disable_registrations"] {
                Value::Null => false,
                Value::Bool(b) => *b,
                _ => {
                    return Err(KeyAdminError::BadCommand(
                        "'disable_registrations' must be true or false".into(),
                    ))
                }
            };
            store.api_keys().revoke(id, ojs_core::time::now()).await?;
            tracing::info!(key_id = %id, "API key revoked");
            if !disable {
                return Ok(json!({ "revoked": id }));
            }
            let disabled = crate::registrations::disable_by_key(store, id).await?;
            Ok(json!({ "revoked": id, "disabled": disabled }))
        }
        Some("registrations") => {
            let id = text(command, "id")?;
            Ok(crate::registrations::list_by_key(store, id).await?)
        }
        other => Err(KeyAdminError::BadCommand(format!(
            "'action' must be create, list, revoke or registrations (got {})",
            other.map_or_else(|| command["action"].to_string(), str::to_owned)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::unreachable_store;

    #[tokio::test]
    async fn malformed_commands_are_refused_before_any_store_call() {
        let store = unreachable_store();
        for bad in [
            json!({}),
            json!({"action": "delete", "id": "x"}),
            json!({"action": "create"}),
            json!({"action": "create", "name": "  "}),
            json!({"action": "create", "name": "a".repeat(129)}),
            json!({"action": "create", "name": "a\nb"}),
            json!({"action": "create", "name": "a", "scopes": ["ojs:admin:all"]}),
            json!({"action": "create", "name": "a", "scopes": 7}),
            json!({"action": "create", "name": "a", "scopes": [7]}),
            json!({"action": "create", "name": "a", "scopes": ""}),
            json!({"action": "create", "name": "a", "tenant": "a b"}),
            json!({"action": "create", "name": "a", "tenant": 5}),
            json!({"action": "create", "name": "a", "tenant": "_default"}),
            json!({"action": "create", "name": "a", "tenant": "acme", "scopes": ["ojs:admin:write"]}),
            json!({"action": "create", "name": "a", "tenant": "acme", "scopes": ["ojs:admin:read", "ojs:admin:purge"]}),
            json!({"action": "revoke"}),
            json!({"action": "revoke", "id": "x", "disable_registrations": "yes"}),
            json!({"action": "registrations"}),
            json!({"action": 1}),
        ] {
            let got = administer_keys(&store, &bad).await;
            assert!(
                matches!(got, Err(KeyAdminError::BadCommand(_))),
                "{bad}: {got:?}"
            );
        }
    }

    #[tokio::test]
    async fn store_failures_are_reported_as_such() {
        let got = administer_keys(&unreachable_store(), &json!({"action": "list"})).await;
        assert!(matches!(got, Err(KeyAdminError::Store(_))), "{got:?}");
    }
}
