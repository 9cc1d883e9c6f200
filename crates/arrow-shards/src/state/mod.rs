//! What the buffer holds: per partition, its batches in memory, its spilled segments, and its
//! lifecycle flags.
//!
//! This file is the ledger: the [`State`] and its balance invariant ("the reservation equals
//! the allocation set plus the overheads and open batches at every unlock", [`State::settle`],
//! [`State::check_balance`]), the lifecycle flags and the metrics. [`insert`] is how the four
//! shard kinds get in (whole, small, scattered reordered, scattered in place); [`tickets`] is
//! how batches leave memory for disk (spill tickets: start, commit, abort, land a direct
//! write); [`take`] is how they leave for a reader (a read, or a subscription taking what is
//! there while writers go on).
//!
//! # Per-partition states
//! Batches of one partition move through: **in memory** (`batches[in_flight.count..]`, in the
//! victim index) -> **being spilled** (`batches[..in_flight.count]`: still in memory, still
//! charged and readable) -> **on disk** (`segments`, memory released) -> **taken** (handed to
//! the partition's one reader: all at once by a read, or piece by piece by a subscription). A
//! take while a spill of the same partition is running takes the in-flight batches back from
//! memory and voids the spill's ticket, so the segment that spill produces is dropped: no loss,
//! no duplicate.
//!
//! Rows copied from small shards wait in open batches, one per partition in each producer's
//! [`Lane`] ([`lane`]), before they are cut into stored batches; the ledger charges them
//! (`open_charge`) and counts their rows (`open_rows`) here.
//!
//! A partition's reader ([`Reader`]) is claimed once. A subscription takes the segments and
//! stored batches there now, never an open batch until the partition is sealed or the buffer
//! finished; what is left stays spillable. Changes a subscriber waits for (a stored batch or
//! segments added, seal, finish, close) queue its `Notify` in `wakes`, fired by the lock guard
//! after unlock ([`crate::shared::StateGuard`]).
//!
//! # Locking
//! All of it lives in one `Mutex<State>` inside the buffer ([`crate::ShardBuffer`]). The lock is
//! held for pushing or taking batches, the allocation set, the victim index, and growing or
//! shrinking the reservation (an atomic on the pool, plus the pool's release-signal mutex when
//! shrinking: lock order `State` -> `ReleaseSignal`), for cutting open batches (their buffers
//! move into arrays; nothing is copied), and for the copies of a reordered batch's ranges
//! (`insert.rs`). The copies of small shards and of scattered batches copied in place, the
//! write path's per-row work, are made outside it, into the writer's own lane, with only that
//! lane's mutex held (lock order: lanes, then `State`; [`crate::lanes`]). It is never held
//! across I/O, a spawn, a channel send or a wait, and nothing that may delete a file (a
//! `SegmentRef`) is dropped under it: such values are handed out to be dropped after unlock.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_shards_memory::{AllocationSet, MemoryReservation};
use arrow_shards_spill::{SegmentRef, SpillError};
use tokio::sync::Notify;

use crate::compact::{CompactConfig, OpenBatch, Start};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::shard::Stored;
use crate::victims::LargestFirst;

pub(crate) mod insert;
mod lane;
mod take;
#[cfg(test)]
mod tests;
mod tickets;

/// Batches with their own sizes, as handed to the spiller.
pub(crate) type SizedBatches = Vec<(RecordBatch, usize)>;

/// A prefix of a partition's batches being written to disk by the spiller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InFlight {
    ticket: u64,
    count: usize,
    /// Their cost (`Stored::cost`), what committing the spill frees.
    bytes: usize,
    /// Their data bytes (`Stored::data`), what `bytes_spilled` counts.
    data: usize,
}

/// One output partition.
#[derive(Debug, Default)]
pub(crate) struct Partition {
    batches: Vec<Stored>,
    /// Rows copied in from small shards, in the lanes' open batches (see [`lane`] and
    /// [`crate::compact`]), after `batches` in each producer's write order.
    open_rows: usize,
    /// What the lanes' open batches of this partition are charged (their `Slot::charge`s).
    open_charge: usize,
    /// Where the next open batch starts: set from the last one cut (bookkeeping of a few words
    /// per column, not charged, like the rest of this struct).
    start: Start,
    /// What a spill could take now: the cost of the batches *not* in flight plus `open_charge`.
    bytes: usize,
    in_flight: Option<InFlight>,
    segments: Vec<SegmentRef>,
    sealed: bool,
    reader: Reader,
    /// Rows in memory (stored and open) and on disk.
    memory_rows: usize,
    spilled_rows: usize,
}

