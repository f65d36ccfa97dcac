//! Workflows built with the SDK's workflow module (`chain`, `group`, `batch`, `Step`),
//! run by an SDK worker and checked through `get_workflow`.

use std::time::{Duration, Instant};

use ojs::{
    batch, chain, group, BatchCallbacks, Client, EnqueueOption, JobContext, Step, Worker, Workflow,
    WorkflowState,
};
use serde_json::json;

use crate::common::*;

/// What a step handler saw: job type, args, start, end, and the SDK's
/// `JobContext::workflow_id`.
type Run = (String, serde_json::Value, Instant, Instant, Option<String>);

/// Registers one recording handler (taking 150 ms) for each type.
async fn record_steps(w: &Worker, types: &[&str], log: &Log<Run>) {
    for t in types {
        let log = log.clone();
        w.register(*t, move |ctx: JobContext| {
            let log = log.clone();
            async move {
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(150)).await;
                log.push((
                    ctx.job.job_type.clone(),
                    ctx.job.args.clone(),
                    start,
                    Instant::now(),
                    ctx.workflow_id.clone(),
                ));
                Ok(json!({"step": ctx.job.job_type}))
            }
        })
        .await;
    }
}

/// Polls `get_workflow` until the workflow is `state`.
async fn wait_workflow(c: &Client, id: &str, state: WorkflowState, limit: Duration) -> Workflow {
    let deadline = Instant::now() + limit;
    loop {
        let wf = c
            .get_workflow(id)
            .await
            .unwrap_or_else(|e| panic!("GET /workflows/{id} via Client::get_workflow: {e}"));
        if wf.state == state {
            return wf;
        }
        if Instant::now() >= deadline {
            panic!(
                "workflow {id} is {:?} after {limit:?}, expected {state:?}",
                wf.state
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every step reported by `get_workflow` is completed, in the order given.
fn assert_steps_completed(wf: &Workflow, types: &[&str]) {
    let got: Vec<(&str, &str)> = wf
        .steps
        .iter()
        .map(|s| (s.job_type.as_str(), s.state.as_str()))
        .collect();
    let want: Vec<(&str, &str)> = types.iter().map(|t| (*t, "completed")).collect();
    assert_eq!(got, want, "workflow steps as reported by get_workflow");
}

/// Chain: steps run one after the other, in order, even with worker concurrency 4.
#[tokio::test]
async fn workflow_chain() {
    bounded(45, async {
        let c = client();
        let q = queue("chain");
        let types = [
            "rs.wf.chain.fetch",
            "rs.wf.chain.transform",
            "rs.wf.chain.notify",
        ];
        let wf = c
            .create_workflow(
                chain(
                    types
                        .iter()
                        .enumerate()
                        .map(|(i, t)| Step::new(*t, json!({"n": i})).queue(&q))
                        .collect(),
                )
                .name("rs-chain"),
            )
            .await
            .expect("POST /workflows via Client::create_workflow(chain(..))");
        assert_eq!(wf.name.as_deref(), Some("rs-chain"));
        assert!(
            matches!(wf.state, WorkflowState::Pending | WorkflowState::Running),
            "new chain is {:?}",
            wf.state
        );
        assert_eq!(
            wf.steps.len(),
            3,
            "the create reply lists the chain's steps"
        );

        let log = Log::default();
        let w = worker_builder(&[&q], 4).build().expect("worker");
        record_steps(&w, &types, &log).await;
        let running = RunningWorker::start(w);
        let done = wait_workflow(
            &c,
            &wf.id,
            WorkflowState::Completed,
            Duration::from_secs(25),
        )
        .await;
        running.stop();

        let runs = log.snapshot();
        let order: Vec<&str> = runs.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            order, types,
            "chain steps ran out of order (or not exactly once)"
        );
        for pair in runs.windows(2) {
            assert!(
                pair[1].2 >= pair[0].3,
                "{} started before {} finished",
                pair[1].0,
                pair[0].0
            );
        }
        assert_steps_completed(&done, &types);
        // The SDK fills JobContext::workflow_id from the job's meta.workflow_id.
        for r in &runs {
            assert_eq!(
                r.4.as_deref(),
                Some(wf.id.as_str()),
                "JobContext::workflow_id of step {}",
                r.0
            );
        }
    })
    .await
}

/// Group: all steps run (in parallel) and the workflow completes.
#[tokio::test]
async fn workflow_group() {
    bounded(45, async {
        let c = client();
        let q = queue("group");
        let types = ["rs.wf.group.csv", "rs.wf.group.pdf", "rs.wf.group.xml"];
        let wf = c
            .create_workflow(
                group(
                    types
                        .iter()
                        .map(|t| Step::new(*t, json!({"id": 1})).queue(&q))
                        .collect(),
                )
                .name("rs-group"),
            )
            .await
            .expect("POST /workflows via Client::create_workflow(group(..))");
        assert!(
            matches!(wf.state, WorkflowState::Pending | WorkflowState::Running),
            "new group is {:?}",
            wf.state
        );

        let log = Log::default();
        let w = worker_builder(&[&q], 4).build().expect("worker");
        record_steps(&w, &types, &log).await;
        let running = RunningWorker::start(w);
        let done = wait_workflow(
            &c,
            &wf.id,
            WorkflowState::Completed,
            Duration::from_secs(25),
        )
        .await;
        running.stop();

        let mut ran: Vec<String> = log.snapshot().into_iter().map(|r| r.0).collect();
        ran.sort();
        assert_eq!(ran, types, "each group step runs exactly once");
        assert_steps_completed(&done, &types);
    })
    .await
}

/// Batch: the jobs run, then the on_complete callback, once.
#[tokio::test]
async fn workflow_batch() {
    bounded(45, async {
        let c = client();
        let q = queue("wfbatch");
        let item = "rs.wf.batch.item";
        let report = "rs.wf.batch.report";
        let wf = c
            .create_workflow(batch(
                BatchCallbacks::new()
                    .on_complete(Step::new(report, json!({"final": true})).queue(&q)),
                (0..3)
                    .map(|i| Step::new(item, json!({"i": i})).queue(&q))
                    .collect(),
            ))
            .await
            .expect("POST /workflows via Client::create_workflow(batch(..))");

        let log = Log::default();
        let w = worker_builder(&[&q], 4).build().expect("worker");
        record_steps(&w, &[item, report], &log).await;
        let running = RunningWorker::start(w);
        let done = wait_workflow(
            &c,
            &wf.id,
            WorkflowState::Completed,
            Duration::from_secs(25),
        )
        .await;
        // The callback may still be running when the batch's jobs are all done.
        wait_for("the on_complete callback", Duration::from_secs(10), || {
            let log = log.clone();
            async move { log.snapshot().iter().any(|r| r.0 == report).then_some(()) }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        running.stop();

        let runs = log.snapshot();
        let items: Vec<&Run> = runs.iter().filter(|r| r.0 == item).collect();
        let mut seen: Vec<i64> = items
            .iter()
            .map(|r| r.1[0]["i"].as_i64().expect("args[0].i"))
            .collect();
        seen.sort();
        assert_eq!(seen, [0, 1, 2], "each batch job runs exactly once");
        let callbacks: Vec<&Run> = runs.iter().filter(|r| r.0 == report).collect();
        assert_eq!(callbacks.len(), 1, "on_complete runs exactly once");
        let last_item_end = items.iter().map(|r| r.3).max().expect("items ran");
        assert!(
            callbacks[0].2 >= last_item_end,
            "on_complete ran before the jobs finished"
        );
        assert_steps_completed(&done, &[item, item, item, report]);
    })
    .await
}

/// `WorkflowDefinition::with_option` ("default options applied to all steps"): a step
/// without its own queue runs on the workflow's queue.
#[tokio::test]
async fn workflow_default_options() {
    bounded(60, async {
        let c = client();
        let q = queue("wfopts");
        let t = "rs.wf.opts.step";
        c.create_workflow(
            group(vec![Step::new(t, json!({}))]).with_option(EnqueueOption::Queue(q.clone())),
        )
        .await
        .expect("POST /workflows with workflow-level options");
        let log = Log::default();
        let w = worker_builder(&[&q], 1).build().expect("worker");
        record_steps(&w, &[t], &log).await;
        let running = RunningWorker::start(w);
        wait_for(
            &format!("the step to run on the workflow's queue {q}"),
            Duration::from_secs(10),
            || {
                let log = log.clone();
                async move { (log.len() == 1).then_some(()) }
            },
        )
        .await;
        running.stop();
    })
    .await
}
