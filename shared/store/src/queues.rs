//! Queue registry: one small item per queue in the `QUEUES` partition, written once per
//! queue per cold start, so listing queues is a Query, never a Scan.

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use ojs_core::time;

use crate::error::{is_condition_failure, StoreError};
use crate::item::{s, ts};
use crate::keys;
use crate::usage::Kind;
use crate::Store;

/// A queue as listed by `GET /ojs/v1/queues`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    /// Queue name.
    pub name: String,
    /// When the first job was pushed to it.
    pub created_at: String,
    /// Whether fetching is paused.
    pub paused: bool,
}

impl Store {
    /// Records that `queue` exists (idempotent; skipped when this instance already did).
    pub(crate) async fn register_queue(&self, queue: &str) -> Result<(), StoreError> {
        let known = self
            .known_queues
            .lock()
            .map(|set| set.contains(queue))
            .unwrap_or(false);
        if known {
            return Ok(());
        }
        let out = self
            .client
            .put_item()
            .table_name(self.table())
            .item("pk", s(keys::QUEUES_PK))
            .item("sk", s(keys::queue_sk(queue)))
            .item("name", s(queue))
            .item("created_at", ts(&time::now()))
            .condition_expression("attribute_not_exists(pk)")
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match out {
            Ok(out) => self.usage.record(Kind::Write, out.consumed_capacity()),
            Err(e) if is_condition_failure(&e) => self.usage.record(Kind::Write, None),
            Err(e) => {
                self.usage.record(Kind::Write, None);
                return Err(StoreError::from_sdk(e));
            }
        }
        if let Ok(mut set) = self.known_queues.lock() {
            set.insert(queue.to_owned());
        }
        Ok(())
    }

    /// Every known queue, sorted by name.
    pub async fn list_queues(&self) -> Result<Vec<QueueInfo>, StoreError> {
        let mut queues = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(self.table())
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(keys::QUEUES_PK))
                .set_exclusive_start_key(start)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| {
                    self.usage.record(Kind::Read, None);
                    StoreError::from_sdk(e)
                })?;
            self.usage.record(Kind::Read, out.consumed_capacity());
            for item in out.items() {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
                if let Some(name) = get("name") {
                    queues.push(QueueInfo {
                        name,
                        created_at: get("created_at").unwrap_or_default(),
                        paused: item
                            .get("paused")
                            .and_then(|v| v.as_bool().ok())
                            .copied()
                            .unwrap_or(false),
                    });
                }
            }
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(queues)
    }
}
