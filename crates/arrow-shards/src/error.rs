//! Errors of the buffer. A refused write always hands its batch back ([`WriteError`]).

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;
use arrow_shards_spill::{SchemaMismatch, SpillError};
use thiserror::Error;

/// Why the buffer refused an operation.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum Error {
    /// The partition id is not in `0..num_partitions`.
    #[error("partition {partition} is out of range: the buffer has {num_partitions} partitions")]
    PartitionOutOfRange {
        /// The partition asked for.
        partition: u32,
        /// The buffer's partition count.
        num_partitions: u32,
    },
    /// A scatter write's partition ids are not one per row.
    #[error("the batch has {rows} rows but {ids} partition ids were given: one per row is needed")]
    PartitionIdsLength {
        /// Rows in the batch.
        rows: usize,
        /// Partition ids given.
        ids: usize,
    },
    /// A scatter write's partition id is null.
    #[error("the partition id of row {row} is null: every row needs a partition")]
    NullPartitionId {
        /// The first row whose id is null.
        row: usize,
    },
    /// A scatter write's partition id is not in `0..num_partitions`.
    #[error(
        "row {row} goes to partition {partition}, which is out of range: the buffer has {num_partitions} partitions"
    )]
    PartitionIdOutOfRange {
        /// The first row with a bad id.
        row: usize,
        /// Its id.
        partition: u32,
        /// The buffer's partition count.
        num_partitions: u32,
    },
    /// An Arrow kernel failed: on a batch the buffer accepted (copying it into an open batch,
    /// cutting one, reordering a scattered batch), or reading a partition back (coalescing).
    /// Data the schema check let in should never fail here: a bug in arrow-shards or arrow.
    #[error("arrow error: {0}")]
    Arrow(#[source] Arc<ArrowError>),
    /// The batch's schema does not match the buffer's (the workspace's one schema rule,
    /// [`arrow_shards_spill::check_schema`]); the mismatch names the field and both types.
    #[error("schema mismatch: {0}")]
    SchemaMismatch(#[source] Box<SchemaMismatch>),
    /// `finish()` was called: no more writes.
    #[error("the buffer is finished: no more writes are accepted")]
    Finished,
    /// `seal(partition)` was called: no more writes to it.
    #[error("partition {partition} is sealed: no more writes are accepted for it")]
    Sealed {
        /// The sealed partition.
        partition: u32,
    },
    /// The batch does not fit in the memory budget (and waiting is not allowed or timed out).
    #[error(
        "memory exhausted: the batch needs {needed} more bytes with {reserved} of {limit} bytes reserved"
    )]
    MemoryExhausted {
        /// Bytes the batch would add to the buffer's reservation.
        needed: usize,
        /// Bytes reserved in the pool when the write was refused.
        reserved: usize,
        /// The pool's limit.
        limit: usize,
    },
    /// `close()` was called.
    #[error("the buffer is closed")]
    Closed,
    /// The partition may not be read yet.
    #[error("partition {partition} is not complete: seal it or finish the buffer before reading")]
    NotComplete {
        /// The partition asked for.
        partition: u32,
    },
    /// The partition was already read; reads are exactly once.
    #[error("partition {partition} was already read: each partition is read exactly once")]
    AlreadyRead {
        /// The partition asked for.
        partition: u32,
    },
    /// Spilling to disk failed; spilling is paused and the batches it was writing stayed in
    /// memory. A write that would have to wait for room gets this with its batch back.
    #[error("spilling failed: {0}")]
    Spill(#[source] Arc<SpillError>),
    /// The buffer broke one of its own rules: a background thread died, a partition was
    /// already being spilled where it could not be, a rule checked with `debug_assert` in
    /// tests failed in a release build. Always a bug in arrow-shards; the batch is handed back.
    #[error("internal error: {0} (a bug in arrow-shards)")]
    Internal(&'static str),
    /// The bytes the pool holds for this buffer differ from the bytes its batches hold.
    /// This is a bug in arrow-shards; please report it.
    #[error(
        "internal accounting error: {reserved} bytes reserved but {held} bytes held (a bug in arrow-shards)"
    )]
    AccountingMismatch {
        /// Bytes the buffer's reservation holds.
        reserved: usize,
        /// Bytes its batches keep alive.
        held: usize,
    },
}

impl From<Error> for ArrowError {
    fn from(error: Error) -> Self {
        ArrowError::ExternalError(Box::new(error))
    }
}

/// A refused write: why, and the batch, handed back untouched.
#[derive(Debug, Clone, Error)]
#[error("write to partition {partition} refused: {error}")]
pub struct WriteError {
    partition: u32,
    #[source]
    error: Error,
    batch: RecordBatch,
}

impl WriteError {
    pub(crate) fn new(partition: u32, error: Error, batch: RecordBatch) -> Self {
        Self {
            partition,
            error,
            batch,
        }
    }

    /// Why the write was refused.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The partition the write was for.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The refused batch.
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// Takes the refused batch back.
    pub fn into_batch(self) -> RecordBatch {
        self.batch
    }

    /// Splits into the reason and the batch.
    pub fn into_parts(self) -> (Error, RecordBatch) {
        (self.error, self.batch)
    }
}

/// A builder setting that cannot work.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `num_partitions` was 0.
    #[error("num_partitions must be at least 1")]
    NoPartitions,
    /// Both a memory limit and a pool were given.
    #[error("with_memory_limit and with_memory_pool are exclusive: size the pool instead")]
    LimitAndPool,
    /// The spill directory could not be created.
    #[error("cannot create the spill directory: {0}")]
    SpillDir(#[source] Arc<SpillError>),
    /// The spiller thread could not be started.
    #[error("cannot start the spiller thread: {0}")]
    SpillerThread(#[source] Arc<std::io::Error>),
    /// The spill compression cannot be used (a ZSTD level out of range, say).
    #[error("with_compression = {value} is invalid: {source}")]
    InvalidCompression {
        /// The compression given.
        value: String,
        /// Why the IPC writer refuses it.
        #[source]
        source: Arc<ArrowError>,
    },
    /// Two settings contradict each other (or one needs another that is missing).
    #[error("{setting} conflicts with {other}: {why}")]
    Conflict {
        /// The setting that cannot apply.
        setting: &'static str,
        /// The setting it conflicts with (or that it needs).
        other: &'static str,
        /// What to do instead.
        why: &'static str,
    },
    /// A setting is outside its range.
    #[error("{setting} = {value} is invalid: {why}")]
    Invalid {
        /// The builder setting.
        setting: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        why: &'static str,
    },
}
