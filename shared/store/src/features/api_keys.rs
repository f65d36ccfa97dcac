//! API key records. Each key is one item in the `APIKEYS` partition with sort key
//! `K#<key id>`, holding only a password hash of the key's secret (Argon2id, computed by
//! the caller): the secret itself is never stored (ojs-security.md §12.3). Keys are
//! revoked one by one by flagging their item, which every instance sees within its cache
//! lifetime.

use aws_sdk_dynamodb::types::AttributeValue;
use ojs_core::time::{self, Timestamp};

use crate::engine::Engine;
use crate::error::{Missing, StoreError};
use crate::item::{s, ts, Item};
use crate::registry::Registry;

/// Every API key record, by key id.
const API_KEYS: Registry<ApiKeyRecord> = Registry {
    pk: "APIKEYS",
    sk: |id| format!("K#{id}"),
    read: record_from_item,
    missing: Missing::ApiKey,
};

/// A stored API key: its public id, a label, and the hash of its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// The public part of the key (printed in logs instead of the key).
    pub id: String,
    /// A human label, e.g. the service that uses the key.
    pub name: String,
    /// The PHC-format password hash of the secret.
    pub hash: String,
    /// When the key was created (RFC 3339).
    pub created_at: String,
    /// When the key was revoked, if it was.
    pub revoked_at: Option<String>,
    /// The key's scopes (`ojs:admin:read`, ...); `None` for a key stored without any
    /// (every key made before scopes existed), which the HTTP layer treats as a data key.
    pub scopes: Option<Vec<String>>,
    /// The tenant the key acts for, if it is bound to one.
    pub tenant: Option<String>,
}

fn record_from_item(item: &Item) -> Result<ApiKeyRecord, StoreError> {
    let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let id = get("sk")
        .and_then(|sk| sk.strip_prefix("K#").map(str::to_owned))
        .ok_or_else(|| StoreError::Corrupt("api key item without id".into()))?;
    Ok(ApiKeyRecord {
        id,
        name: get("name").unwrap_or_default(),
        hash: get("hash").ok_or_else(|| StoreError::Corrupt("api key item without hash".into()))?,
        created_at: get("created_at").unwrap_or_default(),
        revoked_at: get("revoked_at"),
        scopes: item
            .get("scopes")
            .and_then(|v| v.as_l().ok())
            .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect()),
        tenant: get("tenant"),
    })
}

service! {
    /// API keys: their records, scopes, tenants and revocation.
    ApiKeys over engine: Engine
}

impl ApiKeys<'_> {
    /// Stores a new key record without scopes (a data key); see
    /// [`ApiKeys::put_scoped`].
    pub async fn put(
        &self,
        id: &str,
        name: &str,
        hash: &str,
        now: Timestamp,
    ) -> Result<ApiKeyRecord, StoreError> {
        self.put_scoped(id, name, hash, None, None, now).await
    }

    /// Stores a new key record with `scopes` (none: a data key), bound to `tenant` if
    /// given (conditional PutItem: an id is never overwritten).
    pub async fn put_scoped(
        &self,
        id: &str,
        name: &str,
        hash: &str,
        scopes: Option<&[String]>,
        tenant: Option<&str>,
        now: Timestamp,
    ) -> Result<ApiKeyRecord, StoreError> {
        let mut item = API_KEYS.key(id);
        if let Some(tenant) = tenant {
            item.insert("tenant".into(), s(tenant));
        }
        if let Some(scopes) = scopes {
            item.insert(
                "scopes".into(),
                AttributeValue::L(scopes.iter().map(|x| s(x.clone())).collect()),
            );
        }
        item.insert("name".into(), s(name));
        item.insert("hash".into(), s(hash));
        item.insert("created_at".into(), ts(&now));
        // The SDK retries a write whose answer was lost: the record it then finds may be
        // this very one, recognised by its hash (of a secret only this call holds).
        let taken = self.engine.table.put_unless_taken(item).await?;
        if taken.is_some_and(|existing| existing.get("hash") != Some(&s(hash))) {
            return Err(StoreError::Duplicate);
        }
        Ok(ApiKeyRecord {
            id: id.to_owned(),
            name: name.to_owned(),
            hash: hash.to_owned(),
            created_at: time::format(&now),
            revoked_at: None,
            scopes: scopes.map(<[String]>::to_vec),
            tenant: tenant.map(str::to_owned),
        })
    }

    /// The record of key `id`, if any (one strongly consistent GetItem, so a revocation
    /// is seen by the next lookup).
    pub async fn get(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        API_KEYS.get(&self.engine.table, id).await
    }

    /// Every key record, sorted by id.
    pub async fn list(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        API_KEYS.list(&self.engine.table).await
    }

    /// Marks key `id` revoked (conditional UpdateItem; NotFound when there is no such key;
    /// revoking twice keeps the first revocation time).
    pub async fn revoke(&self, id: &str, now: Timestamp) -> Result<(), StoreError> {
        let revoke = self
            .engine
            .table
            .update_at(API_KEYS.key(id))
            .update_expression("SET revoked_at = if_not_exists(revoked_at, :now)")
            .expression_attribute_values(":now", AttributeValue::S(time::format(&now)));
        self.engine
            .table
            .update_existing(revoke)
            .await
            .map_err(API_KEYS.naming(id))
    }
}
