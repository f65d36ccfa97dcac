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

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ojs_core::event::Event;
use ojs_core::push::{signature, PushTarget};
use ojs_core::time;
use ojs_core::webhook::{delay_before, Outcome, RETRY_DELAYS, TEST_EVENT};
use ojs_store::{Change, DeliveryAttempt, PendingDelivery, Store, WebhookEntry};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

/// Most bytes of an endpoint's answer read (the rest is not read: a delivery's outcome is
/// its status).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Most pending retries one redrive round claims.
const REDRIVE_PAGE: usize = 25;
/// Most redrive rounds per call (a backlog drains over several calls).
const REDRIVE_ROUNDS: usize = 8;
/// No redrive round starts after this long, so a call ends within it plus one attempt's
/// timeout (the scheduler function runs the sweep beside it within 60 s).
const REDRIVE_BUDGET: Duration = Duration::from_secs(15);
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

/// What one attempt came to.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    /// The endpoint's status, if it answered.
    pub status: Option<u16>,
    /// How long it took.
    pub duration_ms: u64,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// The start of the answer (at most [`MAX_RESPONSE_BYTES`]), lossily as text.
    pub body: String,
    /// A 429's `Retry-After`, in seconds.
    retry_after: Option<Duration>,
}

/// One event for one subscription, as sent on every attempt.
struct Delivery<'a> {
    id: String,
    event_type: &'a str,
    event_id: String,
    body: &'a str,
}

/// Most redirects one attempt follows (§7.1).
const MAX_REDIRECTS: usize = 3;

/// Why a redirect to `next` is not followed, after `followed` redirects already were
/// (`None`: it is followed). It is followed only to a URL a subscription could name: an
/// IP literal never reaches the guarded resolver, so it is judged here (a host name is
/// judged by the resolver at the redirect's connection).
fn redirect_refusal(followed: usize, next: &url::Url, allow_private: bool) -> Option<String> {
    if followed >= MAX_REDIRECTS {
        return Some(format!("more than {MAX_REDIRECTS} redirects"));
    }
    PushTarget::parse(next.as_str(), allow_private)
        .err()
        .map(|e| {
            format!(
                "redirect refused: {}",
                e.message.replace("endpoint", "location")
            )
        })
}

