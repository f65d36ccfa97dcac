//! Worker liveness, directives and reported shutdown states (`WORKERS` partition, one
//! item per worker, expiring by TTL), and lease extension for heartbeats.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValue;
use futures::future::join_all;
use ojs_core::job::DEFAULT_VISIBILITY_TIMEOUT_MS;
use ojs_core::progress::ProgressReport;
use ojs_core::tenant::TenantId;
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, JobState, Transition};

use crate::claim::{Admission, FetchOutcome, FetchRequest};
use crate::effects::Before;
use crate::engine::Engine;
use crate::error::{Missing, StoreError};
use crate::features::follow_ups::follow;
use crate::item::{item_key, n, s, ts, Item};
use crate::jobs::Fence;
use crate::keys;
use crate::transition::{JobWrite, Place};
use crate::usage::Kind;

/// How long a worker is remembered after its last heartbeat.
const WORKER_TTL_SECS: i64 = 3_600;

/// A worker directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    /// Keep fetching.
    Running,
    /// Stop fetching; finish active jobs.
    Quiet,
    /// Shut down after active jobs.
    Terminate,
}

impl Directive {
    /// The stronger of two directives: terminate over quiet over running.
    pub fn max(self, other: Self) -> Self {
        let rank = |d: Self| match d {
            Self::Running => 0,
            Self::Quiet => 1,
            Self::Terminate => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }

    /// The directive a job asks its holder's heartbeat to return through
    /// `meta.test_directive`: the hook the conformance suite uses (L1-WRK-002/003) to
    /// test that workers obey directives without an operator in the loop.
    fn requested_by(job: &ojs_core::Job) -> Option<Self> {
        job.spec
            .meta
            .get("test_directive")
            .and_then(|v| v.as_str())
            .and_then(Self::parse)
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Quiet => "quiet",
            Self::Terminate => "terminate",
        }
    }

    /// Parses the wire string.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "running" => Some(Self::Running),
            "quiet" => Some(Self::Quiet),
            "terminate" => Some(Self::Terminate),
            _ => None,
        }
    }
}

/// The lifecycle state a worker reports of itself in its heartbeat
/// (ojs-graceful-shutdown.md §5): the server assigns no new job to a worker that is not
/// running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorkerState {
    /// Fetching and working.
    Running,
    /// Not fetching; finishing its active jobs (§5.1).
    Quiet,
    /// Waiting for its active jobs before it stops (§5.2).
    Drain,
    /// Stopping or stopped (§5.3).
    Terminate,
}

impl WorkerState {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Quiet => "quiet",
            Self::Drain => "drain",
            Self::Terminate => "terminate",
        }
    }

    /// Parses a reported state: the spec's words, the suite's (`draining`,
    /// `shutting_down`) and the JS SDK's `terminated`, which its heartbeats send.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "running" => Some(Self::Running),
            "quiet" => Some(Self::Quiet),
            "drain" | "draining" | "shutting_down" => Some(Self::Drain),
            "terminate" | "terminated" => Some(Self::Terminate),
            _ => None,
        }
    }
}

/// A worker as the server knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerInfo {
    /// Worker id.
    pub id: String,
    /// Directive returned by its next heartbeat.
    pub directive: Directive,
    /// The state its last heartbeat reported (running when it named none).
    pub reported: WorkerState,
    /// Last heartbeat, if any.
    pub last_seen: Option<String>,
    /// Jobs it reported as active in its last heartbeat.
    pub active_jobs: u64,
    /// The tenant its last heartbeat acted for (`X-OJS-Tenant` or its key's tenant);
    /// `None`: any tenant.
    pub tenant: Option<String>,
}

/// What a worker's heartbeat says.
#[derive(Debug, Clone, Copy)]
pub struct Heartbeat<'a> {
    /// The worker.
    pub worker_id: &'a str,
    /// The state it reports of itself.
    pub state: WorkerState,
    /// The jobs it reports, each with the attempt it holds when it names one.
    pub jobs: &'a [(JobId, Option<u32>)],
    /// How many jobs it says it runs.
    pub reported_active: u64,
    /// The lease it asks for, if not the jobs' own.
    pub visibility_timeout_ms: Option<u64>,
    /// The tenant it acts for; `None`: any.
    pub tenant: Option<&'a TenantId>,
}

/// What a heartbeat did.
#[derive(Debug, Clone)]
pub struct Beat {
    /// The worker's directive.
    pub directive: Directive,
    /// Jobs whose lease was extended.
    pub extended: Vec<JobId>,
    /// Reported jobs that were cancelled (the worker should stop them).
    pub cancelled: Vec<JobId>,
}

