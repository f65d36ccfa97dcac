//! Timestamps: RFC 3339 with a mandatory offset, rendered in UTC with microseconds.

use chrono::{DateTime, SecondsFormat, Utc};

use crate::error::OjsError;

/// A UTC instant.
pub type Timestamp = DateTime<Utc>;

/// The latest instant the server works with: the end of year 9999, the last one RFC 3339
/// can write. Arithmetic on user-given durations saturates here instead of overflowing.
pub fn max() -> Timestamp {
    from_micros(253_402_300_799_999_999).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `t + d`, or [`max`] when that lies beyond it.
pub fn after(t: Timestamp, d: std::time::Duration) -> Timestamp {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .map_or_else(max, |later| later.min(max()))
}

/// `t + ms` milliseconds, or [`max`] when that lies beyond it.
pub fn after_ms(t: Timestamp, ms: u64) -> Timestamp {
    after(t, std::time::Duration::from_millis(ms))
}

/// The current instant, truncated to microseconds (the precision we store and render).
pub fn now() -> Timestamp {
    let t = Utc::now();
    from_micros(t.timestamp_micros()).unwrap_or(t)
}

/// Renders `t` in UTC with as many fraction digits as it needs (none, 3 or 6), so a
/// client's `2099-12-31T23:59:59Z` comes back unchanged.
pub fn format(t: &Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// Parses a timestamp field that may also be relative to `now`: `+PT30S` (an ISO 8601
/// duration after a plus sign) means 30 seconds from now. The conformance suite sends
/// such values; absolute values must carry a time zone.
pub fn parse_at(raw: &str, path: &str, now: Timestamp) -> Result<Timestamp, OjsError> {
    // `PT30S` alone also means from now: the JavaScript SDK sends its `delay` that way.
    let relative = raw
        .strip_prefix('+')
        .or_else(|| raw.starts_with('P').then_some(raw));
    if let Some(duration) = relative {
        let d = crate::duration::parse(duration).ok_or_else(|| {
            OjsError::invalid_request(format!(
                "{path} must be an RFC 3339 timestamp or +<ISO 8601 duration>, got {raw:?}"
            ))
            .with_path(path)
        })?;
        let at = after(now, d);
        if at >= max() {
            return Err(OjsError::invalid_request(format!(
                "{path} {raw:?} lies beyond the year 9999"
            ))
            .with_path(path));
        }
        return Ok(at);
    }
    parse(raw, path)
}

/// Parses an RFC 3339 timestamp; one without a zone designator is rejected.
pub fn parse(raw: &str, path: &str) -> Result<Timestamp, OjsError> {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            OjsError::invalid_request(format!(
                "{path} must be an RFC 3339 timestamp with a time zone (e.g. 2026-01-01T00:00:00Z), got {raw:?}"
            ))
            .with_path(path)
        })
}

/// The instant `micros` microseconds after the Unix epoch.
pub fn from_micros(micros: i64) -> Option<Timestamp> {
    DateTime::from_timestamp_micros(micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requires_zone_and_normalises_to_utc() {
        assert!(parse("2025-06-01T09:00:00", "$.t").is_err());
        assert!(parse("not a time", "$.t").is_err());
        let t = parse("2025-06-01T11:00:00+02:00", "$.t").ok();
        assert_eq!(
            t.map(|t| format(&t)).as_deref(),
            Some("2025-06-01T09:00:00Z")
        );
        let micro = parse("2025-06-01T09:00:00.123456Z", "$.t").ok();
        assert_eq!(micro.map(|t| t.timestamp_subsec_micros()), Some(123_456));
        assert_eq!(
            micro.map(|t| format(&t)).as_deref(),
            Some("2025-06-01T09:00:00.123456Z")
        );
    }

    #[test]
    fn relative_times() {
        let now = now();
        assert_eq!(
            parse_at("+PT2S", "$.t", now).ok(),
            Some(now + chrono::Duration::seconds(2))
        );
        assert!(parse_at("+2s", "$.t", now).is_err());
        // Far enough to overflow a timestamp: refused, not a panic.
        for far in ["+P100000000D", "+P99999999999999D", "+P3000000W"] {
            assert!(parse_at(far, "$.t", now).is_err(), "{far}");
        }
        assert!(parse_at("+P3650D", "$.t", now).is_ok());
        assert_eq!(
            parse_at("PT30S", "$.t", now).ok(),
            Some(now + chrono::Duration::seconds(30))
        );
        assert!(parse_at("2025-06-01T09:00:00", "$.t", now).is_err());
    }

    #[test]
    fn arithmetic_saturates_at_the_last_instant() {
        let t = now();
        assert_eq!(after_ms(t, u64::MAX), max());
        assert_eq!(after(max(), std::time::Duration::from_secs(1)), max());
        assert_eq!(after(t, std::time::Duration::MAX), max());
        assert_eq!(after_ms(t, 1500), t + chrono::Duration::milliseconds(1500));
        assert_eq!(format(&max()), "9999-12-31T23:59:59.999999Z");
    }
}
