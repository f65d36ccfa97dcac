//! What runs on a clock, not on a request. The [`Scheduler`] composes the periodic
//! services once, for both places that run them: the scheduler function (EventBridge,
//! every minute) and the local server (every second). It sits above the store and push
//! delivery and calls into both; neither calls into it.

mod invocation;
mod scheduler;
mod services;

pub use invocation::{init_logging, invocation_span};

pub use scheduler::{Scheduler, TickReport};
pub use services::{QueueSweep, Service};
