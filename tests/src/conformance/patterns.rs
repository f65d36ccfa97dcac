//! Fixed regular expressions of the matchers (the upstream `lib/assertions.go`
//! patterns).
//!
//! Each is compiled once; `None` cannot happen for these constant patterns but is
//! handled instead of unwrapping. `\d` is written `[0-9]` and `\s` as an explicit class
//! because Rust's classes are Unicode-aware while Go's are ASCII.

use regex::Regex;
use std::sync::OnceLock;

fn fixed(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

/// Any-version UUID, lower-case hex.
pub fn uuid_re() -> Option<&'static Regex> {
    static C: OnceLock<Option<Regex>> = OnceLock::new();
    fixed(
        &C,
        r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
    )
}

/// UUIDv7: version nibble 7, variant bits `10`.
pub fn uuidv7_re() -> Option<&'static Regex> {
    static C: OnceLock<Option<Regex>> = OnceLock::new();
    fixed(
        &C,
        r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
    )
}

/// Simplified RFC 3339 timestamp.
pub fn datetime_re() -> Option<&'static Regex> {
    static C: OnceLock<Option<Regex>> = OnceLock::new();
    let date = r"[0-9]{4}-[0-9]{2}-[0-9]{2}";
    let time = r"[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?";
    fixed(
        &C,
        &format!(r"^{date}T{time}(Z|[+-][0-9]{{2}}:[0-9]{{2}})$"),
    )
}

/// `number:range(a,b)`.
pub fn range_re() -> Option<&'static Regex> {
    static C: OnceLock<Option<Regex>> = OnceLock::new();
    let n = r"(-?[0-9]+(?:\.[0-9]+)?)";
    fixed(&C, &format!(r"^number:range\({n},[\t\n\x0C\r ]*{n}\)$"))
}

/// `array:length(n)`.
pub fn length_re() -> Option<&'static Regex> {
    static C: OnceLock<Option<Regex>> = OnceLock::new();
    fixed(&C, r"^array:length\(([0-9]+)\)$")
}

/// `~n` approximate number.
pub fn approx_re() -> Option<&'static Regex> {
    static C: OnceLock<Option<Regex>> = OnceLock::new();
    fixed(&C, r"^~([0-9]+(?:\.[0-9]+)?)$")
}

/// True if the (available) regex matches.
pub fn matches(re: Option<&Regex>, s: &str) -> bool {
    re.is_some_and(|r| r.is_match(s))
}
