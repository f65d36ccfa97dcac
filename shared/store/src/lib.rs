//! The DynamoDB adapter, in layers (each may use those before it): `dynamo` (table,
//! items, keys, capacity, errors), `engine` (every transition, and its effects),
//! `derived` (what the change stream computes: events, counters, metrics) and
//! `features` (workflows, cron, dead letter, workers, queues, registries, admin).
//!
//! Every state change is one conditional write on the expected state (and, for
//! read-modify-write paths, the version). A failed condition is a typed
//! [`StoreError::Conflict`] or [`StoreError::NotFound`], never a string.

mod derived;
mod dynamo;
mod engine;
mod features;

// Every module keeps its crate-root name (`crate::claim`, `crate::item`, ...); where it
// lives says its layer: `dynamo` <- `engine` <- `derived`, `features`.
pub use derived::Derived;
use derived::{counts, events, metrics, stream, tenants};
pub use dynamo::payloads::Payloads;
pub use dynamo::schema;
pub use dynamo::sdk::{https_client, sdk_config, sdk_loader};
use dynamo::{batch_read, error, item, keys, payloads, registry, usage};
pub use engine::Engine;
use engine::{
    answer, backlog, batch, claim, concurrency, due, effects, fetch_order, job_item, jobs, queues,
    settle, sweep, timer, transition, unique, unread,
};
use features::{admin, cron, push, rate_limits, schemas, webhooks, workers};

use std::sync::Arc;
use std::time::Duration;

pub use admin::{DeadLetterStats, Maintenance, MAX_LISTED};
pub use answer::{
    answer_bytes, enveloped_bytes, AnswerBound, LAMBDA_RESPONSE_BYTES, LARGEST_JOB_ANSWER,
};
pub use backlog::OLDEST_READY_JOB_AGE;
pub use batch::BatchError;
pub use claim::{FetchOutcome, FetchRequest, LimitState};
pub use counts::QueueStats;
pub use cron::CronEntry;
pub use effects::StepOutcome;
pub use engine::tenant_config::TenantRecord;
pub use error::{Missing, StoreError};
pub use events::{EventPage, EventQuery};
pub use features::admin::Admin;
pub use features::admission::Admission;
pub use features::api_keys::ApiKeyRecord;
pub use features::api_keys::ApiKeys;
pub use features::checkpoints::Checkpoints;
pub use features::cron::Cron;
pub use features::dead_letter::DeadLetter;
pub use features::dead_letter::DeadLetterPage;
pub use features::follow_ups::Lifecycle;
pub use features::idempotency::IdempotencyKeys;
pub use features::idempotency::KeyClaim;
pub use features::push::PushEndpoints;
pub use features::rate_limits::RateLimits;
pub use features::schemas::Schemas;
pub use features::wakeups::Wakeups;
pub use features::webhooks::Webhooks;
pub use features::workers::{Heartbeat, Workers};
pub use features::workflow::{WorkflowRecord, Workflows};
pub use item::MAX_SPEC_BYTES as MAX_STORED_REQUEST_BYTES;
pub use jobs::{AckRequest, FailOutcome, FailRequest, Fence};
pub use keys::{Lane, MAX_QUEUE_SHARDS};
pub use push::{
    served_queues, PushClaim, PushEntry, ReadyJob, SlotHold, MAX_PUSH_ENDPOINTS, PUSH_NUDGE_AFTER,
};
pub use queues::{QueueInfo, QueuePressure, QueueSettings};
pub use rate_limits::{RateLimitState, WindowState};
pub use schemas::{SchemaEntry, SchemaPut};
pub use stream::local::LocalStream;
pub use stream::redrive::{BatchDeliveries, FailureQueue, RedriveReport, StreamRedrive};
pub use stream::{Applied, Change, ChangeObserver};
pub use sweep::SweepReport;
pub use tenants::TenantStats;
pub use timer::{Timer, TimerMessage, TimerTarget};
pub use unique::PushOutcome;
pub use unread::PAYLOAD_UNREADABLE;
pub use usage::{measured, Usage, UsageSnapshot};
pub use webhooks::{
    DeadDelivery, DeliveryAttempt, PendingDelivery, WebhookEntry, LOG_RETENTION_SECS,
    MAX_KEPT_BODY, MAX_LOG_PAGE, MAX_SUBSCRIPTIONS,
};
pub use workers::{Beat, Directive, WorkerInfo, WorkerState};

