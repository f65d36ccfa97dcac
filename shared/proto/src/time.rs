//! RFC 3339 timestamps <-> `google.protobuf.Timestamp`, without a date library.
//!
//! Parsing accepts what the OJS JSON format accepts: a date, `T` (or `t`/space), a time
//! with 0-9 fraction digits and a mandatory zone (`Z` or `+hh:mm`). Rendering is the
//! server's canonical form: UTC, `Z`, and as many fraction digits as the value needs
//! (none, 3, 6 or 9), so microsecond timestamps come back with six digits.

use prost_types::Timestamp;

use crate::ProtoError;

/// 0001-01-01T00:00:00Z, the first instant a `Timestamp` may hold.
const MIN_SECONDS: i64 = -62_135_596_800;
/// 9999-12-31T23:59:59Z, the last whole second a `Timestamp` may hold.
const MAX_SECONDS: i64 = 253_402_300_799;

/// Parses an RFC 3339 timestamp into a `Timestamp`. `None` when the text is not one,
/// is out of the `Timestamp` range, or is the Unix epoch (which spec 6.2 reserves for
/// "unset").
pub fn parse(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().try_fold(0i64, |acc, c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let sep = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0i64;
    if sep(at, b".") {
        let count = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if !(1..=9).contains(&count) {
            return None;
        }
        nanos = digits(at + 1, count)? * 10i64.pow(9 - count as u32);
        at += 1 + count;
    }
    let offset = match b.get(at..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (digits(at + 1, 2)?, digits(at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let minutes = h * 60 + m;
            if *sign == b'-' {
                -minutes * 60
            } else {
                minutes * 60
            }
        }
        _ => return None,
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) || (seconds == 0 && nanos == 0) {
        return None;
    }
    Some(Timestamp {
        seconds,
        nanos: i32::try_from(nanos).ok()?,
    })
}

/// Renders a set `Timestamp` canonically; `Ok(None)` for the zero value (unset, spec
/// 6.2). Fails when seconds or nanos are outside the `Timestamp` range.
pub fn format(t: &Timestamp) -> Result<Option<String>, ProtoError> {
    if t.seconds == 0 && t.nanos == 0 {
        return Ok(None);
    }
    if !(0..1_000_000_000).contains(&t.nanos) {
        return Err(ProtoError::field(
            "",
            format!("Timestamp nanos {} is outside 0..999999999", t.nanos),
        ));
    }
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&t.seconds) {
        return Err(ProtoError::field(
            "",
            format!("Timestamp seconds {} is outside years 0001-9999", t.seconds),
        ));
    }
    let days = t.seconds.div_euclid(86_400);
    let secs = t.seconds.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let fraction = match t.nanos {
        0 => String::new(),
        n if n % 1_000_000 == 0 => format!(".{:03}", n / 1_000_000),
        n if n % 1000 == 0 => format!(".{:06}", n / 1000),
        n => format!(".{n:09}"),
    };
    Ok(Some(format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{fraction}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )))
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` after 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(seconds: i64, nanos: i32) -> Timestamp {
        Timestamp { seconds, nanos }
    }

    #[test]
    fn parses_zones_fractions_and_rejects_the_rest() {
        // Each the same second, 2025-06-01T09:00:00Z, and its nanoseconds.
        for (good, nanos) in [
            ("2025-06-01T09:00:00Z", 0),
            ("2025-06-01T11:00:00+02:00", 0),
            ("2025-06-01T07:30:00-01:30", 0),
            ("2025-06-01T09:00:00.123456Z", 123_456_000),
            ("2025-06-01t09:00:00.5z", 500_000_000),
        ] {
            assert_eq!(parse(good), Some(ts(1_748_768_400, nanos)), "{good}");
        }
        for bad in [
            "2025-06-01T09:00:00",
            "2025-06-01 09:00",
            "2025-13-01T09:00:00Z",
            "2025-02-29T09:00:00Z",
            "2025-06-01T24:00:00Z",
            "2025-06-01T23:59:60Z",
            "2025-06-01T09:00:00.Z",
            "2025-06-01T09:00:00.1234567890Z",
            "2025-06-01T09:00:00+2:00",
            "2025-06-01T09:00:00+24:00",
            "1970-01-01T00:00:00Z",
            "1970-01-01T01:00:00+01:00",
            "0001-01-01T00:00:00+01:00",
            "+PT30S",
            "",
            "２０２５-06-01T09:00:00Z",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse("2024-02-29T00:00:00Z").map(|t| t.nanos), Some(0));
    }

    #[test]
    fn formats_in_utc_with_needed_digits() {
        let cases = [
            (ts(1_748_768_400, 0), "2025-06-01T09:00:00Z"),
            (ts(1_748_768_400, 120_000_000), "2025-06-01T09:00:00.120Z"),
            (
                ts(1_748_768_400, 123_456_000),
                "2025-06-01T09:00:00.123456Z",
            ),
            (ts(1_748_768_400, 1), "2025-06-01T09:00:00.000000001Z"),
            (ts(-1, 0), "1969-12-31T23:59:59Z"),
            (ts(MIN_SECONDS, 0), "0001-01-01T00:00:00Z"),
            (
                ts(MAX_SECONDS, 999_999_999),
                "9999-12-31T23:59:59.999999999Z",
            ),
            (ts(951_782_400, 0), "2000-02-29T00:00:00Z"),
        ];
        for (t, text) in cases {
            assert_eq!(format(&t), Ok(Some(text.to_owned())));
            assert_eq!(parse(text), Some(t));
        }
        assert_eq!(format(&ts(0, 0)), Ok(None));
        assert!(format(&ts(1, 1_000_000_000)).is_err());
        assert!(format(&ts(1, -1)).is_err());
        assert!(format(&ts(MAX_SECONDS + 1, 0)).is_err());
    }
}
