//! Keeps the harness honest: the capacity measurement, run for one size against DynamoDB
//! Local (and moto for the timer), must see every call the store makes, agree with the
//! store's own counter, and feed a cost that adds up.

use ojs_bench::capacity::{self, ops};
use ojs_bench::cost::{self, Prices};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_of_one_size_is_complete_and_consistent() -> anyhow::Result<()> {
    ojs_bench::env::local_defaults();
    let report = capacity::run(&[capacity::TARGET_SIZE], 1).await?;
    assert!(
        report.store_counter_agrees,
        "the meter and Store::usage() disagree"
    );
    let get = |op: &str| {
        report
            .get(op, capacity::TARGET_SIZE)
            .ok_or_else(|| anyhow::anyhow!("{op} not measured"))
    };
    let push = get(ops::PUSH)?;
    assert!(push.calls >= 1.0 && push.write_units > 0.0, "{push:?}");
    // The job item write is attributed to the table and to the ready index.
    let put = push
        .breakdown
        .iter()
        .find(|c| c.target.starts_with("Put JOB#"))
        .ok_or_else(|| anyhow::anyhow!("no job PutItem in {:?}", push.breakdown))?;
    assert!(put.table_units > 0.0 && put.index_units.get("ready").copied().unwrap_or(0.0) > 0.0);
    let fetch = get(ops::FETCH_1)?;
    assert!(fetch.read_units > 0.0, "{fetch:?}");
    let fetch10 = get(ops::FETCH_10)?;
    assert_eq!(fetch10.jobs_per_request, 10);
    // A scheduled PUSH arms the timer: one SQS request.
    assert_eq!(get(ops::PUSH_SCHEDULED)?.sqs_requests, 1.0);
    assert!(get(ops::PROMOTE)?.write_units > 0.0);
    // Lifecycle = sum of its parts.
    let life = report
        .lifecycle(capacity::TARGET_SIZE)
        .ok_or_else(|| anyhow::anyhow!("no lifecycle"))?;
    let ack = get(ops::ACK)?;
    // The stream function's share: its batch of one lifecycle alone, or a hundredth of a
    // batch of a hundred; each writes an event page, a counter and its marker in one
    // transaction.
    let stream1 = get(ops::STREAM_1)?;
    let stream100 = get(ops::STREAM_100)?;
    assert_eq!(stream1.calls, 1.0, "{stream1:?}");
    assert_eq!(stream100.jobs_per_request, 100);
    assert!(stream100.write_units > stream1.write_units, "{stream100:?}");
    let path = push.write_units_aws + fetch.write_units_aws + ack.write_units_aws;
    let sum = path + stream1.write_units_aws;
    assert!((life.single.write_units - sum).abs() < 1e-9);
    // Steady traffic: the PUSH and FETCH measured right after another lifecycle (what an
    // instance remembers for a second is remembered), the stream batch shared by 100.
    let push_warm = get(ops::PUSH_WARM)?;
    let fetch_warm = get(ops::FETCH_1_WARM)?;
    let steady = push_warm.write_units_aws
        + fetch_warm.write_units_aws
        + ack.write_units_aws
        + stream100.write_units_aws / 100.0;
    assert!((life.single_steady.write_units - steady).abs() < 1e-9);
    let steady_calls = push_warm.calls + fetch_warm.calls + ack.calls + stream100.calls / 100.0;
    assert!(
        (life.single_steady.calls - steady_calls).abs() < 1e-9,
        "{:?}",
        life.single_steady
    );
    assert!((life.request_path_calls - (push.calls + fetch.calls + ack.calls)).abs() < 1e-9);
    assert_eq!(life.single.http_requests, 3.0);
    // The cost of the single lifecycle is priced from the same numbers.
    let prices = Prices::load(&cost::default_prices_path())?;
    let costs = cost::scenarios(&prices, &report, None);
    let single = costs
        .iter()
        .find(|c| c.scenario == "single")
        .ok_or_else(|| anyhow::anyhow!("no single scenario"))?;
    let ddb = life.single.write_units * prices.dynamodb_write_per_million
        + life.single.read_units * prices.dynamodb_read_per_million;
    assert!(single.usd_per_million_jobs > ddb);
    Ok(())
}
