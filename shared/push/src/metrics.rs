//! Webhook metrics (ojs-webhooks.md §11.2) in CloudWatch's Embedded Metric Format: one
//! JSON line on stdout per attempt, which CloudWatch Logs turns into metrics when
//! `OJS_METRICS=emf` (the namespace of the job metrics). No API call, no latency.

use ojs_core::webhook::Outcome;
use serde_json::{json, Map, Value};

/// Attempts, by `EventType` and `Status` (`success`, `failed`, `dead`).
pub const DELIVERY_COUNT: &str = "ojs.webhook.delivery.count";
/// The HTTP request's duration, by `EventType` and `SubscriptionId`.
pub const DELIVERY_DURATION: &str = "ojs.webhook.delivery.duration_ms";
/// Retries before a success (the attempt number less one), by `EventType`.
pub const RETRY_COUNT: &str = "ojs.webhook.delivery.retry_count";
/// Deliveries given up on, by `EventType` and `SubscriptionId`, and in all (what the
/// template's alarm watches).
pub const DEAD_COUNT: &str = "ojs.webhook.dead_delivery.count";
/// Active subscriptions, seen by a batch that had events to deliver.
pub const SUBSCRIPTION_COUNT: &str = "ojs.webhook.subscription.count";

/// One attempt's outcome, as the metrics label it.
fn status(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Delivered => "success",
        Outcome::Retry => "failed",
        Outcome::Dead => "dead",
    }
}

/// One attempt of a delivery, as measured.
pub struct Attempt<'a> {
    /// The event's type, e.g. `job.completed`.
    pub event_type: &'a str,
    /// The subscription delivered to.
    pub subscription_id: &'a str,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// What came of it.
    pub outcome: Outcome,
    /// The HTTP request's duration.
    pub duration_ms: u64,
}

/// The EMF document of one attempt, stamped `timestamp_ms`.
pub fn attempt_document(namespace: &str, a: &Attempt<'_>, timestamp_ms: i64) -> Value {
    let mut directives = vec![
        json!({"Namespace": namespace, "Dimensions": [["EventType", "Status"]],
               "Metrics": [{"Name": DELIVERY_COUNT, "Unit": "Count"}]}),
    ];
    let mut doc = Map::new();
    doc.insert("EventType".into(), a.event_type.into());
    doc.insert("Status".into(), status(a.outcome).into());
    doc.insert("SubscriptionId".into(), a.subscription_id.into());
    doc.insert(DELIVERY_COUNT.into(), 1.into());
    doc.insert(DELIVERY_DURATION.into(), a.duration_ms.into());
    match a.outcome {
        Outcome::Delivered => {
            directives.push(
                json!({"Namespace": namespace, "Dimensions": [["EventType"]],
                "Metrics": [{"Name": RETRY_COUNT, "Unit": "Count"}]}),
            );
            doc.insert(RETRY_COUNT.into(), a.attempt.saturating_sub(1).into());
        }
        Outcome::Dead => {
            directives.push(json!({"Namespace": namespace,
                "Dimensions": [["EventType", "SubscriptionId"], []],
                "Metrics": [{"Name": DEAD_COUNT, "Unit": "Count"}]}));
            doc.insert(DEAD_COUNT.into(), 1.into());
        }
        Outcome::Retry => {}
    }
    directives.push(
        json!({"Namespace": namespace, "Dimensions": [["EventType", "SubscriptionId"]],
        "Metrics": [{"Name": DELIVERY_DURATION, "Unit": "Milliseconds"}]}),
    );
    doc.insert(
        "_aws".into(),
        json!({"Timestamp": timestamp_ms, "CloudWatchMetrics": directives}),
    );
    Value::Object(doc)
}

/// The EMF document of the active subscriptions' count.
pub fn subscriptions_document(namespace: &str, active: usize, timestamp_ms: i64) -> Value {
    json!({
        "_aws": {"Timestamp": timestamp_ms, "CloudWatchMetrics": [{
            "Namespace": namespace, "Dimensions": [[]],
            "Metrics": [{"Name": SUBSCRIPTION_COUNT, "Unit": "Count"}]}]},
        SUBSCRIPTION_COUNT: active,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric a document declares, with the dimension sets it is declared under,
    /// checked to have its value and its dimensions' values in the document (what
    /// CloudWatch needs to extract it).
    fn declared(doc: &Value) -> Vec<(String, Vec<Vec<String>>)> {
        let mut out = Vec::new();
        for d in doc["_aws"]["CloudWatchMetrics"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let dims: Vec<Vec<String>> =
                serde_json::from_value(d["Dimensions"].clone()).unwrap_or_default();
            for set in &dims {
                for dim in set {
                    assert!(doc[dim].is_string(), "{dim} missing: {doc}");
                }
            }
            for m in d["Metrics"].as_array().cloned().unwrap_or_default() {
                let name = m["Name"].as_str().unwrap_or_default().to_owned();
                assert!(doc[&name].is_number(), "{name} missing: {doc}");
                out.push((name, dims.clone()));
            }
        }
        out.sort();
        out
    }

    fn attempt(outcome: Outcome, attempt: u32) -> Value {
        attempt_document(
            "OJS",
            &Attempt {
                event_type: "job.completed",
                subscription_id: "sub_1",
                attempt,
                outcome,
                duration_ms: 42,
            },
            7,
        )
    }

    fn dims(sets: &[&[&str]]) -> Vec<Vec<String>> {
        sets.iter()
            .map(|s| s.iter().map(|d| (*d).to_owned()).collect())
            .collect()
    }

    #[test]
    fn a_success_counts_and_tells_how_many_retries_it_took() {
        let doc = attempt(Outcome::Delivered, 3);
        assert_eq!(doc["Status"], "success");
        assert_eq!(doc[RETRY_COUNT], 2);
        assert_eq!(doc[DELIVERY_COUNT], 1);
        assert_eq!(doc[DELIVERY_DURATION], 42);
        assert_eq!(doc["_aws"]["Timestamp"], 7);
        assert_eq!(
            declared(&doc),
            [
                (DELIVERY_COUNT.to_owned(), dims(&[&["EventType", "Status"]])),
                (
                    DELIVERY_DURATION.to_owned(),
                    dims(&[&["EventType", "SubscriptionId"]])
                ),
                (RETRY_COUNT.to_owned(), dims(&[&["EventType"]])),
            ]
        );
    }

    #[test]
    fn a_failure_and_a_dead_delivery_are_labelled_and_a_dead_one_counted() {
        let failed = attempt(Outcome::Retry, 1);
        assert_eq!(failed["Status"], "failed");
        assert_eq!(
            declared(&failed)
                .into_iter()
                .map(|(n, _)| n)
                .collect::<Vec<_>>(),
            [DELIVERY_COUNT, DELIVERY_DURATION]
        );
        let dead = attempt(Outcome::Dead, 8);
        assert_eq!(dead["Status"], "dead");
        assert_eq!(dead[DEAD_COUNT], 1);
        assert!(dead.get(RETRY_COUNT).is_none());
        assert!(declared(&dead).contains(&(
            DEAD_COUNT.to_owned(),
            dims(&[&["EventType", "SubscriptionId"], &[]])
        )));
    }

    #[test]
    fn the_subscription_gauge_has_no_dimensions() {
        let doc = subscriptions_document("OJS", 4, 9);
        assert_eq!(doc[SUBSCRIPTION_COUNT], 4);
        assert_eq!(
            declared(&doc),
            [(SUBSCRIPTION_COUNT.to_owned(), vec![Vec::<String>::new()])]
        );
    }
}