/// The key of worker `id`'s item.
pub(crate) fn worker_key(id: &str) -> Item {
    item_key(keys::WORKERS_PK, keys::worker_sk(id))
}

fn worker_from_item(item: &Item) -> Option<WorkerInfo> {
    let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    Some(WorkerInfo {
        id: get("worker_id")?,
        directive: get("directive")
            .and_then(|d| Directive::parse(&d))
            .unwrap_or(Directive::Running),
        reported: get("wstate")
            .and_then(|w| WorkerState::parse(&w))
            .unwrap_or(WorkerState::Running),
        last_seen: get("last_seen"),
        active_jobs: item
            .get("active_jobs")
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        tenant: get("tenant"),
    })
}

impl WorkerInfo {
    /// Whether FETCH may hand this worker new jobs: it runs by its own word and by the
    /// operator's (a quiet, draining or terminating worker gets none, §5.1).
    pub fn takes_jobs(&self) -> bool {
        self.reported == WorkerState::Running && self.directive == Directive::Running
    }
}

/// Most workers whose admission one instance remembers; past it, it forgets them all.
const ADMISSIONS_CAP: usize = 10_000;

/// What this instance last knew of whether each worker takes new jobs, and when it
/// learnt it: from a heartbeat or directive it wrote, or a read by FETCH.
#[derive(Default)]
pub(crate) struct Admissions(Mutex<HashMap<String, (Instant, bool)>>);

impl Admissions {
    fn remember(&self, id: &str, takes_jobs: bool) {
        if let Ok(mut known) = self.0.lock() {
            if known.len() >= ADMISSIONS_CAP {
                known.clear();
            }
            known.insert(id.to_owned(), (Instant::now(), takes_jobs));
        }
    }

    fn recall(&self, id: &str, ttl: Duration) -> Option<bool> {
        let known = self.0.lock().ok()?;
        known
            .get(id)
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, takes)| *takes)
    }
}

/// Workers: FETCH, heartbeats, progress, directives and the worker registry, with what this instance knows of which workers take jobs.
pub struct Workers<'a> {
    engine: &'a Engine,
    /// The façade's memory of which workers take jobs (per instance).
    admissions: &'a Admissions,
}

impl<'a> Workers<'a> {
    /// The service over `engine`, remembering workers' admissions in `admissions`.
    pub(crate) fn new(engine: &'a Engine, admissions: &'a Admissions) -> Self {
        Self { engine, admissions }
    }
}

