//! CANCEL: one conditional write from whichever state the job is in; its effects give
//! back a running attempt's slot, and a workflow step's cancel is followed up (unless the
//! workflow is the one cancelling it).

use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId, Transition};

use crate::effects::Effects;
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
        let job = self.write_cancel(id, now).await?;
        self.apply_effects(&job, Effects::of(None, &job)).await;
        Ok(self.shown_job(job).await)
    }

    /// Cancels a job without feeding the cancellation back into its workflow (the
    /// workflow is the one cancelling it).
    pub(crate) async fn cancel_job_quietly(
        &self,
        id: &JobId,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        let job = self.write_cancel(id, now).await?;
        let effects = Effects {
            finished: None,
            ..Effects::of(None, &job)
        };
        self.apply_effects(&job, effects).await;
        Ok(job)
    }

    /// The CANCEL transition, from whichever state the job is in.
    pub(crate) async fn write_cancel(&self, id: &JobId, now: Timestamp) -> Result<Job, StoreError> {
        let wid = write_id();
        let req = JobWrite::new(
            Transition::Cancel,
            Place::Retained {
                ttl: self.expiry(&now),
            },
        )
        .set("cancelled_from = #state")
        .stamp(Field::CancelledAt, &now)
        .write_id(&wid)
        .apply(self.update(id))?;
        let out = req.send().await;
        self.finish_own_update(out, |old| old.get("write_id") == Some(&wid))
    }
}
