//! Lifecycle events, stored by the change stream consumer: each batch of records writes
//! one page item per queue in `EVT#<queue>` (sort key: its first event's id, a UUIDv7)
//! holding its events deflated, kept for the configured retention by TTL. A job's three
//! lifecycle events cost a fraction of a write unit, and the queue's partition takes one
//! write per batch, not one per event.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use futures::future::join_all;
use ojs_core::event::Event;
use ojs_core::time;
use serde_json::Value;

use crate::error::StoreError;
use crate::item::{n, s};
use crate::keys;
use crate::usage::Kind;
use crate::Store;

/// A query of `GET /ojs/v1/events`.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    /// Only events of these types (all when empty).
    pub types: Vec<String>,
    /// Only events of these queues (every known queue when empty).
    pub queues: Vec<String>,
    /// Only events after this event id.
    pub after: Option<String>,
    /// Most events returned.
    pub limit: usize,
}

/// Most page items read per queue for one query, so a sparse filter cannot run unbounded.
const MAX_PAGES: usize = 20;

/// Most bytes of event JSON in one page item before deflate (which never grows it by more
/// than a few bytes per 64 KiB), so a page stays below DynamoDB's 400 KB item limit
/// whatever the jobs' results.
const PAGE_BYTES: usize = 300 * 1024;

/// How far before an `after` cursor a page may start and still hold later events: a
/// page's ids are taken within one batch's rendering, milliseconds apart.
const PAGE_SPAN_MS: i64 = 10_000;

/// The page sort key at or below which no page holds an event after `after`.
fn pages_from(after: &str) -> Option<String> {
    let uuid = uuid::Uuid::parse_str(after.strip_prefix("evt_")?).ok()?;
    let (secs, nanos) = uuid.get_timestamp()?.to_unix();
    let ms = i64::try_from(secs).ok()? * 1000 + i64::from(nanos / 1_000_000) - PAGE_SPAN_MS;
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, u64::try_from(ms / 1000).ok()?, 0);
    // The timestamp's 12 hex digits, hyphenated as event ids are: a prefix of every id
    // of that millisecond.
    Some(format!(
        "evt_{}",
        uuid::Uuid::new_v7(ts).to_string().get(..13)?
    ))
}

impl Store {
    /// Prints the CloudWatch EMF lines of `events` when metrics are on.
    pub(crate) fn print_metrics(&self, events: &[Event]) {
        if let Some(namespace) = &self.config.metrics_namespace {
            let now_ms = time::now().timestamp_millis();
            for doc in crate::metrics::emf_documents(namespace, events, now_ms) {
                println!("{doc}");
            }
        }
    }

    /// Stores `events` (in stream order) as one page item per queue and [`PAGE_BYTES`];
    /// the first failure is returned.
    pub(crate) async fn store_events(&self, events: &[Event]) -> Result<(), StoreError> {
        if !self.config.events || events.is_empty() {
            return Ok(());
        }
        let ttl = time::now().timestamp()
            + i64::try_from(self.config.event_retention.as_secs()).unwrap_or(86_400);
        let mut per_queue: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
        for e in events {
            per_queue.entry(e.queue.as_str()).or_default().push(e);
        }
        let puts = per_queue.into_iter().flat_map(|(queue, events)| {
            pages(&events)
                .into_iter()
                .map(|(first_id, text)| {
                    let packed = miniz_oxide::deflate::compress_to_vec(&text, 6);
                    self.client
                        .put_item()
                        .table_name(self.table())
                        .item("pk", s(keys::events_pk(queue)))
                        .item("sk", s(first_id))
                        .item("events", AttributeValue::B(Blob::new(packed)))
                        .item("ttl", n(ttl))
                        .return_consumed_capacity(ReturnConsumedCapacity::Total)
                })
                .collect::<Vec<_>>()
        });
        let stored = join_all(
            puts.map(|put| async move { self.tally(Kind::Write, put.send().await).map(|_| ()) }),
        )
        .await;
        stored.into_iter().collect()
    }

