//! Key formats. Sort keys are fixed-width strings so lexical order is the intended order.

use ojs_core::job::MAX_PRIORITY;
use ojs_core::time::Timestamp;
use ojs_core::{JobId, QueueName};

/// Primary key of a job item.
pub(crate) fn job_pk(id: &JobId) -> String {
    format!("JOB#{id}")
}

/// Sort key of the job item within its partition.
pub(crate) const JOB_SK: &str = "JOB";

/// Partition of every queue item.
pub(crate) const QUEUES_PK: &str = "QUEUES";

/// Sort key of a queue item.
pub(crate) fn queue_sk(queue: &str) -> String {
    format!("Q#{queue}")
}

/// Sort key of a queue's terminal-state counters (`~` sorts after every queue item, and
/// `#` cannot appear in a queue name).
pub(crate) fn queue_counts_sk(queue: &str) -> String {
    format!("~COUNTS#{queue}")
}

/// Ready-index partition of a queue.
pub(crate) fn ready_pk(queue: &QueueName) -> String {
    format!("READY#{queue}")
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

/// Due-index partition of a queue.
pub(crate) fn due_pk(queue: &QueueName) -> String {
    format!("DUE#{queue}")
}

/// Due-index sort key: the time the job becomes actionable, then priority, then id. The
/// priority is carried here so a promotion can build the ready key without reading the item.
pub(crate) fn due_sk(at: &Timestamp, priority: i32, id: &JobId) -> String {
    format!(
        "{:016}#{}#{id}",
        at.timestamp_micros(),
        priority_key(priority)
    )
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

/// Partition of every worker item.
pub(crate) const WORKERS_PK: &str = "WORKERS";

/// Sort key of a worker item.
pub(crate) fn worker_sk(worker_id: &str) -> String {
    format!("W#{worker_id}")
}

/// Partition of the dead letter index.
pub(crate) const DEAD_PK: &str = "DEAD";

/// Dead-letter sort key: queue, discard time, id (so `?queue=` is a prefix query).
pub(crate) fn dead_sk(queue: &QueueName, at: &Timestamp, id: &JobId) -> String {
    format!("{queue}#{:016}#{id}", at.timestamp_micros())
}

/// Partition of a queue's events.
pub(crate) fn events_pk(queue: &str) -> String {
    format!("EVT#{queue}")
}

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
    fn due_keys_sort_by_time_and_carry_priority() {
        let id = JobId::generate();
        let t = ojs_core::time::now();
        let k = due_sk(&t, -7, &id);
        assert_eq!(priority_from_due_sk(&k), Some(-7));
        assert!(k.as_str() < due_upper_bound(&t).as_str());
        let later = t + chrono::Duration::microseconds(1);
        assert!(due_sk(&later, 100, &id).as_str() > due_upper_bound(&t).as_str());
    }
}
