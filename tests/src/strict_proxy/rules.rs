//! The request rules AWS applies and DynamoDB Local does not, as pure checks on the JSON
//! request, each answered with AWS's own error.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::lag::{Item, TableInfo};
use super::size::{item_size, value_size};

/// DynamoDB's item size limit.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Actions in one TransactWriteItems / TransactGetItems.
pub const MAX_TRANSACTION_ACTIONS: usize = 100;
/// Aggregate size of the items of one transaction.
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;
/// Requests in one BatchWriteItem.
pub const MAX_BATCH_WRITE: usize = 25;
/// Keys in one BatchGetItem.
pub const MAX_BATCH_GET: usize = 100;

/// The shape id of AWS's request validation errors.
pub const VALIDATION: &str = "com.amazon.coral.validate#ValidationException";

/// A request AWS would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Which rule (a short name for reports).
    pub rule: &'static str,
    /// The error's shape id.
    pub type_name: &'static str,
    /// AWS's message.
    pub message: String,
}

fn invalid(rule: &'static str, message: impl Into<String>) -> Rejection {
    Rejection {
        rule,
        type_name: VALIDATION,
        message: message.into(),
    }
}

/// One item a request names: table, key id, key, and the item written (a Put's).
#[derive(Debug, Clone)]
pub struct Target {
    /// Table name.
    pub table: String,
    /// Canonical key id (see [`super::lag::KeySchema::id`]).
    pub id: String,
    /// The key attributes.
    pub key: Item,
    /// The whole item, for a Put.
    pub put: Option<Item>,
    /// Whether the action writes (not a ConditionCheck or a read).
    pub writes: bool,
}

fn obj(v: Option<&Value>) -> Option<&Item> {
    v.and_then(Value::as_object)
}

fn target(
    tables: &HashMap<String, TableInfo>,
    table: &str,
    key_or_item: &Item,
    put: bool,
    writes: bool,
) -> Option<Target> {
    let info = tables.get(table)?;
    Some(Target {
        table: table.to_owned(),
        id: info.keys.id(key_or_item)?,
        key: info.keys.key_of(key_or_item),
        put: put.then(|| key_or_item.clone()),
        writes,
    })
}

fn too_big(item: &Item) -> bool {
    item_size(item) > MAX_ITEM_BYTES
}

fn item_too_big() -> Rejection {
    invalid(
        "item-400kb",
        "Item size has exceeded the maximum allowed size",
    )
}

fn no_duplicates(targets: &[Target], rule: &'static str, message: &str) -> Result<(), Rejection> {
    let mut seen = HashSet::new();
    for t in targets {
        if !seen.insert((t.table.as_str(), t.id.as_str())) {
            return Err(invalid(rule, message));
        }
    }
    Ok(())
}

