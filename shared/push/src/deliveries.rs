//! Deliveries on their own queue (deploy review F2): whoever applies a batch of the change
//! stream only decides what to deliver ([`Planner`]) and hands each delivery to a queue;
//! a consumer of that queue makes it ([`Deliverer`]). A receiver that hangs then holds up
//! its own delivery, never the stream: the next batch's events, counters and every other
//! queue's pushes go on.
//!
//! On AWS the queue is SQS (`DeliveryQueue`, consumed by the delivery function with
//! partial batch responses; a message that fails three times goes to its dead-letter queue,
//! alarmed). In process (`make dev`, tests) it is a task per delivery. Either way the same
//! planner and deliverer run, and a delivery made twice (a message delivered again) is
//! harmless: a push claims the job conditionally, so a second offer finds it taken; a
//! webhook attempt carries the delivery id planned once, so a receiver can drop the copy.

use std::sync::Arc;

use ojs_core::time;
use ojs_store::{Change, StoreError};
use serde_json::{json, Value};

use crate::{Dispatcher, WebhookDispatcher};

/// Largest message body sent to the delivery queue: SQS takes 256 KiB per message and per
/// `SendMessageBatch`; what is over loses its event's `result` (as a stored event page
/// does), which the receiver can read from the job.
const MAX_MESSAGE_BYTES: usize = 200 * 1024;

/// Most messages of one `SendMessageBatch`.
const SEND_BATCH: usize = 10;

/// One delivery to make.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// Offer a job the stream saw made available to its queue's push endpoints.
    Push {
        /// The job.
        job_id: String,
    },
    /// The first attempt of a lifecycle event at one webhook subscription.
    Webhook(PlannedWebhook),
}

/// The first attempt of a lifecycle event at one webhook subscription, as planned.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedWebhook {
    /// The subscription.
    pub subscription_id: String,
    /// The delivery's id, the same for every attempt of it.
    pub delivery_id: String,
    /// The event's type (`job.completed`, ...).
    pub event_type: String,
    /// The event's id.
    pub event_id: String,
    /// The event as sent.
    pub body: String,
}

impl Delivery {
    /// The message body of this delivery.
    pub fn to_message(&self) -> String {
        match self {
            Delivery::Push { job_id } => json!({"kind": "push", "job_id": job_id}).to_string(),
            Delivery::Webhook(w) => json!({
                "kind": "webhook", "subscription_id": w.subscription_id,
                "delivery_id": w.delivery_id, "event_type": w.event_type,
                "event_id": w.event_id, "body": w.body,
            })
            .to_string(),
        }
    }

    /// The delivery a message body holds.
    pub fn from_message(text: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let field = |k: &str| {
            v[k].as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("no {k}"))
        };
        match v["kind"].as_str() {
            Some("push") => Ok(Delivery::Push {
                job_id: field("job_id")?,
            }),
            Some("webhook") => Ok(Delivery::Webhook(PlannedWebhook {
                subscription_id: field("subscription_id")?,
                delivery_id: field("delivery_id")?,
                event_type: field("event_type")?,
                event_id: field("event_id")?,
                body: field("body")?,
            })),
            other => Err(format!("unknown delivery kind {other:?}")),
        }
    }
}

/// An event's body within [`MAX_MESSAGE_BYTES`]: whole, or without its job's result.
fn message_sized(body: &Value) -> String {
    let text = body.to_string();
    if text.len() <= MAX_MESSAGE_BYTES {
        return text;
    }
    let mut slim = body.clone();
    if let Some(data) = slim.get_mut("data").and_then(Value::as_object_mut) {
        data.remove("result");
        data.insert("result_omitted".into(), Value::Bool(true));
    }
    slim.to_string()
}

/// Decides the deliveries a batch of changes implies: the stream side.
#[derive(Clone)]
pub struct Planner {
    push: Dispatcher,
    webhooks: WebhookDispatcher,
}

impl Planner {
    /// A planner reading push endpoints through `push` and subscriptions through
    /// `webhooks`.
    pub fn new(push: Dispatcher, webhooks: WebhookDispatcher) -> Self {
        Self { push, webhooks }
    }

