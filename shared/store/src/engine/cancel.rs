//! CANCEL: one conditional write from whichever state the job is in; its effects give
//! back a running attempt's slot, and a workflow step's cancel is followed up (unless the
//! workflow is the one cancelling it).

use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId, Transition};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::job_item::write_id;
use crate::transition::{Field, JobWrite, Place};

impl Engine {
    /// Cancels a non-terminal job in one conditional write (and, for a workflow step,
    /// tells its workflow).
    #[tracing::instrument(name = "cancel", level = "error", skip_all, fields(job_id = %id))]
    pub(crate) async fn cancel_job_in_scope(
        &self,
        id: &JobId,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let done = self.transition(id, cancel_write(self, now), None).await?;
        Ok(self.shown_job(done).await)
    }

    /// Cancels a job without feeding the cancellation back into its workflow (the
    /// workflow is the one cancelling it).
    pub(crate) async fn cancel_job_quietly(
        &self,
        id: &JobId,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let write = cancel_write(self, now).quietly();
        self.transition(id, write, None).await
    }
}

/// The CANCEL transition, from whichever state the job is in.
fn cancel_write(engine: &Engine, now: Timestamp) -> JobWrite {
    JobWrite::new(
        Transition::Cancel,
        Place::Retained {
            ttl: engine.expiry(&now),
        },
    )
    .set("cancelled_from = #state")
    .stamp(Field::CancelledAt, &now)
    .write_id(&write_id())
}
