//! Admission of enqueues: a queue's depth bound (ojs-backpressure.md) and a tenant's
//! quotas (ojs-multi-tenancy.md §8.2), judged against the counters the change stream
//! keeps. Above the engine and the derived side: it reads both, and the HTTP layer asks
//! it before a PUSH.

use ojs_core::backpressure::Verdict;
use ojs_core::rate_limit::{SlidingWindow, Window};
use ojs_core::tenant::{self, TenantId};

use crate::derived::Derived;
use crate::error::StoreError;
use crate::queues::QueuePressure;

service! {
    /// Admission of enqueues: queue depth bounds and tenant quotas, judged on the counters.
    Admission over derived: Derived
}

impl Admission<'_> {
    /// Admits an enqueue of `adding` jobs per queue, or refuses it whole with
    /// [`StoreError::QueueFull`] when a queue would pass its depth bound
    /// (ojs-backpressure.md §5.1, §9.3); the queues then at or past their warning
    /// threshold are returned, for the answer's headers (§7.3).
    ///
    /// Costs nothing more for an unbounded queue whose settings this instance remembers
    /// ([`Engine::queue_settings`]); a bounded one adds its counters' read (one strongly
    /// consistent BatchGetItem, as for stats). The depth is the counters' (available,
    /// scheduled and retryable): in process they are caught up first, so the bound is
    /// exact for one producer; on AWS they trail the table by the stream function's delay,
    /// and enqueues racing within it are all judged against the depth before them. The
    /// bound is a brake on producers, not a guarantee: it can be passed by what is
    /// enqueued at once, never by an enqueue made after the counters saw the queue full.
    pub async fn admit_enqueue(
        &self,
        adding: &[(&ojs_core::QueueName, u64)],
    ) -> Result<Vec<QueuePressure>, StoreError> {
        let names: Vec<ojs_core::QueueName> = adding.iter().map(|(q, _)| (*q).clone()).collect();
        let settings = self.derived.engine.queue_settings(&names).await?;
        let mut pressed = Vec::new();
        for (queue, n) in adding {
            if settings
                .get(queue.as_str())
                .and_then(|st| st.backpressure)
                .is_none()
            {
                continue;
            }
            // The counters' read carries the queue item too: its bound as it is now.
            let stats = self.derived.queue_stats(queue).await?;
            let Some(bound) = stats.backpressure else {
                continue;
            };
            let depth = stats.depth();
            match bound.judge(depth, *n) {
                Verdict::Full => {
                    return Err(StoreError::QueueFull {
                        queue: queue.as_str().to_owned(),
                        depth,
                        bound: bound.max_depth,
                    })
                }
                Verdict::Pressure(pressure) => pressed.push(QueuePressure {
                    queue: queue.as_str().to_owned(),
                    depth: depth.saturating_add(*n),
                    bound: bound.max_depth,
                    pressure,
                }),
                Verdict::Clear => {}
            }
        }
        Ok(pressed)
    }

    /// Admits an enqueue of `adding` jobs of tenants (per tenant: how many, and how many
    /// of them scheduled), or refuses it whole with [`StoreError::TenantLimit`] when a
    /// tenant would pass `max_queue_depth`, `max_scheduled` or `max_enqueue_rate` (§8.2).
    /// A tenant without limits costs its settings' read, remembered per instance; one with
    /// a depth limit adds one strongly consistent Query of its counters. As for a queue's
    /// depth bound, the counts trail the table by the stream's delay on AWS: enqueues
    /// racing within it can pass the limit by what they add at once, never one made after
    /// the counts saw it full. The enqueue rate is exact ([`Store::count_enqueues`]) and
    /// judged last, so that an enqueue the counts refuse takes nothing from the window
    /// (one a later tenant of the same batch refuses has counted the earlier tenants').
    pub async fn admit_tenant_enqueue(
        &self,
        adding: &[(&TenantId, u64, u64)],
    ) -> Result<(), StoreError> {
        let tenants: Vec<&TenantId> = adding.iter().map(|(t, _, _)| *t).collect();
        let configs = self.derived.engine.tenant_configs(&tenants).await?;
        self.judge_tenant_counts(adding, &configs).await?;
        for (tenant, jobs, _) in adding {
            if let Some(rate) = configs
                .get(tenant.as_str())
                .and_then(|c| c.max_enqueue_rate)
            {
                self.count_enqueues(tenant, rate, *jobs).await?;
            }
        }
        Ok(())
    }

    /// Refuses an enqueue that would take a tenant past `max_queue_depth` or
    /// `max_scheduled`, by its counters.
    async fn judge_tenant_counts(
        &self,
        adding: &[(&TenantId, u64, u64)],
        configs: &std::collections::HashMap<String, tenant::TenantConfig>,
    ) -> Result<(), StoreError> {
        for (tenant, jobs, scheduled) in adding {
            let Some(config) = configs.get(tenant.as_str()).filter(|c| c.limits_enqueue()) else {
                continue;
            };
            let counts = self
                .derived
                .tenant_stats(tenant)
                .await?
                .map(|s| s.total)
                .unwrap_or_default();
            let checks = [
                (
                    "max_queue_depth",
                    config.max_queue_depth,
                    counts.depth(),
                    *jobs,
                ),
                (
                    "max_scheduled",
                    config.max_scheduled,
                    counts.scheduled,
                    *scheduled,
                ),
            ];
            for (limit, maximum, current, more) in checks {
                let Some(maximum) = maximum else { continue };
                if more > 0 && current.saturating_add(more) > maximum {
                    return Err(StoreError::TenantLimit {
                        tenant: tenant.to_string(),
                        limit,
                        current,
                        maximum,
                        retry_after_secs: tenant::RETRY_AFTER_SECS,
                    });
                }
            }
        }
        Ok(())
    }

    /// Counts `n` enqueues of `tenant` in its `max_enqueue_rate` window, or refuses them
    /// all with [`StoreError::TenantLimit`] (told when one more fits). The window is a
    /// rate limit's sliding window (`RL#tenant-enqueue#{id}`): one strongly consistent
    /// GetItem and one UpdateItem conditioned on the version read, so producers racing on
    /// every instance are admitted one after another against every enqueue before them
    /// (losing a race costs a read again). Counted before the jobs are written: an enqueue
    /// that then fails (a duplicate, a conflict) has used its share. A hot item by nature,
    /// but written at most `limit` times per period; a refusal writes nothing.
    pub(crate) async fn count_enqueues(
        &self,
        tenant: &TenantId,
        rate: Window,
        n: u64,
    ) -> Result<(), StoreError> {
        let window = SlidingWindow {
            key: tenant::enqueue_key(tenant),
            len_us: i64::try_from(rate.period.as_micros()).unwrap_or(i64::MAX),
            limit: rate.limit,
            policies: Vec::new(),
        };
        for _ in 0..ENQUEUE_WINDOW_ROUNDS {
            let now_us = ojs_core::time::now().timestamp_micros();
            let read = self.derived.engine.read_window(&window, now_us).await?;
            let remaining = u64::from(read.assessment.remaining);
            if remaining < n {
                // More than the limit at once never fits: told to wait a whole period.
                let wait_us = read
                    .fits_at_us(&window, n)
                    .map_or(window.len_us, |at| at.saturating_sub(now_us));
                return Err(StoreError::TenantLimit {
                    tenant: tenant.to_string(),
                    limit: "max_enqueue_rate",
                    current: u64::from(rate.limit).saturating_sub(remaining),
                    maximum: u64::from(rate.limit),
                    // Whole seconds, at least one: the header's unit.
                    retry_after_secs: u64::try_from(wait_us)
                        .unwrap_or(0)
                        .div_ceil(1_000_000)
                        .max(1),
                });
            }
            let update = self.derived.engine.record_starts(&window, &read, n)?;
            if self
                .derived
                .engine
                .table
                .update_alone(&update)
                .await?
                .is_some()
            {
                return Ok(());
            }
        }
        Err(StoreError::Throttled(format!(
            "tenant {tenant}'s enqueue window changed {ENQUEUE_WINDOW_ROUNDS} times while this enqueue was counted"
        )))
    }
}

/// Times an enqueue reads its tenant's window again after racing producers moved it.
const ENQUEUE_WINDOW_ROUNDS: usize = 8;
