//! What a timer message wakes (`engine/timer.rs` arms them): a scheduled or retryable
//! job, which the engine promotes, or a cron registration's occurrence, which the cron
//! feature fires. Above both, so the engine never calls up into cron.

use ojs_core::time;
use ojs_core::JobId;

use crate::engine::Engine;
use crate::error::StoreError;
use crate::features::cron::Cron;
use crate::features::follow_ups::follow;
use crate::timer::{TimerMessage, TimerTarget};
use std::time::Duration;

service! {
    /// What timer messages wake, handled: one message (the timer function), or the local
    /// timer queue consumed for ever (`make dev`, tests).
    Wakeups over engine: Engine
}

impl Wakeups<'_> {
    /// Handles one timer message: waits out the sub-second remainder, then promotes the
    /// job or fires the cron occurrence (both conditional, so duplicates are harmless).
    pub async fn handle_timer(&self, body: &str) -> Result<(), StoreError> {
        let engine = self.engine;
        let msg: TimerMessage = serde_json::from_str(body)
            .map_err(|e| StoreError::Corrupt(format!("timer message: {e}")))?;
        let due = time::from_micros(msg.due_us)
            .ok_or_else(|| StoreError::Corrupt("timer due time".into()))?;
        let early = due - time::now();
        if early > chrono::Duration::zero() {
            if early > chrono::Duration::seconds(5) {
                // Delivered far too early (a delay longer than SQS allows): re-arm.
                engine.arm_timer(vec![(msg.target, due)]).await;
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
                if let Some(job) = engine.get_job(&id).await? {
                    let settled = engine.settle_moved(&job, now).await;
                    follow(engine, now, settled).await?;
                }
            }
            TimerTarget::Cron { name } => {
                Cron::new(engine).fire_cron(&name, now).await?;
            }
        }
        Ok(())
    }
    /// Consumes the timer queue forever, handling each message like the
    /// timer function does and deleting it once handled. For the local server and tests,
    /// where no SQS event source mapping exists.
    pub async fn consume_timer_queue(&self) {
        let Some(timer) = self.engine.timer.clone() else {
            return;
        };
        loop {
            let received = timer
                .client()
                .receive_message()
                .queue_url(timer.queue_url())
                .max_number_of_messages(10)
                // Short polls: moto only returns a message that became visible during a
                // long poll when the poll ends, which would add up to a second.
                .wait_time_seconds(0)
                .send()
                .await;
            let messages = match received {
                Ok(out) => out.messages.unwrap_or_default(),
                Err(e) => {
                    tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "timer queue receive failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if messages.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // One task per message, so a message waiting out its last fraction of a
            // second never holds back the next receive.
            for m in messages {
                let engine = self.engine.clone();
                let timer = timer.clone();
                tokio::spawn(async move {
                    let handled = match m.body() {
                        Some(body) => match Wakeups::new(&engine).handle_timer(body).await {
                            Ok(()) | Err(StoreError::Corrupt(_)) => true,
                            Err(e) => {
                                tracing::warn!(error = %e, "timer message failed; it will be redelivered");
                                false
                            }
                        },
                        None => true,
                    };
                    if let (true, Some(receipt)) = (handled, m.receipt_handle()) {
                        let _ = timer
                            .client()
                            .delete_message()
                            .queue_url(timer.queue_url())
                            .receipt_handle(receipt)
                            .send()
                            .await;
                    }
                });
            }
        }
    }
}
