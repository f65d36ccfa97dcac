//! The one place that maps jobs to DynamoDB items and back.
//!
//! Layout of a job item (`pk = JOB#<id>`, `sk = JOB`):
//! - `spec` (S): the immutable request as canonical JSON, or `specz` (B) the same JSON
//!   deflated when that is smaller ([`spec_attribute`]): a write is billed per KB of the
//!   whole item, and every transition rewrites it, so 1 KiB of args is paid at every step;
//! - `state`, `queue`, `attempt`, `version`, timestamps (S, RFC 3339), `lease_until` and
//!   `expires_us` (N, epoch microseconds), `worker_id`;
//! - `result`, `error` (S, JSON) and `errors` (L of S, JSON), so a transition can set or
//!   append them without rewriting the spec; `progress` (S, JSON), a worker's last report;
//! - `ckpt` (S, JSON), `ckpt_seq` (N), `ckpt_at` (S): the latest checkpoint
//!   (ojs-durable-execution.md), removed by every write to a terminal state
//!   ([`CHECKPOINT_ATTRS`]);
//! - `gsi1pk`/`gsi1sk` only while `available`, `gsi2pk`/`gsi2sk` only while the job waits
//!   for a time (scheduled, retryable, active lease);
//! - `ttl` (N, epoch seconds) once terminal;
//! - `write_id` (S): a random id written by each claim, ACK and CANCEL, so that when the
//!   SDK retries one of them after its answer was lost, the retry knows its own write.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use ojs_core::job::{JobSpec, JobStatus};
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, JobState};
use serde_json::Value;

use crate::error::StoreError;
use crate::keys;
use crate::payloads::{self, PayloadRef};

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn ts(t: &Timestamp) -> AttributeValue {
    s(time::format(t))
}

pub(crate) fn json(v: &Value) -> AttributeValue {
    s(v.to_string())
}

/// An upper bound of an item's size as DynamoDB counts it (attribute names plus values;
/// a number at most its text plus one, containers 3 bytes plus 1 per element), for
/// keeping a transaction under its 4 MB.
pub(crate) fn size_bound(item: &Item) -> usize {
    fn value(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) | AttributeValue::N(s) => s.len() + 1,
            AttributeValue::B(b) => b.as_ref().len(),
            AttributeValue::Ss(v) | AttributeValue::Ns(v) => v.iter().map(|s| s.len() + 1).sum(),
            AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
            AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + value(v)).sum::<usize>(),
            AttributeValue::M(m) => {
                3 + m.iter().map(|(k, v)| 1 + k.len() + value(v)).sum::<usize>()
            }
            _ => 1,
        }
    }
    item.iter().map(|(k, v)| k.len() + value(v)).sum()
}

/// The key under which a stored error entry keeps the write id of the failure that
/// appended it; never shown (see [`unmarked`]).
pub(crate) const WRITE_MARK: &str = "~write";

/// An error entry as shown: without its write mark.
fn unmarked(mut error: Value) -> Value {
    if let Value::Object(e) = &mut error {
        e.remove(WRITE_MARK);
    }
    error
}

/// Whether an error entry of `item`'s history was appended by the write `wid`.
pub(crate) fn has_error_written_by(item: &Item, wid: &AttributeValue) -> bool {
    let Ok(wid) = wid.as_s() else { return false };
    let mark = serde_json::json!({ WRITE_MARK: wid }).to_string();
    let mark = mark.trim_start_matches('{').trim_end_matches('}');
    item.get("errors")
        .and_then(|v| v.as_l().ok())
        .is_some_and(|list| {
            list.iter()
                .any(|e| e.as_s().is_ok_and(|raw| raw.contains(mark)))
        })
}

/// The primary key of the item at `pk` / `sk`.
pub(crate) fn item_key(pk: impl Into<String>, sk: impl Into<String>) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

/// The primary key of a job.
pub(crate) fn job_key(id: &JobId) -> Item {
    item_key(keys::job_pk(id), keys::JOB_SK)
}

