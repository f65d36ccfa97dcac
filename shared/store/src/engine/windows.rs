//! Rate limit windows (`rate_limit.rate`, `throttle`, `max_per_second`): sliding windows
//! counted in buckets of a tenth of their length (core's [`SlidingWindow`]). One item per
//! key and window length, `RL#<key>` / `S#<length µs>`, holds the counted buckets as a
//! map `b: {bucket -> starts}`, the last recorded start `last` (epoch µs) and a version
//! `v`; it expires by TTL once no window counts its starts.
//!
//! A claim reads the item (one strongly consistent GetItem), and if the window has room
//! writes the start into it in the claim's transaction, conditioned on the version it
//! read: every start of a key is admitted against every start before it, so racing
//! claimers cannot both take the last start of a window.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, Update};
use ojs_core::rate_limit::{SlidingWindow, WindowAssessment};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::item::{item_key, n, Item};

/// A window as a claim found it.
pub(crate) struct WindowRead {
    /// Starts per bucket.
    counts: Vec<(i64, u64)>,
    /// The version read, if the item exists.
    version: Option<String>,
    /// When this claim's start is recorded, epoch µs.
    at_us: i64,
    /// What the window leaves for it.
    pub assessment: WindowAssessment,
}

impl WindowRead {
    /// When `n` more starts fit `window` as read ([`SlidingWindow::fits_at_us`]).
    pub(crate) fn fits_at_us(&self, window: &SlidingWindow, n: u64) -> Option<i64> {
        window.fits_at_us(&self.counts, self.at_us, n)
    }
}

fn window_key(window: &SlidingWindow) -> Item {
    item_key(format!("RL#{}", window.key), window.sort_key())
}

/// The starts a window item counts, per bucket (bucket, starts).
pub(crate) fn window_counts(item: &Item) -> Vec<(i64, u64)> {
    item.get("b")
        .and_then(|b| b.as_m().ok())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_n().ok()?.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

impl Engine {
    /// Reads `window` for a start at `now_us`.
    pub(crate) async fn read_window(
        &self,
        window: &SlidingWindow,
        now_us: i64,
    ) -> Result<WindowRead, StoreError> {
        let item = self.table.read_item(window_key(window)).await?;
        let number = |name: &str| {
            item.as_ref()
                .and_then(|i| i.get(name))
                .and_then(|v| v.as_n().ok())
        };
        let counts = item.as_ref().map(window_counts).unwrap_or_default();
        let last = number("last").and_then(|v| v.parse().ok());
        let at_us = SlidingWindow::recorded_at(now_us, last);
        Ok(WindowRead {
            assessment: window.assess(&counts, at_us),
            version: number("v").cloned(),
            counts,
            at_us,
        })
    }

    /// The update recording a start in `window` as `read` found it, for the claim's
    /// transaction: it fails its condition when another start was recorded since.
    pub(crate) fn record_start(
        &self,
        window: &SlidingWindow,
        read: &WindowRead,
    ) -> Result<Update, StoreError> {
        self.record_starts(window, read, 1)
    }

    /// [`Engine::record_start`] for `starts` starts at once.
    pub(crate) fn record_starts(
        &self,
        window: &SlidingWindow,
        read: &WindowRead,
        starts: u64,
    ) -> Result<Update, StoreError> {
        let buckets: HashMap<String, AttributeValue> = window
            .with_starts(&read.counts, read.at_us, starts)
            .into_iter()
            .map(|(b, c)| (b.to_string(), n(c)))
            .collect();
        let expires = window.leaves_at(window.bucket(read.at_us)) / 1_000_000 + 60;
        let update = Update::builder()
            .table_name(self.table())
            .set_key(Some(window_key(window)))
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":b", AttributeValue::M(buckets))
            .expression_attribute_values(":last", n(read.at_us))
            .expression_attribute_values(":ttl", n(expires))
            .expression_attribute_values(":one", n(1));
        let update = match &read.version {
            Some(v) => update
                .update_expression("SET b = :b, #last = :last, #ttl = :ttl, v = v + :one")
                .condition_expression("v = :v")
                .expression_attribute_values(":v", AttributeValue::N(v.clone())),
            None => update
                .update_expression("SET b = :b, #last = :last, #ttl = :ttl, v = :one")
                .condition_expression("attribute_not_exists(v)"),
        };
        update
            .expression_attribute_names("#last", "last")
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))
    }
}
