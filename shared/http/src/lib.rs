//! The OJS HTTP binding as axum routers, one per endpoint group (one Lambda each), plus
//! the shared layer every response passes through: request ids, `OJS-Version`,
//! content type, and the single mapping of errors to OJS error bodies.

pub mod auth;
pub mod authorizer;
pub mod conformance;
mod cors;
mod decompress;
mod dialect;
mod entry_views;
mod error;
mod extract;
pub mod key_admin;
mod layer;
mod negotiate;
mod recent;
pub mod registrations;
mod routes;
pub mod scopes;
#[cfg(test)]
mod test_support;
mod views;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use ojs_core::QueueName;
use ojs_store::Store;

pub use auth::{AuthMode, Authenticator};
pub use conformance::{ConformanceException, CONFORMANCE_EXCEPTIONS, CONFORMANCE_LEVEL};
pub use cors::CorsPolicy;
pub use error::ApiError;
pub use layer::{OJS_JSON as JSON_CONTENT_TYPE, OJS_JSON_ALIASED as JSON_CONTENT_TYPE_ALIASED};

/// The endpoint groups, each deployed as its own Lambda function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// PUSH, INFO, CANCEL: `/ojs/v1/jobs...`
    Jobs,
    /// FETCH, ACK, FAIL: `/ojs/v1/workers/...`
    Workers,
    /// `/ojs/v1/queues...`
    Queues,
    /// Manifest, health, events.
    System,
    /// `/ojs/v1/dead-letter...`
    DeadLetter,
    /// `/ojs/v1/cron...`
    Cron,
    /// `/ojs/v1/workflows...`
    Workflows,
    /// `/ojs/v1/schemas...`
    Schemas,
    /// The Cloudq v0.1.0 compatibility binding: `/cloudq/{queue}...`
    Cloudq,
    /// The admin API (`/ojs/v1/admin/...`, ojs-admin-api.md) the dashboard calls.
    Admin,
    /// Push endpoint registrations: `/ojs/v1/push/endpoints...` (served by the queues
    /// function on AWS).
    Push,
    /// Webhook subscriptions and their delivery log: `/ojs/v1/webhooks/...` (served by
    /// the queues function on AWS).
    Webhooks,
}

impl Group {
    /// Every group (the local server serves them all).
    pub const ALL: [Group; 12] = [
        Group::Jobs,
        Group::Workers,
        Group::Queues,
        Group::System,
        Group::DeadLetter,
        Group::Cron,
        Group::Workflows,
        Group::Schemas,
        Group::Cloudq,
        Group::Admin,
        Group::Push,
        Group::Webhooks,
    ];
}

/// Settings of the HTTP layer, read once per cold start.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// When FETCH finds nothing, wait this long and look once more (covers the
    /// milliseconds a just-pushed job may take to appear in a DynamoDB GSI on AWS).
    pub fetch_recheck: Duration,
    /// Whether requests need an API key.
    pub auth: AuthMode,
    /// Browser origins allowed by CORS.
    pub cors_origins: Vec<String>,
    /// Answer every JSON body with [`JSON_CONTENT_TYPE_ALIASED`], not only the Python SDK's
    /// requests (for Python clients that set a User-Agent of their own).
    pub json_alias_for_all: bool,
    /// Whether push endpoints may be loopback or private addresses, over plain HTTP too
    /// (`OJS_PUSH_ALLOW_PRIVATE=on`: local development and tests).
    pub push_allow_private: bool,
}

