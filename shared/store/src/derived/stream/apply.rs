//! Applying a batch of the change stream exactly once. The stream delivers at least once
//! (Lambda retries a failed or timed-out batch; a request that drains the stream in
//! process can be dropped mid-way), and counter `ADD`s are not idempotent, so every
//! derived write of a run of records (its counter moves and its event pages) goes into one
//! transaction with a marker item keyed by the run's first sequence number, written only
//! if absent and holding the run's last one.
//!
//! A delivery that comes again starts where the failed one started (the event source
//! mapping retries a batch from its checkpoint, without bisecting it; the local consumer
//! reads again from the same position), with at least the records it had. Its first run
//! meets the marker, skips the records up to the marker's last, and goes on from the next
//! one, where the earlier delivery's next run started or never got to. A transaction
//! either wrote everything of its run or nothing, so no run is half applied, whoever
//! interrupts it.

use ojs_core::change::render_events;
use ojs_core::event::Event;
use ojs_core::{time, Job};

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use super::{Applied, Change};
use crate::derived::Derived;
use crate::error::{cancellation_codes, StoreError};
use crate::item::{self, n, s, Item};
use crate::keys;

/// Most actions of one TransactWriteItems.
const MAX_ACTIONS: usize = 100;

/// Most bytes of event pages (deflated) in one transaction: DynamoDB takes 4 MB of items
/// in one; the rest is room for the marker and the counter updates.
const MAX_RUN_BYTES: usize = 3 * 1024 * 1024;

/// Times a run's transaction is sent again after a conflict with another transaction on
/// one of its items (another shard's batch adding to the same counter) before the batch
/// fails and is delivered again.
const CONFLICT_ATTEMPTS: u32 = 6;

/// How long a run's marker is kept: past the stream's 24 hours, no record comes again.
const MARKER_TTL_SECS: i64 = 2 * 86_400;

/// A job record of a batch, read.
struct Record {
    sequence: Option<String>,
    old: Option<Job>,
    new: Option<Job>,
    events: Vec<Event>,
    /// The JSON bytes of its events (what their pages hold before deflate).
    event_bytes: usize,
}

impl Record {
    /// The record of `change`, whose job could not be read: it has no effect but its
    /// place in the stream.
    fn unreadable(change: &Change) -> Self {
        Self {
            sequence: change.sequence.clone(),
            old: None,
            new: None,
            events: Vec::new(),
            event_bytes: 0,
        }
    }

    /// The job the record is of, as it is now or was last.
    fn job(&self) -> Option<&Job> {
        self.new.as_ref().or(self.old.as_ref())
    }
}

/// What sending a run came to.
enum Outcome {
    /// Its writes landed now: this many events stored.
    Applied(usize),
    /// An earlier delivery applied the run's first record, and every record up to this
    /// sequence number.
    AppliedBefore(String),
    /// Its writes do not fit one transaction.
    TooLarge,
}

/// How many of `rest`'s first records an earlier delivery applied, up to sequence number
/// `last`: at least the first, whose marker says so.
fn applied_up_to(rest: &[Record], last: &str) -> usize {
    rest.iter()
        .take_while(|r| r.sequence.as_deref().is_some_and(|s| !comes_after(s, last)))
        .count()
        .max(1)
}

/// Whether sequence number `a` comes after `b` in their shard (decimal digits without
/// leading zeros, longer than 64 bits: compared by length, then digit by digit).
pub(crate) fn comes_after(a: &str, b: &str) -> bool {
    (a.len(), a) > (b.len(), b)
}

