//! The table's change stream (DynamoDB Streams, `NEW_AND_OLD_IMAGES`): every write of a
//! job is a record with the item before and after it, and the effects that need not
//! block a request are derived from those records here, in one place, instead of by each
//! transition: lifecycle events (stored a page per queue per batch) and the queues'
//! counters (one `ADD` per queue shard per batch). No partition key shared by many jobs
//! takes a write per job.
//!
//! On AWS the stream function hands each batch to [`crate::Derived::apply_changes`]; locally
//! ([`local`]) an in-process poller reads DynamoDB Local's Streams API and does the same.
//! Delivery is at least once, application exactly once ([`apply`]): a batch's counter
//! moves and event pages are written in one transaction with a marker of the records
//! they cover, so a batch that comes again changes nothing twice. A batch the stream
//! function gave up on is read again from the stream and applied the same way by
//! [`redrive`].

mod apply;
mod json;
pub mod local;
pub mod redrive;

use ojs_core::change::render_events;
use ojs_core::event::Event;
use serde_json::Value;

use crate::item::{self, Item};

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
    /// The record's sequence number in its stream shard (decimal digits, increasing along
    /// the shard): what makes applying it again a no-op. `None` for a change made up
    /// by hand ([`Change::between`]), which is applied every time it is given.
    pub sequence: Option<String>,
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
        let sequence = body
            .get("SequenceNumber")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Self {
            old: image("OldImage")?,
            new: image("NewImage")?,
            at,
            sequence,
        })
    }

    /// The change of a job written as `new` over `old` (tests, and replays).
    pub fn between(old: Option<&ojs_core::Job>, new: Option<&ojs_core::Job>) -> Self {
        let image = |j: &ojs_core::Job| item::job_to_item(j, 1);
        Self {
            old: old.map(image),
            new: new.map(image),
            at: None,
            sequence: None,
        }
    }

    /// The same change as the stream record `sequence` (tests that deliver a batch again).
    pub fn with_sequence(mut self, sequence: impl Into<String>) -> Self {
        self.sequence = Some(sequence.into());
        self
    }

    /// The lifecycle events this change of a job implies, as [`crate::Derived::apply_changes`]
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
    /// Job records whose effects an earlier delivery of them had applied already (left
    /// as they are).
    pub replayed: usize,
    /// Job records that could not be read (logged and skipped: one bad item never holds
    /// up the stream).
    pub unreadable: usize,
}
