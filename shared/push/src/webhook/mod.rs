//! Webhook delivery (ojs-webhooks.md §5.3, §7, §8): the lifecycle events a batch of the
//! change stream implies are POSTed, signed, to every active subscription whose filter
//! takes them. The first attempt is planned by whoever applies the batch and made by the
//! delivery function from the delivery queue (`crate::deliveries`; in process, a task); a
//! failed attempt that may be retried is recorded as a pending retry in the table
//! (`WHDUE`, due at the §7.2 schedule's next delay) and made by [`WebhookDispatcher::redrive`],
//! which the scheduler function runs every minute and `make dev` every second, so retries
//! outlive the process that failed. Every attempt is logged (`WHLOG#<subscription>`).
//!
//! Calls per delivered event per subscription: the batch's subscription listing (one
//! eventually consistent Query, shared by the whole batch, made only when the batch
//! implies events) and one log PutItem: 1 write unit when the first attempt succeeds. A retry adds its pending item (1 write), the claim (1 write) and the
//! delete (1 write) besides its own log line.
//!
//! Outbound calls go through the push crate's address guard (loopback, private,
//! link-local and reserved addresses refused unless `OJS_PUSH_ALLOW_PRIVATE=on`), also
//! for each redirect followed (at most 3, §7.1).

mod redrive;
mod send;

use std::time::Duration;

use ojs_core::event::Event;
use ojs_core::time;
use ojs_core::webhook::{delay_before, Outcome, RETRY_DELAYS, TEST_EVENT};
use ojs_store::{Change, DeliveryAttempt, PendingDelivery, Store, WebhookEntry};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::PlannedWebhook;

pub use send::AttemptResult;

/// Timeout of a §6.6 test delivery, answered within the API's request (API Gateway's
/// 30 s, the API functions' 10 s).
const TEST_TIMEOUT: Duration = Duration::from_secs(8);
/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// Settings of webhook delivery, read once per cold start.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Whether subscriptions may point at loopback or private addresses
    /// (`OJS_PUSH_ALLOW_PRIVATE=on`: development and tests).
    pub allow_private: bool,
    /// One attempt's timeout (`OJS_WEBHOOK_TIMEOUT_MS`, default 30000, §7.3).
    pub timeout: Duration,
    /// The delay before each retry (`OJS_WEBHOOK_RETRY_DELAYS_MS`, comma-separated;
    /// default the §7.2 schedule: 30 s, 2 min, 10 min, 1 h, 4 h, 12 h, 24 h).
    pub retry_delays: Vec<Duration>,
    /// Most attempts in flight at once in this process (64).
    pub max_parallel: usize,
}

impl WebhookConfig {
    /// Reads `OJS_PUSH_ALLOW_PRIVATE`, `OJS_WEBHOOK_TIMEOUT_MS` and
    /// `OJS_WEBHOOK_RETRY_DELAYS_MS`.
    pub fn from_env() -> Self {
        let timeout = std::env::var("OJS_WEBHOOK_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| (1_000..=60_000).contains(ms))
            .map_or(Duration::from_secs(30), Duration::from_millis);
        let retry_delays = std::env::var("OJS_WEBHOOK_RETRY_DELAYS_MS")
            .ok()
            .and_then(|v| {
                v.split(',')
                    .map(|d| d.trim().parse::<u64>().ok().map(Duration::from_millis))
                    .collect::<Option<Vec<_>>>()
            })
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| RETRY_DELAYS.to_vec());
        Self {
            allow_private: crate::allow_private_from_env(),
            timeout,
            retry_delays,
            max_parallel: 64,
        }
    }

    /// Settings for tests: private targets allowed or not, a 5 s timeout, and `delays`.
    pub fn local(allow_private: bool, delays: Vec<Duration>) -> Self {
        Self {
            allow_private,
            timeout: Duration::from_secs(5),
            retry_delays: delays,
            max_parallel: 32,
        }
    }
}

/// One event for one subscription, as sent on every attempt.
struct Delivery<'a> {
    id: String,
    event_type: &'a str,
    event_id: String,
    body: &'a str,
}

/// The webhook dispatcher. Cheap to clone; build one per cold start.
#[derive(Clone)]
pub struct WebhookDispatcher {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    store: Store,
    http: reqwest::Client,
    config: WebhookConfig,
    permits: Semaphore,
}

