//! The five calendar fields of a cron expression, parsed into bit sets, and the wall-clock
//! search for the next matching minute (time zones are handled by the caller).

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike, Weekday};

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// One field's name, bounds and optional three-letter names (the first name stands for `min`).
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

/// A field; `const` so that the five below are built at compile time.
const fn field(name: &'static str, min: u32, max: u32, names: &'static [&'static str]) -> Field {
    Field {
        name,
        min,
        max,
        names,
    }
}

const MINUTE: Field = field("minute", 0, 59, &[]);
const HOUR: Field = field("hour", 0, 23, &[]);
const DAY_OF_MONTH: Field = field("day-of-month", 1, 31, &[]);
const MONTH: Field = field("month", 1, 12, &MONTH_NAMES);
const DAY_OF_WEEK: Field = field("day-of-week", 0, 7, &DAY_NAMES);

/// A parsed 5-field expression. Bit `n` of a set means value `n` is selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fields {
    pub(super) minutes: u64,
    pub(super) hours: u32,
    /// Plain days of month, bits 1..=31.
    pub(super) days: u32,
    /// Months, bits 1..=12.
    pub(super) months: u16,
    /// Plain weekdays, bits 0..=6 (Sunday = 0; a 7 in the expression is folded onto 0).
    pub(super) weekdays: u8,
    /// `L` in day-of-month: the last day of the month.
    pub(super) last_day: bool,
    /// `LW` in day-of-month: the last weekday (Mon-Fri) of the month.
    pub(super) last_weekday: bool,
    /// `nW` in day-of-month: the weekday nearest day `n`, bits 1..=31.
    pub(super) nearest_weekday: u32,
    /// `dL` in day-of-week: the last weekday `d` of the month, bits 0..=6.
    pub(super) last_of_weekday: u8,
    /// `d#k` in day-of-week: `nth_weekday[k - 1]` has bit `d`.
    pub(super) nth_weekday: [u8; 5],
    /// The day-of-month / day-of-week fields begin with `*` (Vixie cron's rule, see `day_matches`).
    pub(super) dom_star: bool,
    pub(super) dow_star: bool,
}

impl Fields {
    /// Parses `minute hour day-of-month month day-of-week` (exactly five fields).
    pub(super) fn parse(fields: &[&str; 5]) -> Result<Self, String> {
        let [minute, hour, dom, month, dow] = *fields;
        let mut parsed = Fields {
            minutes: parse_field(&MINUTE, minute, |_| Ok(false))?,
            hours: parse_field(&HOUR, hour, |_| Ok(false))? as u32,
            days: 0,
            months: parse_field(&MONTH, month, |_| Ok(false))? as u16,
            weekdays: 0,
            last_day: false,
            last_weekday: false,
            nearest_weekday: 0,
            last_of_weekday: 0,
            nth_weekday: [0; 5],
            dom_star: dom.starts_with('*'),
            dow_star: dow.starts_with('*'),
        };
        let (mut last_day, mut last_weekday, mut nearest) = (false, false, 0u32);
        parsed.days = parse_field(&DAY_OF_MONTH, dom, |item| {
            let upper = item.to_ascii_uppercase();
            if upper == "L" {
                last_day = true;
            } else if upper == "LW" {
                last_weekday = true;
            } else if let Some(day) = upper.strip_suffix('W') {
                let day = parse_number(&DAY_OF_MONTH, day, item)?;
                nearest |= 1 << day;
            } else {
                return Ok(false);
            }
            Ok(true)
        })? as u32;
        (parsed.last_day, parsed.last_weekday, parsed.nearest_weekday) =
            (last_day, last_weekday, nearest);

        let (mut last_of, mut nth) = (0u8, [0u8; 5]);
        let weekdays = parse_field(&DAY_OF_WEEK, dow, |item| {
            if let Some((day, k)) = item.split_once('#') {
                let day = parse_value(&DAY_OF_WEEK, day, item)? % 7;
                let k = match k.parse::<usize>() {
                    Ok(k @ 1..=5) => k,
                    _ => {
                        return Err(format!(
                            "day-of-week item \"{item}\": the occurrence after '#' must be 1-5"
                        ))
                    }
                };
                nth[k - 1] |= 1 << day;
            } else if item.len() > 1 && item.to_ascii_uppercase().ends_with('L') {
                let day = parse_value(&DAY_OF_WEEK, &item[..item.len() - 1], item)? % 7;
                last_of |= 1 << day;
            } else {
                return Ok(false);
            }
            Ok(true)
        })?;
        // Sunday may be written 0 or 7.
        parsed.weekdays = ((weekdays | (weekdays >> 7)) & 0x7f) as u8;
        (parsed.last_of_weekday, parsed.nth_weekday) = (last_of, nth);
        Ok(parsed)
    }