/// The tables a request names (to learn their keys first).
pub fn tables_named(op: &str, body: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    match op {
        "TransactWriteItems" | "TransactGetItems" => {
            for a in body
                .get("TransactItems")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(action) = a.as_object().and_then(|o| o.values().next()) {
                    if let Some(t) = action.get("TableName").and_then(Value::as_str) {
                        out.push(t.to_owned());
                    }
                }
            }
        }
        "BatchWriteItem" | "BatchGetItem" => {
            if let Some(m) = obj(body.get("RequestItems")) {
                out.extend(m.keys().cloned());
            }
        }
        _ => {
            if let Some(t) = body.get("TableName").and_then(Value::as_str) {
                out.push(t.to_owned());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn too_many_actions(n: usize) -> Rejection {
    invalid(
        "transaction-100-actions",
        format!(
            "1 validation error detected: Value '[{n} items]' at 'transactItems' failed to satisfy constraint: Member must have length less than or equal to {MAX_TRANSACTION_ACTIONS}"
        ),
    )
}

const ONE_ITEM: &str = "Transaction request cannot include multiple operations on one item";

/// TransactWriteItems: 100 actions, each item once, 400 KB per Put, 4 MB of items (the
/// Puts' items and the written items' keys; the caller adds the current images of the
/// updated and deleted items with [`transaction_bytes`]). Returns the items named.
pub fn transact_write(
    body: &Value,
    tables: &HashMap<String, TableInfo>,
) -> Result<Vec<Target>, Rejection> {
    let actions = body
        .get("TransactItems")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if actions.len() > MAX_TRANSACTION_ACTIONS {
        return Err(too_many_actions(actions.len()));
    }
    let mut targets = Vec::new();
    for a in actions {
        let Some((kind, action)) = a.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        let Some(table) = action.get("TableName").and_then(Value::as_str) else {
            continue;
        };
        let t = match kind.as_str() {
            "Put" => {
                let Some(item) = obj(action.get("Item")) else {
                    continue;
                };
                if too_big(item) {
                    return Err(item_too_big());
                }
                target(tables, table, item, true, true)
            }
            "Update" | "Delete" | "ConditionCheck" => {
                let Some(key) = obj(action.get("Key")) else {
                    continue;
                };
                target(tables, table, key, false, kind != "ConditionCheck")
            }
            _ => None,
        };
        targets.extend(t);
    }
    no_duplicates(&targets, "transaction-one-item", ONE_ITEM)?;
    Ok(targets)
}

/// The aggregate size of a transaction: each Put's item, and for the other actions the
/// item as it is now (`current`, when known) or else its key.
pub fn transaction_bytes(
    targets: &[Target],
    current: &HashMap<(String, String), Option<Item>>,
) -> usize {
    targets
        .iter()
        .map(|t| match &t.put {
            Some(item) => item_size(item),
            None => match current.get(&(t.table.clone(), t.id.clone())) {
                Some(Some(item)) if t.writes => item_size(item),
                _ => item_size(&t.key),
            },
        })
        .sum()
}

/// The 4 MB rule's error.
pub fn transaction_too_big() -> Rejection {
    invalid(
        "transaction-4mb",
        "Transaction request cannot be larger than 4 MB",
    )
}

/// TransactGetItems: 100 actions, each item once.
pub fn transact_get(
    body: &Value,
    tables: &HashMap<String, TableInfo>,
) -> Result<Vec<Target>, Rejection> {
    let actions = body
        .get("TransactItems")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    if actions.len() > MAX_TRANSACTION_ACTIONS {
        return Err(too_many_actions(actions.len()));
    }
    let mut targets = Vec::new();
    for a in actions {
        let Some(get) = a.get("Get") else { continue };
        let (Some(table), Some(key)) = (
            get.get("TableName").and_then(Value::as_str),
            obj(get.get("Key")),
        ) else {
            continue;
        };
        targets.extend(target(tables, table, key, false, false));
    }
    no_duplicates(&targets, "transaction-one-item", ONE_ITEM)?;
    Ok(targets)
}

const DUPLICATES: &str = "Provided list of item keys contains duplicates";

/// BatchWriteItem: 25 requests, no key twice, 400 KB per Put. Returns the items in
/// request order (table by table).
pub fn batch_write(
    body: &Value,
    tables: &HashMap<String, TableInfo>,
) -> Result<Vec<Target>, Rejection> {
    let Some(requests) = obj(body.get("RequestItems")) else {
        return Ok(Vec::new());
    };
    let n: usize = requests
        .values()
        .map(|r| r.as_array().map_or(0, Vec::len))
        .sum();
    if n > MAX_BATCH_WRITE {
        return Err(invalid(
            "batch-write-25",
            "Too many items requested for the BatchWriteItem call",
        ));
    }
    let mut targets = Vec::new();
    for (table, reqs) in requests {
        for r in reqs.as_array().into_iter().flatten() {
            if let Some(item) = obj(r.get("PutRequest").and_then(|p| p.get("Item"))) {
                if too_big(item) {
                    return Err(item_too_big());
                }
                targets.extend(target(tables, table, item, true, true));
            } else if let Some(key) = obj(r.get("DeleteRequest").and_then(|p| p.get("Key"))) {
                targets.extend(target(tables, table, key, false, true));
            }
        }
    }
    no_duplicates(&targets, "batch-duplicate-keys", DUPLICATES)?;
    Ok(targets)
}

/// BatchGetItem: 100 keys, no key twice.
pub fn batch_get(
    body: &Value,
    tables: &HashMap<String, TableInfo>,
) -> Result<Vec<Target>, Rejection> {
    let Some(requests) = obj(body.get("RequestItems")) else {
        return Ok(Vec::new());
    };
    let n: usize = requests
        .values()
        .map(|r| r.get("Keys").and_then(Value::as_array).map_or(0, Vec::len))
        .sum();
    if n > MAX_BATCH_GET {
        return Err(invalid(
            "batch-get-100",
            "Too many items requested for the BatchGetItem call",
        ));
    }
    let mut targets = Vec::new();
    for (table, r) in requests {
        for key in r
            .get("Keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(key) = key.as_object() {
                targets.extend(target(tables, table, key, false, false));
            }
        }
    }
    no_duplicates(&targets, "batch-duplicate-keys", DUPLICATES)?;
    Ok(targets)
}

/// PutItem: 400 KB.
pub fn put_item(body: &Value) -> Result<(), Rejection> {
    match obj(body.get("Item")) {
        Some(item) if too_big(item) => Err(item_too_big()),
        _ => Ok(()),
    }
}

/// UpdateItem: only what the request alone proves: one value over 400 KB. (The size of
/// the resulting item is checked after the write, see the module docs.)
pub fn update_item(body: &Value) -> Result<(), Rejection> {
    let over = obj(body.get("ExpressionAttributeValues"))
        .is_some_and(|m| m.values().any(|v| value_size(v) > MAX_ITEM_BYTES));
    if over {
        return Err(invalid(
            "item-400kb",
            "Item size to update has exceeded the maximum allowed size",
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure
mod tests {
    use super::*;
    use crate::strict_proxy::lag::KeySchema;
    use serde_json::json;

    fn tables() -> HashMap<String, TableInfo> {
        HashMap::from([(
            "t".to_owned(),
            TableInfo {
                keys: KeySchema {
                    partition: "pk".into(),
                    sort: Some("sk".into()),
                },
                indexes: HashMap::new(),
            },
        )])
    }

    fn key(pk: &str) -> Value {
        json!({"pk": {"S": pk}, "sk": {"S": "JOB"}})
    }

    #[test]
    fn a_transaction_may_name_an_item_once() {
        let body = json!({"TransactItems": [
            {"Update": {"TableName": "t", "Key": key("a"), "UpdateExpression": "SET x = :x"}},
            {"ConditionCheck": {"TableName": "t", "Key": key("b"), "ConditionExpression": "attribute_exists(pk)"}},
            {"Update": {"TableName": "t", "Key": key("a"), "UpdateExpression": "SET y = :y"}},
        ]});
        let e = transact_write(&body, &tables()).unwrap_err();
        assert_eq!(
            e.message,
            "Transaction request cannot include multiple operations on one item"
        );
        assert_eq!(e.type_name, "com.amazon.coral.validate#ValidationException");
        // A Put and a ConditionCheck on one item count too.
        let body = json!({"TransactItems": [
            {"Put": {"TableName": "t", "Item": key("a")}},
            {"ConditionCheck": {"TableName": "t", "Key": key("a"), "ConditionExpression": "attribute_exists(pk)"}},
        ]});
        assert_eq!(
            transact_write(&body, &tables()).unwrap_err().rule,
            "transaction-one-item"
        );
        let body = json!({"TransactItems": [{"Get": {"TableName": "t", "Key": key("a")}}, {"Get": {"TableName": "t", "Key": key("a")}}]});
        assert_eq!(
            transact_get(&body, &tables()).unwrap_err().rule,
            "transaction-one-item"
        );
        let body = json!({"TransactItems": [{"Get": {"TableName": "t", "Key": key("a")}}, {"Get": {"TableName": "t", "Key": key("b")}}]});
        assert_eq!(transact_get(&body, &tables()).unwrap().len(), 2);
    }

    #[test]
    fn a_transaction_has_at_most_100_actions() {
        let actions: Vec<Value> = (0..101)
            .map(|i| json!({"Put": {"TableName": "t", "Item": key(&i.to_string())}}))
            .collect();
        let e = transact_write(&json!({"TransactItems": actions}), &tables()).unwrap_err();
        assert_eq!(e.rule, "transaction-100-actions");
        assert!(e
            .message
            .contains("Member must have length less than or equal to 100"));
        assert!(transact_write(&json!({"TransactItems": actions[..100]}), &tables()).is_ok());
        let gets: Vec<Value> = (0..101)
            .map(|i| json!({"Get": {"TableName": "t", "Key": key(&i.to_string())}}))
            .collect();
        assert_eq!(
            transact_get(&json!({"TransactItems": gets}), &tables())
                .unwrap_err()
                .rule,
            "transaction-100-actions"
        );
    }

    #[test]
    fn a_transaction_carries_at_most_4_mb() {
        // 11 Puts of ~390 KB: each under 400 KB, together over 4 MB.
        let big = "x".repeat(390 * 1024);
        let actions: Vec<Value> = (0..11)
            .map(|i| json!({"Put": {"TableName": "t", "Item": {"pk": {"S": i.to_string()}, "sk": {"S": "JOB"}, "d": {"S": big}}}}))
            .collect();
        let targets = transact_write(&json!({"TransactItems": actions}), &tables()).unwrap();
        assert!(transaction_bytes(&targets, &HashMap::new()) > MAX_TRANSACTION_BYTES);
        assert!(transaction_bytes(&targets[..10], &HashMap::new()) <= MAX_TRANSACTION_BYTES);
        assert_eq!(
            transaction_too_big().message,
            "Transaction request cannot be larger than 4 MB"
        );
        // An update counts the item as it is now.
        let upd = json!({"TransactItems": [{"Update": {"TableName": "t", "Key": key("a"), "UpdateExpression": "SET x = :x"}}]});
        let targets = transact_write(&upd, &tables()).unwrap();
        let now: Item = json!({"pk": {"S": "a"}, "sk": {"S": "JOB"}, "d": {"S": big}})
            .as_object()
            .cloned()
            .unwrap();
        let current = HashMap::from([(("t".to_owned(), targets[0].id.clone()), Some(now))]);
        assert!(transaction_bytes(&targets, &current) > 390 * 1024);
    }

    #[test]
    fn items_over_400_kb_are_refused() {
        let over = "x".repeat(400 * 1024);
        let e = put_item(&json!({"TableName": "t", "Item": {"pk": {"S": "a"}, "sk": {"S": "JOB"}, "d": {"S": over}}})).unwrap_err();
        assert_eq!(e.message, "Item size has exceeded the maximum allowed size");
        let fits = "x".repeat(400 * 1024 - 20);
        assert!(put_item(&json!({"TableName": "t", "Item": {"pk": {"S": "a"}, "sk": {"S": "JOB"}, "d": {"S": fits}}})).is_ok());
        let e = transact_write(&json!({"TransactItems": [{"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}, "sk": {"S": "JOB"}, "d": {"S": over}}}}]}), &tables()).unwrap_err();
        assert_eq!(e.rule, "item-400kb");
        let e = batch_write(&json!({"RequestItems": {"t": [{"PutRequest": {"Item": {"pk": {"S": "a"}, "sk": {"S": "JOB"}, "d": {"S": over}}}}]}}), &tables()).unwrap_err();
        assert_eq!(e.rule, "item-400kb");
        let e = update_item(&json!({"TableName": "t", "Key": key("a"), "UpdateExpression": "SET d = :d", "ExpressionAttributeValues": {":d": {"S": format!("{over}x")}}})).unwrap_err();
        assert_eq!(
            e.message,
            "Item size to update has exceeded the maximum allowed size"
        );
    }

    #[test]
    fn batch_writes_take_25_distinct_keys() {
        let reqs: Vec<Value> = (0..26)
            .map(|i| json!({"PutRequest": {"Item": key(&i.to_string())}}))
            .collect();
        let e = batch_write(&json!({"RequestItems": {"t": reqs}}), &tables()).unwrap_err();
        assert_eq!(
            e.message,
            "Too many items requested for the BatchWriteItem call"
        );
        assert_eq!(
            batch_write(&json!({"RequestItems": {"t": reqs[..25]}}), &tables())
                .unwrap()
                .len(),
            25
        );
        let dup = json!({"RequestItems": {"t": [{"PutRequest": {"Item": key("a")}}, {"DeleteRequest": {"Key": key("a")}}]}});
        assert_eq!(
            batch_write(&dup, &tables()).unwrap_err().message,
            "Provided list of item keys contains duplicates"
        );
    }

    #[test]
    fn batch_gets_take_100_distinct_keys() {
        let keys: Vec<Value> = (0..101).map(|i| key(&i.to_string())).collect();
        let e = batch_get(&json!({"RequestItems": {"t": {"Keys": keys}}}), &tables()).unwrap_err();
        assert_eq!(
            e.message,
            "Too many items requested for the BatchGetItem call"
        );
        assert_eq!(
            batch_get(
                &json!({"RequestItems": {"t": {"Keys": keys[..100]}}}),
                &tables()
            )
            .unwrap()
            .len(),
            100
        );
        let dup = json!({"RequestItems": {"t": {"Keys": [key("a"), key("b"), key("a")]}}});
        assert_eq!(
            batch_get(&dup, &tables()).unwrap_err().message,
            "Provided list of item keys contains duplicates"
        );
    }
}
