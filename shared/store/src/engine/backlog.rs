//! Backlog metrics for alarms, printed by the scheduler after each sweep as CloudWatch
//! Embedded Metric Format lines (no API call):
//!
//! - `OldestReadyJobAge` (Seconds), per `Queue` and over all queues (no dimension): how
//!   long the job at the head of the queue's ready index has waited since it became
//!   ready (its PUSH, or the promotion or retry that made it available again: the time
//!   its ready entry carries). The head is the next job FETCH takes:
//!   highest priority first, then oldest, so for a queue whose jobs share one priority it
//!   is the oldest waiting job; with mixed priorities an older job of a lower priority is
//!   not seen (finding it would take one query per priority). Sharded queues report the
//!   oldest of their shards' heads. Printed only for queues with a ready job.
//! - `SweepFailures` and `SweepQueuesLeft` (Count, no dimension): services or queues the
//!   sweep could not finish, and queues it had no time for. Printed only when not 0.
//!
//! CloudWatch bills a custom metric for the hours it receives data ($0.30 a month for a
//! whole month), so nothing is printed for what is empty or zero: an idle stack pays for
//! no custom metric, a queue with waiting jobs for one (plus one shared by all queues).
//! The alarms read missing data as "not breaching". DynamoDB cost: one `Limit 1`
//! Query of the ready index per queue shard and sweep (0.5 RCU each).

use std::time::Duration;

use ojs_core::time::{self, Timestamp};
use ojs_core::QueueName;
use serde_json::{json, Value};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::s;
use crate::keys;
use crate::schema::READY_INDEX;
use crate::usage::Kind;
use crate::SweepReport;

/// Metric name of the per-queue head age.
pub const OLDEST_READY_JOB_AGE: &str = "OldestReadyJobAge";

/// The enqueue time carried by a ready-index sort key (`<priority>#<micros>#<id>`).
fn enqueued_at(ready_sk: &str) -> Option<Timestamp> {
    let micros: i64 = ready_sk.split('#').nth(1)?.parse().ok()?;
    time::from_micros(micros)
}

impl Engine {
    /// Per queue of `queues`, how long the head of its ready index has waited at `now`
    /// (the oldest head over its shards), or `None` when nothing is ready.
    pub async fn ready_head_ages(
        &self,
        queues: &[QueueName],
        now: Timestamp,
    ) -> Result<Vec<(QueueName, Option<Duration>)>, StoreError> {
        let mut out = Vec::with_capacity(queues.len());
        for queue in queues {
            let mut oldest: Option<Timestamp> = None;
            let lanes = self.lanes(std::slice::from_ref(queue)).await?;
            let shards = self.queue_shards();
            for (lane, shard) in lanes
                .iter()
                .flat_map(|lane| (0..shards).map(move |shard| (lane, shard)))
            {
                let page = self
                    .table
                    .query_index(&READY_INDEX)
                    .key_condition_expression("gsi1pk = :pk")
                    .expression_attribute_values(":pk", s(keys::ready_pk(lane, shard)))
                    .projection_expression("gsi1sk")
                    .limit(1)
                    .send()
                    .await;
                let page = self.table.tally(Kind::Read, page)?;
                let head = page
                    .items()
                    .first()
                    .and_then(|i| i.get("gsi1sk"))
                    .and_then(|v| v.as_s().ok())
                    .and_then(|sk| enqueued_at(sk));
                oldest = match (oldest, head) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            let age = oldest.map(|t| (now - t).to_std().unwrap_or(Duration::ZERO));
            out.push((queue.clone(), age));
        }
        Ok(out)
    }

    /// Prints the backlog and sweep metrics (module docs) when EMF metrics are on
    /// (`OJS_METRICS=emf`); returns the documents printed.
    pub async fn emit_sweep_metrics(
        &self,
        report: &SweepReport,
        now: Timestamp,
    ) -> Result<Vec<Value>, StoreError> {
        let Some(namespace) = self.config.metrics_namespace.clone() else {
            return Ok(Vec::new());
        };
        let queues = self.queue_names().await?;
        let ages = self.ready_head_ages(&queues, now).await?;
        let ts = now.timestamp_millis();
        let mut docs = age_documents(&namespace, &ages, ts);
        if report.failures + report.queues_left > 0 {
            docs.push(sweep_document(&namespace, report, ts));
        }
        for doc in &docs {
            println!("{doc}");
        }
        Ok(docs)
    }
}

/// One EMF document per queue with a ready job, with its head's age in seconds, published
/// per `Queue` and without dimension (the alarm reads the maximum over queues).
pub(crate) fn age_documents(
    namespace: &str,
    ages: &[(QueueName, Option<Duration>)],
    timestamp_ms: i64,
) -> Vec<Value> {
    ages.iter()
        .filter_map(|(queue, age)| age.map(|a| (queue, a)))
        .map(|(queue, age)| {
            let seconds = (age.as_secs_f64() * 1000.0).round() / 1000.0;
            json!({
                "_aws": {
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": namespace,
                        "Dimensions": [["Queue"], []],
                        "Metrics": [{"Name": OLDEST_READY_JOB_AGE, "Unit": "Seconds"}],
                    }],
                },
                "Queue": queue.as_str(),
                OLDEST_READY_JOB_AGE: seconds,
            })
        })
        .collect()
}

