//! Large requests' round trips through the payload bucket ([`crate::payloads`]): the
//! engine's side, which writes a job's item beside its object and reads it back.

use crate::engine::Engine;
use crate::error::StoreError;
use crate::payloads::{body_of, marked_unreadable, PayloadRef, Payloads};
impl Engine {
    /// The job with its `args` and `meta` brought back from the payload bucket when its
    /// item keeps them there (one GET, checked); any other job as it is, without a call.
    /// What must be whole or nothing (FETCH, push delivery) goes through this or
    /// [`Self::try_full_job`]; answers that show a job through
    /// [`Self::shown_job`].
    pub async fn full_job(&self, job: ojs_core::Job) -> Result<ojs_core::Job, StoreError> {
        self.try_full_job(job).await.map_err(|(_, e)| e)
    }

    /// [`Self::full_job`], giving the job back as read when its payload cannot
    /// be brought back: [`StoreError::Corrupt`] for an object missing, cut or tampered
    /// with, [`StoreError::Backend`] for S3 failing (or no bucket configured).
    pub async fn try_full_job(
        &self,
        mut job: ojs_core::Job,
    ) -> Result<ojs_core::Job, (ojs_core::Job, StoreError)> {
        let Some(r) = job.status.payload.clone() else {
            return Ok(job);
        };
        let Some(payloads) = self.payloads.as_ref() else {
            let e = StoreError::Backend(format!(
                "job {} keeps its request in S3, and no OJS_PAYLOAD_BUCKET is configured",
                job.id
            ));
            return Err((job, e));
        };
        match payloads.resolve(job.spec.clone(), &r).await {
            Ok(spec) => {
                job.spec = spec;
                job.status.payload = None;
                Ok(job)
            }
            Err(e) => Err((job, e)),
        }
    }

    /// The job as an answer shows it: whole, or, when its payload cannot be brought back
    /// now, as read with the reason in `status.payload` (its view then says it is
    /// incomplete, `x-ojs-payload`, instead of showing empty `args`). For the answers of
    /// a transition that already took (ACK, FAIL, CANCEL, retry) and for listings, which
    /// one unreadable payload must not turn into an error.
    pub async fn shown_job(&self, job: ojs_core::Job) -> ojs_core::Job {
        match self.try_full_job(job).await {
            Ok(job) => job,
            Err((job, e)) => marked_unreadable(job, &e),
        }
    }

    /// [`Self::shown_job`] of each job, concurrently (S3 GETs only for those with
    /// a reference).
    pub async fn shown_jobs(&self, jobs: Vec<ojs_core::Job>) -> Vec<ojs_core::Job> {
        futures::future::join_all(jobs.into_iter().map(|j| self.shown_job(j))).await
    }

    /// What of a job's request goes to the payload bucket (its `args` and `meta` as the
    /// object's body), or none when it fits its item; [`StoreError::TooLarge`] when it
    /// fits neither (or there is no bucket). Checked before anything is written.
    pub(crate) fn offload_body(&self, job: &ojs_core::Job) -> Result<Option<Vec<u8>>, StoreError> {
        if crate::item::fits_item(job) {
            return Ok(None);
        }
        if self.payloads.is_none() {
            // Without a bucket the limit is the item's.
            crate::item::check_spec_size(job)?;
            return Ok(None);
        }
        let body = body_of(&job.spec);
        crate::item::check_offloaded_size(job, &body)?;
        Ok(Some(body))
    }

    /// The item of a new job, its args and meta put in the payload bucket first when
    /// `body` ([`Self::offload_body`]) says so: the one path of single and batch
    /// PUSH. The object is tagged pending until [`Self::settle_offload`].
    pub(crate) async fn new_job_item(
        &self,
        job: &ojs_core::Job,
        body: Option<Vec<u8>>,
    ) -> Result<(crate::item::Item, Option<PayloadRef>), StoreError> {
        let shards = self.queue_shards();
        match body {
            None => Ok((crate::item::job_to_item(job, shards), None)),
            Some(body) => {
                let r = self.offload(job, body).await?;
                let item = crate::item::offloaded_job_to_item(job, shards, &r);
                Ok((item, Some(r)))
            }
        }
    }

    /// Puts `body` ([`Self::offload_body`]) in the payload bucket, tagged pending.
    pub(crate) async fn offload(
        &self,
        job: &ojs_core::Job,
        body: Vec<u8>,
    ) -> Result<PayloadRef, StoreError> {
        let payloads = self
            .payloads
            .as_ref()
            .ok_or_else(|| StoreError::Backend("no payload bucket configured".into()))?;
        // A key of its own per write: a PUSH refused as a duplicate id must not touch
        // the object of the job that holds the id.
        let key = format!(
            "{}/{}",
            Payloads::key_of(self.table(), &job.id),
            uuid::Uuid::new_v4()
        );
        payloads.put_pending(key, body).await
    }

    /// After the job's write: untags its object when the write took, else deletes it.
    /// Both best effort: what is left is expired by the lifecycle rule (still tagged) or
    /// deleted with the job (untagged and referenced).
    pub(crate) async fn settle_offload(&self, r: Option<&PayloadRef>, written: bool) {
        let (Some(r), Some(payloads)) = (r, &self.payloads) else {
            return;
        };
        let done = if written {
            payloads.confirm(&r.key).await
        } else {
            payloads.delete(&r.key).await
        };
        if let Err(e) = done {
            tracing::warn!(error = %e, key = %r.key, written, "settling a job payload failed");
        }
    }

    /// Deletes the objects of job items the stream saw deleted (best effort, logged).
    pub(crate) async fn delete_payloads(&self, keys: Vec<String>) {
        let Some(payloads) = &self.payloads else {
            if !keys.is_empty() {
                tracing::warn!(
                    count = keys.len(),
                    "deleted jobs keep payloads, and no OJS_PAYLOAD_BUCKET is configured"
                );
            }
            return;
        };
        let deletions = keys.iter().map(|k| payloads.delete(k));
        for (key, done) in keys.iter().zip(futures::future::join_all(deletions).await) {
            if let Err(e) = done {
                tracing::warn!(error = %e, %key, "deleting a deleted job's payload failed");
            }
        }
    }
}
