//! Counts of DynamoDB calls and consumed capacity, to measure cost per operation.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::types::ConsumedCapacity;

use crate::error::StoreError;

/// Running totals; capacity in thousandths of a unit.
#[derive(Debug, Default)]
pub struct Usage {
    calls: AtomicU64,
    read_milli: AtomicU64,
    write_milli: AtomicU64,
}

tokio::task_local! {
    static REQUEST_USAGE: Arc<Usage>;
}

/// Runs `fut` and returns, with its output, the DynamoDB calls and capacity of the store
/// calls it made (itself, not tasks it spawned): the per-request figures of the logs.
pub async fn measured<F: Future>(fut: F) -> (F::Output, UsageSnapshot) {
    let usage = Arc::new(Usage::default());
    let out = REQUEST_USAGE.scope(usage.clone(), fut).await;
    (out, usage.snapshot())
}

/// A point-in-time copy of [`Usage`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageSnapshot {
    /// DynamoDB requests sent.
    pub calls: u64,
    /// Read capacity units consumed (tables and indexes).
    pub read_units: f64,
    /// Write capacity units consumed (tables and indexes).
    pub write_units: f64,
}

impl std::ops::Sub for UsageSnapshot {
    type Output = Self;
    fn sub(self, rhs: Self) -> Self {
        Self {
            calls: self.calls - rhs.calls,
            read_units: self.read_units - rhs.read_units,
            write_units: self.write_units - rhs.write_units,
        }
    }
}

/// Whether a call reads or writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Read,
    Write,
}

impl Usage {
    pub(crate) fn record<'a>(
        &self,
        kind: Kind,
        consumed: impl IntoIterator<Item = &'a ConsumedCapacity>,
    ) {
        let units: f64 = consumed
            .into_iter()
            .filter_map(ConsumedCapacity::capacity_units)
            .sum();
        let milli = (units * 1000.0).round() as u64;
        self.add(kind, milli);
        // Also into the usage of the request being served, when one is being measured.
        let _ = REQUEST_USAGE.try_with(|r| r.add(kind, milli));
    }

    /// One call consuming `milli` thousandths of a unit.
    fn add(&self, kind: Kind, milli: u64) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match kind {
            Kind::Read => self.read_milli.fetch_add(milli, Ordering::Relaxed),
            Kind::Write => self.write_milli.fetch_add(milli, Ordering::Relaxed),
        };
    }

    pub(crate) fn snapshot(&self) -> UsageSnapshot {
        UsageSnapshot {
            calls: self.calls.load(Ordering::Relaxed),
            read_units: self.read_milli.load(Ordering::Relaxed) as f64 / 1000.0,
            write_units: self.write_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        }
    }
}

/// The capacity an SDK output reports, whatever its shape.
pub(crate) trait Consumed {
    /// Every capacity record of the call.
    fn consumed(&self) -> Vec<&ConsumedCapacity>;
}

/// `Consumed` for outputs with one capacity record (an `Option`) or several (a slice):
/// both iterate by reference.
macro_rules! consumed {
    ($($t:ty),*) => {$(
        impl Consumed for $t {
            fn consumed(&self) -> Vec<&ConsumedCapacity> {
                self.consumed_capacity().into_iter().collect()
            }
        }
    )*};
}

use aws_sdk_dynamodb::operation as op;

consumed!(
    op::get_item::GetItemOutput,
    op::put_item::PutItemOutput,
    op::update_item::UpdateItemOutput,
    op::delete_item::DeleteItemOutput,
    op::query::QueryOutput,
    op::batch_get_item::BatchGetItemOutput,
    op::batch_write_item::BatchWriteItemOutput,
    op::transact_write_items::TransactWriteItemsOutput
);

/// What the SDK's per-operation error types have in common, as [`crate::StoreError`]
/// needs it.
pub(crate) trait ServiceError:
    aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static
{
}

impl<E> ServiceError for E where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static
{
}

/// A DynamoDB call's answer as the SDK gives it.
pub(crate) type SdkResult<T, E> = Result<T, aws_sdk_dynamodb::error::SdkError<E>>;

impl crate::dynamo::table::Table {
    /// Records a call and its capacity, and maps its error: the one place every plain
    /// DynamoDB call goes through on its way back.
    pub(crate) fn tally<T: Consumed, E: ServiceError>(
        &self,
        kind: Kind,
        out: SdkResult<T, E>,
    ) -> Result<T, StoreError> {
        self.metered(kind, out).map_err(StoreError::from_sdk)
    }

    /// [`Self::tally`] for a write conditional on the item existing: its failed
    /// condition is [`StoreError::NotFound`].
    pub(crate) fn tally_existing<T: Consumed, E: ServiceError>(
        &self,
        kind: Kind,
        out: SdkResult<T, E>,
    ) -> Result<T, StoreError> {
        self.tally_conditional(kind, out)?
            .ok_or_else(StoreError::missing)
    }

    /// Whether a conditional write took: [`Self::tally_conditional`] without its output.
    pub(crate) fn took<T: Consumed, E: ServiceError>(
        &self,
        out: SdkResult<T, E>,
    ) -> Result<bool, StoreError> {
        Ok(self.tally_conditional(Kind::Write, out)?.is_some())
    }

    /// [`Self::tally`] for a conditional write whose failed condition is an answer, not
    /// an error: `None`.
    pub(crate) fn tally_conditional<T: Consumed, E: ServiceError>(
        &self,
        kind: Kind,
        out: SdkResult<T, E>,
    ) -> Result<Option<T>, StoreError> {
        match self.metered(kind, out) {
            Ok(o) => Ok(Some(o)),
            Err(e) if crate::error::is_condition_failure(&e) => Ok(None),
            Err(e) => Err(StoreError::from_sdk(e)),
        }
    }
}
