//! The writes of a registration's item, typed: registering it (or registering it again)
//! and advancing it past an occurrence. Both say where the item is listed next through
//! [`CronWrite::next`] (the due index while enabled and with an occurrence to come), so
//! they cannot disagree about it; no call site writes expression text.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::Update;
use ojs_core::cron_job::CronJob;
use ojs_core::time::Timestamp;
use ojs_core::JobId;
use serde_json::Value;

use crate::error::StoreError;
use crate::item::{n, s, ts, Item};
use crate::keys;

/// One write of a registration's item.
#[derive(Debug)]
pub(super) struct CronWrite {
    name: String,
    sets: Vec<&'static str>,
    removes: Vec<&'static str>,
    condition: Option<&'static str>,
    names: HashMap<String, String>,
    values: Item,
}

impl CronWrite {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            sets: Vec::new(),
            removes: Vec::new(),
            condition: None,
            names: HashMap::new(),
            values: Item::new(),
        }
    }

    fn value(mut self, placeholder: &str, value: aws_sdk_dynamodb::types::AttributeValue) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }

    /// Registers `cron` (or registers it again) at `now`, by the API key `created_by`.
    /// Unconditional: the registration and its name are replaced, while the first
    /// registration's time, the run count and the version keep counting, so a fire that
    /// read the old registration cannot commit over the new one (its condition is on the
    /// version it read), and `last_job_id` keeps overlap tracking going.
    pub(super) fn register(cron: &CronJob, created_by: Option<&str>, now: &Timestamp) -> Self {
        let mut write = Self::new(&cron.name);
        write.sets = vec![
            "doc = :doc",
            "#name = :name",
            "created_at = if_not_exists(created_at, :now)",
            "run_count = if_not_exists(run_count, :zero)",
            "version = if_not_exists(version, :zero) + :one",
        ];
        write.names.insert("#name".into(), "name".into());
        write = write
            .value(":doc", s(Value::Object(cron.to_json()).to_string()))
            .value(":name", s(cron.name.clone()))
            .value(":now", ts(now))
            .value(":zero", n(0))
            .value(":one", n(1));
        match created_by {
            Some(by) => {
                write.sets.push("created_by = :by");
                write.value(":by", s(by.to_owned()))
            }
            None => {
                write.removes.push("created_by");
                write
            }
        }
    }

    /// Advances the registration named `name`, read at `version`, past its occurrence
    /// `due` (fired or skipped); only while it is still at that version.
    pub(super) fn advance(name: &str, version: u64, due: &Timestamp) -> Self {
        let mut write = Self::new(name);
        write.sets = vec!["last_run_at = :now", "version = version + :one"];
        write.condition = Some("version = :version");
        write
            .value(":version", n(version))
            .value(":now", ts(due))
            .value(":one", n(1))
    }

    /// Its next occurrence at `next` (none: it never fires again), listed in the due
    /// index, where the sweep finds it, while `enabled`.
    pub(super) fn next(mut self, next: Option<&Timestamp>, enabled: bool) -> Self {
        match next {
            Some(next) => {
                self.sets.push("next_run_us = :next");
                self = self.value(":next", n(next.timestamp_micros()));
            }
            None => self.removes.push("next_run_us"),
        }
        match next.filter(|_| enabled) {
            Some(next) => {
                self.sets.extend(["gsi2pk = :duepk", "gsi2sk = :duesk"]);
                let sk = keys::cron_due_sk(next, &self.name);
                self.value(":duepk", s(keys::CRON_DUE_PK))
                    .value(":duesk", s(sk))
            }
            None => {
                self.removes.extend(["gsi2pk", "gsi2sk"]);
                self
            }
        }
    }

    /// The occurrence fired `job`: counted, and remembered for the overlap policy.
    pub(super) fn fired(mut self, job: &JobId) -> Self {
        self.sets
            .extend(["run_count = run_count + :one", "last_job_id = :job"]);
        self.value(":one", n(1)).value(":job", s(job.to_string()))
    }

    fn expression(&self) -> String {
        let mut expression = format!("SET {}", self.sets.join(", "));
        if !self.removes.is_empty() {
            expression.push_str(&format!(" REMOVE {}", self.removes.join(", ")));
        }
        expression
    }

    /// This write on an UpdateItem of the registration's item.
    pub(super) fn on(self, req: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
        let expression = self.expression();
        req.update_expression(expression)
            .set_condition_expression(self.condition.map(str::to_owned))
            .set_expression_attribute_names((!self.names.is_empty()).then_some(self.names))
            .set_expression_attribute_values(Some(self.values))
    }

    /// This write as a transaction's Update of the registration's item `key` in `table`.
    pub(super) fn update(self, table: &str, key: Item) -> Result<Update, StoreError> {
        let expression = self.expression();
        Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression(expression)
            .set_condition_expression(self.condition.map(str::to_owned))
            .set_expression_attribute_names((!self.names.is_empty()).then_some(self.names))
            .set_expression_attribute_values(Some(self.values))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::time;

    fn cron(enabled: bool) -> CronJob {
        let mut cron = CronJob::from_json(serde_json::json!({
            "name": "nightly", "expression": "0 3 * * *",
            "job_template": {"type": "t", "args": []}
        }))
        .unwrap_or_else(|e| panic!("{}", e.message));
        cron.enabled = enabled;
        cron
    }

    #[test]
    fn an_enabled_registration_with_a_next_occurrence_is_listed_for_the_sweep() {
        let now = time::now();
        let next = cron(true).schedule.next_after(now);
        let w = CronWrite::register(&cron(true), Some("key-1"), &now).next(next.as_ref(), true);
        let e = w.expression();
        assert!(
            e.contains("gsi2pk = :duepk") && e.contains("gsi2sk = :duesk"),
            "{e}"
        );
        assert!(
            e.contains("created_by = :by") && e.contains("next_run_us = :next"),
            "{e}"
        );
        assert_eq!(w.values.get(":duepk"), Some(&s(keys::CRON_DUE_PK)));
        assert!(
            w.condition.is_none(),
            "a registration replaces whatever is there"
        );
    }

    #[test]
    fn a_paused_or_finished_registration_leaves_the_due_index() {
        let now = time::now();
        let next = cron(false).schedule.next_after(now);
        let paused = CronWrite::register(&cron(false), None, &now).next(next.as_ref(), false);
        let e = paused.expression();
        // It keeps its next time (shown while paused) but is not listed.
        assert!(e.contains("next_run_us = :next"), "{e}");
        assert!(e.ends_with("REMOVE created_by, gsi2pk, gsi2sk"), "{e}");
        let last = CronWrite::advance("nightly", 4, &now).next(None, true);
        let e = last.expression();
        assert!(e.ends_with("REMOVE next_run_us, gsi2pk, gsi2sk"), "{e}");
        assert_eq!(last.condition, Some("version = :version"));
        assert_eq!(last.values.get(":version"), Some(&n(4)));
    }

    #[test]
    fn placeholders_for_names_are_sent_only_by_a_write_that_uses_one() {
        let now = time::now();
        let register = || CronWrite::register(&cron(true), None, &now).next(None, true);
        let advance = || CronWrite::advance("nightly", 1, &now).next(None, true);
        let name =
            |names: Option<&HashMap<String, String>>| names.and_then(|m| m.get("#name")).cloned();
        // DynamoDB refuses an empty map of names, and a placeholder without its name.
        let update = |w: CronWrite| w.update("t", Item::new()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            name(update(register()).expression_attribute_names()),
            Some("name".into())
        );
        assert!(update(advance()).expression_attribute_names().is_none());
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(config);
        let on = |w: CronWrite| w.on(client.update_item());
        assert_eq!(
            name(on(register()).get_expression_attribute_names().as_ref()),
            Some("name".into())
        );
        assert!(on(advance()).get_expression_attribute_names().is_none());
        assert_eq!(
            on(advance()).get_condition_expression().as_deref(),
            Some("version = :version")
        );
    }

    #[test]
    fn a_fired_occurrence_is_counted_and_remembered() {
        let now = time::now();
        let job = JobId::generate();
        let w = CronWrite::advance("nightly", 1, &now).fired(&job);
        let e = w.expression();
        assert!(e.contains("run_count = run_count + :one"), "{e}");
        assert_eq!(w.values.get(":job"), Some(&s(job.to_string())));
    }
}
