//! The OJS benchmark harness: DynamoDB capacity per operation, cost per million jobs,
//! throughput and latency, Lambda cold starts and product CPU per request, all measured
//! against the local stack (DynamoDB Local, moto SQS).
//!
//! Run `cargo run --release -p ojs-bench -- [--quick] [--json bench/results.json]`, or
//! `make bench` (which also starts the local AWS services). Method and results:
//! `docs/performance.md`.

pub mod capacity;
pub mod ceiling;
pub mod cold_start;
pub mod cost;
pub mod cpu;
pub mod env;
pub mod large;
pub mod meter;
pub mod push;
pub mod report;
pub mod stats;
pub mod tenants;
pub mod throughput;
pub mod timer;
pub mod versus;

/// The fake Lambda Runtime API the cold-start bench runs the functions against (it lives
/// in the tests crate, shared with the Lambda-level tests).
pub use ojs_tests::lambda_runtime;
