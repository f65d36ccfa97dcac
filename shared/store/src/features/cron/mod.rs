//! Cron registrations and their firing. Each registration is one item in the `CRON`
//! partition; while enabled it also sits in the `due` index (`DUE#~cron`, sorted by next
//! fire time), so a sweep finds due schedules with one Query. An occurrence is fired by a
//! single transaction that advances the registration (condition: the version read) and
//! creates the job: two sweeps racing on the same fire time produce exactly one job.

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{ReturnValue, TransactWriteItem, Update};
use ojs_core::cron_job::{CronJob, Occurrence};
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobState};
use serde_json::Value;

mod write;

use write::CronWrite;

use crate::engine::Engine;
use crate::error::{is_condition_failure, Missing, StoreError};
use crate::features::follow_ups::follow;
use crate::item::{self, s, Item};
use crate::keys;
use crate::registry::Registry;
use crate::usage::Kind;

/// A registration with its system-managed state.
#[derive(Debug, Clone)]
pub struct CronEntry {
    /// The registration.
    pub cron: CronJob,
    /// When it was registered.
    pub created_at: String,
    /// The id of the API key of its latest registration (None: keys were off, or before
    /// keys were recorded). A registration replaces the whole entry, so the key that
    /// wrote it last is the one whose job template runs.
    pub created_by: Option<String>,
    /// Next occurrence (None when it never fires again).
    pub next_run_at: Option<Timestamp>,
    /// Last occurrence that fired or was skipped.
    pub last_run_at: Option<String>,
    /// Occurrences fired.
    pub run_count: u64,
    /// The job of the last fired occurrence.
    pub last_job_id: Option<String>,
    version: u64,
}

impl CronEntry {
    /// The occurrence due at `now`, if one is: never while the registration is paused,
    /// which a timer armed before the pause may still wake (the due index lists only
    /// enabled registrations; the timer names one whatever it has become).
    fn due(&self, now: Timestamp) -> Option<Timestamp> {
        self.next_run_at.filter(|t| self.cron.enabled && *t <= now)
    }
}

/// Every cron registration, by name.
const CRONS: Registry<CronEntry> = Registry {
    pk: keys::CRON_PK,
    sk: keys::cron_sk,
    read: entry_from_item,
    missing: Missing::Cron,
};

fn entry_from_item(item: &Item) -> Result<CronEntry, StoreError> {
    let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let num = |k: &str| {
        item.get(k)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
    };
    let doc: Value = get("doc")
        .and_then(|raw| serde_json::from_str(&raw).ok())
        .ok_or_else(|| StoreError::Corrupt("cron item without doc".into()))?;
    let cron = CronJob::from_json(doc).map_err(StoreError::corrupt)?;
    Ok(CronEntry {
        cron,
        created_at: get("created_at").unwrap_or_default(),
        created_by: get("created_by"),
        next_run_at: num("next_run_us").and_then(time::from_micros),
        last_run_at: get("last_run_at"),
        run_count: num("run_count")
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        last_job_id: get("last_job_id"),
        version: num("version")
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
    })
}

service! {
    /// Cron registrations and the firing of their due occurrences.
    Cron over engine: Engine
}

