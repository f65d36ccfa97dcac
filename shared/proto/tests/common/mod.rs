//! The example envelopes of the Protobuf format spec (section 14) and one the server
//! renders, shared by the tests and the benchmark.

#![allow(dead_code)]

use serde_json::{json, Value};

/// Spec 14.1: the minimal envelope.
pub fn minimal() -> Value {
    json!({
        "specversion": "1.0",
        "id": "019539a4-b68c-7def-8000-1a2b3c4d5e6f",
        "type": "email.send",
        "queue": "default",
        "args": ["user@example.com", "welcome"]
    })
}

/// Spec 14.2: a job with retry policy and known extensions.
pub fn with_extensions() -> Value {
    json!({
        "specversion": "1.0",
        "id": "019539a4-b68c-7def-8000-2b3c4d5e6f7a",
        "type": "video.transcode",
        "queue": "media",
        "args": ["video_001", "1080p"],
        "priority": 5,
        "timeout": 3600,
        "retry": {
            "max_attempts": 3,
            "initial_interval": "PT10S",
            "backoff_coefficient": 2.0,
            "jitter": true,
            "on_exhaustion": "dead_letter"
        },
        "total_timeout": 86400,
        "grace_period": 60
    })
}

/// A job as our server renders it on FETCH (`Job::to_json`): typed fields plus the
/// server's own members the schema has no field for.
pub fn server_rendered() -> Value {
    json!({
        "type": "report.generate",
        "queue": "reports",
        "args": [42, "q4", {"customer_id": 9_007_199_254_740_991_i64, "ratio": 0.25, "draft": false, "tags": ["a", null]}],
        "meta": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "tenant": "acme"},
        "priority": 0,
        "timeout_ms": 300_000,
        "retry": {
            "max_attempts": 3,
            "initial_interval": "PT1S",
            "backoff_coefficient": 2.0,
            "max_interval": "PT5M",
            "jitter": true,
            "non_retryable_errors": [],
            "on_exhaustion": "discard",
            "backoff_strategy": "exponential"
        },
        "specversion": "1.0",
        "id": "019539a4-b68c-7def-8000-3c4d5e6f7a8b",
        "state": "active",
        "attempt": 1,
        "max_attempts": 3,
        "created_at": "2026-02-19T10:15:30.123456Z",
        "enqueued_at": "2026-02-19T10:15:30.123456Z",
        "started_at": "2026-02-19T10:15:31.500Z",
        "worker_id": "worker-7",
        "x-acme-gpu-tier": "a100"
    })
}

/// Every example, named.
pub fn all() -> Vec<(&'static str, Value)> {
    vec![
        ("spec 14.1 minimal", minimal()),
        ("spec 14.2 extensions", with_extensions()),
        ("server-rendered FETCH job", server_rendered()),
    ]
}
