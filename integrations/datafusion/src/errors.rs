//! The buffer's errors as DataFusion errors (the other way, DataFusion's refusals as the
//! buffer's `MemoryExhausted`, is in `pool.rs`).
//!
//! A refusal for memory becomes `ResourcesExhausted`, the error DataFusion's own operators give
//! when a memory limit is too small, so callers that handle one handle both; everything else
//! is `External`, keeping the buffer's error as the source.

use arrow_shards::{Error, WriteError};
use datafusion::error::DataFusionError;

/// The buffer's error as a DataFusion error.
///
/// ```
/// use arrow_shards::Error;
/// use arrow_shards_datafusion::to_datafusion_error;
/// use datafusion::error::DataFusionError;
///
/// let refused = Error::MemoryExhausted { needed: 10, reserved: 95, limit: 100 };
/// let error = to_datafusion_error(refused);
/// assert!(matches!(error, DataFusionError::ResourcesExhausted(_)));
/// assert!(error.to_string().contains("ShardRepartitionExec"));
/// ```
pub fn to_datafusion_error(error: Error) -> DataFusionError {
    match error {
        Error::MemoryExhausted { .. } => DataFusionError::ResourcesExhausted(format!(
            "ShardRepartitionExec's shuffle buffer: {error}; raise the session's memory limit or \
             let the buffer spill (a disk manager with a directory)"
        )),
        other => DataFusionError::External(Box::new(other)),
    }
}

/// A refused write as a DataFusion error. The batch it hands back is dropped with the query
/// the error fails; nothing reads a failed exchange's output.
pub(crate) fn write_error(error: WriteError) -> DataFusionError {
    let partition = error.partition();
    let (error, _batch) = error.into_parts();
    to_datafusion_error(error).context(format!(
        "ShardRepartitionExec: writing to output partition {partition}"
    ))
}
