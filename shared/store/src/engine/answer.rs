//! FETCH answers bounded by bytes (issue #32; deploy-review F5). A function answers API
//! Gateway through Lambda, whose synchronous response is at most 6 MB: the HTTP body
//! travels inside a JSON envelope, as a string, so every `"` and `\` in it counts twice.
//! A FETCH whose answer passed that would fail at the gateway after its jobs were
//! claimed, and they would wait out their leases. So a FETCH claims another job only
//! while the answer so far, plus the most one job can add, stays within the bound: it
//! answers fewer jobs than `count` rather than claim one it could not return.

use ojs_core::validate::MAX_ENVELOPE_BYTES;
use ojs_core::Job;

/// Lambda's limit on a synchronous response (the whole invocation result).
pub const LAMBDA_RESPONSE_BYTES: usize = 6 * 1024 * 1024;

/// DynamoDB's limit on one item: everything a job's item adds to its request (status,
/// errors of earlier attempts) is within it.
const MAX_ITEM_BYTES: usize = 400 * 1024;

/// The most one job can add to an answer: its request (at most the envelope limit) and
/// what its item holds besides, each byte counted twice as if all of it were escaped.
pub const LARGEST_JOB_ANSWER: usize = 2 * (MAX_ENVELOPE_BYTES + MAX_ITEM_BYTES);

/// How many bytes a FETCH answer may take, and how much room one more job needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerBound {
    /// The answer's jobs, measured by [`answer_bytes`], stay within this.
    pub bytes: usize,
    /// Another job is claimed only while this much is left ([`LARGEST_JOB_ANSWER`]).
    pub reserve: usize,
}

impl Default for AnswerBound {
    /// Lambda's limit less 256 KiB for the status line, headers, the list around the
    /// jobs and the envelope's own fields.
    fn default() -> Self {
        Self {
            bytes: LAMBDA_RESPONSE_BYTES - 256 * 1024,
            reserve: LARGEST_JOB_ANSWER,
        }
    }
}

impl AnswerBound {
    /// Whether an answer already holding jobs of `so_far` bytes may claim another. The
    /// first job is always claimed: no job the API accepts is too large alone.
    pub(crate) fn room_for_another(&self, so_far: usize) -> bool {
        so_far == 0 || so_far.saturating_add(self.reserve) <= self.bytes
    }
}

/// Bytes `job` takes in a FETCH answer as Lambda carries it: its view as compact JSON
/// with every `"` and `\` counted twice (the body is a string in Lambda's envelope). A
/// job whose args and meta are still in the payload bucket counts its object twice over,
/// however it escapes.
pub fn answer_bytes(job: &Job) -> usize {
    let pending = job
        .status
        .payload
        .as_ref()
        .map_or(0, |p| usize::try_from(p.bytes).unwrap_or(usize::MAX));
    enveloped_bytes(&job.to_json().to_string()).saturating_add(pending.saturating_mul(2))
}

/// Bytes the JSON text `body` takes as a string in Lambda's response envelope: each `"`
/// and `\` is escaped there (the text holds no control characters: JSON escapes them
/// with a `\`, counted).
pub fn enveloped_bytes(body: &str) -> usize {
    let escaped = body.bytes().filter(|b| matches!(b, b'"' | b'\\')).count();
    body.len().saturating_add(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::job::PayloadRef;
    use serde_json::json;

    fn job(args: serde_json::Value) -> Job {
        let new = ojs_core::NewJob::from_json(json!({"type": "t", "args": args}))
            .unwrap_or_else(|e| panic!("{e}"));
        Job::enqueue(new, ojs_core::time::now())
    }

    #[test]
    fn quotes_and_backslashes_count_twice() {
        let plain = job(json!(["abcd"]));
        let quoted = job(json!(["a\"b\\"]));
        // `a\"b\\` is six bytes of JSON (`abcd` four), each of its three escapes doubled.
        let view = |j: &Job| j.to_json().to_string();
        assert_eq!(view(&quoted).len(), view(&plain).len() + 2);
        let escapes = |j: &Job| {
            view(j)
                .bytes()
                .filter(|b| *b == b'"' || *b == b'\\')
                .count()
        };
        assert_eq!(answer_bytes(&plain), view(&plain).len() + escapes(&plain));
        assert_eq!(escapes(&quoted), escapes(&plain) + 4);
        assert_eq!(answer_bytes(&quoted), answer_bytes(&plain) + 6);
    }

    #[test]
    fn a_job_still_in_the_bucket_counts_its_object_twice() {
        let mut j = job(json!([]));
        let alone = answer_bytes(&j);
        j.status.payload = Some(PayloadRef {
            key: "k".into(),
            sha256: "0".repeat(64),
            bytes: 1_000,
            unreadable: None,
        });
        let stub = j.to_json().to_string();
        let escapes = stub.bytes().filter(|b| *b == b'"' || *b == b'\\').count();
        assert_eq!(answer_bytes(&j), stub.len() + escapes + 2_000);
        assert!(answer_bytes(&j) > alone + 2_000 - 1);
    }

    #[test]
    fn another_job_only_while_the_largest_still_fits() {
        let bound = AnswerBound {
            bytes: 100,
            reserve: 30,
        };
        assert!(bound.room_for_another(0));
        assert!(bound.room_for_another(70));
        assert!(!bound.room_for_another(71));
        // Even a first job larger than the bound is claimed: it is answered alone.
        let tight = AnswerBound {
            bytes: 10,
            reserve: 30,
        };
        assert!(tight.room_for_another(0));
        assert!(!tight.room_for_another(1));
    }

    #[test]
    fn the_default_leaves_room_for_the_largest_job_after_a_few() {
        let d = AnswerBound::default();
        assert!(d.bytes < LAMBDA_RESPONSE_BYTES);
        // The envelope limit (1 MiB) and DynamoDB's documented item limit (400 KB, counted
        // as 400 KiB), each byte escaped.
        assert_eq!(d.reserve, 2 * (1_048_576 + 409_600));
        assert!(d.room_for_another(d.bytes - d.reserve));
        assert!(!d.room_for_another(d.bytes - d.reserve + 1));
    }
}
