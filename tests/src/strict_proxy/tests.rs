//! The strict layer's own rules, end to end: the SDK through the proxy to DynamoDB Local.

use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, KeysAndAttributes, Projection, ProjectionType, PutRequest, ScalarAttributeType,
    Select, TransactWriteItem, Update, WriteRequest,
};
use aws_sdk_dynamodb::Client;

use super::{StrictConfig, StrictProxy};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

async fn setup(config: StrictConfig) -> (StrictProxy, Client, String) {
    crate::default_local_env();
    setup_through(config, &crate::fault_proxy::raw_dynamodb_endpoint()).await
}

/// Like [`setup`], with the proxy in front of `upstream`.
async fn setup_through(config: StrictConfig, upstream: &str) -> (StrictProxy, Client, String) {
    crate::default_local_env();
    let proxy = StrictProxy::start(upstream, config).await.expect("proxy");
    let sdk = ojs_store::sdk_loader()
        .endpoint_url(&proxy.url)
        .load()
        .await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    let client = Client::from_conf(conf);
    let table = format!("strict-{}", uuid::Uuid::now_v7().simple());
    let key = |n: &str, t| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .unwrap()
    };
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    client
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .attribute_definitions(attr("pk"))
        .attribute_definitions(attr("sk"))
        .attribute_definitions(attr("gpk"))
        .attribute_definitions(attr("gsk"))
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name("gix")
                .key_schema(key("gpk", KeyType::Hash))
                .key_schema(key("gsk", KeyType::Range))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::Include)
                        .non_key_attributes("state")
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create table: is DynamoDB Local running? (scripts/local-aws.sh start)");
    (proxy, client, table)
}

fn key(pk: &str) -> std::collections::HashMap<String, AttributeValue> {
    [("pk".to_owned(), s(pk)), ("sk".to_owned(), s("JOB"))].into()
}

fn update(table: &str, pk: &str, expr: &str) -> TransactWriteItem {
    TransactWriteItem::builder()
        .update(
            Update::builder()
                .table_name(table)
                .set_key(Some(key(pk)))
                .update_expression(expr)
                .expression_attribute_values(":v", s("x"))
                .build()
                .unwrap(),
        )
        .build()
}

fn validation<E: ProvideErrorMetadata>(e: &E) -> (String, String) {
    (
        e.code().unwrap_or_default().to_owned(),
        e.message().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn aws_rules_refuse_what_dynamodb_local_accepts() {
    let (proxy, c, t) = setup(StrictConfig::rules_only()).await;
    // Two updates of one item in one transaction.
    let e = c
        .transact_write_items()
        .transact_items(update(&t, "a", "SET x = :v"))
        .transact_items(update(&t, "a", "SET y = :v"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        validation(e.as_service_error().unwrap()),
        (
            "ValidationException".to_owned(),
            "Transaction request cannot include multiple operations on one item".to_owned()
        )
    );
    // 101 actions.
    let mut req = c.transact_write_items();
    for i in 0..101 {
        req = req.transact_items(update(&t, &i.to_string(), "SET x = :v"));
    }
    let e = req.send().await.unwrap_err();
    assert!(validation(e.as_service_error().unwrap())
        .1
        .contains("Member must have length less than or equal to 100"));
    // 4 MB: 11 items of 390 KB.
    let big = "x".repeat(390 * 1024);
    let mut req = c.transact_write_items();
    for i in 0..11 {
        let mut item = key(&i.to_string());
        item.insert("d".into(), s(&big));
        req = req.transact_items(
            TransactWriteItem::builder()
                .put(
                    aws_sdk_dynamodb::types::Put::builder()
                        .table_name(&t)
                        .set_item(Some(item))
                        .build()
                        .unwrap(),
                )
                .build(),
        );
    }
    let e = req.send().await.unwrap_err();
    assert_eq!(
        validation(e.as_service_error().unwrap()).1,
        "Transaction request cannot be larger than 4 MB"
    );
    // 400 KB.
    let mut item = key("big");
    item.insert("d".into(), s(&"x".repeat(400 * 1024)));
    let e = c
        .put_item()
        .table_name(&t)
        .set_item(Some(item))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        validation(e.as_service_error().unwrap()).1,
        "Item size has exceeded the maximum allowed size"
    );
    // BatchWriteItem: 26 requests; a key twice.
    let put = |pk: &str| {
        WriteRequest::builder()
            .put_request(
                PutRequest::builder()
                    .set_item(Some(key(pk)))
                    .build()
                    .unwrap(),
            )
            .build()
    };
    let e = c
        .batch_write_item()
        .request_items(&t, (0..26).map(|i| put(&i.to_string())).collect())
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        validation(e.as_service_error().unwrap()).1,
        "Too many items requested for the BatchWriteItem call"
    );
    let e = c
        .batch_write_item()
        .request_items(&t, vec![put("a"), put("a")])
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        validation(e.as_service_error().unwrap()).1,
        "Provided list of item keys contains duplicates"
    );
    // BatchGetItem: 101 keys; a key twice.
    let keys = |ks: Vec<String>| {
        KeysAndAttributes::builder()
            .set_keys(Some(ks.iter().map(|k| key(k)).collect()))
            .build()
            .unwrap()
    };
    let e = c
        .batch_get_item()
        .request_items(&t, keys((0..101).map(|i| i.to_string()).collect()))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        validation(e.as_service_error().unwrap()).1,
        "Too many items requested for the BatchGetItem call"
    );
    let e = c
        .batch_get_item()
        .request_items(&t, keys(vec!["a".into(), "a".into()]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        validation(e.as_service_error().unwrap()).1,
        "Provided list of item keys contains duplicates"
    );
    // What AWS accepts passes.
    c.batch_write_item()
        .request_items(&t, (0..25).map(|i| put(&i.to_string())).collect())
        .send()
        .await
        .unwrap();
    let out = c
        .batch_get_item()
        .request_items(&t, keys((0..100).map(|i| i.to_string()).collect()))
        .send()
        .await
        .unwrap();
    assert_eq!(out.responses().unwrap()[&t].len(), 25);
    let r = proxy.report();
    assert_eq!(r.rejected.values().sum::<u64>(), 8, "{}", r.summary());
    let _ = c.delete_table().table_name(&t).send().await;
}

