//! CloudWatch metrics in the Embedded Metric Format: one JSON line on stdout per batch
//! of lifecycle events, counted per queue (`JobsEnqueued`, `JobsCompleted`, ...).
//! CloudWatch Logs turns the lines into metrics; no API call, no extra latency.

use std::collections::BTreeMap;

use ojs_core::event::{Event, EventKind};
use serde_json::{json, Map, Value};

/// The metric counting events of `kind`.
fn metric_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Enqueued => "JobsEnqueued",
        EventKind::Scheduled => "JobsScheduled",
        EventKind::Started => "JobsStarted",
        EventKind::Completed => "JobsCompleted",
        EventKind::Failed => "JobsFailed",
        EventKind::Retrying => "JobsRetried",
        EventKind::Discarded => "JobsDiscarded",
        EventKind::Cancelled => "JobsCancelled",
    }
}

/// The EMF documents (one per queue) counting `events`, stamped `timestamp_ms`.
pub(crate) fn emf_documents(namespace: &str, events: &[Event], timestamp_ms: i64) -> Vec<Value> {
    let mut per_queue: BTreeMap<&str, BTreeMap<&'static str, u64>> = BTreeMap::new();
    for e in events {
        *per_queue
            .entry(e.queue.as_str())
            .or_default()
            .entry(metric_name(e.kind))
            .or_default() += 1;
    }
    per_queue
        .into_iter()
        .map(|(queue, counts)| {
            let metrics: Vec<Value> = counts
                .keys()
                .map(|name| json!({"Name": name, "Unit": "Count"}))
                .collect();
            let mut doc = Map::new();
            doc.insert(
                "_aws".into(),
                json!({
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": namespace,
                        "Dimensions": [["Queue"]],
                        "Metrics": metrics,
                    }],
                }),
            );
            doc.insert("Queue".into(), queue.into());
            for (name, n) in counts {
                doc.insert(name.into(), n.into());
            }
            Value::Object(doc)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, queue: &str) -> Event {
        Event {
            id: "evt_x".into(),
            kind,
            queue: queue.into(),
            tenant: None,
            body: Value::Null,
        }
    }

    #[test]
    fn counts_are_grouped_per_queue_and_kind() {
        let docs = emf_documents(
            "OJS",
            &[
                event(EventKind::Enqueued, "a"),
                event(EventKind::Enqueued, "a"),
                event(EventKind::Completed, "b"),
            ],
            1_700_000_000_000,
        );
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["Queue"], "a");
        assert_eq!(docs[0]["JobsEnqueued"], 2);
        assert_eq!(docs[0]["_aws"]["Timestamp"], 1_700_000_000_000_i64);
        let directive = &docs[0]["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "OJS");
        assert_eq!(directive["Dimensions"], json!([["Queue"]]));
        assert_eq!(
            directive["Metrics"],
            json!([{"Name": "JobsEnqueued", "Unit": "Count"}])
        );
        assert_eq!(docs[1]["JobsCompleted"], 1);
        assert!(docs[1].get("JobsEnqueued").is_none());
    }

    #[test]
    fn no_events_no_documents() {
        assert!(emf_documents("OJS", &[], 0).is_empty());
    }
}
