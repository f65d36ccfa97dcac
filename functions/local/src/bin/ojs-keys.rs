//! API key administration against the table named by `OJS_TABLE` (local or deployed):
//!
//! ```text
//! ojs-keys create <name> [--scopes ojs:admin:read,ojs:data:read] [--tenant <id>]
//!                          issue a key; prints it once (only its hash is stored); without
//!                          --scopes a data key (ojs:data:read, ojs:data:write); with
//!                          --tenant bound to that tenant (it may hold data scopes,
//!                          ojs:config:write for its own webhook subscriptions, and
//!                          ojs:admin:read for the admin listings of its own jobs)
//! ojs-keys list            ids, names, creation and revocation times
//! ojs-keys revoke <id> [--disable-registrations]
//!                          revoke one key (effective within a minute everywhere); with the
//!                          flag, also disable the push endpoints, webhook subscriptions
//!                          and cron jobs it registered (they stay in force by default)
//! ojs-keys registrations <id>
//!                          what the key registered (push endpoints, webhooks, cron, schemas)
//! ```

use anyhow::{bail, Context};
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
            let mut command = json!({"action": "create", "name": name});
            let mut flags = rest.iter();
            while let Some(flag) = flags.next() {
                match (*flag, flags.next()) {
                    ("--scopes", Some(list)) => command["scopes"] = json!(list),
                    ("--tenant", Some(tenant)) => command["tenant"] = json!(tenant),
                    _ => bail!("usage: ojs-keys create <name> [--scopes a,b,...] [--tenant <id>]"),
                }
            }
            let issued = administer_keys(&store, &command)
                .await
                .with_context(|| format!("storing the key in table {}", store.table()))?;
            let tenant = issued["tenant"].as_str().unwrap_or("any");
            eprintln!(
                "created key {} ({}, scopes {}, tenant {tenant}) in table {}; it is shown only now:",
                issued["id"].as_str().unwrap_or_default(),
                issued["name"].as_str().unwrap_or_default(),
                issued["scopes"]
                    .as_array()
                    .map(|s| s.iter().filter_map(|n| n.as_str()).collect::<Vec<_>>().join(","))
                    .unwrap_or_default(),
                store.table()
            );
            println!("{}", issued["key"].as_str().unwrap_or_default());
        }
        ["list"] => {
            for k in store.api_keys().list().await? {
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