/// Default of [`StoreConfig::sweep_budget`], in milliseconds.
const DEFAULT_SWEEP_BUDGET_MS: u64 = 40_000;

/// Default of [`StoreConfig::fetch_budget`], in milliseconds.
const DEFAULT_FETCH_BUDGET_MS: u64 = 5_000;

/// Default of [`StoreConfig::queue_settings_ttl`], in milliseconds.
const DEFAULT_QUEUE_SETTINGS_TTL_MS: u64 = 1_000;

/// Default of [`StoreConfig::counter_heal_quiet`], in seconds.
const DEFAULT_COUNTER_HEAL_QUIET_SECS: u64 = 600;

/// Default of [`StoreConfig::quiet_due_memory`], in milliseconds.
const DEFAULT_QUIET_DUE_MS: u64 = 100;

/// Store settings, read once per cold start.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// DynamoDB table name.
    pub table: String,
    /// How long terminal jobs are kept before DynamoDB's TTL deletes them.
    pub retention: Duration,
    /// Whether lifecycle events are recorded (by the change stream consumer, a page per
    /// queue per stream batch).
    pub events: bool,
    /// How long events are kept.
    pub event_retention: Duration,
    /// The CloudWatch namespace of the Embedded Metric Format lines printed for
    /// lifecycle events; none when metrics are off.
    pub metrics_namespace: Option<String>,
    /// How many partitions each queue's ready and due entries are spread over (1 to
    /// [`MAX_QUEUE_SHARDS`]). One keeps strict priority and FIFO order per queue; more
    /// lift the per-queue write ceiling of one partition (docs/performance.md, "Scale on
    /// paper") at the price of order being strict only within a shard. It may grow on a
    /// live table, never shrink: entries in shards past a smaller count would be stranded.
    pub queue_shards: u16,
    /// How long one instance trusts what FETCH obeys once read: a queue's pause flag and
    /// rate limit, whether a worker takes new jobs (0 reads them on every FETCH). A change
    /// made through this instance applies at once; one made through another instance
    /// within this time.
    pub queue_settings_ttl: Duration,
    /// How long one instance's FETCH trusts its last due query of a queue shard that
    /// found nothing due, and skips the next (0 queries on every FETCH). What comes due
    /// meanwhile (a scheduled time, a retry's backoff, an expired lease) waits at most
    /// this long more for a FETCH of this instance; the timer promotes scheduled jobs and
    /// retries at the second regardless.
    pub quiet_due_memory: Duration,
    /// How long one sweep may run before it leaves the remaining queues to the next
    /// (the scheduler function's timeout is 60 s).
    pub sweep_budget: Duration,
    /// How long one FETCH may go on starting claim attempts (it always makes its first).
    /// Past it, the FETCH answers with what it claimed: 32 workers racing for one queue,
    /// or a slow table, must not hold a FETCH past API Gateway's 29 s, which would strand
    /// the jobs it claimed until their leases end.
    pub fetch_budget: Duration,
    /// How many bytes of jobs one FETCH answers at most (Lambda's 6 MB response limit,
    /// less headroom): past it, fewer jobs than asked for.
    pub fetch_answer: AnswerBound,
    /// Whether PUSH to a paused queue is refused (`queue_paused`, 422), as the HTTP
    /// binding's §11.3 says, instead of stored and held until the queue resumes, as
    /// ojs-queue-config.md and the conformance suite (L4-PAUSE-001) expect. Off by default.
    pub reject_paused_pushes: bool,
    /// How long a queue shard's counters must have stood still before the sweep counts
    /// the shard from the indexes and repairs them ([`crate::Derived::heal_counters`]). The
    /// indexes show a job's move at once, its counter `ADD` comes when the stream is
    /// applied: a repair made while the stream lags behind the shard's last moves counts
    /// them twice. Ten minutes by default, far past the stream's second of lag on AWS
    /// (a lag that long is an incident its IteratorAge alarm reports).
    pub counter_heal_quiet: Duration,
}

