//! Webhook subscriptions (ojs-webhooks.md §6, §10): create, list, get, update, delete,
//! rotate the secret, send a test event, and the delivery log. A subscription made for one
//! tenant (its key's, or its `X-OJS-Tenant`) receives that tenant's jobs' events only, and
//! only requests for that tenant see it (§9.3). The signing secret is
//! generated here and answered once, on create (and on rotation); no other answer or log
//! line carries it. A URL is checked when set (its host must resolve, and only to public
//! addresses unless `OJS_PUSH_ALLOW_PRIVATE=on`) and again at every delivery.

use crate::entry_views::EntryView;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use ojs_core::webhook::{
    new_secret, rotation_grace, Subscription, MAX_SUBSCRIPTIONS, MAX_SUBSCRIPTIONS_PER_TENANT,
};
use ojs_core::{time, ErrorCode, OjsError};
use ojs_store::{DeadDelivery, PendingDelivery, StoreError, WebhookEntry, MAX_LOG_PAGE};
use serde::Deserialize;
use serde_json::{json, Value};

use super::queues::Paged;
use super::{reply, wrapped_and_bare};
use crate::error::ApiError;
use crate::extract::{
    raw_path_param, Caller, CheckedQuery, FromHead, JsonBody, OptionalJsonBody, QueryCheck, Tenant,
};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/ojs/v1/webhooks/subscriptions",
            get(list_subscriptions).post(create_subscription),
        )
        .route(
            "/ojs/v1/webhooks/subscriptions/{id}",
            get(get_subscription)
                .patch(update_subscription)
                .delete(delete_subscription),
        )
        .route(
            "/ojs/v1/webhooks/subscriptions/{id}/rotate-secret",
            post(rotate_secret),
        )
        .route(
            "/ojs/v1/webhooks/subscriptions/{id}/test",
            post(test_subscription),
        )
        .route(
            "/ojs/v1/webhooks/subscriptions/{id}/deliveries",
            get(list_subscription_deliveries),
        )
        .route("/ojs/v1/webhooks/deliveries", get(list_deliveries))
        .route("/ojs/v1/webhooks/deliveries/{id}", get(get_delivery))
        .route(
            "/ojs/v1/webhooks/deliveries/{id}/retry",
            post(retry_delivery),
        )
}

fn unknown(id: &str) -> ApiError {
    ApiError(crate::error::not_found(&ojs_store::Missing::Webhook(
        id.to_owned(),
    )))
}

/// Subscription `id`, if the request's tenant may see it: another tenant's is unknown
/// (ojs-webhooks.md §9.3), as another tenant's job is.
async fn existing(app: &AppState, id: &str, tenant: &Tenant) -> Result<WebhookEntry, ApiError> {
    super::check_prefixed_uuid(id, "sub_", unknown)?;
    app.store
        .webhooks()
        .get(id)
        .await?
        .filter(|entry| entry.visible_to(&tenant.0))
        .ok_or_else(|| unknown(id))
}

/// The subscription or delivery a path names, the tenant the request acts for, and what
/// else the query says of where to look (`L`): the id is checked (and what it names read)
/// by the handler, after any body.
struct Named<L = ()> {
    id: String,
    tenant: Tenant,
    lookup: L,
}

/// The subscription a path names.
type NamedSubscription = Named;

/// The delivery a path names, and the subscription whose log it is in when the query
/// says.
type NamedDelivery = Named<CheckedQuery<DeliveryLookup>>;

impl<S: Send + Sync, L: FromHead<Rejection: IntoResponse>> FromRequestParts<S> for Named<L> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let tenant = Tenant::from_head(parts).map_err(IntoResponse::into_response)?;
        let id = raw_path_param(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let lookup = L::from_head(parts).map_err(IntoResponse::into_response)?;
        Ok(Self { id, tenant, lookup })
    }
}

impl NamedSubscription {
    /// The subscription, if the request's tenant may see it ([`existing`]).
    async fn read(&self, app: &AppState) -> Result<WebhookEntry, ApiError> {
        existing(app, &self.id, &self.tenant).await
    }

    /// For a change made without reading the subscription first: a request acting for
    /// one tenant reads it to learn whether it may (one GetItem); an operator's makes none.
    async fn check_visible(&self, app: &AppState) -> Result<(), ApiError> {
        match self.tenant.0 {
            ojs_core::tenant::Scope::Any => super::check_prefixed_uuid(&self.id, "sub_", unknown),
            ojs_core::tenant::Scope::One(_) => self.read(app).await.map(|_| ()),
        }
    }
}

