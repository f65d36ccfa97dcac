use chrono::{DateTime, NaiveDateTime, SecondsFormat, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    match s.parse() {
        Ok(t) => t,
        Err(e) => panic!("bad test instant {s}: {e}"),
    }
}

fn schedule(expr: &str, tz: Option<&str>) -> CronSchedule {
    match CronSchedule::parse(expr, tz) {
        Ok(s) => s,
        Err(e) => panic!("{expr} ({tz:?}) should parse: {e}"),
    }
}

/// The next `n` fire times after `from`, as RFC 3339 UTC strings.
fn fires(expr: &str, tz: Option<&str>, from: &str, n: usize) -> Vec<String> {
    let s = schedule(expr, tz);
    let mut at = utc(from);
    let mut out = Vec::new();
    for _ in 0..n {
        match s.next_after(at) {
            Some(next) => {
                assert!(next > at, "{expr}: {next} is not after {at}");
                out.push(next.to_rfc3339_opts(SecondsFormat::Secs, true));
                at = next;
            }
            None => break,
        }
    }
    out
}

fn expression_error(expr: &str) -> String {
    match CronSchedule::parse(expr, None) {
        Err(CronError::Expression(message)) => message,
        other => panic!("{expr:?} should be rejected as an expression, got {other:?}"),
    }
}

/// Where most fire-time rows start from: a Thursday.
const FROM: &str = "2026-02-12T20:15:30Z";

/// The zone of the DST rows.
const NEW_YORK: Option<&str> = Some("America/New_York");

/// Asserts that `expr` in `tz`, asked after `from`, fires next at `want`: as many fire
/// times as `want` lists.
fn assert_fires(expr: &str, tz: Option<&str>, from: &str, want: &[&str]) {
    assert_eq!(
        fires(expr, tz, from, want.len()),
        want,
        "{expr} in {tz:?} after {from}"
    );
}

/// Asserts that two expressions fire at the same `n` times after [`FROM`].
fn assert_same_fires(expr: &str, same_as: &str, n: usize) {
    assert_eq!(
        fires(expr, None, FROM, n),
        fires(same_as, None, FROM, n),
        "{expr} and {same_as}"
    );
}

/// Rows `expression, zone, after => fire times`, each checked by [`assert_fires`]: one
/// line a case (a failing row names its expression, zone and start).
macro_rules! fires_table {
    ($($expr:literal, $tz:expr, $from:expr => $want:expr;)*) => {
        $(assert_fires($expr, $tz, $from, &$want);)*
    };
}

// ---------------------------------------------------------------- syntax

#[test]
fn wildcard_and_steps() {
    fires_table! {
        "* * * * *", None, FROM => ["2026-02-12T20:16:00Z", "2026-02-12T20:17:00Z"];
        "*/5 * * * *", None, FROM => ["2026-02-12T20:20:00Z", "2026-02-12T20:25:00Z"];
        "10-20/5 * * * *", None, FROM => [
            "2026-02-12T20:20:00Z", "2026-02-12T21:10:00Z", "2026-02-12T21:15:00Z",
        ];
        // `a/n` is `a-max/n`.
        "50/5 * * * *", None, FROM => [
            "2026-02-12T20:50:00Z", "2026-02-12T20:55:00Z", "2026-02-12T21:50:00Z",
        ];
        "0 */6 * * *", None, FROM => ["2026-02-13T00:00:00Z", "2026-02-13T06:00:00Z"];
    }
}

#[test]
fn lists_and_ranges() {
    fires_table! {
        "1,15 * * * *", None, FROM => [
            "2026-02-12T21:01:00Z", "2026-02-12T21:15:00Z", "2026-02-12T22:01:00Z",
        ];
        "1-3 * * * *", None, FROM => [
            "2026-02-12T21:01:00Z", "2026-02-12T21:02:00Z", "2026-02-12T21:03:00Z",
        ];
        "0 8-9,17 * * *", None, FROM => [
            "2026-02-13T08:00:00Z", "2026-02-13T09:00:00Z", "2026-02-13T17:00:00Z",
        ];
    }
}

