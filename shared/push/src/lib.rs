//! Push delivery (ojs-serverless.md §2, §7, §8, §10.1): when the change stream shows a job
//! becoming available on a queue with registered endpoints, the dispatcher claims it for
//! one endpoint (the same conditional write as FETCH, so a polling worker or another
//! endpoint cannot also get it), POSTs the signed §2.2 request, and settles the job from
//! the answer through the store's ACK and FAIL, fenced by the claim's worker id and
//! attempt: retries, dead letter and events work as for polled jobs, and the answer of an
//! attempt that is no longer current is refused by the store and ignored here.
//!
//! DynamoDB calls per pushed job: the queue's endpoints (one Query, cached for a second),
//! the endpoint's slot (one GetItem of its holders, one UpdateItem), the claim (one
//! UpdateItem), the settle (one UpdateItem) and the slot's release (one UpdateItem, two
//! when it was the last holder): 5 to 6 calls, measured at 8.x write units with the
//! PUSH (tests/tests/integration/push.rs). An offer taken from the delivery queue
//! ([`Dispatcher::offer`], [`deliveries`]) reads the job again first: one GetItem more.

mod breaker;
mod deliver;
mod deliveries;
pub mod guard;
mod invoke;
pub mod metrics;
mod webhook;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ojs_core::push::PushAnswer;
use ojs_core::{time, Job, QueueName};
use ojs_store::{
    AckRequest, Change, FailRequest, Fence, PushClaim, PushEntry, ReadyJob, SlotHold, Store,
    StoreError,
};
use tokio::sync::Semaphore;

pub use deliveries::{
    Deliverer, Delivery, DeliveryQueue, PlannedDeliveries, PlannedWebhook, Planner,
};
pub use webhook::{AttemptResult, WebhookConfig, WebhookDispatcher};

/// Runs `round` every `interval` in the background; a round that overruns delays the
/// next rather than stacking them.
fn every<F, R>(interval: Duration, mut round: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> R + Send + 'static,
    R: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            round().await;
        }
    })
}

/// How long the endpoints of a queue are trusted once read: a registration made through
/// another instance applies within this time.
const ENDPOINTS_TTL: Duration = Duration::from_secs(1);
/// How many available jobs of a queue one catch-up round looks at.
const CATCH_UP_PAGE: usize = 10;
/// Most rounds of one catch-up (a backlog drains over several deliveries' catch-ups).
const CATCH_UP_ROUNDS: usize = 20;
/// How long a job has been available before a catch-up takes it rather than leave it to
/// the stream's dispatch (which would race it for the claim).
const CATCH_UP_AGE: chrono::TimeDelta = chrono::TimeDelta::milliseconds(500);

/// Settings of push delivery, read once per cold start.
#[derive(Debug, Clone)]
pub struct PushConfig {
    /// Whether endpoints may be loopback or private addresses, over plain HTTP too
    /// (`OJS_PUSH_ALLOW_PRIVATE=on`: local development and tests only).
    pub allow_private: bool,
    /// Most deliveries this process runs at once (`OJS_PUSH_MAX_PARALLEL`, default 64).
    pub max_parallel: usize,
    /// How long an endpoint whose circuit opened gets no delivery before one tests it
    /// (`OJS_PUSH_BREAKER_COOLDOWN_MS`, default 60000; §7.2.6).
    pub breaker_cooldown: Duration,
}

impl PushConfig {
    /// Reads `OJS_PUSH_ALLOW_PRIVATE` (`on`/`off`, default off),
    /// `OJS_PUSH_MAX_PARALLEL` (default 64) and `OJS_PUSH_BREAKER_COOLDOWN_MS` (default
    /// 60000).
    pub fn from_env() -> Self {
        let number = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Self {
            allow_private: allow_private_from_env(),
            max_parallel: number("OJS_PUSH_MAX_PARALLEL")
                .filter(|n| *n > 0)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(64),
            breaker_cooldown: Duration::from_millis(
                number("OJS_PUSH_BREAKER_COOLDOWN_MS").unwrap_or(60_000),
            ),
        }
    }

    /// Settings for tests and local use: private targets allowed or not, 32 deliveries at
    /// once, a one-second breaker cooldown.
    pub fn local(allow_private: bool) -> Self {
        Self {
            allow_private,
            max_parallel: 32,
            breaker_cooldown: Duration::from_secs(1),
        }
    }
}

