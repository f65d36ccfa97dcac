//! Interop suite for the official Rust SDK (crate `ojs`) against the server named by
//! `OJS_URL`. Each `#[tokio::test]` is one scenario; every wait is bounded (see
//! `common::bounded`), and every scenario uses queues of its own, so scenarios run in
//! parallel on one server and one table.

mod common;
mod producer;
mod worker;
mod workflows;
