//! Reading one partition back (package `arrow-shards-merge`): its spilled segments in spill
//! order, then its in-memory batches, as an Arrow `RecordBatchReader` or an async stream.
//!
//! Docs being written.

mod error;
mod input;
mod merger;
mod options;
mod output;
mod sources;
mod state;
mod stream;

pub use error::MergeError;
pub use merger::Merger;
pub use options::{DEFAULT_TARGET_ROWS, MergeOptions};
pub use sources::PartitionSources;
pub use stream::MergeStream;