#[tokio::test]
async fn batches_come_back_partly_unprocessed_and_complete_on_retry() {
    let config = StrictConfig {
        unprocessed_rate: 1.0,
        ..StrictConfig::rules_only()
    };
    let (proxy, c, t) = setup(config).await;
    let put = |pk: String| {
        WriteRequest::builder()
            .put_request(
                PutRequest::builder()
                    .set_item(Some(key(&pk)))
                    .build()
                    .unwrap(),
            )
            .build()
    };
    let mut pending: Vec<WriteRequest> = (0..20).map(|i| put(i.to_string())).collect();
    let mut rounds = 0;
    while !pending.is_empty() {
        rounds += 1;
        let out = c
            .batch_write_item()
            .request_items(&t, pending.clone())
            .send()
            .await
            .unwrap();
        let left = out
            .unprocessed_items()
            .and_then(|u| u.get(&t))
            .cloned()
            .unwrap_or_default();
        if pending.len() >= 2 {
            assert!(
                !left.is_empty() && left.len() < pending.len(),
                "part, never all, is unprocessed"
            );
        }
        pending = left;
    }
    assert!(rounds > 1);
    let mut keys: Vec<_> = (0..20).map(|i| key(&i.to_string())).collect();
    let mut got = 0;
    while !keys.is_empty() {
        let out = c
            .batch_get_item()
            .request_items(
                &t,
                KeysAndAttributes::builder()
                    .set_keys(Some(keys.clone()))
                    .consistent_read(true)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
        got += out.responses().unwrap().get(&t).map_or(0, Vec::len);
        keys = out
            .unprocessed_keys()
            .and_then(|u| u.get(&t))
            .map(|k| k.keys().to_vec())
            .unwrap_or_default();
    }
    assert_eq!(got, 20);
    assert!(proxy.report().unprocessed_entries > 0);
    let _ = c.delete_table().table_name(&t).send().await;
}

#[tokio::test]
async fn query_pages_are_cut_short_and_pagination_sees_every_item_once() {
    let config = StrictConfig {
        short_page_rate: 1.0,
        ..StrictConfig::rules_only()
    };
    let (proxy, c, t) = setup(config).await;
    for i in 0..30 {
        let mut item = key(&format!("{i:02}"));
        item.insert("gpk".into(), s("P"));
        item.insert("gsk".into(), s(&format!("{i:02}")));
        c.put_item()
            .table_name(&t)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut start = None;
    let mut pages = 0;
    loop {
        let out = c
            .query()
            .table_name(&t)
            .index_name("gix")
            .key_condition_expression("gpk = :p")
            .expression_attribute_values(":p", s("P"))
            .limit(10)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .unwrap();
        pages += 1;
        assert!(out.items().len() < 10, "every page is cut below the Limit");
        seen.extend(out.items().iter().map(|i| i["gsk"].as_s().unwrap().clone()));
        start = out.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    let expected: Vec<String> = (0..30).map(|i| format!("{i:02}")).collect();
    assert_eq!(seen, expected);
    assert!(pages > 3);
    assert!(proxy.report().short_pages >= 4);
    let _ = c.delete_table().table_name(&t).send().await;
}

#[tokio::test]
async fn a_gsi_lags_behind_the_table() {
    // Long enough that the writes and queries below fit in it on a busy machine (400 ms
    // did not once in CI: the new entry showed); they are timed, and a run that took
    // longer proves nothing about the lag and says so.
    let lag = Duration::from_secs(2);
    let config = StrictConfig {
        index_lag: lag,
        ..StrictConfig::rules_only()
    };
    let (proxy, c, t) = setup(config).await;
    let query = |select: Option<Select>| {
        c.query()
            .table_name(&t)
            .index_name("gix")
            .key_condition_expression("gpk = :p AND gsk <= :u")
            .expression_attribute_values(":p", s("P"))
            .expression_attribute_values(":u", s("5"))
            .set_select(select)
            .send()
    };
    let ids = |out: &aws_sdk_dynamodb::operation::query::QueryOutput| -> Vec<String> {
        out.items()
            .iter()
            .map(|i| i["pk"].as_s().unwrap().clone())
            .collect()
    };
    let mut old = key("old");
    old.insert("gpk".into(), s("P"));
    old.insert("gsk".into(), s("1"));
    old.insert("state".into(), s("available"));
    c.put_item()
        .table_name(&t)
        .set_item(Some(old.clone()))
        .send()
        .await
        .unwrap();
    tokio::time::sleep(lag + Duration::from_millis(50)).await;
    assert_eq!(ids(&query(None).await.unwrap()), ["old"]);
    // A new entry is invisible during the lag; a removed one (the item leaves the sparse
    // index) is still there, as it was.
    let written = std::time::Instant::now();
    let mut new = key("new");
    new.insert("gpk".into(), s("P"));
    new.insert("gsk".into(), s("2"));
    c.put_item()
        .table_name(&t)
        .set_item(Some(new))
        .send()
        .await
        .unwrap();
    c.update_item()
        .table_name(&t)
        .set_key(Some(key("old")))
        .update_expression("REMOVE gpk, gsk SET #s = :s")
        .expression_attribute_names("#s", "state")
        .expression_attribute_values(":s", s("active"))
        .send()
        .await
        .unwrap();
    let out = query(None).await.unwrap();
    let count = query(Some(Select::Count)).await.unwrap().count();
    let concluded = written.elapsed() < lag;
    if concluded {
        assert_eq!(ids(&out), ["old"]);
        assert_eq!(out.items()[0]["state"].as_s().unwrap(), "available");
        assert_eq!(count, 1);
    } else {
        eprintln!(
            "the writes and queries took {:?}, past the lag: nothing to conclude",
            written.elapsed()
        );
    }
    // The table itself is current.
    let got = c
        .get_item()
        .table_name(&t)
        .set_key(Some(key("old")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert!(got.item().unwrap().get("gpk").is_none());
    tokio::time::sleep(lag + Duration::from_millis(50)).await;
    assert_eq!(ids(&query(None).await.unwrap()), ["new"]);
    let r = proxy.report();
    assert!(r.lag_shown >= 1, "{}", r.summary());
    assert!(!concluded || r.lag_hidden >= 1, "{}", r.summary());
    let _ = c.delete_table().table_name(&t).send().await;
}

/// A page whose every entry the lag hides is read on from, inside the proxy, as DynamoDB
/// reads past entries not in its index yet: the caller never gets an empty page with a last
/// key, so its next page cannot start behind entries that appear meanwhile (a FETCH
/// paging so took a group's third job before its first, as the lag ended between pages).
#[tokio::test]
async fn a_page_the_lag_empties_is_read_on_not_answered_with_a_last_key() {
    let config = StrictConfig {
        // Longer than the test: the lag never ends while it runs.
        index_lag: Duration::from_secs(120),
        ..StrictConfig::rules_only()
    };
    let (proxy, c, t) = setup(config).await;
    let mut tx = c.transact_write_items();
    for (pk, gsk) in [("a", "1"), ("b", "2"), ("c", "3")] {
        let mut item = key(pk);
        item.insert("gpk".into(), s("P"));
        item.insert("gsk".into(), s(gsk));
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(&t)
            .set_item(Some(item))
            .build()
            .unwrap();
        tx = tx.transact_items(TransactWriteItem::builder().put(put).build());
    }
    tx.send().await.unwrap();
    let out = c
        .query()
        .table_name(&t)
        .index_name("gix")
        .key_condition_expression("gpk = :p")
        .expression_attribute_values(":p", s("P"))
        .limit(1)
        .send()
        .await
        .unwrap();
    assert!(out.items().is_empty(), "{out:?}");
    assert!(out.last_evaluated_key().is_none(), "{out:?}");
    let r = proxy.report();
    assert_eq!(r.lag_hidden, 3, "{}", r.summary());
    let _ = c.delete_table().table_name(&t).send().await;
}

/// A write whose client hangs up before the answer (an SDK attempt timeout) still ends:
/// the item leaves the lag window once its lag has passed. Before, hyper cancelled the
/// request with the connection, between the write and its record, and the item stayed
/// in the window for good, hidden from its index (jobs stuck `available` in the suites).
#[tokio::test]
async fn a_write_whose_client_hangs_up_still_leaves_the_lag() {
    use crate::fault_proxy::{Fault, FaultProxy, Filter};
    crate::default_local_env();
    let faults = FaultProxy::start(&crate::fault_proxy::raw_dynamodb_endpoint(), 1)
        .await
        .expect("fault proxy");
    let config = StrictConfig {
        index_lag: Duration::from_millis(200),
        ..StrictConfig::rules_only()
    };
    let (proxy, c, t) = setup_through(config, &faults.url).await;
    // The PutItem lands, then its answer takes longer than the client waits.
    faults.set_hang(Duration::from_millis(800));
    faults.set_rate(
        1.0,
        &[Fault::HangAfter],
        Filter::Operation("PutItem".into()),
    );
    let sdk = ojs_store::sdk_loader()
        .endpoint_url(&proxy.url)
        .load()
        .await;
    let impatient = Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(Duration::from_millis(300))
                    .build(),
            )
            .build(),
    );
    let mut item = key("hung");
    item.insert("gpk".into(), s("P"));
    item.insert("gsk".into(), s("1"));
    let put = impatient
        .put_item()
        .table_name(&t)
        .set_item(Some(item))
        .send()
        .await;
    assert!(put.is_err(), "the client gave up before the answer");
    faults.heal();
    // The hang, then the lag, have passed: the index shows the item.
    tokio::time::sleep(Duration::from_millis(800 + 200 + 400)).await;
    let out = c
        .query()
        .table_name(&t)
        .index_name("gix")
        .key_condition_expression("gpk = :p")
        .expression_attribute_values(":p", s("P"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.items().len(), 1, "{:?}", out.items());
    let _ = c.delete_table().table_name(&t).send().await;
}

#[tokio::test]
async fn a_throttling_burst_hits_its_partition() {
    let config = StrictConfig {
        throttle_rate: 1.0,
        throttle_burst: Duration::from_millis(300),
        ..StrictConfig::rules_only()
    };
    let (proxy, c, t) = setup(config).await;
    let e = c
        .get_item()
        .table_name(&t)
        .set_key(Some(key("a")))
        .send()
        .await
        .unwrap_err();
    let code = e
        .as_service_error()
        .and_then(|e| e.code())
        .unwrap_or_default()
        .to_owned();
    assert!(
        code == "ThrottlingException" || code == "ProvisionedThroughputExceededException",
        "{code}"
    );
    proxy.set_config(StrictConfig::rules_only());
    tokio::time::sleep(Duration::from_millis(350)).await;
    c.get_item()
        .table_name(&t)
        .set_key(Some(key("a")))
        .send()
        .await
        .unwrap();
    assert!(proxy.report().throttled >= 1);
    let _ = c.delete_table().table_name(&t).send().await;
}

#[tokio::test]
async fn fresh_stores_go_through_the_process_proxy() {
    if !super::enabled() {
        return;
    }
    let store = crate::fresh_store().await.unwrap();
    store.ping().await.unwrap();
    let r = super::process_report().expect("the process proxy runs");
    assert!(
        r.by_operation.get("CreateTable").copied().unwrap_or(0) >= 1,
        "{r:?}"
    );
    let _ = store.delete_table().await;
}
