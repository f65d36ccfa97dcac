//! Checkpoints (ojs-durable-execution.md), kept on the job's own item (`ckpt`,
//! `ckpt_seq`, `ckpt_at`; see [`crate::item`]): a save is one conditional UpdateItem, a
//! FETCH and INFO carry the checkpoint with no further read, and the transitions to a
//! terminal state remove it in the write that ends the job ([`crate::transition`]).
//!
//! A save does not bump the job's `version`: it changes nothing a transition decides
//! on, and a transition that read the job before it (an ACK, a heartbeat) must not
//! fail for it. Its own condition decides instead: the job not terminal, and, when the
//! save names them, the holder's worker id and attempt and the sequence it follows.

use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use ojs_core::checkpoint::{Checkpoint, CheckpointSave};
use ojs_core::time::Timestamp;
use ojs_core::{JobId, JobState};

use crate::engine::Engine;
use crate::error::{is_condition_failure, Missing, StoreError};
use crate::item::{self, n, s, ts, Item, CHECKPOINT_ATTRS};
use crate::usage::Kind;

service! {
    /// Checkpoints of running jobs (ojs-durable-execution.md).
    Checkpoints over engine: Engine
}

impl Checkpoints<'_> {
    /// Saves `save` as job `id`'s checkpoint: one conditional UpdateItem. The sequence
    /// is the stored one plus one (1 when there is none), computed by the write itself,
    /// so concurrent saves get distinct numbers and the last one written is kept.
    /// Refused with [`StoreError::NotFound`] (no job), [`StoreError::Conflict`] (the job
    /// is terminal, or not active when the save names a worker or attempt),
    /// [`StoreError::NotHolder`] (active under another worker or attempt) and
    /// [`StoreError::StaleCheckpoint`] (the save's `sequence` does not follow the stored
    /// one).
    pub async fn save(
        &self,
        id: &JobId,
        save: &CheckpointSave,
        now: Timestamp,
    ) -> Result<Checkpoint, StoreError> {
        let (update, conditions, values) = save_expression(save, now);
        let out = self
            .engine
            .table
            .update_at(item::job_key(id))
            .update_expression(update)
            .condition_expression(conditions)
            .expression_attribute_names("#state", "state")
            .set_expression_attribute_values(Some(values))
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match self.engine.table.metered(Kind::Write, out) {
            Ok(out) => out
                .attributes()
                .map(item::checkpoint_of)
                .transpose()?
                .flatten()
                .ok_or_else(|| StoreError::Corrupt("a checkpoint save returned none".into())),
            Err(e) if is_condition_failure(&e) => Err(refusal(crate::job_item::old_item(&e), save)
                .naming(|| Missing::Job(id.to_string()))),
            Err(e) => Err(StoreError::from_sdk(e)),
        }
    }

    /// Deletes job `id`'s checkpoint: one conditional UpdateItem that succeeds whether
    /// there was one or not (idempotent); NotFound when there is no job `id`.
    pub async fn delete(&self, id: &JobId) -> Result<(), StoreError> {
        let remove = self
            .engine
            .table
            .update_at(item::job_key(id))
            .update_expression(format!("REMOVE {}", CHECKPOINT_ATTRS.join(", ")));
        self.engine
            .table
            .update_existing(remove)
            .await
            .map_err(|e| e.naming(|| Missing::Job(id.to_string())))
    }
}

/// The update, condition and values of a save.
fn save_expression(save: &CheckpointSave, now: Timestamp) -> (String, String, Item) {
    let mut values = Item::from([
        (":c".to_owned(), s(save.state_json.clone())),
        (":at".to_owned(), ts(&now)),
    ]);
    let mut conditions = vec!["attribute_exists(pk)".to_owned()];
    let live: Vec<String> = ojs_core::state::ALL_STATES
        .iter()
        .filter(|st| !st.is_terminal())
        .enumerate()
        .map(|(i, st)| {
            let p = format!(":live{i}");
            values.insert(p.clone(), s(st.as_str()));
            p
        })
        .collect();
    conditions.push(format!("#state IN ({})", live.join(", ")));
    if save.worker_id.is_some() || save.attempt.is_some() {
        values.insert(":active".into(), s(JobState::Active.as_str()));
        conditions.push("#state = :active".into());
    }
    if let Some(w) = &save.worker_id {
        values.insert(":w".into(), s(w.clone()));
        conditions.push("worker_id = :w".into());
    }
    if let Some(a) = save.attempt {
        values.insert(":a".into(), n(a));
        conditions.push("attempt = :a".into());
    }
    let sequence = match save.sequence {
        Some(seq) => {
            values.insert(":seq".into(), n(seq));
            if seq == 1 {
                conditions.push("attribute_not_exists(ckpt_seq)".into());
            } else {
                values.insert(":prev".into(), n(seq - 1));
                conditions.push("ckpt_seq = :prev".into());
            }
            ":seq"
        }
        None => {
            values.insert(":zero".into(), n(0));
            values.insert(":one".into(), n(1));
            "if_not_exists(ckpt_seq, :zero) + :one"
        }
    };
    let update = format!("SET ckpt = :c, ckpt_at = :at, ckpt_seq = {sequence}");
    (update, conditions.join(" AND "), values)
}

