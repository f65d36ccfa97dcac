//! API key administration against the table named by `OJS_TABLE` (local or deployed):
//!
//! ```text
//! ojs-keys create <name> [--scopes ojs:admin:read,ojs:data:read]
//!                          issue a key; prints it once (only its hash is stored); without
//!                          --scopes a data key (ojs:data:read, ojs:data:write)
//! ojs-keys list            ids, names, creation and revocation times
//! ojs-keys revoke <id> [--disable-registrations]
//!                          revoke one key (effective within a minute everywhere); with the
//!                          flag, also disable the push endpoints, webhook subscriptions
//!                          and cron jobs it registered (they stay in force by default)
//! ojs-keys registrations <id>
//!                          what the key registered (push endpoints, webhooks, cron, schemas)
//! ```

use anyhow::{bail, Context};
use ojs_http::auth::issue_scoped_key;
use ojs_http::key_admin::administer_keys;
use ojs_http::scopes::Scopes;
use ojs_store::Store;
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let store = Store::from_env().await;
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["create", name, rest @ ..] => {
            let scopes = match rest {
                [] => None,
                ["--scopes", list] => Some(Scopes::parse_list(list).map_err(anyhow::Error::msg)?),
                _ => bail!("usage: ojs-keys create <name> [--scopes a,b,...]"),
            };
            let issued = issue_scoped_key(&store, name, scopes)
                .await
                .with_context(|| format!("storing the key in table {}", store.table()))?;
            eprintln!(
                "created key {} ({}, scopes {}) in table {}; it is shown only now:",
                issued.record.id,
                issued.record.name,
                Scopes::of_stored(issued.record.scopes.as_deref())
                    .names()
                    .join(","),
                store.table()
            );
            println!("{}", issued.key);
        }
        ["list"] => {
            for k in store.list_api_keys().await? {
                let revoked = k.revoked_at.as_deref().unwrap_or("-");
                let scopes = Scopes::of_stored(k.scopes.as_deref()).names().join(",");
                println!(
                    "{}\t{}\tcreated {}\trevoked {}\tscopes {}",
                    k.id, k.name, k.created_at, revoked, scopes
                );
            }
        }
        ["revoke", id, rest @ ..] => {
            let disable = match rest {
                [] => false,
                ["--disable-registrations"] => true,
                _ => bail!("usage: ojs-keys revoke <id> [--disable-registrations]"),
            };
            let command = json!({"action": "revoke", "id": id, "disable_registrations": disable});
            let answer = administer_keys(&store, &command)
                .await
                .with_context(|| format!("revoking key {id}"))?;
            eprintln!("revoked key {id}");
            if disable {
                println!("{}", serde_json::to_string_pretty(&answer["disabled"])?);
            }
        }
        ["registrations", id] => {
            let command = json!({"action": "registrations", "id": id});
            let answer = administer_keys(&store, &command).await?;
            println!("{}", serde_json::to_string_pretty(&answer)?);
        }
        _ => bail!(
            "usage: ojs-keys create <name> [--scopes a,b,...] | list | revoke <id> [--disable-registrations] | registrations <id>"
        ),
    }
    Ok(())
}