/// Largest request kept in its item (the `spec` attribute, as JSON), leaving the rest of
/// DynamoDB's 400 KB item to the status, the result and the error history. A larger one
/// keeps its `args` and `meta` in the payload bucket ([`crate::payloads`]), so every job
/// that fits today is stored exactly as before, without an S3 call.
pub const MAX_SPEC_BYTES: usize = 256 * 1024;

/// Requests at least this long (as JSON) are stored deflated when that saves space.
const DEFLATE_FROM_BYTES: usize = 384;

/// The stored form of a job's request: `spec` (S, JSON) or `specz` (B, deflated JSON),
/// whichever is smaller. Deflate level 6 takes ~10 µs per KiB; real JSON args shrink about
/// 2-4x, which keeps a job with 1 KiB of args under the 1 KB write unit. Readers accept
/// both, so items written before stay readable.
pub(crate) fn spec_attribute(spec: &JobSpec) -> (&'static str, AttributeValue) {
    let text = Value::Object(spec.to_json()).to_string();
    if text.len() >= DEFLATE_FROM_BYTES {
        let packed = miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 6);
        if packed.len() < text.len() {
            return (
                SPEC_DEFLATED,
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(packed)),
            );
        }
    }
    (SPEC_JSON, s(text))
}

/// The attribute holding the request as JSON text.
pub(crate) const SPEC_JSON: &str = "spec";
/// The attribute holding the request as deflated JSON.
pub(crate) const SPEC_DEFLATED: &str = "specz";

/// The request of a job item, from whichever attribute holds it.
fn spec_of(item: &Item) -> Result<Option<Value>, StoreError> {
    if let Some(raw) = get_json(item, SPEC_JSON)? {
        return Ok(Some(raw));
    }
    let Some(packed) = item.get(SPEC_DEFLATED).and_then(|v| v.as_b().ok()) else {
        return Ok(None);
    };
    // The limit guards against a corrupt blob inflating without end; a stored request
    // is at most MAX_SPEC_BYTES.
    let text =
        miniz_oxide::inflate::decompress_to_vec_with_limit(packed.as_ref(), 2 * MAX_SPEC_BYTES)
            .map_err(|e| StoreError::Corrupt(format!("{SPEC_DEFLATED}: {e:?}")))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| StoreError::Corrupt(format!("{SPEC_DEFLATED}: {e}")))
}

/// Whether a job's request fits its item ([`MAX_SPEC_BYTES`]).
pub(crate) fn fits_item(job: &Job) -> bool {
    ojs_core::validate::json_size(&Value::Object(job.spec.to_json())) <= MAX_SPEC_BYTES
}

/// Refuses a job whose request would be too large for the payload bucket, or whose
/// request without `args` and `meta` would still crowd its item.
pub(crate) fn check_offloaded_size(job: &Job, body: &[u8]) -> Result<(), StoreError> {
    let rest = payloads::skeleton_of(&job.spec);
    let rest = ojs_core::validate::json_size(&Value::Object(rest.to_json()));
    let size = body.len() + rest;
    if size > payloads::MAX_OFFLOADED_BYTES || rest > MAX_SPEC_BYTES {
        return Err(StoreError::TooLarge(format!(
            "job {} is {size} bytes stored ({rest} outside args and meta); the limits are {} \
             and {MAX_SPEC_BYTES}",
            job.id,
            payloads::MAX_OFFLOADED_BYTES
        )));
    }
    Ok(())
}

/// Refuses a job whose request alone would crowd its item (fields such as `tags` or
/// `unique` have no limit of their own below the 1 MiB body).
pub(crate) fn check_spec_size(job: &Job) -> Result<(), StoreError> {
    let size = ojs_core::validate::json_size(&Value::Object(job.spec.to_json()));
    if size > MAX_SPEC_BYTES {
        return Err(StoreError::TooLarge(format!(
            "job {} is {size} bytes stored; the limit is {MAX_SPEC_BYTES}",
            job.id
        )));
    }
    Ok(())
}

