//! Compaction on write: small shards of one partition are copied into that partition's *open
//! batch*, which is cut into an ordinary stored batch when it reaches the target rows or bytes
//! (or when the partition is spilled, read or drained).
//!
//! Why: an engine's shards are often a few rows (8192-row batches over 1024 partitions give
//! 8-row shards), and every stored batch costs fixed overheads (array and buffer headers,
//! allocator rounding, the buffer's own bookkeeping) and a per-batch price in every later phase
//! (spill encoding, decoding, merging). Copying small shards into a few large batches makes the
//! cost per row independent of the shard size. Shards at or above the target pass through whole,
//! without a copy.
//!
//! An open batch is charged at the capacity of its buffers ([`OpenBatch::bytes`]), which grow
//! by doubling from 64 bytes (capped at what the cut batch will hold), so 4096 partitions of
//! open batches cost what their rows cost, not 4096 full-size batches. Growth is charged before
//! it is made ([`OpenBatch::growth`]) so that a write either fits whole or is refused whole.
//!
//! A partition's next open batch starts where its last one left off, at a quarter of it
//! ([`Start`]): its first allocations take a quarter of the rows (and of each column's
//! variable-length bytes) the last cut batch held, so a partition that is spilled or cut again
//! and again (4096 partitions under a small limit are cut at a few dozen KiB each, dozens of
//! times) regrows in two doublings instead of six or more reallocations and copies from 64 bytes.
//! Those allocations are made, and charged, only at the next append; the quarter keeps a
//! just-spilled partition's unused capacity small.
//!
//! Data copied into an open batch has been validated by the schema check on write.
//!
//! The files, in the order a write meets them (each imports only those after it):
//!
//! - `direct.rs`: a scattered batch's rows tagged with their ranges (the copy in place);
//! - `batch.rs`: the open batch, its cut policy ([`CompactConfig`]), which column types it
//!   copies itself ([`is_flat`]; which writes are copied is `crate::route`'s rule) and its
//!   appends;
//! - `copy.rs`: rows copied into open columns, a range or tagged rows, with one set of kernels;
//! - `column.rs`: one open column, its charge, growth and cut;
//! - `sizing.rs`: how a column's buffers grow; `measure.rs`: what a written array's rows bring.
//!
//! This file only declares them and re-exports what the rest of the crate uses.

mod batch;
mod column;
mod copy;
mod direct;
mod measure;
mod sizing;

pub(crate) use batch::{CompactConfig, OpenBatch, Start, is_flat};
pub(crate) use direct::{Direct, copy_rows};
pub(crate) use measure::copy_bytes;