    /// True if the schedule selects every hour of the day. Such schedules keep firing through
    /// the repeated hour of a fall-back transition (see `CronSchedule::next_after`).
    pub(super) fn every_hour(&self) -> bool {
        self.hours == (1 << 24) - 1
    }

    /// The first wall-clock minute at or after `start` (which must be minute-aligned) that the
    /// expression selects, looking no further than the end of year `last_year`.
    pub(super) fn next_match(&self, start: NaiveDateTime, last_year: i32) -> Option<NaiveDateTime> {
        let mut date = start.date();
        let (mut hour, mut minute) = (start.hour(), start.minute());
        loop {
            if date.year() > last_year {
                return None;
            }
            if self.months & (1 << date.month()) == 0 {
                date = self.next_month(date)?;
                (hour, minute) = (0, 0);
                continue;
            }
            if self.day_matches(date) {
                if let Some(h) = next_bit(u64::from(self.hours), hour) {
                    let from = if h == hour { minute } else { 0 };
                    if let Some(m) = next_bit(self.minutes, from) {
                        return date.and_hms_opt(h, m, 0);
                    }
                    if h < 23 {
                        (hour, minute) = (h + 1, 0);
                        continue;
                    }
                }
            }
            date = date.succ_opt()?;
            (hour, minute) = (0, 0);
        }
    }

    /// Whether the wall-clock minute `at` is selected (seconds are ignored).
    #[cfg(test)]
    pub(super) fn matches(&self, at: NaiveDateTime) -> bool {
        self.minutes & (1 << at.minute()) != 0
            && self.hours & (1 << at.hour()) != 0
            && self.months & (1 << at.month()) != 0
            && self.day_matches(at.date())
    }

    /// The first day of the next selected month after `date`'s month.
    fn next_month(&self, date: NaiveDate) -> Option<NaiveDate> {
        let (year, month) = match next_bit(u64::from(self.months), date.month() + 1) {
            Some(m) => (date.year(), m),
            None => (
                date.year().checked_add(1)?,
                next_bit(u64::from(self.months), 1)?,
            ),
        };
        NaiveDate::from_ymd_opt(year, month, 1)
    }