/// The resolved addresses of a URL's host, checked as push endpoints' are.
async fn check_address(url: &str, allow_private: bool) -> Result<(), ApiError> {
    ojs_push::guard::check_target(url, allow_private)
        .await
        .map(|_| ())
        .map_err(|why| {
            ApiError(
                OjsError::new(ErrorCode::InvalidRequest, why.replace("endpoint", "url"))
                    .with_path("$.url"),
            )
        })
}

async fn create_subscription(
    State(app): State<AppState>,
    Caller(by): Caller,
    tenant: Tenant,
    JsonBody(mut body): JsonBody,
) -> Result<Response, ApiError> {
    let allow_private = app.config.push_allow_private;
    let secret = ojs_core::webhook::take_caller_secret(&mut body)?;
    let subscription = Subscription::from_json(&body, allow_private)?;
    check_address(&subscription.url, allow_private).await?;
    let subscriptions = app.store.webhooks().list(true).await?;
    if subscriptions.len() >= MAX_SUBSCRIPTIONS {
        return Err(ApiError(OjsError::new(
            ErrorCode::InvalidRequest,
            format!(
                "at most {MAX_SUBSCRIPTIONS} webhook subscriptions may exist; delete one first"
            ),
        )));
    }
    if let ojs_core::tenant::Scope::One(t) = &tenant.0 {
        let held = subscriptions
            .iter()
            .filter(|entry| entry.tenant == tenant.0)
            .count();
        if held >= MAX_SUBSCRIPTIONS_PER_TENANT {
            let name = ojs_core::tenant::Scope::name(t.as_ref());
            return Err(ApiError(
                OjsError::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "tenant {name} has {held} webhook subscriptions, the most one tenant may have; delete one first"
                    ),
                )
                .with_detail("tenant_id", name)
                .with_detail("maximum", MAX_SUBSCRIPTIONS_PER_TENANT),
            ));
        }
    }
    let entry = app
        .store
        .webhooks()
        .put(
            &subscription,
            secret.unwrap_or_else(new_secret),
            by.as_deref(),
            &tenant.0,
            time::now(),
        )
        .await?;
    tracing::info!(event = "webhook.subscription.created", id = %entry.id, "webhook subscription created");
    // §6.1: the secret is answered here, and only here (and by a rotation).
    let mut view = entry.view();
    if let Some(o) = view.as_object_mut() {
        o.insert("secret".into(), json!(entry.secret));
    }
    Ok(reply(
        StatusCode::CREATED,
        wrapped_and_bare("subscription", view),
    ))
}

async fn list_subscriptions(
    State(app): State<AppState>,
    tenant: Tenant,
    paged: Paged,
) -> Result<Response, ApiError> {
    let mut all = app.store.webhooks().list(true).await?;
    all.retain(|entry| entry.visible_to(&tenant.0));
    // `items` as the admin API's listings name them (the dashboard's webhooks page).
    Ok(paged.reply(&all, &["subscriptions", "items"], WebhookEntry::view))
}

async fn get_subscription(
    State(app): State<AppState>,
    sub: NamedSubscription,
) -> Result<Response, ApiError> {
    Ok(answer(&sub.read(&app).await?))
}

/// A subscription's answer: its view under `subscription` and at the top level.
fn answer(entry: &WebhookEntry) -> Response {
    reply(
        StatusCode::OK,
        wrapped_and_bare("subscription", entry.view()),
    )
}

