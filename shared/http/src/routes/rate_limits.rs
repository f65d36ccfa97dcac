//! `GET /ojs/v1/rate-limits/{key}` (ojs-rate-limiting.md §10.1): the current state of a
//! rate limit key, as its limiter items hold it (one Query of the key's partition).
//!
//! The limits themselves are not the key's: each job carries its own policy (two jobs of
//! one key may name different limits, and the strictest applies at each claim), so the
//! answer gives what is counted, not a `limit` or `available`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use ojs_core::rate_limit::is_valid_key;
use ojs_core::{time, OjsError};
use serde_json::{json, Value};

use super::reply;
use crate::error::ApiError;
use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/ojs/v1/rate-limits/{key}", get(inspect_rate_limit))
}

fn at(us: i64) -> Value {
    time::from_micros(us).map_or(Value::Null, |t| Value::from(time::format(&t)))
}

/// A key's limiter now: `concurrency.active` (jobs holding a slot whose lease has not
/// ended, with the ids), and per window length the starts counted in the last window,
/// the last start and when the window clears. A key no claim has used yet counts
/// nothing.
async fn inspect_rate_limit(
    State(app): State<AppState>,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    if !is_valid_key(&key) {
        return Err(OjsError::invalid_request(
            "a rate limit key matches ^[a-zA-Z0-9][a-zA-Z0-9._:-]*$ (at most 256 characters)",
        )
        .with_path("$.key")
        .into());
    }
    let now = time::now();
    let state = app
        .store
        .rate_limits()
        .state(&key, now.timestamp_micros())
        .await?;
    let windows: Vec<Value> = state
        .windows
        .iter()
        .map(|w| {
            let period = std::time::Duration::from_micros(u64::try_from(w.len_us).unwrap_or(0));
            json!({
                "period": ojs_core::duration::format(period),
                "current_count": w.current_count,
                "last_start_at": w.last_start_us.map_or(Value::Null, at),
                "window_clears_at": at(w.clears_at_us),
            })
        })
        .collect();
    Ok(reply(
        StatusCode::OK,
        json!({
            "key": key,
            "concurrency": {
                "active": state.active.len(),
                "active_jobs": state.active.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            },
            "windows": windows,
            "observed_at": time::format(&now),
        }),
    ))
}
