//! One job item: read it, send a transition's conditional update, and turn the answer
//! into the job as written or a typed refusal (`NotFound`, `Conflict` with the state
//! found); a retried write that had landed is recognised by its `write_id`.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId};

use crate::engine::Engine;
use crate::error::{is_condition_failure, StoreError};
use crate::item::{self, n, s, Item};
use crate::usage::Kind;

impl Engine {
    /// Reads a job with a strongly consistent read.
    pub async fn get_job(&self, id: &JobId) -> Result<Option<Job>, StoreError> {
        self.table
            .read_as(item::job_key(id), item::job_from_item)
            .await
    }

    /// An UpdateItem on a job, returning the new item, or the old one on a failed condition.
    pub(crate) fn update(&self, id: &JobId) -> UpdateItemFluentBuilder {
        self.table
            .update_at(item::job_key(id))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// Maps an UpdateItem outcome to the updated job, or to NotFound/Conflict.
    pub(crate) fn finish_update(&self, out: UpdateResult) -> Result<Job, StoreError> {
        match self.table.metered(Kind::Write, out) {
            Ok(out) => {
                let item = out
                    .attributes()
                    .ok_or_else(|| StoreError::Corrupt("update returned no item".into()))?;
                item::job_from_item(item)
            }
            Err(e) if is_condition_failure(&e) => Err(conflict_from_old(old_item(&e))),
            Err(e) => Err(StoreError::from_sdk(e)),
        }
    }

    /// Like [`Engine::finish_update`], except that a failed condition whose current item
    /// satisfies `ours` was our own earlier attempt: the SDK retried a write that landed
    /// but whose answer was lost. That item is the result, not a conflict.
    pub(crate) fn finish_own_update(
        &self,
        out: UpdateResult,
        ours: impl Fn(&Item) -> bool,
    ) -> Result<Job, StoreError> {
        if let Err(e) = &out {
            if let Some(old) = old_item(e).filter(|old| ours(old)) {
                self.table.count_call(Kind::Write);
                return item::job_from_item(old);
            }
        }
        self.finish_update(out)
    }

    /// The TTL value for an item becoming terminal at `now`.
    pub(crate) fn expiry(&self, now: &Timestamp) -> AttributeValue {
        let secs = self.config.retention.as_secs();
        n(now.timestamp() + i64::try_from(secs).unwrap_or(i64::MAX / 2))
    }
}

/// A fresh id for one transition, stored with it as `write_id`, so that a retry of the
/// write can recognise it (see [`Engine::finish_own_update`]).
pub(crate) fn write_id() -> AttributeValue {
    s(uuid::Uuid::new_v4().simple().to_string())
}

/// What an UpdateItem on a job answered.
pub(crate) type UpdateResult = Result<UpdateItemOutput, UpdateError>;

/// An UpdateItem's error, as the SDK gives it.
type UpdateError = SdkError<UpdateItemError, HttpResponse>;

/// The old item a failed UpdateItem condition returned.
pub(crate) fn old_item(e: &UpdateError) -> Option<&Item> {
    match e.as_service_error() {
        Some(UpdateItemError::ConditionalCheckFailedException(c)) => c.item(),
        _ => None,
    }
}

/// NotFound when there was no item, Conflict with its state otherwise.
pub(crate) fn conflict_from_old(old: Option<&Item>) -> StoreError {
    match old {
        None => StoreError::missing(),
        Some(item) => StoreError::Conflict {
            current: item::state_of(item),
        },
    }
}