/// The sweep's failures and left-over queues, without dimension.
pub(crate) fn sweep_document(namespace: &str, report: &SweepReport, timestamp_ms: i64) -> Value {
    json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [[]],
                "Metrics": [
                    {"Name": "SweepFailures", "Unit": "Count"},
                    {"Name": "SweepQueuesLeft", "Unit": "Count"},
                ],
            }],
        },
        "SweepFailures": report.failures,
        "SweepQueuesLeft": report.queues_left,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::JobId;

    #[test]
    fn the_enqueue_time_is_read_back_from_a_ready_key() {
        let at = time::from_micros(1_700_000_123_456_789);
        let id = JobId::generate();
        let sk = at.map(|t| keys::ready_sk(-5, &t, &id));
        assert_eq!(sk.as_deref().and_then(enqueued_at), at);
        assert_eq!(enqueued_at("nonsense"), None);
        assert_eq!(enqueued_at("100#notanumber#x"), None);
    }

    #[test]
    fn age_documents_carry_one_queue_each_in_seconds() {
        let a = QueueName::parse("email");
        let b = QueueName::parse("idle");
        let (Ok(a), Ok(b)) = (a, b) else {
            panic!("queue names");
        };
        let docs = age_documents(
            "OJS/test",
            &[(a, Some(Duration::from_millis(90_500))), (b, None)],
            1_700_000_000_000,
        );
        assert_eq!(docs.len(), 1, "nothing for a queue with nothing ready");
        assert_eq!(docs[0]["Queue"], "email");
        assert_eq!(docs[0][OLDEST_READY_JOB_AGE], 90.5);
        let directive = &docs[0]["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(docs[0]["_aws"]["Timestamp"], 1_700_000_000_000_i64);
        assert_eq!(directive["Namespace"], "OJS/test");
        assert_eq!(directive["Dimensions"], json!([["Queue"], []]));
        assert_eq!(
            directive["Metrics"],
            json!([{"Name": "OldestReadyJobAge", "Unit": "Seconds"}])
        );
        // Every dimension and metric the directive names is a member of the document.
        for doc in &docs {
            for name in ["Queue", OLDEST_READY_JOB_AGE] {
                assert!(doc.get(name).is_some(), "{name} missing from {doc}");
            }
        }
    }

    #[test]
    fn the_sweep_document_counts_failures_and_left_over_queues() {
        let report = SweepReport {
            failures: 2,
            queues_left: 7,
            ..SweepReport::default()
        };
        let doc = sweep_document("OJS/test", &report, 5);
        assert_eq!(doc["SweepFailures"], 2);
        assert_eq!(doc["SweepQueuesLeft"], 7);
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([[]])
        );
    }
}