impl Workers<'_> {
    /// Records a heartbeat: liveness and the state the worker reports of itself (one
    /// UpdateItem that also returns the directive) and a lease extension for each reported
    /// job whose current attempt the worker holds: claimed under its worker id and, when
    /// the job is reported with an `attempt`, that very attempt. A job claimed without a
    /// worker id is nobody's to extend. The worker's item keeps the `tenant` it acts for
    /// (the tenants' listing counts their workers by it).
    pub async fn heartbeat(
        &self,
        beat: &Heartbeat<'_>,
        now: Timestamp,
    ) -> Result<Beat, StoreError> {
        let Heartbeat {
            worker_id,
            state,
            jobs,
            reported_active,
            visibility_timeout_ms,
            tenant,
        } = *beat;
        // The worker's liveness and the lease extensions are written at once: a heartbeat
        // answered late leaves its worker less of the lease it extended.
        let liveness = async {
            let set = "SET worker_id = :id, last_seen = :now, active_jobs = :active, wstate = :ws, #ttl = :ttl";
            let update = match tenant {
                Some(t) => self
                    .worker_update(worker_id)
                    .update_expression(format!("{set}, tenant = :tenant"))
                    .expression_attribute_values(":tenant", s(t.as_str())),
                None => self
                    .worker_update(worker_id)
                    .update_expression(format!("{set} REMOVE tenant")),
            };
            let out = update
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":id", s(worker_id))
                .expression_attribute_values(":now", ts(&now))
                .expression_attribute_values(":active", n(reported_active))
                .expression_attribute_values(":ws", s(state.as_str()))
                .expression_attribute_values(":ttl", n(now.timestamp() + WORKER_TTL_SECS))
                .send()
                .await;
            self.engine.table.tally(Kind::Write, out)
        };
        let extensions = join_all(jobs.iter().map(|(id, attempt)| {
            let fence = Fence {
                worker_id: Some(worker_id),
                attempt: *attempt,
            };
            self.extend_lease(id, fence, visibility_timeout_ms, now)
        }));
        let (out, results) = tokio::join!(liveness, extensions);
        let worker = out?.attributes().and_then(worker_from_item);
        if let Some(w) = &worker {
            self.admissions.remember(&w.id, w.takes_jobs());
        }
        let directive = worker.map_or(Directive::Running, |w| w.directive);
        let mut beat = Beat {
            directive,
            extended: Vec::new(),
            cancelled: Vec::new(),
        };
        for ((id, _), r) in jobs.iter().zip(results) {
            match r? {
                Extension::Extended { requested, .. } => {
                    beat.extended.push(*id);
                    if let Some(d) = requested {
                        beat.directive = beat.directive.max(d);
                    }
                }
                Extension::Cancelled => beat.cancelled.push(*id),
                Extension::NotHeld | Extension::Raced => {}
            }
        }
        Ok(beat)
    }

    async fn extend_lease(
        &self,
        id: &JobId,
        fence: Fence<'_>,
        visibility_timeout_ms: Option<u64>,
        now: Timestamp,
    ) -> Result<Extension, StoreError> {
        let Some(job) = self.engine.get_job(id).await? else {
            return Ok(Extension::NotHeld);
        };
        match self
            .extend_held(&job, fence, visibility_timeout_ms, None, now)
            .await?
        {
            Extension::Raced => Ok(Extension::NotHeld),
            other => Ok(other),
        }
    }

    /// Extends the lease of `job` as read, if `fence` still holds it, recording `progress`
    /// in the same conditional write when given.
    async fn extend_held(
        &self,
        job: &Job,
        fence: Fence<'_>,
        visibility_timeout_ms: Option<u64>,
        progress: Option<&ProgressReport>,
        now: Timestamp,
    ) -> Result<Extension, StoreError> {
        let id = &job.id;
        if job.status.state == JobState::Cancelled {
            return Ok(Extension::Cancelled);
        }
        let held = job.status.state == JobState::Active
            && fence.admits(job)
            && job.status.lease_until.is_some_and(|l| l > now);
        if !held {
            return Ok(Extension::NotHeld);
        }
        let ms = visibility_timeout_ms
            .or(job.spec.visibility_timeout_ms)
            .unwrap_or(DEFAULT_VISIBILITY_TIMEOUT_MS);
        // Held when the worker asked (`now`); extended from when the extension is made,
        // as a claim's lease starts when the claim is: an answer that took a while must
        // not cost the worker that while of its new lease.
        let lease = time::after_ms(now.max(time::now()), ms);
        let due = job.status.deadline.map_or(lease, |d| d.min(lease));
        self.engine.extend_slot(job, &lease).await?;
        // The fence is in the condition too, not only in the read above.
        let mut write = JobWrite::new(
            Transition::Extend,
            Place::Due {
                pk: self.engine.due_pk(&job.spec.queue, id),
                sk: keys::due_sk(&due, job.spec.priority, job.tenant().as_ref(), id),
            },
        )
        .version(job.status.version)
        .lease_until(&lease);
        if let Some(report) = progress {
            let after = report.applied_to(job.status.progress.as_ref(), job.status.attempt, now);
            write = write.progress(after.to_stored().to_string());
        }
        let before = Some(Before::of(job));
        match self.engine.transition(id, fence.guard(write), before).await {
            Ok(written) => Ok(Extension::Extended {
                requested: Directive::requested_by(job),
                job: Box::new(written.unfinished()),
            }),
            Err(StoreError::Conflict {
                current: Some(JobState::Cancelled),
            }) => Ok(Extension::Cancelled),
            // Still active: another extension (a heartbeat, a progress report) went first.
            Err(StoreError::Conflict {
                current: Some(JobState::Active),
            }) => Ok(Extension::Raced),
            Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => Ok(Extension::NotHeld),
            Err(e) => Err(e),
        }
    }

    /// Records a worker's progress report on job `id` (ojs-progress.md) in the conditional
    /// write that extends its lease (§6.3: a report is a heartbeat): one UpdateItem (and
    /// the concurrency slot's, for a limited job) after the read. A report for a job that
    /// is not active, or not held by the reporting worker (`worker_id`) or attempt, is
    /// ignored (§6.1) and the job answered as it is; NotFound when there is no job `id`.
    pub async fn report_progress(
        &self,
        id: &JobId,
        report: &ProgressReport,
        now: Timestamp,
    ) -> Result<Job, StoreError> {
        /// Reads of a job one progress report makes at most while other extensions of its
        /// lease keep going first.
        const PROGRESS_TRIES: usize = 3;
        let fence = Fence {
            worker_id: report.worker_id.as_deref(),
            attempt: report.attempt,
        };
        // A report racing another extension of the same job reads it again (bounded).
        for _ in 0..PROGRESS_TRIES {
            let job = self
                .engine
                .get_job(id)
                .await?
                .ok_or_else(|| StoreError::NotFound(Missing::Job(id.to_string())))?;
            match self
                .extend_held(&job, fence, None, Some(report), now)
                .await?
            {
                Extension::Extended { job, .. } => return Ok(*job),
                Extension::Raced => continue,
                Extension::Cancelled | Extension::NotHeld => return Ok(job),
            }
        }
        Err(StoreError::Concurrent(format!("job {id}: its lease")))
    }

    /// Sets the directive a worker's next heartbeat returns; NotFound for an unknown worker.
    pub async fn set_directive(
        &self,
        worker_id: &str,
        directive: Directive,
    ) -> Result<WorkerInfo, StoreError> {
        let req = self
            .worker_update(worker_id)
            .update_expression("SET directive = :d")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":d", s(directive.as_str()));
        let worker = self
            .engine
            .table
            .update_returning(req)
            .await
            .map_err(|e| e.naming(|| Missing::Worker(worker_id.to_owned())))?
            .as_ref()
            .and_then(worker_from_item)
            .ok_or_else(|| StoreError::Corrupt("worker item".into()))?;
        self.admissions.remember(&worker.id, worker.takes_jobs());
        Ok(worker)
    }

    /// Worker `id` as its item holds it now (one strongly consistent GetItem); `None`
    /// when no heartbeat named it within [`WORKER_TTL_SECS`].
    pub async fn worker(&self, id: &str) -> Result<Option<WorkerInfo>, StoreError> {
        let now = time::now().timestamp();
        Ok(self
            .engine
            .table
            .read_item(worker_key(id))
            .await?
            .and_then(|i| live_worker(&i, now)))
    }

    /// Claims up to `count` jobs from the queues, in queue order, each queue by priority
    /// then FIFO ([`Engine::claim_jobs`]). Never returns a job that another worker holds,
    /// nor any to a named worker that is not running ([`Store::takes_jobs`], asked only
    /// once a job was found).
    pub async fn fetch(
        &self,
        req: &FetchRequest,
        now: Timestamp,
    ) -> Result<FetchOutcome, StoreError> {
        let admission = req
            .worker_id
            .as_deref()
            .map(|id| -> Admission<'_> { Box::new(|| Box::pin(self.takes_jobs(id))) });
        let fetched = self.engine.claim_jobs(req, now, admission).await;
        follow(self.engine, now, fetched).await
    }

    /// Whether FETCH may hand worker `id` new jobs ([`WorkerInfo::takes_jobs`]); an
    /// unknown worker may. What this instance learnt within
    /// [`crate::StoreConfig::queue_settings_ttl`] answers without a read; otherwise one
    /// eventually consistent GetItem (0.5 RCU), which FETCH asks only when it found a job
    /// to hand out. A worker that reports
    /// draining through another instance is thus refused within that time plus
    /// replication; through this one at once.
    async fn takes_jobs(&self, id: &str) -> Result<bool, StoreError> {
        let ttl = self.engine.config.queue_settings_ttl;
        if let Some(known) = self.admissions.recall(id, ttl) {
            return Ok(known);
        }
        let out = self
            .engine
            .table
            .get_at(worker_key(id))
            .projection_expression("worker_id, directive, wstate, #ttl")
            .expression_attribute_names("#ttl", "ttl")
            .send()
            .await;
        let now = time::now().timestamp();
        let takes = self
            .engine
            .table
            .tally(Kind::Read, out)?
            .item()
            .and_then(|i| live_worker(i, now))
            .is_none_or(|w| w.takes_jobs());
        if !ttl.is_zero() {
            self.admissions.remember(id, takes);
        }
        Ok(takes)
    }

    /// An UpdateItem of worker `id`'s item, answering with the item as written.
    fn worker_update(&self, id: &str) -> UpdateItemFluentBuilder {
        self.engine
            .table
            .update_at(worker_key(id))
            .return_values(ReturnValue::AllNew)
    }

    /// Workers seen within the last hour.
    pub async fn list_workers(&self) -> Result<Vec<WorkerInfo>, StoreError> {
        let now = time::now().timestamp();
        Ok(self
            .engine
            .table
            .query_partition(keys::WORKERS_PK, false)
            .await?
            .iter()
            .filter_map(|i| live_worker(i, now))
            .collect())
    }
}

