//! Input batches with the bytes that pay for them.
//!
//! Both kinds of input, a decoded segment and a group of memory batches, are a queue of batches
//! plus one reservation covering their distinct allocations. Taking a batch off the queue splits
//! off the bytes that batch was the last user of, so the charge travels with the batch until it
//! is handed over, and an allocation shared by several batches (slices of one input, one IPC
//! body) stays charged until the last of them leaves.

use std::collections::VecDeque;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_memory::sizing::{Allocation, batch_allocations};
use arrow_shards_memory::{AllocationSet, MemoryReservation};
use arrow_shards_spill::{SegmentRef, conform_batch};

use crate::MergeError;
use crate::read_budget::{Overdraft, Reserved};

/// A batch and the reservation to drop when it is handed over (with the read budget's
/// overdraft, if the batch is the last of a segment that needed it).
#[derive(Debug)]
pub(crate) struct Charged {
    pub(crate) batch: RecordBatch,
    pub(crate) charge: MemoryReservation,
    pub(crate) overdraft: Option<Overdraft>,
}

/// A queue of batches charged to one reservation.
#[derive(Debug)]
pub(crate) struct ChargedBatches {
    batches: VecDeque<(RecordBatch, Vec<Allocation>)>,
    allocations: AllocationSet,
    reservation: MemoryReservation,
    /// Names the input in errors.
    origin: Origin,
    /// Index of the next batch, for error messages.
    next_index: usize,
    schema: SchemaRef,
    /// The read budget's overdraft, if this segment needed it: it goes with the last batch
    /// (given back when that batch is handed over), or when the queue is dropped.
    overdraft: Option<Overdraft>,
}

impl ChargedBatches {
    /// Memory batches, already charged to `reservation` by the caller.
    pub(crate) fn memory(
        batches: Vec<RecordBatch>,
        known: Option<Vec<Vec<Allocation>>>,
        reservation: MemoryReservation,
        schema: &SchemaRef,
    ) -> Self {
        Self::new(batches, known, reservation, Origin::Memory, schema)
    }

    /// Reads and decodes one segment (blocking). `reserved` holds what was reserved before
    /// the read (the segment's `memory_bytes`), and the overdraft if that needed it; the
    /// reservation is adjusted to the decoded batches' real size.
    pub(crate) fn read_segment(
        segment: &SegmentRef,
        index: usize,
        reserved: Reserved,
        schema: &SchemaRef,
    ) -> Result<Self, ArrowError> {
        let (reservation, overdraft) = reserved;
        let batches = segment
            .read()
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
        let origin = Origin::Segment(index, segment.clone());
        let mut decoded = Self::new(batches, None, reservation, origin, schema);
        decoded.overdraft = overdraft;
        let real = decoded.allocations.bytes();
        let held = decoded.reservation.size();
        if real > held {
            // `grow`, not `try_grow`: reading is what frees memory, so it must not wait for it.
            decoded.reservation.grow(real - held);
        } else {
            decoded.reservation.shrink(held - real);
        }
        Ok(decoded)
    }

    /// `known`, if given, lists each batch's allocations (as the caller already computed them),
    /// in the order of `batches`, so they are not walked again.
    fn new(
        batches: Vec<RecordBatch>,
        known: Option<Vec<Vec<Allocation>>>,
        reservation: MemoryReservation,
        origin: Origin,
        schema: &SchemaRef,
    ) -> Self {
        let mut allocations = AllocationSet::new();
        // Nothing charged (and no decoded segment, whose reservation is at least its
        // `memory_bytes` estimate) means nothing to release: skip listing allocations.
        let track = reservation.size() > 0 || matches!(origin, Origin::Segment(..));
        let mut known = known.map(Vec::into_iter);
        let batches = batches
            .into_iter()
            .map(|b| (b, known.as_mut().and_then(Iterator::next)))
            .filter(|(b, _)| b.num_rows() > 0)
            .map(|(b, given)| {
                let allocs = match given {
                    _ if !track => Vec::new(),
                    Some(given) => given,
                    None => batch_allocations(&b),
                };

                allocations.insert(&allocs);
                (b, allocs)
            })
            .collect();
        Self {
            batches,
            allocations,
            reservation,
            origin,
            next_index: 0,
            schema: SchemaRef::clone(schema),
            overdraft: None,
        }
    }

    /// True if every batch has been taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Takes the next batch with the bytes it releases; the last batch also takes whatever the
    /// reservation holds beyond the batches' allocations. The batch must conform to the
    /// partition's schema (the spill crate's rule, [`conform_batch`]) and comes out re-labelled
    /// with it.
    pub(crate) fn next(&mut self) -> Option<Result<Charged, ArrowError>> {
        let (batch, allocs) = self.batches.pop_front()?;
        let index = self.next_index;
        self.next_index += 1;
        let freed = self.allocations.remove(&allocs);
        let mut charge = self.reservation.split(freed);
        let mut overdraft = None;
        if self.batches.is_empty() {
            charge.merge(self.reservation.split(self.reservation.size()));
            overdraft = self.overdraft.take();
        }
        match conform_batch(&self.schema, batch) {
            Ok(batch) => Some(Ok(Charged {
                batch,
                charge,
                overdraft,
            })),
            Err((source, _)) => Some(Err(MergeError::SchemaMismatch {
                origin: format!("{}, batch {index}", self.origin),
                source,
            }
            .into())),
        }
    }
}

/// Where a queue of batches came from.
#[derive(Debug)]
enum Origin {
    Memory,
    /// The segment's index in read order, and the segment.
    Segment(usize, SegmentRef),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Memory => f.write_str("memory"),
            Origin::Segment(index, segment) => write!(
                f,
                "segment {index} (partition {}, offset {} of {})",
                segment.partition(),
                segment.offset(),
                segment.path().display()
            ),
        }
    }
}