/// The HTTP client of webhook deliveries: at most [`MAX_REDIRECTS`] redirects, each
/// judged by [`redirect_refusal`]; no proxy (a proxy would resolve names itself); every
/// host name resolved through the address guard, which keeps only allowed addresses.
fn http_client(allow_private: bool) -> Result<reqwest::Client, String> {
    let redirects = reqwest::redirect::Policy::custom(move |attempt| {
        // `previous` holds the URLs requested so far, the first one among them.
        let followed = attempt.previous().len().saturating_sub(1);
        match redirect_refusal(followed, attempt.url(), allow_private) {
            Some(why) => attempt.error(why),
            None => attempt.follow(),
        }
    });
    reqwest::Client::builder()
        .redirect(redirects)
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .dns_resolver(crate::guard::resolver(allow_private))
        .user_agent("OJS-Webhook/1.0 (ojs-serverless)")
        .build()
        .map_err(|e| e.to_string())
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
        let http = http_client(config.allow_private)?;
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
            .list_webhooks(false)
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

    /// The first attempt of a planned delivery ([`crate::Delivery::Webhook`]) at
    /// subscription `subscription_id` (one GetItem), if it still exists and is active.
    pub async fn first_attempt_of(
        &self,
        subscription_id: &str,
        delivery_id: &str,
        event_type: &str,
        event_id: &str,
        body: &str,
    ) -> Result<(), ojs_store::StoreError> {
        match self
            .inner
            .store
            .webhooks()
            .get_webhook(subscription_id)
            .await?
        {
            Some(sub) if sub.subscription.active => {
                let delivery = Delivery {
                    id: delivery_id.to_owned(),
                    event_type,
                    event_id: event_id.to_owned(),
                    body,
                };
                self.attempt(&sub, &delivery, 1).await;
            }
            _ => {
                tracing::info!(%delivery_id, "webhook delivery dropped: its subscription is gone or inactive")
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
                    if let Err(e) = store.webhooks().schedule_webhook_retry(&pending).await {
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
        if let Err(e) = store.webhooks().log_webhook_attempt(&logged, now).await {
            tracing::warn!(delivery_id = %d.id, error = %e, "webhook attempt not logged");
        }
        outcome
    }

    /// The signed POST of one attempt (§5.3, §8.1).
    async fn send(&self, sub: &WebhookEntry, d: &Delivery<'_>, timeout: Duration) -> AttemptResult {
        let _permit = self.inner.permits.acquire().await;
        let started = Instant::now();
        let done = |status, error: Option<String>, body: String, retry_after| AttemptResult {
            status,
            duration_ms: started.elapsed().as_millis() as u64,
            error,
            body,
            retry_after,
        };
        let url = &sub.subscription.url;
        // Rules may have changed since it was created (OJS_PUSH_ALLOW_PRIVATE turned off).
        if let Err(e) = PushTarget::parse(url, self.inner.config.allow_private) {
            return done(None, Some(e.message), String::new(), None);
        }
        let now_secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|t| t.as_secs())
            .unwrap_or_default();
        let timestamp = now_secs.to_string();
        let signed: Vec<String> = sub
            .signing_secrets(i64::try_from(now_secs).unwrap_or(i64::MAX))
            .into_iter()
            .map(|secret| signature(secret.as_bytes(), &timestamp, d.body.as_bytes()))
            .collect();
        let mut request = self.inner.http.post(url);
        // The event's trace (CloudEvents' distributed tracing extension, from the job's
        // meta), as the W3C headers a receiver's tracing reads.
        // Only a traced job's event names one: the others are not parsed again.
        if d.body.contains("\"traceparent\"") {
            let event: Value = serde_json::from_str(d.body).unwrap_or_default();
            for key in ["traceparent", "tracestate"] {
                if let Some(v) = event.get(key).and_then(Value::as_str) {
                    request = request.header(key, v);
                }
            }
        }
        let sent = request
            .timeout(timeout)
            .header("content-type", "application/json")
            .header("x-ojs-event-type", d.event_type)
            .header("x-ojs-delivery-id", &d.id)
            .header("x-ojs-subscription-id", &sub.id)
            .header("x-ojs-timestamp", &timestamp)
            .header("x-ojs-signature", signed.join(","))
            .body(d.body.to_owned())
            .send()
            .await;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => return done(None, Some(transport_error(&e)), String::new(), None),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut answer = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(c)) => {
                    let room = MAX_RESPONSE_BYTES.saturating_sub(answer.len());
                    answer.extend_from_slice(&c[..c.len().min(room)]);
                    // The rest is not read: the status decides the outcome.
                    if answer.len() >= MAX_RESPONSE_BYTES {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return done(
                        Some(status),
                        Some(transport_error(&e)),
                        String::new(),
                        retry_after,
                    )
                }
            }
        }
        let error = (!(200..300).contains(&status)).then(|| format!("HTTP {status}"));
        done(
            Some(status),
            error,
            String::from_utf8_lossy(&answer).into_owned(),
            retry_after,
        )
    }

    /// Makes the retries that are due (rounds of one Query and a claim per retry), all
    /// of a round at once. A retry of a deleted subscription, or of one made inactive, is
    /// dropped (§6.5). Returns how many attempts were made.
    pub async fn redrive(&self) -> usize {
        let store = &self.inner.store;
        let started = Instant::now();
        let mut made = 0;
        for _ in 0..REDRIVE_ROUNDS {
            if started.elapsed() > REDRIVE_BUDGET {
                break;
            }
            let due = match store
                .webhooks()
                .claim_due_webhook_retries(time::now(), REDRIVE_PAGE)
                .await
            {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook retries unreadable");
                    break;
                }
            };
            if due.is_empty() {
                break;
            }
            made += due.len();
            let runs = due.iter().map(|p| self.retry(p));
            futures::future::join_all(runs).await;
        }
        made
    }

    async fn retry(&self, p: &PendingDelivery) {
        let store = &self.inner.store;
        match store.webhooks().get_webhook(&p.subscription_id).await {
            Ok(Some(sub)) if sub.subscription.active => {
                let event_id = serde_json::from_str::<Value>(&p.body)
                    .ok()
                    .and_then(|v| v["id"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                let d = Delivery {
                    id: p.delivery_id.clone(),
                    event_type: &p.event_type,
                    event_id,
                    body: &p.body,
                };
                self.attempt(&sub, &d, p.attempt).await;
            }
            Ok(_) => {
                tracing::info!(delivery_id = %p.delivery_id, "webhook retry cancelled: its subscription is gone or inactive");
            }
            // Left claimed: the next redrive after the lease tries again.
            Err(e) => {
                tracing::warn!(delivery_id = %p.delivery_id, error = %e, "webhook subscription unreadable");
                return;
            }
        }
        if let Err(e) = store.webhooks().finish_webhook_retry(p).await {
            tracing::warn!(delivery_id = %p.delivery_id, error = %e, "webhook retry not removed: it may be attempted again");
        }
    }

    /// Runs [`WebhookDispatcher::redrive`] every `interval` in the background.
    pub fn redrive_every(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        crate::every(interval, move || {
            let me = me.clone();
            async move {
                me.redrive().await;
            }
        })
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
        if let Err(e) = self
            .inner
            .store
            .webhooks()
            .log_webhook_attempt(&logged, now)
            .await
        {
            tracing::warn!(error = %e, "webhook test attempt not logged");
        }
        sent
    }
}

/// A transport failure's message.
fn transport_error(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timeout".into();
    }
    crate::deliver::error_chain(e)
}