async fn update_subscription(
    State(app): State<AppState>,
    sub: NamedSubscription,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let allow_private = app.config.push_allow_private;
    let entry = sub.read(&app).await?;
    let next = entry.subscription.patched(&body, allow_private)?;
    if next.url != entry.subscription.url {
        check_address(&next.url, allow_private).await?;
    }
    let updated = match app
        .store
        .webhooks()
        .update(&sub.id, &next, Some(&entry.updated_at), time::now())
        .await
    {
        Ok(u) => u,
        // Deleted, or changed since it was read (its fields are not overwritten).
        Err(StoreError::NotFound(_)) => {
            return Err(match app.store.webhooks().get(&sub.id).await? {
                None => unknown(&sub.id),
                Some(_) => ApiError(
                    OjsError::conflict("the subscription changed meanwhile; read it and try again")
                        .with_detail("id", sub.id.as_str()),
                ),
            })
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(id = %sub.id, "webhook subscription updated");
    Ok(answer(&updated))
}

async fn delete_subscription(
    State(app): State<AppState>,
    sub: NamedSubscription,
) -> Result<Response, ApiError> {
    sub.check_visible(&app).await?;
    app.store.webhooks().delete(&sub.id).await?;
    tracing::info!(event = "webhook.subscription.deleted", id = %sub.id, "webhook subscription deleted");
    Ok(reply(
        StatusCode::OK,
        json!({ "deleted": true, "id": sub.id }),
    ))
}

/// §8.3: a new secret, answered once; the old one keeps signing deliveries (a second
/// signature in `X-OJS-Signature`) for the grace period the body names
/// (`grace_period_seconds`, 0 to retire a leaked secret at once), a day by default.
async fn rotate_secret(
    State(app): State<AppState>,
    sub: NamedSubscription,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    sub.check_visible(&app).await?;
    let grace = rotation_grace(body.as_ref())?;
    let now = time::now();
    let secret = new_secret();
    let grace_until = now.timestamp() + grace;
    let entry = app
        .store
        .webhooks()
        .rotate_secret(&sub.id, secret.clone(), grace_until, now)
        .await?;
    tracing::info!(id = %sub.id, "webhook secret rotated");
    let mut view = entry.view();
    if let Some(o) = view.as_object_mut() {
        o.insert("secret".into(), json!(secret));
        o.insert(
            "previous_secret_expires_at".into(),
            json!(time::format(&(now + chrono::TimeDelta::seconds(grace)))),
        );
    }
    Ok(reply(StatusCode::OK, view))
}

/// §6.6: one synthetic `webhook.test` delivery, answered with its outcome.
async fn test_subscription(
    State(app): State<AppState>,
    sub: NamedSubscription,
) -> Result<Response, ApiError> {
    let entry = sub.read(&app).await?;
    let sent = app.webhooks()?.test(&entry).await;
    let body: String = sent.body.chars().take(1024).collect();
    Ok(reply(
        StatusCode::OK,
        json!({
            "success": sent.status.is_some_and(|s| (200..300).contains(&s)),
            "status_code": sent.status,
            "response_time_ms": sent.duration_ms,
            "response_body": body,
            "error": sent.error,
        }),
    ))
}

/// A page of the delivery log: `limit` (1 to 100, default 50) and the `cursor` a previous
/// page answered.
#[derive(Debug, Deserialize)]
pub(crate) struct LogPage {
    limit: Option<String>,
    cursor: Option<String>,
    subscription_id: Option<String>,
}

impl LogPage {
    /// A cursor is a log item's sort key: a delivery id and an attempt number.
    fn check_cursor(&self) -> Result<(), ApiError> {
        match &self.cursor {
            Some(c) if c.len() > 64 || !c.starts_with("del_") => Err(ApiError(
                OjsError::invalid_request("cursor is not one this server answered")
                    .with_path("$.cursor"),
            )),
            _ => Ok(()),
        }
    }

    fn limit(&self) -> Result<usize, ApiError> {
        match &self.limit {
            None => Ok(50),
            Some(raw) => raw
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LOG_PAGE).contains(n))
                .ok_or_else(|| {
                    ApiError(
                        OjsError::invalid_request(format!(
                            "limit must be an integer from 1 to {MAX_LOG_PAGE}"
                        ))
                        .with_path("$.limit"),
                    )
                }),
        }
    }
}

/// A page of the delivery log as the query asks for it, checked before anything is read.
pub(crate) struct LogQuery {
    page: LogPage,
    limit: usize,
}

impl QueryCheck for LogPage {
    type Checked = LogQuery;

    fn check(self) -> Result<LogQuery, ApiError> {
        let limit = self.limit()?;
        self.check_cursor()?;
        Ok(LogQuery { page: self, limit })
    }
}

async fn list_subscription_deliveries(
    State(app): State<AppState>,
    sub: NamedSubscription,
    CheckedQuery(log): CheckedQuery<LogPage>,
) -> Result<Response, ApiError> {
    let entry = sub.read(&app).await?;
    deliveries_of(&app, &entry.id, &log).await
}

/// `GET /ojs/v1/webhooks/deliveries`: the log of one subscription (`subscription_id`,
/// required: the log is kept per subscription, so a listing is one Query).
async fn list_deliveries(
    State(app): State<AppState>,
    tenant: Tenant,
    CheckedQuery(log): CheckedQuery<LogPage>,
) -> Result<Response, ApiError> {
    let Some(id) = log.page.subscription_id.as_deref() else {
        return Err(ApiError(
            OjsError::invalid_request("subscription_id is required").with_path("$.subscription_id"),
        ));
    };
    let entry = existing(&app, id, &tenant).await?;
    deliveries_of(&app, &entry.id, &log).await
}

