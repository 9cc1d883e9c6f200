//! What the buffer holds: per partition, its batches in memory, its spilled segments, and its
//! lifecycle flags.
//!
//! # Per-partition states
//! Batches of one partition move through: **in memory** (`batches[in_flight.count..]`, in the
//! victim index) -> **being spilled** (`batches[..in_flight.count]`: still in memory, still
//! charged and readable) -> **on disk** (`segments`, memory released) -> **read** (everything
//! handed to one reader). A read while a spill of the same partition is running takes the
//! in-flight batches back from memory and voids the spill's ticket, so the segment that spill
//! produces is dropped: no loss, no duplicate.
//!
//! # Locking
//! All of it lives in one `Mutex<State>` inside the buffer ([`crate::ShardBuffer`]). The lock is
//! held only for bookkeeping: pushing or taking batches, the allocation set, the victim index,
//! and growing or shrinking the reservation (an atomic on the pool, plus the pool's
//! release-signal mutex when shrinking: lock order `State` -> `ReleaseSignal`). It is never held
//! across I/O, a spawn, a channel send or a wait, and nothing that may delete a file (a
//! `SegmentRef`) is dropped under it: such values are handed out to be dropped after unlock.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_shards_memory::sizing::Allocation;
use arrow_shards_memory::{AllocationSet, MemoryReservation};
use arrow_shards_spill::{SegmentRef, SpillError};

use crate::Error;
use crate::spiller::policy::LargestFirst;

/// Batches with their own sizes, as handed to the spiller.
pub(crate) type SizedBatches = Vec<(RecordBatch, usize)>;

/// A batch held in memory with the allocations it was charged for.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) batch: RecordBatch,
    pub(crate) allocations: Vec<Allocation>,
    /// The batch's own size (`batch_memory_size`), used for per-partition sizes and hand-over.
    pub(crate) size: usize,
}

/// A prefix of a partition's batches being written to disk by the spiller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InFlight {
    pub(crate) ticket: u64,
    pub(crate) count: usize,
    pub(crate) bytes: usize,
}

/// One output partition.
#[derive(Debug, Default)]
pub(crate) struct Partition {
    pub(crate) batches: Vec<Stored>,
    /// Sum of `Stored::size` over the batches *not* in flight: what a spill could take now.
    pub(crate) bytes: usize,
    pub(crate) in_flight: Option<InFlight>,
    pub(crate) segments: Vec<SegmentRef>,
    pub(crate) sealed: bool,
    pub(crate) read: bool,
}

/// What `read(p)` takes out of the state.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) segments: Vec<SegmentRef>,
    pub(crate) batches: Vec<Stored>,
    pub(crate) reservation: MemoryReservation,
}

/// Per-partition sizes, for [`crate::ShardBuffer::partition_sizes`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionSize {
    /// Bytes of its batches in memory (each batch's own size, shared allocations counted in each).
    pub memory_bytes: usize,
    /// Batches in memory.
    pub memory_batches: usize,
    /// In-memory bytes of its batches on disk.
    pub spilled_bytes: usize,
    /// Segments on disk.
    pub segments: usize,
    /// Whether its batches are being spilled right now.
    pub spilling: bool,
}

/// Everything behind the buffer's lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) partitions: Vec<Partition>,
    /// Allocations kept alive by batches in memory, each counted once.
    pub(crate) allocations: AllocationSet,
    /// What the pool holds for `allocations`: equal to `allocations.bytes()` at every unlock.
    pub(crate) reservation: MemoryReservation,
    pub(crate) victims: LargestFirst,
    pub(crate) next_ticket: u64,
    /// The first spill failure; spilling is paused once it is set.
    pub(crate) spill_error: Option<Arc<SpillError>>,
    pub(crate) peak: usize,
    pub(crate) finished: bool,
    pub(crate) closed: bool,
    pub(crate) batches_written: u64,
    pub(crate) rows_written: u64,
    pub(crate) bytes_written: u64,
    pub(crate) partitions_read: u64,
    pub(crate) bytes_spilled: u64,
    /// Sum over spill rounds of what each needed to free to reach its goal.
    pub(crate) bytes_needed: u64,
}