impl StoreConfig {
    /// Reads `OJS_TABLE` (default `ojs`), `OJS_RETENTION_DAYS` (default 7),
    /// `OJS_EVENTS` (`on`/`off`, default on), `OJS_EVENT_RETENTION_HOURS` (default 24),
    /// `OJS_METRICS` (`emf` prints CloudWatch EMF lines; default off) with
    /// `OJS_METRICS_NAMESPACE` (default `OpenJobSpec`), `OJS_QUEUE_SHARDS` (default 1,
    /// at most [`MAX_QUEUE_SHARDS`]), `OJS_QUEUE_SETTINGS_TTL_MS` (default 1000),
    /// `OJS_QUIET_DUE_MS` (default 100), `OJS_COUNTER_HEAL_QUIET_SECS` (default 600),
    /// `OJS_PAUSED_QUEUE_PUSH`
    /// (`accept`, the default, or `reject`), `OJS_SWEEP_BUDGET_MS` (default 40000) and
    /// `OJS_FETCH_BUDGET_MS` (default 5000).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let number = |k: &str, default: u64| var(k).and_then(|v| v.parse().ok()).unwrap_or(default);
        let millis = |k: &str, default: u64| Duration::from_millis(number(k, default));
        let secs = |k: &str, default: u64| Duration::from_secs(number(k, default));
        Self {
            table: var("OJS_TABLE").unwrap_or_else(|| "ojs".to_owned()),
            retention: Duration::from_secs(number("OJS_RETENTION_DAYS", 7) * 86_400),
            events: !matches!(var("OJS_EVENTS").as_deref(), Some("off" | "false" | "0")),
            event_retention: Duration::from_secs(number("OJS_EVENT_RETENTION_HOURS", 24) * 3_600),
            metrics_namespace: (var("OJS_METRICS").as_deref() == Some("emf"))
                .then(|| var("OJS_METRICS_NAMESPACE").unwrap_or_else(|| "OpenJobSpec".into())),
            queue_shards: var("OJS_QUEUE_SHARDS")
                .and_then(|v| v.parse::<u16>().ok())
                .unwrap_or(1)
                .clamp(1, MAX_QUEUE_SHARDS),
            queue_settings_ttl: millis("OJS_QUEUE_SETTINGS_TTL_MS", DEFAULT_QUEUE_SETTINGS_TTL_MS),
            quiet_due_memory: millis("OJS_QUIET_DUE_MS", DEFAULT_QUIET_DUE_MS),
            reject_paused_pushes: var("OJS_PAUSED_QUEUE_PUSH").as_deref() == Some("reject"),
            counter_heal_quiet: secs(
                "OJS_COUNTER_HEAL_QUIET_SECS",
                DEFAULT_COUNTER_HEAL_QUIET_SECS,
            ),
            sweep_budget: millis("OJS_SWEEP_BUDGET_MS", DEFAULT_SWEEP_BUDGET_MS),
            fetch_budget: millis("OJS_FETCH_BUDGET_MS", DEFAULT_FETCH_BUDGET_MS),
            fetch_answer: AnswerBound::default(),
        }
    }

    /// Defaults for a table name (tests), but for counters repaired at the first sweep
    /// that finds their shard still (a test's process consumes its stream itself and
    /// catches up before the count).
    pub fn for_table(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            retention: Duration::from_secs(7 * 86_400),
            events: true,
            event_retention: Duration::from_secs(86_400),
            metrics_namespace: None,
            queue_shards: 1,
            queue_settings_ttl: Duration::from_millis(DEFAULT_QUEUE_SETTINGS_TTL_MS),
            quiet_due_memory: Duration::from_millis(DEFAULT_QUIET_DUE_MS),
            reject_paused_pushes: false,
            counter_heal_quiet: Duration::ZERO,
            sweep_budget: Duration::from_millis(DEFAULT_SWEEP_BUDGET_MS),
            fetch_budget: Duration::from_millis(DEFAULT_FETCH_BUDGET_MS),
            fetch_answer: AnswerBound::default(),
        }
    }
}

