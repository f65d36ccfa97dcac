//! Retries of failed webhook attempts (§7.2): the pending retries that are due, claimed
//! from the table in rounds and attempted again, wherever the first attempt was made.

use std::time::{Duration, Instant};

use ojs_core::time;
use ojs_store::PendingDelivery;
use serde_json::Value;

use super::{Delivery, WebhookDispatcher};

/// Most pending retries one redrive round claims.
const REDRIVE_PAGE: usize = 25;
/// Most redrive rounds per call (a backlog drains over several calls).
const REDRIVE_ROUNDS: usize = 8;
/// No redrive round starts after this long, so a call ends within it plus one attempt's
/// timeout (the scheduler function runs the sweep beside it within 60 s).
const REDRIVE_BUDGET: Duration = Duration::from_secs(15);

impl WebhookDispatcher {
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
                .claim_due_retries(time::now(), REDRIVE_PAGE)
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
        match store.webhooks().get(&p.subscription_id).await {
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
        if let Err(e) = store.webhooks().finish_retry(p).await {
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
}
