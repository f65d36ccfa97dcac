//! Lifecycle events, stored by the change stream consumer: each batch of records writes
//! one page item per queue in `EVT#<queue>` holding its events deflated, kept for the
//! configured retention by TTL. A job's three lifecycle events cost a fraction of a write
//! unit, and the queue's partition takes one write per batch, not one per event.
//!
//! A page's sort key is `evt_` and a UUIDv7 taken when it is stored, so pages sort in the
//! order they were stored. Events are listed in that order, and a cursor is a position
//! in it (`<page key>.<index>`): an event's own id carries the time of its transition
//! ([`ojs_core::event::event_id`]), and a stream batch that comes late stores events
//! whose ids are older than some already listed, which a cursor by id would skip.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use ojs_core::event::Event;
use ojs_core::time;
use serde_json::Value;

use crate::derived::Derived;
use crate::error::StoreError;
use crate::item::{n, s};
use crate::keys;

/// A query of `GET /ojs/v1/events`.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    /// Only events of these types (all when empty).
    pub types: Vec<String>,
    /// Only events of these queues (every known queue when empty).
    pub queues: Vec<String>,
    /// Only events stored after this one: a cursor an earlier answer gave
    /// ([`EventPage::cursor`]) or an event's id. An id not found among the events stored
    /// around its time is compared as an id (events of a later time).
    pub after: Option<String>,
    /// Most events returned.
    pub limit: usize,
    /// Only events of this tenant's jobs (`data.tenant_id`; none: the default tenant's).
    pub tenant: ojs_core::tenant::Scope,
}

/// The answer to an [`EventQuery`].
#[derive(Debug, Clone, Default)]
pub struct EventPage {
    /// The events, in the order they were stored.
    pub events: Vec<Value>,
    /// Where the last of them sits, for the next query's `after`.
    pub cursor: Option<String>,
    /// Whether more events matched than were returned.
    pub has_more: bool,
}

/// Where an event sits in storage: its page's sort key and its index in the page.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    page: String,
    index: usize,
}

impl Position {
    /// `<page key>.<index>`.
    fn cursor(&self) -> String {
        format!("{}.{}", self.page, self.index)
    }

    /// A cursor made by [`Position::cursor`]; `None` for anything else (an event id).
    fn parse(cursor: &str) -> Option<Self> {
        let (page, index) = cursor.rsplit_once('.')?;
        uuid::Uuid::parse_str(page.strip_prefix("evt_")?).ok()?;
        Some(Self {
            page: page.to_owned(),
            index: index.parse().ok()?,
        })
    }
}

/// What a query's `after` selects.
#[derive(Debug, Clone, PartialEq)]
enum After {
    /// Events stored after this position.
    Position(Position),
    /// Events whose id sorts after this one (an id not found, or a time made into one).
    Id(String),
}

impl After {
    /// The first page key that can hold a selected event.
    fn first_page(&self) -> Option<String> {
        match self {
            After::Position(p) => Some(p.page.clone()),
            After::Id(id) => pages_from(id),
        }
    }

    fn selects(&self, at: &Position, id: &str) -> bool {
        match self {
            After::Position(p) => at > p,
            After::Id(after) => id > after.as_str(),
        }
    }
}

/// Most page items read per queue for one query, so a sparse filter cannot run unbounded.
const MAX_PAGES: usize = 20;

/// Most bytes of event JSON in one page item before deflate (which never grows it by more
/// than a few bytes per 64 KiB), so a page stays below DynamoDB's 400 KB item limit
/// whatever the jobs' results.
pub(crate) const PAGE_BYTES: usize = 300 * 1024;

/// How far before an event's time its page may have been stored: none was stored before
/// its transition, so this only allows for clocks that disagree.
const PAGE_SPAN_MS: i64 = 10_000;

/// The page sort key below which no page holds the event `after`, nor one of a later
/// time.
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

impl Derived {
    /// Prints the CloudWatch EMF lines of `events` when metrics are on.
    pub(crate) fn print_metrics(&self, events: &[Event]) {
        if let Some(namespace) = &self.engine.config.metrics_namespace {
            let now_ms = time::now().timestamp_millis();
            for doc in crate::metrics::emf_documents(namespace, events, now_ms) {
                println!("{doc}");
            }
        }
    }

    /// The page items of `events` (in stream order): one `Put` action per queue and
    /// [`PAGE_BYTES`], with each page's stored size, for the stream batch's transaction.
    /// A page's key is taken now, so pages sort in the order they were stored.
    pub(crate) fn event_puts(
        &self,
        events: &[Event],
    ) -> Result<Vec<(TransactWriteItem, usize)>, StoreError> {
        if !self.engine.config.events || events.is_empty() {
            return Ok(Vec::new());
        }
        let ttl = time::now().timestamp()
            + i64::try_from(self.engine.config.event_retention.as_secs()).unwrap_or(86_400);
        let mut per_queue: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
        for e in events {
            per_queue.entry(e.queue.as_str()).or_default().push(e);
        }
        let mut puts = Vec::new();
        for (queue, events) in per_queue {
            for text in pages(&events) {
                let packed = miniz_oxide::deflate::compress_to_vec(&text, 6);
                let bytes = packed.len();
                let put = Put::builder()
                    .table_name(self.engine.table())
                    .item("pk", s(keys::events_pk(queue)))
                    .item("sk", s(format!("evt_{}", uuid::Uuid::now_v7())))
                    .item("events", AttributeValue::B(Blob::new(packed)))
                    .item("ttl", n(ttl))
                    .build()
                    .map_err(|e| StoreError::Invalid(format!("event page: {e}")))?;
                puts.push((TransactWriteItem::builder().put(put).build(), bytes));
            }
        }
        Ok(puts)
    }

