//! One SQS batch of planned deliveries: all made at once, each independently, and only
//! the ones that could not be started reported back (partial batch response), so SQS
//! retries those and, after the queue's `maxReceiveCount`, moves them to the delivery
//! dead-letter queue (alarmed).

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use futures::future::join_all;
use ojs_push::{Deliverer, Delivery};

/// Makes the deliveries of one SQS batch.
pub async fn deliver(deliverer: &Deliverer, event: SqsEvent) -> SqsBatchResponse {
    let outcomes = join_all(event.records.into_iter().map(|record| async move {
        let id = record.message_id.clone().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or_default();
        let result = match Delivery::from_message(body) {
            Ok(delivery) => deliverer
                .deliver(&delivery)
                .await
                .map_err(|e| e.to_string()),
            // Retrying cannot help; it fails every time and lands in the dead-letter
            // queue, where it can be read.
            Err(e) => Err(format!("malformed delivery message: {e}")),
        };
        (id, result)
    }))
    .await;
    let mut response = SqsBatchResponse::default();
    for (id, result) in outcomes {
        if let Err(e) = result {
            tracing::warn!(message_id = %id, error = %e, "delivery not made; SQS will retry it");
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}
