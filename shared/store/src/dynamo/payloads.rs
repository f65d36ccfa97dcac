//! Job requests too large for their item, kept in S3 (a claim check, issue #32).
//!
//! A job whose request is over [`crate::item::MAX_SPEC_BYTES`] as JSON keeps its `args`
//! and `meta` in an object of the payload bucket, `jobs/<table>/<job id>`; its item keeps
//! the rest of the request (every field a transition reads: queue, priority, retry, rate
//! limit, ...) with empty `args` and `meta`, and `spec_ref` (the object's key),
//! `spec_sha256` (hex) and `spec_bytes` (N). Reads verify the digest and the length: a
//! mismatch is [`StoreError::Corrupt`], never served.
//!
//! Orphans: the object is put tagged `ojs-pending=1` before the job's conditional write;
//! the tag is set to `ojs-pending=0` once that write succeeded, and the object deleted (best effort) when
//! it failed. A process dying in between leaves a tagged object, which the bucket's
//! lifecycle rule expires after a day (infra/template.yaml). A job item's deletion (TTL,
//! purge, dead letter delete) reaches the change stream with its old image, and the
//! stream consumer deletes the object it names ([`crate::Derived::apply_changes`]).

use aws_sdk_s3::operation::delete_object::builders::DeleteObjectFluentBuilder;
use aws_sdk_s3::operation::get_object::builders::GetObjectFluentBuilder;
use aws_sdk_s3::operation::get_object_tagging::builders::GetObjectTaggingFluentBuilder;
use aws_sdk_s3::operation::head_object::builders::HeadObjectFluentBuilder;
use aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder;
use aws_sdk_s3::operation::put_object_tagging::builders::PutObjectTaggingFluentBuilder;
use aws_sdk_s3::primitives::ByteStream;
use ojs_core::job::JobSpec;
use ojs_core::JobId;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::StoreError;

/// The tag an object carries until its job's item is written.
pub(crate) const PENDING_TAG: &str = "ojs-pending=1";

/// The key prefix every object of the store is under (the IAM policies name it).
pub(crate) const KEY_PREFIX: &str = "jobs/";

/// Largest stored request: the envelope limit (1 MiB, ojs_core::validate) with room for
/// what the store adds; one job must also fit a Lambda answer (6 MB).
pub(crate) const MAX_OFFLOADED_BYTES: usize = 4 * 1024 * 1024;

/// Where a job's args and meta are kept, as its item records it (core's type: a job read
/// from its item carries it in `status.payload` until [`crate::Engine::full_job`] brings
/// the args and meta back, and its view says it is incomplete meanwhile).
pub(crate) use ojs_core::job::PayloadRef;

/// The job attribute naming the object.
pub(crate) const REF_ATTR: &str = "spec_ref";
/// The job attribute holding the object's SHA-256.
pub(crate) const SHA_ATTR: &str = "spec_sha256";
/// The job attribute holding the object's length.
pub(crate) const BYTES_ATTR: &str = "spec_bytes";

/// SHA-256 of `bytes` as lower-case hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The object body of a request: its `args` and `meta` as JSON.
pub(crate) fn body_of(spec: &JobSpec) -> Vec<u8> {
    serde_json::json!({"args": spec.args, "meta": spec.meta})
        .to_string()
        .into_bytes()
}

/// The request as its item keeps it: without `args` and `meta`, but for a valid
/// `traceparent` in `meta` (55 bytes), so that the change stream's line of a traced job
/// names its trace without reading the object ([`merge`] puts the whole `meta` back).
pub(crate) fn skeleton_of(spec: &JobSpec) -> JobSpec {
    let mut skeleton = spec.clone();
    skeleton.args = Vec::new();
    skeleton.meta = Map::new();
    if ojs_core::trace::of_meta(&spec.meta).is_some() {
        if let Some(tp) = spec.meta.get(ojs_core::trace::TRACEPARENT) {
            skeleton
                .meta
                .insert(ojs_core::trace::TRACEPARENT.to_owned(), tp.clone());
        }
    }
    // The tenant stays on the item: its lane, isolation and counters are decided on
    // reads that never fetch the object.
    if let Some(tenant) = ojs_core::tenant::of_meta(&spec.meta) {
        skeleton.meta.insert(
            ojs_core::tenant::META_KEY.to_owned(),
            serde_json::Value::String(tenant.to_string()),
        );
    }
    skeleton
}

