//! Lists of whole jobs in answers bounded by bytes (issue #32): a Lambda function's
//! answer is at most 6 MB, its body escaped once more inside Lambda's envelope. A list
//! that would pass the store's answer bound ([`ojs_store::AnswerBound`]) shows its jobs
//! whole as long as the rest still fit without their `args`, `meta` and error history,
//! and the rest without them, each saying so under `x-ojs-payload` (GET of the job shows
//! it whole). Sizes are counted in the answer's format: a delimited Protobuf answer is
//! base64-encoded by Lambda, and a number in `args` takes 11 bytes in it.
//! The list keeps every job and its order, so a page is the page a client asked for.

use ojs_core::job::PAYLOAD_VIEW_KEY;
use ojs_core::Job;
use serde_json::{json, Value};

use crate::negotiate::Format;

/// The views of `jobs`, in order, within `bound` bytes as Lambda carries them in
/// `format` (see the module): whole while that leaves room for the rest slim.
pub(crate) fn bounded_views(jobs: &[Job], bound: usize, format: Format) -> Vec<Value> {
    let whole = jobs.iter().map(|job| {
        let view = job.to_json();
        let bytes = match format {
            // A job whose args and meta were not brought back still counts them, as FETCH
            // does before it reads them.
            Format::Json => ojs_store::answer_bytes(job),
            Format::Proto => proto_bytes(&view),
        };
        (view, bytes)
    });
    match format {
        Format::Json => fit(whole.collect(), bound, json_bytes, slim_view),
        Format::Proto => fit(whole.collect(), bound, proto_bytes, slim_view),
    }
}

/// Bytes `view` takes in a JSON answer as Lambda carries it.
pub(crate) fn json_bytes(view: &Value) -> usize {
    ojs_store::enveloped_bytes(&view.to_string())
}

/// Bytes `view` takes in a delimited Protobuf answer as Lambda carries it (base64).
fn proto_bytes(view: &Value) -> usize {
    crate::negotiate::delimited_answer_bytes(view).unwrap_or(usize::MAX)
}

/// `whole` (each view with its size) within `bound`: each view whole while the ones
/// after it, shrunk by `shrink` and sized by `size`, still fit; the others shrunk. The
/// count and the order are kept, so a page stays the page asked for.
pub(crate) fn fit(
    whole: Vec<(Value, usize)>,
    bound: usize,
    size: impl Fn(&Value) -> usize,
    shrink: impl Fn(&Value) -> Value,
) -> Vec<Value> {
    // The common case: everything fits, and nothing is shrunk.
    if whole.iter().fold(0usize, |sum, w| sum.saturating_add(w.1)) <= bound {
        return whole.into_iter().map(|w| w.0).collect();
    }
    let slim: Vec<(Value, usize)> = whole
        .iter()
        .map(|(view, _)| {
            let view = shrink(view);
            let bytes = size(&view);
            (view, bytes)
        })
        .collect();
    let mut rest = slim.iter().fold(0usize, |sum, s| sum.saturating_add(s.1));
    let mut used = 0usize;
    let mut out = Vec::with_capacity(whole.len());
    for ((view, bytes), (slim, slim_bytes)) in whole.into_iter().zip(slim) {
        rest -= slim_bytes;
        if used.saturating_add(bytes).saturating_add(rest) <= bound {
            used += bytes;
            out.push(view);
        } else {
            used = used.saturating_add(slim_bytes);
            out.push(slim);
        }
    }
    out
}

