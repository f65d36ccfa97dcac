//! Second-accurate promotion without an always-on process: a job (or cron occurrence)
//! due within SQS's 15-minute delay limit gets a delayed message on the timer queue; the
//! timer function (SQS event source; a loop in `make dev`) promotes it at that second.
//! Work further out is handed over by the scheduler sweep once it comes within range.

use std::time::Duration;

use aws_sdk_sqs::error::{DisplayErrorContext, SdkError};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use ojs_core::time::{self, Timestamp};
use ojs_core::JobId;
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::Store;

/// SQS's longest message delay.
pub const MAX_DELAY: Duration = Duration::from_secs(900);

/// What a timer message wakes up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TimerTarget {
    /// A scheduled or retryable job.
    Job {
        /// The job.
        job_id: String,
    },
    /// A cron registration's next occurrence.
    Cron {
        /// The registration.
        name: String,
    },
}

/// A timer message body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerMessage {
    /// What to wake.
    #[serde(flatten)]
    pub target: TimerTarget,
    /// When, in epoch microseconds.
    pub due_us: i64,
}

/// The timer queue.
#[derive(Clone)]
pub struct Timer {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl Timer {
    /// A timer over `queue_url`.
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }

    /// The queue URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// The SQS client.
    pub fn client(&self) -> &aws_sdk_sqs::Client {
        &self.client
    }

    /// Sends one delayed message per target due within [`MAX_DELAY`] of `now`.
    pub async fn schedule(
        &self,
        targets: Vec<(TimerTarget, Timestamp)>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let entries: Vec<SendMessageBatchRequestEntry> = targets
            .into_iter()
            .filter(|(_, due)| {
                *due - now <= chrono::Duration::from_std(MAX_DELAY).unwrap_or_default()
            })
            .enumerate()
            .filter_map(|(i, (target, due))| {
                let msg = TimerMessage {
                    target,
                    due_us: due.timestamp_micros(),
                };
                let delay_ms = (due - now).num_milliseconds().max(0);
                // Round down: the handler waits out the last fraction of a second.
                let delay = i32::try_from(delay_ms / 1000).unwrap_or(900).min(900);
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(serde_json::to_string(&msg).ok()?)
                    .delay_seconds(delay)
                    .build()
                    .ok()
            })
            .collect();
        for chunk in entries.chunks(10) {
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(chunk.to_vec()))
                .send()
                .await
                .map_err(sqs_failure("timer queue"))?;
            if !out.failed().is_empty() {
                return Err(StoreError::Backend(format!(
                    "timer queue refused {} messages",
                    out.failed().len()
                )));
            }
        }
        Ok(())
    }
}

impl Store {
    /// Arms the timer for targets due within 15 minutes. Without a timer queue configured
    /// (or when SQS fails) the sweep and FETCH still promote the work, a little later, so
    /// a failure here is logged, not returned.
    pub(crate) async fn arm_timer(&self, targets: Vec<(TimerTarget, Timestamp)>) {
        self.arm_timer_at(targets, time::now()).await;
    }

    /// [`Store::arm_timer`] with an explicit clock (the sweep passes its own `now`).
    async fn arm_timer_at(&self, targets: Vec<(TimerTarget, Timestamp)>, now: Timestamp) {
        let Some(timer) = &self.timer else {
            return;
        };
        if targets.is_empty() {
            return;
        }
        if let Err(e) = timer.schedule(targets, now).await {
            tracing::warn!(error = %e, "timer not armed; the sweep will promote instead");
        }
    }

    /// Handles one timer message: waits out the sub-second remainder, then promotes the
    /// job or fires the cron occurrence (both conditional, so duplicates are harmless).
    pub async fn handle_timer(&self, body: &str) -> Result<(), StoreError> {
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

    /// The sweep's hand-over: jobs and cron occurrences that come within the timer's
    /// range in the next minute get their message now.
    pub(crate) async fn hand_over_to_timer(
        &self,
        queues: &[ojs_core::QueueName],
        now: Timestamp,
    ) -> Result<(), StoreError> {
        if self.timer.is_none() {
            return Ok(());
        }
        let from = now
            + chrono::Duration::from_std(MAX_DELAY - Duration::from_secs(60)).unwrap_or_default();
        let to = now + chrono::Duration::from_std(MAX_DELAY).unwrap_or_default();
        let mut targets = Vec::new();
        let mut failure = None;
        // One partition that cannot be read never holds up the others.
        for queue in queues {
            for shard in 0..self.queue_shards() {
                match self
                    .due_between(&crate::keys::due_pk(queue, shard), &from, &to)
                    .await
                {
                    Ok(due) => targets.extend(
                        due.into_iter()
                            .map(|(id, at)| (TimerTarget::Job { job_id: id }, at)),
                    ),
                    Err(e) => failure = Some(e),
                }
            }
        }
        match self.due_between(crate::keys::CRON_DUE_PK, &from, &to).await {
            Ok(due) => targets.extend(
                due.into_iter()
                    .map(|(name, at)| (TimerTarget::Cron { name }, at)),
            ),
            Err(e) => failure = Some(e),
        }
        self.arm_timer_at(targets, now).await;
        failure.map_or(Ok(()), Err)
    }
}

impl Store {
    /// Consumes the timer queue forever, handling each message like the
    /// timer function does and deleting it once handled. For the local server and tests,
    /// where no SQS event source mapping exists.
    pub async fn consume_timer_queue(&self) {
        let Some(timer) = self.timer.clone() else {
            return;
        };
        loop {
            let received = timer
                .client
                .receive_message()
                .queue_url(&timer.queue_url)
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
                let store = self.clone();
                let timer = timer.clone();
                tokio::spawn(async move {
                    let handled = match m.body() {
                        Some(body) => match store.handle_timer(body).await {
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
                            .client
                            .delete_message()
                            .queue_url(&timer.queue_url)
                            .receipt_handle(receipt)
                            .send()
                            .await;
                    }
                });
            }
        }
    }

    /// Creates (or finds) an SQS queue named `name` and arms timers through it. Used by the
    /// local server and tests; on AWS the queue comes from the template.
    pub async fn with_local_timer_queue(
        self,
        sdk: &aws_config::SdkConfig,
        name: &str,
    ) -> Result<Self, StoreError> {
        let client = aws_sdk_sqs::Client::new(sdk);
        let out = client
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .map_err(sqs_failure("creating timer queue"))?;
        let url = out
            .queue_url()
            .ok_or_else(|| StoreError::Backend("created timer queue has no URL".into()))?
            .to_owned();
        Ok(self.with_timer(Timer::new(client, url)))
    }
}

/// Maps a failed SQS call to a backend error, `what` naming the call.
fn sqs_failure<E, R>(what: &'static str) -> impl FnOnce(SdkError<E, R>) -> StoreError
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    move |e| StoreError::Backend(format!("{what}: {}", DisplayErrorContext(&e)))
}