impl Derived {
    /// Applies the effects of a batch of changes, in stream order: the events they imply
    /// and their counter moves, exactly once per record that has a sequence number. An
    /// error means the batch must come again: the runs that landed are skipped then.
    pub async fn apply_changes(&self, changes: &[Change]) -> Result<Applied, StoreError> {
        let now = time::now();
        let mut applied = Applied::default();
        let mut records = Vec::new();
        let mut payloads = Vec::new();
        for change in changes.iter().filter(|c| c.is_job()) {
            applied.jobs += 1;
            // A deleted job item (TTL, purge, dead letter or admin delete) takes its
            // payload object with it: the one place that sees every deletion.
            if let (Some(old), None) = (&change.old, &change.new) {
                payloads.extend(item::payload_ref_of(old).map(|r| r.key));
            }
            let record = match self.read_record(change, now) {
                Ok(record) => record,
                Err(e) => {
                    tracing::warn!(error = %e, "a job record of the change stream is unreadable");
                    applied.unreadable += 1;
                    Record::unreadable(change)
                }
            };
            records.push(record);
        }
        self.apply_records(&records, &mut applied).await?;
        self.engine.delete_payloads(payloads).await;
        for observer in &self.observers {
            observer.observe(changes);
        }
        Ok(applied)
    }

    /// The job record `change` carries, read, with the events it implies (those of a
    /// change without a time of its own at `now`).
    fn read_record(&self, change: &Change, now: time::Timestamp) -> Result<Record, StoreError> {
        let read = |i: &Option<Item>| i.as_ref().map(item::job_from_item).transpose();
        let (old, new) = (read(&change.old)?, read(&change.new)?);
        let mut events = Vec::new();
        if let Some(new) = &new {
            trace_change(new);
            if self.engine.config.events {
                events = render_events(old.as_ref(), new, change.at.unwrap_or(now));
            }
        }
        let event_bytes = events.iter().map(|e| e.body.to_string().len() + 1).sum();
        Ok(Record {
            sequence: change.sequence.clone(),
            old,
            new,
            events,
            event_bytes,
        })
    }

