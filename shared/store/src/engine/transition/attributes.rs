//! What a call site may add to a [`JobWrite`] besides its transition and place: the
//! job's own attributes (a stamp, a result, an error and its history, a retry's time, a
//! progress value, the request rewritten) and its guards (the attempt or holder a fence
//! names, the ready, due or dead letter entry read), each through a typed setter. The
//! expression text is written here and in the parent only: the methods that take text
//! are private to the transition module.

use aws_sdk_dynamodb::types::AttributeValue;
use ojs_core::time::Timestamp;
use serde_json::Value;

use super::{Field, JobWrite};
use crate::item::{json, n, s, ts};
use crate::settle::MAX_KEPT_ERRORS;

impl JobWrite {
    /// Sets `field` to the time `at` (a stamp such as `completed_at`).
    pub(crate) fn stamp(self, field: Field, at: &Timestamp) -> Self {
        let (name, value) = (field.placeholder(), format!(":{}", field.attribute()));
        self.set(format!("{name} = {value}"))
            .name(&name, field.attribute())
            .value(&value, ts(at))
    }

    /// Removes `field` from the item.
    pub(crate) fn clear(self, field: Field) -> Self {
        let name = field.placeholder();
        self.remove(name.clone()).name(&name, field.attribute())
    }

    /// Starts the job over as if new (a dead job retried, a finished one revived): attempt
    /// 0, enqueued `now`, and every trace of earlier attempts removed.
    pub(crate) fn restart(self, now: &Timestamp) -> Self {
        [
            Field::Errors,
            Field::Error,
            Field::Result,
            Field::CompletedAt,
            Field::DiscardedAt,
            Field::CancelledAt,
            Field::CancelledFrom,
            Field::NextAttemptAt,
            Field::RetryDelayMs,
            Field::StartedAt,
        ]
        .into_iter()
        .fold(self.attempt(0).stamp(Field::EnqueuedAt, now), Self::clear)
    }

    /// Records the write's id (`write_id`), by which a retry of it recognises it landed.
    pub(crate) fn write_id(mut self, wid: &AttributeValue) -> Self {
        self.wid = Some(wid.clone());
        self.set("write_id = :wid").value(":wid", wid.clone())
    }

    /// Sets the job's last error.
    pub(crate) fn error(self, error: &Value) -> Self {
        self.json_field(Field::Error, error)
    }

    /// Sets the job's result, or removes a result left from before when there is none.
    pub(crate) fn result(self, result: Option<&Value>) -> Self {
        match result {
            Some(r) => self.json_field(Field::Result, r),
            None => self.clear(Field::Result),
        }
    }

    /// Sets the attempt's holder, or removes it when the attempt has none.
    pub(crate) fn worker(self, worker_id: Option<&str>) -> Self {
        match worker_id {
            Some(w) => self
                .set("worker_id = :worker")
                .value(":worker", s(w.to_owned())),
            None => self.clear(Field::WorkerId),
        }
    }

    /// Sets the attempt count.
    pub(crate) fn attempt(self, attempt: u32) -> Self {
        self.set("attempt = :set_attempt")
            .value(":set_attempt", n(attempt))
    }

    /// Sets the attempt's lease end.
    pub(crate) fn lease_until(self, until: &Timestamp) -> Self {
        self.set("lease_until = :lease")
            .value(":lease", n(until.timestamp_micros()))
    }

    /// Only at attempt `attempt` (the one read, or the one a fence names); each such
    /// condition has a placeholder of its own, so two never overwrite each other.
    pub(crate) fn at_attempt(self, attempt: u32) -> Self {
        let placeholder = format!(":at_attempt{}", self.conditions.len());
        self.when(format!("attempt = {placeholder}"))
            .value(&placeholder, n(attempt))
    }

    /// Only while `worker_id` holds the attempt (a fence's holder).
    pub(crate) fn held_by(self, worker_id: &str) -> Self {
        self.when("worker_id = :held_by")
            .value(":held_by", s(worker_id.to_owned()))
    }

