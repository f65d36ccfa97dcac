//! Cron schedules (ojs-cron.md §3-§5): parsing, validation and next-fire-time math.
//!
//! Accepted syntax:
//! - 5-field expressions `minute hour day-of-month month day-of-week` with `*`, lists `a,b`,
//!   ranges `a-b`, steps `*/n`, `a-b/n` and `a/n` (= `a-max/n`), case-insensitive `JAN`-`DEC`
//!   and `SUN`-`SAT`, day-of-week 0-7 (0 and 7 are Sunday), and the Quartz extensions the spec
//!   recommends: `L`, `LW`, `nW` in day-of-month and `dL`, `d#k` in day-of-week.
//!   If both day fields are restricted a day matches when either does; if either begins with
//!   `*` both must match (Vixie cron's rule, so `0 0 */2 * MON` means odd days that are Mondays).
//! - `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`.
//! - `@every <duration>` (Go-style `1h30m`, `45s`, `500ms`), which fires at fixed intervals from
//!   an anchor: [`CronSchedule::next_after`] takes `after` as that anchor (the registration or
//!   last trigger time), so it simply returns `after + duration`.
//!
//! 6-field expressions with seconds (which the spec leaves optional) are refused.
//!
//! Time zones follow §5.2: a wall-clock time skipped by a spring-forward transition does not
//! fire that day; a wall-clock time repeated by a fall-back transition fires once, at its first
//! occurrence. The one exception is schedules that select every hour (`0 * * * *`, `*/5 * * * *`):
//! they keep their rhythm through the repeated hour, because its second pass is a different
//! hour of real time, not a duplicate of a wall-clock appointment.

mod expr;
mod zone;

#[cfg(test)]
mod tests;

use chrono::{
    DateTime, Datelike, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

use expr::Fields;
pub use zone::DEFAULT_TIMEZONE;

/// How far [`CronSchedule::next_after`] looks before concluding a schedule never fires again:
/// 400 years of wall-clock time. The Gregorian calendar (weekdays included) repeats every 400
/// years, so `None` means the expression can never match (e.g. `0 0 31 2 *`) or every match
/// falls in a DST gap, not merely that it matches rarely (`0 0 * 2 1#5` does fire, every
/// 28-40 years). The cost of concluding `None` is a few thousand day checks.
///
/// DST rules come from chrono-tz's bundled tables, which end in 2099; later years keep each
/// zone's last offset.
pub const SEARCH_HORIZON_YEARS: i32 = 400;

/// Why an expression or time zone was refused. The message names the bad field and value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("invalid cron expression: {0}")]
    Expression(String),
    #[error("invalid timezone: {0}")]
    Timezone(String),
}

/// A parsed, validated cron schedule in a time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSchedule {
    expression: String,
    timezone: String,
    tz: Tz,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Calendar(Fields),
    Interval(TimeDelta),
}

impl CronSchedule {
    /// Parses a 5-field expression or a special expression (`@daily`, `@every 5m`, ...) with an
    /// IANA time zone name (default `"UTC"`).
    pub fn parse(expression: &str, timezone: Option<&str>) -> Result<Self, CronError> {
        let zone_name = timezone.unwrap_or(DEFAULT_TIMEZONE);
        let tz = zone::resolve(zone_name)?;
        let kind = parse_kind(expression.trim()).map_err(CronError::Expression)?;
        Ok(CronSchedule {
            expression: expression.to_string(),
            timezone: zone_name.to_string(),
            tz,
            kind,
        })
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone as given, or `"UTC"` if none was.
    pub fn timezone(&self) -> &str {
        &self.timezone
    }

    /// For `@every` schedules, the interval; `None` for calendar schedules.
    pub fn interval(&self) -> Option<TimeDelta> {
        match &self.kind {
            Kind::Interval(every) => Some(*every),
            Kind::Calendar(_) => None,
        }
    }

    /// Non-fatal remarks (ojs-cron.md §3.5: warn, do not reject, day-of-month values missing
    /// from some selected months). Empty for most expressions.
    pub fn warnings(&self) -> Vec<String> {
        match &self.kind {
            Kind::Calendar(fields) => fields.warnings(),
            Kind::Interval(_) => Vec::new(),
        }
    }

    /// The first fire time strictly after `after`, in UTC. Fire times fall on second 0 of a
    /// wall-clock minute. `None` if nothing fires within [`SEARCH_HORIZON_YEARS`].
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Interval(every) => after.checked_add_signed(*every),
            Kind::Calendar(fields) => self.next_calendar(fields, after),
        }
    }

    fn next_calendar(&self, fields: &Fields, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let offset = self.tz.offset_from_utc_datetime(&after.naive_utc()).fix();
        let local = after.naive_utc().checked_add_offset(offset)?;
        let last_year = local.year().checked_add(SEARCH_HORIZON_YEARS)?;
        let minute = TimeDelta::minutes(1);
        let mut from = floor_minute(local)?.checked_add_signed(minute)?;
        let repeats = fields.every_hour();

        // Wall-clock candidates are visited in wall-clock order, which is also real-time order
        // except in one case: `after` lies in the first pass through a fall-back hour and the
        // schedule fires on both passes. Then second-pass times earlier on the wall clock than
        // `after` are still ahead in real time, so search the whole repeated stretch explicitly.
        if repeats {
            if let Some((first, second)) = ambiguous(self.tz.from_local_datetime(&local)) {
                if after < second {
                    let fold = second - first;
                    let end = local.checked_add_signed(fold)?;
                    let mut cursor = floor_minute(local.checked_sub_signed(fold)?)?;
                    let mut best: Option<DateTime<Utc>> = None;
                    while let Some(candidate) =
                        fields.next_match(cursor, last_year).filter(|c| *c <= end)
                    {
                        for instant in self.instants(candidate, true).into_iter().flatten() {
                            if instant > after && best.is_none_or(|b| instant < b) {
                                best = Some(instant);
                            }
                        }
                        cursor = candidate.checked_add_signed(minute)?;
                    }
                    if best.is_some() {
                        return best;
                    }
                    from = floor_minute(end)?.checked_add_signed(minute)?;
                }
            }
        }

        loop {
            let candidate = fields.next_match(from, last_year)?;
            let next = self
                .instants(candidate, repeats)
                .into_iter()
                .flatten()
                .find(|i| *i > after);
            if next.is_some() {
                return next;
            }
            from = candidate.checked_add_signed(minute)?;
        }
    }

    /// The real instants at which wall-clock time `local` fires, earliest first: none in a DST
    /// gap; in a fold the first occurrence, plus the second one if `repeats`.
    fn instants(&self, local: NaiveDateTime, repeats: bool) -> [Option<DateTime<Utc>>; 2] {
        match self.tz.from_local_datetime(&local) {
            LocalResult::Single(at) => [Some(at.with_timezone(&Utc)), None],
            LocalResult::Ambiguous(a, b) => {
                let (first, second) = ordered(a.with_timezone(&Utc), b.with_timezone(&Utc));
                [Some(first), repeats.then_some(second)]
            }
            LocalResult::None => [None, None],
        }
    }
}