    /// Writes the effects of `records` in runs of one transaction each, in order, halving
    /// a run that does not fit, and skips the records an earlier delivery applied.
    async fn apply_records(
        &self,
        records: &[Record],
        applied: &mut Applied,
    ) -> Result<(), StoreError> {
        let mut rest = records;
        while !rest.is_empty() {
            let mut len = self.run_len(rest);
            loop {
                let run = rest.get(..len).unwrap_or(rest);
                match self.send_run(run).await? {
                    Outcome::Applied(events) => {
                        applied.events += events;
                        rest = rest.get(len..).unwrap_or_default();
                        break;
                    }
                    Outcome::AppliedBefore(last) => {
                        let skip = applied_up_to(rest, &last);
                        applied.replayed += skip;
                        rest = rest.get(skip..).unwrap_or_default();
                        break;
                    }
                    // One record always fits: a counter and a page of its few events.
                    Outcome::TooLarge if len > 1 => len /= 2,
                    Outcome::TooLarge => {
                        return Err(StoreError::TooLarge(
                            "one stream record's effects exceed a transaction".into(),
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// How many of `rest`'s records one transaction can take, reckoned without building
    /// it: a counter item per queue shard, pages per queue by their JSON bytes (deflate
    /// only shrinks them), the marker. At least one.
    fn run_len(&self, rest: &[Record]) -> usize {
        let shards = self.engine.queue_shards();
        let mut counters = std::collections::BTreeSet::new();
        let mut tenant_counters = std::collections::BTreeSet::new();
        let mut page_bytes: std::collections::BTreeMap<&str, usize> = Default::default();
        let mut bytes = 0;
        for (i, r) in rest.iter().enumerate() {
            if let Some(job) = r.job() {
                counters.insert((job.spec.queue.as_str(), keys::shard_of(&job.id, shards)));
                if let Some(tenant) = job.tenant() {
                    tenant_counters.insert((tenant, job.spec.queue.as_str()));
                }
                if r.event_bytes > 0 {
                    *page_bytes.entry(job.spec.queue.as_str()).or_default() += r.event_bytes;
                }
            }
            bytes += r.event_bytes;
            let pages: usize = page_bytes
                .values()
                .map(|b| b.div_ceil(super::super::events::PAGE_BYTES / 2).max(1))
                .sum();
            let actions = counters.len() + tenant_counters.len() + pages + 1;
            if i > 0 && (actions > MAX_ACTIONS || bytes > MAX_RUN_BYTES) {
                return i;
            }
        }
        rest.len()
    }

    /// Writes the effects of `run` in one transaction with its marker.
    async fn send_run(&self, run: &[Record]) -> Result<Outcome, StoreError> {
        let mut moves = self.moves();
        let mut events: Vec<Event> = Vec::new();
        for r in run {
            match (&r.old, &r.new) {
                (old, Some(new)) => moves.add(new, old.as_ref().map(|o| o.status.state)),
                (Some(gone), None) => moves.remove(gone),
                (None, None) => {}
            }
            events.extend(r.events.iter().cloned());
        }
        let mut actions = self.counter_updates(moves)?;
        let mut bytes = 0;
        for (put, size) in self.event_puts(&events)? {
            actions.push(put);
            bytes += size;
        }
        // A run that derives nothing (heartbeats, progress, unreadable records) needs no
        // marker: applying it again changes nothing either.
        if actions.is_empty() {
            return Ok(Outcome::Applied(0));
        }
        let first = run.first().and_then(|r| r.sequence.as_deref());
        let last = run.last().and_then(|r| r.sequence.as_deref());
        if let (Some(first), Some(last)) = (first, last) {
            actions.insert(0, self.run_marker(first, last, run.len())?);
        }
        if actions.len() > MAX_ACTIONS || bytes > MAX_RUN_BYTES {
            return Ok(Outcome::TooLarge);
        }
        let marked = first.is_some() && last.is_some();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Err(err) = self.engine.table.transact(actions.clone()).await else {
                self.print_metrics(&events);
                return Ok(Outcome::Applied(events.len()));
            };
            let codes = cancellation_codes(&err).unwrap_or_default();
            if marked && codes.first().is_some_and(|c| c == "ConditionalCheckFailed") {
                let first = first.unwrap_or_default();
                return match self.run_marker_last(first).await? {
                    Some(last) => Ok(Outcome::AppliedBefore(last)),
                    None => Err(StoreError::Backend(format!(
                        "stream run {first}: its marker failed its condition but cannot be read"
                    ))),
                };
            }
            if codes.iter().any(|c| c == "TransactionConflict") && attempt < CONFLICT_ATTEMPTS {
                tokio::time::sleep(std::time::Duration::from_millis(20 << attempt)).await;
                continue;
            }
            return match StoreError::from_sdk(err) {
                StoreError::TooLarge(_) => Ok(Outcome::TooLarge),
                other => Err(other),
            };
        }
    }

    /// The marker of a run from sequence number `first` to `last`.
    fn run_marker(
        &self,
        first: &str,
        last: &str,
        records: usize,
    ) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(self.engine.table())
            .item("pk", s(keys::stream_run_pk(first)))
            .item("sk", s(keys::STREAM_RUN_SK))
            .item("last", s(last))
            .item("records", n(records))
            .item("ttl", n(time::now().timestamp() + MARKER_TTL_SECS))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| StoreError::Invalid(format!("stream run marker: {e}")))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The last sequence number of the run whose marker is at `first`, if one is stored.
    async fn run_marker_last(&self, first: &str) -> Result<Option<String>, StoreError> {
        let key = Item::from([
            ("pk".to_owned(), s(keys::stream_run_pk(first))),
            ("sk".to_owned(), s(keys::STREAM_RUN_SK)),
        ]);
        Ok(self
            .engine
            .table
            .read_item(key)
            .await?
            .and_then(|i| i.get("last").and_then(|v| v.as_s().ok()).cloned()))
    }
}

/// A traced job's path through the stream, one line a change: only for jobs whose
/// producer traces them (log ingestion is billed per byte).
fn trace_change(job: &Job) {
    if let Some(trace) = ojs_core::trace::of_meta(&job.spec.meta) {
        tracing::info!(
            job_id = %job.id, queue = %job.spec.queue, trace_id = %trace.trace_id,
            state = job.status.state.as_str(), "job change"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::comes_after;

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        assert!(comes_after("10", "9"));
        assert!(!comes_after("9", "10"));
        assert!(comes_after(
            "400000000004474329940",
            "400000000004474329939"
        ));
        assert!(!comes_after(
            "400000000004474329939",
            "400000000004474329939"
        ));
        assert!(comes_after(
            "1000000000000000000000",
            "999999999999999999999"
        ));
    }
}
