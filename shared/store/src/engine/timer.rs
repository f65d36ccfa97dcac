//! Second-accurate promotion without an always-on process: a job (or cron occurrence)
//! due within SQS's 15-minute delay limit gets a delayed message on the timer queue; the
//! timer function (SQS event source; a loop in `make dev`) promotes it at that second.
//! Work further out is handed over by the scheduler sweep once it comes within range.

use std::time::{Duration, Instant};

use aws_sdk_sqs::error::{DisplayErrorContext, SdkError};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use futures::stream::{self, StreamExt};
use ojs_core::time::{self, Timestamp};
use ojs_core::JobState;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::s;
use crate::keys;

/// SQS's longest message delay.
pub const MAX_DELAY: Duration = Duration::from_secs(900);

/// Due-index queries the sweep's hand-over has in flight at once: 100 queues of 64
/// shards (6 400 queries) take seconds, not the minutes one after another would.
pub(crate) const HAND_OVER_CONCURRENCY: usize = 32;

/// `SendMessageBatch` calls one [`Timer::schedule`] has in flight at once.
const SEND_CONCURRENCY: usize = 8;

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

/// SQS queue `name` on the endpoint of `sdk`, created if missing (`make dev` and tests;
/// on AWS the template makes the queues): its client and URL. `what` names the queue in
/// errors.
pub(crate) async fn create_queue(
    sdk: &aws_config::SdkConfig,
    name: &str,
    what: &str,
) -> Result<(aws_sdk_sqs::Client, String), StoreError> {
    let client = aws_sdk_sqs::Client::new(sdk);
    let out = client
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| {
            StoreError::Backend(format!("creating the {what}: {}", DisplayErrorContext(&e)))
        })?;
    let url = out
        .queue_url()
        .ok_or_else(|| StoreError::Backend(format!("the created {what} has no URL")))?
        .to_owned();
    Ok((client, url))
}

impl Timer {
    /// The timer of SQS queue `name` on the endpoint of `sdk`, created if missing.
    pub(crate) async fn create_local(
        sdk: &aws_config::SdkConfig,
        name: &str,
    ) -> Result<Self, StoreError> {
        let (client, url) = create_queue(sdk, name, "timer queue").await?;
        Ok(Self::new(client, url))
    }

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
        // Batches of 10 (SQS's most), SEND_CONCURRENCY at a time.
        let chunks: Vec<Vec<SendMessageBatchRequestEntry>> =
            entries.chunks(10).map(<[_]>::to_vec).collect();
        let mut sends = stream::iter(chunks)
            .map(|chunk| async move {
                let out = self
                    .client
                    .send_message_batch()
                    .queue_url(&self.queue_url)
                    .set_entries(Some(chunk))
                    .send()
                    .await
                    .map_err(sqs_failure("timer queue"))?;
                match out.failed().len() {
                    0 => Ok(()),
                    n => Err(StoreError::Backend(format!(
                        "timer queue refused {n} messages"
                    ))),
                }
            })
            .buffer_unordered(SEND_CONCURRENCY);
        let mut result = Ok(());
        while let Some(sent) = sends.next().await {
            if let Err(e) = sent {
                result = Err(e);
            }
        }
        result
    }
}

impl Engine {
    /// Arms the timer for targets due within 15 minutes. Without a timer queue configured
    /// (or when SQS fails) the sweep and FETCH still promote the work, a little later, so
    /// a failure here is logged, not returned.
    pub(crate) async fn arm_timer(&self, targets: Vec<(TimerTarget, Timestamp)>) {
        self.arm_timer_at(targets, time::now()).await;
    }

    /// [`Engine::arm_timer`] with an explicit clock (the sweep passes its own `now`).
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

