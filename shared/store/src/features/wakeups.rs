//! What a timer message wakes (`engine/timer.rs` arms them): a scheduled or retryable
//! job, which the engine promotes, or a cron registration's occurrence, which the cron
//! feature fires. Above both, so the engine never calls up into cron.

use ojs_core::time;
use ojs_core::JobId;

use crate::error::StoreError;
use crate::timer::{TimerMessage, TimerTarget};
use crate::Store;

impl Store {
    /// Handles one timer message: waits out the sub-second remainder, then promotes the
    /// job or fires the cron occurrence (both conditional, so duplicates are harmless).
    pub async fn handle_timer(&self, body: &str) -> Result<(), StoreError> {
        self.following_up(ojs_core::time::now(), |store| async move {
            store.handle_timer_in_scope(body).await
        })
        .await
    }

    /// [`Store::handle_timer`] within the caller's follow-up scope.
    async fn handle_timer_in_scope(&self, body: &str) -> Result<(), StoreError> {
        let msg: TimerMessage = serde_json::from_str(body)
            .map_err(|e| StoreError::Corrupt(format!("timer message: {e}")))?;
        let due = time::from_micros(msg.due_us)
            .ok_or_else(|| StoreError::Corrupt("timer due time".into()))?;
        let early = due - time::now();
        if early > chrono::Duration::zero() {
            if early > chrono::Duration::seconds(5) {
                // Delivered far too early (a delay longer than SQS allows): re-arm.
                self.arm_timer(vec![(msg.target, due)]).await;
                return Ok(());
            }
            tokio::time::sleep(early.to_std().unwrap_or_default()).await;
        }
        let now = time::now();
        match msg.target {
            TimerTarget::Job { job_id } => {
                let Ok(id) = JobId::parse(&job_id) else {
                    return Ok(());
                };
                if let Some(job) = self.get_job(&id).await? {
                    self.settle(&job, now).await?;
                }
            }
            TimerTarget::Cron { name } => {
                self.fire_cron(&name, now).await?;
            }
        }
        Ok(())
    }
}