    /// The deliveries `changes` imply: a push offer per job made available on a queue
    /// with an endpoint taking its type, and a first attempt per event and matching
    /// subscription. An error means the endpoints or subscriptions could not be read: the
    /// batch should come again.
    pub async fn plan(&self, changes: &[Change]) -> Result<Vec<Delivery>, StoreError> {
        let mut out = Vec::new();
        for ready in changes.iter().filter_map(Change::ready_job) {
            if self.push.has_endpoint_for(&ready.job).await? {
                out.push(Delivery::Push {
                    job_id: ready.job.id.to_string(),
                });
            }
        }
        let events: Vec<_> = changes.iter().flat_map(|c| c.events(time::now())).collect();
        for (sub, event) in self.webhooks.matches(&events).await? {
            out.push(Delivery::Webhook(PlannedWebhook {
                subscription_id: sub.id.clone(),
                delivery_id: format!("del_{}", uuid::Uuid::now_v7()),
                event_type: event.kind.as_str().to_owned(),
                event_id: event.id.clone(),
                body: message_sized(&event.body),
            }));
        }
        Ok(out)
    }
}

/// Makes deliveries: the consumer side.
#[derive(Clone)]
pub struct Deliverer {
    push: Dispatcher,
    webhooks: WebhookDispatcher,
}

impl Deliverer {
    /// A deliverer pushing through `push` and attempting webhooks through `webhooks`.
    pub fn new(push: Dispatcher, webhooks: WebhookDispatcher) -> Self {
        Self { push, webhooks }
    }

    /// Makes one delivery. An error means it could not be started (the table
    /// unreadable): it should come again. A receiver's failure is no error here: a push
    /// failure settles the job, a webhook failure is recorded for the redrive.
    pub async fn deliver(&self, delivery: &Delivery) -> Result<(), StoreError> {
        match delivery {
            // Boxed: a delivery's future (claim, call, settle, catch-up) is large, and a
            // debug build's copies of it overflowed a 2 MiB stack.
            Delivery::Push { job_id } => Box::pin(self.push.offer(job_id)).await.map(|_| ()),
            Delivery::Webhook(planned) => Box::pin(self.webhooks.first_attempt_of(planned)).await,
        }
    }
}

/// Where planned deliveries go.
#[derive(Clone)]
pub enum DeliveryQueue {
    /// An SQS queue, consumed by the delivery function.
    Sqs {
        /// The client.
        client: aws_sdk_sqs::Client,
        /// The queue's URL.
        url: String,
    },
    /// A task per delivery in this process (`make dev`, tests).
    InProcess(Arc<Deliverer>),
    /// Made at once and waited for (a stream function deployed without a delivery queue:
    /// the batch then waits for its slowest receiver).
    Inline(Arc<Deliverer>),
}

impl DeliveryQueue {
    /// The SQS queue named by `OJS_DELIVERY_QUEUE_URL`, if set.
    pub fn from_env(sdk: &aws_config::SdkConfig) -> Option<Self> {
        let url = std::env::var("OJS_DELIVERY_QUEUE_URL")
            .ok()
            .filter(|u| !u.is_empty())?;
        Some(DeliveryQueue::Sqs {
            client: aws_sdk_sqs::Client::new(sdk),
            url,
        })
    }

    /// Hands `deliveries` over; returns once the queue holds them (SQS) or they are
    /// started (in process).
    pub async fn send(&self, deliveries: Vec<Delivery>) -> Result<(), String> {
        match self {
            DeliveryQueue::InProcess(deliverer) => {
                for d in deliveries {
                    let deliverer = Arc::clone(deliverer);
                    tokio::spawn(async move {
                        if let Err(e) = deliverer.deliver(&d).await {
                            tracing::warn!(error = %e, delivery = %d.to_message(), "delivery not made");
                        }
                    });
                }
                Ok(())
            }
            DeliveryQueue::Inline(deliverer) => {
                let runs = deliveries.iter().map(|d| deliverer.deliver(d));
                for (d, done) in deliveries.iter().zip(futures::future::join_all(runs).await) {
                    if let Err(e) = done {
                        tracing::warn!(error = %e, delivery = %d.to_message(), "delivery not made");
                    }
                }
                Ok(())
            }
            DeliveryQueue::Sqs { client, url } => {
                let bodies: Vec<String> = deliveries.iter().map(Delivery::to_message).collect();
                for chunk in batches(&bodies) {
                    send_batch(client, url, &chunk).await?;
                }
                Ok(())
            }
        }
    }
}

/// The in-process consumer's hook (`make dev`): each batch's deliveries planned and handed
/// to `queue` in a task of their own, as the stream function does with SQS.
pub struct PlannedDeliveries {
    planner: Planner,
    queue: DeliveryQueue,
}

impl PlannedDeliveries {
    /// Plans with `planner` and sends to `queue`.
    pub fn new(planner: Planner, queue: DeliveryQueue) -> Self {
        Self { planner, queue }
    }
}

