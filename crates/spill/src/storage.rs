//! [`SpillStorage`]: where run files are kept. Two implementations: a private local directory
//! ([`SpillDir`](crate::SpillDir)) and, with feature `object-store`, an object store
//! (`ObjectStoreSpill`: one object per run file).
//!
//! The trait is sealed: its working half ([`sealed::Storage`]) speaks the crate's private types
//! (the index entry a read is checked against, the metric counters), so the frame, the CRC32C
//! checks and the decoder stay in one place whatever the storage. A [`RunWriter`] ([`run_writer`]) writes
//! through a `RunSink` the storage hands out, and a run file's last
//! [`SegmentRef`](crate::SegmentRef) asks the storage to remove it.
//!
//! # Locking
//!
//! None here; each implementation documents its own (neither holds a lock across I/O).
//!
//! [`RunWriter`]: crate::RunWriter
//! [`run_writer`]: crate::run_writer

use std::fmt::Debug;
use std::io::IoSlice;
use std::path::Path;

use arrow_array::RecordBatch;

use crate::error::SpillError;
use crate::metrics::SpillMetrics;

/// Where spill runs are stored: a local directory ([`SpillDir`](crate::SpillDir)) or, with
/// feature `object-store`, an object store (`ObjectStoreSpill`).
///
/// Shared as `Arc<dyn SpillStorage>` by run writers and segments. Sealed: the implementations
/// are this crate's.
pub trait SpillStorage: sealed::Storage + Debug + Send + Sync + 'static {
    /// The directory's path or the store's URL prefix (as a path), named in errors.
    fn location(&self) -> &Path;

    /// A snapshot of the storage's counters.
    fn metrics(&self) -> SpillMetrics;

    /// Removes every run of this storage (and the storage's own directory or prefix).
    /// Idempotent. Afterwards run writers and reads fail with [`SpillError::Closed`].
    fn close(&self) -> Result<(), SpillError>;

    /// True once [`SpillStorage::close`] was called.
    fn is_closed(&self) -> bool;
}

pub(crate) mod sealed {
    use super::*;

    use crate::decode::{Fault, IndexEntry};
    use crate::metrics::Counters;

    /// A run file being written, handed out by [`sealed::Storage::create_run`].
    pub trait RunSink: Debug + Send {
        /// Appends all of `bytes`.
        fn write_all(&mut self, bytes: &[u8]) -> Result<(), SpillError>;

        /// Appends all of `slices`, in order (advancing them past what was written).
        fn write_all_vectored(&mut self, slices: &mut [IoSlice<'_>]) -> Result<(), SpillError>;

        /// Makes everything appended durable in the storage (a local file is synced if `sync`; an
        /// object is uploaded and completed). Once this returns `Ok`, reads of the file succeed.
        fn finish(&mut self, sync: bool) -> Result<(), SpillError>;
    }

    /// The working half of [`SpillStorage`](super::SpillStorage).
    #[expect(
        private_interfaces,
        reason = "sealed: the working half of `SpillStorage` speaks the crate's private types"
    )]
    pub trait Storage {
        /// The storage's counters.
        fn counters(&self) -> &Counters;

        /// Creates a new run file: its location (a path, or the object's URL as a path) and a
        /// sink that writes it. The file counts as existing from here on.
        fn create_run(&self) -> Result<(std::path::PathBuf, Box<dyn RunSink>), SpillError>;

        /// Reads the bytes of segment `entry` of run file `location` and verifies and decodes
        /// them.
        fn read_segment(
            &self,
            location: &Path,
            entry: &IndexEntry,
        ) -> Result<Vec<RecordBatch>, Fault>;

        /// Removes run file `location` (its last segment was dropped); best effort, never
        /// blocks on the network.
        fn remove_run(&self, location: &Path);

        /// Whether segments written here may be decoded without validating their arrays again
        /// once their CRC32C matches: true for a private directory, false for an object store
        /// (whose bytes anyone with write access to the bucket could replace with a matching
        /// CRC).
        fn trusted(&self) -> bool;

        /// The error for a use after close.
        fn closed_error(&self) -> SpillError;
    }
}
