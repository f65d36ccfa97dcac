//! The dead letter entry of a job (the `DEAD` partition; `features/dead_letter.rs` lists
//! and serves them): written in the same transaction as the discard that dead-letters the
//! job, removed in the same transaction as its retry or deletion, so an entry and its job
//! never disagree.

use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem};
use ojs_core::Job;

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::s;
use crate::keys;

/// The attribute of a dead letter entry naming its job's tenant.
pub(crate) const DEAD_TENANT: &str = "tenant";

impl Engine {
    /// The transaction item writing the dead letter entry `sk` of `job`, with its tenant
    /// (none for the default tenant's), which a tenant's listing filters on.
    pub(crate) fn dead_entry_put(
        &self,
        sk: &str,
        job: &Job,
    ) -> Result<TransactWriteItem, StoreError> {
        let mut put = Put::builder()
            .table_name(self.table())
            .item("pk", s(keys::DEAD_PK))
            .item("sk", s(sk))
            .item("job_id", s(job.id.to_string()));
        if let Some(tenant) = job.tenant() {
            put = put.item(DEAD_TENANT, s(tenant.as_str()));
        }
        let put = put
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The transaction item removing the dead letter entry `sk`.
    pub(crate) fn dead_entry_delete(&self, sk: &str) -> Result<TransactWriteItem, StoreError> {
        let delete = Delete::builder()
            .table_name(self.table())
            .key("pk", s(keys::DEAD_PK))
            .key("sk", s(sk))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(TransactWriteItem::builder().delete(delete).build())
    }
}
