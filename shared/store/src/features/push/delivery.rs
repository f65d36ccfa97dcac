//! Push delivery: the claim of one job for a delivery to an endpoint, its endpoint's
//! in-flight slot, and the nudges that put jobs left waiting back on the change stream.

use ojs_core::rate_limit::RateLimitPolicy;
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, JobState, QueueName};

use super::{PushEndpoints, PushEntry};
use crate::effects::{Moved, OwingError};
use crate::engine::candidates::Candidate;
use crate::engine::claim_attempt::LaneClaim;
use crate::error::StoreError;
use crate::features::follow_ups::follow;
use crate::item::{self, s};

/// How much longer than its delivery timeout a pushed job's lease (and its endpoint slot)
/// lasts: if the dispatcher dies mid-delivery, the lease ends and the sweep retries it.
const LEASE_MARGIN_MS: u64 = 10_000;

/// The mark a nudge sets on a waiting job's item ([`PushEndpoints::nudge_waiting`]): the
/// write puts the job on the change stream again, where the dispatcher takes it as ready.
const NUDGED: &str = "nudged_us";
/// How long a job of a pushed type waits before the scheduler nudges it (longer than any
/// dispatch the stream itself started would take to claim it).
pub const PUSH_NUDGE_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(30);
/// Most jobs of one queue a nudge marks: a delivery that ends catches up on the rest.
const NUDGE_PER_QUEUE: usize = 10;

/// What [`PushEndpoints::claim_ready`] came to.
#[derive(Debug, Clone)]
pub enum PushClaim {
    /// The job, active under the endpoint's worker id, with one of its slots.
    Claimed { job: Box<Job>, slot: SlotHold },
    /// Every slot of the endpoint is held: another endpoint may take the job.
    Full,
    /// The job is not to be delivered now (no longer available, its queue paused, a rate
    /// limit refusing it): no other endpoint needs to try.
    NotNow,
}

/// One in-flight slot of an endpoint, held for one delivery: give it back with
/// [`PushEndpoints::release_hold`]. Each take has its own holder entry, so a second dispatch
/// of the same job (the stream's and a catch-up's), whose claim loses, gives back only the
/// slot it took itself.
#[derive(Debug, Clone)]
pub struct SlotHold(String);

/// A job the change stream saw become available, as much as its claim needs.
#[derive(Debug, Clone)]
pub struct ReadyJob {
    /// The job as written.
    pub job: Job,
    ready_sk: String,
}

impl crate::stream::Change {
    /// The job this change made available (created available, promoted, retried,
    /// released), if any: a new image in `available` with a ready-index entry that the old
    /// image did not have, or one a nudge marked ([`PushEndpoints::nudge_waiting`]).
    pub fn ready_job(&self) -> Option<ReadyJob> {
        let new = self.new.as_ref()?;
        if item::state_of(new) != Some(JobState::Available) {
            return None;
        }
        let ready_sk = new.get("gsi1sk")?.as_s().ok()?.clone();
        let old = self.old.as_ref();
        let was_ready = old
            .and_then(|o| o.get("gsi1sk"))
            .and_then(|v| v.as_s().ok())
            == Some(&ready_sk);
        let nudged =
            new.get(NUDGED).is_some() && new.get(NUDGED) != old.and_then(|o| o.get(NUDGED));
        if was_ready && !nudged {
            return None;
        }
        let job = item::job_from_item(new).ok()?;
        Some(ReadyJob { job, ready_sk })
    }
}

/// The queues `endpoints` deliver from (the enabled ones), each once.
pub fn served_queues(endpoints: &[PushEntry]) -> Vec<&QueueName> {
    let mut queues: Vec<&QueueName> = endpoints
        .iter()
        .filter(|e| e.disabled.is_none())
        .flat_map(|e| &e.endpoint.queues)
        .collect();
    queues.sort();
    queues.dedup();
    queues
}

/// A ready job's own rate limit, as stored with it.
fn stored_rate_limit(job: &Job) -> Result<Option<RateLimitPolicy>, StoreError> {
    match &job.spec.rate_limit {
        Some(rl) => RateLimitPolicy::from_stored(rl, job.spec.queue.as_str())
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("stored rate_limit: {}", e.message))),
        None => Ok(None),
    }
}

