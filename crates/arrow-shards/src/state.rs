//! What the buffer holds: per partition, its batches in memory and its lifecycle flags.
//!
//! # Locking
//! All of it lives in one `Mutex<State>` inside the buffer ([`crate::ShardBuffer`]). The lock is
//! held only for bookkeeping: pushing or taking batches, the allocation set, and growing or
//! shrinking the reservation (an atomic on the pool, plus the pool's release-signal mutex when
//! shrinking: lock order `State` -> `ReleaseSignal`). It is never held across I/O, a spawn, a
//! channel send or a wait.

use arrow_array::RecordBatch;
use arrow_shards_memory::sizing::Allocation;
use arrow_shards_memory::{AllocationSet, MemoryReservation};

use crate::Error;

/// A batch held in memory with the allocations it was charged for.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) batch: RecordBatch,
    pub(crate) allocations: Vec<Allocation>,
    /// The batch's own size (`batch_memory_size`), used for per-partition sizes and hand-over.
    pub(crate) size: usize,
}

/// One output partition.
#[derive(Debug, Default)]
pub(crate) struct Partition {
    pub(crate) batches: Vec<Stored>,
    /// Sum of `Stored::size` over `batches`.
    pub(crate) bytes: usize,
    pub(crate) sealed: bool,
    pub(crate) read: bool,
}

/// Everything behind the buffer's lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) partitions: Vec<Partition>,
    /// Allocations kept alive by batches in memory, each counted once.
    pub(crate) allocations: AllocationSet,
    /// What the pool holds for `allocations`: equal to `allocations.bytes()` at every unlock.
    pub(crate) reservation: MemoryReservation,
    pub(crate) peak: usize,
    pub(crate) finished: bool,
    pub(crate) closed: bool,
    pub(crate) batches_written: u64,
    pub(crate) rows_written: u64,
    pub(crate) bytes_written: u64,
    pub(crate) partitions_read: u64,
}

impl State {
    pub(crate) fn new(num_partitions: u32, reservation: MemoryReservation) -> Self {
        Self {
            partitions: (0..num_partitions).map(|_| Partition::default()).collect(),
            allocations: AllocationSet::new(),
            reservation,
            peak: 0,
            finished: false,
            closed: false,
            batches_written: 0,
            rows_written: 0,
            bytes_written: 0,
            partitions_read: 0,
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
        let needed = self.allocations.added_bytes(&stored.allocations);
        if let Err(e) = self.reservation.try_grow(needed) {
            let error = Error::MemoryExhausted {
                needed,
                reserved: e.reserved,
                limit: e.limit,
            };
            return Err((error, stored));
        }
        self.allocations.insert(&stored.allocations);
        self.peak = self.peak.max(self.reservation.size());
        self.batches_written += 1;
        self.rows_written += stored.batch.num_rows() as u64;
        self.bytes_written += stored.size as u64;
        let p = &mut self.partitions[partition as usize];
        p.bytes += stored.size;
        p.batches.push(stored);
        Ok(())
    }

    /// Marks `partition` read and takes its batches with a reservation for the bytes they alone
    /// keep alive; allocations shared with other partitions stay charged to the buffer.
    pub(crate) fn take_for_read(
        &mut self,
        partition: u32,
    ) -> Result<(Vec<Stored>, MemoryReservation), Error> {
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
        p.bytes = 0;
        let batches = std::mem::take(&mut p.batches);
        let freed: usize = batches
            .iter()
            .map(|s| self.allocations.remove(&s.allocations))
            .sum();
        self.partitions_read += 1;
        Ok((batches, self.reservation.split(freed)))
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
