//! A meter on the AWS SDK clients: an interceptor that records every DynamoDB and SQS
//! call with the capacity DynamoDB reports for it, broken down by table and index.
//!
//! The store asks for `ReturnConsumedCapacity=TOTAL`; the meter upgrades each request to
//! `INDEXES` (the total stays the same, DynamoDB adds the per-table/per-GSI split), so the
//! store's own [`ojs_store::Store::usage`] keeps counting exactly as in production and
//! the bench can say which write of which index a unit was spent on.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation as op;
use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use serde::Serialize;

/// One SDK call as the meter saw it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CallRecord {
    /// `dynamodb` or `sqs`.
    pub service: String,
    /// The API operation, e.g. `UpdateItem`.
    pub op: String,
    /// What it touched, e.g. `Update JOB#…/JOB` or `Query ready READY#…`.
    pub target: String,
    /// Items in the call (transaction actions, batch entries, a query's `Limit`; else 1).
    pub items: usize,
    /// Size of the serialized request body in bytes.
    pub request_bytes: u64,
    /// Read capacity units consumed (table and indexes).
    pub read_units: f64,
    /// Write capacity units consumed (table and indexes).
    pub write_units: f64,
    /// Capacity units consumed on the base table.
    pub table_units: f64,
    /// Capacity units consumed per global secondary index.
    pub index_units: BTreeMap<String, f64>,
    /// Whether the call succeeded (a failed conditional write is `false`).
    pub ok: bool,
}

impl CallRecord {
    /// Whether the call is a DynamoDB read (GetItem, Query, BatchGetItem, Scan).
    pub fn is_read(&self) -> bool {
        matches!(
            self.op.as_str(),
            "GetItem" | "Query" | "BatchGetItem" | "Scan" | "TransactGetItems"
        )
    }
}

/// Shared log of calls; clone it into as many clients as needed.
#[derive(Clone, Default)]
pub struct Meter {
    calls: Arc<Mutex<Vec<CallRecord>>>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter").field("calls", &self.len()).finish()
    }
}

impl Meter {
    /// A DynamoDB client with the store's own retry/timeout settings plus this meter.
    pub fn dynamodb_client(&self, sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
        let base = ojs_store::client_for(sdk);
        let conf = base
            .config()
            .to_builder()
            .interceptor(Interceptor(self.clone()))
            .build();
        aws_sdk_dynamodb::Client::from_conf(conf)
    }

    /// An SQS client that records its calls in this meter.
    pub fn sqs_client(&self, sdk: &aws_config::SdkConfig) -> aws_sdk_sqs::Client {
        let conf = aws_sdk_sqs::config::Builder::from(sdk)
            .interceptor(Interceptor(self.clone()))
            .build();
        aws_sdk_sqs::Client::from_conf(conf)
    }

