//! Fuzzing of the Protobuf decoders: arbitrary bytes, and valid envelopes with bytes
//! flipped, cut or spliced. Nothing may panic; whatever decodes must re-encode and decode
//! to the same JSON (a stable fixed point).
//!
//! CI runs `PROPTEST_CASES` inputs per property (default 2,000). `OJS_FUZZ_SECONDS=600`
//! (`make fuzz`) keeps drawing fresh inputs for that long.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use serde_json::{json, Value};

#[path = "../../core/tests/support/fuzz.rs"]
mod fuzz;

use fuzz::fuzz;

/// A round of the fuzz driver: 2,000 inputs unless `PROPTEST_CASES` says otherwise.
fn config() -> Config {
    Config {
        cases: 2_000,
        ..Config::default()
    }
}

/// Every decoder on `bytes`: no panic; what decodes is a fixed point.
fn decode_all(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(job) = ojs_proto::proto_to_json(bytes) {
        let again = ojs_proto::json_to_proto(&job)
            .map_err(|e| TestCaseError::fail(format!("decoded {job} does not re-encode: {e}")))?;
        let back = ojs_proto::proto_to_json(&again)
            .map_err(|e| TestCaseError::fail(format!("re-encoded {job} does not decode: {e}")))?;
        prop_assert_eq!(back, job);
    }
    if let Ok(batch) = ojs_proto::batch_request_to_json(bytes) {
        prop_assert!(batch["jobs"].is_array());
    }
    let _ = ojs_proto::decode_delimited_jobs(bytes);
    let _ = ojs_proto::batch_response_to_json(bytes);
    Ok(())
}

fn seed_envelopes() -> Vec<Vec<u8>> {
    [
        json!({"id": "019539a4-b68c-7def-8000-1a2b3c4d5e6f", "type": "email.send", "queue": "default",
               "args": ["a@example.com", {"n": 1, "big": "9007199254740993"}], "priority": 5,
               "meta": {"trace": "t"}, "created_at": "2026-11-22T00:00:00.123456Z",
               "retry": {"max_attempts": 3, "initial_interval": "PT1S"}, "x-acme": {"k": [1, 2]}}),
        json!({"type": "report.build", "args": [], "state": "active", "attempt": 2,
               "error": {"type": "Boom", "message": "m"}, "tags": ["a"]}),
    ]
    .iter()
    .filter_map(|j: &Value| ojs_proto::json_to_proto(j).ok())
    .collect()
}

#[test]
fn arbitrary_bytes_never_panic() -> Result<(), String> {
    let bytes = proptest::collection::vec(any::<u8>(), 0..512);
    fuzz("arbitrary bytes", &config(), bytes, |bytes| {
        decode_all(&bytes)
    })
    .map(drop)
}

#[test]
fn mutated_envelopes_never_panic_and_decode_to_fixed_points() -> Result<(), String> {
    let seeds = seed_envelopes();
    assert_eq!(seeds.len(), 2);
    let strategy = (
        0..seeds.len(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        any::<prop::sample::Index>(),
        proptest::collection::vec(any::<u8>(), 0..16),
    );
    let tried = fuzz(
        "mutated envelopes",
        &config(),
        strategy,
        |(which, flips, cut, splice)| {
            let mut bytes = seeds[which].clone();
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            decode_all(&bytes)?;
            // Truncated, and with junk spliced in at a random point.
            let at = cut.index(bytes.len() + 1);
            decode_all(&bytes[..at])?;
            let mut spliced = bytes[..at].to_vec();
            spliced.extend_from_slice(&splice);
            spliced.extend_from_slice(&bytes[at..]);
            decode_all(&spliced)
        },
    );
    tried.map(drop)
}