    /// Counts a new attempt (a claim).
    pub(crate) fn next_attempt(self) -> Self {
        self.set("attempt = attempt + :t_one")
    }

    /// Only while the ready index lists the job at `ready_sk` (the entry a FETCH read:
    /// a job that moved and came back is not claimed under an old read) and it has not
    /// expired at `now`.
    pub(crate) fn listed_ready_unexpired(self, ready_sk: &str, now: &Timestamp) -> Self {
        self.when("gsi1sk = :rsk AND (attribute_not_exists(expires_us) OR expires_us > :nowus)")
            .value(":rsk", s(ready_sk.to_owned()))
            .value(":nowus", n(now.timestamp_micros()))
    }

    /// Only while the due index lists the job at `due_sk` (the entry a sweep read).
    pub(crate) fn listed_due(self, due_sk: String) -> Self {
        self.when("gsi2sk = :duesk").value(":duesk", s(due_sk))
    }

    /// Only while the job is in the dead letter queue under `dead_sk` (its entry).
    pub(crate) fn listed_dead(self, dead_sk: String) -> Self {
        self.when("dead_sk = :deadsk").value(":deadsk", s(dead_sk))
    }

    /// Sets the attempt's execution deadline, or removes one left from before.
    pub(crate) fn deadline(self, deadline: Option<&Timestamp>) -> Self {
        match deadline {
            Some(d) => self
                .set("deadline_us = :deadline")
                .value(":deadline", n(d.timestamp_micros())),
            None => self.remove("deadline_us"),
        }
    }

    /// Records the state the job is cancelled from (`cancelled_from`, as written).
    pub(crate) fn cancelled_from_state(self) -> Self {
        let name = Field::CancelledFrom.placeholder();
        self.set(format!("{name} = #state"))
            .name(&name, Field::CancelledFrom.attribute())
    }

    /// Sets when the next attempt may start and the delay that led to it (a retry).
    pub(crate) fn retry_at(self, next: &Timestamp, delay: std::time::Duration) -> Self {
        let name = Field::RetryDelayMs.placeholder();
        self.stamp(Field::NextAttemptAt, next)
            .set(format!("{name} = :retry_delay_ms"))
            .name(&name, Field::RetryDelayMs.attribute())
            .value(":retry_delay_ms", n(delay.as_millis()))
    }

    /// Appends `error` to the error history `kept` (the list read), keeping the latest
    /// [`MAX_KEPT_ERRORS`]: a job failing without end still fits its item and can always
    /// be failed, reclaimed or discarded. Under the history's limit the entry is
    /// appended; at it the list read is replaced, which is safe because only a failure
    /// changes it and a failure moves the job out of `active` at the attempt the write's
    /// condition requires.
    pub(crate) fn error_history(self, kept: &[Value], error: &Value) -> Self {
        let name = Field::Errors.placeholder();
        let named = self.name(&name, Field::Errors.attribute());
        if kept.len() < MAX_KEPT_ERRORS {
            return named
                .set(format!(
                    "{name} = list_append(if_not_exists({name}, :no_errors), :errors)"
                ))
                .value(":no_errors", AttributeValue::L(Vec::new()))
                .value(":errors", AttributeValue::L(vec![json(error)]));
        }
        let history = kept[kept.len() + 1 - MAX_KEPT_ERRORS..]
            .iter()
            .chain(std::iter::once(error))
            .map(json)
            .collect();
        named
            .set(format!("{name} = :errors"))
            .value(":errors", AttributeValue::L(history))
    }

    /// Rewrites the job's request as `spec`, in whichever stored form is smaller now; the
    /// other form goes.
    pub(crate) fn request(self, spec: &ojs_core::job::JobSpec) -> Self {
        let (attribute, value) = crate::item::spec_attribute(spec);
        let other = if attribute == crate::item::SPEC_JSON {
            crate::item::SPEC_DEFLATED
        } else {
            crate::item::SPEC_JSON
        };
        self.set(format!("{attribute} = :spec"))
            .remove(other)
            .value(":spec", value)
    }

