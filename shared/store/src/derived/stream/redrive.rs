//! The redrive of stream batches the stream function gave up on. After its retries the
//! event source mapping skips a batch and sends its position, not its records, to the
//! on-failure queue (`StreamFailuresQueue`): an invocation record whose
//! `DDBStreamBatchInfo` names the stream, the shard and the first and last sequence
//! numbers of the batch. Without a redrive the batch's counter moves are lost: the sweep
//! heals the live counts from the indexes, but `pending`, the terminal counts and every
//! tenant's counts are in no index.
//!
//! [`StreamRedrive::run`] takes those messages off the queue, reads each batch's records
//! again from the stream (an iterator `AT_SEQUENCE_NUMBER` of the first one, pages until
//! the last one) and applies them with [`Derived::apply_changes`], the stream function's
//! own application: the batch starts at the same record as every delivery of it did, so
//! the runs an earlier delivery landed meet their markers and are skipped (`apply.rs`).
//! A message is deleted only once its batch is applied. One whose records the stream no
//! longer holds (past its 24 hours) is logged as an error, counted and deleted: it can
//! never be applied, and reading it again each minute would only hide newer failures.
//! Any other failure leaves the message for a later run (after its visibility timeout).
//!
//! A batch given up was never handed to the delivery queue either (the stream function
//! plans its deliveries after applying it): with [`StreamRedrive::with_deliveries`] the
//! redrive plans them as the stream function would have, push offers and webhook first
//! attempts, before it deletes the message. Late, but not lost: a push offer claims its
//! job only if it still waits, and webhook deliveries are at least once anyway.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::local::change_of;
use super::Change;
use crate::derived::Derived;
use crate::error::StoreError;

/// The environment variable naming the queue of given-up batches (its URL).
pub const QUEUE_URL_VAR: &str = "OJS_STREAM_FAILURES_QUEUE_URL";

/// How long a message taken by a run stays hidden from other runs: a batch whose redrive
/// failed is tried again after this long (the stream keeps its records 24 hours; the
/// event source mapping gives a batch up within 6 hours of its writes).
const VISIBILITY: Duration = Duration::from_secs(300);

/// Most receives of one run (of up to 10 messages each): a burst of given-up batches is
/// worked off over a few runs rather than holding one scheduler tick.
const MAX_RECEIVES: usize = 10;

/// Most GetRecords calls for one batch. DynamoDB Streams may answer empty pages before
/// the part of the shard that holds records; a batch is 100 job records among the
/// table's other writes, at most a few pages of up to 1,000 records.
const MAX_PAGES: usize = 100;

/// The name of the metric of batches whose records the stream no longer held.
pub const LOST_METRIC: &str = "StreamBatchesLost";

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedriveReport {
    /// Batches applied (their messages deleted).
    pub batches: usize,
    /// Job records in those batches.
    pub records: usize,
    /// Of those, records an earlier delivery had applied already (left as they were).
    pub replayed: usize,
    /// Batches whose records the stream no longer holds (past its retention), or whose
    /// message names no batch of this table's stream: logged as errors and deleted.
    pub lost: usize,
    /// Batches left on the queue for a later run (a read, a write or the hand-over of
    /// their deliveries failed).
    pub failed: usize,
    /// Deliveries (push offers, webhook first attempts) the applied batches implied,
    /// handed over ([`StreamRedrive::with_deliveries`]).
    pub deliveries: usize,
}

/// What the stream function does with a batch once it is applied: plans the deliveries
/// its changes imply and hands them over. Implemented where deliveries are made
/// (`ojs_push::PlannedDeliveries`); the store only says when.
pub trait BatchDeliveries: Send + Sync {
    /// Plans `changes`' deliveries and hands them over; how many. An error means they
    /// were not all handed over: the batch should come again.
    fn hand_over<'a>(&'a self, changes: &'a [Change]) -> BoxFuture<'a, Result<usize, String>>;
}

/// The position of a given-up batch: `DDBStreamBatchInfo` of the invocation record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BatchInfo {
    stream_arn: String,
    shard_id: String,
    start: String,
    end: String,
    size: Option<u64>,
}

