//! Counters of a spill directory.
//!
//! # Locking
//!
//! None: every counter is an independent relaxed atomic. A [`SpillMetrics`] snapshot is
//! therefore not atomic across fields (e.g. `files` and `bytes_on_disk` may be read between a
//! file's removal and its bytes' subtraction).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A snapshot of a [`SpillDir`](crate::SpillDir)'s counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpillMetrics {
    /// Bytes in run files that currently exist.
    pub bytes_on_disk: u64,
    /// Bytes written to run files so far (including files since removed).
    pub bytes_written: u64,
    /// In-memory bytes of the batches spilled so far (sum of
    /// [`SegmentRef::memory_bytes`](crate::SegmentRef::memory_bytes) of registered segments).
    pub bytes_spilled: u64,
    /// Bytes read back from run files so far.
    pub bytes_read: u64,
    /// Runs finished successfully.
    pub runs: u64,
    /// Run files that currently exist.
    pub files: u64,
    /// Run files created so far.
    pub files_created: u64,
    /// Segments registered (returned by a successful `finish`) so far.
    pub segments: u64,
    /// Segments read back so far.
    pub segments_read: u64,
    /// Rows in registered segments so far.
    pub rows_spilled: u64,
    /// Time spent encoding and writing segments (including coalescing and compression).
    pub write_time: Duration,
    /// Time spent reading, verifying and decoding segments.
    pub read_time: Duration,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) bytes_on_disk: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) bytes_spilled: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) runs: AtomicU64,
    pub(crate) files: AtomicU64,
    pub(crate) files_created: AtomicU64,
    pub(crate) segments: AtomicU64,
    pub(crate) segments_read: AtomicU64,
    pub(crate) rows_spilled: AtomicU64,
    pub(crate) write_nanos: AtomicU64,
    pub(crate) read_nanos: AtomicU64,
}

pub(crate) fn add(counter: &AtomicU64, value: u64) {
    counter.fetch_add(value, Ordering::Relaxed);
}

pub(crate) fn sub(counter: &AtomicU64, value: u64) {
    // saturating: never wrap below zero even if a caller's bookkeeping is off
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(value))
    });
}

pub(crate) fn add_time(counter: &AtomicU64, elapsed: Duration) {
    add(
        counter,
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
    );
}

impl Counters {
    pub(crate) fn snapshot(&self) -> SpillMetrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SpillMetrics {
            bytes_on_disk: get(&self.bytes_on_disk),
            bytes_written: get(&self.bytes_written),
            bytes_spilled: get(&self.bytes_spilled),
            bytes_read: get(&self.bytes_read),
            runs: get(&self.runs),
            files: get(&self.files),
            files_created: get(&self.files_created),
            segments: get(&self.segments),
            segments_read: get(&self.segments_read),
            rows_spilled: get(&self.rows_spilled),
            write_time: Duration::from_nanos(get(&self.write_nanos)),
            read_time: Duration::from_nanos(get(&self.read_nanos)),
        }
    }
}