    /// Sets the job's progress, in its stored form.
    pub(crate) fn progress(self, stored: String) -> Self {
        self.set("progress = :progress")
            .value(":progress", s(stored))
    }

    fn json_field(self, field: Field, v: &Value) -> Self {
        let (name, value) = (field.placeholder(), format!(":{}", field.attribute()));
        self.set(format!("{name} = {value}"))
            .name(&name, field.attribute())
            .value(&value, json(v))
    }
}

#[cfg(test)]
mod tests {
    use ojs_core::{time, JobState, Transition};

    use super::*;
    use crate::transition::Place;

    fn due() -> Place {
        Place::Due {
            pk: "DUE#q#0".into(),
            sk: "0001#x".into(),
        }
    }

    fn ready() -> Place {
        Place::Ready {
            pk: "READY#q".into(),
            sk: "050#t".into(),
            expiry: None,
        }
    }

    /// Asserts that `text` (an expression or condition) holds `part`.
    fn contains(text: &str, part: &str) {
        assert!(text.contains(part), "{part:?} not in {text}");
    }

    fn fail() -> JobWrite {
        JobWrite::new(Transition::FailRetry, due()).from(JobState::Active)
    }

    fn error(i: usize) -> Value {
        serde_json::json!({ "message": format!("e{i}") })
    }

    #[test]
    fn two_attempt_guards_never_share_a_placeholder() -> Result<(), crate::StoreError> {
        let p = fail().at_attempt(3).held_by("w-1").at_attempt(3).parts()?;
        let guards: Vec<&str> = p
            .condition
            .split(" AND ")
            .filter(|c| c.starts_with("attempt = "))
            .collect();
        assert_eq!(guards.len(), 2, "{}", p.condition);
        assert_ne!(guards[0], guards[1]);
        for g in guards {
            assert_eq!(
                p.values.get(g.trim_start_matches("attempt = ")),
                Some(&n(3))
            );
        }
        contains(&p.condition, "worker_id = :held_by");
        assert_eq!(p.values.get(":held_by"), Some(&s("w-1")));
        Ok(())
    }

    #[test]
    fn the_error_history_appends_under_its_limit_and_keeps_the_latest_at_it(
    ) -> Result<(), crate::StoreError> {
        let kept: Vec<Value> = (0..3).map(error).collect();
        let p = fail().error_history(&kept, &error(3)).parts()?;
        assert!(
            p.update
                .contains("#errors = list_append(if_not_exists(#errors, :no_errors), :errors)"),
            "{}",
            p.update
        );
        assert_eq!(
            p.values.get(":errors"),
            Some(&AttributeValue::L(vec![json(&error(3))]))
        );
        assert_eq!(p.names.get("#errors").map(String::as_str), Some("errors"));
        // At the limit: the list read is replaced by its latest entries and the new one.
        let full: Vec<Value> = (0..MAX_KEPT_ERRORS).map(error).collect();
        let p = fail().error_history(&full, &error(99)).parts()?;
        contains(&p.update, "#errors = :errors");
        assert!(!p.values.contains_key(":no_errors"));
        let Some(AttributeValue::L(history)) = p.values.get(":errors") else {
            panic!("no history: {:?}", p.values);
        };
        assert_eq!(history.len(), MAX_KEPT_ERRORS);
        assert_eq!(history.first(), Some(&json(&error(1))));
        assert_eq!(history.last(), Some(&json(&error(99))));
        Ok(())
    }

    #[test]
    fn a_retry_records_its_time_and_delay() -> Result<(), crate::StoreError> {
        let next = time::now();
        let p = fail()
            .retry_at(&next, std::time::Duration::from_millis(1500))
            .parts()?;
        assert_eq!(p.values.get(":next_attempt_at"), Some(&ts(&next)));
        assert_eq!(p.values.get(":retry_delay_ms"), Some(&n(1500)));
        contains(&p.update, "#retry_delay_ms = :retry_delay_ms");
        assert_eq!(
            p.names.get("#retry_delay_ms").map(String::as_str),
            Some("retry_delay_ms")
        );
        Ok(())
    }