impl Cron<'_> {
    /// Registers (or replaces) a cron job. Returns the entry and whether it was new.
    pub async fn put(
        &self,
        cron: &CronJob,
        created_by: Option<&str>,
        now: Timestamp,
    ) -> Result<(CronEntry, bool), StoreError> {
        // Every occurrence must fit its item (the template is checked as PUSH checks a job
        // in core, with the meta each occurrence adds).
        let occurrence = cron.job_for(&time::max()).map_err(StoreError::corrupt)?;
        item::check_spec_size(&Job::enqueue(occurrence, now))?;
        let next = cron.schedule.next_after(now);
        let out = self
            .registration(cron, created_by, next.as_ref(), now)
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let out = self.engine.table.tally(Kind::Write, out)?;
        let item = out
            .attributes()
            .ok_or_else(|| StoreError::Corrupt("cron update returned no item".into()))?;
        let entry = entry_from_item(item)?;
        let created = entry.version == 1;
        if let (Some(next), true) = (next, cron.enabled) {
            let target = crate::timer::TimerTarget::Cron {
                name: cron.name.clone(),
            };
            self.engine.arm_timer(vec![(target, next)]).await;
        }
        Ok((entry, created))
    }

    /// The update registering `cron` (by `created_by`, at `now`) with its next fire
    /// time `next` ([`CronWrite::register`]).
    fn registration(
        &self,
        cron: &CronJob,
        created_by: Option<&str>,
        next: Option<&Timestamp>,
        now: Timestamp,
    ) -> UpdateItemFluentBuilder {
        CronWrite::register(cron, created_by, &now)
            .next(next, cron.enabled)
            .on(self.engine.table.update_at(CRONS.key(&cron.name)))
    }

    /// Every registration, sorted by name. One that no longer reads (stored by an older
    /// version under other rules, or damaged) is left out and logged, so it cannot hide
    /// the others.
    pub async fn list(&self) -> Result<Vec<CronEntry>, StoreError> {
        Ok(self
            .engine.table.query_partition(CRONS.pk, true)
            .await?
            .iter()
            .filter_map(|item| match entry_from_item(item) {
                Ok(entry) => Some(entry),
                Err(e) => {
                    let sk = item.get("sk").and_then(|v| v.as_s().ok());
                    tracing::error!(registration = ?sk, error = %e, "cron registration unreadable; left out");
                    None
                }
            })
            .collect())
    }

    /// Removes a registration; NotFound when there is none.
    pub async fn delete(&self, name: &str) -> Result<CronEntry, StoreError> {
        CRONS.delete(&self.engine.table, name).await
    }

    /// Fires every cron occurrence due at `now` (at most one catch-up occurrence per
    /// registration, as the spec requires). Returns how many jobs were enqueued.
    pub async fn fire_due(&self, now: Timestamp) -> Result<usize, StoreError> {
        let mut fired = 0;
        let mut pages = self
            .engine
            .table
            .pages(self.engine.due_query(keys::CRON_DUE_PK, &now).limit(100));
        while let Some(out) = pages.next().await? {
            for i in out.items() {
                let Some(name) = crate::item::get_s(i, "sk").and_then(|sk| sk.strip_prefix("C#"))
                else {
                    continue;
                };
                // One registration that cannot fire never holds up the others.
                match self.fire_cron(name, now).await {
                    Ok(true) => fired += 1,
                    Ok(false) => {}
                    Err(e) => tracing::warn!(cron = name, error = %e, "cron occurrence not fired"),
                }
            }
        }
        Ok(fired)
    }

    /// Fires the named registration's occurrence if it is due (the timer's entry point).
    pub(crate) async fn fire_cron(&self, name: &str, now: Timestamp) -> Result<bool, StoreError> {
        match CRONS.get(&self.engine.table, name).await? {
            Some(entry) => self.fire(&entry, now).await,
            None => Ok(false),
        }
    }

    /// Fires (or skips) one due occurrence. `true` when a job was enqueued.
    async fn fire(&self, entry: &CronEntry, now: Timestamp) -> Result<bool, StoreError> {
        let Some(due) = entry.due(now) else {
            return Ok(false);
        };
        let next = entry.cron.schedule.next_after(now);
        let previous_running = self.previous_running(entry).await?;
        let occurrence = entry.cron.overlap.occurrence(previous_running.is_some());
        if let (Occurrence::CancelPreviousAndEnqueue, Some(prev)) = (occurrence, &previous_running)
        {
            // Its follow-up (its workflow, the occurrence queued behind it) runs now.
            let cancelled = self.engine.cancel_job_moved(&prev.id, now).await;
            match follow(self.engine, now, cancelled).await {
                Ok(_) | Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // `enqueue`: the new occurrence waits, pending, behind the running one.
        let waits_for = previous_running
            .as_ref()
            .filter(|_| occurrence == Occurrence::EnqueueBehindPrevious)
            .map(|prev| prev.id);
        let job = match occurrence {
            Occurrence::Skip => None,
            _ => Some(occurrence_job(entry, due, now, waits_for.is_some())?),
        };
        // Advance the registration under the version read; with the job in the same
        // transaction, a concurrent sweep can never fire this occurrence twice.
        let update = self.advance(entry, due, next.as_ref(), job.as_ref())?;
        let mut items = vec![TransactWriteItem::builder().update(update).build()];
        if let Some(job) = &job {
            items.extend(self.occurrence_items(job, waits_for).await?);
        }
        if let Err(e) = self.engine.table.transact(items).await {
            let cancelled =
                e.code() == Some("TransactionCanceledException") || is_condition_failure(&e);
            if cancelled {
                // Another sweep fired (or the registration changed) first.
                return Ok(false);
            }
            return Err(StoreError::from_sdk(e));
        }
        if let Some(next) = next {
            let target = crate::timer::TimerTarget::Cron {
                name: entry.cron.name.clone(),
            };
            self.engine.arm_timer(vec![(target, next)]).await;
        }
        if job.is_none() {
            tracing::info!(cron = %entry.cron.name, "cron occurrence skipped: previous job still running")
        }
        Ok(job.is_some())
    }

    /// The job of the registration's last fired occurrence, while it is unfinished.
    async fn previous_running(&self, entry: &CronEntry) -> Result<Option<Job>, StoreError> {
        Ok(match &entry.last_job_id {
            Some(id) => match ojs_core::JobId::parse(id) {
                Ok(id) => self
                    .engine
                    .get_job(&id)
                    .await?
                    .filter(|j| !j.status.state.is_terminal()),
                Err(_) => None,
            },
            None => None,
        })
    }

    /// The update advancing `entry` past its occurrence `due` to `next` (none: it never
    /// fires again), under the version read, noting the occurrence's `job` if one fired.
    fn advance(
        &self,
        entry: &CronEntry,
        due: Timestamp,
        next: Option<&Timestamp>,
        job: Option<&Job>,
    ) -> Result<Update, StoreError> {
        let write = CronWrite::advance(&entry.cron.name, entry.version, &due)
            .next(next, entry.cron.enabled);
        let write = match job {
            Some(job) => write.fired(&job.id),
            None => write,
        };
        write.update(self.engine.table(), CRONS.key(&entry.cron.name))
    }

    /// The fire transaction's items that store an occurrence's `job` (its queue
    /// registered first), linked behind `waits_for` when it waits for that job.
    async fn occurrence_items(
        &self,
        job: &Job,
        waits_for: Option<ojs_core::JobId>,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        self.engine
            .register_lane(&crate::keys::Lane::of(job))
            .await?;
        let mut items = vec![self
            .engine
            .table
            .put_new(item::job_to_item(job, self.engine.queue_shards()))?];
        if let Some(prev) = waits_for {
            // Link it behind the previous job, which must still be unfinished: if it
            // finished meanwhile, the transaction fails and the next sweep fires
            // the occurrence as a plain enqueue.
            let link = Update::builder()
                .table_name(self.engine.table())
                .set_key(Some(item::job_key(&prev)))
                .update_expression("SET next_job = :next")
                .condition_expression(
                    "#state IN (:s0, :s1, :s2, :s3, :s4) AND attribute_not_exists(next_job)",
                )
                .expression_attribute_names("#state", "state")
                .expression_attribute_values(":next", s(job.id.to_string()))
                .expression_attribute_values(":s0", s(JobState::Scheduled.as_str()))
                .expression_attribute_values(":s1", s(JobState::Available.as_str()))
                .expression_attribute_values(":s2", s(JobState::Pending.as_str()))
                .expression_attribute_values(":s3", s(JobState::Active.as_str()))
                .expression_attribute_values(":s4", s(JobState::Retryable.as_str()))
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            items.push(TransactWriteItem::builder().update(link).build());
        }
        Ok(items)
    }
}

/// The job an occurrence due at `due` enqueues: pending when it `waits` behind the
/// previous one.
fn occurrence_job(
    entry: &CronEntry,
    due: Timestamp,
    now: Timestamp,
    waits: bool,
) -> Result<Job, StoreError> {
    let new = entry.cron.job_for(&due).map_err(StoreError::corrupt)?;
    let mut job = Job::enqueue(new, now);
    if waits {
        job.status.state = JobState::Pending;
        job.status.enqueued_at = None;
    }
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(enabled: bool, next_run_at: Option<Timestamp>) -> CronEntry {
        let mut cron = CronJob::from_json(serde_json::json!({
            "name": "nightly", "expression": "0 3 * * *",
            "job_template": {"type": "t", "args": []}
        }))
        .unwrap_or_else(|e| panic!("{}", e.message));
        cron.enabled = enabled;
        CronEntry {
            cron,
            created_at: String::new(),
            created_by: None,
            next_run_at,
            last_run_at: None,
            run_count: 0,
            last_job_id: None,
            version: 1,
        }
    }

    #[test]
    fn an_occurrence_is_due_once_its_time_came_and_only_while_enabled() {
        let now = time::now();
        let past = now - chrono::Duration::seconds(1);
        let later = now + chrono::Duration::seconds(1);
        assert_eq!(entry(true, Some(past)).due(now), Some(past));
        assert_eq!(entry(true, Some(now)).due(now), Some(now));
        assert_eq!(entry(true, Some(later)).due(now), None);
        assert_eq!(entry(true, None).due(now), None);
        // Paused: a timer armed before the pause finds nothing to fire.
        assert_eq!(entry(false, Some(past)).due(now), None);
    }
}
