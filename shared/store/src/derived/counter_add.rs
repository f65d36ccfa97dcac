//! One counter item's update in a stream batch's transaction, as the queue counters
//! ([`crate::counts`]) and the tenant counters ([`crate::tenants`]) both write it.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::{TransactWriteItem, Update};

use crate::error::StoreError;
use crate::item::{n, Item};

/// One counter item's update in a stream batch's transaction: an `ADD` of each counter's
/// delta (`#f<i> :d<i>`) after the item's own `ADD` clauses, then its other clauses.
pub(crate) struct CounterAdd {
    /// The `ADD` clauses before the deltas'.
    pub(crate) adds: Vec<String>,
    /// What follows the `ADD` clauses (a `SET`), if anything.
    pub(crate) then: Option<&'static str>,
    /// The names of both.
    pub(crate) names: HashMap<String, String>,
    /// The values of both.
    pub(crate) values: Item,
}

impl CounterAdd {
    /// The transaction action adding `deltas` to the counters of the item at `key`;
    /// `None` when every delta is zero. `what` names the update in an error.
    pub(crate) fn action(
        mut self,
        table: &str,
        key: Item,
        deltas: BTreeMap<&'static str, i64>,
        what: &str,
    ) -> Option<Result<TransactWriteItem, StoreError>> {
        let deltas: Vec<_> = deltas.into_iter().filter(|(_, d)| *d != 0).collect();
        if deltas.is_empty() {
            return None;
        }
        for (i, (name, delta)) in deltas.into_iter().enumerate() {
            self.adds.push(format!("#f{i} :d{i}"));
            self.names.insert(format!("#f{i}"), name.to_owned());
            self.values.insert(format!(":d{i}"), n(delta));
        }
        let adds = self.adds.join(", ");
        let update = Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression(match self.then {
                Some(then) => format!("ADD {adds} {then}"),
                None => format!("ADD {adds}"),
            })
            .set_expression_attribute_names(Some(self.names))
            .set_expression_attribute_values(Some(self.values))
            .build()
            .map(|update| TransactWriteItem::builder().update(update).build())
            .map_err(|e| StoreError::Invalid(format!("{what}: {e}")));
        Some(update)
    }
}
