//! ISO 8601 durations (`PT1S`, `PT0.5S`, `PT5M`, `P1DT2H`), as retry policies use them.

use std::time::Duration;

/// Parses an ISO 8601 duration. Years and months are refused (their length is ambiguous);
/// weeks, days, hours, minutes and (fractional) seconds are accepted.
pub fn parse(raw: &str) -> Option<Duration> {
    let rest = raw.strip_prefix('P')?;
    if rest.is_empty() {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) if !t.is_empty() => (d, Some(t)),
        Some(_) => return None,
        None => (rest, None),
    };
    let mut total = 0f64;
    total += components(date, &[('W', 604_800.0), ('D', 86_400.0)])?;
    if let Some(t) = time {
        total += components(t, &[('H', 3_600.0), ('M', 60.0), ('S', 1.0)])?;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Sums `<number><unit>` pairs whose units appear in `units`, in that order, each at most once.
fn components(mut s: &str, units: &[(char, f64)]) -> Option<f64> {
    let mut total = 0f64;
    let mut next_unit = 0;
    while !s.is_empty() {
        let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, tail) = s.split_at(end);
        let unit = tail.chars().next()?;
        let position = units[next_unit..].iter().position(|(u, _)| *u == unit)? + next_unit;
        // Only the last (smallest) unit may carry a fraction, as ISO 8601 allows.
        if number.is_empty() || (number.contains('.') && unit != 'S') {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        total += value * units[position].1;
        next_unit = position + 1;
        s = &tail[unit.len_utf8()..];
    }
    Some(total)
}

/// Renders a duration as ISO 8601 seconds (`PT1.5S`), the canonical form we echo back.
pub fn format(d: Duration) -> String {
    let millis = d.as_millis();
    if millis.is_multiple_of(1000) {
        format!("PT{}S", millis / 1000)
    } else {
        let s = format!("{:.3}", d.as_secs_f64());
        format!("PT{}S", s.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_recommended_subset() {
        let cases = [
            ("PT1S", 1_000),
            ("PT0.5S", 500),
            ("PT5M", 300_000),
            ("PT1H", 3_600_000),
            ("PT24H", 86_400_000),
            ("P1D", 86_400_000),
            ("P1DT1H1M1S", 90_061_000),
            ("P1W", 604_800_000),
        ];
        for (raw, ms) in cases {
            assert_eq!(parse(raw).map(|d| d.as_millis()), Some(ms), "{raw}");
        }
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "", "P", "PT", "1S", "PT1", "PTS", "P1Y", "P1M", "PT1S1M", "PT1.5M", "pt1s", "PT-1S",
            "P1H",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn format_round_trips() {
        for ms in [0u64, 1, 500, 1000, 1500, 300_000] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse(&format(d)), Some(d), "{ms}");
        }
    }
}
