//! What an API key set up: the push endpoints, webhook subscriptions, cron jobs and schemas
//! registered with it (each records its key as `created_by`), listed for an operator
//! (`GET /ojs/v1/admin/keys/{id}/registrations`, the `registrations` key command) and
//! optionally disabled when the key is revoked (`revoke` with `disable_registrations`).
//!
//! Revoking a key does not touch its registrations by default: a push endpoint a deploy
//! key registered keeps receiving its queue's jobs after that key is rotated out. Disabling
//! stops what routes data somewhere or makes jobs: push endpoints are disabled (their
//! queues' jobs stay available to polling workers), subscriptions made inactive, cron jobs
//! disabled; each can be turned on again by registering it anew. Schemas only validate
//! jobs and are listed but left as they are.
//!
//! Each registry is one Query of a small bounded partition (never a Scan); this is an
//! operator's call, not a request path.

use crate::entry_views::EntryView;
use ojs_core::time;
use ojs_store::{Store, StoreError};
use serde_json::{json, Value};

/// Every registration whose `created_by` is `key_id`, by kind.
pub async fn list_by_key(store: &Store, key_id: &str) -> Result<Value, StoreError> {
    let push = store.push_endpoints().list().await?;
    let webhooks = store.webhooks().list(true).await?;
    let crons = store.cron().list().await?;
    let schemas = store.schemas().list().await?;
    Ok(json!({
        "key_id": key_id,
        "push_endpoints": made_by(&push, key_id, EntryView::view),
        "webhook_subscriptions": made_by(&webhooks, key_id, EntryView::view),
        "cron_jobs": made_by(&crons, key_id, EntryView::view),
        "schemas": made_by(&schemas, key_id, crate::entry_views::schema_summary),
    }))
}

/// The views (`view`) of the `entries` that the key `key_id` made.
fn made_by<T: EntryView>(entries: &[T], key_id: &str, view: fn(&T) -> Value) -> Vec<Value> {
    entries
        .iter()
        .filter(|e| e.created_by() == Some(key_id))
        .map(view)
        .collect()
}

/// Disables what `key_id` registered (see the module docs) and answers the ids and names
/// it disabled. Registrations already disabled are left as they are; one changed or
/// deleted meanwhile is skipped (the operator can list again).
pub async fn disable_by_key(store: &Store, key_id: &str) -> Result<Value, StoreError> {
    let now = time::now();
    let by = Some(key_id);
    let reason = format!("API key {key_id}, which registered it, was revoked");
    let mut push = Vec::new();
    for entry in store.push_endpoints().list().await? {
        if entry.created_by.as_deref() == by && entry.disabled.is_none() {
            store.push_endpoints().disable(&entry, &reason, now).await?;
            push.push(entry.id);
        }
    }
    let mut webhooks = Vec::new();
    for entry in store.webhooks().list(true).await? {
        if entry.created_by.as_deref() != by || !entry.subscription.active {
            continue;
        }
        let mut inactive = entry.subscription.clone();
        inactive.active = false;
        match store
            .webhooks()
            .update(&entry.id, &inactive, Some(&entry.updated_at), now)
            .await
        {
            Ok(_) => webhooks.push(entry.id),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let mut crons = Vec::new();
    for entry in store.cron().list().await? {
        if entry.created_by.as_deref() != by || !entry.cron.enabled {
            continue;
        }
        let mut disabled = entry.cron.clone();
        disabled.enabled = false;
        store.cron().put(&disabled, by, now).await?;
        crons.push(entry.cron.name);
    }
    tracing::info!(
        key_id,
        push = push.len(),
        webhooks = webhooks.len(),
        crons = crons.len(),
        "registrations of a revoked key disabled"
    );
    Ok(json!({
        "push_endpoints": push,
        "webhook_subscriptions": webhooks,
        "cron_jobs": crons,
    }))
}
