//! The dead letter entry of a job (the `DEAD` partition; `features/dead_letter.rs` lists
//! and serves them): written in the same transaction as the discard that dead-letters the
//! job, removed in the same transaction as its retry or deletion, so an entry and its job
//! never disagree.

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use ojs_core::{Job, JobId};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{self, s};
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

    /// Sends the conditional update `req` of job `id` together with `other` in one
    /// transaction, and returns the job as written (read back: transactions return no
    /// item). A failed condition is NotFound or Conflict as for a plain update, unless
    /// the job already carries `wid` (the SDK retried a transaction that had landed).
    pub(crate) async fn update_job_with(
        &self,
        id: &JobId,
        req: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
        other: TransactWriteItem,
        wid: &AttributeValue,
    ) -> Result<Job, StoreError> {
        let input = req.as_input();
        let update = Update::builder()
            .table_name(self.table())
            .set_key(input.get_key().clone())
            .set_update_expression(input.get_update_expression().clone())
            .set_condition_expression(input.get_condition_expression().clone())
            .set_expression_attribute_names(input.get_expression_attribute_names().clone())
            .set_expression_attribute_values(input.get_expression_attribute_values().clone())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let update = TransactWriteItem::builder().update(update).build();
        match self.table.transact(vec![update, other]).await {
            Ok(()) => {
                let item = self.table.read_item(item::job_key(id)).await?;
                item.as_ref()
                    .map(item::job_from_item)
                    .transpose()?
                    .ok_or(StoreError::NotFound)
            }
            Err(e) => {
                let Some(TransactWriteItemsError::TransactionCanceledException(t)) =
                    e.as_service_error()
                else {
                    return Err(StoreError::from_sdk(e));
                };
                let first = t.cancellation_reasons().first();
                if first.and_then(|r| r.code()) != Some("ConditionalCheckFailed") {
                    return Err(StoreError::Throttled(
                        "the transaction met a concurrent write; retry".into(),
                    ));
                }
                let old = first.and_then(|r| r.item());
                match old {
                    Some(old) if old.get("write_id") == Some(wid) => item::job_from_item(old),
                    _ => Err(crate::job_item::conflict_from_old(old)),
                }
            }
        }
    }
}