/// Why a save's condition failed, from the item it found.
fn refusal(old: Option<&Item>, save: &CheckpointSave) -> StoreError {
    let Some(old) = old else {
        return StoreError::missing();
    };
    let state = item::state_of(old);
    let fenced = save.worker_id.is_some() || save.attempt.is_some();
    if state.is_none_or(|st| st.is_terminal() || (fenced && st != JobState::Active)) {
        return StoreError::Conflict { current: state };
    }
    let get_n = |k: &str| {
        old.get(k)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let get_s = |k: &str| old.get(k).and_then(|v| v.as_s().ok()).map(String::as_str);
    let attempt = get_n("attempt").unwrap_or(0);
    let holder_differs = save
        .worker_id
        .as_deref()
        .is_some_and(|w| get_s("worker_id") != Some(w))
        || save.attempt.is_some_and(|a| u64::from(a) != attempt);
    if holder_differs {
        return StoreError::NotHolder {
            attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
        };
    }
    StoreError::StaleCheckpoint {
        current: get_n("ckpt_seq"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::time;

    fn save(worker: Option<&str>, attempt: Option<u32>, sequence: Option<u64>) -> CheckpointSave {
        CheckpointSave {
            state_json: "{}".into(),
            worker_id: worker.map(str::to_owned),
            attempt,
            sequence,
        }
    }

    #[test]
    fn an_unfenced_save_counts_up_on_any_live_job() {
        let (update, cond, values) = save_expression(&save(None, None, None), time::now());
        assert!(update.contains("ckpt_seq = if_not_exists(ckpt_seq, :zero) + :one"));
        assert!(cond.starts_with("attribute_exists(pk) AND #state IN ("));
        let live: Vec<&str> = values
            .iter()
            .filter(|(k, _)| k.starts_with(":live"))
            .filter_map(|(_, v)| v.as_s().ok().map(String::as_str))
            .collect();
        assert_eq!(live.len(), ojs_core::state::ALL_STATES.len() - 3);
        for st in ["completed", "cancelled", "discarded"] {
            assert!(!live.contains(&st), "{st}");
        }
        assert!(!cond.contains("worker_id") && !cond.contains("ckpt_seq"));
    }

    #[test]
    fn a_fenced_save_with_a_sequence_states_them_in_its_condition() {
        let (update, cond, values) =
            save_expression(&save(Some("w"), Some(2), Some(5)), time::now());
        assert!(update.ends_with("ckpt_seq = :seq"));
        for part in [
            "#state = :active",
            "worker_id = :w",
            "attempt = :a",
            "ckpt_seq = :prev",
        ] {
            assert!(cond.contains(part), "{part} in {cond}");
        }
        assert_eq!(values[":prev"], n(4));
        let (_, cond, _) = save_expression(&save(None, None, Some(1)), time::now());
        assert!(cond.contains("attribute_not_exists(ckpt_seq)"));
    }

    fn old(state: &str, worker: &str, attempt: u32, seq: Option<u64>) -> Item {
        let mut i = Item::from([
            ("state".to_owned(), s(state)),
            ("worker_id".to_owned(), s(worker)),
            ("attempt".to_owned(), n(attempt)),
        ]);
        if let Some(q) = seq {
            i.insert("ckpt_seq".into(), n(q));
        }
        i
    }

    #[test]
    fn a_refusal_names_its_cause() {
        let plain = save(None, None, Some(3));
        assert!(matches!(refusal(None, &plain), StoreError::NotFound(_)));
        assert!(matches!(
            refusal(Some(&old("completed", "w", 1, None)), &plain),
            StoreError::Conflict {
                current: Some(JobState::Completed)
            }
        ));
        assert!(matches!(
            refusal(Some(&old("active", "w", 1, Some(5))), &plain),
            StoreError::StaleCheckpoint { current: Some(5) }
        ));
        let fenced = save(Some("w"), Some(2), None);
        assert!(matches!(
            refusal(Some(&old("active", "other", 2, None)), &fenced),
            StoreError::NotHolder { attempt: 2 }
        ));
        assert!(matches!(
            refusal(Some(&old("active", "w", 3, None)), &fenced),
            StoreError::NotHolder { attempt: 3 }
        ));
        assert!(matches!(
            refusal(Some(&old("retryable", "w", 2, None)), &fenced),
            StoreError::Conflict {
                current: Some(JobState::Retryable)
            }
        ));
    }
}
