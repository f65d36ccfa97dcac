//! Time zone names: IANA names only, as ojs-cron.md §5.1 requires.

use chrono_tz::{Tz, TZ_VARIANTS};

use super::CronError;

/// The zone used when a cron job names none (ojs-cron.md §5.1: "MUST default to `\"UTC\"`").
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// Resolves an IANA zone name (exact spelling, as the tz database has it).
///
/// Names the tz database carries only for compatibility and that are really fixed offsets or
/// abbreviations (`EST`, `MST`, `HST`, `EST5EDT`, `Etc/GMT+5`, `GMT0`, ...) are refused, because
/// §5.1 forbids fixed UTC offsets and abbreviations. `UTC` and its aliases (`Etc/UTC`, `GMT`, ...)
/// are accepted.
pub fn resolve(name: &str) -> Result<Tz, CronError> {
    if name.trim().is_empty() {
        return Err(CronError::Timezone(
            "timezone must not be empty; omit it for UTC or give an IANA name such as \"America/New_York\"".into(),
        ));
    }
    if is_offset_or_abbreviation(name) {
        return Err(CronError::Timezone(format!(
            "\"{name}\" is a fixed offset or abbreviation, not an IANA location; use a name such as \"America/New_York\" or \"UTC\""
        )));
    }
    match name.parse::<Tz>() {
        Ok(tz) => Ok(tz),
        Err(_) => {
            let hint = TZ_VARIANTS
                .iter()
                .find(|tz| tz.name().eq_ignore_ascii_case(name))
                .map(|tz| format!(" (did you mean \"{}\"?)", tz.name()))
                .unwrap_or_default();
            Err(CronError::Timezone(format!(
                "\"{name}\" is not an IANA time zone name{hint}"
            )))
        }
    }
}

fn is_offset_or_abbreviation(name: &str) -> bool {
    let base = name.strip_prefix("Etc/").unwrap_or(name);
    // GMT+5, GMT-0, GMT0, Etc/GMT-14: POSIX-style fixed offsets. Plain GMT is UTC and fine.
    if base.len() > 3 && base.starts_with("GMT") {
        return true;
    }
    matches!(
        name,
        "EST"
            | "MST"
            | "HST"
            | "CET"
            | "EET"
            | "MET"
            | "WET"
            | "EST5EDT"
            | "CST6CDT"
            | "MST7MDT"
            | "PST8PDT"
    )
}