fn ambiguous(result: LocalResult<DateTime<Tz>>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    match result {
        LocalResult::Ambiguous(a, b) => Some(ordered(a.with_timezone(&Utc), b.with_timezone(&Utc))),
        _ => None,
    }
}

fn ordered(a: DateTime<Utc>, b: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

fn floor_minute(at: NaiveDateTime) -> Option<NaiveDateTime> {
    at.with_second(0)?.with_nanosecond(0)
}

fn parse_kind(expression: &str) -> Result<Kind, String> {
    if expression.is_empty() {
        return Err("the expression is empty".into());
    }
    if let Some(special) = expression.strip_prefix('@') {
        return parse_special(special);
    }
    let tokens: Vec<&str> = expression.split_whitespace().collect();
    match <[&str; 5]>::try_from(tokens.as_slice()) {
        Ok(fields) => Fields::parse(&fields).map(Kind::Calendar),
        Err(_) if tokens.len() == 6 => Err(
            "6-field expressions (with a leading seconds field) are not supported; use 5 fields: minute hour day-of-month month day-of-week".into(),
        ),
        Err(_) => Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week) or an @-expression, found {} field{}",
            tokens.len(),
            if tokens.len() == 1 { "" } else { "s" }
        )),
    }
}

fn parse_special(special: &str) -> Result<Kind, String> {
    let mut words = special.split_whitespace();
    let name = words.next().unwrap_or_default().to_ascii_lowercase();
    let rest: Vec<&str> = words.collect();
    let fields = match (name.as_str(), rest.as_slice()) {
        ("every", [duration]) => return parse_every(duration).map(Kind::Interval),
        ("every", _) => return Err("@every takes one duration, e.g. \"@every 1h30m\"".into()),
        ("yearly" | "annually", []) => ["0", "0", "1", "1", "*"],
        ("monthly", []) => ["0", "0", "1", "*", "*"],
        ("weekly", []) => ["0", "0", "*", "*", "0"],
        ("daily" | "midnight", []) => ["0", "0", "*", "*", "*"],
        ("hourly", []) => ["0", "*", "*", "*", "*"],
        ("reboot", _) => return Err("@reboot is not supported: it names no time".into()),
        _ => {
            return Err(format!(
                "unknown special expression \"@{special}\"; expected @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>"
            ))
        }
    };
    Fields::parse(&fields).map(Kind::Calendar)
}

/// Shortest `@every` interval.
const MIN_EVERY_MS: i64 = 1_000;

/// A Go-style duration: one or more `<integer><unit>` with units `h`, `m`, `s`, `ms`.
fn parse_every(text: &str) -> Result<TimeDelta, String> {
    let bad =
        || format!("@every duration \"{text}\" is not valid; use e.g. 30m, 1h30m, 45s or 500ms");
    let mut rest = text;
    let mut millis: i64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let number: i64 = rest[..digits].parse().map_err(|_| bad())?;
        let tail = &rest[digits..];
        let (unit_ms, unit_len) = if tail.starts_with("ms") {
            (1, 2)
        } else {
            match tail.as_bytes().first() {
                Some(b'h') => (3_600_000, 1),
                Some(b'm') => (60_000, 1),
                Some(b's') => (1_000, 1),
                _ => return Err(bad()),
            }
        };
        millis = number
            .checked_mul(unit_ms)
            .and_then(|v| millis.checked_add(v))
            .ok_or_else(bad)?;
        rest = &tail[unit_len..];
    }
    // Shorter intervals would re-arm the timer faster than it can fire (a runaway loop).
    if millis < MIN_EVERY_MS {
        return Err(format!("@every duration \"{text}\" must be at least 1s"));
    }
    TimeDelta::try_milliseconds(millis).ok_or_else(bad)
}