/// One producer's open batches, one slot per partition (see `lane.rs`).
#[derive(Debug)]
pub(crate) struct Lane {
    slots: Vec<Slot>,
}

/// A partition's open batch in a lane, and what it is charged in the ledger.
#[derive(Debug, Default)]
struct Slot {
    open: Option<OpenBatch>,
    /// What `open` is charged (`OpenBatch::bytes` when it was last booked), 0 without one.
    charge: usize,
}

/// The lanes a caller locked (every lane of the buffer, before its state), as
/// [`crate::shared::Shared::with_lanes`] hands them.
pub(crate) type Lanes<'a, 'b> = &'a mut [std::sync::MutexGuard<'b, Lane>];

/// Who reads a partition.
#[derive(Debug, Default)]
pub(crate) enum Reader {
    /// Nobody yet.
    #[default]
    Unclaimed,
    /// A subscription, woken through `notify` when there is more to take; with `min_rows`
    /// above 0, a take also cuts the open batch once it holds that many rows.
    Streaming {
        notify: Arc<Notify>,
        min_rows: usize,
    },
    /// Everything was taken (a read, or a subscription to the end): nothing more comes.
    Done,
    /// The subscription was dropped before the end: what is written to it is discarded.
    Abandoned,
}

/// One part of a direct write, on disk, to join its partition ([`State::land_direct`]).
#[derive(Debug)]
pub(crate) struct LandedPart {
    pub(crate) partition: u32,
    pub(crate) segments: Vec<SegmentRef>,
    pub(crate) rows: usize,
    /// Its own size (`Stored::size`), what `bytes_written` counts.
    pub(crate) size: usize,
    /// Its data bytes (`Stored::data`), what `bytes_spilled` counts.
    pub(crate) data: usize,
}

/// What a take hands a reader: segments first, then batches, in write order.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) segments: Vec<SegmentRef>,
    pub(crate) batches: Vec<Stored>,
    /// The bytes those batches alone keep alive, split off the buffer's reservation.
    pub(crate) reservation: MemoryReservation,
}

/// Per-partition sizes, for [`crate::ShardBuffer::partition_sizes`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionSize {
    /// Bytes its rows cost in memory: each stored batch's own size and fixed overhead (shared
    /// allocations counted in each), plus its open batch's charge.
    pub memory_bytes: usize,
    /// Batches in memory, an open batch with rows counted as one.
    pub memory_batches: usize,
    /// Rows in memory.
    pub memory_rows: usize,
    /// In-memory bytes of its batches on disk.
    pub spilled_bytes: usize,
    /// Rows on disk.
    pub spilled_rows: usize,
    /// Segments on disk.
    pub segments: usize,
    /// Whether its batches are being spilled right now.
    pub spilling: bool,
}

/// What `close` takes out, to be dropped after unlock (dropping a segment may delete a file).
pub(crate) type Drained = (Vec<Stored>, Vec<OpenBatch>, Vec<SegmentRef>);

/// Everything behind the buffer's lock. Its fields are private: every change goes through a
/// method that keeps "the reservation equals the allocation set plus the overheads and open
/// batches at unlock" (`check_balance`).
#[derive(Debug)]
pub(crate) struct State {
    schema: SchemaRef,
    compact: Option<CompactConfig>,
    partitions: Vec<Partition>,
    /// Allocations kept alive by stored batches in memory, each counted once.
    allocations: AllocationSet,
    /// Stored batches' overheads plus open batches' charges.
    extra: usize,
    /// Growth charged for copies being made into lanes outside the lock, booked into `extra`
    /// when each copy is done (`insert.rs`).
    copying: usize,
    /// What the pool holds for this buffer: `allocations.bytes() + extra` at every unlock.
    reservation: MemoryReservation,
    victims: LargestFirst,
    next_ticket: u64,
    /// The first spill failure; spilling is paused once it is set.
    spill_error: Option<Arc<SpillError>>,
    peak: usize,
    finished: bool,
    closed: bool,
    batches_written: u64,
    rows_written: u64,
    bytes_written: u64,
    partitions_read: u64,
    bytes_spilled: u64,
    /// Writes too large for the whole limit that went to disk directly.
    direct_writes: u64,
    /// Sum over spill rounds of what each needed to free to reach its goal.
    bytes_needed: u64,
    /// Rows a subscription took while their partition was still open.
    rows_streamed: u64,
    /// Spill tickets voided because a reader took their batches.
    spills_voided: u64,
    /// Rows written to a partition whose subscription was dropped, discarded.
    rows_discarded: u64,
    /// Subscribers to wake once the lock is let go.
    wakes: Vec<Arc<Notify>>,
}
impl State {
    pub(crate) fn new(
        schema: SchemaRef,
        num_partitions: u32,
        reservation: MemoryReservation,
        spilling: bool,
        compact: Option<CompactConfig>,
    ) -> Self {
        Self {
            schema,
            compact,
            partitions: (0..num_partitions).map(|_| Partition::default()).collect(),
            allocations: AllocationSet::new(),
            extra: 0,
            copying: 0,
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
            direct_writes: 0,
            bytes_needed: 0,
            rows_streamed: 0,
            spills_voided: 0,
            rows_discarded: 0,
            wakes: Vec::new(),
        }
    }