    /// Vixie cron's rule: if either day field begins with `*`, a day must satisfy both (the
    /// starred one usually selects everything); if both are restricted, either one suffices.
    fn day_matches(&self, date: NaiveDate) -> bool {
        let dom = self.dom_matches(date);
        let dow = self.dow_matches(date);
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn dom_matches(&self, date: NaiveDate) -> bool {
        let day = date.day();
        if self.days & (1 << day) != 0 {
            return true;
        }
        if !(self.last_day || self.last_weekday || self.nearest_weekday != 0) {
            return false;
        }
        let last = days_in_month(date.year(), date.month());
        (self.last_day && day == last)
            || (self.last_weekday && Some(day) == nearest_weekday(date, last, last))
            || (1..=last).any(|n| {
                self.nearest_weekday & (1 << n) != 0 && Some(day) == nearest_weekday(date, n, last)
            })
    }

    fn dow_matches(&self, date: NaiveDate) -> bool {
        let weekday = 1u8 << date.weekday().num_days_from_sunday();
        let day = date.day();
        self.weekdays & weekday != 0
            || (self.last_of_weekday & weekday != 0
                && day + 7 > days_in_month(date.year(), date.month()))
            || self.nth_weekday[((day - 1) / 7) as usize] & weekday != 0
    }

    /// Day-of-month values that some selected month lacks, for [`super::CronSchedule::warnings`].
    pub(super) fn warnings(&self) -> Vec<String> {
        let months = || (1..=12u32).filter(|m| self.months & (1 << m) != 0);
        // The longest each month gets (2000 is a leap year: February has 29 days).
        let longest = |month: u32| days_in_month(2000, month);
        let mut out = Vec::new();
        if !self.dom_star {
            for day in (30..=31).filter(|d| self.days & (1 << d) != 0) {
                let lacking: Vec<&str> = months()
                    .filter(|m| longest(*m) < day)
                    .map(|m| MONTH_NAMES[m as usize - 1])
                    .collect();
                if !lacking.is_empty() {
                    out.push(format!(
                        "day-of-month {day} does not exist in {}; the schedule skips it in those months",
                        lacking.join(", ")
                    ));
                }
            }
        }
        // Only day-of-month can rule out every day (day-of-week always matches some day), and
        // only when it must match, i.e. when either day field is starred.
        let any_day = months().any(|m| {
            let possible = (1u64 << (longest(m) + 1)) - 1;
            u64::from(self.days | self.nearest_weekday) & possible != 0
                || self.last_day
                || self.last_weekday
        });
        if (self.dom_star || self.dow_star) && !any_day {
            out.push(
                "the schedule can never fire: no selected month has the selected day-of-month"
                    .into(),
            );
        }
        out
    }
}

/// Parses one comma-separated field into a bit set. `special` gets each list item first and
/// returns `Ok(true)` if it consumed it (the `L`/`W`/`#` forms), `Ok(false)` to fall through.
fn parse_field(
    field: &Field,
    text: &str,
    mut special: impl FnMut(&str) -> Result<bool, String>,
) -> Result<u64, String> {
    let mut bits = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!(
                "{} field \"{text}\" has an empty list item",
                field.name
            ));
        }
        if special(item)? {
            continue;
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step = match step.parse::<u32>() {
                    Ok(s) if (1..=field.max).contains(&s) => s,
                    _ => {
                        return Err(format!(
                            "{} item \"{item}\": step must be a whole number from 1 to {}",
                            field.name, field.max
                        ))
                    }
                };
                (range, Some(step))
            }
            None => (item, None),
        };
        let (low, high) = if range == "*" {
            (field.min, field.max)
        } else if let Some((low, high)) = range.split_once('-') {
            let (low, high) = (
                parse_value(field, low, item)?,
                parse_value(field, high, item)?,
            );
            if low > high {
                return Err(format!(
                    "{} item \"{item}\": range start {low} is after its end {high}",
                    field.name
                ));
            }
            (low, high)
        } else {
            let value = parse_value(field, range, item)?;
            // `a/n` means `a-max/n`, as in most cron implementations.
            (value, if step.is_some() { field.max } else { value })
        };
        let step = step.unwrap_or(1);
        let mut value = low;
        while value <= high {
            bits |= 1 << value;
            value += step;
        }
    }
    Ok(bits)
}

/// A number or (where the field has names) a case-insensitive three-letter name, range-checked.
fn parse_value(field: &Field, text: &str, item: &str) -> Result<u32, String> {
    if let Some(index) = field
        .names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(text))
    {
        return Ok(field.min + index as u32);
    }
    parse_number(field, text, item)
}

fn parse_number(field: &Field, text: &str, item: &str) -> Result<u32, String> {
    let names = if field.names.is_empty() {
        String::new()
    } else {
        format!(
            " or {}-{}",
            field.names[0],
            field.names[field.names.len() - 1]
        )
    };
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u32>() {
        Ok(v) if digits && (field.min..=field.max).contains(&v) => Ok(v),
        Ok(v) if digits => Err(format!(
            "{} item \"{item}\": {v} is outside the allowed range {}-{}{names}",
            field.name, field.min, field.max
        )),
        _ => Err(format!(
            "{} item \"{item}\": \"{text}\" is not a valid value (expected {}-{}{names})",
            field.name, field.min, field.max
        )),
    }
}

/// The lowest set bit of `bits` at position `from` or above.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    let masked = bits.checked_shr(from)?.checked_shl(from)?;
    (masked != 0).then(|| masked.trailing_zeros())
}

pub(super) fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Quartz's `nW`: the Monday-Friday day nearest day `n` of `date`'s month, never leaving the
/// month (a Saturday 1st moves to Monday the 3rd, a Sunday last day to the Friday before).
/// `None` if the month has no day `n`.
fn nearest_weekday(date: NaiveDate, n: u32, last: u32) -> Option<u32> {
    if n > last {
        return None;
    }
    let weekday = date.with_day(n)?.weekday();
    Some(match weekday {
        Weekday::Sat if n == 1 => 3,
        Weekday::Sat => n - 1,
        Weekday::Sun if n == last => n - 2,
        Weekday::Sun => n + 1,
        _ => n,
    })
}