    /// Events matching `q`, in the order they were stored, with a cursor for the next
    /// page.
    pub async fn list_events(&self, q: &EventQuery) -> Result<EventPage, StoreError> {
        self.catch_up().await;
        let queues = if q.queues.is_empty() {
            self.engine
                .list_queues()
                .await?
                .into_iter()
                .map(|qi| qi.name)
                .collect()
        } else {
            q.queues.clone()
        };
        let after = match q.after.as_deref() {
            None => None,
            Some(cursor) => Some(match Position::parse(cursor) {
                Some(at) => After::Position(at),
                None => match self.locate_event(cursor, &queues).await? {
                    Some(at) => After::Position(at),
                    None => After::Id(cursor.to_owned()),
                },
            }),
        };
        let mut found: Vec<(Position, Value)> = Vec::new();
        let mut has_more = false;
        for queue in &queues {
            let (events, more) = self.queue_events(queue, after.as_ref(), q).await?;
            has_more |= more;
            found.extend(events);
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        // A retried stream batch stores its events again under the same ids: one answer
        // lists each once, at its first position (a copy stored after a cursor a client
        // already holds still comes back, as any at-least-once consumer expects).
        let mut seen = std::collections::HashSet::new();
        found.retain(|(_, doc)| {
            doc["id"]
                .as_str()
                .is_none_or(|id| seen.insert(id.to_owned()))
        });
        if found.len() > q.limit {
            found.truncate(q.limit);
            has_more = true;
        }
        Ok(EventPage {
            cursor: found.last().map(|(at, _)| at.cursor()),
            events: found.into_iter().map(|(_, v)| v).collect(),
            has_more,
        })
    }

    /// Where the event `id` was stored, if it is among the events of `queues` stored
    /// since shortly before its time. Costs the reads of the pages before it.
    async fn locate_event(
        &self,
        id: &str,
        queues: &[String],
    ) -> Result<Option<Position>, StoreError> {
        // Only a real event id (a UUIDv7) can be found; a time made into an id (the
        // admin's "since", version 0) is compared as one without a search.
        let is_event = id
            .strip_prefix("evt_")
            .and_then(|u| uuid::Uuid::parse_str(u).ok())
            .is_some_and(|u| u.get_version_num() == 7);
        let Some(from) = pages_from(id).filter(|_| is_event) else {
            return Ok(None);
        };
        for queue in queues {
            let mut pages = self
                .engine
                .table
                .pages(self.events_query(queue, Some(&from)));
            for _ in 0..MAX_PAGES {
                let Some(out) = pages.next().await? else {
                    break;
                };
                for item in out.items() {
                    let page = page_key(item);
                    if let Some(index) = page_events(item).iter().position(|(e, _)| e == id) {
                        return Ok(Some(Position { page, index }));
                    }
                }
            }
        }
        Ok(None)
    }

    /// The page items of `queue`, from the key `from` on, four to a page.
    fn events_query(&self, queue: &str, from: Option<&String>) -> QueryFluentBuilder {
        let req = self
            .engine
            .table
            .query_table()
            .expression_attribute_values(":pk", s(keys::events_pk(queue)))
            .limit(4);
        match from {
            Some(from) => req
                .key_condition_expression("pk = :pk AND sk >= :from")
                .expression_attribute_values(":from", s(from.clone())),
            None => req.key_condition_expression("pk = :pk"),
        }
    }

    async fn queue_events(
        &self,
        queue: &str,
        after: Option<&After>,
        q: &EventQuery,
    ) -> Result<(Vec<(Position, Value)>, bool), StoreError> {
        let mut found = Vec::new();
        let from = after.and_then(After::first_page);
        let mut pages = self
            .engine
            .table
            .pages(self.events_query(queue, from.as_ref()));
        // Whether the last page read has more after it.
        let mut unread = false;
        for _ in 0..MAX_PAGES {
            let Some(out) = pages.next().await? else {
                break;
            };
            for item in out.items() {
                let page = page_key(item);
                for (index, (id, doc)) in page_events(item).into_iter().enumerate() {
                    let at = Position {
                        page: page.clone(),
                        index,
                    };
                    let typed = q.types.is_empty()
                        || doc["type"]
                            .as_str()
                            .is_some_and(|t| q.types.iter().any(|w| w == t));
                    let tenant = doc["data"][ojs_core::tenant::META_KEY].as_str();
                    let tenant = tenant.and_then(|t| ojs_core::tenant::TenantId::parse(t).ok());
                    let owned = q.tenant.sees(tenant.flatten().as_ref());
                    if typed && owned && after.is_none_or(|a| a.selects(&at, &id)) {
                        found.push((at, doc));
                    }
                }
            }
            unread = out.last_evaluated_key().is_some();
            if !unread || found.len() > q.limit {
                break;
            }
        }
        let more = unread || found.len() > q.limit;
        found.truncate(q.limit);
        Ok((found, more))
    }
}

/// A page item's sort key.
fn page_key(item: &crate::item::Item) -> String {
    item.get("sk")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

/// The pages of one queue's `events`: each a JSON array of at most [`PAGE_BYTES`]. An
/// event too large for a page alone (a job's result near the item limit) is stored
/// without its result, marked `result_omitted`; one still too large is left out with a
/// warning, so no job can wedge the stream.
fn pages(events: &[&Event]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut current: Option<Vec<u8>> = None;
    for e in events {
        let Some(doc) = page_sized(e) else {
            tracing::warn!(event = %e.id, "an event too large to store was left out");
            continue;
        };
        if let Some(text) = &current {
            if text.len() + 1 + doc.len() + 1 > PAGE_BYTES {
                out.extend(current.take());
            }
        }
        match &mut current {
            Some(text) => {
                text.push(b',');
                text.extend_from_slice(&doc);
            }
            None => {
                let mut text = Vec::with_capacity(doc.len() + 2);
                text.push(b'[');
                text.extend_from_slice(&doc);
                current = Some(text);
            }
        }
    }
    out.extend(current);
    for text in &mut out {
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
            tenant: None,
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
        for text in &written {
            assert!(text.len() <= PAGE_BYTES, "{}", text.len());
            let docs = read(text);
            seen.extend(
                docs.iter()
                    .map(|d| d["id"].as_str().unwrap_or_default().to_owned()),
            );
        }
        let want: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        assert_eq!(seen, want);
        // A page is as full as the budget allows: the next event would not have fitted.
        let first_len = written[0].len();
        assert!(first_len + 20_100 > PAGE_BYTES, "{first_len}");
    }

    #[test]
    fn an_event_too_large_for_a_page_is_stored_without_its_result() {
        let big = event(1, PAGE_BYTES);
        let small = event(2, 10);
        let written = pages(&[&small, &big, &small]);
        let docs: Vec<Value> = written.iter().flat_map(|t| read(t)).collect();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[1]["data"]["result_omitted"], true);
        assert!(docs[1]["data"].get("result").is_none());
        assert_eq!(docs[0]["data"]["result"], "x".repeat(10));
        assert!(written.iter().all(|t| t.len() <= PAGE_BYTES));
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
        // To the second, ten seconds before the event's millisecond.
        let ms: u64 = 1_700_000_000_789;
        let id = format!(
            "evt_{}",
            uuid::Builder::from_unix_timestamp_millis(ms, &[7; 10]).into_uuid()
        );
        let hex = format!("{:012x}", (ms - 10_000) / 1000 * 1000);
        assert_eq!(
            pages_from(&id),
            Some(format!("evt_{}-{}", &hex[..8], &hex[8..]))
        );
        assert_eq!(pages_from("nope"), None);
    }

    #[test]
    fn a_cursor_is_a_position_and_reads_back_as_one() {
        let page = format!("evt_{}", uuid::Uuid::now_v7());
        let at = Position {
            page: page.clone(),
            index: 12,
        };
        assert_eq!(at.cursor(), format!("{page}.12"));
        assert_eq!(Position::parse(&at.cursor()), Some(at));
        // An event id, a time made into an id and junk are not positions.
        assert_eq!(Position::parse(&page), None);
        assert_eq!(Position::parse("evt_nope.3"), None);
        assert_eq!(Position::parse(&format!("{page}.x")), None);
        assert_eq!(
            Position::parse(&format!("job_{}.3", uuid::Uuid::now_v7())),
            None
        );
    }

    #[test]
    fn after_a_position_comes_what_was_stored_later_whatever_its_id() {
        let early = format!("evt_{}", uuid::Uuid::now_v7());
        let late = format!("evt_{}", uuid::Uuid::now_v7());
        let at = |page: &str, index| Position {
            page: page.to_owned(),
            index,
        };
        let after = After::Position(at(&early, 1));
        assert!(!after.selects(&at(&early, 0), "evt_9"));
        assert!(!after.selects(&at(&early, 1), "evt_9"));
        assert!(after.selects(&at(&early, 2), "evt_0"));
        assert!(after.selects(&at(&late, 0), "evt_0"));
        assert_eq!(after.first_page(), Some(early.clone()));
        // An id not found is compared as an id, from pages stored shortly before it.
        let by_id = After::Id(late.clone());
        assert!(by_id.selects(&at(&early, 0), &format!("{late}z")));
        assert!(!by_id.selects(&at(&late, 5), &early));
        assert!(!by_id.selects(&at(&late, 5), &late));
        assert_eq!(by_id.first_page(), pages_from(&late));
    }
}
