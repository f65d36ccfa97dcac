//! Due jobs made available: a queue shard's due entries (scheduled times come, retries'
//! backoffs over, leases ended) read in batches and each settled with one conditional
//! write; FETCH runs it for its own queues, the sweep for every queue.

use futures::future::join_all;
use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId, JobState, QueueName, Transition};

use crate::effects::{Before, FollowUps, Moved};
use crate::engine::candidates::id_of;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{self, s, Item};
use crate::keys;
use crate::schema::DUE_INDEX;
use crate::transition::{Field, JobWrite, Place};
use crate::usage::Kind;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;

/// How many due entries one sweep of a queue looks at.
const DUE_BATCH: i32 = 25;

impl Engine {
    /// A Query of the entries of the due partition `pk` (in the due index) due at `now`
    /// or before.
    pub(crate) fn due_query(&self, pk: &str, now: &Timestamp) -> QueryFluentBuilder {
        self.table
            .query_index(&DUE_INDEX)
            .key_condition_expression("gsi2pk = :pk AND gsi2sk <= :upper")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":upper", s(keys::due_upper_bound(now)))
    }

    /// Makes the queue's due jobs available: scheduled and retryable jobs whose time has
    /// come, and active jobs whose lease expired (one batch from each shard). Returns how
    /// many moved, owing the follow-ups of those it finished (discarded ones). A shard
    /// that fails does not hold up the others: its error is answered only when no shard
    /// moved anything, as within a shard.
    #[tracing::instrument(name = "promote_due", level = "error", skip_all, fields(queue = %queue))]
    pub(crate) async fn promote_due_moved(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<Moved<usize>, StoreError> {
        let mut moved = 0;
        let mut owed = FollowUps::none();
        let mut failure = None;
        for shard in 0..self.queue_shards() {
            match self.promote_due_shard(queue, shard, now).await {
                Ok(promoted) => moved += promoted.hand_to(&mut owed),
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            Some(e) if moved == 0 => Err(e),
            _ => Ok(Moved::new(moved, owed)),
        }
    }

    /// One batch of [`crate::Lifecycle::promote_due`] from one shard of the queue.
    pub(crate) async fn promote_due_shard(
        &self,
        queue: &QueueName,
        shard: u16,
        now: Timestamp,
    ) -> Result<Moved<usize>, StoreError> {
        let out = self
            .table
            .query_index(&DUE_INDEX)
            .key_condition_expression("gsi2pk = :pk AND gsi2sk <= :upper")
            .expression_attribute_values(":pk", s(keys::due_pk(queue, shard)))
            .expression_attribute_values(":upper", s(keys::due_upper_bound(&now)))
            .limit(DUE_BATCH)
            .send()
            .await;
        let out = self.table.tally(Kind::Read, out)?;
        if out.items().is_empty() {
            self.quiet_due.note(&(queue.clone(), shard));
        }
        let due: Vec<(JobId, String, JobState)> = out
            .items()
            .iter()
            .filter_map(|i| {
                let id = id_of(i)?;
                let due_sk = i.get("gsi2sk")?.as_s().ok()?.clone();
                let state: JobState = i.get("state")?.as_s().ok()?.parse().ok()?;
                Some((id, due_sk, state))
            })
            .collect();
        let results = join_all(
            due.iter()
                .map(|(id, sk, state)| self.make_available(queue, *id, sk.clone(), *state, now)),
        )
        .await;
        let mut moved = Vec::new();
        let mut owed = FollowUps::none();
        let mut failure = None;
        for ((id, _, _), r) in due.iter().zip(results) {
            match r.map(|m| m.hand_to(&mut owed)) {
                Ok(Some((job, _))) => moved.push(job),
                Ok(None) => {}
                // One job that cannot be moved never holds up the others.
                Err(StoreError::Corrupt(why)) => self.set_aside(id, &why).await,
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            Some(e) if moved.is_empty() => Err(e),
            _ => Ok(Moved::new(moved.len(), owed)),
        }
    }

    /// One conditional move of a due job to `available`, with the state it left when this
    /// move is still to be counted (a settled job was counted by its settlement). `None`
    /// if another sweep or a worker got there first.
    async fn make_available(
        &self,
        queue: &QueueName,
        id: JobId,
        due_sk: String,
        state: JobState,
        now: Timestamp,
    ) -> Result<Moved<Option<(Job, Option<JobState>)>>, StoreError> {
        let priority = keys::priority_from_due_sk(&due_sk).unwrap_or(0);
        let lane = crate::keys::Lane {
            queue: queue.clone(),
            tenant: keys::tenant_from_due_sk(&due_sk),
        };
        match state {
            JobState::Scheduled | JobState::Retryable => {}
            JobState::Active | JobState::Available => {
                // A lease, an execution deadline or an expiry passed: read the job to
                // apply its policy, then write under the version read.
                let Some(job) = self.get_job(&id).await? else {
                    return Ok(Moved::done(None));
                };
                let settled = self.settle_moved(&job, now).await?;
                return Ok(settled.map(|j| j.map(|j| (j, None))));
            }
            _ => return Ok(Moved::done(None)),
        }
        // Promoted on the due entry read, without reading the item: its expiry (if any)
        // is listed by a second write once the job is known.
        let req = JobWrite::new(
            Transition::Promote,
            Place::Ready {
                pk: self.ready_pk(&lane, &id),
                sk: keys::ready_sk(priority, &now, &id),
                expiry: None,
            },
        )
        .from(state)
        .listed_due(due_sk)
        .stamp(Field::EnqueuedAt, &now)
        .clear(Field::NextAttemptAt);
        let before = Before {
            state,
            lease_us: None,
        };
        match self.transition(&id, req, Some(before)).await {
            Ok(promoted) => {
                let job = promoted.unfinished();
                self.watch_expiry(&job).await?;
                Ok(Moved::done(Some((job, Some(state)))))
            }
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(Moved::done(None)),
            Err(e) => Err(e),
        }
    }
}

pub(crate) fn is_expired_available(old: &Item, now: &Timestamp) -> bool {
    let available = item::state_of(old) == Some(JobState::Available);
    let expires = old
        .get("expires_us")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok());
    available && expires.is_some_and(|e| e <= now.timestamp_micros())
}