/// A job's view without its `args`, `meta` and error history (`errors`: up to 20
/// errors of 6 KiB each; the last one stays as `error`), saying what was left out.
fn slim_view(view: &Value) -> Value {
    let mut view = view.clone();
    if let Some(fields) = view.as_object_mut() {
        fields.remove("args");
        fields.remove("meta");
        let mut note = json!({
            "resolved": false,
            "omitted": "the answer would pass Lambda's response limit; GET the job for its args and meta",
        });
        if let Some(errors) = fields.remove("errors") {
            note["omitted"] = "the answer would pass Lambda's response limit; GET the job for its args, meta and errors".into();
            note["errors_omitted"] = errors.as_array().map_or(0, Vec::len).into();
        }
        fields.insert(PAYLOAD_VIEW_KEY.into(), note);
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::NewJob;

    /// One instant for every job: a timestamp is written with as many fraction digits
    /// as it needs (none, 3 or 6), so jobs enqueued at `now()` differ in size by a few
    /// bytes, and a bound of exactly two of them would hold or not by the clock.
    fn enqueued_at() -> ojs_core::time::Timestamp {
        ojs_core::time::parse("2026-01-02T03:04:05.123456Z", "$").unwrap_or_else(|e| panic!("{e}"))
    }

    fn job(chars: usize) -> Job {
        let new = NewJob::from_json(json!({"type": "t", "args": ["\"".repeat(chars)]}))
            .unwrap_or_else(|e| panic!("{e}"));
        Job::enqueue(new, enqueued_at())
    }

    fn total(views: &[Value]) -> usize {
        views
            .iter()
            .map(|v| ojs_store::enveloped_bytes(&v.to_string()))
            .sum()
    }

    #[test]
    fn a_list_that_fits_is_shown_whole() {
        let jobs = [job(10), job(10)];
        let views = bounded_views(&jobs, 1_000_000, Format::Json);
        assert_eq!(views, jobs.iter().map(Job::to_json).collect::<Vec<_>>());
    }

    #[test]
    fn jobs_are_whole_while_the_rest_still_fit_without_args() {
        // Each whole job: 4 bytes a quote in the envelope, about 4,000 in all.
        let jobs = [job(1_000), job(1_000), job(1_000)];
        let whole = ojs_store::answer_bytes(&jobs[0]);
        let slim = ojs_store::enveloped_bytes(&slim_view(&jobs[0].to_json()).to_string());
        assert!(whole > 4_000 && slim < 1_000, "{whole} {slim}");
        // Room for two whole jobs and a slim one, not for three whole.
        let bound = 2 * whole + slim;
        let views = bounded_views(&jobs, bound, Format::Json);
        assert_eq!(views.len(), 3);
        assert!(views[0].get("args").is_some() && views[1].get("args").is_some());
        assert!(views[2].get("args").is_none() && views[2].get("meta").is_none());
        assert_eq!(views[2][PAYLOAD_VIEW_KEY]["resolved"], false);
        assert_eq!(views[2]["id"], jobs[2].id.to_string());
        assert_eq!(total(&views), bound);
        // One byte less: only the first is whole.
        let views = bounded_views(&jobs, bound - 1, Format::Json);
        assert!(views[0].get("args").is_some() && views[1].get("args").is_none());
        assert!(total(&views) < bound);
    }

    fn zeros(n: usize) -> Job {
        let new = NewJob::from_json(json!({"type": "t", "args": [vec![0; n]]}))
            .unwrap_or_else(|e| panic!("{e}"));
        Job::enqueue(new, enqueued_at())
    }

    #[test]
    fn a_protobuf_list_is_bounded_by_its_own_bytes() {
        // 20,000 zeros: about 40 KB of JSON, about 293 KB as a base64 Protobuf answer.
        let jobs = [zeros(20_000), zeros(20_000), zeros(20_000)];
        let json_total: usize = jobs.iter().map(ojs_store::answer_bytes).sum();
        let whole = proto_bytes(&jobs[0].to_json());
        let slim = proto_bytes(&slim_view(&jobs[0].to_json()));
        assert!(whole > 5 * json_total / 3, "{whole} {json_total}");
        let bound = 2 * whole + slim;
        // The same jobs fit whole in JSON...
        let views = bounded_views(&jobs, bound, Format::Json);
        assert!(views.iter().all(|v| v.get("args").is_some()));
        // ...and in Protobuf two are whole and the third slim, within the bound.
        let views = bounded_views(&jobs, bound, Format::Proto);
        assert!(views[0].get("args").is_some() && views[1].get("args").is_some());
        assert!(views[2].get("args").is_none(), "{}", views[2]);
        assert_eq!(views.iter().map(proto_bytes).sum::<usize>(), bound);
        let views = bounded_views(&jobs, bound - 1, Format::Proto);
        assert!(views[1].get("args").is_none());
        assert!(views.iter().map(proto_bytes).sum::<usize>() < bound);
    }

    #[test]
    fn a_slim_view_leaves_out_the_error_history_and_counts_it() {
        let mut view = job(10).to_json();
        view["errors"] = json!([{"message": "a"}, {"message": "b"}]);
        view["error"] = json!({"message": "b"});
        let slim = slim_view(&view);
        assert!(slim.get("errors").is_none(), "{slim}");
        assert_eq!(
            slim["error"],
            json!({"message": "b"}),
            "the last error stays"
        );
        assert_eq!(slim[PAYLOAD_VIEW_KEY]["errors_omitted"], 2);
        assert!(slim[PAYLOAD_VIEW_KEY]["omitted"]
            .as_str()
            .is_some_and(|s| s.contains("errors")));
        let plain = slim_view(&job(10).to_json());
        assert!(
            plain[PAYLOAD_VIEW_KEY].get("errors_omitted").is_none(),
            "{plain}"
        );
    }

    #[test]
    fn fit_keeps_order_and_count_and_shrinks_from_the_end() {
        let views: Vec<(Value, usize)> =
            (0..4).map(|i| (json!({"i": i, "big": true}), 10)).collect();
        let shrink = |v: &Value| json!({"i": v["i"].clone()});
        let size = |v: &Value| if v.get("big").is_some() { 10 } else { 1 };
        assert_eq!(
            fit(views.clone(), 40, size, shrink)
                .iter()
                .filter(|v| v.get("big").is_some())
                .count(),
            4
        );
        // Room for two whole and two slim (22), not three whole (31).
        let out = fit(views.clone(), 30, size, shrink);
        let big: Vec<bool> = out.iter().map(|v| v.get("big").is_some()).collect();
        assert_eq!(big, [true, true, false, false]);
        let ids: Vec<i64> = out.iter().filter_map(|v| v["i"].as_i64()).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        assert_eq!(
            fit(views.clone(), 31, size, shrink)
                .iter()
                .filter(|v| v.get("big").is_some())
                .count(),
            3
        );
        // Nothing fits: all slim, none dropped.
        assert_eq!(fit(views, 0, size, shrink).len(), 4);
    }
}
