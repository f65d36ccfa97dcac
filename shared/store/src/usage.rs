//! Counts of DynamoDB calls and consumed capacity, to measure cost per operation.

use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::types::ConsumedCapacity;

/// Running totals; capacity in thousandths of a unit.
#[derive(Debug, Default)]
pub struct Usage {
    calls: AtomicU64,
    read_milli: AtomicU64,
    write_milli: AtomicU64,
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
        self.calls.fetch_add(1, Ordering::Relaxed);
        let units: f64 = consumed
            .into_iter()
            .filter_map(ConsumedCapacity::capacity_units)
            .sum();
        let milli = (units * 1000.0).round() as u64;
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