    /// Number of calls recorded so far: a mark for [`Meter::since`].
    pub fn len(&self) -> usize {
        self.calls.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// Whether nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls recorded after `mark` (a value of [`Meter::len`]).
    pub fn since(&self, mark: usize) -> Vec<CallRecord> {
        self.calls
            .lock()
            .map(|c| c.get(mark..).map(<[_]>::to_vec).unwrap_or_default())
            .unwrap_or_default()
    }

    fn push(&self, record: CallRecord) {
        if let Ok(mut c) = self.calls.lock() {
            c.push(record);
        }
    }
}

/// What the meter notes about a call before it is sent.
#[derive(Debug, Clone)]
struct Pending {
    target: String,
    items: usize,
    request_bytes: u64,
}

impl Storable for Pending {
    type Storer = StoreReplace<Self>;
}

#[derive(Debug)]
struct Interceptor(Meter);

impl Intercept for Interceptor {
    fn name(&self) -> &'static str {
        "ojs-bench-meter"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        let (target, items) = describe_dynamodb(input).unwrap_or_else(|| describe_sqs(input));
        cfg.interceptor_state().store_put(Pending {
            target,
            items,
            request_bytes: 0,
        });
        Ok(())
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let bytes = context.request().body().content_length().unwrap_or(0);
        if let Some(p) = cfg.load::<Pending>().cloned() {
            cfg.interceptor_state().store_put(Pending {
                request_bytes: bytes,
                ..p
            });
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (service, op) = cfg
            .load::<Metadata>()
            .map(|m| (m.service().to_ascii_lowercase(), m.name().to_owned()))
            .unwrap_or_default();
        let pending = cfg.load::<Pending>().cloned().unwrap_or(Pending {
            target: String::new(),
            items: 1,
            request_bytes: 0,
        });
        let (ok, consumed) = match context.output_or_error() {
            Some(Ok(out)) => (true, consumed_of(out)),
            _ => (false, Vec::new()),
        };
        let mut record = CallRecord {
            service,
            op,
            target: pending.target,
            items: pending.items,
            request_bytes: pending.request_bytes,
            read_units: 0.0,
            write_units: 0.0,
            table_units: 0.0,
            index_units: BTreeMap::new(),
            ok,
        };
        let read = record.is_read();
        for c in &consumed {
            let total = c.capacity_units().unwrap_or(0.0);
            let (r, w) = match (c.read_capacity_units(), c.write_capacity_units()) {
                (None, None) if read => (total, 0.0),
                (None, None) => (0.0, total),
                (r, w) => (r.unwrap_or(0.0), w.unwrap_or(0.0)),
            };
            record.read_units += r;
            record.write_units += w;
            record.table_units += c.table().and_then(|t| t.capacity_units()).unwrap_or(0.0);
            for (name, cap) in c.global_secondary_indexes().into_iter().flatten() {
                *record.index_units.entry(name.clone()).or_default() +=
                    cap.capacity_units().unwrap_or(0.0);
            }
        }
        self.0.push(record);
        Ok(())
    }
}

/// The capacity records of a DynamoDB output, whatever the operation.
fn consumed_of(
    out: &aws_smithy_runtime_api::client::interceptors::context::Output,
) -> Vec<ConsumedCapacity> {
    macro_rules! one {
        ($($t:ty),*) => {$(
            if let Some(o) = out.downcast_ref::<$t>() {
                return o.consumed_capacity().into_iter().cloned().collect();
            }
        )*};
    }
    macro_rules! many {
        ($($t:ty),*) => {$(
            if let Some(o) = out.downcast_ref::<$t>() {
                return o.consumed_capacity().to_vec();
            }
        )*};
    }
    one!(
        op::get_item::GetItemOutput,
        op::put_item::PutItemOutput,
        op::update_item::UpdateItemOutput,
        op::delete_item::DeleteItemOutput,
        op::query::QueryOutput,
        op::scan::ScanOutput
    );
    many!(
        op::batch_get_item::BatchGetItemOutput,
        op::batch_write_item::BatchWriteItemOutput,
        op::transact_write_items::TransactWriteItemsOutput,
        op::transact_get_items::TransactGetItemsOutput
    );
    Vec::new()
}

/// `JOB#0193…` -> `JOB#…`, `evt_0193…` -> `evt_…`: the key's kind without its identity.
fn shape(v: Option<&AttributeValue>) -> String {
    match v.and_then(|v| v.as_s().ok()) {
        Some(s) => match s.find(['#', '_']) {
            Some(i) if i + 1 < s.len() => format!("{}…", &s[..=i]),
            _ => s.clone(),
        },
        None => "?".into(),
    }
}

fn key_shape(key: &HashMap<String, AttributeValue>) -> String {
    format!("{}/{}", shape(key.get("pk")), shape(key.get("sk")))
}

/// Upgrades `TOTAL` to `INDEXES` and describes a DynamoDB call; `None` for other services.
fn describe_dynamodb(
    input: &mut aws_smithy_runtime_api::client::interceptors::context::Input,
) -> Option<(String, usize)> {
    fn upgrade(r: &mut Option<ReturnConsumedCapacity>) {
        if r.is_some() {
            *r = Some(ReturnConsumedCapacity::Indexes);
        }
    }
    if let Some(i) = input.downcast_mut::<op::put_item::PutItemInput>() {
        upgrade(&mut i.return_consumed_capacity);
        let item = i.item.clone().unwrap_or_default();
        return Some((format!("Put {}", key_shape(&item)), 1));
    }
    if let Some(i) = input.downcast_mut::<op::update_item::UpdateItemInput>() {
        upgrade(&mut i.return_consumed_capacity);
        let key = i.key.clone().unwrap_or_default();
        return Some((format!("Update {}", key_shape(&key)), 1));
    }
    if let Some(i) = input.downcast_mut::<op::delete_item::DeleteItemInput>() {
        upgrade(&mut i.return_consumed_capacity);
        let key = i.key.clone().unwrap_or_default();
        return Some((format!("Delete {}", key_shape(&key)), 1));
    }
    if let Some(i) = input.downcast_mut::<op::get_item::GetItemInput>() {
        upgrade(&mut i.return_consumed_capacity);
        let key = i.key.clone().unwrap_or_default();
        return Some((format!("Get {}", key_shape(&key)), 1));
    }
    if let Some(i) = input.downcast_mut::<op::query::QueryInput>() {
        upgrade(&mut i.return_consumed_capacity);
        let index = i.index_name.clone().unwrap_or_else(|| "table".into());
        // The partition value is one of the expression values: the one shaped like a key.
        let mut values: Vec<(&String, &AttributeValue)> =
            i.expression_attribute_values.iter().flatten().collect();
        values.sort_by(|a, b| a.0.cmp(b.0));
        let part = values
            .iter()
            .filter_map(|(_, v)| v.as_s().ok())
            .find(|s| {
                s.split('#')
                    .next()
                    .is_some_and(|p| p.len() > 1 && p.chars().all(|c| c.is_ascii_uppercase()))
            })
            .map(|s| shape(Some(&AttributeValue::S(s.clone()))))
            .unwrap_or_else(|| "?".into());
        let limit = i.limit.and_then(|l| usize::try_from(l).ok()).unwrap_or(1);
        return Some((format!("Query {index} {part}"), limit));
    }
    if let Some(i) = input.downcast_mut::<op::transact_write_items::TransactWriteItemsInput>() {
        upgrade(&mut i.return_consumed_capacity);
        let actions: Vec<String> = i
            .transact_items
            .iter()
            .flatten()
            .map(|t| {
                if let Some(p) = t.put() {
                    format!("Put {}", key_shape(p.item()))
                } else if let Some(u) = t.update() {
                    format!("Update {}", key_shape(u.key()))
                } else if let Some(d) = t.delete() {
                    format!("Delete {}", key_shape(d.key()))
                } else if let Some(c) = t.condition_check() {
                    format!("Check {}", key_shape(c.key()))
                } else {
                    "?".into()
                }
            })
            .collect();
        let n = actions.len();
        return Some((format!("Tx[{}]", summarize(&actions)), n));
    }
    if let Some(i) = input.downcast_mut::<op::batch_write_item::BatchWriteItemInput>() {
        upgrade(&mut i.return_consumed_capacity);
        let writes: Vec<String> = i
            .request_items
            .iter()
            .flatten()
            .flat_map(|(_, reqs)| reqs.iter())
            .map(|w| match (w.put_request(), w.delete_request()) {
                (Some(p), _) => format!("Put {}", key_shape(p.item())),
                (_, Some(d)) => format!("Delete {}", key_shape(d.key())),
                _ => "?".into(),
            })
            .collect();
        let n = writes.len();
        return Some((format!("Batch[{}]", summarize(&writes)), n));
    }
    if let Some(i) = input.downcast_mut::<op::batch_get_item::BatchGetItemInput>() {
        upgrade(&mut i.return_consumed_capacity);
        let n = i
            .request_items
            .iter()
            .flatten()
            .map(|(_, k)| k.keys().len())
            .sum();
        return Some((format!("BatchGet[{n}]"), n));
    }
    if let Some(i) = input.downcast_mut::<op::scan::ScanInput>() {
        upgrade(&mut i.return_consumed_capacity);
        return Some(("Scan".into(), 1));
    }
    None
}

/// Describes an SQS call (messages per call for sends/deletes).
fn describe_sqs(
    input: &mut aws_smithy_runtime_api::client::interceptors::context::Input,
) -> (String, usize) {
    use aws_sdk_sqs::operation as sqs;
    if let Some(i) = input.downcast_ref::<sqs::send_message_batch::SendMessageBatchInput>() {
        let n = i.entries().len();
        return (format!("send {n} messages"), n);
    }
    if input
        .downcast_ref::<sqs::send_message::SendMessageInput>()
        .is_some()
    {
        return ("send 1 message".into(), 1);
    }
    (String::new(), 1)
}

/// `["Put A", "Put A", "Put B"]` -> `2×Put A, Put B` (order of first appearance).
fn summarize(parts: &[String]) -> String {
    let mut counts: Vec<(&String, usize)> = Vec::new();
    for p in parts {
        match counts.iter_mut().find(|(q, _)| *q == p) {
            Some((_, n)) => *n += 1,
            None => counts.push((p, 1)),
        }
    }
    counts
        .into_iter()
        .map(|(p, n)| {
            if n == 1 {
                p.clone()
            } else {
                format!("{n}×{p}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sums of a set of calls.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Totals {
    /// DynamoDB calls.
    pub calls: usize,
    /// Read capacity units.
    pub read_units: f64,
    /// Write capacity units.
    pub write_units: f64,
    /// SQS requests.
    pub sqs_requests: usize,
}

/// Adds up the DynamoDB calls and SQS requests of `calls`.
pub fn totals(calls: &[CallRecord]) -> Totals {
    let mut t = Totals::default();
    for c in calls {
        if c.service == "sqs" {
            t.sqs_requests += 1;
        } else {
            t.calls += 1;
            t.read_units += c.read_units;
            t.write_units += c.write_units;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarize_counts_repeats_in_order() {
        let parts = vec!["Put A".to_owned(), "Put B".to_owned(), "Put A".to_owned()];
        assert_eq!(summarize(&parts), "2×Put A, Put B");
    }

    #[test]
    fn shape_keeps_the_kind_only() {
        let s = |v: &str| shape(Some(&AttributeValue::S(v.into())));
        assert_eq!(s("JOB#0193abc"), "JOB#…");
        assert_eq!(s("JOB"), "JOB");
        assert_eq!(s("~COUNTS#email"), "~COUNTS#…");
        assert_eq!(s("evt_0193abc"), "evt_…");
        assert_eq!(shape(None), "?");
    }
}