/// The full request: `skeleton` (the item's) with the object's `args` and `meta`, once
/// the object is checked against `r`.
pub(crate) fn merge(
    mut skeleton: JobSpec,
    r: &PayloadRef,
    body: &[u8],
) -> Result<JobSpec, StoreError> {
    let corrupt = |why: &str| StoreError::Corrupt(format!("payload {}: {why}", r.key));
    if body.len() as u64 != r.bytes {
        return Err(corrupt("its length differs from the job's record"));
    }
    if sha256_hex(body) != r.sha256 {
        return Err(corrupt("its SHA-256 differs from the job's record"));
    }
    let Ok(Value::Object(mut parts)) = serde_json::from_slice::<Value>(body) else {
        return Err(corrupt("not a JSON object"));
    };
    match (parts.remove("args"), parts.remove("meta")) {
        (Some(Value::Array(args)), Some(Value::Object(meta))) => {
            skeleton.args = args;
            skeleton.meta = meta;
        }
        _ => return Err(corrupt("no args and meta")),
    }
    Ok(skeleton)
}

/// Builders of requests on one object of the bucket, each `name: the client's operation
/// -> its builder`.
macro_rules! on_an_object {
    ($($(#[$doc:meta])* $name:ident: $operation:ident -> $builder:ty;)*) => {$(
        $(#[$doc])*
        fn $name(&self, key: &str) -> $builder {
            self.client.$operation().bucket(&self.bucket).key(key)
        }
    )*};
}

/// The payload bucket: put, get and delete of job requests.
#[derive(Clone, Debug)]
pub struct Payloads {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl Payloads {
    on_an_object! {
        /// A PutObject at `key`.
        put_at: put_object -> PutObjectFluentBuilder;
        /// A GetObject of `key`.
        get_at: get_object -> GetObjectFluentBuilder;
        /// A HeadObject of `key`.
        head_at: head_object -> HeadObjectFluentBuilder;
        /// A DeleteObject of `key`.
        delete_at: delete_object -> DeleteObjectFluentBuilder;
        /// A PutObjectTagging of `key`.
        put_tags_at: put_object_tagging -> PutObjectTaggingFluentBuilder;
        /// A GetObjectTagging of `key`.
        get_tags_at: get_object_tagging -> GetObjectTaggingFluentBuilder;
    }

    /// Payloads kept in `bucket` through `client`.
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    /// An S3 client from the standard AWS environment; path-style addressing when an
    /// endpoint is overridden (a local S3 such as moto has no per-bucket host names).
    pub fn client_from_env(sdk: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
        let overridden = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
            .iter()
            .any(|k| std::env::var(k).is_ok_and(|v| !v.is_empty()));
        let conf = aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(overridden)
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key of `id`'s object for the table `table`.
    pub(crate) fn key_of(table: &str, id: &JobId) -> String {
        format!("{KEY_PREFIX}{table}/{id}")
    }

    /// Creates the bucket unless it exists (local use and tests).
    pub async fn ensure_bucket(&self) -> Result<(), StoreError> {
        if self
            .client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .is_ok()
        {
            return Ok(());
        }
        match self
            .client
            .create_bucket()
            .bucket(&self.bucket)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error().is_some_and(|s| {
                    s.is_bucket_already_owned_by_you() || s.is_bucket_already_exists()
                }) =>
            {
                Ok(())
            }
            Err(e) => Err(backend("create bucket", e)),
        }
    }

    /// Puts `body` at `key`, tagged pending.
    pub(crate) async fn put_pending(
        &self,
        key: String,
        body: Vec<u8>,
    ) -> Result<PayloadRef, StoreError> {
        let r = PayloadRef {
            sha256: sha256_hex(&body),
            bytes: body.len() as u64,
            key,
            unreadable: None,
        };
        self.put_at(&r.key)
            .content_type("application/json")
            .tagging(PENDING_TAG)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| backend("put", e))?;
        Ok(r)
    }

    /// Marks an object whose job is written as no longer pending (`ojs-pending=0`).
    pub(crate) async fn confirm(&self, key: &str) -> Result<(), StoreError> {
        // The tag set replaced by `ojs-pending=0` rather than removed: one IAM action
        // (s3:PutObjectTagging) serves both the tagged PutObject and this, and moto
        // refuses an empty tag set.
        let tag = aws_sdk_s3::types::Tag::builder()
            .key("ojs-pending")
            .value("0")
            .build()
            .map_err(|e| StoreError::Backend(format!("S3 tagging: {e}")))?;
        let written = aws_sdk_s3::types::Tagging::builder()
            .tag_set(tag)
            .build()
            .map_err(|e| StoreError::Backend(format!("S3 tagging: {e}")))?;
        self.put_tags_at(key)
            .tagging(written)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| backend("untag", e))
    }

    /// The object of `r`, checked against it, merged into `skeleton`.
    pub(crate) async fn resolve(
        &self,
        skeleton: JobSpec,
        r: &PayloadRef,
    ) -> Result<JobSpec, StoreError> {
        let out = self.get_at(&r.key).send().await.map_err(|e| {
            if e.as_service_error().is_some_and(|s| s.is_no_such_key()) {
                StoreError::Corrupt(format!("payload {} is missing", r.key))
            } else {
                backend("get", e)
            }
        })?;
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::Backend(format!("S3 get: {e}")))?
            .into_bytes();
        merge(skeleton, r, &body)
    }

    /// Deletes the object at `key` (deleting a missing one succeeds).
    pub(crate) async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.delete_at(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| backend("delete", e))
    }

    /// Overwrites the object at `key` (tests: a tampered payload).
    #[doc(hidden)]
    pub async fn overwrite(&self, key: &str, body: Vec<u8>) -> Result<(), StoreError> {
        self.put_at(key)
            .body(ByteStream::from(body))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| backend("put", e))
    }

    /// Deletes the object at `key` (tests: a lost payload).
    #[doc(hidden)]
    pub async fn remove(&self, key: &str) -> Result<(), StoreError> {
        self.delete(key).await
    }

    /// The keys of the objects under `prefix`, up to 1,000 (tests).
    #[doc(hidden)]
    pub async fn keys_under(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .send()
            .await
            .map_err(|e| backend("list", e))?;
        Ok(out
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect())
    }

    /// Whether an object exists at `key` (tests).
    #[doc(hidden)]
    pub async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        match self.head_at(key).send().await {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
            Err(e) => Err(backend("head", e)),
        }
    }

    /// The tags of the object at `key` as `k=v` (tests).
    #[doc(hidden)]
    pub async fn tags(&self, key: &str) -> Result<Vec<String>, StoreError> {
        let out = self
            .get_tags_at(key)
            .send()
            .await
            .map_err(|e| backend("get tags", e))?;
        Ok(out
            .tag_set()
            .iter()
            .map(|t| format!("{}={}", t.key(), t.value()))
            .collect())
    }
}