impl State {
    pub(crate) fn new(num_partitions: u32, reservation: MemoryReservation, spilling: bool) -> Self {
        Self {
            partitions: (0..num_partitions).map(|_| Partition::default()).collect(),
            allocations: AllocationSet::new(),
            reservation,
            victims: LargestFirst::new(spilling),

            next_ticket: 0,
            spill_error: None,
            peak: 0,
            finished: false,
            closed: false,
            batches_written: 0,
            rows_written: 0,
            bytes_written: 0,
            partitions_read: 0,
            bytes_spilled: 0,
            bytes_needed: 0,
        }
    }

    /// Refuses writes to a closed or finished buffer or a sealed partition.
    pub(crate) fn check_writable(&self, partition: u32) -> Result<(), Error> {
        if self.closed {
            Err(Error::Closed)
        } else if self.finished {
            Err(Error::Finished)
        } else if self.partitions[partition as usize].sealed {
            Err(Error::Sealed { partition })
        } else {
            Ok(())
        }
    }

    /// Charges and stores `stored` in `partition`, or refuses it if the pool has no room.
    pub(crate) fn try_insert(
        &mut self,
        partition: u32,
        stored: Stored,
    ) -> Result<(), (Error, Stored)> {
        if let Err(e) = self.check_writable(partition) {
            return Err((e, stored));
        }
        // Insert first and undo on refusal: one pass over the allocation set on the hot path.
        let needed = self.allocations.insert(&stored.allocations);
        if let Err(e) = self.reservation.try_grow(needed) {
            self.allocations.remove(&stored.allocations);
            let error = Error::MemoryExhausted {
                needed,
                reserved: e.reserved,
                limit: e.limit,
            };
            return Err((error, stored));
        }

        self.peak = self.peak.max(self.reservation.size());
        self.batches_written += 1;
        self.rows_written += stored.batch.num_rows() as u64;
        self.bytes_written += stored.size as u64;
        let p = &mut self.partitions[partition as usize];
        let old = p.bytes;
        p.bytes += stored.size;
        p.batches.push(stored);
        if p.in_flight.is_none() {
            self.victims.update(partition, old, p.bytes);
        }
        Ok(())
    }

