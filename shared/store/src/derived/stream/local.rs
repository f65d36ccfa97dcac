//! The change stream consumer for `make dev` and tests: an in-process poller of the
//! Streams API (DynamoDB Local serves it; a record is readable as soon as its write has
//! answered), in the role the stream function plays on AWS.
//!
//! It reads in the background (`make dev`), and [`Store::catch_up`] reads to the end of
//! the stream before a read of derived data (queue stats, events), so a test or a
//! developer sees their own writes' effects at once. On AWS the same reads lag the stream by about a
//! second instead (`docs/architecture.md`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, ShardIteratorType};
use aws_sdk_dynamodbstreams::Client;

use super::Change;
use crate::error::StoreError;
use crate::item::Item;
use crate::Store;

/// How often the list of stream shards is read again (DynamoDB rolls shards over).
const SHARD_REFRESH: Duration = Duration::from_secs(30);

/// How many times a batch is applied before it is given up (logged as an error), as the
/// stream function's event source mapping gives one up after its retries: a batch that
/// can never apply must not hold up every later change.
const MAX_ATTEMPTS: u32 = 10;

/// The consumer of one table's stream in this process.
pub struct LocalStream {
    client: Client,
    /// The store the effects are written through (without a stream of its own).
    store: Store,
    stream_arn: String,
    shards: tokio::sync::Mutex<Shards>,
}

#[derive(Default)]
struct Shards {
    /// Open shards, by id.
    open: BTreeMap<String, Position>,
    /// Shards read to their end.
    done: Vec<String>,
    refreshed: Option<Instant>,
    /// Whether shards seen at the first listing are read from their start (a table this
    /// process created) or from now on (a table that existed before).
    from_start: bool,
}

/// Where reading a shard goes on.
#[derive(Default)]
struct Position {
    /// The next read's iterator (`None` once the shard is closed and read).
    iterator: Option<String>,
    /// The last record applied, to position a new iterator after it.
    last_sequence: Option<String>,
    /// Failed attempts at the batch the iterator points to.
    failures: u32,
}

/// One consumer per table and process: two would apply every change twice.
fn consumers() -> &'static Mutex<HashMap<String, Weak<LocalStream>>> {
    static CONSUMERS: OnceLock<Mutex<HashMap<String, Weak<LocalStream>>>> = OnceLock::new();
    CONSUMERS.get_or_init(Mutex::default)
}

impl LocalStream {
    /// The consumer of `store`'s table stream through `client`, started if this process
    /// has none yet. `from_start`: read what the stream already holds (a table just
    /// created); otherwise only changes from now on. `background`: also read the stream
    /// at this interval, not only when [`Store::catch_up`] asks.
    pub async fn attach(
        store: &Store,
        client: Client,
        from_start: bool,
        background: Option<Duration>,
    ) -> Result<Arc<Self>, StoreError> {
        if let Some(existing) = consumers()
            .lock()
            .ok()
            .and_then(|m| m.get(store.table()).and_then(Weak::upgrade))
        {
            return Ok(existing);
        }
        let stream_arn = store.stream_arn().await?;
        // Its own usage: a store's usage is what its requests cost, as on AWS, where the
        // stream function pays for the effects.
        let mut own = store.clone();
        own.usage = Arc::default();
        own.stream = None;
        let consumer = Arc::new(Self {
            client,
            store: own,
            stream_arn,
            shards: tokio::sync::Mutex::new(Shards {
                from_start,
                ..Shards::default()
            }),
        });
        // Position on the stream now, so that nothing written after `attach` is missed.
        consumer.shards.lock().await.refresh(&consumer).await?;
        if let Ok(mut m) = consumers().lock() {
            m.insert(store.table().to_owned(), Arc::downgrade(&consumer));
        }
        let Some(interval) = background else {
            return Ok(consumer);
        };
        let weak = Arc::downgrade(&consumer);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(consumer) = weak.upgrade() else {
                    return;
                };
                if let Err(e) = consumer.drain().await {
                    if matches!(e, StoreError::NotFound) {
                        return; // the table is gone (a test's teardown)
                    }
                    tracing::warn!(error = %e, "reading the change stream failed");
                }
            }
        });
        Ok(consumer)
    }

    /// Reads every shard to its current end and applies what it read. Returns the number
    /// of records applied.
    pub async fn drain(&self) -> Result<usize, StoreError> {
        let mut shards = self.shards.lock().await;
        // A stream just enabled may list no shard yet.
        if shards.open.is_empty()
            || shards.open.values().any(|p| p.iterator.is_none())
            || shards
                .refreshed
                .is_none_or(|t| t.elapsed() >= SHARD_REFRESH)
        {
            shards.refresh(self).await?;
        }
        let mut applied = 0;
        for (id, position) in shards.open.iter_mut() {
            applied += self.drain_shard(id, position).await?;
        }
        Ok(applied)
    }

    async fn drain_shard(&self, id: &str, position: &mut Position) -> Result<usize, StoreError> {
        let mut applied = 0;
        let mut repositioned = false;
        while let Some(iterator) = position.iterator.clone() {
            let out = match self
                .client
                .get_records()
                .shard_iterator(iterator)
                .send()
                .await
            {
                Ok(out) => out,
                // DynamoDB Local numbers records across all its tables, and an iterator
                // taken on an empty shard can point at a number another table used: ask
                // again for one after the last record applied (once per drain).
                Err(e) if !repositioned && is_stale_iterator(&e) => {
                    repositioned = true;
                    position.iterator =
                        self.iterator(id, position.last_sequence.as_deref()).await?;
                    continue;
                }
                Err(e) => return Err(stream_error(e.into_service_error())),
            };
            let records = out.records();
            let changes: Vec<Change> = records
                .iter()
                .filter_map(|r| r.dynamodb())
                .map(|r| Change {
                    old: r.old_image().map(item_of),
                    new: r.new_image().map(item_of),
                    sequence: r.sequence_number().map(str::to_owned),
                    at: r.approximate_creation_date_time().and_then(|t| {
                        ojs_core::time::from_micros(
                            t.secs()
                                .saturating_mul(1_000_000)
                                .saturating_add(i64::from(t.subsec_nanos() / 1_000)),
                        )
                    }),
                })
                .collect();
            if !changes.is_empty() {
                // On failure the position stays, and the next drain reads them again.
                if let Err(e) = self.store.apply_changes(&changes).await {
                    position.failures += 1;
                    if position.failures < MAX_ATTEMPTS {
                        return Err(e);
                    }
                    tracing::error!(error = %e, records = changes.len(), "gave up a change stream batch");
                } else {
                    applied += changes.len();
                }
                position.failures = 0;
                position.last_sequence = records
                    .last()
                    .and_then(|r| r.dynamodb())
                    .and_then(|r| r.sequence_number())
                    .map(str::to_owned);
            }
            position.iterator = out.next_shard_iterator().map(str::to_owned);
            if changes.is_empty() {
                break;
            }
        }
        Ok(applied)
    }

    /// A new iterator of shard `id`: after `after` when given, else from the shard's start.
    async fn iterator(&self, id: &str, after: Option<&str>) -> Result<Option<String>, StoreError> {
        let req = self
            .client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(id);
        let req = match after {
            Some(seq) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq),
            None => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        let out = req
            .send()
            .await
            .map_err(|e| stream_error(e.into_service_error()))?;
        Ok(out.shard_iterator().map(str::to_owned))
    }
}