/// The job store: the façade the HTTP layer and the functions hold. It owns the engine
/// ([`Engine`]), which owns the table; the change stream's side and the features are
/// methods over it. Cheap to clone; build one per cold start and share it.
#[derive(Clone)]
pub struct Store {
    /// The change stream's side, which owns the engine (table, settings, per-instance
    /// memories); the features here use both, neither uses anything here.
    derived: Derived,
    /// Whether workers take new jobs, as this instance lately learnt it (FETCH obeys it).
    admissions: Arc<workers::Admissions>,
}

impl Store {
    /// A store over `client` with `config`.
    pub fn new(client: aws_sdk_dynamodb::Client, config: StoreConfig) -> Self {
        Self {
            derived: Derived::new(Engine::new(client, config)),
            admissions: Arc::default(),
        }
    }

    /// The engine this store holds.
    pub fn engine(&self) -> &Engine {
        &self.derived.engine
    }

    /// The change stream's side this store holds.
    pub fn derived(&self) -> &Derived {
        &self.derived
    }

    /// A store configured from the standard AWS environment (`AWS_ENDPOINT_URL*`,
    /// region, credentials), [`StoreConfig::from_env`] and `OJS_PAYLOAD_BUCKET` (the S3
    /// bucket of large requests; none by default).
    pub async fn from_env() -> Self {
        let sdk = sdk_config().await;
        let mut store = Self::new(client_for(&sdk), StoreConfig::from_env());
        if let Some(bucket) = std::env::var("OJS_PAYLOAD_BUCKET")
            .ok()
            .filter(|b| !b.is_empty())
        {
            store = store.with_payloads(Payloads::new(Payloads::client_from_env(&sdk), bucket));
        }
        match std::env::var("OJS_TIMER_QUEUE_URL")
            .ok()
            .filter(|u| !u.is_empty())
        {
            Some(url) => store.with_timer(Timer::new(aws_sdk_sqs::Client::new(&sdk), url)),
            None => store,
        }
    }

    /// Keeps requests too large for their item in this bucket.
    pub fn with_payloads(mut self, payloads: Payloads) -> Self {
        self.derived.engine.payloads = Some(payloads);
        self
    }

    /// Arms second-accurate timers through this SQS queue.
    pub fn with_timer(mut self, timer: Timer) -> Self {
        self.derived.engine.timer = Some(timer);
        self
    }

    /// The same store with its configuration changed by `change`, e.g.
    /// `store.with_config(|c| c.queue_shards = 4)` (tests: a store like another but for a
    /// setting); [`StoreConfig::queue_shards`] is then clamped to 1..=[`MAX_QUEUE_SHARDS`].
    pub fn with_config(mut self, change: impl FnOnce(&mut StoreConfig)) -> Self {
        self.derived.engine.reconfigured(|c| {
            change(c);
            c.queue_shards = c.queue_shards.clamp(1, MAX_QUEUE_SHARDS);
        });
        self
    }

    /// The same store consuming its table's change stream in this process
    /// ([`LocalStream`]): `make dev` and tests, where no stream function runs.
    /// `from_start`: apply what the stream already holds (a table just created);
    /// `background`: read the stream at this interval too, not only on [`crate::Derived::catch_up`].
    pub async fn with_local_stream(
        mut self,
        client: aws_sdk_dynamodbstreams::Client,
        from_start: bool,
        background: Option<Duration>,
    ) -> Result<Self, StoreError> {
        self.derived.stream =
            Some(LocalStream::attach(&self.derived, client, from_start, background).await?);
        Ok(self)
    }