    /// Marks `partition` read and takes its segments and batches (including any being spilled
    /// right now, whose spill is voided), with a reservation for the bytes those batches alone
    /// keep alive; allocations shared with other partitions stay charged to the buffer.
    pub(crate) fn take_for_read(&mut self, partition: u32) -> Result<Taken, Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        let finished = self.finished;
        let p = &mut self.partitions[partition as usize];
        if p.read {
            return Err(Error::AlreadyRead { partition });
        }
        if !(p.sealed || finished) {
            return Err(Error::NotComplete { partition });
        }
        p.read = true;
        if p.in_flight.take().is_none() {
            self.victims.update(partition, p.bytes, 0);
        }
        p.bytes = 0;
        let batches = std::mem::take(&mut p.batches);
        let segments = std::mem::take(&mut p.segments);
        let freed: usize = batches
            .iter()
            .map(|s| self.allocations.remove(&s.allocations))
            .sum();
        self.partitions_read += 1;
        Ok(Taken {
            segments,
            batches,
            reservation: self.reservation.split(freed),
        })
    }

    /// Picks the largest partitions until `want` bytes are chosen (at least one partition if any
    /// can be spilled), marks their batches in flight under a new ticket and returns clones of
    /// them to write.
    pub(crate) fn start_spill(&mut self, want: usize) -> (u64, Vec<(u32, SizedBatches)>) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let mut chosen = Vec::new();
        let mut bytes = 0;
        while bytes < want.max(1) {
            let Some((partition, size)) = self.victims.pop_largest() else {
                break;
            };
            let p = &mut self.partitions[partition as usize];
            debug_assert!(p.in_flight.is_none() && !p.read && p.bytes == size);
            p.in_flight = Some(InFlight {
                ticket,
                count: p.batches.len(),
                bytes: size,
            });
            p.bytes = 0;
            bytes += size;
            chosen.push((
                partition,
                p.batches
                    .iter()
                    .map(|s| (s.batch.clone(), s.size))
                    .collect(),
            ));
        }
        (ticket, chosen)
    }

    /// Starts spilling exactly `partition`'s batches (for a direct write of an oversized batch).
    /// `None` if it is being spilled already.
    pub(crate) fn start_spill_of(&mut self, partition: u32) -> Option<(u64, SizedBatches)> {
        let ticket = self.next_ticket;
        let p = &mut self.partitions[partition as usize];
        if p.in_flight.is_some() {
            return None;
        }
        self.next_ticket += 1;
        self.victims.update(partition, p.bytes, 0);
        p.in_flight = Some(InFlight {
            ticket,
            count: p.batches.len(),
            bytes: p.bytes,
        });
        p.bytes = 0;
        Some((
            ticket,
            p.batches
                .iter()
                .map(|s| (s.batch.clone(), s.size))
                .collect(),
        ))
    }

    /// Completes a spill of `partition` under `ticket`: its in-flight batches leave memory and
    /// `segments` join its segments. If a read took the partition meanwhile, nothing changes and
    /// the segments are handed back to be dropped (after unlock).
    pub(crate) fn commit_spill(
        &mut self,
        partition: u32,
        ticket: u64,
        segments: Vec<SegmentRef>,
    ) -> Vec<SegmentRef> {
        let p = &mut self.partitions[partition as usize];
        let Some(flight) = p.in_flight.filter(|f| f.ticket == ticket) else {
            return segments;
        };
        p.in_flight = None;
        let freed: usize = p
            .batches
            .drain(..flight.count)
            .map(|s| self.allocations.remove(&s.allocations))
            .sum();
        self.bytes_spilled += flight.bytes as u64;
        p.segments.extend(segments);
        self.victims.update(partition, 0, p.bytes);
        self.reservation.shrink(freed);
        Vec::new()
    }

    /// Adds an oversized batch that the spiller wrote to disk on its own (`rows`, `size` its
    /// own) to `partition`, after whatever it holds now; refuses it, handing the segments back
    /// to be dropped after unlock, if the partition can no longer be written.
    pub(crate) fn land_direct(
        &mut self,
        partition: u32,
        segments: Vec<SegmentRef>,
        rows: usize,
        size: usize,
    ) -> Result<(), (Error, Vec<SegmentRef>)> {
        if let Err(e) = self.check_writable(partition) {
            return Err((e, segments));
        }
        self.partitions[partition as usize]
            .segments
            .extend(segments);
        self.batches_written += 1;
        self.rows_written += rows as u64;
        self.bytes_written += size as u64;
        self.bytes_spilled += size as u64;
        Ok(())
    }

    /// Undoes a failed spill of `partition`: its batches simply stay in memory.
    pub(crate) fn abort_spill(&mut self, partition: u32, ticket: u64) {
        let p = &mut self.partitions[partition as usize];
        if let Some(flight) = p.in_flight.filter(|f| f.ticket == ticket) {
            p.in_flight = None;
            let old = p.bytes;
            p.bytes += flight.bytes;
            self.victims.update(partition, old, p.bytes);
        }
    }

    /// Sizes of every partition.
    pub(crate) fn partition_sizes(&self) -> Vec<PartitionSize> {
        self.partitions
            .iter()
            .map(|p| PartitionSize {
                memory_bytes: p.batches.iter().map(|s| s.size).sum(),
                memory_batches: p.batches.len(),
                spilled_bytes: p.segments.iter().map(SegmentRef::memory_bytes).sum(),
                segments: p.segments.len(),
                spilling: p.in_flight.is_some(),
            })
            .collect()
    }

    /// Takes every batch and segment out (on close); returns the segments to drop after unlock.
    pub(crate) fn drain_all(&mut self) -> (Vec<Stored>, Vec<SegmentRef>) {
        let mut batches = Vec::new();
        let mut segments = Vec::new();
        for (i, p) in self.partitions.iter_mut().enumerate() {
            if p.in_flight.take().is_none() {
                self.victims.update(i as u32, p.bytes, 0);
            }
            p.bytes = 0;
            batches.append(&mut p.batches);
            segments.append(&mut p.segments);
        }
        for stored in &batches {
            self.allocations.remove(&stored.allocations);
        }
        self.reservation.free();
        (batches, segments)
    }

    /// `Err` if the reservation and the bytes held disagree.
    pub(crate) fn check_balance(&self) -> Result<(), Error> {
        let (reserved, held) = (self.reservation.size(), self.allocations.bytes());
        if reserved == held {
            Ok(())
        } else {
            Err(Error::AccountingMismatch { reserved, held })
        }
    }
}
