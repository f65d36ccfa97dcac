//! The one writer of a job's state and index attributes.
//!
//! A transition is named by core's [`Transition`]: core decides the states it may start
//! from, the state it leads to and which secondary entries a job in that state has
//! ([`JobState::indexing`]). [`JobWrite`] turns that into one conditional update: the
//! state condition, `#state`, the version bump, and every index attribute (`gsi1*` for the
//! ready index, `gsi2*` for the due index, `ttl`, `dead_sk`) set or removed as the target
//! state requires. Call sites add only what is their own (an attempt count, a result, an
//! error), and cannot leave a job in a state with the wrong entries: a [`Place`] that
//! does not fit the target state is refused before anything is sent. The write goes out
//! through the engine's writer ([`crate::engine::writer`]), which applies its effects.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use ojs_core::{Due, JobState, Transition};

use crate::error::StoreError;
use crate::item::{n, s, Item};

mod attributes;

/// Attributes that describe the holder of an `active` attempt; a job leaving `active`
/// loses them, so a later claim never inherits a previous holder.
const HOLDER: [&str; 3] = ["lease_until", "deadline_us", "worker_id"];

/// Where a job is listed after a transition: the index entries its new state needs.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// Claimable: a ready-index entry, and a due entry at its expiry if it has one.
    Ready {
        pk: String,
        sk: String,
        expiry: Option<(String, String)>,
    },
    /// Waiting for a time (start, next attempt, lease or deadline): a due-index entry.
    Due { pk: String, sk: String },
    /// Finished: kept until `ttl` (epoch seconds), then deleted by DynamoDB.
    Retained { ttl: AttributeValue },
    /// Finished into the dead letter queue: kept until an operator acts.
    DeadLetter { sk: String },
}

/// Which index entries a job keeps after a write, by its [`Place`].
#[derive(Debug, Default, Clone, Copy)]
struct Listed {
    ready: bool,
    due: bool,
    ttl: bool,
    dead: bool,
}

impl Place {
    /// Whether a job in `state` may be listed here (core's [`JobState::indexing`]).
    fn fits(&self, state: JobState) -> bool {
        let i = state.indexing();
        match self {
            Self::Ready { expiry, .. } => i.ready && (expiry.is_none() || i.due == Due::IfExpiring),
            Self::Due { .. } => !i.ready && i.due == Due::Always,
            Self::Retained { .. } => i.finished,
            Self::DeadLetter { .. } => state == JobState::Discarded,
        }
    }

    /// Adds the sets listing the job here to `sets` (their values to `values`), and says
    /// which entries it keeps.
    fn list(self, values: &mut Item, sets: &mut Vec<String>) -> Listed {
        let mut listed = Listed::default();
        match self {
            Place::Ready { pk, sk, expiry } => {
                listed.ready = true;
                values.insert(":t_readypk".into(), s(pk));
                values.insert(":t_readysk".into(), s(sk));
                sets.push("gsi1pk = :t_readypk, gsi1sk = :t_readysk".into());
                if let Some((pk, sk)) = expiry {
                    listed.due = true;
                    set_due(pk, sk, values, sets);
                }
            }
            Place::Due { pk, sk } => {
                listed.due = true;
                set_due(pk, sk, values, sets);
            }
            Place::Retained { ttl: at } => {
                listed.ttl = true;
                values.insert(":t_ttl".into(), at);
                sets.push("#ttl = :t_ttl".into());
            }
            Place::DeadLetter { sk } => {
                listed.dead = true;
                values.insert(":t_deadsk".into(), s(sk));
                sets.push("dead_sk = :t_deadsk".into());
            }
        }
        listed
    }
}

/// Adds the set of a due-index entry `pk`/`sk` to `sets`, its values to `values`.
fn set_due(pk: String, sk: String, values: &mut Item, sets: &mut Vec<String>) {
    values.insert(":t_duepk".into(), s(pk));
    values.insert(":t_duesk".into(), s(sk));
    sets.push("gsi2pk = :t_duepk, gsi2sk = :t_duesk".into());
}

