//! What a buffer has done, as a snapshot.

use std::sync::Arc;
use std::time::Duration;

use arrow_shards_spill::SpillError;

/// A snapshot of a buffer's counters; see [`ShardBuffer::metrics`](crate::ShardBuffer::metrics).
#[derive(Debug, Clone, Default)]
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
    /// Total time any thread (producers, readers, the spiller) waited for the buffer's state
    /// lock while another held it: what contention between producers costs.
    pub lock_wait: Duration,
    /// Total time readers waited for memory before reading a spilled segment (the read
    /// budget, [`with_read_stall_timeout`](crate::ShardBufferBuilder::with_read_stall_timeout)).
    pub read_wait: Duration,
    /// Segment reads that took the read budget's one overdraft (a forced grow past the limit,
    /// one at a time).
    pub read_overdrafts: u64,
    /// Rows subscriptions ([`ShardBuffer::subscribe`](crate::ShardBuffer::subscribe)) took
    /// while their partition was still open (neither sealed nor the buffer finished).
    pub rows_streamed: u64,
    /// Spills of a partition's batches voided because its reader took them while they were
    /// being written (the spill's segments are dropped).
    pub spills_voided: u64,
    /// Rows written to a partition after its subscription was dropped before its end,
    /// discarded (with the rows it held when dropped).
    pub rows_discarded: u64,
    /// Bytes of Arrow data that went to disk: each spilled batch's own rows (values, offsets,
    /// validity; a slice counts its rows, not its parent's buffers), before IPC framing and
    /// compression. Uncompressed, `bytes_written_to_disk` is this plus each segment's metadata
    /// (its 48-byte frame and its IPC message headers, a few hundred bytes to a few KiB by
    /// schema) and each spill file's schema, once; the segments' metadata dominates only when
    /// segments hold a few rows (hundreds of partitions under a small budget).
    pub bytes_spilled: u64,
    /// Writes that needed more than the whole memory limit and went to disk directly, one
    /// spill run each (counted in `spill_runs`).
    pub direct_writes: u64,
    /// What the spill rounds needed to free to get back to the target (per round, capped at
    /// the round size): compare with `bytes_spilled`.
    pub bytes_needed_to_target: u64,
    /// Bytes in spill files that exist now (in the local spill directory; the overflow tier's
    /// runs are counted in `overflow_*`).
    pub bytes_on_disk: u64,
    /// Bytes written to spill files so far (files since deleted included).
    pub bytes_written_to_disk: u64,
    /// Spill runs completed.
    pub spill_runs: u64,
    /// Spill files created.
    pub spill_files: u64,
    /// Time the spiller spent encoding and writing.
    pub spill_time: Duration,
    /// Time readers spent reading, verifying and decoding segments.
    pub spill_read_time: Duration,
    /// Spill runs written to the overflow tier (`with_spill_tiers`) because the local
    /// directory was full.
    pub overflow_runs: u64,
    /// Bytes written to the overflow tier's run files (objects) so far.
    pub overflow_bytes_written: u64,
    /// Time the spiller spent encoding and writing runs to the overflow tier (a run refused
    /// locally first counts its local attempt in `spill_time`).
    pub overflow_spill_time: Duration,
    /// The spill failure that writers that would wait get now, if spilling is failing (a later
    /// successful round clears it).
    pub spill_error: Option<Arc<SpillError>>,
}
