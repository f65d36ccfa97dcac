//! The one way a transition reaches the table: [`Engine::transition`] sends a
//! [`JobWrite`] alone, [`Engine::transition_with`] with another item in one transaction;
//! both read the job as written, apply its [`Effects`] (slot, timer) and answer the job
//! with the follow-up it owes ([`Moved`]). A call site cannot write a job
//! and forget what follows: `JobWrite` has no other way out but `parts`, for the claim's
//! transaction with its rate windows (a claim sets off no effect: see `Effects::of`).

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use ojs_core::{Job, JobId};

use crate::effects::{Before, Effects, Moved};
use crate::engine::Engine;
use crate::error::{Missing, StoreError};
use crate::item::{self, Item};
use crate::job_item::{conflict_from_old, old_item};
use crate::jobs::not_holder;
use crate::transition::JobWrite;

/// Whether `old`, the item a failed condition found, is this write's own (`wid`): the SDK
/// retried a write whose answer was lost. Known by the write id, or by the error a
/// failure appended carrying it.
fn landed(old: &Item, wid: Option<&AttributeValue>) -> bool {
    wid.is_some_and(|wid| old.get("write_id") == Some(wid) || item::has_error_written_by(old, wid))
}

impl Engine {
    /// Sends `write` of job `id` (found as `before`, when read: a blind write such as
    /// CANCEL knows only the result) and applies its effects. A failed condition is
    /// `NotFound` or `Conflict` with the state found, `NotHolder` for a write
    /// [`JobWrite::refusing_other_holders`], the job when the write had landed.
    pub(crate) async fn transition(
        &self,
        id: &JobId,
        write: JobWrite,
        before: Option<Before>,
    ) -> Result<Moved<Job>, StoreError> {
        let (wid, refuses, quiet) = (write.wid.clone(), write.refuses_other_holders, write.quiet);
        let out = write.parts()?.apply(self.update(id)).send().await;
        let refused = match &out {
            Err(e) if refuses => not_holder(old_item(e).filter(|old| !landed(old, wid.as_ref()))),
            _ => None,
        };
        let job = match (
            self.finish_own_update(out, |old| landed(old, wid.as_ref())),
            refused,
        ) {
            (Err(StoreError::Conflict { .. }), Some(refused)) => return Err(refused),
            (other, _) => other.map_err(|e| e.naming(|| Missing::Job(id.to_string())))?,
        };
        Ok(self.followed(job, before, quiet).await)
    }

    /// [`Engine::transition`] of `job` as it was read (its state before the write).
    pub(crate) async fn transition_read(
        &self,
        job: &Job,
        write: JobWrite,
    ) -> Result<Moved<Job>, StoreError> {
        self.transition(&job.id, write, Some(Before::of(job))).await
    }

    /// Sends `write` of job `id` together with `other` in one transaction (a dead letter
    /// entry written or removed with the job), reads the job back (transactions return no
    /// item) and applies its effects. Refusals as for [`Engine::transition`].
    pub(crate) async fn transition_with(
        &self,
        id: &JobId,
        write: JobWrite,
        other: TransactWriteItem,
        before: Option<Before>,
    ) -> Result<Moved<Job>, StoreError> {
        let (wid, quiet) = (write.wid.clone(), write.quiet);
        let parts = write.parts()?;
        let update = Update::builder()
            .table_name(self.table())
            .set_key(Some(item::job_key(id)))
            .update_expression(parts.update)
            .condition_expression(parts.condition)
            .set_expression_attribute_names((!parts.names.is_empty()).then_some(parts.names))
            .set_expression_attribute_values(Some(parts.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let update = TransactWriteItem::builder().update(update).build();
        let job = match self.table.transact(vec![update, other]).await {
            Ok(()) => {
                let item = self.table.read_item(item::job_key(id)).await?;
                item.as_ref()
                    .map(item::job_from_item)
                    .transpose()?
                    .ok_or_else(|| StoreError::NotFound(Missing::Job(id.to_string())))?
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
                match first.and_then(|r| r.item()) {
                    Some(old) if landed(old, wid.as_ref()) => item::job_from_item(old)?,
                    old => {
                        return Err(conflict_from_old(old).naming(|| Missing::Job(id.to_string())))
                    }
                }
            }
        };
        Ok(self.followed(job, before, quiet).await)
    }

    /// `job` as written, with the effects of its write from `before` applied, owing its
    /// follow-up (none for a quiet write).
    async fn followed(&self, job: Job, before: Option<Before>, quiet: bool) -> Moved<Job> {
        let mut effects = Effects::of(before, &job);
        if quiet {
            effects.finished = None;
        }
        let follow_ups = self.apply_effects(&job, effects).await;
        Moved::new(job, follow_ups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::s;

    #[test]
    fn a_failed_condition_on_our_own_landed_write_is_known_by_its_id() {
        let wid = s("w-1");
        let ours = Item::from([("write_id".to_owned(), s("w-1"))]);
        let theirs = Item::from([("write_id".to_owned(), s("w-2"))]);
        assert!(landed(&ours, Some(&wid)));
        assert!(!landed(&theirs, Some(&wid)));
        // A write without an id is never taken for one that landed.
        assert!(!landed(&ours, None));
        // A failure is also known by the error it appended, marked with its id.
        let error = serde_json::json!({ item::WRITE_MARK: "w-1", "message": "boom" });
        let failed = Item::from([(
            "errors".to_owned(),
            AttributeValue::L(vec![s(error.to_string())]),
        )]);
        assert!(landed(&failed, Some(&wid)));
        assert!(!landed(&failed, Some(&s("w-3"))));
    }
}
