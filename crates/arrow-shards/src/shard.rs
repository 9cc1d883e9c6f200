//! What a write brings into the buffer: a whole batch to store as it is, a small batch to copy
//! into its partition's open batch, or a batch scattered over many partitions.

use std::sync::Arc;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_select::take::take_record_batch;
use arrow_shards_memory::MemoryReservation;
use arrow_shards_memory::sizing::{
    Allocation, batch_allocations, batch_data_bytes, batch_overhead,
};

use crate::compact::{CompactConfig, Direct};
use crate::error::Error;
use crate::route::Route;

/// A batch held in memory with the allocations it was charged for.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) batch: RecordBatch,
    pub(crate) allocations: Vec<Allocation>,
    /// The batch's own size (`batch_memory_size`), used for per-partition sizes and hand-over.
    pub(crate) size: usize,
    /// Fixed bytes it costs besides its allocations ([`batch_overhead`]), charged on their own.
    pub(crate) overhead: usize,
    /// The bytes of data its own rows hold ([`batch_data_bytes`]): what spilling it writes,
    /// and what `bytes_spilled` counts.
    pub(crate) data: usize,
}

impl Stored {
    /// Sizes `batch` by distinct allocation, with its fixed overhead.
    pub(crate) fn new(batch: RecordBatch) -> Self {
        let allocations = batch_allocations(&batch);
        let size = allocations.iter().map(|a| a.capacity).sum();
        let overhead = batch_overhead(&batch, allocations.len())
            + allocations.capacity() * std::mem::size_of::<Allocation>();
        Self {
            data: batch_data_bytes(&batch),
            batch,
            allocations,
            size,
            overhead,
        }
    }

    /// Sizes `slice`, `len` of the `parent_rows` rows of one reordered batch, by its share of
    /// the parent's allocations (which it shares with the other slices and which the buffer
    /// charges once): its `size` is that share, rounded up, not the whole parent's.
    pub(crate) fn share_of(slice: RecordBatch, parent_rows: usize) -> Self {
        let mut stored = Self::new(slice);
        let rows = stored.batch.num_rows();
        if parent_rows > 0 && rows < parent_rows {
            let share = (stored.size as u128 * rows as u128).div_ceil(parent_rows as u128);
            stored.size = usize::try_from(share).unwrap_or(stored.size);
        }
        stored
    }

    /// What spilling or reading it frees at most: its size and its overhead.
    pub(crate) fn cost(&self) -> usize {
        self.size + self.overhead
    }
}

/// The bytes a buffer charges for holding `batch` as written (a whole batch, not copied into an
/// open batch): its distinct allocations at their capacity plus its fixed overhead
/// ([`batch_overhead`](arrow_shards_memory::sizing::batch_overhead)). Shared allocations are
/// charged once per buffer, so several batches sharing a parent cost less than the sum.
pub fn batch_cost(batch: &RecordBatch) -> usize {
    Stored::new(batch.clone()).cost()
}

/// `batch`'s rows in `order`, with one `take`: the reordering copy of a scatter write.
pub(crate) fn reorder(batch: &RecordBatch, order: &UInt32Array) -> Result<RecordBatch, Error> {
    take_record_batch(batch, order).map_err(|e| Error::Arrow(Arc::new(e)))
}

/// A batch whose rows go to many partitions, grouped by partition.
#[derive(Debug)]
pub(crate) struct Scattered {
    /// The batch as written, handed back if the write is refused.
    pub(crate) original: RecordBatch,
    /// How its rows reach their partitions.
    pub(crate) rows: Grouped,
    /// `(partition, start, len)`, ascending by partition, no empty range; `start` is the
    /// range's first row in the grouped order (a [`Grouped::Sorted`] batch).
    pub(crate) ranges: Vec<(u32, usize, usize)>,
}

impl Scattered {
    /// Replaces how the rows reach their partitions by what `f` makes of them, given the batch
    /// as written; the error hands that batch back.
    pub(crate) fn map_rows<E>(
        self: Box<Self>,
        f: impl FnOnce(&RecordBatch, Grouped) -> Result<Grouped, E>,
    ) -> Result<Box<Self>, (E, RecordBatch)> {
        let Scattered {
            original,
            rows,
            ranges,
        } = *self;
        match f(&original, rows) {
            Ok(rows) => Ok(Box::new(Scattered {
                original,
                rows,
                ranges,
            })),
            Err(e) => Err((e, original)),
        }
    }
}

