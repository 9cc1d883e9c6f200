//! A memory-first shuffle buffer for typed Arrow shards.
//!
//! Producers push Arrow [`RecordBatch`](arrow_array::RecordBatch)es tagged with an output
//! partition; the buffer keeps them in memory under a budget and hands each partition back
//! exactly once, in write order, without a global flush.
//!
//! The data flow, in the order a batch meets it:
//! 1. [`ShardBuffer::builder`] -> [`ShardBufferBuilder`] -> [`ShardBuffer`], a cheap `Clone`
//!    handle shared by every producer.
//! 2. [`ShardBuffer::write`] (async), [`ShardBuffer::write_blocking`], [`ShardBuffer::try_write`]:
//!    the batch is checked against the schema, sized by distinct allocation and charged to a
//!    [`MemoryPool`]. A refused write returns a [`WriteError`] that hands the batch back.
//!    [`ShardBuffer::write_partitioned`] (and its `_blocking`, `try_` forms), the entry point
//!    engines use, takes a whole batch with a partition id per row and writes all its rows or
//!    none; [`ShardBuffer::write_all`] and [`ShardBuffer::write_partitioned_all`] write a whole
//!    iterator or stream of batches and hand back what they could not write. Small writes are
//!    copied into per-partition open batches (compaction on write); a write too large for the
//!    whole budget goes to disk directly.
//! 3. [`ShardBuffer::seal`] one partition or [`ShardBuffer::finish`] them all.
//! 4. [`ShardBuffer::read`] -> [`PartitionReader`]: an Arrow `RecordBatchReader`, a `Stream`, or
//!    one batch via `concat`. Memory returns to the pool as batches are handed over. Or, while
//!    producers still write: [`ShardBuffer::subscribe`] -> [`SubscriptionStream`] (async) and
//!    [`ShardBuffer::subscribe_blocking`] -> [`SubscriptionReader`], which take a partition's
//!    batches as they are written and end when it is sealed or the buffer finished.
//! 5. [`ShardBuffer::close`] returns the final [`Metrics`] after checking the accounting.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Int64Array, RecordBatch};
//! use arrow_schema::{DataType, Field, Schema};
//! use arrow_shards::ShardBuffer;
//!
//! let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
//! let buffer = ShardBuffer::builder(schema.clone(), 4).with_memory_limit(1 << 20).build()?;
//!
//! // producers (any number of threads or tasks, each with a clone of `buffer`)
//! for k in 0..100i64 {
//!     let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![k]))])?;
//!     buffer.write_blocking((k % 4) as u32, batch)?;
//! }
//! buffer.finish()?;
//!
//! // the consumer: every partition exactly once
//! let mut rows = 0;
//! for partition in 0..4 {
//!     rows += buffer.read(partition)?.concat()?.num_rows();
//! }
//! assert_eq!(rows, 100);
//! assert!(buffer.read(0).is_err()); // a second read is an error
//! let metrics = buffer.close()?;
//! assert_eq!(metrics.rows_read, 100);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The arrow major (Cargo features `arrow_60`, the default, and `arrow_59`; see
// docs/arrow-versions.md): the chosen crates go by their usual names everywhere below.
#[cfg(all(feature = "arrow_59", feature = "arrow_60"))]
compile_error!(
    "arrow-shards: the features `arrow_59` and `arrow_60` are both on; pick one arrow major (arrow 59: `default-features = false, features = [\"arrow_59\"]`)"
);
#[cfg(not(any(feature = "arrow_59", feature = "arrow_60")))]
compile_error!(
    "arrow-shards: turn on one arrow major, the feature `arrow_60` (default) or `arrow_59`"
);
#[cfg(feature = "arrow_59")]
extern crate arrow_array_59 as arrow_array;
#[cfg(feature = "arrow_59")]
extern crate arrow_buffer_59 as arrow_buffer;
#[cfg(feature = "arrow_59")]
extern crate arrow_data_59 as arrow_data;
#[cfg(feature = "arrow_59")]
extern crate arrow_schema_59 as arrow_schema;
#[cfg(feature = "arrow_59")]
extern crate arrow_select_59 as arrow_select;

mod buffer;
mod builder;
mod compact;
mod config;
mod error;
#[cfg(any(test, feature = "test-utils"))]
pub mod fuzz;
mod grouping;
mod lanes;
mod leftovers;
mod metrics;
mod oversized;
mod read;
mod route;
mod scatter;
mod schema_check;
mod shard;
mod shared;
mod spiller;
mod state;
mod subscribe;
mod victims;
mod write;
mod write_all;

pub use arrow_shards_memory::{
    BoundedPool, MemoryExhausted, MemoryPool, MemoryReservation, ReleaseSignal, SpillPeer,
    SpillPeers, UnboundedPool,
};
pub use arrow_shards_spill::{Compression, SchemaMismatch, SpillError};
pub use buffer::ShardBuffer;
pub use builder::{
    DEFAULT_COMPACT_TARGET_BYTES, DEFAULT_COMPACT_TARGET_ROWS, DEFAULT_MAX_SPILL_ROUND_BYTES,
    DEFAULT_READ_BATCH_ROWS, DEFAULT_READ_STALL_TIMEOUT, DEFAULT_SPILL_SEGMENT_BYTES,
    DEFAULT_SPILL_TARGET, DEFAULT_SPILL_THRESHOLD, MAX_COMPACT_TARGET_BYTES, ShardBufferBuilder,
    default_max_concurrent_reads,
};
pub use config::MIN_SPILL_ROUND_BYTES;
pub use error::{ConfigError, Error, WriteError};
pub use grouping::{PartitionIds, RowsByPartition};
pub use metrics::Metrics;
pub use read::{PartitionReader, PartitionStream};
pub use shard::batch_cost;
pub use state::PartitionSize;
pub use subscribe::{SubscriptionReader, SubscriptionStream};
pub use write_all::{WriteAllError, Written};

/// The README's example, compiled and run as a doc test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
