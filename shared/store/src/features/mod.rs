//! Features built on the engine: workflows, cron, the dead letter queue, workers,
//! admission of enqueues (depth bounds, tenant quotas), registries (schemas, API keys, push endpoints, webhook subscriptions) and the admin API's queries.
//! They move jobs only through the engine's transitions.

/// Defines a feature service: a short-lived view the façade hands out, holding a
/// reference to the layer below (`engine` or `derived`) and nothing else, with the
/// constructor that makes one over it. Written once here, as every service is the same.
macro_rules! service {
    ($(#[$doc:meta])* $name:ident over $field:ident: $layer:ty) => {
        $(#[$doc])*
        pub struct $name<'a> {
            $field: &'a $layer,
        }

        impl<'a> $name<'a> {
            #[doc = concat!("The service over `", stringify!($field), "`.")]
            pub(crate) fn new($field: &'a $layer) -> Self {
                Self { $field }
            }
        }
    };
}

pub(crate) mod admin;
pub(crate) mod admission;
pub(crate) mod api_keys;
pub(crate) mod checkpoints;
pub(crate) mod cron;
pub(crate) mod dead_letter;
pub(crate) mod follow_ups;
pub(crate) mod idempotency;
pub(crate) mod push;
pub(crate) mod rate_limits;
pub(crate) mod schemas;
pub(crate) mod wakeups;
pub(crate) mod webhooks;
pub(crate) mod workers;
pub(crate) mod workflow;