impl PushEndpoints<'_> {
    /// Claims `ready` for a delivery to `endpoint`, exactly as FETCH claims a candidate
    /// (the same conditional write on `available` and the ready-index entry, so a polling
    /// worker or another endpoint racing for it cannot both win), after taking one of the
    /// endpoint's in-flight slots (`max_concurrency`), which is given back if the claim
    /// loses. Calls: the queue's
    /// settings (cached), the slot (one GetItem, one UpdateItem), the claim (one
    /// UpdateItem; a job with a rate limit claims in a transaction as FETCH does).
    pub async fn claim_ready(
        &self,
        ready: &ReadyJob,
        endpoint: &PushEntry,
        now: Timestamp,
    ) -> Result<PushClaim, StoreError> {
        let claimed = self.claim_ready_moved(ready, endpoint, now).await;
        follow(self.engine, now, claimed).await
    }

    /// [`PushEndpoints::claim_ready`], owing the follow-up of a job the claim finished
    /// instead (expired, dropped by its rate limit, its payload damaged).
    async fn claim_ready_moved(
        &self,
        ready: &ReadyJob,
        endpoint: &PushEntry,
        now: Timestamp,
    ) -> Result<Moved<PushClaim>, OwingError> {
        let queue = &ready.job.spec.queue;
        let settings = self
            .engine
            .queue_settings(std::slice::from_ref(queue))
            .await?;
        let queue_settings = settings.get(queue.as_str()).cloned().unwrap_or_default();
        if queue_settings.paused {
            return Ok(Moved::done(PushClaim::NotNow));
        }
        let lane = crate::keys::Lane::of(&ready.job);
        let limits = self
            .engine
            .lane_limits(&lane, queue_settings.rate_limit.as_ref())
            .await?;
        let rate_limit = stored_rate_limit(&ready.job)?;
        let lease_ms = endpoint.endpoint.timeout_ms + LEASE_MARGIN_MS;
        let holder = format!("{}.{}", ready.job.id, uuid::Uuid::new_v4().simple());
        let slot = endpoint.slot_policy();
        let lease_until_us = time::after_ms(now, lease_ms).timestamp_micros();
        if !self
            .engine
            .take_slot(&slot, &holder, lease_until_us, now.timestamp_micros())
            .await?
        {
            return Ok(Moved::done(PushClaim::Full));
        }
        let req = crate::claim::FetchRequest {
            queues: vec![queue.clone()],
            count: 1,
            worker_id: Some(endpoint.worker_id()),
            visibility_timeout_ms: Some(lease_ms),
            tenant: ojs_core::tenant::Scope::Any,
            scheduling: None,
        };
        let candidate = Candidate::for_push(
            ready.job.id,
            ready.ready_sk.clone(),
            ready.job.spec.timeout_ms,
            rate_limit,
        );
        let at = LaneClaim {
            lane: &lane,
            req: &req,
            now,
            limits: &limits,
        };
        let claimed = self.claim_whole(&at, &candidate).await;
        if !matches!(&claimed, Ok(m) if m.value().is_some()) {
            self.engine
                .release_holder(&slot.key, &holder, Some(lease_until_us))
                .await;
        }
        Ok(claimed?.map(|job| match job {
            Some(job) => PushClaim::Claimed {
                job: Box::new(job),
                slot: SlotHold(holder),
            },
            None => PushClaim::NotNow,
        }))
    }

    /// Claims `candidate` with its whole request: the endpoint is sent all of it (its
    /// args may be in the payload bucket). A damaged payload fails the job for good, as
    /// FETCH does; a failing payload store leaves it leased, and the sweep reclaims it
    /// when the delivery's lease ends (giving it back at once would make the change
    /// stream offer it again at once, in a loop as long as S3 fails).
    async fn claim_whole(
        &self,
        at: &LaneClaim<'_>,
        candidate: &Candidate,
    ) -> Result<Moved<Option<Job>>, OwingError> {
        let (claimed, mut owed) = self.engine.claim_one(at, candidate).await?.split();
        let Some(job) = claimed else {
            return Ok(Moved::new(None, owed));
        };
        match self.engine.try_full_job(job).await {
            Ok(job) => Ok(Moved::new(Some(job), owed)),
            Err((job, e @ StoreError::Corrupt(_))) => {
                let failed = self.engine.settle_unread(job, e, at.now).await;
                Ok(Moved::new(None, owed.and(failed)))
            }
            Err((_, e)) => owed.carry(Err(e)),
        }
    }

    /// Gives back a delivery's in-flight slot at `endpoint` (one or two UpdateItems; best
    /// effort: a slot not given back ends with the delivery's lease).
    pub async fn release_hold(&self, endpoint: &PushEntry, slot: &SlotHold) {
        self.engine
            .release_holder(&endpoint.slot_policy().key, &slot.0, None)
            .await;
    }

    /// Puts jobs left waiting on a queue with endpoints back on the change stream, for the
    /// scheduler: on AWS nothing else looks for them (a queue resumed after a pause, slots
    /// freed by a delivery whose process died), while `make dev` catches up in process.
    /// For each queue an enabled endpoint serves (one Query of the registry), up to
    /// [`NUDGE_PER_QUEUE`] jobs of a type an endpoint takes, available since before
    /// `waited_since` ([`Store::ready_jobs`]), are each marked with one UpdateItem
    /// conditioned on still being available at the same index entry. The stream function
    /// dispatches them like new jobs, and a delivery that ends catches up on the rest of
    /// the queue. A queue that fails is logged and skipped. Returns how many were marked.
    pub async fn nudge_waiting(
        &self,
        now: Timestamp,
        waited_since: Timestamp,
    ) -> Result<usize, StoreError> {
        let endpoints = self.list().await?;
        let mut nudged = 0;
        for queue in served_queues(&endpoints) {
            nudged += self.nudge_queue(queue, &endpoints, now, waited_since).await;
        }
        Ok(nudged)
    }

    /// The nudge of [`PushEndpoints::nudge_waiting`] for one queue just resumed, for the
    /// jobs that became available while it was paused: on AWS no delivery ends on a paused
    /// queue, so without it they would wait for the scheduler's minute run. One Query of
    /// the queue's registrations (all a queue without endpoints costs), then as there.
    pub async fn nudge_resumed_queue(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        let endpoints = self.of_queue(queue).await?;
        if !endpoints.iter().any(|e| e.disabled.is_none()) {
            return Ok(0);
        }
        Ok(self.nudge_queue(queue, &endpoints, now, now).await)
    }

    /// Up to [`NUDGE_PER_QUEUE`] jobs of `queue` that a type of `endpoints` takes and that
    /// waited since before `waited_since`, each marked with one conditional UpdateItem.
    /// Failures are logged; returns how many were marked.
    async fn nudge_queue(
        &self,
        queue: &QueueName,
        endpoints: &[PushEntry],
        now: Timestamp,
        waited_since: Timestamp,
    ) -> usize {
        let pushed = |r: &ReadyJob| {
            endpoints
                .iter()
                .any(|e| e.disabled.is_none() && e.endpoint.takes(queue, &r.job.spec.job_type))
        };
        let waiting = match self.ready_jobs(queue, NUDGE_PER_QUEUE, waited_since).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(queue = %queue, error = %e, "waiting pushed jobs unreadable");
                return 0;
            }
        };
        let mut nudged = 0;
        for r in waiting.iter().filter(|r| pushed(r)) {
            match self.nudge(r, now).await {
                Ok(true) => nudged += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(queue = %queue, job_id = %r.job.id, error = %e, "pushed job not nudged");
                    break;
                }
            }
        }
        nudged
    }

    /// Marks `ready` as nudged, if it is still available at the same index entry.
    async fn nudge(&self, ready: &ReadyJob, now: Timestamp) -> Result<bool, StoreError> {
        let out = self
            .engine
            .table
            .update_at(item::job_key(&ready.job.id))
            .update_expression("SET #nudged = :now")
            .condition_expression("#state = :available AND gsi1sk = :sk")
            .expression_attribute_names("#nudged", NUDGED)
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":now", item::n(now.timestamp_micros()))
            .expression_attribute_values(":available", s(JobState::Available.as_str()))
            .expression_attribute_values(":sk", s(ready.ready_sk.clone()))
            .send()
            .await;
        Ok(self
            .engine
            .table
            .tally_conditional(crate::usage::Kind::Write, out)?
            .is_some())
    }

    /// Job `id` if it is available (one strongly consistent GetItem): a planned push
    /// offer taken from the delivery queue.
    pub async fn ready_job(&self, id: &JobId) -> Result<Option<ReadyJob>, StoreError> {
        let Some(raw) = self.engine.table.read_item(item::job_key(id)).await? else {
            return Ok(None);
        };
        if item::state_of(&raw) != Some(JobState::Available) {
            return Ok(None);
        }
        let Some(ready_sk) = raw.get("gsi1sk").and_then(|v| v.as_s().ok()).cloned() else {
            return Ok(None);
        };
        Ok(item::job_from_item(&raw)
            .ok()
            .map(|job| ReadyJob { job, ready_sk }))
    }

    /// Up to `limit` jobs of `queue` still available that were made available before
    /// `before` (one Query of the ready index per shard, then one GetItem per entry old
    /// enough, judged by the enqueue time in its index key): the dispatcher's catch-up,
    /// for jobs the stream offered while the endpoints were full. Jobs of types no
    /// endpoint takes are read too (the index carries no type): a queue mixing pushed and
    /// polled types pays those reads when its polled jobs wait.
    pub async fn ready_jobs(
        &self,
        queue: &QueueName,
        limit: usize,
        before: Timestamp,
    ) -> Result<Vec<ReadyJob>, StoreError> {
        let cutoff = before.timestamp_micros();
        let mut out = Vec::new();
        let lanes = self.engine.lanes(std::slice::from_ref(queue)).await?;
        for (lane, shard) in lanes
            .iter()
            .flat_map(|lane| (0..self.engine.queue_shards()).map(move |shard| (lane, shard)))
        {
            let page = i32::try_from(limit.saturating_sub(out.len())).unwrap_or(25);
            if page == 0 {
                break;
            }
            for c in self.engine.ready_candidates(lane, shard, page).await? {
                let enqueued_us = c
                    .ready_sk
                    .split('#')
                    .nth(1)
                    .and_then(|us| us.parse::<i64>().ok());
                if enqueued_us.is_some_and(|us| us > cutoff) {
                    continue;
                }
                let Some(raw) = self.engine.table.read_item(item::job_key(&c.id)).await? else {
                    continue;
                };
                if item::state_of(&raw) != Some(JobState::Available) {
                    continue;
                }
                if let Ok(job) = item::job_from_item(&raw) {
                    out.push(ReadyJob {
                        job,
                        ready_sk: c.ready_sk.clone(),
                    });
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Change;
    use ojs_core::job::NewJob;
    use serde_json::json;

    fn available() -> Job {
        let new = NewJob::from_json(json!({"type": "t.x", "args": [], "options": {"queue": "q"}}));
        Job::enqueue(new.unwrap_or_else(|e| panic!("{e}")), time::now())
    }

    fn nudged(mut change: Change, at: Option<i64>, on_old: bool) -> Change {
        let target = if on_old {
            &mut change.old
        } else {
            &mut change.new
        };
        if let (Some(item), Some(at)) = (target.as_mut(), at) {
            item.insert(NUDGED.to_owned(), item::n(at));
        }
        change
    }

    #[test]
    fn a_job_made_available_is_ready_and_a_rewrite_is_not() {
        let job = available();
        assert!(Change::between(None, Some(&job)).ready_job().is_some());
        assert!(Change::between(Some(&job), Some(&job))
            .ready_job()
            .is_none());
        let mut active = job.clone();
        active.status.state = JobState::Active;
        assert!(Change::between(Some(&job), Some(&active))
            .ready_job()
            .is_none());
    }

    #[test]
    fn a_nudge_makes_a_waiting_job_ready_once() {
        let job = available();
        let same = || Change::between(Some(&job), Some(&job));
        let first = nudged(same(), Some(1), false);
        assert!(first.ready_job().is_some());
        let again = nudged(nudged(same(), Some(1), true), Some(2), false);
        assert!(again.ready_job().is_some());
        let after = nudged(nudged(same(), Some(1), true), Some(1), false);
        assert!(after.ready_job().is_none(), "a later write keeps the mark");
        let cleared = nudged(same(), Some(1), true);
        assert!(cleared.ready_job().is_none());
    }
}