impl BatchInfo {
    /// The batch a message of the on-failure queue names.
    fn parse(body: &str) -> Result<Self, String> {
        let record: Value =
            serde_json::from_str(body).map_err(|e| format!("not an invocation record: {e}"))?;
        let info = record
            .get("DDBStreamBatchInfo")
            .ok_or("the invocation record has no DDBStreamBatchInfo")?;
        let text = |k: &str| {
            info.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("DDBStreamBatchInfo has no {k}"))
        };
        let out = Self {
            stream_arn: text("streamArn")?,
            shard_id: text("shardId")?,
            start: text("startSequenceNumber")?,
            end: text("endSequenceNumber")?,
            size: info.get("batchSize").and_then(Value::as_u64),
        };
        if compare(&out.start, &out.end) == Ordering::Greater {
            return Err("the batch ends before it starts".into());
        }
        Ok(out)
    }

    /// Whether the stream is `table`'s (`arn:...:table/<name>/stream/<label>`).
    fn is_of_table(&self, table: &str) -> bool {
        self.stream_arn
            .split_once(":table/")
            .and_then(|(_, rest)| rest.split_once("/stream/"))
            .is_some_and(|(name, _)| name == table)
    }
}

/// Compares two sequence numbers of one shard (decimal digits; DynamoDB Local pads them
/// with zeros, AWS does not).
fn compare(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// What the redrive of one batch did.
struct Redriven {
    records: usize,
    replayed: usize,
    deliveries: usize,
}

/// Why a batch was not applied.
enum Failure {
    /// It never can be: logged, counted and its message deleted.
    Lost(String),
    /// Maybe later: its message is left on the queue.
    Later(StoreError),
}

/// The redrive of one stack's given-up stream batches: the queue they are reported to
/// and the clients to read it and the stream.
#[derive(Clone)]
pub struct StreamRedrive {
    sqs: aws_sdk_sqs::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    queue_url: String,
    visibility: Duration,
    deliveries: Option<Arc<dyn BatchDeliveries>>,
}

impl StreamRedrive {
    /// The redrive of the batches reported to `queue_url`, read again through `streams`.
    pub fn new(
        sqs: aws_sdk_sqs::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        queue_url: impl Into<String>,
    ) -> Self {
        Self {
            sqs,
            streams,
            queue_url: queue_url.into(),
            visibility: VISIBILITY,
            deliveries: None,
        }
    }

    /// The same, handing each applied batch's deliveries to `deliveries` before its
    /// message is deleted.
    pub fn with_deliveries(mut self, deliveries: Arc<dyn BatchDeliveries>) -> Self {
        self.deliveries = Some(deliveries);
        self
    }

    /// The redrive of the queue named by `OJS_STREAM_FAILURES_QUEUE_URL`, if set, with
    /// clients from the standard AWS environment.
    pub fn from_env(sdk: &aws_config::SdkConfig) -> Option<Self> {
        let url = std::env::var(QUEUE_URL_VAR)
            .ok()
            .filter(|u| !u.is_empty())?;
        Some(Self::new(
            aws_sdk_sqs::Client::new(sdk),
            crate::streams_client_from_env(sdk),
            url,
        ))
    }

    /// The same, hiding a taken message for `visibility` (tests take a failed one again
    /// at once).
    pub fn with_visibility(mut self, visibility: Duration) -> Self {
        self.visibility = visibility;
        self
    }

    /// Takes the given-up batches off the queue until it is empty (or `deadline`, or
    /// [`MAX_RECEIVES`] receives) and applies each through `derived`. Never fails: what it
    /// could not do is counted in the report and left for the next run.
    pub async fn run(&self, derived: &Derived, deadline: Instant) -> RedriveReport {
        let mut report = RedriveReport::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..MAX_RECEIVES {
            if Instant::now() >= deadline {
                break;
            }
            let received = self
                .sqs
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(10)
                .visibility_timeout(i32::try_from(self.visibility.as_secs()).unwrap_or(300))
                .send()
                .await;
            let messages = match received {
                Ok(out) => out.messages.unwrap_or_default(),
                Err(e) => {
                    let e = aws_sdk_sqs::error::DisplayErrorContext(e);
                    tracing::warn!(error = %e, "the given-up stream batches could not be read");
                    report.failed += 1;
                    break;
                }
            };
            // A message seen again in this run failed in it (a zero visibility): the next
            // run tries it.
            let fresh: Vec<_> = messages
                .into_iter()
                .filter(|m| seen.insert(m.message_id().unwrap_or_default().to_owned()))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for message in fresh {
                let body = message.body().unwrap_or_default();
                let done = match self.redrive(derived, body).await {
                    Ok(one) => {
                        report.batches += 1;
                        report.records += one.records;
                        report.replayed += one.replayed;
                        report.deliveries += one.deliveries;
                        true
                    }
                    Err(Failure::Lost(why)) => {
                        tracing::error!(reason = %why, message = %body, "a given-up stream batch cannot be redriven: its counter moves and events are lost");
                        report.lost += 1;
                        true
                    }
                    Err(Failure::Later(e)) => {
                        tracing::warn!(error = %e, message = %body, "a given-up stream batch was not redriven; a later run tries again");
                        report.failed += 1;
                        false
                    }
                };
                if done {
                    self.delete(message.receipt_handle()).await;
                }
            }
        }
        if report.lost > 0 {
            if let Some(namespace) = derived.engine().metrics_namespace() {
                println!("{}", lost_document(namespace, report.lost));
            }
        }
        report
    }

    /// Applies the batch a message names, then hands over its deliveries.
    async fn redrive(&self, derived: &Derived, body: &str) -> Result<Redriven, Failure> {
        let info = BatchInfo::parse(body).map_err(Failure::Lost)?;
        if !info.is_of_table(derived.engine().table()) {
            return Err(Failure::Lost(format!(
                "the batch is of another table's stream ({})",
                info.stream_arn
            )));
        }
        let changes = self.read_batch(&info).await?;
        if info.size.is_some_and(|n| n != changes.len() as u64) {
            tracing::warn!(
                expected = info.size,
                read = changes.len(),
                "a given-up stream batch read again has another number of job records"
            );
        }
        let applied = derived
            .apply_changes(&changes)
            .await
            .map_err(Failure::Later)?;
        let deliveries = match &self.deliveries {
            Some(d) => d
                .hand_over(&changes)
                .await
                .map_err(|e| Failure::Later(StoreError::Backend(format!("deliveries: {e}"))))?,
            None => 0,
        };
        tracing::info!(
            shard = %info.shard_id, start = %info.start, end = %info.end,
            records = applied.jobs, replayed = applied.replayed, events = applied.events,
            deliveries, "a given-up stream batch was redriven"
        );
        Ok(Redriven {
            records: applied.jobs,
            replayed: applied.replayed,
            deliveries,
        })
    }

    /// The job records of the batch, in stream order: from its first sequence number to
    /// its last, the table's other writes left out (as the event source mapping's filter
    /// leaves them out).
    async fn read_batch(&self, info: &BatchInfo) -> Result<Vec<Change>, Failure> {
        let out = self
            .streams
            .get_shard_iterator()
            .stream_arn(&info.stream_arn)
            .shard_id(&info.shard_id)
            .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
            .sequence_number(&info.start)
            .send()
            .await;
        let mut iterator = match out {
            Ok(out) => out.shard_iterator,
            Err(e) => {
                let e = e.into_service_error();
                if e.is_trimmed_data_access_exception() || e.is_resource_not_found_exception() {
                    return Err(Failure::Lost(format!("{e}: past the stream's retention")));
                }
                return Err(Failure::Later(stream_error(&e)));
            }
        };
        let mut changes = Vec::new();
        let mut first = true;
        for _ in 0..MAX_PAGES {
            let Some(at) = iterator.take() else {
                // The shard is closed and read to its end.
                return Ok(changes);
            };
            let out = match self.streams.get_records().shard_iterator(at).send().await {
                Ok(out) => out,
                Err(e) => {
                    let e = e.into_service_error();
                    if e.is_trimmed_data_access_exception() || e.is_resource_not_found_exception() {
                        return Err(Failure::Lost(format!("{e}: past the stream's retention")));
                    }
                    return Err(Failure::Later(stream_error(&e)));
                }
            };
            for record in out.records().iter().filter_map(|r| r.dynamodb()) {
                let seq = record.sequence_number().unwrap_or_default();
                // The markers of the runs an earlier delivery landed are keyed by the
                // batch's first record: read from a later one (the first trimmed), the
                // batch would apply those runs again.
                if std::mem::take(&mut first) && compare(seq, &info.start) == Ordering::Greater {
                    return Err(Failure::Lost(format!(
                        "the stream no longer holds the batch's first record {} (it starts at {seq})",
                        info.start
                    )));
                }
                if compare(seq, &info.start) == Ordering::Less {
                    continue;
                }
                if compare(seq, &info.end) == Ordering::Greater {
                    return Ok(changes);
                }
                let change = change_of(record);
                if change.is_job() {
                    changes.push(change);
                }
                if compare(seq, &info.end) == Ordering::Equal {
                    return Ok(changes);
                }
            }
            iterator = out.next_shard_iterator;
        }
        Err(Failure::Later(StoreError::Backend(format!(
            "stream batch {}..{}: its last record not reached in {MAX_PAGES} reads",
            info.start, info.end
        ))))
    }

    async fn delete(&self, receipt: Option<&str>) {
        let Some(receipt) = receipt else { return };
        let out = self
            .sqs
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await;
        if let Err(e) = out {
            // The message comes back after its visibility timeout: the batch is found
            // applied then (every run meets its marker), and the message deleted.
            let e = aws_sdk_sqs::error::DisplayErrorContext(e);
            tracing::warn!(error = %e, "a redriven stream batch's message was not deleted");
        }
    }
}

/// Where the in-process consumer (`make dev`) reports a batch it gives up on, as the
/// event source mapping reports one to its on-failure destination on AWS: a queue that a
/// [`StreamRedrive`] reads.
#[derive(Clone)]
pub struct FailureQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
}

