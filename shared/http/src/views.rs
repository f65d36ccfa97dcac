//! Lists of whole jobs in answers bounded by bytes (issue #32): a Lambda function's
//! answer is at most 6 MB, its body escaped once more inside Lambda's envelope. A list
//! that would pass the store's answer bound ([`ojs_store::AnswerBound`]) shows its jobs
//! whole as long as the rest still fit without their `args` and `meta`, and the rest
//! without them, each saying so under `x-ojs-payload` (GET of the job shows it whole).
//! The list keeps every job and its order, so a page is the page a client asked for.

use ojs_core::job::PAYLOAD_VIEW_KEY;
use ojs_core::Job;
use serde_json::{json, Value};

/// The views of `jobs`, in order, within `bound` bytes as Lambda carries them (see the
/// module): whole while that leaves room for the rest without their args and meta.
pub(crate) fn bounded_views(jobs: &[Job], bound: usize) -> Vec<Value> {
    let whole_bytes: Vec<usize> = jobs.iter().map(ojs_store::answer_bytes).collect();
    // The common case: the whole list fits, and no slim view is needed.
    if whole_bytes.iter().sum::<usize>() <= bound {
        return jobs.iter().map(Job::to_json).collect();
    }
    let slim: Vec<Value> = jobs.iter().map(slim_view).collect();
    let slim_bytes: Vec<usize> = slim
        .iter()
        .map(|v| ojs_store::enveloped_bytes(&v.to_string()))
        .collect();
    let mut rest: usize = slim_bytes.iter().sum();
    let mut used = 0usize;
    let mut out = Vec::with_capacity(jobs.len());
    for (((job, slim), slim_len), whole) in jobs.iter().zip(slim).zip(slim_bytes).zip(whole_bytes) {
        rest -= slim_len;
        if used.saturating_add(whole).saturating_add(rest) <= bound {
            used += whole;
            out.push(job.to_json());
        } else {
            used += slim_len;
            out.push(slim);
        }
    }
    out
}

/// `job`'s view without `args` and `meta`, saying why.
fn slim_view(job: &Job) -> Value {
    let mut view = job.to_json();
    if let Some(fields) = view.as_object_mut() {
        fields.remove("args");
        fields.remove("meta");
        fields.insert(
            PAYLOAD_VIEW_KEY.into(),
            json!({
                "resolved": false,
                "omitted": "the answer would pass Lambda's response limit; GET the job for its args and meta",
            }),
        );
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;
    use ojs_core::NewJob;

    fn job(chars: usize) -> Job {
        let new = NewJob::from_json(json!({"type": "t", "args": ["\"".repeat(chars)]}))
            .unwrap_or_else(|e| panic!("{e}"));
        Job::enqueue(new, ojs_core::time::now())
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
        let views = bounded_views(&jobs, 1_000_000);
        assert_eq!(views, jobs.iter().map(Job::to_json).collect::<Vec<_>>());
    }

    #[test]
    fn jobs_are_whole_while_the_rest_still_fit_without_args() {
        // Each whole job: 4 bytes a quote in the envelope, about 4,000 in all.
        let jobs = [job(1_000), job(1_000), job(1_000)];
        let whole = ojs_store::answer_bytes(&jobs[0]);
        let slim = ojs_store::enveloped_bytes(&slim_view(&jobs[0]).to_string());
        assert!(whole > 4_000 && slim < 1_000, "{whole} {slim}");
        // Room for two whole jobs and a slim one, not for three whole.
        let bound = 2 * whole + slim;
        let views = bounded_views(&jobs, bound);
        assert_eq!(views.len(), 3);
        assert!(views[0].get("args").is_some() && views[1].get("args").is_some());
        assert!(views[2].get("args").is_none() && views[2].get("meta").is_none());
        assert_eq!(views[2][PAYLOAD_VIEW_KEY]["resolved"], false);
        assert_eq!(views[2]["id"], jobs[2].id.to_string());
        assert_eq!(total(&views), bound);
        // One byte less: only the first is whole.
        let views = bounded_views(&jobs, bound - 1);
        assert!(views[0].get("args").is_some() && views[1].get("args").is_none());
        assert!(total(&views) < bound);
    }
}
