//! Reading a whole registry partition (queues, crons, workers, schemas): a paginated
//! Query of one partition key. These partitions hold one small item
//! per registration, so reading them whole is bounded by the number of registrations.

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};

use crate::dynamo::table::Table;
use crate::error::{is_condition_failure, StoreError};
use crate::item::{s, Item};
use crate::usage::Kind;

impl Table {
    /// Every item of partition `pk`, in sort-key order. `consistent` reads cost twice as
    /// much; registries a client just wrote to (crons, schemas) use them.
    pub(crate) async fn query_partition(
        &self,
        pk: &str,
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        self.query_partition_prefix(pk, None, consistent).await
    }

    /// Like [`Table::query_partition`], only the items whose sort key starts with
    /// `prefix` (the others are not read, so not paid for).
    pub(crate) async fn query_partition_prefix(
        &self,
        pk: &str,
        prefix: Option<&str>,
        consistent: bool,
    ) -> Result<Vec<Item>, StoreError> {
        let query = self
            .query_table()
            .expression_attribute_values(":pk", s(pk))
            .consistent_read(consistent);
        let query = match prefix {
            Some(p) => query
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":prefix", s(p)),
            None => query.key_condition_expression("pk = :pk"),
        };
        self.pages(query).items().await
    }
}

impl Table {
    /// One transaction of `items`, its capacity recorded; the SDK's error as it is, for the
    /// caller to read the cancellation reasons.
    pub(crate) async fn transact(
        &self,
        items: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
    ) -> Result<
        (),
        aws_sdk_dynamodb::error::SdkError<
            aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
            aws_sdk_dynamodb::config::http::HttpResponse,
        >,
    > {
        let out = self
            .transact_write()
            .set_transact_items(Some(items))
            .send()
            .await;
        self.metered(Kind::Write, out).map(|_| ())
    }

    /// One item by key, strongly consistent (read-your-writes after PUSH, ACK, PUT...).
    pub(crate) async fn read_item(&self, key: Item) -> Result<Option<Item>, StoreError> {
        let out = self.get_at(key).consistent_read(true).send().await;
        Ok(self.tally(Kind::Read, out)?.item)
    }

    /// Writes `item` whole, unconditionally (log lines, pending retries, snapshots: items
    /// only their writer owns).
    pub(crate) async fn put_plain(&self, item: Item) -> Result<(), StoreError> {
        let out = self.put_item().set_item(Some(item)).send().await;
        self.tally(Kind::Write, out).map(|_| ())
    }

    /// Writes `item` unless an item has its key (one conditional PutItem): `None` when it
    /// was written, else the item holding the key as the failed condition returned it
    /// (empty if it did not), for a caller to tell a retry of its own write, whose answer
    /// was lost, from another's item.
    pub(crate) async fn put_unless_taken(&self, item: Item) -> Result<Option<Item>, StoreError> {
        let out = self
            .put_item()
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match self.metered(Kind::Write, out) {
            Ok(_) => Ok(None),
            Err(e) if is_condition_failure(&e) => Ok(Some(match e.into_service_error() {
                PutItemError::ConditionalCheckFailedException(c) => c.item.unwrap_or_default(),
                _ => Item::new(),
            })),
            Err(e) => Err(StoreError::from_sdk(e)),
        }
    }

    /// Sends `update` (its key and expression set) on the condition that its item exists:
    /// [`StoreError::NotFound`] when it does not.
    pub(crate) async fn update_existing(
        &self,
        update: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    ) -> Result<(), StoreError> {
        let out = update
            .condition_expression("attribute_exists(pk)")
            .send()
            .await;
        self.tally_existing(Kind::Write, out).map(|_| ())
    }

    /// Sends `update` (its key, expression and a condition that its item exists set),
    /// asking for the item as written: [`StoreError::NotFound`] when the condition fails.
    pub(crate) async fn update_returning(
        &self,
        update: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    ) -> Result<Option<Item>, StoreError> {
        let out = update.return_values(ReturnValue::AllNew).send().await;
        Ok(self.tally_existing(Kind::Write, out)?.attributes)
    }

    /// Deletes the item at `key`: [`StoreError::NotFound`] when there is none.
    pub(crate) async fn delete_existing(&self, key: Item) -> Result<(), StoreError> {
        let out = self
            .delete_at(key)
            .condition_expression("attribute_exists(pk)")
            .send()
            .await;
        self.tally_existing(Kind::Write, out).map(|_| ())
    }

    /// Deletes an item and returns what it held (`None` when there was nothing).
    pub(crate) async fn delete_returning(&self, key: Item) -> Result<Option<Item>, StoreError> {
        let out = self
            .delete_at(key)
            .return_values(ReturnValue::AllOld)
            .send()
            .await;
        Ok(self
            .tally(Kind::Write, out)?
            .attributes
            .filter(|a| !a.is_empty()))
    }

    /// Every item of partition `pk` that `read` reads, in sort-key order; one that does
    /// not read (`what` names it) is skipped with a warning, so it cannot hide the others.
    pub(crate) async fn list_readable<T, E: std::fmt::Display>(
        &self,
        pk: &str,
        consistent: bool,
        read: impl Fn(&Item) -> Result<T, E>,
        what: &str,
    ) -> Result<Vec<T>, StoreError> {
        Ok(self
            .query_partition(pk, consistent)
            .await?
            .iter()
            .filter_map(|i| match read(i) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(error = %e, "skipped an unreadable {what}");
                    None
                }
            })
            .collect())
    }

    /// The item at `key` (strongly consistent); [`StoreError::NotFound`] when there is
    /// none.
    pub(crate) async fn read_existing(&self, key: Item) -> Result<Item, StoreError> {
        self.read_item(key).await?.ok_or_else(StoreError::missing)
    }

    /// The item at `key` (strongly consistent), as `read` reads it; `None` when there is
    /// none.
    pub(crate) async fn read_as<T>(
        &self,
        key: Item,
        read: impl Fn(&Item) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        self.read_item(key).await?.as_ref().map(read).transpose()
    }
}