impl Shards {
    /// Lists the stream's shards: closed ones read to their end are dropped, new ones
    /// are read from their start (children of shards this consumer read).
    async fn refresh(&mut self, consumer: &LocalStream) -> Result<(), StoreError> {
        let first = self.refreshed.is_none();
        let closed: Vec<String> = self
            .open
            .iter()
            .filter(|(_, p)| p.iterator.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in closed {
            self.open.remove(&id);
            self.done.push(id);
        }
        let mut start = None;
        loop {
            let out = consumer
                .client
                .describe_stream()
                .stream_arn(&consumer.stream_arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| stream_error(e.into_service_error()))?;
            let Some(desc) = out.stream_description() else {
                break;
            };
            for shard in desc.shards() {
                let Some(id) = shard.shard_id() else { continue };
                if self.open.contains_key(id) || self.done.iter().any(|d| d == id) {
                    continue;
                }
                let iterator = if first && !self.from_start {
                    let out = consumer
                        .client
                        .get_shard_iterator()
                        .stream_arn(&consumer.stream_arn)
                        .shard_id(id)
                        .shard_iterator_type(ShardIteratorType::Latest)
                        .send()
                        .await
                        .map_err(|e| stream_error(e.into_service_error()))?;
                    out.shard_iterator().map(str::to_owned)
                } else {
                    consumer.iterator(id, None).await?
                };
                self.open.insert(
                    id.to_owned(),
                    Position {
                        iterator,
                        ..Position::default()
                    },
                );
            }
            start = desc.last_evaluated_shard_id().map(str::to_owned);
            if start.is_none() {
                break;
            }
        }
        self.refreshed = Some(Instant::now());
        Ok(())
    }
}

fn is_stale_iterator<R>(
    e: &aws_sdk_dynamodbstreams::error::SdkError<
        aws_sdk_dynamodbstreams::operation::get_records::GetRecordsError,
        R,
    >,
) -> bool {
    e.as_service_error()
        .is_some_and(|s| s.is_trimmed_data_access_exception() || s.is_expired_iterator_exception())
}

fn stream_error(e: impl std::error::Error + 'static) -> StoreError {
    let text = aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string();
    if text.contains("ResourceNotFound") {
        StoreError::NotFound
    } else {
        StoreError::Backend(format!("change stream: {text}"))
    }
}

/// A stream image as a table item (the Streams API has its own copy of the types).
fn item_of(image: &HashMap<String, StreamValue>) -> Item {
    image
        .iter()
        .map(|(k, v)| (k.clone(), value_of(v)))
        .collect()
}

fn value_of(v: &StreamValue) -> AttributeValue {
    match v {
        StreamValue::S(s) => AttributeValue::S(s.clone()),
        StreamValue::N(n) => AttributeValue::N(n.clone()),
        StreamValue::B(b) => {
            AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(b.as_ref().to_vec()))
        }
        StreamValue::Bool(b) => AttributeValue::Bool(*b),
        StreamValue::Null(n) => AttributeValue::Null(*n),
        StreamValue::Ss(v) => AttributeValue::Ss(v.clone()),
        StreamValue::Ns(v) => AttributeValue::Ns(v.clone()),
        StreamValue::Bs(v) => AttributeValue::Bs(
            v.iter()
                .map(|b| aws_sdk_dynamodb::primitives::Blob::new(b.as_ref().to_vec()))
                .collect(),
        ),
        StreamValue::L(l) => AttributeValue::L(l.iter().map(value_of).collect()),
        StreamValue::M(m) => AttributeValue::M(item_of(m)),
        // A type this SDK version does not know: kept as a null rather than guessed.
        _ => AttributeValue::Null(true),
    }
}
