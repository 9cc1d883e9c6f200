//! Checksummed Arrow IPC spill runs (package `arrow-shards-spill`).
//!
//! When a shuffle buffer runs short of memory it writes its largest partitions to disk in one
//! go, a *run*: one append-only file opening with the run's schema, then holding one *segment*
//! per partition. A segment is the partition's Arrow IPC dictionary and record batch messages,
//! decoded with the run's schema, framed by our own header and trailer, which carry the
//! partition id, the lengths and a CRC32C. Writing a
//! run returns a [`SegmentRef`] per segment; the caller keeps them as its index and reads each
//! partition back with [`SegmentRef::read`], which verifies the checksum before decoding
//! anything. The byte layout is in `docs/spill-format.md`.
//!
//! The principal types, in the order data flows through them:
//! - [`SpillDir`]: a private directory (mode 0700, unique name, owner marker) under a root such
//!   as `std::env::temp_dir()`. It names files by a counter, counts [`SpillMetrics`], and is
//!   removed on [`SpillDir::close`] or drop; [`sweep`] removes those of crashed processes.
//! - [`SpillStorage`]: where run files live, the sealed trait over [`SpillDir`] (optionally
//!   with a byte quota, [`SpillDir::create_with_quota`]) and, with feature `object-store`,
//!   `ObjectStoreSpill`: one object per run file in S3 or any `object_store::ObjectStore`,
//!   a segment read with one ranged GET (`docs/spill-format.md`). [`run_writer`] starts a run
//!   in either.
//! - [`SpillOptions`] and [`Compression`]: compression, coalescing of small batches (8192
//!   rows by default), file rotation size.
//! - [`RunWriter`]: [`append`](RunWriter::append) one segment per partition, then
//!   [`finish`](RunWriter::finish). A run is all or nothing: on error no segment is
//!   registered, the files are removed, and the caller still holds its batches.
//! - [`SegmentRef`]: where a segment is and what it holds (rows, batches, in-memory bytes,
//!   checksum). A run file is deleted when the last `SegmentRef` into it is dropped.
//! - [`SpillError`]: every error names its path; a full disk is [`SpillError::DiskFull`], bad
//!   bytes are [`SpillError::Corrupt`].
//!
//! Beside them, what the layers above share so that it exists once: the schema rule
//! ([`check_schema`], [`conform_batch`], [`SchemaMismatch`]) that the writer, the reader, the
//! merge and the buffer all apply; the concatenation that keeps dictionaries as written
//! ([`concat()`], [`concat_batches`]) that compaction, the writer's coalescing and the merge
//! use; the full-disk test [`is_disk_full`]; [`panic_message`].
//! With feature `test-utils`, `FaultPlan` injects filesystem faults and the `fuzz` module holds
//! the logic of the decode fuzz targets.
//!
//! Resources stay bounded: a writer holds one file descriptor, a read opens, reads and closes
//! its file, so 10,000 partitions in a run cost one file, not 10,000.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch, StringArray};
//! use arrow_shards_spill::{Compression, SpillDir, SpillOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! # let root = tmp.path();
//! // let root = std::env::temp_dir();
//! let dir = SpillDir::create(root)?;
//! let batch = RecordBatch::try_from_iter([
//!     ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as _),
//!     ("name", Arc::new(StringArray::from(vec!["a", "b", "c"])) as _),
//! ])?;
//!
//! // one run holding two partitions
//! let options = SpillOptions::default().with_compression(Compression::Lz4);
//! let mut writer = dir.run_writer(batch.schema(), options);
//! writer.append(7, &[batch.clone()])?;
//! writer.append(9, &[batch.slice(1, 2)])?;
//! let segments = writer.finish()?;
//! assert_eq!(segments.len(), 2);
//! assert_eq!(segments[0].path(), segments[1].path()); // same file
//!
//! // read partition 9 back
//! let read = segments[1].read()?;
//! assert_eq!(segments[1].partition(), 9);
//! assert_eq!(read, vec![batch.slice(1, 2)]);
//! assert_eq!(dir.metrics().segments, 2);
//!
//! drop(segments); // the run file is deleted here
//! assert_eq!(dir.metrics().files, 0);
//! dir.close()?;
//! # Ok(())
//! # }
//! ```

// The arrow major (Cargo features `arrow_60`, the default, and `arrow_59`; see
// docs/arrow-versions.md): the chosen crates go by their usual names everywhere below.
#[cfg(all(feature = "arrow_59", feature = "arrow_60"))]
compile_error!(
    "arrow-shards-spill: the features `arrow_59` and `arrow_60` are both on; pick one arrow major (arrow 59: `default-features = false, features = [\"arrow_59\"]`)"
);
#[cfg(not(any(feature = "arrow_59", feature = "arrow_60")))]
compile_error!(
    "arrow-shards-spill: turn on one arrow major, the feature `arrow_60` (default) or `arrow_59`"
);
#[cfg(feature = "arrow_59")]
extern crate arrow_array_59 as arrow_array;
#[cfg(feature = "arrow_59")]
extern crate arrow_buffer_59 as arrow_buffer;
#[cfg(feature = "arrow_59")]
extern crate arrow_data_59 as arrow_data;
#[cfg(feature = "arrow_59")]
extern crate arrow_ipc_59 as arrow_ipc;
#[cfg(feature = "arrow_59")]
extern crate arrow_schema_59 as arrow_schema;
#[cfg(feature = "arrow_59")]
extern crate arrow_select_59 as arrow_select;

mod concat;
mod decode;
mod dir;
mod error;
mod format;
mod fs;
#[cfg(any(test, feature = "test-utils"))]
pub mod fuzz;
mod ipc_checks;
mod metrics;
#[cfg(feature = "object-store")]
mod object_spill;
mod options;
mod panic;
mod read;
mod schema;
mod schema_message;
mod segment;
mod storage;
mod sweep;
mod unchecked;
mod views;
mod writer;

pub use concat::{concat, concat_batches, has_dictionary};
pub use dir::SpillDir;
pub use error::{SpillError, is_disk_full};
#[cfg(any(test, feature = "test-utils"))]
pub use fs::{FaultPlan, FsOp};
pub use metrics::SpillMetrics;
#[cfg(feature = "object-store")]
pub use object_spill::{DEFAULT_PART_BYTES, MAX_PARTS_IN_FLIGHT, ObjectStoreSpill};
/// The `object_store` crate this one is built on (feature `object-store`).
#[cfg(feature = "object-store")]
pub use object_store;
pub use options::{
    Compression, DEFAULT_COALESCE_ROWS, DEFAULT_COMPRESS_MIN_BYTES, DEFAULT_MAX_FILE_BYTES,
    SpillOptions,
};
pub use panic::panic_message;
pub use schema::{SchemaMismatch, check_schema, conform_batch};
pub use segment::SegmentRef;
pub use storage::SpillStorage;
pub use sweep::{SweepReport, sweep};
pub use unchecked::{CopiedBytes, CopiedViews};
pub use views::compact_views;
pub use writer::{RunWriter, run_writer};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_can_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<SpillDir>();
        send_sync::<SegmentRef>();
        send_sync::<SpillError>();
        send::<RunWriter>();
    }
}
