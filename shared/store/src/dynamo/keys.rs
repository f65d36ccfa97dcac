//! Key formats. Sort keys are fixed-width strings so lexical order is the intended order.

use ojs_core::job::MAX_PRIORITY;
use ojs_core::tenant::TenantId;
use ojs_core::time::Timestamp;
use ojs_core::{Job, JobId, QueueName};

/// What every job item's partition key starts with.
pub(crate) const JOB_PREFIX: &str = "JOB#";

/// Primary key of a job item.
pub(crate) fn job_pk(id: &JobId) -> String {
    format!("{JOB_PREFIX}{id}")
}

/// Sort key of the job item within its partition.
pub(crate) const JOB_SK: &str = "JOB";

/// Partition of every queue item.
pub(crate) const QUEUES_PK: &str = "QUEUES";

/// What every queue item's sort key starts with.
pub(crate) const QUEUE_SK_PREFIX: &str = "Q#";

/// Sort key of a queue item.
pub(crate) fn queue_sk(queue: &str) -> String {
    format!("{QUEUE_SK_PREFIX}{queue}")
}

/// Sort key of the job counters of one shard of a queue (`~` sorts after every queue
/// item, and `#` cannot appear in a queue name). Shard 0 keeps the unsharded name, which
/// held the terminal counts before live states were counted.
pub(crate) fn queue_counts_sk(queue: &str, shard: u16) -> String {
    if shard == 0 {
        format!("~COUNTS#{queue}")
    } else {
        format!("~COUNTS#{queue}#{shard}")
    }
}

/// Most shards a queue's ready and due partitions can be split into.
pub const MAX_QUEUE_SHARDS: u16 = 64;

/// The shard of a queue that holds a job's ready and due entries: a fixed hash of the job
/// id (FNV-1a, so every process and every release agrees), modulo the shard count.
pub(crate) fn shard_of(id: &JobId, shards: u16) -> u16 {
    if shards <= 1 {
        return 0;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u16::try_from(hash % u64::from(shards)).unwrap_or(0)
}

/// The ready partitions a job is listed in when available: its queue's, or, for a job of
/// a tenant other than the default one, that tenant's own in the queue
/// (`READY#<queue>#T:<tenant>`; `#` is in neither name, and a shard suffix is a number),
/// so a FETCH for one tenant reads only its jobs and one for any takes tenants in turn.
/// Jobs of the default tenant keep the queue's partitions, as before tenants existed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lane {
    /// The queue.
    pub queue: QueueName,
    /// The tenant (`None`: the default tenant).
    pub tenant: Option<TenantId>,
}

impl Lane {
    /// The lane of `job`.
    pub fn of(job: &Job) -> Self {
        Self {
            queue: job.spec.queue.clone(),
            tenant: job.tenant(),
        }
    }

    /// The default tenant's lane of `queue`.
    pub fn default_of(queue: &QueueName) -> Self {
        Self {
            queue: queue.clone(),
            tenant: None,
        }
    }

    /// Every lane of `queue`: the default tenant's first, then each of `tenants`'.
    pub fn all_of(queue: &QueueName, tenants: &[TenantId]) -> Vec<Self> {
        std::iter::once(Self::default_of(queue))
            .chain(tenants.iter().map(|t| Self {
                queue: queue.clone(),
                tenant: Some(t.clone()),
            }))
            .collect()
    }

    /// What the lane's partition keys name.
    fn key(&self) -> String {
        match &self.tenant {
            None => self.queue.as_str().to_owned(),
            Some(t) => format!("{}#T:{t}", self.queue),
        }
    }
}

/// Shard 0 keeps the unsharded name, so a table written with one shard reads the same
/// after the count grows.
fn sharded(prefix: &str, queue: &str, shard: u16) -> String {
    if shard == 0 {
        format!("{prefix}#{queue}")
    } else {
        format!("{prefix}#{queue}#{shard}")
    }
}

/// Ready-index partition of one shard of a lane.
pub(crate) fn ready_pk(lane: &Lane, shard: u16) -> String {
    sharded("READY", &lane.key(), shard)
}

/// Priority rendered so that ascending order means higher priority first.
fn priority_key(priority: i32) -> String {
    format!("{:03}", MAX_PRIORITY - i64::from(priority))
}

