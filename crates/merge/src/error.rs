//! Errors raised by the merge itself (a failed segment read surfaces as the spill crate's
//! `SpillError`).

use std::path::PathBuf;

use arrow_schema::ArrowError;
use arrow_shards_spill::SchemaMismatch;
use thiserror::Error;

/// What went wrong while merging a partition, apart from reading a segment (which reports the
/// spill crate's [`SpillError`](arrow_shards_spill::SpillError) as is).
///
/// Both reach the caller wrapped in [`ArrowError::ExternalError`]; downcast the boxed error to
/// `SpillError` or `MergeError` to tell them apart.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MergeError {
    /// A batch does not conform to the partition's schema (the rule of
    /// [`check_schema`](arrow_shards_spill::check_schema)).
    #[error("{origin} does not match the partition's schema: {source}")]
    SchemaMismatch {
        /// Which input: "memory, batch 3", "segment 2 (partition 7, offset 0 of ...), batch 0".
        origin: String,
        /// The first field that differs, and how.
        source: SchemaMismatch,
    },
    /// The blocking task reading a segment panicked or was cancelled, so its batches are lost.
    #[error("reading segment at offset {offset} of {path} did not complete: {reason}")]
    ReadTask {
        /// The run file.
        path: PathBuf,
        /// The segment's offset in the file.
        offset: u64,
        /// The panic message or "cancelled".
        reason: String,
    },
    /// A segment read waited for room in the pool (see [`ReadBudget`](crate::ReadBudget)) and
    /// the pool released nothing for `stalled`: every other reader and spiller is stuck too.
    #[error(
        "reading a segment of {bytes} bytes waited {stalled:?} for memory with nothing released (pool: {reserved} of {limit} bytes reserved)"
    )]
    ReadStalled {
        /// The segment's `memory_bytes`.
        bytes: usize,
        /// The pool's reserved bytes when the read gave up.
        reserved: usize,
        /// The pool's limit.
        limit: usize,
        /// The stall timeout.
        stalled: std::time::Duration,
    },
    /// A bug in this crate: an invariant did not hold. Please report it.
    #[error("internal error in the merge: {0}")]
    Internal(String),
}

impl From<MergeError> for ArrowError {
    fn from(e: MergeError) -> Self {
        ArrowError::ExternalError(Box::new(e))
    }
}
