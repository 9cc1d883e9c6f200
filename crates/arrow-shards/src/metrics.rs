//! What a buffer has done, as a snapshot.

use std::time::Duration;

/// A snapshot of a buffer's counters; see [`ShardBuffer::metrics`](crate::ShardBuffer::metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Bytes this buffer holds in memory now (distinct allocations, see `docs/memory-accounting.md`).
    pub reserved: usize,
    /// The most bytes this buffer held at once.
    pub peak_reserved: usize,
    /// Bytes reserved in the whole pool now (other buffers sharing it included).
    pub pool_reserved: usize,
    /// The pool's limit, if it has one.
    pub memory_limit: Option<usize>,
    /// Non-empty batches accepted.
    pub batches_written: u64,
    /// Rows accepted.
    pub rows_written: u64,
    /// Sum of each accepted batch's own size (`batch_memory_size`), before sharing is deduplicated.
    pub bytes_written: u64,
    /// Batches handed to readers.
    pub batches_read: u64,
    /// Rows handed to readers.
    pub rows_read: u64,
    /// Partitions whose read has started.
    pub partitions_read: u64,
    /// Total time writers spent waiting for memory.
    pub write_wait: Duration,
}
