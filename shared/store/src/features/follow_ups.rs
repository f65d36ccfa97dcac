//! What follows a finished job, run by the layer above the engine: the engine notes each
//! job a transition finishes in the scope the entry point opened ([`following_up`]),
//! and the scope's owner moves each one's workflow and queued cron occurrence on
//! ([`crate::Workflows::after_terminal`]) in a loop, never by the engine calling up into features.

use std::future::Future;

use ojs_core::failure::Failure;
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, QueueName};

use crate::effects::FollowUps;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::features::workflow::Workflows;
use crate::jobs::{AckRequest, FailOutcome, Fence};
use crate::unique::PushOutcome;

/// Rounds of follow-ups one scope runs at most: a job a follow-up's own transition
/// finishes is followed up in the next round (none does today: a workflow cancels its
/// waiting steps quietly and records them itself); the bound keeps a damaged workflow from
/// looping a request forever (the sweep's workflow check finishes what is left).
const MAX_ROUNDS: usize = 16;

service! {
    /// A job's lifecycle calls: the engine's entry points that can finish a job, each in
    /// a scope of its own, so what it finishes is followed up before it answers. The
    /// layer test `finishing_entry_points_follow_up` finds any public method that could
    /// finish a job outside one.
    Lifecycle over engine: Engine
}

impl Lifecycle<'_> {
    /// PUSH: [`Engine::put_job_in_scope`] (a unique policy's `replace` cancels the job it
    /// replaces).
    pub async fn put_job(&self, job: &Job) -> Result<PushOutcome, StoreError> {
        following_up(self.engine, time::now(), |engine| async move {
            engine.put_job_in_scope(job).await
        })
        .await
    }

    /// CANCEL: [`Engine::cancel_job_in_scope`].
    pub async fn cancel_job(&self, id: &JobId, now: Timestamp) -> Result<Job, StoreError> {
        following_up(self.engine, now, |engine| async move {
            engine.cancel_job_in_scope(id, now).await
        })
        .await
    }

    /// ACK: [`Engine::ack_job_in_scope`].
    pub async fn ack_job(&self, ack: &AckRequest, now: Timestamp) -> Result<Job, StoreError> {
        following_up(self.engine, now, |engine| async move {
            engine.ack_job_in_scope(ack, now).await
        })
        .await
    }

    /// FAIL: [`Engine::fail_job_in_scope`].
    pub async fn fail_job(
        &self,
        id: &JobId,
        failure: &Failure,
        fence: Fence<'_>,
        requeue: bool,
        now: Timestamp,
    ) -> Result<FailOutcome, StoreError> {
        following_up(self.engine, now, |engine| async move {
            engine
                .fail_job_in_scope(id, failure, fence, requeue, now)
                .await
        })
        .await
    }

    /// [`Engine::settle_in_scope`]: an overdue job moved on (a lease or deadline passed,
    /// a time come, the job expired).
    pub async fn settle(&self, job: &Job, now: Timestamp) -> Result<Option<Job>, StoreError> {
        following_up(self.engine, now, |engine| async move {
            engine.settle_in_scope(job, now).await
        })
        .await
    }

    /// INFO: [`Engine::get_job_settled_in_scope`] (an overdue job is settled first).
    pub async fn get_job_settled(
        &self,
        id: &JobId,
        now: Timestamp,
    ) -> Result<Option<Job>, StoreError> {
        following_up(self.engine, now, |engine| async move {
            engine.get_job_settled_in_scope(id, now).await
        })
        .await
    }

    /// [`Engine::promote_due_in_scope`]: a queue's due jobs made available (expired ones
    /// discarded).
    pub async fn promote_due(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        following_up(self.engine, now, |engine| async move {
            engine.promote_due_in_scope(queue, now).await
        })
        .await
    }
}

/// Runs `call` with an engine that notes the jobs it finishes, then follows each of them
/// up (at `now`) before answering: its workflow moves on. Inside a scope already (a
/// feature that calls an entry point), the call joins it and the outer scope follows up.
pub(crate) async fn following_up<T, F, Fut>(engine: &Engine, now: Timestamp, call: F) -> T
where
    F: FnOnce(Engine) -> Fut,
    Fut: Future<Output = T>,
{
    if engine.follow_ups().is_some() {
        return call(engine.clone()).await;
    }
    let scope = FollowUps::default();
    let scoped = engine.with_follow_ups(scope.clone());
    let out = call(scoped.clone()).await;
    for _ in 0..MAX_ROUNDS {
        let finished = scope.take();
        if finished.is_empty() {
            return out;
        }
        for f in finished {
            Workflows::new(&scoped)
                .after_terminal(&f.job, f.outcome, now)
                .await;
        }
    }
    let left = scope.take();
    if !left.is_empty() {
        tracing::warn!(
            jobs = left.len(),
            "follow-ups left to the sweep after {MAX_ROUNDS} rounds"
        );
    }
    out
}