/// The two ways a scattered batch's rows reach their partitions (see [`crate::scatter`] and
/// [`crate::route`]).
#[derive(Debug)]
pub(crate) enum Grouped {
    /// Reordered so each partition's rows are one range, copied into its open batch or kept
    /// as a slice, as its route says.
    Sorted(Sorted),
    /// A reordered batch whose copy was let go while its write waits for room
    /// ([`crate::scatter::park`]); gathered again before the write's next try.
    Parked(Parked),
    /// Left in place and copied row by row into the open batches, with these settings.
    Direct(Direct, CompactConfig),
}

/// A scattered batch reordered by partition (or, with one partition, the batch as written).
#[derive(Debug)]
pub(crate) struct Sorted {
    /// The rows, each partition's one range.
    pub(crate) batch: RecordBatch,
    /// Each range's route, in range order.
    pub(crate) routes: Vec<Route>,
    /// The reordered copy's own allocations ([`copied`](Self::copied)), charged to the pool
    /// from the gather until the insert takes them over (nothing when no copy was made);
    /// released if the write is dropped.
    pub(crate) charge: MemoryReservation,
    /// The allocations the gather made (not shared with the batch as written), by address.
    pub(crate) copied: Vec<Allocation>,
    /// The gather's indices into the batch as written (`None`: the batch as written, one
    /// partition), kept so that the copy can be let go while the write waits.
    pub(crate) order: Option<UInt32Array>,
}

/// What a waiting reordered write keeps of its copy: the order to gather it again, 4 bytes a
/// row, uncharged like the ids a scatter write is given and the tags of [`Grouped::Direct`].
#[derive(Debug)]
pub(crate) struct Parked {
    pub(crate) order: UInt32Array,
    pub(crate) routes: Vec<Route>,
    /// Whether the copy is charged when gathered again.
    pub(crate) charged: bool,
}

/// One write's rows on their way in.
#[derive(Debug)]
pub(crate) enum Shard {
    /// Stored as it is (at or above the compaction target, or compaction off).
    Whole(Stored),
    /// Copied into its partition's open batch, with these settings.
    Small(RecordBatch, CompactConfig),
    /// Spread over many partitions.
    Scattered(Box<Scattered>),
}

/// One partition's rows of a write that goes to disk whole (see [`Shard::into_parts`]).
pub(crate) type Part = (u32, Stored);

impl Shard {
    /// The batch as the caller wrote it.
    pub(crate) fn into_batch(self) -> RecordBatch {
        match self {
            Shard::Whole(stored) => stored.batch,
            Shard::Small(batch, _) => batch,
            Shard::Scattered(s) => s.original,
        }
    }

    /// The write's rows as one batch per partition, ascending by partition (a `Whole` or
    /// `Small` shard is all `partition`'s), with the batch as written to hand back if the
    /// write fails. A scattered batch copied in place is reordered here (one `take`).
    pub(crate) fn into_parts(
        self,
        partition: u32,
    ) -> Result<(Vec<Part>, RecordBatch), (Error, RecordBatch)> {
        match self {
            Shard::Whole(stored) => {
                let original = stored.batch.clone();
                Ok((vec![(partition, stored)], original))
            }
            Shard::Small(batch, _) => Ok((vec![(partition, Stored::new(batch.clone()))], batch)),
            Shard::Scattered(scattered) => {
                let Scattered {
                    original,
                    rows,
                    ranges,
                } = *scattered;
                let sorted = match rows {
                    Grouped::Sorted(sorted) => Ok(sorted.batch),
                    Grouped::Parked(parked) => reorder(&original, &parked.order),
                    Grouped::Direct(direct, _) => {
                        reorder(&original, &UInt32Array::from(direct.order(&ranges)))
                    }
                };
                let sorted = match sorted {
                    Ok(sorted) => sorted,
                    Err(e) => return Err((e, original)),
                };
                let parts = ranges
                    .iter()
                    .map(|&(p, start, len)| {
                        (
                            p,
                            Stored::share_of(sorted.slice(start, len), sorted.num_rows()),
                        )
                    })
                    .collect();
                Ok((parts, original))
            }
        }
    }
}
