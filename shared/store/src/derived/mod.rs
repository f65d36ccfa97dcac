//! What is derived from the table's change stream rather than written by a request:
//! lifecycle events, queue counters and job metrics ([`stream`] applies a batch).
//! Reads the engine's items; never moves a job.

pub(crate) mod counter_add;
pub(crate) mod counts;
pub(crate) mod events;
pub(crate) mod metrics;
pub(crate) mod stream;
pub(crate) mod tenants;

use std::sync::Arc;

use crate::engine::Engine;
use crate::stream::local::LocalStream;
use crate::stream::redrive::FailureQueue;
use crate::stream::ChangeObserver;

/// The change stream's side: it owns the engine (whose items it reads and whose
/// counters it writes), the in-process stream consumer when there is one, and what sees
/// each applied batch. The features hold it; it holds nothing of theirs.
#[derive(Clone)]
pub struct Derived {
    /// The engine below.
    pub(crate) engine: Engine,
    /// The in-process change stream consumer (`make dev`, tests); none on AWS.
    pub(crate) stream: Option<Arc<LocalStream>>,
    /// What sees each applied batch of changes (push and webhook delivery, in process).
    pub(crate) observers: Vec<Arc<dyn ChangeObserver>>,
    /// Where the in-process consumer reports a batch it gives up on (`make dev`); none:
    /// such a batch is only logged.
    pub(crate) failures: Option<FailureQueue>,
}

impl Derived {
    /// The change stream's side over `engine`, with no consumer and no observers yet.
    pub(crate) fn new(engine: Engine) -> Self {
        Self {
            engine,
            stream: None,
            observers: Vec::new(),
            failures: None,
        }
    }

    /// The engine below.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Reads of data derived from the change stream (queue stats, events) call this
    /// first: with an in-process consumer it applies every change written so far, so a
    /// process reads its own writes' effects; on AWS (no consumer here) it does nothing
    /// and the data lag the stream function by about a second.
    pub async fn catch_up(&self) {
        if let Some(stream) = &self.stream {
            // In a task of its own: a request dropped by its client must not stop a drain
            // between a batch's writes and the move of the stream position.
            let stream = Arc::clone(stream);
            match tokio::spawn(async move { stream.catch_up().await }).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "catching up with the change stream failed")
                }
                Err(e) => {
                    tracing::error!(error = %e, "catching up with the change stream panicked")
                }
            }
        }
    }
}
