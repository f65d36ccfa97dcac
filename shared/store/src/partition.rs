//! Reading a whole registry partition (queues, crons, workers, schemas): a paginated
//! Query of one partition key. These partitions hold one small item
//! per registration, so reading them whole is bounded by the number of registrations.

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;

use crate::error::StoreError;
use crate::item::{s, Item};
use crate::usage::Kind;
use crate::Store;

impl Store {
    /// Every item of partition `pk`, in sort-key order. `consistent` reads cost twice as
    /// much; registries a client just wrote to (crons, schemas) use them.
    pub(crate) async fn query_partition(
        &self,
        pk: &str,
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(self.table())
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(pk))
                .consistent_read(consistent)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            let out = self.tally(Kind::Read, out)?;
            items.extend(out.items().iter().cloned());
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(items);
            }
        }
    }
}
