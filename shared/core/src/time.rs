//! Timestamps: RFC 3339 with a mandatory offset, rendered in UTC with microseconds.

use chrono::{DateTime, SecondsFormat, Utc};

use crate::error::OjsError;

/// A UTC instant.
pub type Timestamp = DateTime<Utc>;

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
    if let Some(duration) = raw.strip_prefix('+') {
        let d = crate::duration::parse(duration)
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .ok_or_else(|| {
                OjsError::invalid_request(format!(
                    "{path} must be an RFC 3339 timestamp or +<ISO 8601 duration>, got {raw:?}"
                ))
                .with_path(path)
            })?;
        return Ok(now + d);
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
        assert!(parse_at("2025-06-01T09:00:00", "$.t", now).is_err());
    }
}
