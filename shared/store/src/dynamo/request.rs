//! Requests on the table, set up the one way the store sends them: every one names the
//! table and asks for its consumed capacity, and every answer is tallied
//! ([`Table::tally`], [`Table::metered`]) so that [`Table::usage`] counts each call.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder;
use aws_sdk_dynamodb::operation::get_item::builders::GetItemFluentBuilder;
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::query::QueryOutput;
use aws_sdk_dynamodb::operation::transact_write_items::builders::TransactWriteItemsFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnConsumedCapacity;

use crate::dynamo::table::Table;
use crate::error::StoreError;
use crate::item::Item;
use crate::schema::IndexDef;
use crate::usage::{Consumed, Kind};

/// Builders of requests that name the table and ask for their consumed capacity, each
/// `name: the client's operation -> its builder`.
macro_rules! on_the_table {
    ($($(#[$doc:meta])* $name:ident: $operation:ident -> $builder:ty;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name(&self) -> $builder {
            self.client
                .$operation()
                .table_name(self.name())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
        }
    )*};
}

impl Table {
    on_the_table! {
        /// A GetItem on the table.
        get_item: get_item -> GetItemFluentBuilder;
        /// A PutItem on the table.
        put_item: put_item -> PutItemFluentBuilder;
        /// An UpdateItem on the table.
        update_item: update_item -> UpdateItemFluentBuilder;
        /// A DeleteItem on the table.
        delete_item: delete_item -> DeleteItemFluentBuilder;
        /// A Query of the table itself.
        query_table: query -> QueryFluentBuilder;
    }

    /// A GetItem of the item at `key`.
    pub(crate) fn get_at(&self, key: Item) -> GetItemFluentBuilder {
        self.get_item().set_key(Some(key))
    }

    /// An UpdateItem of the item at `key`.
    pub(crate) fn update_at(&self, key: Item) -> UpdateItemFluentBuilder {
        self.update_item().set_key(Some(key))
    }

    /// A DeleteItem of the item at `key`.
    pub(crate) fn delete_at(&self, key: Item) -> DeleteItemFluentBuilder {
        self.delete_item().set_key(Some(key))
    }

    /// A TransactWriteItems (its actions name the table themselves).
    pub(crate) fn transact_write(&self) -> TransactWriteItemsFluentBuilder {
        self.client
            .transact_write_items()
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
    }

    /// A Query of one of the table's indexes.
    pub(crate) fn query_index(&self, index: &IndexDef) -> QueryFluentBuilder {
        self.query_table().index_name(index.name)
    }

    /// Sends `update`, built for a transaction, as an UpdateItem of its own: `None` when
    /// its condition failed (one write, tallied).
    pub(crate) async fn update_alone(
        &self,
        update: &aws_sdk_dynamodb::types::Update,
    ) -> Result<Option<()>, StoreError> {
        let out = self
            .update_at(update.key().clone())
            .update_expression(update.update_expression())
            .set_condition_expression(update.condition_expression().map(str::to_owned))
            .set_expression_attribute_names(update.expression_attribute_names().cloned())
            .set_expression_attribute_values(update.expression_attribute_values().cloned())
            .send()
            .await;
        Ok(self
            .tally_conditional(crate::usage::Kind::Write, out)?
            .map(|_| ()))
    }

    /// Records a call's capacity and hands its answer back as the SDK gave it, for a
    /// caller that reads the error itself (a failed condition's old item, a cancelled
    /// transaction's reasons). Other callers map the error with [`Table::tally`].
    pub(crate) fn metered<T, E, R>(
        &self,
        kind: Kind,
        out: Result<T, SdkError<E, R>>,
    ) -> Result<T, SdkError<E, R>>
    where
        T: Consumed,
    {
        match &out {
            Ok(o) => self.usage.record(kind, o.consumed()),
            Err(_) => self.usage.record(kind, None),
        }
        out
    }

    /// Records a call whose answer did not carry its capacity (a retried write found
    /// already done).
    pub(crate) fn count_call(&self, kind: Kind) {
        self.usage.record(kind, None);
    }

    /// The pages of `query`, read on through `LastEvaluatedKey` as the caller asks for
    /// them (DynamoDB cuts a page at 1 MB, or at the query's `Limit`).
    pub(crate) fn pages(&self, query: QueryFluentBuilder) -> Pages<'_> {
        Pages {
            table: self,
            query,
            start: None,
            done: false,
        }
    }
}

/// The pages of one Query: [`Table::pages`].
pub(crate) struct Pages<'a> {
    table: &'a Table,
    query: QueryFluentBuilder,
    start: Option<Item>,
    done: bool,
}

impl Pages<'_> {
    /// The next page; `None` once the last one was read.
    pub(crate) async fn next(&mut self) -> Result<Option<QueryOutput>, StoreError> {
        self.next_limited(None).await
    }

    /// The next page, asking for at most `limit` items when given (a caller that wants
    /// only what it still misses).
    pub(crate) async fn next_limited(
        &mut self,
        limit: Option<i32>,
    ) -> Result<Option<QueryOutput>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let mut query = self
            .query
            .clone()
            .set_exclusive_start_key(self.start.take());
        if let Some(limit) = limit {
            query = query.limit(limit);
        }
        let out = self.table.tally(Kind::Read, query.send().await)?;
        self.start = out.last_evaluated_key().cloned();
        self.done = self.start.is_none();
        Ok(Some(out))
    }

    /// The items of every page that is left.
    pub(crate) async fn items(mut self) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        while let Some(page) = self.next().await? {
            items.extend(page.items().iter().cloned());
        }
        Ok(items)
    }
}