/// `job` (whose payload could not be brought back for `e`) with the reason recorded, as
/// its view shows it: without the bucket's key or the cause's details (logged here).
pub(crate) fn marked_unreadable(mut job: ojs_core::Job, e: &StoreError) -> ojs_core::Job {
    tracing::warn!(job_id = %job.id, error = %e, "a job's payload could not be read");
    if let Some(p) = &mut job.status.payload {
        p.unreadable = Some(unreadable_reason(e).to_owned());
    }
    job
}

/// What a user is told of a payload that could not be read.
pub(crate) fn unreadable_reason(e: &StoreError) -> &'static str {
    match e {
        StoreError::Corrupt(_) => {
            "the job's args and meta, kept in the payload store, are missing or damaged"
        }
        _ => "the payload store could not be read; the job's args and meta are not shown",
    }
}

fn backend<E: std::fmt::Debug>(what: &str, e: E) -> StoreError {
    StoreError::Backend(format!("S3 {what}: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::NewJob;
    use serde_json::json;

    fn spec() -> JobSpec {
        NewJob::from_json(json!({"type": "a.b", "args": [1, "x"], "meta": {"m": true},
            "options": {"queue": "q", "priority": 3}}))
        .map(|n| n.spec)
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The record of `body` kept at a test key.
    fn ref_of(body: &[u8]) -> PayloadRef {
        PayloadRef {
            key: "jobs/t/1".into(),
            sha256: sha256_hex(body),
            bytes: body.len() as u64,
            unreadable: None,
        }
    }

    #[test]
    fn a_request_split_into_skeleton_and_body_comes_back_whole() {
        let full = spec();
        let body = body_of(&full);
        let r = ref_of(&body);
        let skeleton = skeleton_of(&full);
        assert!(skeleton.args.is_empty() && skeleton.meta.is_empty());
        assert_eq!(merge(skeleton, &r, &body).ok(), Some(full));
    }

    #[test]
    fn a_skeleton_keeps_the_tenant_of_its_job() {
        let mut full = spec();
        full.meta
            .insert("tenant_id".into(), serde_json::json!("acme"));
        full.meta.insert("other".into(), serde_json::json!(1));
        let skeleton = skeleton_of(&full);
        assert_eq!(
            serde_json::Value::Object(skeleton.meta),
            serde_json::json!({"tenant_id": "acme"})
        );
    }

    #[test]
    fn a_tampered_or_cut_body_is_corrupt() {
        let full = spec();
        let body = body_of(&full);
        let r = ref_of(&body);
        let mut tampered = body.clone();
        tampered[10] ^= 1;
        for bad in [tampered, body[..body.len() - 1].to_vec(), Vec::new()] {
            assert!(matches!(
                merge(skeleton_of(&full), &r, &bad),
                Err(StoreError::Corrupt(_))
            ));
        }
    }

    #[test]
    fn digest_is_the_standard_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