/// The full item of a freshly enqueued job.
pub(crate) fn job_to_item(job: &Job, shards: u16) -> Item {
    let (attr, spec) = spec_attribute(&job.spec);
    item_with_spec(job, shards, attr, spec)
}

/// The full item of a freshly enqueued job whose `args` and `meta` are kept at `r`.
pub(crate) fn offloaded_job_to_item(job: &Job, shards: u16, r: &PayloadRef) -> Item {
    let (attr, spec) = spec_attribute(&payloads::skeleton_of(&job.spec));
    let mut item = item_with_spec(job, shards, attr, spec);
    item.insert(payloads::REF_ATTR.into(), s(&r.key));
    item.insert(payloads::SHA_ATTR.into(), s(&r.sha256));
    item.insert(payloads::BYTES_ATTR.into(), n(r.bytes));
    item
}

/// The payload reference a job item keeps, if any.
pub(crate) fn payload_ref_of(item: &Item) -> Option<PayloadRef> {
    Some(PayloadRef {
        key: get_s(item, payloads::REF_ATTR)?.to_owned(),
        sha256: get_s(item, payloads::SHA_ATTR)?.to_owned(),
        bytes: get_n(item, payloads::BYTES_ATTR)?,
        unreadable: None,
    })
}

fn item_with_spec(job: &Job, shards: u16, attr: &str, spec: AttributeValue) -> Item {
    let st = &job.status;
    let shard = keys::shard_of(&job.id, shards);
    let mut item = job_key(&job.id);
    item.insert(attr.into(), spec);
    item.insert("state".into(), s(st.state.as_str()));
    item.insert("queue".into(), s(job.spec.queue.as_str()));
    item.insert("attempt".into(), n(st.attempt));
    item.insert("version".into(), n(st.version));
    item.insert("created_at".into(), ts(&st.created_at));
    if let Some(t) = &st.enqueued_at {
        item.insert("enqueued_at".into(), ts(t));
    }
    if let Some(t) = &job.spec.expires_at {
        item.insert("expires_us".into(), n(t.timestamp_micros()));
    }
    // Projected into the ready index so a claim can set the job's own lease and deadline.
    if let Some(ms) = job.spec.visibility_timeout_ms {
        item.insert("lease_ms".into(), n(ms));
    }
    if let Some(ms) = job.spec.timeout_ms.filter(|ms| *ms > 0) {
        item.insert("timeout_ms".into(), n(ms));
    }
    if let Some(rl) = &job.spec.rate_limit {
        item.insert("rl".into(), json(rl));
    }
    match st.state {
        JobState::Available => {
            let at = st.enqueued_at.unwrap_or(st.created_at);
            item.insert(
                "gsi1pk".into(),
                s(keys::ready_pk(&keys::Lane::of(job), shard)),
            );
            item.insert(
                "gsi1sk".into(),
                s(keys::ready_sk(job.spec.priority, &at, &job.id)),
            );
            // The sweep discards it at its expiry even if nobody fetches the queue.
            if let Some(expires) = &job.spec.expires_at {
                item.insert("gsi2pk".into(), s(keys::due_pk(&job.spec.queue, shard)));
                item.insert("gsi2sk".into(), s(keys::job_due_sk(job, expires)));
            }
        }
        JobState::Scheduled => {
            if let Some(at) = &job.spec.scheduled_at {
                item.insert("gsi2pk".into(), s(keys::due_pk(&job.spec.queue, shard)));
                item.insert("gsi2sk".into(), s(keys::job_due_sk(job, at)));
            }
        }
        _ => {}
    }
    item
}

