//! API key administration against the table named by `OJS_TABLE` (local or deployed):
//!
//! ```text
//! ojs-keys create <name>   issue a key; prints it once (only its hash is stored)
//! ojs-keys list            ids, names, creation and revocation times
//! ojs-keys revoke <id>     revoke one key (effective within a minute everywhere)
//! ```

use anyhow::{bail, Context};
use ojs_http::auth::issue_key;
use ojs_store::Store;

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
        ["create", name] => {
            let issued = issue_key(&store, name)
                .await
                .with_context(|| format!("storing the key in table {}", store.table()))?;
            eprintln!(
                "created key {} ({}) in table {}; it is shown only now:",
                issued.record.id,
                issued.record.name,
                store.table()
            );
            println!("{}", issued.key);
        }
        ["list"] => {
            for k in store.list_api_keys().await? {
                let revoked = k.revoked_at.as_deref().unwrap_or("-");
                println!(
                    "{}\t{}\tcreated {}\trevoked {}",
                    k.id, k.name, k.created_at, revoked
                );
            }
        }
        ["revoke", id] => {
            store
                .revoke_api_key(id, ojs_core::time::now())
                .await
                .with_context(|| format!("revoking key {id}"))?;
            eprintln!("revoked key {id}");
        }
        _ => bail!("usage: ojs-keys create <name> | list | revoke <id>"),
    }
    Ok(())
}
