//! Memory accounting for arrow-shards: pools, self-releasing reservations, and the one function
//! that counts a batch's bytes.
//!
//! Everything that holds Arrow data on behalf of a shuffle (the buffer's memory tier, batches in
//! flight to disk, segments decoded on read) reserves its bytes from a [`MemoryPool`] through a
//! [`MemoryReservation`], which gives its bytes back when dropped. Bytes are counted by
//! **distinct allocation** ([`sizing`]): a 10-row slice of a large batch costs the allocation it
//! keeps alive, and an array used twice costs once.
//!
//! Principal types, in the order data meets them:
//! - [`sizing::batch_memory_size`]: the bytes a batch keeps alive, each allocation once.
//! - [`AllocationSet`]: the same count across many batches, so shards sliced from one input batch
//!   are charged once for the buffer as a whole.
//! - [`MemoryPool`] with [`BoundedPool`] and [`UnboundedPool`]; one pool may be shared by several
//!   buffers (several shuffles in one process share one budget).
//! - [`SpillPeers`]: the buffers that can spill on a pool, so that a spill takes the largest
//!   partition across all of them.
//! - [`MemoryReservation`]: `try_grow`, `grow`, `shrink`, `free`; releases on drop.
//! - [`ReleaseSignal`]: how waiters (async or blocking) learn that a pool has room again.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{Int32Array, RecordBatch};
//! use arrow_shards_memory::{BoundedPool, MemoryPool, MemoryReservation, sizing::batch_memory_size};
//!
//! let batch = RecordBatch::try_from_iter([(
//!     "a",
//!     Arc::new(Int32Array::from((0..1000).collect::<Vec<i32>>())) as _,
//! )])
//! .unwrap();
//! let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(1 << 20));
//! let mut reservation = MemoryReservation::new(&pool);
//! reservation.try_grow(batch_memory_size(&batch)).unwrap();
//! assert!(pool.reserved() >= 4000);
//! drop(reservation);
//! assert_eq!(pool.reserved(), 0);
//! ```

// The arrow major (Cargo features `arrow_60`, the default, and `arrow_59`; see
// docs/arrow-versions.md): the chosen crates go by their usual names everywhere below.
#[cfg(all(feature = "arrow_59", feature = "arrow_60"))]
compile_error!(
    "arrow-shards-memory: the features `arrow_59` and `arrow_60` are both on; pick one arrow major (arrow 59: `default-features = false, features = [\"arrow_59\"]`)"
);
#[cfg(not(any(feature = "arrow_59", feature = "arrow_60")))]
compile_error!(
    "arrow-shards-memory: turn on one arrow major, the feature `arrow_60` (default) or `arrow_59`"
);
#[cfg(feature = "arrow_59")]
extern crate arrow_array_59 as arrow_array;
#[cfg(feature = "arrow_59")]
extern crate arrow_buffer_59 as arrow_buffer;
#[cfg(feature = "arrow_59")]
extern crate arrow_data_59 as arrow_data;
#[cfg(all(test, feature = "arrow_59"))]
extern crate arrow_ipc_59 as arrow_ipc;
#[cfg(feature = "arrow_59")]
extern crate arrow_schema_59 as arrow_schema;

mod allocation_set;
mod error;
mod pool;
mod release_signal;
mod reservation;
pub mod sizing;
mod spill_peers;

pub use allocation_set::{AllocationSet, Exclusive};
pub use error::MemoryExhausted;
pub use pool::{BoundedPool, MemoryPool, UnboundedPool};
pub use release_signal::ReleaseSignal;
pub use reservation::MemoryReservation;
pub use spill_peers::{SpillPeer, SpillPeers};
