//! The raw DynamoDB Local ceiling: the same mix of DynamoDB calls a product run made
//! (same operations, similar request sizes, the same indexes touched), issued directly
//! with the SDK at the same concurrency. How many calls per second the storage engine
//! can serve for that mix bounds what the product can turn into jobs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, Put, PutRequest, TransactWriteItem, WriteRequest,
};
use aws_sdk_dynamodb::Client;
use ojs_store::{Store, StoreConfig};
use serde::Serialize;

use crate::meter::CallRecord;

/// Items pre-written for updates and reads to land on.
const POOL: usize = 256;
/// Bytes of a request that are not the item's payload (keys, expressions, table name).
const OVERHEAD: u64 = 250;

/// Result of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    /// Calls issued.
    pub calls: usize,
    /// Concurrent callers.
    pub workers: usize,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Calls per second.
    pub calls_per_s: f64,
    /// Calls that failed.
    pub errors: usize,
    /// The first failure, if any.
    pub first_error: Option<String>,
}

impl Ceiling {
    /// A replay not made (yet) for `workers` callers.
    pub fn not_replayed(workers: usize) -> Self {
        Self {
            calls: 0,
            workers,
            seconds: 0.0,
            calls_per_s: 0.0,
            errors: 0,
            first_error: None,
        }
    }
}

/// One raw call to issue.
#[derive(Debug, Clone)]
enum Raw {
    Put {
        pad: usize,
        ready: bool,
        due: bool,
    },
    Update {
        pad: usize,
        ready: bool,
        due: bool,
    },
    Delete,
    Get,
    Query {
        index: Option<&'static str>,
        limit: i32,
    },
    BatchWrite {
        n: usize,
        pad: usize,
    },
    BatchGet {
        n: usize,
    },
    Transact {
        n: usize,
        pad: usize,
        ready: bool,
    },
}

fn raw_of(c: &CallRecord) -> Option<Raw> {
    let pad = c.request_bytes.saturating_sub(OVERHEAD) as usize;
    let ready = c.index_units.contains_key("ready");
    let due = c.index_units.contains_key("due");
    Some(match c.op.as_str() {
        "PutItem" => Raw::Put { pad, ready, due },
        "UpdateItem" => Raw::Update { pad, ready, due },
        "DeleteItem" => Raw::Delete,
        "GetItem" => Raw::Get,
        "Query" => Raw::Query {
            index: if c.target.contains(" ready ") {
                Some("ready")
            } else if c.target.contains(" due ") {
                Some("due")
            } else {
                None
            },
            limit: i32::try_from(c.items.max(1)).unwrap_or(1),
        },
        "BatchWriteItem" => Raw::BatchWrite {
            n: c.items.clamp(1, 25),
            pad: pad / c.items.max(1),
        },
        "BatchGetItem" => Raw::BatchGet {
            n: c.items.clamp(1, 100),
        },
        "TransactWriteItems" => Raw::Transact {
            n: c.items.clamp(1, 100),
            pad: pad / c.items.max(1),
            ready,
        },
        _ => return None,
    })
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn item(
    pk: String,
    pad: usize,
    ready: bool,
    due: bool,
    n: usize,
) -> HashMap<String, AttributeValue> {
    let mut m = HashMap::from([
        ("pk".to_owned(), s(pk)),
        ("sk".to_owned(), s("JOB")),
        ("pad".to_owned(), s("x".repeat(pad.max(1)))),
    ]);
    if ready {
        m.insert("gsi1pk".into(), s("READY#raw"));
        m.insert("gsi1sk".into(), s(format!("{n:016}")));
    }
    if due {
        m.insert("gsi2pk".into(), s("DUE#raw"));
        m.insert("gsi2sk".into(), s(format!("{n:016}")));
    }
    m
}

fn pool_key(i: usize) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), s(format!("RAW#{}", i % POOL))),
        ("sk".to_owned(), s("JOB")),
    ])
}