    /// The sweep's hand-over: jobs and cron occurrences that come within the timer's
    /// range in the next minute get their message now.
    ///
    /// One due-index Query per queue x shard (and one of the cron partition, first),
    /// [`HAND_OVER_CONCURRENCY`] at a time, started in the order of `queues` (the sweep
    /// rotates them from its cursor). Queries stop at `read_by`; what was found is sent
    /// in concurrent batches that stop at `send_by`. Partitions left unread are not lost
    /// work: the sweep (or a FETCH) promotes their jobs when due, without the timer's
    /// second accuracy. Returns how many partitions were left unread, or the last error
    /// of a partition that could not be read (one partition never holds up the others).
    pub async fn hand_over_to_timer(
        &self,
        queues: &[ojs_core::QueueName],
        now: Timestamp,
        read_by: Instant,
        send_by: Instant,
    ) -> Result<usize, StoreError> {
        if self.timer.is_none() {
            return Ok(0);
        }
        let from = now
            + chrono::Duration::from_std(MAX_DELAY - Duration::from_secs(60)).unwrap_or_default();
        let to = now + chrono::Duration::from_std(MAX_DELAY).unwrap_or_default();
        let shards = self.queue_shards();
        let partitions: Vec<(bool, String)> =
            std::iter::once((true, crate::keys::CRON_DUE_PK.to_owned()))
                .chain(queues.iter().flat_map(|queue| {
                    (0..shards).map(move |shard| (false, crate::keys::due_pk(queue, shard)))
                }))
                .collect();
        let total = partitions.len();
        let (from, to) = (&from, &to);
        let mut reads = stream::iter(partitions)
            .map(|(cron, pk)| async move { (cron, self.due_between(&pk, from, to).await) })
            .buffer_unordered(HAND_OVER_CONCURRENCY);
        let mut targets = Vec::new();
        let mut failure = None;
        let mut read = 0;
        // Past `read_by` the queries in flight are dropped (reads: nothing half done).
        while let Ok(Some((cron, due))) =
            tokio::time::timeout_at(read_by.into(), reads.next()).await
        {
            read += 1;
            match due {
                Ok(due) if cron => targets.extend(
                    due.into_iter()
                        .map(|(name, at)| (TimerTarget::Cron { name }, at)),
                ),
                Ok(due) => targets.extend(
                    due.into_iter()
                        .map(|(id, at)| (TimerTarget::Job { job_id: id }, at)),
                ),
                Err(e) => failure = Some(e),
            }
        }
        drop(reads);
        let left = total - read;
        if left > 0 {
            tracing::warn!(
                partitions = total,
                left,
                "timer hand-over out of time; the sweep promotes the rest when due"
            );
        }
        if tokio::time::timeout_at(send_by.into(), self.arm_timer_at(targets, now))
            .await
            .is_err()
        {
            tracing::warn!(
                "timer hand-over sends out of time; the sweep promotes the rest when due"
            );
        }
        failure.map_or(Ok(left), Err)
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

impl Engine {
    /// Due-index entries of partition `pk` due in `[from, to]`: (job id or cron name, due).
    pub(crate) async fn due_between(
        &self,
        pk: &str,
        from: &Timestamp,
        to: &Timestamp,
    ) -> Result<Vec<(String, Timestamp)>, StoreError> {
        let query = self
            .table
            .query_index(&crate::schema::DUE_INDEX)
            .key_condition_expression("gsi2pk = :pk AND gsi2sk BETWEEN :from AND :to")
            .expression_attribute_values(":pk", s(pk))
            .expression_attribute_values(":from", s(format!("{:016}", from.timestamp_micros())))
            .expression_attribute_values(":to", s(keys::due_upper_bound(to)))
            .limit(1000);
        let items = self.table.pages(query).items().await?;
        Ok(items
            .iter()
            .filter(|i| {
                // Active leases are the sweep's business, not the timer's.
                i.get("state")
                    .and_then(|v| v.as_s().ok())
                    .is_none_or(|st| st != JobState::Active.as_str())
            })
            .filter_map(|i| {
                let sk = i.get("gsi2sk")?.as_s().ok()?;
                let (us, rest) = sk.split_once('#')?;
                let due = time::from_micros(us.parse().ok()?)?;
                // Job keys end in the id; cron keys are the name.
                let target = rest.rsplit('#').next()?.to_owned();
                Some((target, due))
            })
            .collect())
    }
}
