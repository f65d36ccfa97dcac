//! Lifecycle events: small items in `EVT#<queue>`, sorted by their UUIDv7 id, kept for
//! the configured retention by TTL.

use aws_sdk_dynamodb::types::{PutRequest, ReturnConsumedCapacity, WriteRequest};
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

/// Most pages read per queue for one query, so a sparse filter cannot run unbounded.
const MAX_PAGES: usize = 10;

impl Store {
    /// Records events; failures are logged, never fail the transition that caused them
    /// (the job's own item is the source of truth).
    pub(crate) async fn emit(&self, events: &[Event]) {
        if let Some(namespace) = &self.config.metrics_namespace {
            let now_ms = time::now().timestamp_millis();
            for doc in crate::metrics::emf_documents(namespace, events, now_ms) {
                println!("{doc}");
            }
        }
        if !self.config.events || events.is_empty() {
            return;
        }
        let ttl = time::now().timestamp()
            + i64::try_from(self.config.event_retention.as_secs()).unwrap_or(86_400);
        for chunk in events.chunks(25) {
            let writes: Vec<WriteRequest> = chunk
                .iter()
                .filter_map(|e| {
                    let put = PutRequest::builder()
                        .item("pk", s(keys::events_pk(&e.queue)))
                        .item("sk", s(e.id.clone()))
                        .item("type", s(e.kind.as_str()))
                        .item("doc", s(e.body.to_string()))
                        .item("ttl", n(ttl))
                        .build()
                        .ok()?;
                    Some(WriteRequest::builder().put_request(put).build())
                })
                .collect();
            let out = self
                .client
                .batch_write_item()
                .request_items(self.table(), writes)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            match out {
                Ok(out) => {
                    self.usage.record(Kind::Write, out.consumed_capacity());
                    let left = out
                        .unprocessed_items()
                        .map_or(0, |m| m.values().map(Vec::len).sum());
                    if left > 0 {
                        tracing::warn!(
                            unprocessed = left,
                            "some lifecycle events were not recorded"
                        );
                    }
                }
                Err(e) => {
                    self.usage.record(Kind::Write, None);
                    tracing::warn!(error = %StoreError::from_sdk(e), "lifecycle events were not recorded");
                }
            }
        }
    }

    /// Events matching `q`, oldest first, with a cursor for the next page.
    pub async fn list_events(&self, q: &EventQuery) -> Result<(Vec<Value>, bool), StoreError> {
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
        let mut out_events = Vec::new();
        let mut start = None;
        for _ in 0..MAX_PAGES {
            let mut req = self
                .client
                .query()
                .table_name(self.table())
                .expression_attribute_values(":pk", s(keys::events_pk(queue)))
                .set_exclusive_start_key(start.take())
                .limit(100)
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            req = match &q.after {
                Some(after) => req
                    .key_condition_expression("pk = :pk AND sk > :after")
                    .expression_attribute_values(":after", s(after.clone())),
                None => req.key_condition_expression("pk = :pk"),
            };
            if !q.types.is_empty() {
                let names: Vec<String> = (0..q.types.len()).map(|i| format!(":t{i}")).collect();
                req = req
                    .filter_expression(format!("#type IN ({})", names.join(", ")))
                    .expression_attribute_names("#type", "type");
                for (p, t) in names.iter().zip(&q.types) {
                    req = req.expression_attribute_values(p, s(t.clone()));
                }
            }
            let out = req.send().await;
            let out = self.tally(Kind::Read, out)?;
            for item in out.items() {
                let sk = item.get("sk").and_then(|v| v.as_s().ok());
                let doc = item
                    .get("doc")
                    .and_then(|v| v.as_s().ok())
                    .and_then(|raw| serde_json::from_str::<Value>(raw).ok());
                if let (Some(sk), Some(doc)) = (sk, doc) {
                    out_events.push((sk.clone(), doc));
                }
            }
            start = out.last_evaluated_key().cloned();
            if start.is_none() || out_events.len() >= q.limit {
                break;
            }
        }
        Ok((out_events, start.is_some()))
    }
}