impl ojs_store::ChangeObserver for PlannedDeliveries {
    fn observe(&self, changes: &[Change]) {
        let (planner, queue) = (self.planner.clone(), self.queue.clone());
        let changes = changes.to_vec();
        tokio::spawn(async move {
            if let Err(e) = plan_and_send(&planner, &queue, &changes).await {
                tracing::warn!(error = %e, "deliveries of a stream batch not planned");
            }
        });
    }
}

/// The stream redrive's hook (the scheduler): a given-up batch's deliveries planned and
/// handed over as the stream function would have, waited for, so that the batch's
/// message is deleted only once they are on their way.
impl ojs_store::BatchDeliveries for PlannedDeliveries {
    fn hand_over<'a>(
        &'a self,
        changes: &'a [Change],
    ) -> futures::future::BoxFuture<'a, Result<usize, String>> {
        Box::pin(plan_and_send(&self.planner, &self.queue, changes))
    }
}

/// Plans `changes`' deliveries and hands them to `queue`; how many.
async fn plan_and_send(
    planner: &Planner,
    queue: &DeliveryQueue,
    changes: &[Change],
) -> Result<usize, String> {
    let deliveries = planner.plan(changes).await.map_err(|e| e.to_string())?;
    let planned = deliveries.len();
    queue.send(deliveries).await?;
    Ok(planned)
}

/// `bodies` in `SendMessageBatch` calls: at most [`SEND_BATCH`] messages and 256 KiB each.
fn batches(bodies: &[String]) -> Vec<Vec<&String>> {
    let mut out: Vec<Vec<&String>> = Vec::new();
    let mut bytes = 0;
    for body in bodies {
        let full = out
            .last()
            .is_none_or(|b| b.len() >= SEND_BATCH || bytes + body.len() > 256 * 1024);
        if full {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += body.len();
        if let Some(last) = out.last_mut() {
            last.push(body);
        }
    }
    out
}

/// One `SendMessageBatch`; entries SQS did not take are sent again once.
async fn send_batch(
    client: &aws_sdk_sqs::Client,
    url: &str,
    bodies: &[&String],
) -> Result<(), String> {
    let mut left: Vec<(usize, &String)> = bodies.iter().copied().enumerate().collect();
    for _ in 0..2 {
        let entries = left
            .iter()
            .map(|(i, body)| {
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body.as_str())
                    .build()
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = client
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| {
                format!(
                    "delivery queue: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(e)
                )
            })?;
        let failed: Vec<&str> = out.failed().iter().map(|f| f.id()).collect();
        left.retain(|(i, _)| failed.contains(&i.to_string().as_str()));
        if left.is_empty() {
            return Ok(());
        }
    }
    Err(format!("delivery queue refused {} messages", left.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_reads_back_from_its_message() {
        let push = Delivery::Push {
            job_id: "019".into(),
        };
        assert_eq!(Delivery::from_message(&push.to_message()), Ok(push));
        let hook = Delivery::Webhook(PlannedWebhook {
            subscription_id: "wh_1".into(),
            delivery_id: "del_1".into(),
            event_type: "job.completed".into(),
            event_id: "evt_1".into(),
            body: "{\"a\":1}".into(),
        });
        assert_eq!(Delivery::from_message(&hook.to_message()), Ok(hook));
        assert!(Delivery::from_message("{\"kind\":\"other\"}").is_err());
        assert!(Delivery::from_message("{\"kind\":\"push\"}").is_err());
        assert!(Delivery::from_message("nope").is_err());
    }

    #[test]
    fn a_large_event_loses_its_result_to_fit_a_message() {
        let body = json!({"id": "evt_1", "data": {"job_id": "j", "result": "x".repeat(300_000)}});
        let text = message_sized(&body);
        assert!(text.len() < MAX_MESSAGE_BYTES);
        let back: Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back["data"]["result_omitted"], true);
        assert_eq!(back["data"]["job_id"], "j");
        let small = json!({"data": {"result": 1}});
        assert_eq!(message_sized(&small), small.to_string());
    }

    #[test]
    fn batches_hold_ten_messages_and_256_kib_at_most() {
        let small: Vec<String> = (0..25).map(|i| i.to_string()).collect();
        let sizes: Vec<usize> = batches(&small).iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 5]);
        let big: Vec<String> = (0..3).map(|_| "x".repeat(150 * 1024)).collect();
        let sizes: Vec<usize> = batches(&big).iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 1, 1]);
        assert!(batches(&[]).is_empty());
    }
}
