//! Size and speed of the Protobuf encoding against compact JSON for the spec's example
//! envelopes (and one the server renders). Run with `cargo bench -p ojs-proto`.
//!
//! "encode" is JSON value -> protobuf bytes (`json_to_proto`), "decode" is protobuf
//! bytes -> JSON value (`proto_to_json`); the JSON columns time serde_json's
//! `to_vec`/`from_slice` on the same envelope for reference.

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use ojs_proto::{json_to_proto, proto_to_json, ProtoError};

/// Nanoseconds per call of `f`, measured over at least `budget`.
fn ns_per_call<T>(budget: Duration, mut f: impl FnMut() -> T) -> f64 {
    for _ in 0..1000 {
        black_box(f());
    }
    let mut calls = 0u64;
    let start = Instant::now();
    while start.elapsed() < budget {
        for _ in 0..1000 {
            black_box(f());
        }
        calls += 1000;
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

fn main() -> Result<(), ProtoError> {
    let budget = Duration::from_millis(700);
    println!(
        "{:<28} {:>10} {:>11} {:>7} {:>13} {:>13} {:>13} {:>13}",
        "envelope",
        "json bytes",
        "proto bytes",
        "ratio",
        "encode ns",
        "decode ns",
        "json enc ns",
        "json dec ns"
    );
    for (name, job) in common::all() {
        let json = serde_json::to_vec(&job).unwrap_or_default();
        let proto = json_to_proto(&job)?;
        let encode = ns_per_call(budget, || json_to_proto(black_box(&job)));
        let decode = ns_per_call(budget, || proto_to_json(black_box(&proto)));
        let json_encode = ns_per_call(budget, || serde_json::to_vec(black_box(&job)));
        let json_decode = ns_per_call(budget, || {
            serde_json::from_slice::<serde_json::Value>(black_box(&json))
        });
        println!(
            "{:<28} {:>10} {:>11} {:>7.2} {:>13.0} {:>13.0} {:>13.0} {:>13.0}",
            name,
            json.len(),
            proto.len(),
            proto.len() as f64 / json.len() as f64,
            encode,
            decode,
            json_encode,
            json_decode
        );
    }
    Ok(())
}
