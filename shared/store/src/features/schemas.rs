//! Schema registrations (ojs-http-binding.md §15). Each registration is one item in the
//! `SCHEMAS` partition with sort key `S#<uri>`; every read is strongly consistent, so a
//! PUSH right after a registration (or a deletion) sees it. A URI is registered once:
//! registering a different document under a taken URI is a conflict.

use ojs_core::schema_registry::{self, SchemaDoc};
use ojs_core::time::{self, Timestamp};
use serde_json::Value;

use crate::engine::Engine;
use crate::error::{Missing, StoreError};
use crate::item::{s, ts, Item};
use crate::registry::Registry;

/// Every schema registration, by URI.
const SCHEMAS: Registry<SchemaEntry> = Registry {
    pk: "SCHEMAS",
    sk: schema_sk,
    read: entry_from_item,
    missing: Missing::Schema,
};

/// Sort key of a schema registration.
fn schema_sk(uri: &str) -> String {
    format!("S#{uri}")
}

/// A registration with its system-managed fields.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaEntry {
    /// The registration.
    pub doc: SchemaDoc,
    /// When it was registered.
    pub created_at: String,
    /// The id of the API key that registered it (None: keys were off, or before keys
    /// were recorded).
    pub created_by: Option<String>,
}

/// What registering did.
#[derive(Debug, Clone, PartialEq)]
pub enum SchemaPut {
    /// A new registration.
    Created(SchemaEntry),
    /// The URI was already registered with exactly this registration (a replayed POST).
    Unchanged(SchemaEntry),
    /// The URI is registered with a different registration.
    Taken(SchemaEntry),
}

fn entry_from_item(item: &Item) -> Result<SchemaEntry, StoreError> {
    let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok());
    let raw: Value = get("doc")
        .and_then(|raw| serde_json::from_str(raw).ok())
        .ok_or_else(|| StoreError::Corrupt("schema item without doc".into()))?;
    let doc = SchemaDoc::from_stored(raw).map_err(StoreError::corrupt)?;
    Ok(SchemaEntry {
        doc,
        created_at: get("created_at").cloned().unwrap_or_default(),
        created_by: get("created_by").cloned(),
    })
}

service! {
    /// Schema registrations (ojs-http-binding.md §15).
    Schemas over engine: Engine
}

impl Schemas<'_> {
    /// Registers `doc` under its URI unless the URI is taken (one conditional PutItem;
    /// one more GetItem only when it is taken, to tell a replay from a conflict).
    pub async fn put(
        &self,
        doc: &SchemaDoc,
        created_by: Option<&str>,
        now: Timestamp,
    ) -> Result<SchemaPut, StoreError> {
        // A registration deleted between the failed put and the read is retried once.
        for _ in 0..2 {
            let mut item = SCHEMAS.key(&doc.uri);
            item.insert("doc".into(), s(doc.to_json().to_string()));
            item.insert("uri".into(), s(doc.uri.clone()));
            item.insert("created_at".into(), ts(&now));
            if let Some(by) = created_by {
                item.insert("created_by".into(), s(by.to_owned()));
            }
            let out = self
                .engine
                .table
                .put_item()
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(pk)")
                .send()
                .await;
            if self.engine.table.took(out)? {
                return Ok(SchemaPut::Created(SchemaEntry {
                    doc: doc.clone(),
                    created_at: time::format(&now),
                    created_by: created_by.map(str::to_owned),
                }));
            }
            match self.get(&doc.uri).await? {
                Some(existing) if existing.doc == *doc => {
                    return Ok(SchemaPut::Unchanged(existing))
                }
                Some(existing) => return Ok(SchemaPut::Taken(existing)),
                None => continue,
            }
        }
        Err(StoreError::Conflict { current: None })
    }

    /// The registration of `uri`, if any (one strongly consistent GetItem).
    pub async fn get(&self, uri: &str) -> Result<Option<SchemaEntry>, StoreError> {
        SCHEMAS.get(&self.engine.table, uri).await
    }

    /// Every registration, sorted by URI (strongly consistent Query, paged through).
    pub async fn list(&self) -> Result<Vec<SchemaEntry>, StoreError> {
        SCHEMAS.list(&self.engine.table).await
    }

    /// The versions of `job_type` in the versioned registry (the registrations under its
    /// `urn:ojs:schema:{type}:v…` URIs, [`SchemaDoc::registry_version`]), highest
    /// precedence first: one strongly consistent Query of that sort key prefix, paged
    /// through (only that type's registrations are read).
    pub async fn list_versions(&self, job_type: &str) -> Result<Vec<SchemaEntry>, StoreError> {
        let prefix = schema_sk(&schema_registry::versioned_prefix(job_type));
        let mut versions = Vec::new();
        for item in self
            .engine
            .table
            .query_partition_prefix(SCHEMAS.pk, Some(&prefix), true)
            .await?
        {
            let entry = entry_from_item(&item)?;
            if let Some(order) = entry.doc.registry_version(job_type) {
                versions.push((order, entry));
            }
        }
        versions.sort_by(|a, b| b.0.cmp(&a.0));
        Ok(versions.into_iter().map(|(_, e)| e).collect())
    }

    /// Removes the registration of `uri`; NotFound when there is none.
    pub async fn delete(&self, uri: &str) -> Result<SchemaEntry, StoreError> {
        SCHEMAS.delete(&self.engine.table, uri).await
    }
}