async fn deliveries_of(app: &AppState, id: &str, log: &LogQuery) -> Result<Response, ApiError> {
    let (limit, cursor) = (log.limit, log.page.cursor.as_deref());
    // The cursor is a log item's sort key, with `~` for its `#` so it needs no escaping
    // in a query string.
    let from = cursor.map(|c| c.replace('~', "#"));
    let (deliveries, next) = app
        .store
        .webhooks()
        .deliveries(id, limit, from.as_deref())
        .await?;
    let next = next.map(|c| c.replace('#', "~"));
    Ok(reply(
        StatusCode::OK,
        json!({
            "deliveries": deliveries,
            "pagination": {"limit": limit, "has_more": next.is_some(), "next_cursor": next},
        }),
    ))
}

/// Where to look for a delivery: `?subscription_id=` names its log (one Query); without
/// it, every subscription's log is looked in (one Query each, at most 100).
#[derive(Debug, Deserialize)]
pub(crate) struct DeliveryLookup {
    subscription_id: Option<String>,
}

fn unknown_delivery(id: &str) -> ApiError {
    ApiError(
        OjsError::not_found(format!("no webhook delivery with id {id:?}")).with_detail("id", id),
    )
}

impl QueryCheck for DeliveryLookup {
    type Checked = Self;

    fn check(self) -> Result<Self, ApiError> {
        Ok(self)
    }
}

type Found = (String, Vec<Value>, Option<DeadDelivery>);

/// The delivery `named` as the store finds it among the subscriptions the request sees
/// (its subscription's id, its attempts, and what a retry sends again); its 404 otherwise.
async fn find_delivery(app: &AppState, named: &NamedDelivery) -> Result<Found, ApiError> {
    let (id, tenant) = (named.id.as_str(), &named.tenant);
    super::check_prefixed_uuid(id, "del_", unknown_delivery)?;
    let subs = match &named.lookup.0.subscription_id {
        Some(sub) => vec![existing(app, sub, tenant).await?.id],
        None => app
            .store
            .webhooks()
            .list(true)
            .await?
            .into_iter()
            .filter(|e| e.visible_to(&tenant.0))
            .map(|e| e.id)
            .collect(),
    };
    app.store
        .webhooks()
        .find_delivery(id, &subs)
        .await?
        .ok_or_else(|| unknown_delivery(id))
}

/// `GET /ojs/v1/webhooks/deliveries/{id}`: every attempt of one delivery, oldest first.
async fn get_delivery(
    State(app): State<AppState>,
    delivery: NamedDelivery,
) -> Result<Response, ApiError> {
    let (sub, attempts, _) = find_delivery(&app, &delivery).await?;
    let last = attempts.last().cloned().unwrap_or(Value::Null);
    Ok(reply(
        StatusCode::OK,
        json!({
            "id": delivery.id,
            "subscription_id": sub,
            "event_type": last["event_type"],
            "event_id": last["event_id"],
            "status": last["status"],
            "attempts": attempts,
        }),
    ))
}

/// `POST /ojs/v1/webhooks/deliveries/{id}/retry`: one more attempt of a dead delivery
/// (§7.2, "manual inspection and replay"), made by the next redrive (within a minute on
/// AWS) under the same delivery id.
async fn retry_delivery(
    State(app): State<AppState>,
    delivery: NamedDelivery,
) -> Result<Response, ApiError> {
    let (sub, attempts, dead) = find_delivery(&app, &delivery).await?;
    let status = attempts
        .last()
        .map(|a| a["status"].clone())
        .unwrap_or(Value::Null);
    let Some(dead) = dead else {
        let why = if status == "dead" {
            "this dead delivery's event was not kept (over 64 KiB): it cannot be retried".to_owned()
        } else {
            format!("only a dead delivery can be retried; this one is {status}")
        };
        return Err(ApiError(
            OjsError::conflict(why).with_detail("id", delivery.id.as_str()),
        ));
    };
    let now = time::now();
    let pending = PendingDelivery {
        delivery_id: delivery.id.clone(),
        subscription_id: sub.clone(),
        event_type: dead.event_type,
        body: dead.body,
        attempt: dead.attempt + 1,
        due_us: now.timestamp_micros(),
    };
    app.store.webhooks().schedule_retry(&pending).await?;
    tracing::info!(delivery_id = %delivery.id, subscription = %sub, "webhook delivery retried by hand");
    Ok(reply(
        StatusCode::ACCEPTED,
        json!({
            "id": delivery.id,
            "subscription_id": sub,
            "status": "pending",
            "attempt": pending.attempt,
            "next_attempt_at": time::format(&now),
        }),
    ))
}