/// The worker an item holds, unless the item is past its TTL (DynamoDB deletes expired
/// items late).
fn live_worker(item: &Item, now: i64) -> Option<WorkerInfo> {
    if expired(item, now) {
        None
    } else {
        worker_from_item(item)
    }
}

/// Whether a worker item is past its TTL (DynamoDB deletes expired items late).
fn expired(item: &Item, now: i64) -> bool {
    item.get("ttl")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|t| t <= now)
}

enum Extension {
    /// With the directive the job itself requests, if any, and the job as written.
    Extended {
        requested: Option<Directive>,
        job: Box<Job>,
    },
    /// Still active, but changed since it was read (another extension went first).
    Raced,
    Cancelled,
    NotHeld,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(reported: WorkerState, directive: Directive) -> WorkerInfo {
        WorkerInfo {
            id: "w".into(),
            directive,
            reported,
            last_seen: None,
            active_jobs: 0,
            tenant: None,
        }
    }

    #[test]
    fn only_a_worker_running_by_its_word_and_the_operators_takes_jobs() {
        assert!(worker(WorkerState::Running, Directive::Running).takes_jobs());
        for reported in [
            WorkerState::Quiet,
            WorkerState::Drain,
            WorkerState::Terminate,
        ] {
            assert!(
                !worker(reported, Directive::Running).takes_jobs(),
                "{reported:?}"
            );
        }
        for directive in [Directive::Quiet, Directive::Terminate] {
            assert!(
                !worker(WorkerState::Running, directive).takes_jobs(),
                "{directive:?}"
            );
        }
    }

