//! API key administration as commands (JSON in, JSON out), shared by the `keys` Lambda
//! function (invoked with `aws lambda invoke`, so a deployed stack needs no local Rust
//! build to get its first key) and the `ojs-keys` command line tool.
//!
//! ```text
//! {"action": "create", "name": "<label>"}  -> {"id", "name", "created_at", "key"}
//! {"action": "list"}                       -> {"keys": [{"id", "name", "created_at", "revoked_at"}]}
//! {"action": "revoke", "id": "<key id>"}   -> {"revoked": "<key id>"}
//! ```
//!
//! A created key's secret appears only in the answer to `create`; the table keeps its
//! Argon2id hash.

use ojs_store::{Store, StoreError};
use serde_json::{json, Value};

use crate::auth::issue_key;

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
            let issued = issue_key(store, name).await?;
            tracing::info!(key_id = %issued.record.id, "API key created");
            Ok(json!({
                "id": issued.record.id,
                "name": issued.record.name,
                "created_at": issued.record.created_at,
                "key": issued.key,
            }))
        }
        Some("list") => {
            let keys: Vec<Value> = store
                .list_api_keys()
                .await?
                .into_iter()
                .map(|k| {
                    json!({"id": k.id, "name": k.name, "created_at": k.created_at, "revoked_at": k.revoked_at})
                })
                .collect();
            Ok(json!({ "keys": keys }))
        }
        Some("revoke") => {
            let id = text(command, "id")?;
            store.revoke_api_key(id, ojs_core::time::now()).await?;
            tracing::info!(key_id = %id, "API key revoked");
            Ok(json!({ "revoked": id }))
        }
        other => Err(KeyAdminError::BadCommand(format!(
            "'action' must be create, list or revoke (got {})",
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
            json!({"action": "revoke"}),
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