/// A write's conditions: the job in one of the states `from`, at `version` when one is
/// given, and the caller's own `extra` ones (the values named added to `values`).
fn state_conditions(
    from: &[JobState],
    version: Option<u64>,
    extra: Vec<String>,
    values: &mut Item,
) -> Vec<String> {
    let mut conditions = Vec::new();
    let from: Vec<String> = from
        .iter()
        .enumerate()
        .map(|(i, state)| {
            let p = format!(":t_from{i}");
            values.insert(p.clone(), s(state.as_str()));
            p
        })
        .collect();
    conditions.push(match from.as_slice() {
        [one] => format!("#state = {one}"),
        many => format!("#state IN ({})", many.join(", ")),
    });
    if let Some(v) = version {
        values.insert(":t_version".into(), n(v));
        conditions.push("version = :t_version".into());
    }
    conditions.extend(extra);
    conditions
}

/// What a write to `to` that leaves the job `listed` removes: the caller's `removes`,
/// the entries it does not keep, the holder unless the job is active and the checkpoint
/// when it ends.
fn removed(mut removes: Vec<String>, listed: Listed, to: JobState) -> Vec<String> {
    let placed = [
        (listed.ready, ["gsi1pk", "gsi1sk"].as_slice()),
        (listed.due, ["gsi2pk", "gsi2sk"].as_slice()),
        (listed.ttl, ["#ttl"].as_slice()),
        (listed.dead, ["dead_sk"].as_slice()),
        (to == JobState::Active, HOLDER.as_slice()),
    ];
    if to.is_terminal() {
        // ojs-durable-execution.md §5.2: a job that ends loses its checkpoint in the
        // write that ends it, whichever transition that is.
        removes.extend(
            crate::item::CHECKPOINT_ATTRS
                .iter()
                .map(|a| (*a).to_owned()),
        );
    }
    for (kept, attributes) in placed {
        if !kept {
            removes.extend(attributes.iter().map(|a| (*a).to_owned()));
        }
    }
    // A caller may name one of these for its own reasons; DynamoDB refuses an
    // attribute twice in one expression.
    removes.sort();
    removes.dedup();
    removes
}

/// One conditional update of a job item by a [`Transition`].
#[derive(Debug)]
pub(crate) struct JobWrite {
    transition: Transition,
    from: Vec<JobState>,
    version: Option<u64>,
    place: Place,
    sets: Vec<String>,
    removes: Vec<String>,
    conditions: Vec<String>,
    names: HashMap<String, String>,
    values: Item,
    /// The write's id, by which a retried write that had landed is known as ours.
    pub(crate) wid: Option<AttributeValue>,
    /// A failed condition on a job still active under another attempt or holder is
    /// answered `NotHolder` (ACK), not the usual conflict.
    pub(crate) refuses_other_holders: bool,
    /// The job this write finishes is not followed up: the workflow writing it keeps
    /// its own books (a step it cancels).
    pub(crate) quiet: bool,
}

/// An attribute of a job item that a transition's caller stamps with a time or clears;
/// the expression text for it is written here only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    EnqueuedAt,
    StartedAt,
    CompletedAt,
    CancelledAt,
    DiscardedAt,
    NextAttemptAt,
    DepsLeft,
    WorkerId,
    Error,
    Result,
    Errors,
    CancelledFrom,
    RetryDelayMs,
}

impl Field {
    /// The attribute's name on the item.
    fn attribute(self) -> &'static str {
        match self {
            Field::EnqueuedAt => "enqueued_at",
            Field::StartedAt => "started_at",
            Field::CompletedAt => "completed_at",
            Field::CancelledAt => "cancelled_at",
            Field::DiscardedAt => "discarded_at",
            Field::NextAttemptAt => "next_attempt_at",
            Field::DepsLeft => "deps_left",
            Field::WorkerId => "worker_id",
            Field::Error => "error",
            Field::Result => "result",
            Field::Errors => "errors",
            Field::CancelledFrom => "cancelled_from",
            Field::RetryDelayMs => "retry_delay_ms",
        }
    }

    /// How an expression names it: through a placeholder, since DynamoDB reserves some
    /// of these words (`result`, ...); the placeholder is the attribute's name behind `#`.
    fn placeholder(self) -> String {
        format!("#{}", self.attribute())
    }
}