impl HttpConfig {
    /// Reads `OJS_FETCH_RECHECK_MS` (default 0: DynamoDB Local's indexes are synchronous),
    /// `OJS_AUTH` (`api-key`, the default, or `off`), `OJS_CORS_ALLOWED_ORIGINS`
    /// (comma-separated origins; none by default), `OJS_CONTENT_TYPE_ALIAS` (`always`,
    /// or by default only for the Python SDK's requests) and `OJS_PUSH_ALLOW_PRIVATE`
    /// (`on` allows push endpoints at private addresses; off by default).
    pub fn from_env() -> Self {
        let ms = std::env::var("OJS_FETCH_RECHECK_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let auth = AuthMode::parse(std::env::var("OJS_AUTH").ok().as_deref());
        let cors_origins = std::env::var("OJS_CORS_ALLOWED_ORIGINS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .map(str::to_owned)
            .collect();
        Self {
            fetch_recheck: Duration::from_millis(ms),
            auth,
            cors_origins,
            json_alias_for_all: std::env::var("OJS_CONTENT_TYPE_ALIAS").as_deref() == Ok("always"),
            push_allow_private: ojs_push::allow_private_from_env(),
        }
    }
}

impl Default for HttpConfig {
    /// No recheck, no auth, no CORS: in-process tests.
    fn default() -> Self {
        Self {
            fetch_recheck: Duration::ZERO,
            auth: AuthMode::Off,
            cors_origins: Vec::new(),
            json_alias_for_all: false,
            push_allow_private: false,
        }
    }
}

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    /// The job store.
    pub store: Store,
    /// HTTP settings.
    pub config: Arc<HttpConfig>,
    /// When this instance started (health reports uptime).
    pub started: Instant,
    /// API key checks.
    pub auth: Arc<Authenticator>,
    /// Allowed browser origins.
    pub cors: Arc<CorsPolicy>,
    /// The webhook dispatcher of `POST .../test`, built on first use.
    webhooks: Arc<std::sync::OnceLock<ojs_push::WebhookDispatcher>>,
    /// When this instance last answered a PUSH to each queue (its FETCH waits for them).
    recent_pushes: Arc<recent::RecentPushes>,
}

impl AppState {
    /// State over a store.
    pub fn new(store: Store, config: HttpConfig) -> Self {
        let auth = Arc::new(Authenticator::new(config.auth, store.clone()));
        let cors = Arc::new(CorsPolicy::new(&config.cors_origins, config.auth));
        Self {
            store,
            config: Arc::new(config),
            started: Instant::now(),
            auth,
            cors,
            webhooks: Arc::default(),
            recent_pushes: Arc::default(),
        }
    }

    /// Notes that this instance answered a PUSH to `queue` (see [`recent`]).
    pub(crate) fn note_push(&self, queue: &QueueName) {
        self.recent_pushes
            .note(queue.as_str(), Instant::now(), self.config.fetch_recheck);
    }

    /// Waits until this instance's latest PUSHes to `queues` are `OJS_FETCH_RECHECK_MS`
    /// old, time for their jobs to reach the ready index (see [`recent`]).
    pub(crate) async fn settle_pushes(&self, queues: &[QueueName]) {
        let wait = self
            .recent_pushes
            .wait(queues, Instant::now(), self.config.fetch_recheck);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// The webhook dispatcher (its HTTP client built once per cold start).
    pub(crate) fn webhooks(&self) -> Result<&ojs_push::WebhookDispatcher, ApiError> {
        if let Some(d) = self.webhooks.get() {
            return Ok(d);
        }
        let config = ojs_push::WebhookConfig {
            allow_private: self.config.push_allow_private,
            ..ojs_push::WebhookConfig::from_env()
        };
        let built = ojs_push::WebhookDispatcher::new(self.store.clone(), config).map_err(|e| {
            tracing::error!(error = %e, "webhook dispatcher not built");
            ApiError(ojs_core::OjsError::new(
                ojs_core::ErrorCode::BackendError,
                "webhook delivery is unavailable",
            ))
        })?;
        Ok(self.webhooks.get_or_init(|| built))
    }
}

/// A router serving `groups`, wrapped in the shared OJS layer.
pub fn app(state: AppState, groups: &[Group]) -> Router {
    let mut router = Router::new();
    for group in groups {
        router = router.merge(match group {
            Group::Jobs => routes::jobs::router(),
            Group::Workers => routes::workers::router(),
            Group::Queues => routes::queues::router(),
            Group::System => routes::system::router(),
            Group::DeadLetter => routes::dead_letter::router(),
            Group::Cron => routes::cron::router(),
            Group::Workflows => routes::workflows::router(),
            Group::Schemas => routes::schemas::router(),
            Group::Cloudq => routes::cloudq::router(),
            Group::Admin => routes::admin::router(),
            Group::Push => routes::push::router(),
            Group::Webhooks => routes::webhooks::router(),
        });
    }
    layer::wrap(layer::guard_routes(router).with_state(state.clone()), state)
}
