//! Inspecting a rate limit key (ojs-rate-limiting.md §10.1): what its limiter items hold
//! now, read with one Query of the key's partition `RL#<key>` (its `ACTIVE` holders item
//! and one `S#<length µs>` item per window length), never a Scan.

use ojs_core::rate_limit::SlidingWindow;

use crate::engine::windows::window_counts;
use crate::engine::Engine;
use crate::error::StoreError;

/// One sliding window of a key as its counter item holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowState {
    /// Window length, microseconds (a throttle of N per P counts one start per P/N).
    pub len_us: i64,
    /// Starts counted in the last window length.
    pub current_count: u64,
    /// The last start recorded, epoch µs.
    pub last_start_us: Option<i64>,
    /// When every counted start has left the window, epoch µs (now when none is counted).
    pub clears_at_us: i64,
}

/// What the limiter of a key holds now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RateLimitState {
    /// Jobs holding a concurrency slot whose lease has not ended, with its end (epoch µs).
    pub active: Vec<(String, i64)>,
    /// Its windows, shortest first.
    pub windows: Vec<WindowState>,
}

service! {
    /// What a rate limit key's limiter items hold (ojs-rate-limiting.md §10.1).
    RateLimits over engine: Engine
}

impl RateLimits<'_> {
    /// The limiter state of `key` at `now_us` (one strongly consistent Query of its
    /// partition; a key no claim has used yet has no items and an empty state).
    pub async fn state(&self, key: &str, now_us: i64) -> Result<RateLimitState, StoreError> {
        let mut state = RateLimitState::default();
        for item in self
            .engine
            .table
            .query_partition(&format!("RL#{key}"), true)
            .await?
        {
            let Some(sk) = item.get("sk").and_then(|v| v.as_s().ok()) else {
                continue;
            };
            if sk == "ACTIVE" {
                if let Some(holders) = item.get("holders").and_then(|h| h.as_m().ok()) {
                    for (job, until) in holders {
                        let until: Option<i64> = until.as_n().ok().and_then(|n| n.parse().ok());
                        if let Some(until) = until.filter(|u| *u > now_us) {
                            state.active.push((job.clone(), until));
                        }
                    }
                }
                continue;
            }
            let Some(window) = SlidingWindow::from_sort_key(key, sk) else {
                continue;
            };
            let counts = window_counts(&item);
            state.windows.push(WindowState {
                len_us: window.len_us,
                current_count: window.counted_starts(&counts, now_us),
                last_start_us: item
                    .get("last")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse().ok()),
                clears_at_us: window.assess(&counts, now_us).clear_at_us,
            });
        }
        state.active.sort();
        state.windows.sort_by_key(|w| w.len_us);
        Ok(state)
    }
}