/// The parts of an update expression, for an UpdateItem or a transaction's Update.
#[derive(Debug)]
pub(crate) struct WriteParts {
    pub update: String,
    pub condition: String,
    pub names: HashMap<String, String>,
    pub values: Item,
}

impl JobWrite {
    /// A write of `transition` from any state core allows it from, listing the job at
    /// `place`.
    pub(crate) fn new(transition: Transition, place: Place) -> Self {
        Self {
            transition,
            from: JobState::sources(transition),
            version: None,
            place,
            sets: Vec::new(),
            removes: Vec::new(),
            conditions: Vec::new(),
            names: HashMap::new(),
            values: Item::new(),
            wid: None,
            refuses_other_holders: false,
            quiet: false,
        }
    }

    /// A failed condition on a job still active, under another attempt or holder, is
    /// refused as `NotHolder` (see [`JobWrite::refuses_other_holders`]).
    pub(crate) fn refusing_other_holders(mut self) -> Self {
        self.refuses_other_holders = true;
        self
    }

    /// The job this write finishes is not followed up (see [`JobWrite::quiet`]).
    pub(crate) fn quietly(mut self) -> Self {
        self.quiet = true;
        self
    }

    /// Only from `state` (which the transition must allow), e.g. the state read.
    pub(crate) fn from(mut self, state: JobState) -> Self {
        self.from.retain(|s| *s == state);
        self
    }

    /// Only if the item is still at `version` (the one read).
    pub(crate) fn version(mut self, version: u64) -> Self {
        self.version = Some(version);
        self
    }

    /// Sets an attribute (`fragment` as in `a = :a`). This and the four below are the
    /// writer's own: call sites say what they write with the typed setters, never with
    /// expression text.
    fn set(mut self, fragment: impl Into<String>) -> Self {
        self.sets.push(fragment.into());
        self
    }

    /// Removes an attribute.
    fn remove(mut self, attribute: impl Into<String>) -> Self {
        self.removes.push(attribute.into());
        self
    }

    /// A further condition, ANDed with the state condition.
    fn when(mut self, condition: impl Into<String>) -> Self {
        self.conditions.push(condition.into());
        self
    }

    /// A value placeholder used by the fragments.
    fn value(mut self, placeholder: &str, value: AttributeValue) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }

    /// A name placeholder used by the fragments.
    fn name(mut self, placeholder: &str, attribute: &str) -> Self {
        self.names
            .insert(placeholder.to_owned(), attribute.to_owned());
        self
    }

    /// The expression, or an error when the write would break the state machine: no
    /// legal source state left, or a place that does not fit the target state.
    pub(super) fn parts(self) -> Result<WriteParts, StoreError> {
        let to = self.transition.target();
        if self.from.is_empty() || !self.place.fits(to) {
            return Err(StoreError::Backend(format!(
                "internal: a {} write to {to} listed at {:?} from {:?}",
                self.transition.as_str(),
                self.place,
                self.from
            )));
        }
        let mut names = self.names;
        names.insert("#state".into(), "state".into());
        names.insert("#ttl".into(), "ttl".into());
        let mut values = self.values;
        values.insert(":t_to".into(), s(to.as_str()));
        values.insert(":t_one".into(), n(1));

        let conditions = state_conditions(&self.from, self.version, self.conditions, &mut values);
        let mut sets = vec![
            "#state = :t_to".to_owned(),
            "version = version + :t_one".to_owned(),
        ];
        sets.extend(self.sets);
        let listed = self.place.list(&mut values, &mut sets);
        let removes = removed(self.removes, listed, to);
        let mut update = format!("SET {}", sets.join(", "));
        if !removes.is_empty() {
            update.push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        Ok(WriteParts {
            update,
            condition: conditions.join(" AND "),
            names,
            values,
        })
    }
}

