//! One FETCH in progress: what it claimed, what it saw, the limits it found full and
//! until when it may start another claim attempt.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Instant;

use ojs_core::Job;

use crate::answer::{answer_bytes, AnswerBound};
use crate::claim::Admission;
use crate::effects::FollowUps;
use crate::error::StoreError;

/// Limits found full during one FETCH, and when each frees (epoch µs): later candidates
/// of the same key are refused without reading its items again.
#[derive(Default)]
pub(crate) struct FullLimits {
    /// Concurrency keys.
    pub(crate) concurrency: HashMap<String, i64>,
    /// Windows, by key and length.
    pub(crate) windows: HashMap<(String, i64), i64>,
}

/// One FETCH in progress: what it claimed, what it saw, and until when it may start
/// another claim attempt.
pub(super) struct Fetching<'a> {
    pub(super) claimed: Vec<Job>,
    /// What the claimed jobs take in the answer ([`crate::answer::answer_bytes`]).
    answer_bytes: usize,
    /// The answer's bound ([`StoreConfig::fetch_answer`]).
    ///
    /// [`StoreConfig::fetch_answer`]: crate::StoreConfig::fetch_answer
    bound: AnswerBound,
    pub(super) full_limits: FullLimits,
    pub(super) saw_ready: bool,
    /// Claim attempts made so far.
    pub(super) attempts: usize,
    /// Who says whether the worker may be handed jobs; none admits any.
    admission: Option<Admission<'a>>,
    /// Its answer, once asked ([`Fetching::admits`]).
    pub(super) admitted: Option<bool>,
    /// Claims lost to other workers on the queue being claimed from.
    pub(super) losses_on_queue: usize,
    /// When the FETCH's time budget ends ([`StoreConfig::fetch_budget`]).
    ///
    /// [`StoreConfig::fetch_budget`]: crate::StoreConfig::fetch_budget
    ends: Instant,
    /// How many claimed jobs the queue being claimed from may bring the FETCH to: its
    /// count, or less in a scheduled FETCH's first pass (the queue's share).
    pub(super) target: usize,
    /// Whether the lane being claimed from listed any job.
    pub(super) saw_candidates: bool,
    /// Whether the queue being claimed from refused a start by its own rate limit: its
    /// other lanes would be refused as well, so the FETCH moves on to the next queue.
    pub(super) queue_limited: bool,
    /// The follow-ups of jobs this FETCH finished on its way (expired or dropped
    /// candidates, due jobs it settled), answered with its jobs.
    pub(super) owed: FollowUps,
}

impl<'a> Fetching<'a> {
    /// A FETCH of up to `count` jobs that has claimed nothing yet.
    pub(super) fn new(
        count: usize,
        bound: AnswerBound,
        ends: Instant,
        admission: Option<Admission<'a>>,
    ) -> Self {
        Self {
            claimed: Vec::new(),
            answer_bytes: 0,
            bound,
            full_limits: FullLimits::default(),
            saw_ready: false,
            attempts: 0,
            admission,
            admitted: None,
            losses_on_queue: 0,
            ends,
            target: count,
            saw_candidates: false,
            queue_limited: false,
            owed: FollowUps::none(),
        }
    }

    /// Whether the worker may be handed jobs: asked once per FETCH, when there is a job
    /// to hand it.
    pub(super) async fn admits(&mut self) -> Result<bool, StoreError> {
        if let Some(known) = self.admitted {
            return Ok(known);
        }
        let Some(ask) = self.admission.as_mut() else {
            return Ok(true);
        };
        let takes = ask().await?;
        self.admitted = Some(takes);
        Ok(takes)
    }

    /// Whether the budget is spent. The first attempt is always made, so a FETCH that
    /// finds a job claims it however slow the table is.
    pub(super) fn out_of_time(&self) -> bool {
        self.attempts > 0 && Instant::now() >= self.ends
    }

    /// Whether the FETCH stops: its count is met, its answer has no room for another
    /// job, or its time is up.
    pub(super) fn done(&self, count: usize) -> bool {
        self.claimed.len() >= count
            || !self.bound.room_for_another(self.answer_bytes)
            || self.out_of_time()
    }

    pub(super) fn won(&mut self, job: Job) {
        self.answer_bytes = self.answer_bytes.saturating_add(answer_bytes(&job));
        self.claimed.push(job);
    }

    /// What a failed step of the FETCH answers: the error when nothing was claimed yet;
    /// otherwise the FETCH stops and delivers what it holds, since the jobs already
    /// claimed are leased to this worker and answering 503 would strand them until
    /// their lease ends.
    pub(super) fn stop_early(&self, e: StoreError) -> Result<ControlFlow<()>, StoreError> {
        if self.claimed.is_empty() {
            return Err(e);
        }
        tracing::warn!(error = %e, claimed = self.claimed.len(), "FETCH stopped early");
        Ok(ControlFlow::Break(()))
    }
}