impl FailureQueue {
    /// The queue at `url`.
    pub fn new(sqs: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self {
            sqs,
            url: url.into(),
        }
    }

    /// Queue `name` on the SQS endpoint of `sdk`, created if missing (`make dev`).
    pub async fn create(sdk: &aws_config::SdkConfig, name: &str) -> Result<Self, StoreError> {
        let (sqs, url) =
            crate::engine::timer::create_queue(sdk, name, "stream failure queue").await?;
        Ok(Self::new(sqs, url))
    }

    /// The queue's URL (a [`StreamRedrive`] of it reads there).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The redrive of this queue, reading records again through `streams`.
    pub fn redrive(&self, streams: aws_sdk_dynamodbstreams::Client) -> StreamRedrive {
        StreamRedrive::new(self.sqs.clone(), streams, self.url.clone())
    }

    /// Reports the job records among `changes`, read from shard `shard_id` of
    /// `stream_arn`, as a batch given up after `attempts`. Nothing to report when none
    /// is a job record with a sequence number.
    pub(crate) async fn report(
        &self,
        stream_arn: &str,
        shard_id: &str,
        changes: &[Change],
        attempts: u32,
    ) -> Result<(), StoreError> {
        let Some(record) = invocation_record(stream_arn, shard_id, changes, attempts) else {
            return Ok(());
        };
        self.sqs
            .send_message()
            .queue_url(&self.url)
            .message_body(record.to_string())
            .send()
            .await
            .map_err(|e| {
                StoreError::Backend(format!(
                    "reporting a given-up stream batch: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(&e)
                ))
            })?;
        Ok(())
    }
}

