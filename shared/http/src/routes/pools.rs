//! Scheduling pools (ojs-fair-scheduling.md §10.1): served with the queues whose FETCH
//! order they decide.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use ojs_core::pool::Pool;
use serde_json::{json, Value};

use super::path_ids::{found, PathId, PoolName};
use super::reply;
use crate::error::ApiError;
use crate::extract::{JsonBody, PathParam};
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/admin/pools", get(list_pools))
        .route(
            "/ojs/v1/admin/pools/{name}",
            get(get_pool).put(put_pool).delete(delete_pool),
        )
}

/// `GET /ojs/v1/admin/pools` (ojs-fair-scheduling.md §10.1): every scheduling pool, as
/// `items` (the spec) and `pools`.
async fn list_pools(State(app): State<AppState>) -> Result<Response, ApiError> {
    let pools = pool_views(&app).await?;
    Ok(reply(
        StatusCode::OK,
        json!({"items": pools, "pools": pools}),
    ))
}

/// Every scheduling pool as the admin API shows it.
pub(super) async fn pool_views(app: &AppState) -> Result<Vec<Value>, ApiError> {
    let pools = app.store.engine().list_pools().await?;
    Ok(super::views(&pools, Pool::to_json))
}

/// `GET /ojs/v1/admin/pools/{name}`: one GetItem (a name no pool can have is not looked
/// up).
async fn get_pool(
    State(app): State<AppState>,
    PathParam(name): PathParam<PoolName>,
) -> Result<Response, ApiError> {
    let pool = found(&name, app.store.engine().pool(&name.0).await?)?;
    Ok(answer(StatusCode::OK, &pool))
}

/// `PUT /ojs/v1/admin/pools/{name}`: creates or replaces the pool; a FETCH over two of
/// its queues or more follows its strategy at once on this instance, on the others
/// within the settings' time to live.
async fn put_pool(
    State(app): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let pool = Pool::from_json(&name, &body)?;
    let created = app.store.engine().put_pool(&pool).await?;
    tracing::info!(event = "scheduling.rebalanced", pool = %name, strategy = pool.scheduling.strategy.as_str(), "pool set");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(answer(status, &pool))
}

/// A pool's answer: its view under `pool`.
fn answer(status: StatusCode, pool: &Pool) -> Response {
    reply(status, json!({"pool": pool.to_json()}))
}

async fn delete_pool(
    State(app): State<AppState>,
    PathParam(name): PathParam<PoolName>,
) -> Result<Response, ApiError> {
    if !app.store.engine().delete_pool(&name.0).await? {
        return Err(name.missing());
    }
    Ok(reply(
        StatusCode::OK,
        json!({"deleted": true, "name": name.0}),
    ))
}
