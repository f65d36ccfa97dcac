//! The timer batch handler: every record independently, reporting only the failed ones
//! back to SQS (partial batch response), so one bad record never re-runs the others.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use futures::future::join_all;
use ojs_store::Store;

/// Handles one SQS batch of timer messages.
pub async fn promote_due(store: &Store, event: SqsEvent) -> SqsBatchResponse {
    let outcomes = join_all(event.records.into_iter().map(|record| async move {
        let id = record.message_id.clone().unwrap_or_default();
        let result = match record.body.as_deref() {
            Some(body) => store.wakeups().handle_timer(body).await,
            None => Ok(()),
        };
        (id, result)
    }))
    .await;
    let mut response = SqsBatchResponse::default();
    for (id, result) in outcomes {
        if let Err(e) = result {
            // Reported failed, never dropped: SQS retries it and, after the queue's
            // maxReceiveCount, moves it to the dead letter queue where it can be read.
            // (A malformed message fails every time and so lands there for inspection.)
            if matches!(e, ojs_store::StoreError::Corrupt(_)) {
                tracing::error!(message_id = %id, error = %e, "malformed timer message");
            } else {
                tracing::warn!(message_id = %id, error = %e, "timer message failed; SQS will retry it");
            }
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}