/// The Lambda client of direct invocations, from the standard AWS environment (its
/// endpoint overridable with `AWS_ENDPOINT_URL_LAMBDA`), with no retries of its own: a
/// failed invoke is a failed attempt, retried by the job's policy.
pub fn lambda_client(sdk: &aws_config::SdkConfig) -> aws_sdk_lambda::Client {
    let conf = aws_sdk_lambda::config::Builder::from(sdk)
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    aws_sdk_lambda::Client::from_conf(conf)
}

/// The push dispatcher and the webhook dispatcher of a Lambda function, both configured
/// from the environment: what the stream function plans with and the delivery function
/// delivers with.
pub fn dispatchers_from_env(
    store: Store,
    sdk: &aws_config::SdkConfig,
) -> Result<(Dispatcher, WebhookDispatcher), String> {
    let push = Dispatcher::new(store.clone(), lambda_client(sdk), PushConfig::from_env())?;
    let webhooks = WebhookDispatcher::new(store, WebhookConfig::from_env())?;
    Ok((push, webhooks))
}

/// Whether `OJS_PUSH_ALLOW_PRIVATE` is on.
pub fn allow_private_from_env() -> bool {
    matches!(
        std::env::var("OJS_PUSH_ALLOW_PRIVATE").as_deref(),
        Ok("on" | "true" | "1")
    )
}

/// The HTTP client of push deliveries: no redirect followed (an endpoint answers for
/// itself), no proxy (a proxy would resolve names itself), and every host name resolved
/// through the address guard, which keeps only allowed addresses. An IP literal never
/// reaches the resolver: a delivery checks its URL first ([`deliver`]).
fn http_client(allow_private: bool) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .dns_resolver(guard::resolver(allow_private))
        .user_agent("ojs-serverless-push/1")
        .build()
        .map_err(|e| e.to_string())
}

/// The push dispatcher. Cheap to clone; build one per cold start.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

/// A queue's endpoints, with when they were read.
type Cached = (Instant, Arc<Vec<PushEntry>>);

struct Inner {
    store: Store,
    http: reqwest::Client,
    lambda: aws_sdk_lambda::Client,
    config: PushConfig,
    permits: Semaphore,
    breakers: breaker::Breakers,
    endpoints: Mutex<HashMap<QueueName, Cached>>,
    /// Dispatches started in the background ([`Dispatcher::spawn_changes`]) and not ended.
    in_flight: std::sync::atomic::AtomicUsize,
}

/// Counts one background dispatch as in flight until dropped (a panicking one included).
struct InFlight(Dispatcher);

