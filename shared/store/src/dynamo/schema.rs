//! The single-table layout, defined once. The local stack creates the table from this
//! definition and a test checks that `infra/template.yaml` declares exactly the same keys,
//! indexes and TTL attribute, so the two cannot drift.

/// A partition key and a sort key, both of DynamoDB type `S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDef {
    /// Partition (HASH) key attribute name.
    pub partition: &'static str,
    /// Sort (RANGE) key attribute name.
    pub sort: &'static str,
}

/// Which attributes a global secondary index carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Projection {
    /// Only the table and index keys.
    KeysOnly,
    /// The keys plus the listed attributes.
    Include(&'static [&'static str]),
}

/// A global secondary index of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexDef {
    /// Index name, as used in `Query::index_name`.
    pub name: &'static str,
    /// The index key attributes.
    pub keys: KeyDef,
    /// The projected attributes.
    pub projection: Projection,
}

/// Primary key of every item: `pk` (e.g. `JOB#<id>`) and `sk` (item kind within it).
pub const PRIMARY: KeyDef = KeyDef {
    partition: "pk",
    sort: "sk",
};

/// Sparse index of `available` jobs: `READY#<queue>`, sorted by priority (higher first),
/// then enqueue time, then id. Besides the keys it carries the job's own lease,
/// execution timeout and rate limit (`rl`), so a claim needs no read of the job.
pub const READY_INDEX: IndexDef = IndexDef {
    name: "ready",
    keys: KeyDef {
        partition: "gsi1pk",
        sort: "gsi1sk",
    },
    projection: Projection::Include(&["lease_ms", "timeout_ms", "rl"]),
};

/// Sparse index of jobs that become actionable at a time (scheduled, retryable, active
/// lease, expiry): `DUE#<queue>`, sorted by that time. `state` is projected so a sweep
/// knows which transition to attempt without reading the item.
pub const DUE_INDEX: IndexDef = IndexDef {
    name: "due",
    keys: KeyDef {
        partition: "gsi2pk",
        sort: "gsi2sk",
    },
    projection: Projection::Include(&["state"]),
};

/// Every global secondary index of the table.
pub const INDEXES: &[IndexDef] = &[READY_INDEX, DUE_INDEX];

/// The attribute DynamoDB's TTL reads (epoch seconds) to delete expired items.
pub const TTL_ATTRIBUTE: &str = "ttl";

/// What the table's change stream records of each write: the item before and after it
/// (the stream consumer derives events and counter moves from the two).
pub const STREAM_VIEW: &str = "NEW_AND_OLD_IMAGES";