    #[test]
    fn a_claim_counts_its_attempt_and_checks_the_entry_it_read() -> Result<(), crate::StoreError> {
        let now = time::now();
        let claim = JobWrite::new(Transition::Claim, due());
        let p = claim
            .next_attempt()
            .deadline(Some(&now))
            .listed_ready_unexpired("050#t#id", &now)
            .parts()?;
        contains(&p.update, "attempt = attempt + :t_one");
        assert_eq!(p.values.get(":t_one"), Some(&n(1)));
        assert_eq!(p.values.get(":deadline"), Some(&n(now.timestamp_micros())));
        contains(&p.condition, "gsi1sk = :rsk");
        assert_eq!(p.values.get(":rsk"), Some(&s("050#t#id")));
        assert_eq!(p.values.get(":nowus"), Some(&n(now.timestamp_micros())));
        let without = JobWrite::new(Transition::Claim, due())
            .deadline(None)
            .parts()?;
        contains(&without.update, "deadline_us");
        assert!(!without.values.contains_key(":deadline"));
        Ok(())
    }

    #[test]
    fn a_rewritten_request_is_stored_in_one_form_and_the_other_removed(
    ) -> Result<(), crate::StoreError> {
        let new = ojs_core::job::NewJob::from_json(serde_json::json!({"type": "t", "args": [1]}))
            .map_err(crate::StoreError::corrupt)?;
        let job = ojs_core::Job::enqueue(new, time::now());
        let p = JobWrite::new(Transition::Defer, due())
            .request(&job.spec)
            .parts()?;
        let (attribute, value) = crate::item::spec_attribute(&job.spec);
        contains(&p.update, &format!("{attribute} = :spec"));
        assert_eq!(p.values.get(":spec"), Some(&value));
        let other = if attribute == crate::item::SPEC_JSON {
            crate::item::SPEC_DEFLATED
        } else {
            crate::item::SPEC_JSON
        };
        assert!(
            removed_attributes(&p.update).contains(&other),
            "{}",
            p.update
        );
        Ok(())
    }

    fn removed_attributes(update: &str) -> Vec<&str> {
        update
            .split(" REMOVE ")
            .nth(1)
            .unwrap_or_default()
            .split(", ")
            .collect()
    }

    /// `write`'s condition holds `clause`, whose placeholder `placeholder` is `value`.
    fn assert_guard(
        write: JobWrite,
        clause: &str,
        placeholder: &str,
        value: &str,
    ) -> Result<(), crate::StoreError> {
        let p = write.parts()?;
        contains(&p.condition, clause);
        assert_eq!(p.values.get(placeholder), Some(&s(value)));
        Ok(())
    }

    #[test]
    fn the_entry_guards_and_the_cancel_source_name_what_they_check() -> Result<(), crate::StoreError>
    {
        let promote = JobWrite::new(Transition::Promote, ready()).from(JobState::Scheduled);
        let due = promote.listed_due("due-sk".into());
        assert_guard(due, "gsi2sk = :duesk", ":duesk", "due-sk")?;
        let dead = JobWrite::new(Transition::RetryDead, ready()).listed_dead("dead-sk".into());
        assert_guard(dead, "dead_sk = :deadsk", ":deadsk", "dead-sk")?;
        let cancel = JobWrite::new(Transition::Cancel, Place::Retained { ttl: n(1) })
            .cancelled_from_state()
            .progress("{\"p\":1}".into())
            .parts()?;
        contains(&cancel.update, "#cancelled_from = #state");
        contains(&cancel.update, "progress = :progress");
        assert_eq!(cancel.values.get(":progress"), Some(&s("{\"p\":1}")));
        Ok(())
    }
}