/// The on-failure destination's invocation record for the job records of `changes`:
/// the batch from the first to the last of them, as the event source mapping (whose
/// filter passes job records only) names a batch.
fn invocation_record(
    stream_arn: &str,
    shard_id: &str,
    changes: &[Change],
    attempts: u32,
) -> Option<Value> {
    let jobs: Vec<&str> = changes
        .iter()
        .filter(|c| c.is_job())
        .filter_map(|c| c.sequence.as_deref())
        .collect();
    let (first, last) = (jobs.first()?, jobs.last()?);
    Some(json!({
        "requestContext": {
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": attempts,
        },
        "version": "1.0",
        "timestamp": ojs_core::time::format(&ojs_core::time::now()),
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": first,
            "endSequenceNumber": last,
            "batchSize": jobs.len(),
            "streamArn": stream_arn,
        },
    }))
}

fn stream_error(e: &(impl std::error::Error + 'static)) -> StoreError {
    StoreError::Backend(format!(
        "change stream: {}",
        aws_sdk_dynamodb::error::DisplayErrorContext(e)
    ))
}

/// The EMF document counting batches lost to the stream's retention.
fn lost_document(namespace: &str, lost: usize) -> Value {
    json!({
        "_aws": {
            "Timestamp": ojs_core::time::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [[]],
                "Metrics": [{"Name": LOST_METRIC, "Unit": "Count"}],
            }],
        },
        LOST_METRIC: lost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The invocation record AWS documents for a DynamoDB stream's on-failure destination.
    fn record(info: Value) -> String {
        json!({
            "requestContext": {
                "requestId": "316aa6d0-8154-xmpl-9af7-85d5f4a6bc81",
                "functionArn": "arn:aws:lambda:us-east-2:123456789012:function:myfunction",
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": 11
            },
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": "2019-11-14T00:13:49.717Z",
            "DDBStreamBatchInfo": info,
        })
        .to_string()
    }

    fn info() -> Value {
        json!({
            "shardId": "shardId-00000001573689847184-864758bb",
            "startSequenceNumber": "800000000003126276362",
            "endSequenceNumber": "800000000003126276370",
            "approximateArrivalOfFirstRecord": "2019-11-14T00:13:19Z",
            "approximateArrivalOfLastRecord": "2019-11-14T00:13:19Z",
            "batchSize": 9,
            "streamArn": "arn:aws:dynamodb:us-east-2:123456789012:table/mytable/stream/2019-11-14T00:04:06.388"
        })
    }

    #[test]
    fn the_documented_invocation_record_reads() {
        let got = BatchInfo::parse(&record(info())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.shard_id, "shardId-00000001573689847184-864758bb");
        assert_eq!(
            (got.start.as_str(), got.end.as_str()),
            ("800000000003126276362", "800000000003126276370")
        );
        assert_eq!(got.size, Some(9));
        assert!(got.is_of_table("mytable"));
        assert!(!got.is_of_table("mytabl"));
        assert!(!got.is_of_table("other"));
    }

    #[test]
    fn records_that_name_no_batch_are_refused() {
        for bad in [
            "not json".to_owned(),
            json!({"requestContext": {}}).to_string(),
            record(json!({"shardId": "s"})),
            record({
                let mut i = info();
                i["startSequenceNumber"] = json!("");
                i
            }),
            record({
                let mut i = info();
                i["endSequenceNumber"] = json!("800000000003126276361");
                i
            }),
        ] {
            assert!(BatchInfo::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sequence_numbers_compare_as_numbers_padded_or_not() {
        assert_eq!(compare("10", "9"), Ordering::Greater);
        assert_eq!(compare("000000000000000000010", "9"), Ordering::Greater);
        assert_eq!(compare("000000000000000000009", "9"), Ordering::Equal);
        assert_eq!(
            compare("400000000004474329939", "400000000004474329940"),
            Ordering::Less
        );
    }

    /// A change of item `pk`/`sk` at sequence number `seq`.
    fn change(pk: &str, sk: &str, seq: Option<&str>) -> Change {
        use aws_sdk_dynamodb::types::AttributeValue as A;
        let item = crate::item::Item::from([
            ("pk".to_owned(), A::S(pk.to_owned())),
            ("sk".to_owned(), A::S(sk.to_owned())),
        ]);
        Change {
            new: Some(item),
            sequence: seq.map(str::to_owned),
            ..Change::default()
        }
    }

    #[test]
    fn a_local_report_names_its_job_records_as_the_mapping_would() {
        let arn = "arn:aws:dynamodb:ddblocal:000000000000:table/t1/stream/2026-11-30T00:00:00.000";
        let changes = [
            change("QUEUES", "~COUNTS#q", Some("100")),
            change("JOB#a", "JOB", Some("101")),
            change("JOB#a", "LOCK", Some("102")),
            change("JOB#b", "JOB", None),
            change("JOB#c", "JOB", Some("104")),
            change("EVT#q", "p", Some("105")),
        ];
        let record = invocation_record(arn, "shard-1", &changes, 10)
            .unwrap_or_else(|| panic!("a record"))
            .to_string();
        let got = BatchInfo::parse(&record).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got,
            BatchInfo {
                stream_arn: arn.to_owned(),
                shard_id: "shard-1".to_owned(),
                start: "101".to_owned(),
                end: "104".to_owned(),
                size: Some(2),
            }
        );
        assert!(got.is_of_table("t1"));
        // No job record: nothing to report (a redrive would find nothing to apply).
        assert_eq!(invocation_record(arn, "shard-1", &changes[..1], 10), None);
        assert_eq!(invocation_record(arn, "shard-1", &changes[3..4], 10), None);
    }

    #[test]
    fn lost_batches_are_a_metric() {
        let doc = lost_document("OJS/test", 2);
        assert_eq!(doc[LOST_METRIC], 2);
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"],
            LOST_METRIC
        );
    }
}