/// Ready-index sort key: priority (higher first), then enqueue time, then id.
pub(crate) fn ready_sk(priority: i32, enqueued_at: &Timestamp, id: &JobId) -> String {
    format!(
        "{}#{:016}#{id}",
        priority_key(priority),
        enqueued_at.timestamp_micros()
    )
}

/// Due-index partition of one shard of a queue.
pub(crate) fn due_pk(queue: &QueueName, shard: u16) -> String {
    sharded("DUE", queue.as_str(), shard)
}

/// Due-index sort key: the time the job becomes actionable, then priority, then (for a
/// job of a tenant other than the default one) `T:<tenant>`, then id. Priority and tenant
/// are carried here so a promotion can build the ready key without reading the item; due
/// partitions stay per queue, so the sweep and the timer read them as before tenants.
pub(crate) fn due_sk(
    at: &Timestamp,
    priority: i32,
    tenant: Option<&TenantId>,
    id: &JobId,
) -> String {
    let tenant = tenant.map(|t| format!("T:{t}#")).unwrap_or_default();
    format!(
        "{:016}#{}#{tenant}{id}",
        at.timestamp_micros(),
        priority_key(priority)
    )
}

/// The due sort key of `job` at `at`.
pub(crate) fn job_due_sk(job: &Job, at: &Timestamp) -> String {
    due_sk(at, job.spec.priority, job.tenant().as_ref(), &job.id)
}

/// The tenant a due sort key carries (`None`: the default tenant).
pub(crate) fn tenant_from_due_sk(sk: &str) -> Option<TenantId> {
    let part = sk.split('#').nth(2)?.strip_prefix("T:")?;
    TenantId::parse(part).ok().flatten()
}

/// The upper bound of due keys at `now` (every key whose time is <= now sorts below it).
pub(crate) fn due_upper_bound(now: &Timestamp) -> String {
    format!("{:016}#~", now.timestamp_micros())
}

/// Parses the priority out of a due sort key.
pub(crate) fn priority_from_due_sk(sk: &str) -> Option<i32> {
    let key: i64 = sk.split('#').nth(1)?.parse().ok()?;
    i32::try_from(MAX_PRIORITY - key).ok()
}

/// Partition of every cron registration.
pub(crate) const CRON_PK: &str = "CRON";

/// Sort key of a cron registration.
pub(crate) fn cron_sk(name: &str) -> String {
    format!("C#{name}")
}

/// Due-index partition of cron registrations (`~` cannot start a queue name).
pub(crate) const CRON_DUE_PK: &str = "DUE#~cron";

/// Due-index sort key of a cron registration: next fire time, then name.
pub(crate) fn cron_due_sk(next: &Timestamp, name: &str) -> String {
    format!("{:016}#{name}", next.timestamp_micros())
}

/// Due-index partitions of running workflows, which the sweep checks until they finish
/// (spread over [`WORKFLOW_DUE_SHARDS`] partitions by workflow id).
pub(crate) fn workflow_due_pk(workflow_id: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in workflow_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    workflow_due_shard_pk(hash % u64::from(WORKFLOW_DUE_SHARDS))
}

/// Partitions the running workflows are spread over.
pub(crate) const WORKFLOW_DUE_SHARDS: u16 = 4;

/// The due-index partition of workflow shard `shard`.
pub(crate) fn workflow_due_shard_pk(shard: u64) -> String {
    format!("DUE#~workflows#{shard}")
}

/// Due-index sort key of a workflow check: its time, then the workflow id.
pub(crate) fn workflow_due_sk(at: &Timestamp, workflow_id: &str) -> String {
    format!("{:016}#{workflow_id}", at.timestamp_micros())
}

/// Partition of every worker item.
pub(crate) const WORKERS_PK: &str = "WORKERS";

/// Sort key of a worker item.
pub(crate) fn worker_sk(worker_id: &str) -> String {
    format!("W#{worker_id}")
}

/// Partition of the dead letter entries (one item per dead-lettered job, in the table
/// itself so that listings read their writes).
pub(crate) const DEAD_PK: &str = "DEAD";

/// Dead-letter sort key: queue, discard time, id (so `?queue=` is a prefix query).
pub(crate) fn dead_sk(queue: &QueueName, at: &Timestamp, id: &JobId) -> String {
    format!("{queue}#{:016}#{id}", at.timestamp_micros())
}

/// Partition of a queue's events.
pub(crate) fn events_pk(queue: &str) -> String {
    format!("EVT#{queue}")
}