/// The string attribute `key` of `item`, if it is one.
pub(crate) fn get_s<'a>(item: &'a Item, key: &str) -> Option<&'a str> {
    item.get(key)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn get_n<T: std::str::FromStr>(item: &Item, key: &str) -> Option<T> {
    item.get(key)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

fn get_ts(item: &Item, key: &str) -> Result<Option<Timestamp>, StoreError> {
    get_s(item, key)
        .map(|raw| time::parse(raw, key).map_err(StoreError::corrupt))
        .transpose()
}

/// The attributes of a job's checkpoint (see the module docs).
pub(crate) const CHECKPOINT_ATTRS: [&str; 3] = ["ckpt", "ckpt_seq", "ckpt_at"];

/// The checkpoint an item holds, if any.
pub(crate) fn checkpoint_of(
    item: &Item,
) -> Result<Option<ojs_core::checkpoint::Checkpoint>, StoreError> {
    let Some(state) = get_json(item, "ckpt")? else {
        return Ok(None);
    };
    let corrupt = |what: &str| StoreError::Corrupt(format!("checkpoint without {what}"));
    Ok(Some(ojs_core::checkpoint::Checkpoint {
        state,
        sequence: get_n(item, "ckpt_seq").ok_or_else(|| corrupt("ckpt_seq"))?,
        created_at: get_ts(item, "ckpt_at")?.ok_or_else(|| corrupt("ckpt_at"))?,
    }))
}

fn get_json(item: &Item, key: &str) -> Result<Option<Value>, StoreError> {
    get_s(item, key)
        .map(|raw| {
            serde_json::from_str(raw).map_err(|e| StoreError::Corrupt(format!("{key}: {e}")))
        })
        .transpose()
}

/// A list attribute of job ids.
pub(crate) fn job_id_list<'a>(ids: impl IntoIterator<Item = &'a JobId>) -> AttributeValue {
    AttributeValue::L(ids.into_iter().map(|id| s(id.to_string())).collect())
}

/// The job ids the list attribute `name` of `item` holds (none without it), skipping an
/// entry that is not one.
pub(crate) fn job_ids_of(item: &Item, name: &str) -> Vec<JobId> {
    item.get(name)
        .and_then(|v| v.as_l().ok())
        .map(|l| {
            l.iter()
                .filter_map(|v| v.as_s().ok())
                .filter_map(|raw| JobId::parse(raw).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The state recorded in an item, if it has a readable one.
pub(crate) fn state_of(item: &Item) -> Option<JobState> {
    get_s(item, "state").and_then(|s| s.parse().ok())
}

/// The JSON values list attribute `name` of a job item holds, each stored as a string
/// (none without the attribute); an entry that does not read is corrupt.
fn json_list(item: &Item, name: &str) -> Result<Vec<Value>, StoreError> {
    let Some(list) = item.get(name).and_then(|v| v.as_l().ok()) else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|v| {
            v.as_s()
                .ok()
                .and_then(|raw| serde_json::from_str(raw).ok())
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("job item without a valid {name} entry"))
                })
        })
        .collect()
}

