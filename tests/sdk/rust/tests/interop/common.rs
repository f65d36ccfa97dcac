//! Shared helpers: the server URL, SDK clients and workers built the way the SDK's README
//! shows, unique names, bounded waits, and a worker that can be stopped.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use ojs::{Client, JobState, OjsError, Worker, WorkerBuilder};

/// Per-request timeout of every SDK client and worker: a hung server fails a scenario
/// instead of stalling it for ever (the SDK's default, 30 s: a CI machine running every
/// SDK suite at once took 6 s over one request).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the SDK worker polls an empty queue (its default is 1 s).
pub const POLL: Duration = Duration::from_millis(100);

/// The server under test, from `OJS_URL`.
pub fn url() -> String {
    std::env::var("OJS_URL").expect("OJS_URL must name the server under test")
}

/// Routes the SDK's own `tracing` warnings (failed heartbeats, fetches, acks) into the
/// test output, where a failing scenario shows them. `RUST_LOG` overrides the filter.
pub fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("ojs=warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// A producer client.
pub fn client() -> Client {
    init_logging();
    Client::builder()
        .url(url())
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("Client::builder().build()")
}

/// A worker builder on `queues`, polling fast so scenarios run quickly.
pub fn worker_builder(queues: &[&str], concurrency: usize) -> WorkerBuilder {
    init_logging();
    Worker::builder()
        .url(url())
        .queues(queues.to_vec())
        .concurrency(concurrency)
        .poll_interval(POLL)
        .grace_period(Duration::from_secs(1))
        .timeout(REQUEST_TIMEOUT)
}

/// A short random suffix.
pub fn rand_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_owned()
}

/// A queue name of its own for one scenario.
pub fn queue(tag: &str) -> String {
    format!("rs-{tag}-{}", rand_suffix())
}

/// A name that sorts before every earlier run's (and every other suite's) names. The SDK's
/// `list_queues()` and `list_cron_jobs()` cannot page, and the server answers the first
/// page only (50, sorted by name), so on a shared table a name must sort early to be seen:
/// a leading `0` and a count of seconds that decreases with time.
pub fn early_name(tag: &str) -> String {
    let now = chrono::Utc::now().timestamp();
    format!("0-rs-{:010}-{tag}-{}", 9_999_999_999 - now, rand_suffix())
}

/// Seconds in an ISO 8601 duration of days, hours, minutes and seconds (`P1DT2H`,
/// `PT1M`, `PT1.5S`).
pub fn iso_secs(raw: &str) -> f64 {
    let rest = raw
        .strip_prefix('P')
        .unwrap_or_else(|| panic!("not a duration: {raw:?}"));
    let (mut total, mut num, mut in_time) = (0.0, String::new(), false);
    for ch in rest.chars() {
        let unit = match ch {
            'T' => {
                in_time = true;
                continue;
            }
            '0'..='9' | '.' => {
                num.push(ch);
                continue;
            }
            'D' if !in_time => 86_400.0,
            'H' if in_time => 3_600.0,
            'M' if in_time => 60.0,
            'S' if in_time => 1.0,
            _ => panic!("unsupported duration {raw:?}"),
        };
        total += num
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("bad duration {raw:?}"))
            * unit;
        num.clear();
    }
    total
}

/// Runs a scenario under a time limit, so the whole suite ends even if the server hangs.
pub async fn bounded<F: Future<Output = ()>>(secs: u64, scenario: F) {
    if tokio::time::timeout(Duration::from_secs(secs), scenario)
        .await
        .is_err()
    {
        panic!("scenario did not finish within {secs} s");
    }
}

/// Polls `probe` every 100 ms until it yields `Some`, for at most `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until INFO (`Client::get_job`) reports `state`, and returns the job. INFO errors
/// fail at once: they are what the scenario checks, not something to wait out.
pub async fn wait_state(client: &Client, id: &str, state: JobState, limit: Duration) -> ojs::Job {
    let deadline = Instant::now() + limit;
    loop {
        let job = client
            .get_job(id)
            .await
            .unwrap_or_else(|e| panic!("INFO GET /jobs/{id} via Client::get_job: {e}"));
        if job.state == Some(state) {
            return job;
        }
        if Instant::now() >= deadline {
            panic!(
                "job {id} is {:?} after {limit:?}, expected {state:?}",
                job.state
            );
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// The server error inside an SDK error, or a panic naming what was expected.
pub fn server_error(err: OjsError, expected: &str) -> Box<ojs::ServerError> {
    match err {
        OjsError::Server(e) => e,
        other => panic!("expected a server error ({expected}), got: {other}"),
    }
}

/// An SDK worker running `start()` in the background. `start()` only returns on Ctrl-C or
/// a server `terminate` directive, so the scenario stops it by aborting its task (which
/// drops its in-flight handlers) once the jobs it waited for are done.
pub struct RunningWorker {
    task: tokio::task::JoinHandle<ojs::Result<()>>,
}

impl RunningWorker {
    pub fn start(worker: Worker) -> Self {
        let task = tokio::spawn(async move { worker.start().await });
        Self { task }
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A log of what handlers saw, shared between handlers and the scenario.
#[derive(Clone)]
pub struct Log<T: Clone>(Arc<Mutex<Vec<T>>>);

impl<T: Clone> Default for Log<T> {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<T: Clone> Log<T> {
    pub fn push(&self, v: T) {
        self.0.lock().expect("log lock").push(v);
    }
    pub fn snapshot(&self) -> Vec<T> {
        self.0.lock().expect("log lock").clone()
    }
    pub fn len(&self) -> usize {
        self.0.lock().expect("log lock").len()
    }
}

/// Invocations per job id.
#[derive(Clone, Default)]
pub struct Counts(Arc<Mutex<HashMap<String, u32>>>);

impl Counts {
    pub fn hit(&self, id: &str) {
        *self
            .0
            .lock()
            .expect("counts lock")
            .entry(id.to_owned())
            .or_default() += 1;
    }
    pub fn snapshot(&self) -> HashMap<String, u32> {
        self.0.lock().expect("counts lock").clone()
    }
}