/// Partition of the marker of a run of change stream records applied together, by the
/// sequence number of its first record (a partition each: markers are written once and
/// read only when a run comes again).
pub(crate) fn stream_run_pk(first_sequence: &str) -> String {
    format!("STREAM#{first_sequence}")
}

/// Sort key of a run marker.
pub(crate) const STREAM_RUN_SK: &str = "RUN";

/// The item an in-process stream consumer (`make dev`, tests) raises to mark where a
/// catch-up must read to; never written on AWS.
pub(crate) const LOCAL_MARK_PK: &str = "LOCAL#CATCHUP";
/// Sort key of the catch-up mark.
pub(crate) const LOCAL_MARK_SK: &str = "MARK";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_keys_sort_by_priority_then_time() {
        let id = JobId::generate();
        let t1 = ojs_core::time::now();
        let t2 = t1 + chrono::Duration::microseconds(1);
        let high_late = ready_sk(100, &t2, &id);
        let high_early = ready_sk(100, &t1, &id);
        let normal = ready_sk(0, &t1, &id);
        let low = ready_sk(-100, &t1, &id);
        let mut keys = vec![
            low.clone(),
            normal.clone(),
            high_late.clone(),
            high_early.clone(),
        ];
        keys.sort();
        assert_eq!(keys, vec![high_early, high_late, normal, low]);
    }

    #[test]
    fn shards_are_stable_and_spread() {
        // Fixed vectors (FNV-1a 64 of the id text, computed independently in Python): a
        // change of hash would strand every entry written before it.
        let id = JobId::parse("019b0000-0000-7000-8000-000000000000").ok();
        let shards: Vec<u16> = [1, 2, 4, 16, 64]
            .iter()
            .filter_map(|n| id.as_ref().map(|id| shard_of(id, *n)))
            .collect();
        assert_eq!(shards, vec![0, 0, 2, 2, 2]);
        let queue = QueueName::parse("emails").ok();
        assert_eq!(
            queue.as_ref().map(|q| (
                ready_pk(&Lane::default_of(q), 0),
                ready_pk(&Lane::default_of(q), 3),
                due_pk(q, 0),
                due_pk(q, 3)
            )),
            Some((
                "READY#emails".to_owned(),
                "READY#emails#3".to_owned(),
                "DUE#emails".to_owned(),
                "DUE#emails#3".to_owned()
            ))
        );
        let mut counts = [0_u32; 8];
        for _ in 0..8_000 {
            counts[usize::from(shard_of(&JobId::generate(), 8))] += 1;
        }
        assert!(
            counts.iter().all(|c| (800..1_200).contains(c)),
            "uneven shards: {counts:?}"
        );
    }

    #[test]
    fn due_keys_sort_by_time_and_carry_priority() {
        let id = JobId::generate();
        let t = ojs_core::time::now();
        let k = due_sk(&t, -7, None, &id);
        assert_eq!(priority_from_due_sk(&k), Some(-7));
        assert_eq!(tenant_from_due_sk(&k), None);
        assert!(k.as_str() < due_upper_bound(&t).as_str());
        let later = t + chrono::Duration::microseconds(1);
        assert!(due_sk(&later, 100, None, &id).as_str() > due_upper_bound(&t).as_str());
    }

    #[test]
    fn a_tenants_lane_and_due_entries_carry_it() {
        let id = JobId::generate();
        let t = ojs_core::time::now();
        let acme = TenantId::parse("acme:eu-1").ok().flatten();
        let k = due_sk(&t, 5, acme.as_ref(), &id);
        assert_eq!(tenant_from_due_sk(&k), acme);
        assert_eq!(priority_from_due_sk(&k), Some(5));
        assert!(k.ends_with(&format!("#{id}")), "the id stays last: {k}");
        assert!(k.as_str() < due_upper_bound(&t).as_str());
        let queue = QueueName::parse("emails").ok();
        let lanes = queue.map(|q| {
            let lane = Lane {
                queue: q.clone(),
                tenant: acme.clone(),
            };
            (
                ready_pk(&lane, 0),
                ready_pk(&lane, 2),
                ready_pk(&Lane::default_of(&q), 0),
            )
        });
        assert_eq!(
            lanes,
            Some((
                "READY#emails#T:acme:eu-1".to_owned(),
                "READY#emails#T:acme:eu-1#2".to_owned(),
                "READY#emails".to_owned()
            ))
        );
    }
}
