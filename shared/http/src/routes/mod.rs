//! One module per endpoint group.

pub(crate) mod cloudq;
pub(crate) mod cron;
pub(crate) mod dead_letter;
pub(crate) mod jobs;
pub(crate) mod queues;
pub(crate) mod schemas;
pub(crate) mod system;
pub(crate) mod workers;
pub(crate) mod workflows;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// A JSON response with a status, tagged with the job it is about (for the request log).
pub(crate) fn reply(status: StatusCode, body: Value) -> Response {
    let subject = crate::layer::LogSubject::of(&body);
    let mut res = (status, body.to_string()).into_response();
    if let Some(subject) = subject {
        res.extensions_mut().insert(subject);
    }
    res
}