impl InFlight {
    fn start(of: &Dispatcher) -> Self {
        of.inner
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(of.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .inner
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Dispatcher {
    /// A dispatcher writing through `store`, invoking Lambda functions through `lambda`.
    pub fn new(
        store: Store,
        lambda: aws_sdk_lambda::Client,
        config: PushConfig,
    ) -> Result<Self, String> {
        let http = http_client(config.allow_private)?;
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                http,
                lambda,
                permits: Semaphore::new(config.max_parallel),
                breakers: breaker::Breakers::new(config.breaker_cooldown),
                config,
                endpoints: Mutex::default(),
                in_flight: Default::default(),
            }),
        })
    }

    /// Delivers every job these changes made available on a queue with endpoints, all
    /// at once (bounded by `max_parallel`), and returns when they are settled. Returns
    /// how many were delivered.
    pub async fn dispatch_changes(&self, changes: &[Change]) -> usize {
        let ready: Vec<ReadyJob> = changes.iter().filter_map(Change::ready_job).collect();
        let runs = ready.into_iter().map(|r| self.dispatch(r));
        futures::future::join_all(runs)
            .await
            .into_iter()
            .filter(|d| *d)
            .count()
    }

    /// Dispatches in the background: the in-process stream consumer must not wait for
    /// endpoints (`make dev`, tests).
    pub fn spawn_changes(&self, changes: &[Change]) {
        let ready: Vec<ReadyJob> = changes.iter().filter_map(Change::ready_job).collect();
        for r in ready {
            let counted = InFlight::start(self);
            tokio::spawn(async move {
                counted.0.dispatch(r).await;
                drop(counted);
            });
        }
    }

    /// Background dispatches started and not yet ended (each has claimed and delivered
    /// its job, or found it not to be delivered now): what a caller waits for to know
    /// the changes seen so far have been offered.
    pub fn in_flight(&self) -> usize {
        self.inner
            .in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether an enabled endpoint takes `job` (its queue and type): what makes the
    /// stream plan a push offer of it.
    pub async fn has_endpoint_for(&self, job: &Job) -> Result<bool, StoreError> {
        let endpoints = self.endpoints_of(&job.spec.queue).await?;
        Ok(endpoints
            .iter()
            .any(|e| e.disabled.is_none() && e.endpoint.takes(&job.spec.queue, &job.spec.job_type)))
    }

    /// A planned offer ([`crate::Delivery::Push`]): the job read again (one strongly
    /// consistent GetItem) and, when it is still available, dispatched as the stream would
    /// have. True when a delivery was made; an error when the job could not be read.
    pub async fn offer(&self, job_id: &str) -> Result<bool, StoreError> {
        let Ok(id) = ojs_core::JobId::parse(job_id) else {
            tracing::error!(%job_id, "push offer of a job id that does not parse: dropped");
            return Ok(false);
        };
        match self.inner.store.push_endpoints().ready_job(&id).await? {
            Some(ready) => Ok(self.dispatch(ready).await),
            // Taken, cancelled or gone meanwhile: nothing to offer.
            None => Ok(false),
        }
    }

    /// Claims `ready` for the first endpoint of its queue and type with a free slot and
    /// delivers it; then looks for jobs of the queue left waiting. True when a delivery was
    /// made.
    async fn dispatch(&self, ready: ReadyJob) -> bool {
        let queue = ready.job.spec.queue.clone();
        let delivered = self.dispatch_one(ready).await;
        if delivered {
            self.catch_up(&queue).await;
        }
        delivered
    }

    async fn dispatch_one(&self, ready: ReadyJob) -> bool {
        let queue = ready.job.spec.queue.clone();
        let endpoints = match self.endpoints_of(&queue).await {
            Ok(e) => e,
            Err(e) => {
                // The job stays available to polling workers; the next change retries.
                tracing::warn!(queue = %queue, error = %e, "push endpoints unreadable");
                return false;
            }
        };
        let candidates: Vec<&PushEntry> = endpoints
            .iter()
            .filter(|e| e.disabled.is_none() && e.endpoint.takes(&queue, &ready.job.spec.job_type))
            .collect();
        if candidates.is_empty() {
            return false;
        }
        let Ok(_permit) = self.inner.permits.acquire().await else {
            return false;
        };
        for endpoint in candidates {
            // An open circuit: the job is left to other endpoints and polling workers.
            if !self.inner.breakers.allow(&endpoint.id) {
                continue;
            }
            let claimed = self
                .inner
                .store
                .push_endpoints()
                .claim_ready(&ready, endpoint, time::now())
                .await;
            if !matches!(claimed, Ok(PushClaim::Claimed { .. })) {
                self.inner.breakers.unused(&endpoint.id);
            }
            match claimed {
                Ok(PushClaim::Claimed { job, slot }) => {
                    self.deliver_and_settle(endpoint, *job, slot).await;
                    return true;
                }
                Ok(PushClaim::Full) => continue,
                // Taken by someone else, cancelled, paused or rate limited: a pause or a
                // limit that lifts is picked up by the next delivery ending on the queue.
                Ok(PushClaim::NotNow) => break,
                Err(e) => {
                    tracing::warn!(job_id = %ready.job.id, endpoint = %endpoint.id, error = %e, "push claim failed");
                    return false;
                }
            }
        }
        // Every endpoint full (or the job held back): the next delivery to end on this
        // queue looks for the jobs left available.
        false
    }

    /// After a delivery, the jobs of `queue` still available that the stream offered a
    /// while ago (while its endpoints were full, or to another instance whose endpoints
    /// were): rounds of one Query of the ready index (one GetItem per entry found), until
    /// a round delivers nothing. Always, not only after this instance saw a full endpoint,
    /// since the delivery that frees a slot may end on another instance than the one that
    /// found it full. Jobs made available in the last [`CATCH_UP_AGE`] are left to the
    /// stream's own dispatch. Returns how many were delivered.
    pub async fn catch_up(&self, queue: &QueueName) -> usize {
        let mut delivered = 0;
        for _ in 0..CATCH_UP_ROUNDS {
            let before = time::now() - CATCH_UP_AGE;
            let jobs = match self
                .inner
                .store
                .push_endpoints()
                .ready_jobs(queue, CATCH_UP_PAGE, before)
                .await
            {
                Ok(jobs) => jobs,
                Err(e) => {
                    tracing::warn!(queue = %queue, error = %e, "push catch-up failed");
                    break;
                }
            };
            let runs = jobs.into_iter().map(|r| self.dispatch_one(r));
            let round = futures::future::join_all(runs)
                .await
                .into_iter()
                .filter(|d| *d)
                .count();
            if round == 0 {
                break;
            }
            delivered += round;
        }
        delivered
    }

    /// The catch-up of every queue with registered endpoints (one Query of the
    /// registrations, then [`Dispatcher::catch_up`] per queue), for jobs no delivery's end
    /// picks up (a queue resumed after a pause, slots freed by a dispatcher that died). In
    /// process (`make dev`, tests) it runs every few seconds ([`Dispatcher::catch_up_every`]);
    /// on AWS not yet (the scheduler's 60 s could not wait for a 900 s delivery): there the
    /// next delivery on the queue, or a polling worker, takes such jobs.
    pub async fn catch_up_all(&self) -> usize {
        let endpoints = match self.inner.store.push_endpoints().list().await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "push endpoints unreadable");
                return 0;
            }
        };
        let runs = ojs_store::served_queues(&endpoints)
            .into_iter()
            .map(|q| self.catch_up(q));
        futures::future::join_all(runs).await.into_iter().sum()
    }

    /// Runs [`Dispatcher::catch_up_all`] every `interval` in the background.
    pub fn catch_up_every(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        every(interval, move || {
            let me = me.clone();
            async move {
                me.catch_up_all().await;
            }
        })
    }

    async fn endpoints_of(&self, queue: &QueueName) -> Result<Arc<Vec<PushEntry>>, StoreError> {
        if let Ok(cache) = self.inner.endpoints.lock() {
            if let Some((at, list)) = cache.get(queue) {
                if at.elapsed() < ENDPOINTS_TTL {
                    return Ok(list.clone());
                }
            }
        }
        let list = Arc::new(self.inner.store.push_endpoints().of_queue(queue).await?);
        if let Ok(mut cache) = self.inner.endpoints.lock() {
            cache.insert(queue.clone(), (Instant::now(), list.clone()));
        }
        Ok(list)
    }

    /// One delivery of a claimed job, then its settlement and the slot's release.
    async fn deliver_and_settle(&self, endpoint: &PushEntry, job: Job, slot: SlotHold) {
        let started = Instant::now();
        let (delivery_id, answer) = deliver::deliver(
            &self.inner.http,
            &self.inner.lambda,
            endpoint,
            &job,
            self.inner.config.allow_private,
        )
        .await;
        // The endpoint's health is known with its answer: the breaker learns it before the
        // job is settled, so a delivery that starts once the job shows this outcome finds
        // the circuit as the answer left it (learnt after the settlement, a fifth failure
        // let one more delivery through within the cooldown).
        let delivery_error = match &answer {
            PushAnswer::Failed(f) => {
                f.retryable && f.reported.get("error_class") == Some(&"delivery_error".into())
            }
            PushAnswer::Completed(_) => false,
        };
        if self.inner.breakers.record(&endpoint.id, delivery_error) {
            tracing::warn!(endpoint = %endpoint.id, failures = breaker::TRIP_AFTER, "push circuit opened: no delivery to this endpoint for the cooldown");
        }
        let settled = self.settle(endpoint, &job, &answer).await;
        match settled {
            Ok(outcome) => tracing::info!(
                job_id = %job.id, endpoint = %endpoint.id, %delivery_id, outcome,
                trace_id = ojs_core::trace::of_meta(&job.spec.meta).map(|t| t.trace_id).as_deref().unwrap_or("-"),
                ms = started.elapsed().as_millis() as u64, "push delivery settled"
            ),
            // The attempt ended meanwhile (cancelled, timed out by the sweep, reclaimed):
            // this answer is a late one for an attempt that is no longer current (§8.2).
            Err(
                StoreError::NotHolder { .. }
                | StoreError::Conflict { .. }
                | StoreError::NotFound(_),
            ) => {
                tracing::info!(job_id = %job.id, %delivery_id, "late push answer ignored: the attempt is no longer current")
            }
            Err(e) => {
                tracing::warn!(job_id = %job.id, %delivery_id, error = %e, "push answer not recorded; the lease's end retries the job")
            }
        }
        self.inner
            .store
            .push_endpoints()
            .release_hold(endpoint, &slot)
            .await;
        if let PushAnswer::Failed(f) = &answer {
            if disables(&f.error_type) {
                self.disable(endpoint, &f.message).await;
            }
        }
    }

    /// Records a delivery's answer as the job's ACK or FAIL, fenced to the attempt it
    /// was delivered for: the outcome's name, or why it was not recorded.
    async fn settle(
        &self,
        endpoint: &PushEntry,
        job: &Job,
        answer: &PushAnswer,
    ) -> Result<&'static str, StoreError> {
        let worker = endpoint.worker_id();
        let fence = Fence {
            worker_id: Some(&worker),
            attempt: Some(job.status.attempt),
        };
        let now = time::now();
        let store = &self.inner.store;
        match answer {
            PushAnswer::Completed(result) => store
                .lifecycle()
                .ack_job(
                    &AckRequest {
                        id: job.id,
                        result: result.clone(),
                        worker_id: Some(worker.clone()),
                        attempt: Some(job.status.attempt),
                    },
                    now,
                )
                .await
                .map(|_| "completed"),
            PushAnswer::Failed(failure) => store
                .lifecycle()
                .fail_job(
                    FailRequest {
                        id: &job.id,
                        failure,
                        fence,
                        requeue: false,
                    },
                    now,
                )
                .await
                .map(|_| "failed"),
        }
    }

    /// §7.2.2-3: an endpoint that answered 404, 401 or 403 gets no more deliveries (its
    /// jobs stay available to polling workers) until it is registered again.
    async fn disable(&self, endpoint: &PushEntry, why: &str) {
        tracing::error!(endpoint = %endpoint.id, reason = %why, "push endpoint disabled");
        if let Err(e) = self
            .inner
            .store
            .push_endpoints()
            .disable(endpoint, why, time::now())
            .await
        {
            tracing::warn!(endpoint = %endpoint.id, error = %e, "push endpoint not disabled");
        }
        if let Ok(mut cache) = self.inner.endpoints.lock() {
            for q in &endpoint.endpoint.queues {
                cache.remove(q);
            }
        }
    }
}