    /// Whether `close` has run.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Seals `partition` (no more writes to it); refused once closed.
    pub(crate) fn seal(&mut self, partition: u32) -> Result<(), Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        self.partitions[partition as usize].sealed = true;
        self.wake(partition);
        Ok(())
    }

    /// Finishes the buffer (no more writes at all); refused once closed.
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        self.finished = true;
        self.wake_all();
        Ok(())
    }

    /// Queues `partition`'s subscriber, if it has one, to be woken after unlock.
    fn wake(&mut self, partition: u32) {
        if let Reader::Streaming { notify, .. } = &self.partitions[partition as usize].reader {
            self.wakes.push(Arc::clone(notify));
        }
    }

    /// Queues every subscriber to be woken after unlock.
    fn wake_all(&mut self) {
        for p in &self.partitions {
            if let Reader::Streaming { notify, .. } = &p.reader {
                self.wakes.push(Arc::clone(notify));
            }
        }
    }

    /// The subscribers to wake, for the lock guard to wake after unlock.
    pub(crate) fn take_wakes(&mut self) -> Vec<Arc<Notify>> {
        std::mem::take(&mut self.wakes)
    }

    /// The spill error writers that would wait get now, if spilling is failing.
    pub(crate) fn spill_error(&self) -> Option<Arc<SpillError>> {
        self.spill_error.clone()
    }

    /// Records that spilling is failing with `error` (after the spiller's retries).
    pub(crate) fn set_spill_error(&mut self, error: Arc<SpillError>) {
        self.spill_error = Some(error);
    }

    /// Clears a recorded spill error (a round succeeded); `true` if there was one.
    pub(crate) fn clear_spill_error(&mut self) -> bool {
        self.spill_error.take().is_some()
    }

    /// Counts what a spill round needed to free (for `Metrics::bytes_needed_to_target`).
    pub(crate) fn note_needed(&mut self, bytes: usize) {
        self.bytes_needed += bytes as u64;
    }

    /// Fills the buffer's own figures into `metrics`.
    pub(crate) fn fill_metrics(&self, metrics: &mut Metrics) {
        metrics.reserved = self.reservation.size();
        metrics.peak_reserved = self.peak;
        metrics.batches_written = self.batches_written;
        metrics.rows_written = self.rows_written;
        metrics.bytes_written = self.bytes_written;
        metrics.partitions_read = self.partitions_read;
        metrics.bytes_spilled = self.bytes_spilled;
        metrics.direct_writes = self.direct_writes;
        metrics.bytes_needed_to_target = self.bytes_needed;
        metrics.rows_streamed = self.rows_streamed;
        metrics.spills_voided = self.spills_voided;
        metrics.rows_discarded = self.rows_discarded;
        metrics.spill_error = self.spill_error.clone();
    }

    /// Closes: refuses everything afterwards and takes every batch, open batch and segment out
    /// (to drop after unlock); with the spill error, if spilling was failing.
    pub(crate) fn close(&mut self, lanes: Lanes<'_, '_>) -> (Drained, Option<Arc<SpillError>>) {
        self.closed = true;
        self.wake_all();
        (self.drain_all(lanes), self.spill_error.clone())
    }

    /// Refuses writes to a closed or finished buffer.
    pub(crate) fn check_open(&self) -> Result<(), Error> {
        if self.closed {
            Err(Error::Closed)
        } else if self.finished {
            Err(Error::Finished)
        } else {
            Ok(())
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

    /// The bytes this buffer holds: what the reservation must equal at unlock.
    fn held(&self) -> usize {
        self.allocations.bytes() + self.extra + self.copying
    }

    /// Sets the reservation to what is held (a forced grow or a shrink of the difference).
    fn settle(&mut self) {
        let (held, reserved) = (self.held(), self.reservation.size());
        if held > reserved {
            self.reservation.grow(held - reserved);
        } else {
            self.reservation.shrink(reserved - held);
        }
        self.peak = self.peak.max(self.reservation.size());
    }

    /// Records that `partition`'s spillable bytes changed from `old` to its current `bytes`.
    fn bytes_changed(&mut self, partition: u32, old: usize) {
        let p = &self.partitions[partition as usize];
        if p.in_flight.is_none() && !matches!(p.reader, Reader::Done) {
            self.victims.update(partition, old, p.bytes);
        }
    }

    /// Pushes an already charged batch after `partition`'s others, and wakes its subscriber; a
    /// partition whose subscription was dropped discards it instead (uncharged; the caller
    /// settles).
    fn push_stored(&mut self, partition: u32, stored: Stored) {
        let p = &mut self.partitions[partition as usize];
        match &p.reader {
            Reader::Abandoned => {
                self.rows_discarded += stored.batch.num_rows() as u64;
                self.allocations.remove(&stored.allocations);
                self.extra -= stored.overhead;
                return;
            }
            Reader::Streaming { notify, .. } => self.wakes.push(Arc::clone(notify)),
            Reader::Unclaimed | Reader::Done => {}
        }
        let old = p.bytes;
        p.bytes += stored.cost();
        p.memory_rows += stored.batch.num_rows();
        p.batches.push(stored);
        self.bytes_changed(partition, old);
    }

    /// Turns `partition`'s open batch in `slot` (a lane's), if it has rows, into a stored batch
    /// after the others. Moves its buffers, copies nothing. The caller settles the reservation
    /// afterwards.
    fn cut(&mut self, partition: u32, slot: &mut Slot) -> Result<(), Error> {
        let Some(open) = slot.open.as_mut().filter(|o| o.rows() > 0) else {
            return Ok(());
        };
        let p = &mut self.partitions[partition as usize];
        let rows = open.rows();
        let next = open.next_start();
        let batch = open
            .cut(&self.schema)
            .map_err(|e| Error::Arrow(Arc::new(e)))?;
        let mut stored = Stored::new(batch);
        // The open batch is dropped: a fresh one allocates on the next append, starting at
        // `next`.
        slot.open = None;
        p.start = next;
        let old = p.bytes;
        let charge = std::mem::take(&mut slot.charge);
        p.open_charge -= charge;
        p.bytes -= charge;
        self.extra -= charge;
        p.memory_rows -= rows;
        p.open_rows -= rows;
        let added = self.allocations.insert(&stored.allocations);
        // A cut never adds to the charge, so that no cut (by the spiller, a read or a write)
        // can push the pool past its limit: the batch's fixed overhead is charged at most at
        // what its open batch's structs were. The difference (a few KiB per cut batch at most)
        // is documented in docs/memory-accounting.md.
        stored.overhead = stored.overhead.min(charge.saturating_sub(added));
        self.extra += stored.overhead;
        self.bytes_changed(partition, old);
        self.push_stored(partition, stored);
        Ok(())
    }

    /// Sizes of every partition.
    pub(crate) fn partition_sizes(&self) -> Vec<PartitionSize> {
        self.partitions
            .iter()
            .map(|p| PartitionSize {
                memory_bytes: p.batches.iter().map(Stored::cost).sum::<usize>() + p.open_charge,
                memory_batches: p.batches.len() + usize::from(p.open_rows > 0),
                memory_rows: p.memory_rows,
                spilled_bytes: p.segments.iter().map(SegmentRef::memory_bytes).sum(),
                spilled_rows: p.spilled_rows,
                segments: p.segments.len(),
                spilling: p.in_flight.is_some(),
            })
            .collect()
    }

    /// Takes every batch, open batch and segment out (on close); returns them to drop after
    /// unlock.
    fn drain_all(&mut self, lanes: Lanes<'_, '_>) -> Drained {
        let mut batches = Vec::new();
        let mut open = Vec::new();
        let mut segments = Vec::new();
        for (i, p) in self.partitions.iter_mut().enumerate() {
            if p.in_flight.take().is_none() && !matches!(p.reader, Reader::Done) {
                self.victims.update(i as u32, p.bytes, 0);
            }
            p.bytes = 0;
            p.open_charge = 0;
            p.open_rows = 0;
            p.memory_rows = 0;
            batches.append(&mut p.batches);
            segments.append(&mut p.segments);
        }
        for lane in lanes.iter_mut() {
            for slot in &mut lane.slots {
                slot.charge = 0;
                open.extend(slot.open.take());
            }
        }
        for stored in &batches {
            self.allocations.remove(&stored.allocations);
        }
        self.extra = 0;
        self.reservation.free();
        (batches, open, segments)
    }

    /// `Err` if the reservation and the bytes held disagree.
    pub(crate) fn check_balance(&self) -> Result<(), Error> {
        let (reserved, held) = (self.reservation.size(), self.held());
        if reserved == held {
            Ok(())
        } else {
            Err(Error::AccountingMismatch { reserved, held })
        }
    }
}
