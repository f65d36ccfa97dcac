//! The events API over what the change stream stored (`shared/store/src/derived/events.rs`):
//! events are listed in the order they were stored, a cursor is a position in that order,
//! and an event's id is the same however often its change is applied.

use ojs_core::job::NewJob;
use ojs_core::{time, Job};
use ojs_store::{Change, EventQuery, Store};
use ojs_tests::fresh_store;
use serde_json::{json, Value};

fn job_at(queue: &str, at: time::Timestamp) -> anyhow::Result<Job> {
    let new = NewJob::from_json(json!({"type": "ev.job", "args": [], "options": {"queue": queue}}))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(Job::enqueue(new, at))
}

async fn listed(
    store: &Store,
    queue: &str,
    after: Option<&str>,
) -> anyhow::Result<(Vec<Value>, Option<String>)> {
    let page = store
        .derived()
        .list_events(&EventQuery {
            queues: vec![queue.to_owned()],
            after: after.map(str::to_owned),
            limit: 100,
            ..EventQuery::default()
        })
        .await?;
    Ok((page.events, page.cursor))
}

fn ids(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect()
}

/// A stream batch that comes late (a retried or slow one) stores events whose transitions
/// happened before events already listed: a reader that goes on from its cursor, or from
/// the last event's id, still gets them. Applied again, a batch's events keep their ids,
/// and one answer lists each once.
#[tokio::test]
async fn an_event_stored_late_still_follows_a_cursor_taken_before_it() -> anyhow::Result<()> {
    let store = fresh_store().await?;
    let queue = "ev-late";
    let now = time::now();
    let first = job_at(queue, now - chrono::Duration::seconds(2))?;
    let second = job_at(queue, now)?;

    // The later transition is stored first.
    store
        .derived()
        .apply_changes(&[Change::between(None, Some(&second))])
        .await?;
    let (events, cursor) = listed(&store, queue, None).await?;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["job_id"], second.id.to_string());
    let second_id = ids(&events)[0].clone();
    let cursor = cursor.ok_or_else(|| anyhow::anyhow!("no cursor"))?;

    // Then the earlier one, whose id sorts before the one already read.
    store
        .derived()
        .apply_changes(&[Change::between(None, Some(&first))])
        .await?;
    let (after_cursor, next) = listed(&store, queue, Some(&cursor)).await?;
    assert_eq!(after_cursor.len(), 1, "{after_cursor:?}");
    assert_eq!(after_cursor[0]["data"]["job_id"], first.id.to_string());
    let first_id = ids(&after_cursor)[0].clone();
    assert!(first_id < second_id);
    let (after_id, _) = listed(&store, queue, Some(&second_id)).await?;
    assert_eq!(ids(&after_id), std::slice::from_ref(&first_id));
    // Nothing after the last one.
    let next = next.ok_or_else(|| anyhow::anyhow!("no cursor"))?;
    assert!(listed(&store, queue, Some(&next)).await?.0.is_empty());

    // The first batch delivered again stores its event again, under the same id.
    store
        .derived()
        .apply_changes(&[Change::between(None, Some(&first))])
        .await?;
    let (again, _) = listed(&store, queue, Some(&next)).await?;
    assert_eq!(ids(&again), std::slice::from_ref(&first_id));
    // One answer lists it once, where it was first stored.
    let (all, _) = listed(&store, queue, None).await?;
    assert_eq!(ids(&all), [second_id.clone(), first_id.clone()]);
    // A time made into an id (the admin's "since": its first 48 bits, the rest zero)
    // selects the events of later transitions, wherever they were stored.
    let since = u64::try_from((now - chrono::Duration::seconds(1)).timestamp_millis())?;
    let hex = format!("{since:012x}");
    let since = format!("evt_{}-{}-0000-0000-000000000000", &hex[..8], &hex[8..]);
    let (recent, _) = listed(&store, queue, Some(&since)).await?;
    assert_eq!(ids(&recent), [second_id]);
    Ok(())
}