    /// Events matching `q`, oldest first, with a cursor for the next page.
    pub async fn list_events(&self, q: &EventQuery) -> Result<(Vec<Value>, bool), StoreError> {
        self.catch_up().await;
        let queues = if q.queues.is_empty() {
            self.list_queues()
                .await?
                .into_iter()
                .map(|qi| qi.name)
                .collect()
        } else {
            q.queues.clone()
        };
        let mut found: Vec<(String, Value)> = Vec::new();
        let mut has_more = false;
        for queue in &queues {
            let (events, more) = self.queue_events(queue, q).await?;
            has_more |= more;
            found.extend(events);
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        if found.len() > q.limit {
            found.truncate(q.limit);
            has_more = true;
        }
        Ok((found.into_iter().map(|(_, v)| v).collect(), has_more))
    }

    async fn queue_events(
        &self,
        queue: &str,
        q: &EventQuery,
    ) -> Result<(Vec<(String, Value)>, bool), StoreError> {
        let mut found = Vec::new();
        let mut start = None;
        let from = q.after.as_deref().and_then(pages_from);
        for _ in 0..MAX_PAGES {
            let mut req = self
                .client
                .query()
                .table_name(self.table())
                .expression_attribute_values(":pk", s(keys::events_pk(queue)))
                .set_exclusive_start_key(start.take())
                .limit(4)
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            req = match &from {
                Some(from) => req
                    .key_condition_expression("pk = :pk AND sk >= :from")
                    .expression_attribute_values(":from", s(from.clone())),
                None => req.key_condition_expression("pk = :pk"),
            };
            let out = self.tally(Kind::Read, req.send().await)?;
            for item in out.items() {
                found.extend(page_events(item).into_iter().filter(|(id, doc)| {
                    q.after.as_ref().is_none_or(|a| id > a)
                        && (q.types.is_empty()
                            || doc["type"]
                                .as_str()
                                .is_some_and(|t| q.types.iter().any(|w| w == t)))
                }));
            }
            start = out.last_evaluated_key().cloned();
            if start.is_none() || found.len() > q.limit {
                break;
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let more = start.is_some() || found.len() > q.limit;
        found.truncate(q.limit);
        Ok((found, more))
    }
}

/// The pages of one queue's `events`: each its first event's id and a JSON array of at
/// most [`PAGE_BYTES`]. An event too large for a page alone (a job's result near the item
/// limit) is stored without its result, marked `result_omitted`; one still too large is
/// left out with a warning, so no job can wedge the stream.
fn pages(events: &[&Event]) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut current: Option<(String, Vec<u8>)> = None;
    for e in events {
        let Some(doc) = page_sized(e) else {
            tracing::warn!(event = %e.id, "an event too large to store was left out");
            continue;
        };
        if let Some((_, text)) = &current {
            if text.len() + 1 + doc.len() + 1 > PAGE_BYTES {
                out.extend(current.take());
            }
        }
        match &mut current {
            Some((_, text)) => {
                text.push(b',');
                text.extend_from_slice(&doc);
            }
            None => {
                let mut text = Vec::with_capacity(doc.len() + 2);
                text.push(b'[');
                text.extend_from_slice(&doc);
                current = Some((e.id.clone(), text));
            }
        }
    }
    out.extend(current);
    for (_, text) in &mut out {
        text.push(b']');
    }
    out
}

/// The JSON of `e` within a page's budget, if it can be made to fit.
fn page_sized(e: &Event) -> Option<Vec<u8>> {
    let fits = |doc: &Value| {
        serde_json::to_vec(doc)
            .ok()
            .filter(|text| text.len() + 2 <= PAGE_BYTES)
    };
    if let Some(text) = fits(&e.body) {
        return Some(text);
    }
    let mut slim = e.body.clone();
    let data = slim.get_mut("data")?.as_object_mut()?;
    data.remove("result")?;
    data.insert("result_omitted".into(), Value::Bool(true));
    fits(&slim)
}

/// The events of a page item, with their ids; a page that does not read is skipped with
/// a warning (its events are lost to readers, never to the jobs).
fn page_events(item: &crate::item::Item) -> Vec<(String, Value)> {
    let docs = item
        .get("events")
        .and_then(|v| v.as_b().ok())
        .and_then(|b| miniz_oxide::inflate::decompress_to_vec_with_limit(b.as_ref(), 16 << 20).ok())
        .and_then(|text| serde_json::from_slice::<Vec<Value>>(&text).ok());
    let Some(docs) = docs else {
        tracing::warn!(sk = ?item.get("sk"), "an event page does not read");
        return Vec::new();
    };
    docs.into_iter()
        .filter_map(|doc| Some((doc["id"].as_str()?.to_owned(), doc)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: usize, result_bytes: usize) -> Event {
        Event {
            id: format!("evt_{id:04}"),
            kind: ojs_core::event::EventKind::Completed,
            queue: "q".into(),
            body: serde_json::json!({"id": format!("evt_{id:04}"), "type": "job.completed",
                "data": {"job_id": "j", "result": "x".repeat(result_bytes)}}),
        }
    }

    fn read(page: &[u8]) -> Vec<Value> {
        serde_json::from_slice(page).unwrap_or_default()
    }

    #[test]
    fn pages_keep_every_event_in_order_within_the_byte_budget() {
        let events: Vec<Event> = (0..40).map(|i| event(i, 20_000)).collect();
        let refs: Vec<&Event> = events.iter().collect();
        let written = pages(&refs);
        assert!(written.len() >= 3, "{} pages", written.len());
        let mut seen = Vec::new();
        for (first, text) in &written {
            assert!(text.len() <= PAGE_BYTES, "{}", text.len());
            let docs = read(text);
            assert_eq!(docs[0]["id"].as_str(), Some(first.as_str()));
            seen.extend(
                docs.iter()
                    .map(|d| d["id"].as_str().unwrap_or_default().to_owned()),
            );
        }
        let want: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        assert_eq!(seen, want);
        // A page is as full as the budget allows: the next event would not have fitted.
        let first_len = written[0].1.len();
        assert!(first_len + 20_100 > PAGE_BYTES, "{first_len}");
    }

    #[test]
    fn an_event_too_large_for_a_page_is_stored_without_its_result() {
        let big = event(1, PAGE_BYTES);
        let small = event(2, 10);
        let written = pages(&[&small, &big, &small]);
        let docs: Vec<Value> = written.iter().flat_map(|(_, t)| read(t)).collect();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[1]["data"]["result_omitted"], true);
        assert!(docs[1]["data"].get("result").is_none());
        assert_eq!(docs[0]["data"]["result"], "x".repeat(10));
        assert!(written.iter().all(|(_, t)| t.len() <= PAGE_BYTES));
        assert!(pages(&[]).is_empty());
    }

    #[test]
    fn pages_start_early_enough_for_a_cursor() {
        let id = format!("evt_{}", uuid::Uuid::now_v7());
        let from = pages_from(&id).unwrap_or_default();
        assert!(from.starts_with("evt_") && from < id, "{from} {id}");
        // A page begun 5 s before the cursor's event is read, one begun 20 s before not.
        let at = |ms_before: u64| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64
                - ms_before;
            let ts = uuid::Timestamp::from_unix(
                uuid::NoContext,
                now / 1000,
                (now % 1000) as u32 * 1_000_000,
            );
            format!("evt_{}", uuid::Uuid::new_v7(ts))
        };
        assert!(at(5_000) >= from);
        assert!(at(20_000) < from);
        assert_eq!(pages_from("evt_not-a-uuid"), None);
        assert_eq!(pages_from("nope"), None);
    }
}