#[test]
fn month_and_day_names_are_case_insensitive() {
    fires_table! {
        "0 0 1 jan,Jul *", None, FROM => ["2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z"];
        "0 0 1 MAR-may *", None, FROM => [
            "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z",
        ];
        "0 9 * * mon-FRI", None, FROM => [
            "2026-02-13T09:00:00Z", "2026-02-16T09:00:00Z", "2026-02-17T09:00:00Z",
        ];
    }
    assert_same_fires("0 9 * * 1-5", "0 9 * * MON-FRI", 3);
}

#[test]
fn sunday_is_zero_or_seven() {
    let sundays = ["2026-02-15T00:00:00Z", "2026-02-22T00:00:00Z"];
    fires_table! {
        "0 0 * * 0", None, FROM => sundays;
        "0 0 * * 7", None, FROM => sundays;
        "0 0 * * SUN", None, FROM => sundays;
        // 5-7 is Friday, Saturday, Sunday.
        "0 0 * * 5-7", None, FROM => [
            "2026-02-13T00:00:00Z", "2026-02-14T00:00:00Z", "2026-02-15T00:00:00Z", "2026-02-20T00:00:00Z",
        ];
    }
}

#[test]
fn day_of_month_or_day_of_week_when_both_are_restricted() {
    fires_table! {
        // Vixie rule: the 13th, and also every Friday.
        "0 0 13 * 5", None, FROM => [
            "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-06T00:00:00Z",
        ];
        "0 0 1,15 * MON", None, FROM => [
            "2026-02-15T00:00:00Z", "2026-02-16T00:00:00Z", "2026-02-23T00:00:00Z",
        ];
        // A field starting with `*` counts as unrestricted, so both must match (odd days that are Mondays).
        "0 0 */2 * MON", None, FROM => ["2026-02-23T00:00:00Z", "2026-03-09T00:00:00Z"];
    }
}

#[test]
fn quartz_extensions() {
    let third_fridays = ["2026-02-20T00:00:00Z", "2026-03-20T00:00:00Z"];
    fires_table! {
        // Spec §10.5: last day of the month at 23:00 Chicago time.
        "0 23 L * *", Some("America/Chicago"), FROM => [
            "2026-03-01T05:00:00Z", "2026-04-01T04:00:00Z",
        ];
        // Last weekday: Feb 27 (Fri), Mar 31 (Tue), Apr 30 (Thu), May 29 (Fri; the 31st is a Sunday).
        "0 0 LW * *", None, FROM => [
            "2026-02-27T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z", "2026-05-29T00:00:00Z",
        ];
        // Nearest weekday to the 15th: Feb 15 2026 is a Sunday -> Mon 16; Mar 15 is a Sunday -> 16; Aug 15 is a Saturday -> 14.
        "0 0 15W * *", None, FROM => ["2026-02-16T00:00:00Z", "2026-03-16T00:00:00Z"];
        "0 0 15W 8 *", None, FROM => ["2026-08-14T00:00:00Z"];
        // 1W never leaves the month: Aug 1 2026 is a Saturday -> Monday the 3rd.
        "0 0 1W 8 *", None, FROM => ["2026-08-03T00:00:00Z"];
        // Third Friday, written both ways.
        "0 0 * * 5#3", None, FROM => third_fridays;
        "0 0 * * fri#3", None, FROM => third_fridays;
        // Last Friday of the month.
        "0 0 * * 5L", None, FROM => ["2026-02-27T00:00:00Z", "2026-03-27T00:00:00Z"];
        // Fifth Sunday (7#5): only months that have one.
        "0 0 * * 7#5", None, FROM => ["2026-03-29T00:00:00Z", "2026-05-31T00:00:00Z"];
    }
}

