//! [`SegmentRef`]: the caller's handle to one partition's segment in a run file, and the run
//! file handle that deletes the file when the last reference goes.
//!
//! # Locking
//!
//! None. A `SegmentRef` is immutable; the shared [`RunFile`] only does atomic metric updates
//! and, on its last drop, removes its file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::decode::IndexEntry;
use crate::error::SpillError;
use crate::metrics::{add, sub};
use crate::read::read_segment;
use crate::storage::SpillStorage;

/// One run file. Shared by the writer and every segment in it; its last drop removes the file.
#[derive(Debug)]
pub(crate) struct RunFile {
    pub(crate) dir: Arc<dyn SpillStorage>,
    /// The file's path, or the object's URL as a path.
    pub(crate) path: PathBuf,
    /// Bytes written to the file so far (as counted in the storage's `bytes_on_disk`).
    size: AtomicU64,
}

impl RunFile {
    /// Registers a newly created file with the directory's metrics.
    pub(crate) fn new(dir: Arc<dyn SpillStorage>, path: PathBuf) -> Self {
        add(&dir.counters().files, 1);
        add(&dir.counters().files_created, 1);
        Self {
            dir,
            path,
            size: AtomicU64::new(0),
        }
    }

    /// Records `bytes` more written to the file.
    pub(crate) fn grew(&self, bytes: u64) {
        self.size.fetch_add(bytes, Ordering::Relaxed);
        add(&self.dir.counters().bytes_on_disk, bytes);
        add(&self.dir.counters().bytes_written, bytes);
    }
}

impl Drop for RunFile {
    fn drop(&mut self) {
        // After `close` the file is already gone; any other failure leaves the file to the
        // storage's removal at close.
        self.dir.remove_run(&self.path);
        sub(&self.dir.counters().files, 1);
        sub(
            &self.dir.counters().bytes_on_disk,
            self.size.load(Ordering::Relaxed),
        );
    }
}

#[derive(Debug)]
pub(crate) struct SegmentInner {
    pub(crate) file: Arc<RunFile>,
    /// What the reader checks the segment's bytes against.
    pub(crate) entry: IndexEntry,
    pub(crate) memory_bytes: usize,
}

/// Where one partition's spilled batches are: a byte range of a run file, with what it holds.
///
/// Cheap to clone (one `Arc`), `Send + Sync`. The run file is deleted when the last
/// `SegmentRef` into it (and its writer) is dropped.
#[derive(Clone, Debug)]
pub struct SegmentRef {
    pub(crate) inner: Arc<SegmentInner>,
}

impl SegmentRef {
    /// The partition id given to [`RunWriter::append`](crate::RunWriter::append).
    pub fn partition(&self) -> u32 {
        self.inner.entry.partition
    }

    /// The run file holding the segment: its path, or its object's URL as a path.
    pub fn path(&self) -> &Path {
        &self.inner.file.path
    }

    /// Byte offset of the segment (its header) in the file.
    pub fn offset(&self) -> u64 {
        self.inner.entry.offset
    }

    /// Length of the segment in bytes, header and trailer included.
    pub fn len(&self) -> u64 {
        self.inner.entry.len
    }

    /// Always false: a segment has at least its 48-byte frame. See
    /// [`SegmentRef::rows`] for whether it holds data.
    pub fn is_empty(&self) -> bool {
        self.inner.entry.len == 0
    }

    /// Rows in the segment.
    pub fn rows(&self) -> u64 {
        self.inner.entry.rows
    }

    /// Record batches (IPC messages) in the segment, after coalescing.
    pub fn batches(&self) -> u64 {
        self.inner.entry.batches
    }

    /// In-memory bytes of the batches that were appended: the distinct allocations they
    /// referenced, each counted once at its capacity (as `arrow_shards_memory::sizing` counts
    /// them, so a slice counts its whole parent allocation).
    pub fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes
    }

    /// The CRC32C stored in the segment's trailer.
    pub fn checksum(&self) -> u32 {
        self.inner.entry.checksum
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.inner.entry.schema
    }

    /// Reads the segment back (blocking): reads exactly its bytes, verifies the checksum, then
    /// decodes each IPC message from its own allocation, so a returned batch keeps alive only
    /// its own message, never the whole segment.
    ///
    /// Bytes that fail verification give [`SpillError::Corrupt`]; nothing is decoded from them.
    pub fn read(&self) -> Result<Vec<RecordBatch>, SpillError> {
        let inner = &self.inner;
        read_segment(&*inner.file.dir, &inner.file.path, &inner.entry)
    }
}
