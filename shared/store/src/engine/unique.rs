//! Unique jobs: a lock item `UNIQ#<fingerprint>` written in the same transaction as the
//! job (conditional: no live lock). A lock is live while its period runs or, without a
//! period, while the job holding it is in one of the policy's states; that is checked
//! when a conflict happens, so no transition has to release anything (a finished job
//! never blocks a later identical one).

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::builders::PutBuilder;
use aws_sdk_dynamodb::types::{Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use ojs_core::time::Timestamp;
use ojs_core::unique::{OnConflict, UniquePolicy};
use ojs_core::{Job, JobId, JobState};

use crate::effects::{FollowUps, Moved, OwingError};
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{self, n, s, Item};
use crate::usage::Kind;

/// What PUSH did.
#[derive(Debug, Clone)]
pub enum PushOutcome {
    /// The job was stored.
    Created,
    /// The job was stored with changes: `replace_except_schedule` replaced a scheduled
    /// job and kept its `scheduled_at`. This is the job as stored.
    CreatedAs(Box<Job>),
    /// A live duplicate exists and the policy says `ignore`: here it is.
    Existing(Box<Job>),
}

/// The lock item of `key` taken for `job`. A lock with a period lives until the period
/// ends (then DynamoDB's TTL removes it); a lock without one carries no TTL: it is live
/// while its holder is in one of the policy's states, however long that is (a TTL could
/// remove it under a job scheduled or retrying past the retention period, review #12), and
/// is taken over by the next identical PUSH once the holder is gone.
pub(crate) fn lock_item(key: &str, job: &JobId, policy: &UniquePolicy, now: Timestamp) -> Item {
    let mut lock = Item::from([
        ("pk".to_owned(), s(key)),
        ("sk".to_owned(), s("UNIQ")),
        ("job_id".to_owned(), s(job.to_string())),
    ]);
    if let Some(p) = policy.period {
        let until = ojs_core::time::after(now, p);
        lock.insert("until_us".into(), n(until.timestamp_micros()));
        lock.insert("ttl".into(), n(until.timestamp() + 60));
    }
    lock
}

/// Who holds the lock a PUSH's transaction found live (`None` when it was cancelled for
/// another reason); a job item already there under the pushed job's id is a duplicate.
fn lock_holder(
    err: SdkError<TransactWriteItemsError, HttpResponse>,
) -> Result<Option<String>, StoreError> {
    let Some(TransactWriteItemsError::TransactionCanceledException(t)) = err.as_service_error()
    else {
        return Err(StoreError::from_sdk(err));
    };
    let reasons = t.cancellation_reasons();
    if reasons.get(1).and_then(|r| r.code()) == Some("ConditionalCheckFailed") {
        return Err(StoreError::Duplicate);
    }
    Ok(reasons
        .first()
        .filter(|r| r.code() == Some("ConditionalCheckFailed"))
        .and_then(|r| r.item())
        .and_then(|i| i.get("job_id"))
        .and_then(|v| v.as_s().ok())
        .cloned())
}

/// Lock conflicts a PUSH resolves (stale locks, replaced holders) before giving up.
const MAX_ROUNDS: usize = 4;

impl Engine {
    /// Stores a job under a uniqueness policy; `body` ([`Engine::offload_body`]) puts its
    /// args and meta in the payload bucket first, kept only if the job is stored.
    pub(crate) async fn put_unique(
        &self,
        job: &Job,
        policy: &UniquePolicy,
        body: Option<Vec<u8>>,
        now: Timestamp,
    ) -> Result<Moved<PushOutcome>, OwingError> {
        let payload = match body {
            Some(body) => Some(self.offload(job, body).await?),
            None => None,
        };
        let outcome = self
            .put_unique_item(job, policy, payload.as_ref(), now)
            .await;
        if payload.is_some() {
            // Stored, or stored before an answer was lost (the job is there as pushed).
            let written = match outcome.as_ref().map(Moved::value) {
                Ok(PushOutcome::Created | PushOutcome::CreatedAs(_)) => true,
                Ok(PushOutcome::Existing(_)) => false,
                Err(_) => matches!(
                    self.get_job(&job.id).await,
                    Ok(Some(j)) if j.status.created_at == job.status.created_at
                ),
            };
            self.settle_offload(payload.as_ref(), written).await;
        }
        outcome
    }

    async fn put_unique_item(
        &self,
        job: &Job,
        policy: &UniquePolicy,
        payload: Option<&crate::dynamo::payloads::PayloadRef>,
        now: Timestamp,
    ) -> Result<Moved<PushOutcome>, OwingError> {
        let key = format!("UNIQ#{}", policy.fingerprint(&job.spec));
        // A replaced job's cancel, owed with the outcome.
        let mut owed = FollowUps::none();
        let mut takeover: Option<String> = None;
        // The job to store: the pushed one, or it rescheduled (replace_except_schedule).
        let mut stored: Option<Job> = None;
        for _ in 0..MAX_ROUNDS {
            let put_lock = self.lock_put(&key, job, policy, takeover.as_deref(), now);
            let put_job = owed.carry(self.job_put(stored.as_ref().unwrap_or(job), payload))?;
            let out = self
                .table
                .transact_write()
                .transact_items(
                    TransactWriteItem::builder()
                        .put(
                            owed.carry(
                                put_lock
                                    .build()
                                    .map_err(|e| StoreError::Backend(e.to_string())),
                            )?,
                        )
                        .build(),
                )
                .transact_items(TransactWriteItem::builder().put(put_job).build())
                .send()
                .await;
            let Err(err) = self.table.metered(Kind::Write, out) else {
                let outcome = match stored {
                    Some(j) => PushOutcome::CreatedAs(Box::new(j)),
                    None => PushOutcome::Created,
                };
                return Ok(Moved::new(outcome, owed));
            };
            let Some(holder) = owed.carry(lock_holder(err))? else {
                // Cancelled for another reason (e.g. a concurrent transaction): try again.
                continue;
            };
            let held = owed.carry(
                self.on_held_lock(job, &holder, policy, &mut stored, now)
                    .await,
            )?;
            if let Some(outcome) = held.hand_to(&mut owed) {
                return Ok(Moved::new(outcome, owed));
            }
            takeover = Some(holder);
        }
        owed.carry(Err(StoreError::Throttled("unique lock contention".into())))
    }

    /// The put of `job`'s lock item `key`: conditional on no live lock, or on the lock
    /// being the `takeover` holder's, whose job no longer holds it.
    fn lock_put(
        &self,
        key: &str,
        job: &Job,
        policy: &UniquePolicy,
        takeover: Option<&str>,
        now: Timestamp,
    ) -> PutBuilder {
        let lock = lock_item(key, &job.id, policy, now);
        let put_lock = Put::builder()
            .table_name(self.table())
            .set_item(Some(lock))
            .condition_expression(match takeover {
                Some(_) => "attribute_not_exists(pk) OR until_us < :now OR job_id = :holder",
                None => "attribute_not_exists(pk) OR until_us < :now",
            })
            .expression_attribute_values(":now", n(now.timestamp_micros()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match takeover {
            Some(holder) => put_lock.expression_attribute_values(":holder", s(holder)),
            None => put_lock,
        }
    }

    /// The put of the job item of `job` (its request in the bucket at `payload`, if
    /// there), conditional on no job with its id.
    fn job_put(
        &self,
        job: &Job,
        payload: Option<&crate::dynamo::payloads::PayloadRef>,
    ) -> Result<Put, StoreError> {
        Put::builder()
            .table_name(self.table())
            .set_item(Some(match payload {
                Some(r) => item::offloaded_job_to_item(job, self.queue_shards(), r),
                None => item::job_to_item(job, self.queue_shards()),
            }))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))
    }

    /// What PUSH does about `holder`'s lock: the outcome when the policy ends the PUSH
    /// here, `None` when the lock is to be taken over (its holder gone, or cancelled to
    /// be replaced; `stored` then becomes the job rescheduled, if the policy keeps the
    /// holder's schedule), owing the replaced job's cancel.
    async fn on_held_lock(
        &self,
        job: &Job,
        holder: &str,
        policy: &UniquePolicy,
        stored: &mut Option<Job>,
        now: Timestamp,
    ) -> Result<Moved<Option<PushOutcome>>, StoreError> {
        let live = self.live_holder(holder, policy).await?;
        match (live.as_ref(), policy.on_conflict) {
            (None, _) => Ok(Moved::done(None)),
            (Some(existing), OnConflict::Reject) => Err(StoreError::UniqueConflict {
                existing: existing.id.to_string(),
            }),
            (Some(existing), OnConflict::Ignore) => Ok(Moved::done(Some(PushOutcome::Existing(
                Box::new(existing.clone()),
            )))),
            (Some(existing), OnConflict::Replace | OnConflict::ReplaceExceptSchedule) => {
                if policy.on_conflict == OnConflict::ReplaceExceptSchedule
                    && existing.status.state == JobState::Scheduled
                {
                    if let Some(at) = existing.spec.scheduled_at {
                        *stored = Some(job.rescheduled(at, now));
                    }
                }
                match self.cancel_job_moved(&existing.id, now).await {
                    Ok(cancelled) => Ok(cancelled.map(|_| None)),
                    Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => {
                        Ok(Moved::done(None))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// The job holding a lock that failed its condition, if it still holds it: a lock with
    /// a period is live while the period runs (its condition failed, so it does), one
    /// without while its holder is in one of the policy's states.
    pub(crate) async fn live_holder(
        &self,
        holder: &str,
        policy: &UniquePolicy,
    ) -> Result<Option<Job>, StoreError> {
        let existing = match JobId::parse(holder) {
            Ok(id) => self.get_job(&id).await?,
            Err(_) => None,
        };
        Ok(existing.filter(|j| policy.covers(j.status.state) || policy.period.is_some()))
    }
}