    #[test]
    fn states_rank_running_quiet_drain_terminate_and_read_back() {
        let all = [
            WorkerState::Running,
            WorkerState::Quiet,
            WorkerState::Drain,
            WorkerState::Terminate,
        ];
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        for s in all {
            assert_eq!(WorkerState::parse(s.as_str()), Some(s));
        }
        assert_eq!(WorkerState::parse("draining"), Some(WorkerState::Drain));
        assert_eq!(
            WorkerState::parse("shutting_down"),
            Some(WorkerState::Drain)
        );
        assert_eq!(
            WorkerState::parse("terminated"),
            Some(WorkerState::Terminate)
        );
        assert_eq!(WorkerState::parse("stopped"), None);
    }

    #[test]
    fn an_item_reads_back_its_reported_state_and_expires_by_its_ttl() {
        let item = Item::from([
            ("worker_id".to_owned(), s("w")),
            ("wstate".to_owned(), s("drain")),
            ("directive".to_owned(), s("quiet")),
            ("ttl".to_owned(), n(100)),
        ]);
        assert_eq!(
            worker_from_item(&item).map(|w| (w.reported, w.directive)),
            Some((WorkerState::Drain, Directive::Quiet))
        );
        assert!(!expired(&item, 99));
        assert!(expired(&item, 100));
        let bare = Item::from([("worker_id".to_owned(), s("w"))]);
        assert_eq!(
            worker_from_item(&bare).map(|w| (w.reported, w.directive)),
            Some((WorkerState::Running, Directive::Running))
        );
        assert!(!expired(&bare, i64::MAX));
    }

    #[test]
    fn admissions_are_recalled_within_their_ttl_only() {
        let known = Admissions::default();
        assert_eq!(known.recall("w", Duration::from_secs(60)), None);
        known.remember("w", false);
        assert_eq!(known.recall("w", Duration::from_secs(60)), Some(false));
        assert_eq!(known.recall("w", Duration::ZERO), None);
        known.remember("w", true);
        assert_eq!(known.recall("w", Duration::from_secs(60)), Some(true));
        assert_eq!(known.recall("v", Duration::from_secs(60)), None);
        known.remember("v", false);
        assert_eq!(
            (
                known.recall("w", Duration::from_secs(60)),
                known.recall("v", Duration::from_secs(60))
            ),
            (Some(true), Some(false)),
            "below its cap it keeps them all"
        );
        for i in 0..ADMISSIONS_CAP {
            known.remember(&format!("x{i}"), true);
        }
        assert_eq!(
            known.recall("w", Duration::from_secs(60)),
            None,
            "past its cap the memory starts again"
        );
    }
}