async fn issue(client: &Client, table: &str, raw: &Raw, i: usize) -> anyhow::Result<()> {
    match raw {
        Raw::Put { pad, ready, due } => {
            client
                .put_item()
                .table_name(table)
                .set_item(Some(item(format!("NEW#{i}"), *pad, *ready, *due, i)))
                .send()
                .await?;
        }
        Raw::Update { pad, ready, due } => {
            // `pad` is a reserved word in expressions: name it through #p.
            let mut expr = vec!["#p = :p".to_owned()];
            let mut values = HashMap::from([(":p".to_owned(), s("y".repeat((*pad).max(1))))]);
            if *ready {
                expr.push("gsi1pk = :r, gsi1sk = :k".into());
                values.insert(":r".into(), s("READY#raw"));
            }
            if *due {
                expr.push("gsi2pk = :d, gsi2sk = :k".into());
                values.insert(":d".into(), s("DUE#raw"));
            }
            if *ready || *due {
                values.insert(":k".into(), s(format!("{i:016}")));
            }
            client
                .update_item()
                .table_name(table)
                .set_key(Some(pool_key(i)))
                .update_expression(format!("SET {}", expr.join(", ")))
                .expression_attribute_names("#p", "pad")
                .set_expression_attribute_values(Some(values))
                .send()
                .await?;
        }
        Raw::Delete => {
            client
                .delete_item()
                .table_name(table)
                .key("pk", s(format!("NEW#{i}")))
                .key("sk", s("JOB"))
                .send()
                .await?;
        }
        Raw::Get => {
            client
                .get_item()
                .table_name(table)
                .set_key(Some(pool_key(i)))
                .send()
                .await?;
        }
        Raw::Query { index, limit } => {
            let q = client.query().table_name(table).limit(*limit);
            let q = match index {
                Some(name) => {
                    let (attr, value) = if *name == "ready" {
                        ("gsi1pk", "READY#raw")
                    } else {
                        ("gsi2pk", "DUE#raw")
                    };
                    q.index_name(*name)
                        .key_condition_expression(format!("{attr} = :v"))
                        .expression_attribute_values(":v", s(value))
                }
                None => q
                    .key_condition_expression("pk = :v")
                    .expression_attribute_values(":v", s(format!("RAW#{}", i % POOL))),
            };
            q.send().await?;
        }
        Raw::BatchWrite { n, pad } => {
            let writes = (0..*n)
                .map(|k| {
                    let put = PutRequest::builder()
                        .set_item(Some(item(format!("EVT#{i}#{k}"), *pad, false, false, k)))
                        .build()?;
                    Ok(WriteRequest::builder().put_request(put).build())
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            client
                .batch_write_item()
                .request_items(table, writes)
                .send()
                .await?;
        }
        Raw::BatchGet { n } => {
            let mut keys = KeysAndAttributes::builder();
            for k in 0..*n {
                keys = keys.keys(pool_key(i + k));
            }
            client
                .batch_get_item()
                .request_items(table, keys.build()?)
                .send()
                .await?;
        }
        Raw::Transact { n, pad, ready } => {
            let items = (0..*n)
                .map(|k| {
                    let put = Put::builder()
                        .table_name(table)
                        .set_item(Some(item(format!("TX#{i}#{k}"), *pad, *ready, false, k)))
                        .build()?;
                    Ok(TransactWriteItem::builder().put(put).build())
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            client
                .transact_write_items()
                .set_transact_items(Some(items))
                .send()
                .await?;
        }
    }
    Ok(())
}

/// Replays the DynamoDB calls of `calls` (SQS calls are skipped) with `workers`
/// concurrent callers on a fresh table of the product's schema, and times it.
pub async fn replay(calls: &[CallRecord], workers: usize) -> anyhow::Result<Ceiling> {
    let sdk = crate::env::sdk().await;
    let client = ojs_store::client_for(&sdk);
    let table = crate::env::table_name("ceiling");
    let store = Store::new(client.clone(), StoreConfig::for_table(&table));
    store
        .ensure_table()
        .await
        .context("creating the ceiling table")?;
    if !crate::env::stream_on() {
        crate::env::stream_off_for(&client, &table).await?;
    }
    let result = replay_on(&client, &table, calls, workers).await;
    let _ = store.delete_table().await;
    result
}

async fn replay_on(
    client: &Client,
    table: &str,
    calls: &[CallRecord],
    workers: usize,
) -> anyhow::Result<Ceiling> {
    for i in 0..POOL {
        client
            .put_item()
            .table_name(table)
            .set_item(Some(item(format!("RAW#{i}"), 1000, true, false, i)))
            .send()
            .await?;
    }
    let raws: Arc<Vec<Raw>> = Arc::new(
        calls
            .iter()
            .filter(|c| c.service != "sqs")
            .filter_map(raw_of)
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let first_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers.max(1))
        .map(|_| {
            let (raws, next, errors) = (Arc::clone(&raws), Arc::clone(&next), Arc::clone(&errors));
            let first_error = Arc::clone(&first_error);
            let (client, table) = (client.clone(), table.to_owned());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(raw) = raws.get(i) else { break };
                    if let Err(e) = issue(&client, &table, raw, i).await {
                        errors.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut f) = first_error.lock() {
                            f.get_or_insert_with(|| format!("{raw:?}: {e:#}"));
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Ceiling {
        calls: raws.len(),
        workers,
        seconds,
        calls_per_s: raws.len() as f64 / seconds.max(1e-9),
        errors: errors.load(Ordering::Relaxed),
        first_error: first_error.lock().ok().and_then(|f| f.clone()),
    })
}