impl WebhookDispatcher {
    /// A dispatcher writing its log and retries through `store`.
    pub fn new(store: Store, config: WebhookConfig) -> Result<Self, String> {
        let http = send::http_client(config.allow_private)?;
        Ok(Self {
            inner: std::sync::Arc::new(Inner {
                store,
                http,
                permits: Semaphore::new(config.max_parallel),
                config,
            }),
        })
    }

    /// Delivers the events these changes imply to their subscriptions and returns when
    /// every first attempt ended (failed ones recorded for retry). Returns how many
    /// deliveries were attempted. Never fails: delivery is a side channel (§4.3).
    pub async fn deliver_changes(&self, changes: &[Change]) -> usize {
        let events: Vec<Event> = changes.iter().flat_map(|c| c.events(time::now())).collect();
        let matched = match self.matches(&events).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, events = events.len(), "webhook subscriptions unreadable: these events are not delivered");
                return 0;
            }
        };
        let n = matched.len();
        futures::future::join_all(
            matched
                .iter()
                .map(|(sub, event)| self.first_attempt(sub, event)),
        )
        .await;
        n
    }

    /// The (subscription, event) pairs to deliver for `events`: every active
    /// subscription whose filter takes the event (one eventually consistent Query of the
    /// subscriptions, made only when there are events: half the read units of a strong
    /// read, once per batch; a subscription created or changed a moment ago may miss this
    /// batch's events).
    pub async fn matches<'e>(
        &self,
        events: &'e [Event],
    ) -> Result<Vec<(std::sync::Arc<WebhookEntry>, &'e Event)>, ojs_store::StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let subs: Vec<std::sync::Arc<WebhookEntry>> = self
            .inner
            .store
            .webhooks()
            .list(false)
            .await?
            .into_iter()
            .map(std::sync::Arc::new)
            .collect();
        if let Some(namespace) = self.inner.store.engine().metrics_namespace() {
            let active = subs.iter().filter(|s| s.subscription.active).count();
            let doc = crate::metrics::subscriptions_document(
                namespace,
                active,
                time::now().timestamp_millis(),
            );
            println!("{doc}");
        }
        let mut out = Vec::new();
        for event in events {
            let kind = event.kind.as_str();
            let job_type = event.body["data"]["job_type"].as_str();
            for sub in subs.iter().filter(|s| {
                s.receives_tenant(event.tenant.as_ref())
                    && s.subscription.takes(kind, Some(&event.queue), job_type)
            }) {
                out.push((std::sync::Arc::clone(sub), event));
            }
        }
        Ok(out)
    }

    /// The first attempt of a planned delivery at its subscription (one GetItem), if
    /// that still exists and is active.
    pub async fn first_attempt_of(
        &self,
        planned: &PlannedWebhook,
    ) -> Result<(), ojs_store::StoreError> {
        let webhooks = self.inner.store.webhooks();
        match webhooks.get(&planned.subscription_id).await? {
            Some(sub) if sub.subscription.active => {
                let delivery = Delivery {
                    id: planned.delivery_id.clone(),
                    event_type: &planned.event_type,
                    event_id: planned.event_id.clone(),
                    body: &planned.body,
                };
                self.attempt(&sub, &delivery, 1).await;
            }
            _ => {
                tracing::info!(delivery_id = %planned.delivery_id, "webhook delivery dropped: its subscription is gone or inactive")
            }
        }
        Ok(())
    }

    /// [`WebhookDispatcher::deliver_changes`] in the background (the in-process stream
    /// consumer must not wait for endpoints).
    pub fn spawn_changes(&self, changes: &[Change]) {
        let me = self.clone();
        let changes = changes.to_vec();
        tokio::spawn(async move { me.deliver_changes(&changes).await });
    }

    async fn first_attempt(&self, sub: &WebhookEntry, event: &Event) {
        let body = event.body.to_string();
        let delivery = Delivery {
            id: format!("del_{}", uuid::Uuid::now_v7()),
            event_type: event.kind.as_str(),
            event_id: event.id.clone(),
            body: &body,
        };
        self.attempt(sub, &delivery, 1).await;
    }

    /// One attempt, logged; a retryable failure with attempts left is recorded as a
    /// pending retry.
    async fn attempt(&self, sub: &WebhookEntry, d: &Delivery<'_>, attempt: u32) -> Outcome {
        let timeout = sub.subscription.attempt_timeout(self.inner.config.timeout);
        let sent = self.send(sub, d, timeout).await;
        let mut outcome = Outcome::of(sent.status);
        let store = &self.inner.store;
        let now = time::now();
        let mut next_at = None;
        if outcome == Outcome::Retry {
            match delay_before(&self.inner.config.retry_delays, attempt + 1) {
                Some(delay) => {
                    let delay = sent
                        .retry_after
                        .map_or(delay, |ra| ra.clamp(delay, MAX_RETRY_AFTER.max(delay)));
                    let due = now + chrono::TimeDelta::from_std(delay).unwrap_or_default();
                    let pending = PendingDelivery {
                        delivery_id: d.id.clone(),
                        subscription_id: sub.id.clone(),
                        event_type: d.event_type.to_owned(),
                        body: d.body.to_owned(),
                        attempt: attempt + 1,
                        due_us: due.timestamp_micros(),
                    };
                    if let Err(e) = store.webhooks().schedule_retry(&pending).await {
                        tracing::warn!(delivery_id = %d.id, error = %e, "webhook retry not recorded: the delivery is dropped");
                        outcome = Outcome::Dead;
                    } else {
                        next_at = Some(time::format(&due));
                    }
                }
                None => outcome = Outcome::Dead,
            }
        }
        let (label, event) = match outcome {
            Outcome::Delivered => ("delivered", "webhook.delivered"),
            Outcome::Retry => ("retrying", "webhook.failed"),
            Outcome::Dead => ("dead", "webhook.dead"),
        };
        // `event` names the ojs-webhooks.md §11.1 event this attempt is.
        tracing::info!(
            event, subscription = %sub.id, delivery_id = %d.id, event_type = d.event_type,
            attempt, status = sent.status, ms = sent.duration_ms, outcome = label, "webhook attempt"
        );
        if let Some(namespace) = store.engine().metrics_namespace() {
            let measured = crate::metrics::Attempt {
                event_type: d.event_type,
                subscription_id: &sub.id,
                attempt,
                outcome,
                duration_ms: sent.duration_ms,
            };
            let doc =
                crate::metrics::attempt_document(namespace, &measured, now.timestamp_millis());
            println!("{doc}");
        }
        let logged = DeliveryAttempt {
            delivery_id: d.id.clone(),
            subscription_id: sub.id.clone(),
            event_type: d.event_type.to_owned(),
            event_id: d.event_id.clone(),
            attempt,
            status_code: sent.status,
            duration_ms: sent.duration_ms,
            error: sent.error.clone(),
            outcome: label,
            next_attempt_at: next_at,
            // Kept with a dead delivery for its manual retry.
            body: (outcome == Outcome::Dead).then(|| d.body.to_owned()),
        };
        if let Err(e) = store.webhooks().log_attempt(&logged, now).await {
            tracing::warn!(delivery_id = %d.id, error = %e, "webhook attempt not logged");
        }
        outcome
    }

    /// §6.6: a synthetic `webhook.test` event sent once to `sub` (not retried, logged).
    pub async fn test(&self, sub: &WebhookEntry) -> AttemptResult {
        let now = time::now();
        let event_id = format!("evt_{}", uuid::Uuid::now_v7());
        let body = json!({
            "specversion": "1.0",
            "id": event_id,
            "type": TEST_EVENT,
            "source": "ojs://ojs-serverless/webhooks",
            "time": time::format(&now),
            "subject": sub.id,
            "data": {"subscription_id": sub.id, "message": "ping"},
        })
        .to_string();
        let d = Delivery {
            id: format!("del_{}", uuid::Uuid::now_v7()),
            event_type: TEST_EVENT,
            event_id,
            body: &body,
        };
        let sent = self
            .send(
                sub,
                &d,
                TEST_TIMEOUT.min(sub.subscription.attempt_timeout(self.inner.config.timeout)),
            )
            .await;
        let outcome = match Outcome::of(sent.status) {
            Outcome::Delivered => "delivered",
            _ => "dead",
        };
        let logged = DeliveryAttempt {
            delivery_id: d.id.clone(),
            subscription_id: sub.id.clone(),
            event_type: TEST_EVENT.to_owned(),
            event_id: d.event_id.clone(),
            attempt: 1,
            status_code: sent.status,
            duration_ms: sent.duration_ms,
            error: sent.error.clone(),
            outcome,
            next_attempt_at: None,
            body: None,
        };
        if let Err(e) = self.inner.store.webhooks().log_attempt(&logged, now).await {
            tracing::warn!(error = %e, "webhook test attempt not logged");
        }
        sent
    }
}

/// The store's hook for the in-process stream consumer: delivers in the background.
impl ojs_store::ChangeObserver for WebhookDispatcher {
    fn observe(&self, changes: &[Change]) {
        self.spawn_changes(changes);
    }
}