    /// The same store reporting each batch its in-process stream consumer gives up on to
    /// `queue`, for a [`StreamRedrive`] to apply, as the stream function's event source
    /// mapping does on AWS (set before [`Store::with_local_stream`], which takes a copy).
    pub fn with_stream_failures(mut self, queue: FailureQueue) -> Self {
        self.derived.failures = Some(queue);
        self
    }

    /// The same store handing every batch its in-process stream consumer applies to
    /// `observer` too, after the observers added before (add them before
    /// [`Store::with_local_stream`], which takes a copy).
    pub fn with_change_observer(mut self, observer: Arc<dyn ChangeObserver>) -> Self {
        self.derived.observers.push(observer);
        self
    }

    /// [`Derived::catch_up`]: with an in-process stream consumer, applies every change
    /// written so far.
    pub async fn catch_up(&self) {
        self.derived.catch_up().await
    }

    /// The table name.
    pub fn table(&self) -> &str {
        self.derived.engine.table()
    }

    /// DynamoDB calls and capacity consumed by this store so far.
    pub fn usage(&self) -> UsageSnapshot {
        self.derived.engine.usage()
    }

    /// A job's lifecycle calls that can finish it (PUSH, CANCEL, ACK, FAIL, settling,
    /// INFO, promotion), each following up what it finishes.
    pub fn lifecycle(&self) -> Lifecycle<'_> {
        Lifecycle::new(self.engine())
    }

    /// What timer messages wake (the timer function's work, and the local consumer).
    pub fn wakeups(&self) -> Wakeups<'_> {
        Wakeups::new(self.engine())
    }

    /// The same store arming timers through SQS queue `name` on the endpoint of `sdk`,
    /// created if missing (the local server and tests; on AWS the template makes it).
    pub async fn with_local_timer_queue(
        self,
        sdk: &aws_config::SdkConfig,
        name: &str,
    ) -> Result<Self, StoreError> {
        let timer = Timer::create_local(sdk, name).await?;
        Ok(self.with_timer(timer))
    }

    /// API keys: their records, scopes, tenants and revocation.
    pub fn api_keys(&self) -> ApiKeys<'_> {
        ApiKeys::new(self.engine())
    }

    /// Checkpoints of running jobs (ojs-durable-execution.md).
    pub fn checkpoints(&self) -> Checkpoints<'_> {
        Checkpoints::new(self.engine())
    }

    /// The dead letter queue: listing, retry and deletion of its entries.
    pub fn dead_letter(&self) -> DeadLetter<'_> {
        DeadLetter::new(self.engine())
    }

    /// Idempotency keys of PUSH and batch PUSH.
    pub fn idempotency_keys(&self) -> IdempotencyKeys<'_> {
        IdempotencyKeys::new(self.engine())
    }

    /// What a rate limit key's limiter items hold (ojs-rate-limiting.md §10.1).
    pub fn rate_limits(&self) -> RateLimits<'_> {
        RateLimits::new(self.engine())
    }

    /// Schema registrations (ojs-http-binding.md §15).
    pub fn schemas(&self) -> Schemas<'_> {
        Schemas::new(self.engine())
    }

    /// Webhook subscriptions, their pending retries and their delivery log.
    pub fn webhooks(&self) -> Webhooks<'_> {
        Webhooks::new(self.engine())
    }

    /// Admission of enqueues: queue depth bounds and tenant quotas, judged on the counters.
    pub fn admission(&self) -> Admission<'_> {
        Admission::new(self.derived())
    }

    /// Workflows: creation, views, cancellation and the sweep's check.
    pub fn workflows(&self) -> Workflows<'_> {
        Workflows::new(self.engine())
    }

    /// Cron registrations and the firing of their due occurrences.
    pub fn cron(&self) -> Cron<'_> {
        Cron::new(self.engine())
    }

    /// Push endpoints: their registry, claims of jobs for delivery and the nudges of waiting jobs.
    pub fn push_endpoints(&self) -> PushEndpoints<'_> {
        PushEndpoints::new(self.engine())
    }

    /// The admin API's queries and actions: job listings, retry and delete, dead letter stats, maintenance mode.
    pub fn admin(&self) -> Admin<'_> {
        Admin::new(self.derived())
    }

    /// Workers: FETCH, heartbeats, progress, directives and the worker registry, with what this instance knows of which workers take jobs.
    pub fn workers(&self) -> Workers<'_> {
        Workers::new(self.engine(), &self.admissions)
    }

    /// Creates the table (with TTL and its change stream) unless it exists, and waits
    /// until it is active; a table made before the stream was part of the schema gets
    /// the stream. True when this call created the table.
    pub async fn ensure_table(&self) -> Result<bool, StoreError> {
        self.derived.engine.table.ensure().await
    }

    /// Deletes the table (tests clean up after themselves).
    pub async fn delete_table(&self) -> Result<(), StoreError> {
        self.derived.engine.table.delete().await
    }

    /// Checks that the table answers a read (one eventually consistent GetItem).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.derived.engine.table.ping().await
    }
}

