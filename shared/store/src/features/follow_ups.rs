//! What follows a finished job, run by the layer above the engine: every engine call that
//! can finish a job answers the follow-ups it owes with its value ([`Moved`]), and the
//! entry points here run them ([`follow`]): each finished job's workflow and queued cron
//! occurrence move on ([`crate::Workflows::after_terminal`]), in a loop, never by the
//! engine calling up into the features.

use std::future::Future;

use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, QueueName};

use crate::effects::{Moved, OwingError};
use crate::engine::Engine;
use crate::error::StoreError;
use crate::features::workflow::Workflows;
use crate::jobs::{AckRequest, FailOutcome, FailRequest};
use crate::unique::PushOutcome;

service! {
    /// A job's lifecycle calls: the engine's calls that can finish a job, each followed
    /// by what it owes ([`follow`]) before it answers.
    Lifecycle over engine: Engine
}

impl Lifecycle<'_> {
    /// What `moved` answers once what it owes has run at `now` ([`follow`]).
    async fn followed<T, E: Into<OwingError>>(
        &self,
        now: Timestamp,
        moved: impl Future<Output = Result<Moved<T>, E>>,
    ) -> Result<T, StoreError> {
        follow(self.engine, now, moved.await).await
    }

    /// PUSH: [`Engine::put_job_moved`] (a unique policy's `replace` cancels the job it
    /// replaces).
    pub async fn put_job(&self, job: &Job) -> Result<PushOutcome, StoreError> {
        let moved = self.engine.put_job_moved(job).await;
        follow(self.engine, time::now(), moved).await
    }

    /// CANCEL: [`Engine::cancel_job_moved`].
    pub async fn cancel_job(&self, id: &JobId, now: Timestamp) -> Result<Job, StoreError> {
        self.followed(now, self.engine.cancel_job_moved(id, now))
            .await
    }

    /// ACK: [`Engine::ack_job_moved`].
    pub async fn ack_job(&self, ack: &AckRequest, now: Timestamp) -> Result<Job, StoreError> {
        self.followed(now, self.engine.ack_job_moved(ack, now))
            .await
    }

    /// FAIL: [`Engine::fail_job_moved`].
    pub async fn fail_job(
        &self,
        fail: FailRequest<'_>,
        now: Timestamp,
    ) -> Result<FailOutcome, StoreError> {
        self.followed(now, self.engine.fail_job_moved(fail, now))
            .await
    }

    /// [`Engine::settle_moved`]: an overdue job moved on (a lease or deadline passed,
    /// a time come, the job expired).
    pub async fn settle(&self, job: &Job, now: Timestamp) -> Result<Option<Job>, StoreError> {
        self.followed(now, self.engine.settle_moved(job, now)).await
    }

    /// INFO: [`Engine::get_job_settled_moved`] (an overdue job is settled first).
    pub async fn get_job_settled(
        &self,
        id: &JobId,
        now: Timestamp,
    ) -> Result<Option<Job>, StoreError> {
        self.followed(now, self.engine.get_job_settled_moved(id, now))
            .await
    }

    /// [`Engine::promote_due_moved`]: a queue's due jobs made available (expired ones
    /// discarded).
    pub async fn promote_due(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        self.followed(now, self.engine.promote_due_moved(queue, now))
            .await
    }
}

/// The value of `moved` once what it owes has run (at `now`), after a success or an
/// error alike: each finished job's workflow and queued cron occurrence moved on, in the
/// order they finished. A follow-up makes no transition that finishes a job (a workflow
/// cancels its waiting steps quietly and records them itself), so one pass runs them all;
/// one that fails is logged and left to the sweep's workflow check
/// ([`Workflows::after_terminal`]).
pub(crate) async fn follow<T, E: Into<OwingError>>(
    engine: &Engine,
    now: Timestamp,
    moved: Result<Moved<T>, E>,
) -> Result<T, StoreError> {
    let (answer, owed) = match moved {
        Ok(moved) => {
            let (value, owed) = moved.split();
            (Ok(value), owed)
        }
        Err(e) => {
            let (error, owed) = e.into().split();
            (Err(error), owed)
        }
    };
    for f in owed.into_finished() {
        Workflows::new(engine)
            .after_terminal(&f.job, f.outcome, now)
            .await;
    }
    answer
}