/// Whether a failure of this class disables the endpoint (§7.2.2-3): the function or
/// path is missing, or the endpoint refuses the server's credentials or signature.
fn disables(error_type: &str) -> bool {
    matches!(
        error_type,
        "push_http_401" | "push_http_403" | "push_http_404" | "push_invoke_refused"
    )
}

/// The store's hook for the in-process stream consumer: dispatches in the background.
impl ojs_store::ChangeObserver for Dispatcher {
    fn observe(&self, changes: &[Change]) {
        self.spawn_changes(changes);
    }
}

/// A loopback HTTP server for the clients' tests: it answers every request by `answer`
/// (given the request's path: status and `Location`), counts the requests, and never
/// leaves 127.0.0.1.
#[cfg(test)]
pub(crate) mod loopback {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    pub(crate) struct Server {
        pub(crate) base: String,
        hits: Arc<AtomicUsize>,
    }

    impl Server {
        pub(crate) fn start(answer: fn(&str, &str) -> (u16, String)) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
            let base = format!(
                "http://{}",
                listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
            );
            let hits = Arc::new(AtomicUsize::new(0));
            let (counted, me) = (hits.clone(), base.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { return };
                    let mut request = Vec::new();
                    let mut buf = [0_u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let text = String::from_utf8_lossy(&request);
                    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
                    let (status, location) = answer(&me, &path);
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(reply.as_bytes());
                }
            });
            Self { base, hits }
        }

        /// How many requests it has answered.
        pub(crate) fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A push delivery follows no redirect: the endpoint's 302 is its answer.
    #[tokio::test]
    async fn push_deliveries_follow_no_redirect() {
        let server = loopback::Server::start(|base, _| (302, format!("{base}/elsewhere")));
        let client = http_client(true).unwrap_or_else(|e| panic!("{e}"));
        let answer = client.get(format!("{}/", server.base)).send().await;
        assert_eq!(answer.map(|r| r.status().as_u16()).ok(), Some(302));
        assert_eq!(server.hits(), 1);
    }

    /// A name resolving to loopback gets no connection when private targets are not
    /// allowed: the client's resolver is the guarded one (nothing is sent anywhere).
    #[tokio::test]
    async fn push_client_resolves_through_the_guard() {
        let client = http_client(false).unwrap_or_else(|e| panic!("{e}"));
        let refused = client.get("http://localhost:9/").send().await;
        let why = refused
            .map(|_| String::new())
            .unwrap_or_else(|e| deliver::error_chain(&e));
        assert!(why.contains("resolves to no allowed address"), "{why}");
    }
}