#[test]
fn special_expressions() {
    let cases: [(&str, &str); 9] = [
        ("@yearly", "2027-01-01T00:00:00Z"),
        ("@annually", "2027-01-01T00:00:00Z"),
        ("@monthly", "2026-03-01T00:00:00Z"),
        ("@weekly", "2026-02-15T00:00:00Z"),
        ("@daily", "2026-02-13T00:00:00Z"),
        ("@midnight", "2026-02-13T00:00:00Z"),
        ("@hourly", "2026-02-12T21:00:00Z"),
        ("@DAILY", "2026-02-13T00:00:00Z"),
        ("  @hourly  ", "2026-02-12T21:00:00Z"),
    ];
    for (expr, next) in cases {
        assert_fires(expr, None, FROM, &[next]);
    }
    assert_same_fires("@daily", "0 0 * * *", 3);
    assert_same_fires("@hourly", "0 * * * *", 3);
    assert_same_fires("@weekly", "0 0 * * 0", 3);
}

#[test]
fn every_interval_is_anchored_on_after() {
    let at = utc("2026-02-12T20:15:30.250Z");
    let next = |e: &str| schedule(e, None).next_after(at);
    assert_eq!(next("@every 5m"), Some(at + TimeDelta::minutes(5)));
    assert_eq!(next("@every 1h30m"), Some(at + TimeDelta::minutes(90)));
    assert_eq!(next("@every 2h45m30s"), Some(at + TimeDelta::seconds(9930)));
    assert_eq!(
        next("@every 1500ms"),
        Some(at + TimeDelta::milliseconds(1500))
    );
    assert_eq!(
        schedule("@every 45s", None).interval(),
        Some(TimeDelta::seconds(45))
    );
    assert_eq!(schedule("@daily", None).interval(), None);
}

#[test]
fn echoes_expression_and_zone() {
    let s = schedule("0 9 * * *", Some("Asia/Tokyo"));
    assert_eq!((s.expression(), s.timezone()), ("0 9 * * *", "Asia/Tokyo"));
    let s = schedule("@daily", None);
    assert_eq!((s.expression(), s.timezone()), ("@daily", "UTC"));
}

// ---------------------------------------------------------------- validation

#[test]
fn rejects_the_conformance_suite_invalid_expressions() {
    assert!(expression_error("not a valid cron").contains("expected 5 fields"));
    assert!(expression_error("0 0 0 0 0 0 0").contains("found 7 fields"));
    let message = expression_error("99 25 32 13 8");
    assert!(
        message.contains("minute") && message.contains("99"),
        "{message}"
    );
}

