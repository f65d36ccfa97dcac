//! One batch of the table's stream: its job changes applied together, and on failure the
//! batch reported back from its first record (partial batch response), so Lambda retries
//! it (bisecting it if it keeps failing) instead of skipping past it.

use ojs_push::{Dispatcher, WebhookDispatcher};
use ojs_store::{Change, Store};
use serde_json::{json, Value};

/// Applies a DynamoDB stream event's records, then delivers the jobs they made available
/// to their push endpoints and their events to the webhook subscriptions taking them (all
/// at once, waited for: Lambda freezes the instance once the handler returns); answers the
/// partial batch response. A delivery's outcome never fails the batch: an undelivered job
/// stays available, or its lease ends and it is retried; a failed webhook attempt is
/// recorded for the scheduler's redrive.
pub async fn apply_batch(
    store: &Store,
    push: &Dispatcher,
    webhooks: &WebhookDispatcher,
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
    match store.apply_changes(&changes).await {
        Ok(applied) => {
            let (pushed, hooked) = futures::join!(
                push.dispatch_changes(&changes),
                webhooks.deliver_changes(&changes)
            );
            tracing::debug!(?applied, pushed, hooked, "stream batch applied");
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