impl WriteParts {
    /// Puts these parts on an UpdateItem request.
    pub(super) fn apply(self, req: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
        let names = declared(self.names);
        req.update_expression(self.update)
            .condition_expression(self.condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(Some(self.values))
    }
}

/// Name placeholders as DynamoDB takes them: none at all rather than an empty map.
fn declared(names: HashMap<String, String>) -> Option<HashMap<String, String>> {
    (!names.is_empty()).then_some(names)
}

/// Lists an available job (at `version`) in the due index at its expiry, for a write
/// that made it available without knowing the expiry ([`Place::Ready`] lists it when
/// known). Not a transition: the state stays.
pub(crate) fn list_expiry((pk, sk): (String, String), version: u64) -> WriteParts {
    WriteParts {
        update: "SET gsi2pk = :t_duepk, gsi2sk = :t_duesk".into(),
        condition: "#state = :t_available AND version = :t_version".into(),
        names: HashMap::from([("#state".to_owned(), "state".to_owned())]),
        values: Item::from([
            (":t_duepk".to_owned(), s(pk)),
            (":t_duesk".to_owned(), s(sk)),
            (":t_available".to_owned(), s(JobState::Available.as_str())),
            (":t_version".to_owned(), n(version)),
        ]),
    }
}

/// Takes a job that cannot be processed (its item unreadable) out of every index, with
/// `why` recorded, so FETCH and the sweep stop meeting it; its state stays for an
/// operator to see. Not a transition: nothing about the job can be trusted to decide one.
pub(crate) fn set_aside(why: String) -> WriteParts {
    WriteParts {
        update: "SET set_aside = :t_why REMOVE gsi1pk, gsi1sk, gsi2pk, gsi2sk".into(),
        condition: "attribute_exists(pk)".into(),
        names: HashMap::new(),
        values: Item::from([(":t_why".to_owned(), s(why))]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{json, ts};

    fn removed(p: &WriteParts) -> &str {
        p.update.split(" REMOVE ").nth(1).unwrap_or_default()
    }

    fn due() -> Place {
        Place::Due {
            pk: "DUE#q".into(),
            sk: "1#000#id".into(),
        }
    }

    fn ready(expiry: bool) -> Place {
        Place::Ready {
            pk: "READY#q".into(),
            sk: "000#1#id".into(),
            expiry: expiry.then(|| ("DUE#q".to_owned(), "2#000#id".to_owned())),
        }
    }

    #[test]
    fn a_claim_lists_the_job_due_and_out_of_the_ready_index() -> Result<(), StoreError> {
        let p = JobWrite::new(Transition::Claim, due())
            .set("attempt = attempt + :one")
            .value(":one", n(1))
            .parts()?;
        assert_eq!(p.condition, "#state = :t_from0");
        assert_eq!(p.values[":t_from0"], s("available"));
        assert_eq!(p.values[":t_to"], s("active"));
        assert!(p
            .update
            .starts_with("SET #state = :t_to, version = version + :t_one"));
        assert!(p.update.contains("gsi2pk = :t_duepk, gsi2sk = :t_duesk"));
        let removed = removed(&p);
        assert_eq!(removed, "#ttl, dead_sk, gsi1pk, gsi1sk");
        Ok(())
    }

    #[test]
    fn leaving_active_drops_the_holder_and_the_due_entry() -> Result<(), StoreError> {
        let p = JobWrite::new(Transition::Ack, Place::Retained { ttl: n(5) })
            .version(3)
            .parts()?;
        assert_eq!(p.condition, "#state = :t_from0 AND version = :t_version");
        assert_eq!(p.values[":t_version"], n(3));
        let removed = removed(&p);
        assert_eq!(
            removed,
            "ckpt, ckpt_at, ckpt_seq, dead_sk, deadline_us, gsi1pk, gsi1sk, gsi2pk, gsi2sk, \
             lease_until, worker_id"
        );
        assert!(p.update.contains("#ttl = :t_ttl"));
        Ok(())
    }

    #[test]
    fn only_a_write_to_a_terminal_state_drops_the_checkpoint() -> Result<(), StoreError> {
        let dropped = |p: &WriteParts| removed(p).split(", ").any(|a| a == "ckpt");
        for (t, place) in [
            (Transition::Ack, Place::Retained { ttl: n(5) }),
            (Transition::Cancel, Place::Retained { ttl: n(5) }),
            (
                Transition::FailDiscard,
                Place::DeadLetter { sk: "x".into() },
            ),
        ] {
            let p = JobWrite::new(t, place).parts()?;
            assert!(dropped(&p), "{t:?}");
            for a in crate::item::CHECKPOINT_ATTRS {
                assert!(removed(&p).contains(a), "{t:?} keeps {a}");
            }
        }
        for (t, place) in [
            (Transition::FailRetry, due()),
            (Transition::Claim, due()),
            (Transition::Extend, due()),
            (Transition::Promote, ready(false)),
        ] {
            assert!(!dropped(&JobWrite::new(t, place).parts()?), "{t:?}");
        }
        Ok(())
    }

    #[test]
    fn a_transition_with_many_sources_names_them_all() -> Result<(), StoreError> {
        let p = JobWrite::new(Transition::Cancel, Place::Retained { ttl: n(5) }).parts()?;
        assert_eq!(
            p.condition,
            "#state IN (:t_from0, :t_from1, :t_from2, :t_from3, :t_from4)"
        );
        let narrowed = JobWrite::new(Transition::Cancel, Place::Retained { ttl: n(5) })
            .from(JobState::Pending)
            .when("attribute_exists(pk)")
            .parts()?;
        assert_eq!(
            narrowed.condition,
            "#state = :t_from0 AND attribute_exists(pk)"
        );
        assert_eq!(narrowed.values[":t_from0"], s("pending"));
        Ok(())
    }

    #[test]
    fn an_available_job_keeps_its_expiry_entry_and_nothing_else() -> Result<(), StoreError> {
        let p = JobWrite::new(Transition::Promote, ready(true)).parts()?;
        assert!(p.update.contains("gsi1pk = :t_readypk"));
        assert!(p.update.contains("gsi2pk = :t_duepk"));
        let removed = removed(&p);
        assert_eq!(
            removed,
            "#ttl, dead_sk, deadline_us, lease_until, worker_id"
        );
        let p = JobWrite::new(Transition::Promote, ready(false)).parts()?;
        assert!(p.update.contains("gsi2pk, gsi2sk"));
        Ok(())
    }

    #[test]
    fn a_place_that_does_not_fit_the_target_state_is_refused() -> Result<(), StoreError> {
        for (t, place) in [
            (Transition::Claim, ready(false)),
            (Transition::Promote, due()),
            (Transition::Ack, due()),
            (Transition::FailRetry, Place::Retained { ttl: n(1) }),
            (Transition::Defer, ready(true)),
            (Transition::Claim, Place::DeadLetter { sk: "x".into() }),
            (Transition::Ack, Place::DeadLetter { sk: "x".into() }),
        ] {
            assert!(JobWrite::new(t, place).parts().is_err(), "{t:?}");
        }
        // No legal source left.
        assert!(
            JobWrite::new(Transition::Ack, Place::Retained { ttl: n(1) })
                .from(JobState::Available)
                .parts()
                .is_err()
        );
        Ok(())
    }

    #[test]
    fn name_placeholders_are_sent_only_when_there_are_some() {
        assert_eq!(declared(HashMap::new()), None);
        let names = set_aside("unreadable".into()).names;
        assert_eq!(declared(names), None, "a set-aside names nothing");
        let names = list_expiry(("p".into(), "s".into()), 1).names;
        assert_eq!(
            declared(names.clone()),
            Some(names),
            "the expiry listing names #state"
        );
    }

    #[test]
    fn a_caller_naming_an_index_attribute_does_not_name_it_twice() -> Result<(), StoreError> {
        let p = JobWrite::new(Transition::Ack, Place::Retained { ttl: n(5) })
            .remove("worker_id")
            .remove("#error")
            .name("#error", "error")
            .parts()?;
        let removed = removed(&p);
        assert_eq!(removed.matches("worker_id").count(), 1);
        assert!(removed.contains("#error"));
        assert_eq!(p.names["#error"], "error");
        assert_eq!(p.names["#state"], "state");
        Ok(())
    }

    #[test]
    fn the_typed_setters_write_their_attributes_through_placeholders() -> Result<(), StoreError> {
        let now = ojs_core::time::now();
        let p = JobWrite::new(Transition::Ack, Place::Retained { ttl: n(5) })
            .stamp(Field::CompletedAt, &now)
            .write_id(&s("w1"))
            .clear(Field::Error)
            .result(Some(&serde_json::json!({"ok": true})))
            .parts()?;
        assert!(
            p.update.contains("#completed_at = :completed_at"),
            "{}",
            p.update
        );
        assert!(p.update.contains("write_id = :wid"));
        assert!(p.update.contains("#result = :result"));
        assert_eq!(p.names["#completed_at"], "completed_at");
        assert_eq!(p.names["#result"], "result");
        assert_eq!(p.values[":completed_at"], ts(&now));
        assert_eq!(p.values[":wid"], s("w1"));
        assert_eq!(p.values[":result"], json(&serde_json::json!({"ok": true})));
        assert!(removed(&p).split(", ").any(|a| a == "#error"));
        // No result: one left from before goes.
        let p = JobWrite::new(Transition::Ack, Place::Retained { ttl: n(5) })
            .result(None)
            .parts()?;
        assert!(removed(&p).split(", ").any(|a| a == "#result"));
        assert_eq!(p.names["#result"], "result");
        Ok(())
    }

    #[test]
    fn a_claim_names_its_holder_or_clears_one_left_behind() -> Result<(), StoreError> {
        let now = ojs_core::time::now();
        let p = JobWrite::new(Transition::Claim, due())
            .lease_until(&now)
            .worker(Some("w-7"))
            .parts()?;
        assert!(p.update.contains("lease_until = :lease"));
        assert!(p.update.contains("worker_id = :worker"));
        assert_eq!(p.values[":lease"], n(now.timestamp_micros()));
        assert_eq!(p.values[":worker"], s("w-7"));
        let p = JobWrite::new(Transition::Claim, due())
            .worker(None)
            .parts()?;
        assert!(removed(&p).split(", ").any(|a| a == "#worker_id"));
        assert!(!p.values.contains_key(":worker"));
        Ok(())
    }

    #[test]
    fn a_restart_is_a_new_job_with_no_trace_of_earlier_attempts() -> Result<(), StoreError> {
        let now = ojs_core::time::now();
        let p = JobWrite::new(Transition::Revive, ready(false))
            .restart(&now)
            .parts()?;
        assert!(p.update.contains("attempt = :set_attempt"));
        assert_eq!(p.values[":set_attempt"], n(0));
        assert!(p.update.contains("#enqueued_at = :enqueued_at"));
        assert_eq!(p.values[":enqueued_at"], ts(&now));
        let removed: Vec<&str> = removed(&p).split(", ").collect();
        for gone in [
            "errors",
            "error",
            "result",
            "completed_at",
            "discarded_at",
            "cancelled_at",
            "cancelled_from",
            "next_attempt_at",
            "retry_delay_ms",
            "started_at",
        ] {
            let placeholder = format!("#{gone}");
            assert!(
                removed.contains(&placeholder.as_str()),
                "{gone}: {removed:?}"
            );
            assert_eq!(p.names[&placeholder], gone);
        }
        Ok(())
    }
}
