//! W3C Trace Context (ojs-distributed-tracing.md §6): a job carries its producer's trace
//! in `meta.traceparent` (and `meta.tracestate`), kept unchanged through its lifecycle, so
//! the server's log lines, push deliveries and webhooks of that job name the same trace.

use serde_json::{Map, Value};

/// The `meta` key holding the W3C `traceparent` of a job.
pub const TRACEPARENT: &str = "traceparent";
/// The `meta` key holding the W3C `tracestate` of a job.
pub const TRACESTATE: &str = "tracestate";

/// Longest `tracestate` kept (W3C: at most 32 members; 512 bytes is what a vendor must
/// propagate).
const MAX_TRACESTATE: usize = 512;

/// A parsed `traceparent` (version 00, or a later version read as 00 allows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// 32 lower-case hex digits, not all zero.
    pub trace_id: String,
    /// 16 lower-case hex digits, not all zero.
    pub parent_id: String,
    /// The trace flags, two hex digits.
    pub flags: String,
}

fn hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && s.bytes().any(|b| b != b'0')
}

impl TraceParent {
    /// `raw` as W3C Trace Context §3.2 reads it: `version-traceid-parentid-flags`,
    /// version `ff` invalid, a later version allowed more fields after these four.
    pub fn parse(raw: &str) -> Option<Self> {
        let raw = raw.trim();
        let mut parts = raw.split('-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let version_ok = version.len() == 2
            && version
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            && version != "ff";
        let rest_ok = match version {
            "00" => parts.next().is_none(),
            _ => true,
        };
        let flags_ok = flags.len() == 2
            && flags
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        (version_ok && rest_ok && flags_ok && hex(trace_id, 32) && hex(parent_id, 16)).then(|| {
            Self {
                trace_id: trace_id.to_owned(),
                parent_id: parent_id.to_owned(),
                flags: flags.to_owned(),
            }
        })
    }

    /// The header value (version 00).
    pub fn header(&self) -> String {
        format!("00-{}-{}-{}", self.trace_id, self.parent_id, self.flags)
    }
}

/// The trace a job's `meta` names, if its `traceparent` is valid.
pub fn of_meta(meta: &Map<String, Value>) -> Option<TraceParent> {
    meta.get(TRACEPARENT)
        .and_then(Value::as_str)
        .and_then(TraceParent::parse)
}

/// Adds the request's trace context to a job's `meta` when the job carries none of its
/// own (a producer that sends the `traceparent` header, not the meta key): the meta a
/// client set is never changed. An invalid header is ignored, and so is a `tracestate`
/// without a valid `traceparent` or longer than 512 bytes.
pub fn adopt(meta: &mut Map<String, Value>, traceparent: Option<&str>, tracestate: Option<&str>) {
    if meta.contains_key(TRACEPARENT) {
        return;
    }
    let Some(parent) = traceparent.and_then(TraceParent::parse) else {
        return;
    };
    meta.insert(TRACEPARENT.into(), parent.header().into());
    if let Some(state) = tracestate
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE)
    {
        meta.entry(TRACESTATE).or_insert_with(|| state.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read_and_written_back() {
        let p = TraceParent::parse(EXAMPLE).unwrap_or_else(|| panic!("valid"));
        assert_eq!(p.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.parent_id, "00f067aa0ba902b7");
        assert_eq!(p.flags, "01");
        assert_eq!(p.header(), EXAMPLE);
        // A later version may carry more fields; it is read as 00.
        let later =
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz");
        assert_eq!(later.map(|p| p.header()).as_deref(), Some(EXAMPLE));
    }

    #[test]
    fn invalid_traceparents_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_header_is_adopted_only_by_a_job_without_its_own_trace() {
        let mut meta = Map::new();
        adopt(&mut meta, Some(EXAMPLE), Some("vendor=1"));
        assert_eq!(
            Value::Object(meta.clone()),
            json!({"traceparent": EXAMPLE, "tracestate": "vendor=1"})
        );
        assert_eq!(
            of_meta(&meta).map(|p| p.trace_id).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );

        let own = "00-11111111111111111111111111111111-2222222222222222-00";
        let mut meta = json!({"traceparent": own})
            .as_object()
            .cloned()
            .unwrap_or_default();
        adopt(&mut meta, Some(EXAMPLE), Some("vendor=1"));
        assert_eq!(Value::Object(meta), json!({"traceparent": own}));

        for (parent, state) in [(Some("junk"), Some("vendor=1")), (None, Some("vendor=1"))] {
            let mut meta = Map::new();
            adopt(&mut meta, parent, state);
            assert!(meta.is_empty(), "{parent:?}");
        }
        let mut meta = Map::new();
        let long = "v=".to_owned() + &"x".repeat(600);
        adopt(&mut meta, Some(EXAMPLE), Some(&long));
        assert_eq!(Value::Object(meta), json!({"traceparent": EXAMPLE}));
    }
}
