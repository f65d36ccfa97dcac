//! The table's change stream (DynamoDB Streams, `NEW_AND_OLD_IMAGES`): every write of a
//! job is a record with the item before and after it, and the effects that need not
//! block a request are derived from those records here, in one place, instead of by each
//! transition: lifecycle events (stored a page per queue per batch) and the queues'
//! counters (one `ADD` per queue shard per batch). No partition key shared by many jobs
//! takes a write per job.
//!
//! On AWS the stream function hands each batch to [`Store::apply_changes`]; locally
//! ([`local`]) an in-process poller reads DynamoDB Local's Streams API and does the same.
//! Delivery is at least once: a batch applied twice counts its moves twice (the sweep's
//! counter healing repairs it) and stores its events twice, under the same ids (an
//! event's id is its job's write and kind, [`ojs_core::event::event_id`]).

mod json;
pub mod local;

use ojs_core::change::render_events;
use ojs_core::event::Event;
use ojs_core::time;
use serde_json::Value;

use crate::error::StoreError;
use crate::item::{self, Item};
use crate::Store;

/// One record of the change stream: a job item (or any other item of the table) before
/// and after a write. `None` before: created; `None` after: deleted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Change {
    /// The item before the write.
    pub old: Option<Item>,
    /// The item after the write.
    pub new: Option<Item>,
    /// When the stream recorded the write (`ApproximateCreationDateTime`, to the second):
    /// the time of an event whose job does not record one, so that every rendering of
    /// the record gives the same event.
    pub at: Option<ojs_core::time::Timestamp>,
}

impl Change {
    /// The change a record of a Lambda DynamoDB stream event carries (`Records[i]`, whose
    /// `dynamodb` field holds `OldImage`/`NewImage` in DynamoDB's JSON).
    pub fn from_lambda_record(record: &Value) -> Result<Self, String> {
        let body = record
            .get("dynamodb")
            .ok_or("the record has no dynamodb field")?;
        let image = |name: &str| -> Result<Option<Item>, String> {
            body.get(name).map(json::item_from_json).transpose()
        };
        let at = body
            .get("ApproximateCreationDateTime")
            .and_then(Value::as_f64)
            .and_then(|secs| ojs_core::time::from_micros((secs * 1e6) as i64));
        Ok(Self {
            old: image("OldImage")?,
            new: image("NewImage")?,
            at,
        })
    }

    /// The change of a job written as `new` over `old` (tests, and replays).
    pub fn between(old: Option<&ojs_core::Job>, new: Option<&ojs_core::Job>) -> Self {
        let image = |j: &ojs_core::Job| item::job_to_item(j, 1);
        Self {
            old: old.map(image),
            new: new.map(image),
            at: None,
        }
    }

    /// The lifecycle events this change of a job implies, as [`Store::apply_changes`]
    /// stores them (same ids): webhook deliveries send them. `now` stands for the time
    /// of the write when neither the job nor the record tells it. None for another item,
    /// a deletion, or a record that cannot be read.
    pub fn events(&self, now: ojs_core::time::Timestamp) -> Vec<Event> {
        if !self.is_job() {
            return Vec::new();
        }
        let read = |i: &Option<Item>| i.as_ref().map(item::job_from_item).transpose();
        match (read(&self.old), read(&self.new)) {
            (Ok(old), Ok(Some(new))) => render_events(old.as_ref(), &new, self.at.unwrap_or(now)),
            _ => Vec::new(),
        }
    }

    /// Whether the record is of a job's own item.
    fn is_job(&self) -> bool {
        let key_of = |i: &Item| {
            let pk = i.get("pk").and_then(|v| v.as_s().ok());
            let sk = i.get("sk").and_then(|v| v.as_s().ok());
            pk.is_some_and(|p| p.starts_with(crate::keys::JOB_PREFIX))
                && sk.is_some_and(|s| s == crate::keys::JOB_SK)
        };
        self.new.as_ref().or(self.old.as_ref()).is_some_and(key_of)
    }
}

/// Something that acts on the changes of the stream after their effects are applied
/// (the push dispatcher, the webhook dispatcher). Called by the in-process consumer ([`local`]); the stream
/// function calls the dispatcher itself, so it can wait for it.
pub trait ChangeObserver: Send + Sync {
    /// Sees a batch of changes; must not block (spawn what takes time).
    fn observe(&self, changes: &[Change]);
}

/// What a batch of changes came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Job records among the changes.
    pub jobs: usize,
    /// Events stored.
    pub events: usize,
    /// Job records that could not be read (logged and skipped: one bad item never holds
    /// up the stream).
    pub unreadable: usize,
}

impl Store {
    /// Applies the effects of a batch of changes, in stream order: the events they imply
    /// and their counter moves. An error means nothing is known to have been applied
    /// beyond what at-least-once delivery tolerates; the caller retries the batch.
    pub async fn apply_changes(&self, changes: &[Change]) -> Result<Applied, StoreError> {
        let now = time::now();
        let mut applied = Applied::default();
        let mut moves = self.moves();
        let mut events: Vec<Event> = Vec::new();
        let mut payloads: Vec<String> = Vec::new();
        for change in changes.iter().filter(|c| c.is_job()) {
            applied.jobs += 1;
            // A deleted job item (TTL, purge, dead letter or admin delete) takes its
            // payload object with it: the one place that sees every deletion.
            if let (Some(old), None) = (&change.old, &change.new) {
                payloads.extend(item::payload_ref_of(old).map(|r| r.key));
            }
            let read = |i: &Option<Item>| i.as_ref().map(item::job_from_item).transpose();
            let (old, new) = match (read(&change.old), read(&change.new)) {
                (Ok(old), Ok(new)) => (old, new),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(error = %e, "a job record of the change stream is unreadable");
                    applied.unreadable += 1;
                    continue;
                }
            };
            match (&old, &new) {
                (_, Some(new)) => {
                    // A traced job's path through the stream, one line a change: only for
                    // jobs whose producer traces them (log ingestion is billed per byte).
                    if let Some(trace) = ojs_core::trace::of_meta(&new.spec.meta) {
                        tracing::info!(
                            job_id = %new.id, queue = %new.spec.queue, trace_id = %trace.trace_id,
                            state = new.status.state.as_str(), "job change"
                        );
                    }
                    moves.add(new, old.as_ref().map(|o| o.status.state));
                    if self.config.events {
                        events.extend(render_events(old.as_ref(), new, change.at.unwrap_or(now)));
                    }
                }
                (Some(gone), None) => moves.remove(gone),
                (None, None) => {}
            }
        }
        self.print_metrics(&events);
        applied.events = events.len();
        let (counted, stored, ()) = futures::join!(
            self.count(moves),
            self.store_events(&events),
            self.delete_payloads(payloads)
        );
        counted?;
        stored?;
        for observer in &self.observers {
            observer.observe(changes);
        }
        Ok(applied)
    }
}
