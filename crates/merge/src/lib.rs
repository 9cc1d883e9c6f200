//! Reading one partition back (package `arrow-shards-merge`): its spilled segments in spill
//! order, then its in-memory batches, as an Arrow `RecordBatchReader` or an async stream.
//!
//! Being built (issue 4): this crate has no public items yet.