/// The store's hook for the in-process stream consumer: delivers in the background.
impl ojs_store::ChangeObserver for WebhookDispatcher {
    fn observe(&self, changes: &[Change]) {
        self.spawn_changes(changes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopback;

    fn url(raw: &str) -> url::Url {
        url::Url::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    /// A redirect is judged like a subscription URL: every spelling of a forbidden
    /// address is refused (the URL reqwest hands the policy is already parsed, numeric
    /// forms normalised), plain HTTP too, and a fourth redirect.
    #[test]
    fn redirects_to_forbidden_addresses_are_not_followed() {
        for bad in [
            "https://127.0.0.1/",
            "https://2130706433/",
            "https://0x7f.1/",
            "https://0177.0.0.1/",
            "https://10.1/",
            "https://0.0.0.0/",
            "https://169.254.169.254/latest/meta-data/",
            "https://100.100.100.200/",
            "https://[::1]/",
            "https://[::]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:a9fe:a9fe]/",
            "https://[64:ff9b::a9fe:a9fe]/",
            "https://[2002:7f00:1::]/",
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "https://[fd00:ec2::254]/",
            "https://[fe80::1]/",
            "https://public.example@127.0.0.1/",
            "https://user:pw@public.example/",
            "http://public.example/",
            "http://127.0.0.1/",
            "ftp://public.example/",
        ] {
            assert!(
                redirect_refusal(0, &url(bad), false).is_some(),
                "{bad} followed"
            );
        }
        let public = url("https://hooks.example.com/next");
        assert_eq!(redirect_refusal(0, &public, false), None);
        assert_eq!(redirect_refusal(2, &public, false), None);
        assert!(redirect_refusal(3, &public, false).is_some_and(|w| w.contains("more than 3")));
        // Private targets allowed (development): loopback over plain HTTP, but never
        // plain HTTP to a name or a public address.
        assert_eq!(
            redirect_refusal(0, &url("http://127.0.0.1:8080/"), true),
            None
        );
        assert!(redirect_refusal(0, &url("http://localhost:8080/"), true).is_some());
        assert!(redirect_refusal(0, &url("http://8.8.8.8/"), true).is_some());
    }

    /// The client applies the policy: a chain of redirects stops after the third, and a
    /// redirect the policy refuses is not requested (loopback only, private targets
    /// allowed).
    #[tokio::test]
    async fn the_client_follows_at_most_3_redirects_and_only_allowed_ones() {
        let client = http_client(true).unwrap_or_else(|e| panic!("{e}"));
        let endless = loopback::Server::start(|base, _| (302, format!("{base}/again")));
        let sent = client.get(format!("{}/", endless.base)).send().await;
        let why = sent
            .map(|_| String::new())
            .unwrap_or_else(|e| crate::deliver::error_chain(&e));
        assert!(why.contains("more than 3 redirects"), "{why}");
        // The first request and 3 redirects.
        assert_eq!(endless.hits(), 4);

        let outward = loopback::Server::start(|_, _| (307, "http://public.example/".into()));
        let sent = outward.base.clone() + "/";
        let sent = client.get(sent).send().await;
        let why = sent
            .map(|_| String::new())
            .unwrap_or_else(|e| crate::deliver::error_chain(&e));
        assert!(why.contains("redirect refused"), "{why}");
        assert_eq!(outward.hits(), 1);

        let short = loopback::Server::start(|base, path| match path {
            "/" => (302, format!("{base}/two")),
            "/two" => (301, "/three".into()),
            _ => (204, String::new()),
        });
        let sent = client.get(format!("{}/", short.base)).send().await;
        assert_eq!(sent.map(|r| r.status().as_u16()).ok(), Some(204));
        assert_eq!(short.hits(), 3);
    }
}