/// Maps a job item back to the model.
pub(crate) fn job_from_item(item: &Item) -> Result<Job, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("job item without a valid {what}"));
    let id = get_s(item, "pk")
        .and_then(|pk| pk.strip_prefix("JOB#"))
        .and_then(|raw| JobId::parse(raw).ok())
        .ok_or_else(|| corrupt("pk"))?;
    let spec_json = spec_of(item)?.ok_or_else(|| corrupt("spec"))?;
    let spec = JobSpec::from_stored(spec_json).map_err(StoreError::corrupt)?;
    // Args and meta kept in the payload bucket: the job says where, and `Engine::full_job`
    // brings them (a half reference is corrupt, never an empty job).
    let payload = match item.contains_key(payloads::REF_ATTR) {
        true => Some(payload_ref_of(item).ok_or_else(|| corrupt("payload reference"))?),
        false => None,
    };
    let errors = json_list(item, "errors")?
        .into_iter()
        .map(unmarked)
        .collect();
    let parent_results = json_list(item, "parent_results")?;
    let status = JobStatus {
        state: state_of(item).ok_or_else(|| corrupt("state"))?,
        attempt: get_n(item, "attempt").ok_or_else(|| corrupt("attempt"))?,
        created_at: get_ts(item, "created_at")?.ok_or_else(|| corrupt("created_at"))?,
        enqueued_at: get_ts(item, "enqueued_at")?,
        started_at: get_ts(item, "started_at")?,
        completed_at: get_ts(item, "completed_at")?,
        cancelled_at: get_ts(item, "cancelled_at")?,
        cancelled_from: get_s(item, "cancelled_from").and_then(|s| s.parse().ok()),
        discarded_at: get_ts(item, "discarded_at")?,
        next_attempt_at: get_ts(item, "next_attempt_at")?,
        retry_delay_ms: get_n(item, "retry_delay_ms"),
        deadline: get_n::<i64>(item, "deadline_us").and_then(time::from_micros),
        dead_letter: item.get("dead_sk").is_some_and(|v| v.as_s().is_ok()),
        workflow_id: get_s(item, "wf_id").map(str::to_owned),
        workflow_step: get_n(item, "wf_step"),
        workflow_callback: get_s(item, "wf_cb").map(str::to_owned),
        successor: get_s(item, "next_job").map(str::to_owned),
        parent_results,
        worker_id: get_s(item, "worker_id").map(str::to_owned),
        lease_until: get_n::<i64>(item, "lease_until").and_then(time::from_micros),
        result: get_json(item, "result")?,
        error: get_json(item, "error")?.map(unmarked),
        errors,
        progress: get_json(item, "progress")?
            .as_ref()
            .and_then(ojs_core::progress::Progress::from_stored),
        checkpoint: checkpoint_of(item)?,
        version: get_n(item, "version").ok_or_else(|| corrupt("version"))?,
        payload,
    };
    Ok(Job { id, spec, status })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::NewJob;
    use serde_json::json;

    fn job_with_args(args: Value) -> Job {
        let new = NewJob::from_json(json!({"type": "orders.ship", "args": args}))
            .unwrap_or_else(|e| panic!("{e}"));
        Job::enqueue(new, time::now())
    }

    #[test]
    fn small_requests_stay_json_and_large_ones_are_deflated_and_read_back() {
        let small = job_with_args(json!([1, "two"]));
        let item = job_to_item(&small, 1);
        assert!(item.contains_key(SPEC_JSON) && !item.contains_key(SPEC_DEFLATED));
        assert_eq!(job_from_item(&item).ok(), Some(small));

        let lines: Vec<Value> = (0..12)
            .map(|i| {
                json!({"sku": format!("SKU-{}", 40_000 + i * 37), "qty": i % 4 + 1,
                "price": format!("{}.{:02}", 10 + i * 3, i * 7 % 100), "warehouse": "eu-central"})
            })
            .collect();
        let large = job_with_args(json!([{"order": "ord_7f3a91", "lines": lines}]));
        let text_len = Value::Object(large.spec.to_json()).to_string().len();
        let item = job_to_item(&large, 1);
        let packed = item
            .get(SPEC_DEFLATED)
            .and_then(|v| v.as_b().ok())
            .map(|b| b.as_ref().len());
        assert!(!item.contains_key(SPEC_JSON));
        assert!(
            packed.is_some_and(|p| p * 2 < text_len),
            "{packed:?} of {text_len}"
        );
        assert_eq!(job_from_item(&item).ok(), Some(large));
    }

    #[test]
    fn an_offloaded_job_keeps_its_reference_and_is_read_marked() {
        let mut job = job_with_args(json!([]));
        job.spec.args = vec![Value::String("x".repeat(MAX_SPEC_BYTES))];
        assert!(!fits_item(&job));
        let r = PayloadRef {
            key: "jobs/t/id/u".into(),
            sha256: "00".into(),
            bytes: 7,
            unreadable: None,
        };
        let item = offloaded_job_to_item(&job, 1, &r);
        assert_eq!(payload_ref_of(&item), Some(r.clone()));
        assert!(size_bound(&item) < 4096, "the args stayed in the item");
        let read = job_from_item(&item).unwrap_or_else(|e| panic!("{e}"));
        assert!(read.spec.args.is_empty());
        assert_eq!(read.status.payload, Some(r));
        // Its view says it is incomplete; no empty args that look like the job's own.
        let view = read.to_json();
        assert!(view.get("args").is_none() && view.get("meta").is_none());
        assert_eq!(view["x-ojs-payload"]["resolved"], json!(false));
        assert!(
            !view.to_string().contains("jobs/t/id/u"),
            "the key is shown"
        );
        // A reference without its digest is corrupt, not an empty job.
        let mut half = item.clone();
        half.remove(payloads::SHA_ATTR);
        assert!(matches!(job_from_item(&half), Err(StoreError::Corrupt(_))));
        assert!(fits_item(&job_with_args(json!([1]))));
    }

    #[test]
    fn a_corrupt_deflated_request_is_reported_not_guessed() {
        let job = job_with_args(Value::Array(vec![json!("a"); 200]));
        let mut item = job_to_item(&job, 1);
        assert!(item.contains_key(SPEC_DEFLATED));
        item.insert(
            SPEC_DEFLATED.into(),
            AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(vec![0xff; 40])),
        );
        assert!(matches!(job_from_item(&item), Err(StoreError::Corrupt(_))));
        item.remove(SPEC_DEFLATED);
        assert!(matches!(job_from_item(&item), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn round_trip_of_a_fresh_job() {
        let new = NewJob::from_json(json!({
            "type": "a.b", "args": [1, {"x": [true, null]}], "meta": {"m": 1},
            "options": {"queue": "q", "priority": 5, "expires_at": "2030-01-01T00:00:00Z"}, "x_ext": "kept"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let job = Job::enqueue(new, time::now());
        let item = job_to_item(&job, 1);
        // Ready now, and due at its expiry so the sweep can discard it unfetched.
        assert!(item.contains_key("gsi1pk") && item.contains_key("gsi2pk"));
        assert_eq!(job_from_item(&item).ok(), Some(job));
    }

    #[test]
    fn scheduled_job_is_in_the_due_index_only() {
        let new = NewJob::from_json(
            json!({"type": "a", "args": [], "scheduled_at": "2099-01-01T00:00:00Z"}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let item = job_to_item(&Job::enqueue(new, time::now()), 1);
        assert!(item.contains_key("gsi2pk") && !item.contains_key("gsi1pk"));
    }

    #[test]
    fn ids_read_back_in_order_and_skip_what_is_not_an_id() {
        let a = JobId::generate();
        let b = JobId::generate();
        let mut item = Item::new();
        item.insert("ids".into(), job_id_list(&[a, b]));
        assert_eq!(job_ids_of(&item, "ids"), vec![a, b]);
        item.insert(
            "ids".into(),
            AttributeValue::L(vec![s("junk"), s(b.to_string())]),
        );
        assert_eq!(job_ids_of(&item, "ids"), vec![b]);
        assert_eq!(job_ids_of(&item, "answer_ids"), Vec::<JobId>::new());
    }

    #[test]
    fn a_failure_knows_its_own_error_entry_and_nobody_sees_the_mark() {
        let wid = s("w1");
        let marked = serde_json::json!({"type": "x", "message": "m", WRITE_MARK: "w1"});
        let other = serde_json::json!({"type": "x", "message": "m", WRITE_MARK: "w2"});
        let item = Item::from([(
            "errors".to_owned(),
            AttributeValue::L(vec![json(&other), json(&marked)]),
        )]);
        assert!(has_error_written_by(&item, &wid));
        assert!(
            !has_error_written_by(&item, &s("w")),
            "a prefix is not a match"
        );
        assert!(!has_error_written_by(&Item::new(), &wid));
        let shown = unmarked(marked);
        assert_eq!(shown, serde_json::json!({"type": "x", "message": "m"}));
    }
}
