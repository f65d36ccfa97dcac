//! A registry kept in one partition (schemas, crons, API keys, push endpoints, webhook
//! subscriptions): one item a registration, keyed by its name under the partition. Each
//! registry declares once where its items are, how one reads and what a missing one is;
//! getting, listing and deleting a registration are then the same for all of them.

use std::future::Future;

use crate::dynamo::table::Table;
use crate::error::{Missing, StoreError};
use crate::item::{item_key, Item};

/// Where a registry's items are, how one reads and what a missing one is called.
pub(crate) struct Registry<T> {
    /// The partition of every registration.
    pub(crate) pk: &'static str,
    /// The sort key of the registration named so.
    pub(crate) sk: fn(&str) -> String,
    /// A registration as its item holds it.
    pub(crate) read: fn(&Item) -> Result<T, StoreError>,
    /// What [`StoreError::NotFound`] names for a registration that is not there.
    pub(crate) missing: fn(String) -> Missing,
}

impl<T> Registry<T> {
    /// The primary key of registration `name`.
    pub(crate) fn key(&self, name: &str) -> Item {
        item_key(self.pk, (self.sk)(name))
    }

    /// The error of a registration `name` that is not there.
    pub(crate) fn not_found(&self, name: &str) -> StoreError {
        StoreError::NotFound((self.missing)(name.to_owned()))
    }

    /// Names a missing item as registration `name` (other errors unchanged).
    pub(crate) fn naming<'a>(&self, name: &'a str) -> impl FnOnce(StoreError) -> StoreError + 'a {
        let missing = self.missing;
        move |e| e.naming(|| missing(name.to_owned()))
    }

    /// Registration `name`, if any (one strongly consistent GetItem). The read's own
    /// future, not one around it: the authorizer's future is deep enough already.
    pub(crate) fn get<'t>(
        &self,
        table: &'t Table,
        name: &str,
    ) -> impl Future<Output = Result<Option<T>, StoreError>> + 't
    where
        T: 't,
    {
        table.read_as(self.key(name), self.read)
    }

    /// Every registration, in sort-key order (one strongly consistent Query, paged
    /// through): one that does not read fails the whole listing.
    pub(crate) async fn list(&self, table: &Table) -> Result<Vec<T>, StoreError> {
        table
            .query_partition(self.pk, true)
            .await?
            .iter()
            .map(self.read)
            .collect()
    }

    /// Deletes registration `name` and returns what it held (one DeleteItem);
    /// [`StoreError::NotFound`] naming it when there was none.
    pub(crate) async fn delete(&self, table: &Table, name: &str) -> Result<T, StoreError> {
        table
            .delete_returning(self.key(name))
            .await?
            .as_ref()
            .map(self.read)
            .transpose()?
            .ok_or_else(|| self.not_found(name))
    }
}
