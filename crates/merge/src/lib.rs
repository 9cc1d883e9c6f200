//! Reading one partition of a shuffle back (package `arrow-shards-merge`).
//!
//! A shuffle buffer keeps each output partition in memory until memory runs short, then spills
//! the partition's oldest batches to disk as *segments* of a spill run (the
//! `arrow-shards-spill` crate). When the partition is read, its rows are in two places: a
//! list of segments on disk and a list of batches still in memory. This crate reads both, in
//! the order the rows were written, without first flushing memory to disk, and hands the rows
//! over as Arrow batches of a useful size while keeping the memory it holds charged to a pool.
//!
//! Principal types, in the order data flows through them:
//! - [`PartitionSources`]: one partition's segments (as `SegmentRef`s, in spill order) and its
//!   memory batches (with the reservation that already pays for them).
//! - [`MergeOptions`]: target rows per output batch (default 8192) or pass-through, and how
//!   many segments the stream reads ahead (default 1), and optionally the [`ReadSlots`] that
//!   bound how many segment reads run at once across streams.
//! - [`Merger`]: the blocking reader: `Iterator<Item = Result<RecordBatch, ArrowError>>` and
//!   `arrow_array::RecordBatchReader`, plus [`Merger::concat`] for one batch.
//! - [`MergeStream`] ([`Merger::into_stream`]): the same batches as a `futures::Stream`, with
//!   segment reads on tokio's blocking threads, one task per segment.
//! - [`MergeError`]: merge-specific failures; a failed segment read reports the spill crate's
//!   `SpillError`. Both arrive wrapped in `ArrowError::ExternalError`.
//!
//! # Ordering
//! Rows come out exactly in the order of the sources: every segment in the order given (spill
//! order), each segment's batches in the order they were appended, then every memory batch in
//! the order given. A buffer that always spills a partition's oldest pending batches (and
//! never spills a batch while an older one stays in memory) therefore reads back rows in write
//! order. Coalescing only joins neighbouring rows; it never reorders.
//!
//! # Output batches and copies
//! With a target of `n` rows, small batches are copied into batches of exactly `n` rows by
//! arrow-select's `BatchCoalescer`, or, if the schema holds a dictionary, by concatenating them
//! with [`arrow_shards_spill::concat_batches`], which keeps each dictionary column's values as
//! written (the union of the inputs' dictionaries, each value once, unused ones kept). A batch that already has `n` rows or more is handed over
//! whole, without a copy (the coalescer alone would copy it into `n`-row pieces); rows buffered
//! before it come out first as one shorter batch. The last batch may be shorter, and so may a
//! batch cut short for memory: before reading a segment that would take a bounded pool past its
//! limit, the rows buffered so far are handed over, so that a merge holds at most one segment
//! past the limit. In pass-through mode nothing is copied: memory batches come out as the same
//! arrays. See [`Merger`] for the memory accounting, its bound and error behaviour.
//!
//! # Example
//! Spill two batches of partition 7, keep a third in memory, and read all three back:
//!
//! ```
//! use std::sync::Arc;
//!
//! use arrow_array::{Int64Array, RecordBatch};
//! use arrow_shards_memory::{MemoryPool, MemoryReservation, UnboundedPool, sizing::batch_memory_size};
//! use arrow_shards_merge::{MergeOptions, Merger, PartitionSources};
//! use arrow_shards_spill::{SpillDir, SpillOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let batch = |range: std::ops::Range<i64>| {
//!     let ids = Int64Array::from_iter_values(range);
//!     RecordBatch::try_from_iter([("id", Arc::new(ids) as _)])
//! };
//! let (a, b, c) = (batch(0..100)?, batch(100..250)?, batch(250..300)?);
//! let schema = a.schema();
//! let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedPool::new());
//!
//! // The buffer spilled the two oldest batches as one run...
//! let tmp = tempfile::tempdir()?;
//! let spill_dir = SpillDir::create(tmp.path())?;
//! let mut run = spill_dir.run_writer(schema.clone(), SpillOptions::default());
//! run.append(7, &[a, b])?;
//! let segments = run.finish()?;
//!
//! // ...and still holds the newest in memory, charged to the pool.
//! let mut charged = MemoryReservation::new(&pool);
//! charged.grow(batch_memory_size(&c));
//!
//! let sources = PartitionSources::new(schema)
//!     .with_segments(segments)
//!     .with_memory(vec![c], charged);
//! let merger = Merger::new(sources, MergeOptions::new(), Arc::clone(&pool));
//! let all = merger.concat()?;
//!
//! let ids = all.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
//! assert!(ids.values().iter().copied().eq(0..300));
//! assert_eq!(pool.reserved(), 0); // everything the merge held is released
//! spill_dir.close()?;
//! # Ok(())
//! # }
//! ```

// The arrow major (Cargo features `arrow_60`, the default, and `arrow_59`; see
// docs/arrow-versions.md): the chosen crates go by their usual names everywhere below.
#[cfg(all(feature = "arrow_59", feature = "arrow_60"))]
compile_error!(
    "arrow-shards-merge: the features `arrow_59` and `arrow_60` are both on; pick one arrow major (arrow 59: `default-features = false, features = [\"arrow_59\"]`)"
);
#[cfg(not(any(feature = "arrow_59", feature = "arrow_60")))]
compile_error!(
    "arrow-shards-merge: turn on one arrow major, the feature `arrow_60` (default) or `arrow_59`"
);
#[cfg(feature = "arrow_59")]
extern crate arrow_array_59 as arrow_array;
#[cfg(feature = "arrow_59")]
extern crate arrow_schema_59 as arrow_schema;
#[cfg(feature = "arrow_59")]
extern crate arrow_select_59 as arrow_select;

mod budget;
mod coalescer;
mod error;
mod input;
mod merger;
mod options;
mod output;
mod read_budget;
mod slots;
mod sources;
mod state;
mod stream;

pub use error::MergeError;
pub use merger::Merger;
pub use options::{DEFAULT_TARGET_ROWS, MergeOptions};
pub use read_budget::ReadBudget;
pub use slots::ReadSlots;
pub use sources::PartitionSources;
pub use stream::MergeStream;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send + 'static>() {}

    #[test]
    fn readers_can_move_between_threads_and_tasks() {
        assert_send::<Merger>();
        assert_send::<MergeStream>();
        assert_send::<PartitionSources>();
    }
}