#[test]
fn rejects_malformed_fields_naming_the_field() {
    let cases = [
        ("", "empty"),
        ("   ", "empty"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day-of-month"),
        ("* * 32 * *", "day-of-month"),
        ("* * * 0 *", "month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day-of-week"),
        ("5-1 * * * *", "range start 5 is after its end 1"),
        ("* * * * SAT-SUN", "range start"),
        ("*/0 * * * *", "step"),
        ("1-10/0 * * * *", "step"),
        ("*/61 * * * *", "step"),
        ("*/ * * * *", "step"),
        ("1,,2 * * * *", "empty list item"),
        ("1, * * * *", "empty list item"),
        ("1- * * * *", "minute"),
        ("-1 * * * *", "minute"),
        ("+1 * * * *", "minute"),
        ("a * * * *", "minute"),
        ("JAN * * * *", "minute"),
        ("* * * FOO *", "month"),
        ("* * * * MONDAY", "day-of-week"),
        ("* * L * L", "day-of-week"),
        ("* * * L *", "month"),
        ("* * 32W * *", "day-of-month"),
        ("* * 1-5W * *", "day-of-month"),
        ("* * * * 5#6", "1-5"),
        ("* * * * 5#0", "1-5"),
        ("* * * * 8#1", "day-of-week"),
        ("0 0 0 * * *", "6-field"),
        ("* * * *", "found 4 fields"),
        ("*", "found 1 field"),
        ("@reboot", "@reboot"),
        ("@fortnightly", "unknown special"),
        ("@daily extra", "unknown special"),
        ("@every", "@every"),
        ("@every 0s", "at least 1s"),
        ("@every 999ms", "at least 1s"),
        ("@every 1ms", "at least 1s"),
        ("@every 5", "@every"),
        ("@every 5x", "@every"),
        ("@every 1.5h", "@every"),
        ("@every -5m", "@every"),
    ];
    for (expr, needle) in cases {
        let message = expression_error(expr);
        assert!(
            message.contains(needle),
            "{expr:?}: {message:?} should mention {needle:?}"
        );
    }
}

#[test]
fn validates_time_zones() {
    for ok in [
        "UTC",
        "Etc/UTC",
        "GMT",
        "America/New_York",
        "Asia/Tokyo",
        "Asia/Kolkata",
        "Australia/Sydney",
        "Pacific/Auckland",
        "US/Eastern",
    ] {
        assert!(CronSchedule::parse("* * * * *", Some(ok)).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "Mars/Base",
        "EST",
        "PST",
        "CST",
        "EST5EDT",
        "+05:00",
        "-08:00",
        "UTC+5",
        "Etc/GMT+5",
        "GMT-0",
        "america/new_york",
    ] {
        assert!(
            matches!(
                CronSchedule::parse("* * * * *", Some(bad)),
                Err(CronError::Timezone(_))
            ),
            "{bad}"
        );
    }
    let Err(CronError::Timezone(message)) = CronSchedule::parse("* * * * *", Some("asia/tokyo"))
    else {
        panic!("asia/tokyo should be refused");
    };
    assert!(message.contains("did you mean \"Asia/Tokyo\""), "{message}");
}

#[test]
fn warns_about_days_missing_from_selected_months() {
    assert!(schedule("0 0 * * *", None).warnings().is_empty());
    assert!(schedule("0 0 29 2 *", None).warnings().is_empty());
    let warnings = schedule("0 0 31 * *", None).warnings();
    assert_eq!(warnings, ["day-of-month 31 does not exist in FEB, APR, JUN, SEP, NOV; the schedule skips it in those months"]);
    assert_eq!(schedule("0 0 30,31 1-3 *", None).warnings().len(), 2);
    let warnings = schedule("0 0 30,31 2 *", None).warnings();
    assert!(
        warnings.iter().any(|w| w.contains("never fire")),
        "{warnings:?}"
    );
}

// ---------------------------------------------------------------- time zones and DST

#[test]
fn fires_in_the_given_zone() {
    let from = "2026-02-12T20:15:00Z";
    fires_table! {
        // 09:00 JST is 00:00 UTC.
        "0 9 * * *", Some("Asia/Tokyo"), from => ["2026-02-13T00:00:00Z", "2026-02-14T00:00:00Z"];
        // Spec §8.1 example: 09:00 New York registered at 2026-02-12T20:15Z -> 2026-02-13T14:00Z.
        "0 9 * * *", NEW_YORK, from => ["2026-02-13T14:00:00Z"];
        // In summer (EDT) 09:00 is 13:00 UTC.
        "0 9 * * *", NEW_YORK, "2026-07-01T00:00:00Z" => ["2026-07-01T13:00:00Z"];
        // Half-hour offset: 20:15Z is already 01:45 on the 13th in India.
        "0 0 * * *", Some("Asia/Kolkata"), from => ["2026-02-13T18:30:00Z"];
        // The schedule is evaluated on the zone's calendar: 00:00 Tokyo Monday is Sunday in UTC.
        "0 0 * * MON", Some("Asia/Tokyo"), from => ["2026-02-15T15:00:00Z"];
    }
}

#[test]
fn spring_forward_skips_the_missing_time() {
    // 2026-03-08 02:00 EST -> 03:00 EDT in New York; 02:30 does not exist that day.
    fires_table! {
        "30 2 * * *", NEW_YORK, "2026-03-06T12:00:00Z" => [
            "2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z",
        ];
        // Schedules that select every hour lose no real time: 01:30 EST is followed by 03:00 EDT.
        "*/30 * * * *", NEW_YORK, "2026-03-08T06:00:00Z" => [
            "2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z",
        ];
        // Only 02:xx is skipped; 01:59 and 03:00 fire.
        "59 1 * * *", NEW_YORK, "2026-03-08T00:00:00Z" => ["2026-03-08T06:59:00Z"];
        "0 3 * * *", NEW_YORK, "2026-03-08T00:00:00Z" => ["2026-03-08T07:00:00Z"];
    }
}

#[test]
fn fall_back_fires_once_at_the_first_occurrence() {
    // 2026-11-01 02:00 EDT -> 01:00 EST in New York; 01:30 happens at 05:30Z and 06:30Z.
    fires_table! {
        "30 1 * * *", NEW_YORK, "2026-10-31T12:00:00Z" => [
            "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", "2026-11-03T06:30:00Z",
        ];
        // Asked from inside the second pass, the repeated 01:30 is not fired again.
        "30 1 * * *", NEW_YORK, "2026-11-01T06:10:00Z" => ["2026-11-02T06:30:00Z"];
        "15,45 1 * * *", NEW_YORK, "2026-11-01T05:20:00Z" => [
            "2026-11-01T05:45:00Z", "2026-11-02T06:15:00Z",
        ];
        // Every-hour schedules keep their real-time rhythm through the repeated hour.
        "0 * * * *", NEW_YORK, "2026-11-01T04:30:00Z" => [
            "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z",
        ];
        // ... including when asked from late in the first pass (01:58 EDT).
        "* * * * *", NEW_YORK, "2026-11-01T05:58:00Z" => [
            "2026-11-01T05:59:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:01:00Z",
        ];
        "*/15 * * * *", NEW_YORK, "2026-11-01T05:50:00Z" => [
            "2026-11-01T06:00:00Z", "2026-11-01T06:15:00Z",
        ];
    }
}

// ---------------------------------------------------------------- rare and impossible dates

#[test]
fn february_29() {
    fires_table! {
        "0 0 29 2 *", None, "2026-01-01T00:00:00Z" => [
            "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z",
        ];
        // 2100 is not a leap year: an eight-year gap.
        "0 0 29 2 *", None, "2096-03-01T00:00:00Z" => ["2104-02-29T00:00:00Z"];
    }
}

#[test]
fn impossible_dates_never_fire() {
    let from = utc("2026-02-12T20:15:30Z");
    for expr in [
        "0 0 31 2 *",
        "0 0 30 2 *",
        "0 0 30,31 2 *",
        "0 0 31 4,6,9,11 *",
        "0 0 30W 2 *",
    ] {
        assert_eq!(schedule(expr, None).next_after(from), None, "{expr}");
    }
    // 02:30 on the second Sunday of March never exists in New York, as long as the bundled tz
    // tables carry DST (chrono-tz's end in 2099; later years keep the last offset).
    let next = schedule("30 2 * 3 0#2", NEW_YORK).next_after(from);
    assert!(
        next.is_none_or(|n| n > utc("2100-01-01T00:00:00Z")),
        "{next:?}"
    );
    // Far-apart but possible: a fifth Monday in February needs a leap year starting on Monday.
    assert_fires(
        "0 0 * 2 1#5",
        None,
        "2026-01-01T00:00:00Z",
        &["2044-02-29T00:00:00Z", "2072-02-29T00:00:00Z"],
    );
}

#[test]
fn extreme_instants_do_not_panic() {
    for expr in ["* * * * *", "0 0 29 2 *", "@every 1h"] {
        let s = schedule(expr, NEW_YORK);
        assert_eq!(s.next_after(DateTime::<Utc>::MAX_UTC), None, "{expr}");
        let _ = s.next_after(DateTime::<Utc>::MIN_UTC);
        let _ = schedule(expr, Some("Asia/Tokyo"))
            .next_after(DateTime::<Utc>::MAX_UTC - TimeDelta::hours(1));
    }
}

// ---------------------------------------------------------------- property: agrees with brute force

const MINUTES: [&str; 8] = [
    "*",
    "*/5",
    "0",
    "30",
    "0,15,30,45",
    "5-10",
    "*/7",
    "10-50/20",
];
const HOURS: [&str; 8] = ["*", "*/2", "1", "2", "0-3", "1,2,3", "9-17", "*/5"];
const DOMS: [&str; 8] = ["*", "*", "1", "1-7", "*/2", "31", "15W", "L"];
const MONTHS: [&str; 5] = ["*", "*", "*/3", "MAR,NOV", "10-12"];
const DOWS: [&str; 7] = ["*", "*", "0", "1-5", "SAT,SUN", "5L", "0#1"];
const ZONES: [&str; 8] = [
    "UTC",
    "America/New_York",
    "Asia/Tokyo",
    "Europe/Berlin",
    "Australia/Lord_Howe", // 30-minute DST shift
    "America/St_Johns",    // -03:30 with DST
    "Asia/Kolkata",
    "Antarctica/Troll", // 2-hour DST shift
];
/// Instants near DST transitions, where the interesting cases live.
const TRANSITIONS: [&str; 8] = [
    "2026-03-08T07:00:00Z", // New York spring forward
    "2026-11-01T06:00:00Z", // New York fall back
    "2026-03-29T01:00:00Z", // Europe spring forward
    "2026-10-25T01:00:00Z", // Europe fall back
    "2026-04-04T15:00:00Z", // Lord Howe fall back (02:00 -> 01:30)
    "2026-10-03T15:30:00Z", // Lord Howe spring forward (02:00 -> 02:30)
    "2026-03-08T05:30:00Z", // St John's spring forward
    "2026-11-01T04:30:00Z", // St John's fall back
];

/// Every minute in (after, until] that fires, found by checking one minute at a time.
fn brute_force_all(
    s: &CronSchedule,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> impl Iterator<Item = DateTime<Utc>> + '_ {
    let fields = match &s.kind {
        Kind::Calendar(fields) => Some(fields),
        Kind::Interval(_) => None,
    };
    let start = after.timestamp().div_euclid(60) * 60 + 60;
    (start..=until.timestamp())
        .step_by(60)
        .filter_map(move |secs| {
            let fields = fields?;
            let at = DateTime::from_timestamp(secs, 0)?;
            let local: NaiveDateTime = at.with_timezone(&s.tz).naive_local();
            if !fields.matches(local) {
                return None;
            }
            // The first occurrence of a wall-clock time always fires; a repeat only if the
            // schedule selects every hour.
            let first = match s.tz.from_local_datetime(&local) {
                LocalResult::Ambiguous(a, b) => {
                    a.with_timezone(&Utc).min(b.with_timezone(&Utc)) == at
                }
                _ => true,
            };
            (first || fields.every_hour()).then_some(at)
        })
}

fn brute_force(s: &CronSchedule, after: DateTime<Utc>, window: TimeDelta) -> Option<DateTime<Utc>> {
    brute_force_all(s, after, after + window).next()
}

fn expression_strategy() -> impl Strategy<Value = String> {
    (
        0..MINUTES.len(),
        0..HOURS.len(),
        0..DOMS.len(),
        0..MONTHS.len(),
        0..DOWS.len(),
    )
        .prop_map(|(a, b, c, d, e)| {
            format!(
                "{} {} {} {} {}",
                MINUTES[a], HOURS[b], DOMS[c], MONTHS[d], DOWS[e]
            )
        })
}

fn instant_strategy() -> impl Strategy<Value = DateTime<Utc>> {
    let uniform = (946_684_800i64..4_102_444_800).prop_map(|s| DateTime::from_timestamp(s, 0));
    let near_transition = (0..TRANSITIONS.len(), -2 * 86_400i64..86_400).prop_map(|(i, offset)| {
        TRANSITIONS[i]
            .parse::<DateTime<Utc>>()
            .ok()
            .map(|t| t + TimeDelta::seconds(offset))
    });
    prop_oneof![uniform, near_transition].prop_filter_map("in range", |t| t)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn next_after_is_the_first_matching_minute(
        expr in expression_strategy(),
        zone in 0..ZONES.len(),
        after in instant_strategy(),
    ) {
        let s = schedule(&expr, Some(ZONES[zone]));
        let window = TimeDelta::days(2);
        let next = s.next_after(after);
        if let Some(next) = next {
            prop_assert!(next > after);
            prop_assert_eq!(next.timestamp() % 60, 0);
            let Kind::Calendar(fields) = &s.kind else { unreachable!() };
            prop_assert!(fields.matches(next.with_timezone(&s.tz).naive_local()));
        }
        let expected = brute_force(&s, after, window);
        match expected {
            Some(expected) => prop_assert_eq!(next, Some(expected)),
            None => prop_assert!(next.is_none_or(|n| n > after + window), "{:?} is within the window", next),
        }
    }
}

#[test]
fn agrees_with_brute_force_around_every_2026_transition() {
    let year_start = utc("2026-01-01T00:00:00Z");
    let mut seen = 0;
    for zone in ZONES {
        let tz: Tz = zone.parse().unwrap_or(Tz::UTC);
        let offset =
            |t: DateTime<Utc>| tz.from_utc_datetime(&t.naive_utc()).naive_local() - t.naive_utc();
        let transitions = (0..365 * 48)
            .map(|i| year_start + TimeDelta::minutes(30 * i))
            .filter(|t| offset(*t) != offset(*t - TimeDelta::minutes(30)));
        for transition in transitions {
            seen += 1;
            for expr in [
                "*/10 * * * *",
                "0,30 1-3 * * *",
                "45 * * * *",
                "* 0-2 * * *",
            ] {
                let s = schedule(expr, Some(zone));
                let (from, to) = (
                    transition - TimeDelta::hours(12),
                    transition + TimeDelta::hours(40),
                );
                let expected: Vec<_> = brute_force_all(&s, from, to).collect();
                // From every 7th minute (at varying seconds) of the day around the transition.
                let mut at = from;
                while at < transition + TimeDelta::hours(12) {
                    let want = expected.iter().find(|e| **e > at).copied();
                    assert_eq!(s.next_after(at), want, "{expr} in {zone} after {at}");
                    at += TimeDelta::seconds(7 * 60 + 13);
                }
            }
        }
    }
    assert_eq!(
        seen, 10,
        "two transitions each in New York, Berlin, Lord Howe, St John's, Troll"
    );
}

#[test]
fn tz_offsets_for_the_fixtures_are_as_expected() {
    // Guards the DST tests above against a surprising tz database.
    let ny: Tz = "America/New_York".parse().unwrap_or(Tz::UTC);
    let at = |s: &str| {
        ny.from_utc_datetime(&utc(s).naive_utc())
            .naive_local()
            .to_string()
    };
    assert_eq!(at("2026-03-08T06:59:00Z"), "2026-03-08 01:59:00");
    assert_eq!(at("2026-03-08T07:00:00Z"), "2026-03-08 03:00:00");
    assert_eq!(at("2026-11-01T05:30:00Z"), "2026-11-01 01:30:00");
    assert_eq!(at("2026-11-01T06:30:00Z"), "2026-11-01 01:30:00");
    // Rules are extended far into the future.
    assert_eq!(at("2080-07-01T12:00:00Z"), "2080-07-01 08:00:00");
}
