//! Checksummed Arrow IPC spill runs (package `arrow-shards-spill`).
//!
//! When the buffer runs short of memory it writes its largest partitions to disk as one *run*:
//! an append-only file holding one framed, CRC32C-checked Arrow IPC stream (*segment*) per
//! partition, and returns a `SegmentRef` per segment for the caller's index.
//!
//! Being built (issue 3): this crate has no public items yet.
