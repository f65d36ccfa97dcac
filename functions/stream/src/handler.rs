//! One batch of the table's stream: its job changes applied together, and on failure the
//! batch reported back from its first record (partial batch response), so Lambda retries
//! it whole from there instead of skipping past it (the runs that landed are skipped
//! then: `Store::apply_changes`).

use ojs_push::{DeliveryQueue, Planner};
use ojs_store::{Change, Store};
use serde_json::{json, Value};

/// Applies a DynamoDB stream event's records (exactly once: a batch that comes again
/// skips what landed), then plans the deliveries they imply (push offers, webhook first
/// attempts) and hands them to the delivery queue, without waiting for any receiver.
/// Answers the partial batch response: a batch whose effects or deliveries could not be
/// handed over is reported from its first record, and comes again.
pub async fn apply_batch(
    store: &Store,
    planner: &Planner,
    queue: &DeliveryQueue,
    event: &Value,
) -> Value {
    let records = event["Records"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut changes = Vec::with_capacity(records.len());
    for record in records {
        match Change::from_lambda_record(record) {
            Ok(change) => changes.push(change),
            // Not a record DynamoDB would send: retrying it cannot help.
            Err(e) => tracing::error!(error = %e, "skipped an unreadable stream record"),
        }
    }
    let outcome = async {
        let applied = store
            .derived()
            .apply_changes(&changes)
            .await
            .map_err(|e| e.to_string())?;
        let deliveries = planner.plan(&changes).await.map_err(|e| e.to_string())?;
        let planned = deliveries.len();
        queue.send(deliveries).await?;
        Ok::<_, String>((applied, planned))
    };
    match outcome.await {
        Ok((applied, planned)) => {
            tracing::debug!(?applied, planned, "stream batch applied");
            json!({"batchItemFailures": []})
        }
        Err(e) => {
            let first = records
                .first()
                .and_then(|r| r["dynamodb"]["SequenceNumber"].as_str())
                .unwrap_or_default();
            tracing::warn!(error = %e, records = records.len(), "stream batch failed; Lambda will retry it");
            json!({"batchItemFailures": [{"itemIdentifier": first}]})
        }
    }
}