/// A DynamoDB client with retry and timeout settings suited to a request path: a few
/// quick retries with backoff for throttling, and bounded attempt/operation timeouts so
/// a stuck connection turns into a 503 instead of a Lambda timeout.
pub fn client_for(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
    client_with_timeouts(
        sdk,
        REQUEST_PATH_ATTEMPTS,
        Duration::from_secs(3),
        Duration::from_secs(8),
    )
}

/// Attempts [`client_for`] makes of one DynamoDB call.
pub const REQUEST_PATH_ATTEMPTS: u32 = 3;

/// [`client_for`] with other attempts and timeouts: an attempt's, and the whole call's
/// with its retries (tests on DynamoDB Local, whose multi-megabyte transactions can take
/// seconds where DynamoDB takes milliseconds).
pub fn client_with_timeouts(
    sdk: &aws_config::SdkConfig,
    attempts: u32,
    attempt: Duration,
    operation: Duration,
) -> aws_sdk_dynamodb::Client {
    let retry = aws_config::retry::RetryConfig::standard()
        .with_max_attempts(attempts)
        .with_initial_backoff(Duration::from_millis(25))
        .with_max_backoff(Duration::from_millis(500));
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(2))
        .operation_attempt_timeout(attempt)
        .operation_timeout(operation)
        .build();
    let conf = aws_sdk_dynamodb::config::Builder::from(sdk)
        .retry_config(retry)
        .timeout_config(timeouts)
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// A DynamoDB Streams client for [`Store::with_local_stream`] at `endpoint` (DynamoDB
/// Local serves the Streams API on its own port).
pub fn streams_client_for(
    sdk: &aws_config::SdkConfig,
    endpoint: &str,
) -> aws_sdk_dynamodbstreams::Client {
    let conf = aws_sdk_dynamodbstreams::config::Builder::from(sdk)
        .endpoint_url(endpoint)
        .build();
    aws_sdk_dynamodbstreams::Client::from_conf(conf)
}

/// A DynamoDB Streams client from the standard AWS environment: at
/// `AWS_ENDPOINT_URL_DYNAMODB_STREAMS` if set, else at the DynamoDB endpoint override
/// (DynamoDB Local serves both APIs on one port), else AWS's own endpoint.
pub fn streams_client_from_env(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodbstreams::Client {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS") {
        Some(_) => aws_sdk_dynamodbstreams::Client::new(sdk),
        None => match var("AWS_ENDPOINT_URL_DYNAMODB") {
            Some(endpoint) => streams_client_for(sdk, &endpoint),
            None => aws_sdk_dynamodbstreams::Client::new(sdk),
        },
    }
}
