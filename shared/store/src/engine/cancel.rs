//! CANCEL: one conditional write from whichever state the job is in; its effects give
//! back a running attempt's slot, and a workflow step's cancel owes its follow-up (unless
//! the workflow is the one cancelling it).

use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId, Transition};

use crate::effects::Moved;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::job_item::write_id;
use crate::transition::{Field, JobWrite, Place};

impl Engine {
    /// Cancels a non-terminal job in one conditional write, owing its follow-up (a
    /// workflow step's workflow moves on).
    #[tracing::instrument(name = "cancel", level = "error", skip_all, fields(job_id = %id))]
    pub(crate) async fn cancel_job_moved(
        &self,
        id: &JobId,
        now: Timestamp,
    ) -> Result<Moved<Job>, StoreError> {
        let (done, follow_ups) = self
            .transition(id, cancel_write(self, now), None)
            .await?
            .split();
        Ok(Moved::new(self.shown_job(done).await, follow_ups))
    }

    /// Cancels a job without feeding the cancellation back into its workflow (the
    /// workflow is the one cancelling it).
    pub(crate) async fn cancel_job_quietly(
        &self,
        id: &JobId,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let write = cancel_write(self, now).quietly();
        Ok(self.transition(id, write, None).await?.unfinished())
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
    .cancelled_from_state()
    .stamp(Field::CancelledAt, &now)
    .write_id(&write_id())
}
