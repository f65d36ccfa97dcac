//! The integration tests, linked into one test binary: each test binary links the whole AWS
//! SDK, so one binary instead of fifteen saves minutes of linking and gigabytes of disk.
//! Each module is one area; run one with a filter, e.g.
//! `cargo test -p ojs-tests --test integration auth::`.
//!
//! The conformance suite (`tests/tests/conformance.rs`) and the load test
//! (`tests/tests/stress.rs`) keep binaries of their own: both are long and are run alone.

mod admin;
mod advanced;
mod api;
mod auth;
mod backlog;
mod backpressure;
mod bad_input;
mod checkpoints;
mod cloudq;
mod compat;
mod compress;
mod counters;
mod dashboard;
mod events;
mod faults;
mod fencing;
mod fetch_answer;
mod fuzz_http;
mod hostile;
mod iam;
mod idempotency;
mod instances;
mod lambda;
mod limits;
mod not_found;
mod observability;
mod payloads;
mod payloads_answers;
mod pools;
mod progress;
mod proto;
mod push;
mod reliability;
mod scheduling;
mod schemas;
mod scopes;
mod sharding;
mod shutdown;
mod smoke;
mod stream_once;
mod stream_redrive;
mod table_definition;
mod tenant_dead_letter;
mod tenant_limits;
mod tenant_listings;
mod tenants;
mod trace_context;
mod webhooks;
mod workflows;
