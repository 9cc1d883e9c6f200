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
use arrow_schema::SchemaRef;
use arrow_shards_memory::{AllocationSet, MemoryReservation};
use arrow_shards_spill::{SegmentRef, SpillError};

use crate::compact::{self, CompactConfig, Direct, OpenBatch, Start};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::shard::{Grouped, Scattered, Shard, Stored};
use crate::victims::LargestFirst;

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
    /// Rows copied in from small shards, after `batches` in write order (see [`crate::compact`]).
    open: Option<OpenBatch>,
    /// What `open` is charged (`OpenBatch::bytes`), 0 without one.
    open_charge: usize,
    /// Where the next open batch starts: set from the last one cut (bookkeeping of a few words
    /// per column, not charged, like the rest of this struct).
    start: Start,
    /// What a spill could take now: the cost of the batches *not* in flight plus `open_charge`.
    bytes: usize,
    in_flight: Option<InFlight>,
    segments: Vec<SegmentRef>,
    sealed: bool,
    read: bool,
    /// Rows in memory (stored and open) and on disk.
    memory_rows: usize,
    spilled_rows: usize,
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
        Ok(())
    }

    /// Finishes the buffer (no more writes at all); refused once closed.
    pub(crate) fn finish(&mut self) -> Result<(), Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        self.finished = true;
        Ok(())
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
        metrics.spill_error = self.spill_error.clone();
    }

    /// Closes: refuses everything afterwards and takes every batch, open batch and segment out
    /// (to drop after unlock); with the spill error, if spilling was failing.
    pub(crate) fn close(&mut self) -> (Drained, Option<Arc<SpillError>>) {
        self.closed = true;
        (self.drain_all(), self.spill_error.clone())
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
        self.allocations.bytes() + self.extra
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
        if p.in_flight.is_none() && !p.read {
            self.victims.update(partition, old, p.bytes);
        }
    }

    /// Charges and stores `shard`, or refuses it (handing it back) if the pool has no room or
    /// the partition may not be written. `partition` is the target of a `Whole` or `Small`
    /// shard; a scattered one names its own.
    pub(crate) fn try_insert(
        &mut self,
        partition: u32,
        shard: Shard,
    ) -> Result<(), (Error, Shard)> {
        match shard {
            Shard::Whole(stored) => self
                .try_insert_whole(partition, stored)
                .map_err(|(e, s)| (e, Shard::Whole(s))),
            Shard::Small(batch) => {
                if let Err(e) = self.check_writable(partition) {
                    return Err((e, Shard::Small(batch)));
                }
                let rows = batch.num_rows();
                let needed = self.append_growth(partition, &batch, 0, rows);
                if let Err(e) = self.try_reserve(needed) {
                    return Err((e, Shard::Small(batch)));
                }
                let result = self.append(partition, &batch, 0, rows);
                self.settle();
                match result {
                    Ok(()) => {
                        self.batches_written += 1;
                        Ok(())
                    }
                    Err(e) => Err((e, Shard::Small(batch))),
                }
            }
            Shard::Scattered(scattered) => self
                .try_insert_scattered(&scattered)
                .map_err(|e| (e, Shard::Scattered(scattered))),
        }
    }

    fn try_reserve(&mut self, needed: usize) -> Result<(), Error> {
        self.reservation
            .try_grow(needed)
            .map_err(|e| Error::MemoryExhausted {
                needed,
                reserved: e.reserved,
                limit: e.limit,
            })
    }

    fn try_insert_whole(&mut self, partition: u32, stored: Stored) -> Result<(), (Error, Stored)> {
        if let Err(e) = self.check_writable(partition) {
            return Err((e, stored));
        }
        // Insert first and undo on refusal: one pass over the allocation set on the hot path.
        let needed = self.allocations.insert(&stored.allocations) + stored.overhead;
        if let Err(e) = self.try_reserve(needed) {
            self.allocations.remove(&stored.allocations);
            return Err((e, stored));
        }
        self.extra += stored.overhead;
        // Rows copied into the open batch were written first: cut it so they stay first.
        if let Err(e) = self.cut(partition) {
            self.allocations.remove(&stored.allocations);
            self.extra -= stored.overhead;
            self.settle();
            return Err((e, stored));
        }
        self.batches_written += 1;
        self.rows_written += stored.batch.num_rows() as u64;
        self.bytes_written += stored.size as u64;
        self.push_stored(partition, stored);
        self.settle();
        Ok(())
    }

    /// Charges and stores every range of `scattered`, or none (refusing the whole batch).
    fn try_insert_scattered(&mut self, scattered: &Scattered) -> Result<(), Error> {
        for &(partition, _, _) in &scattered.ranges {
            self.check_writable(partition)?;
        }
        let sorted = match &scattered.rows {
            Grouped::Sorted(sorted) => sorted,
            Grouped::Direct(direct) => {
                return self.try_insert_direct(&scattered.original, direct, &scattered.ranges);
            }
        };
        let mut whole = Vec::new();
        let mut needed = 0;
        // Ranges kept whole are slices of one reordered batch: its allocations count once.
        let mut shared = Vec::new();
        for &(partition, start, len) in &scattered.ranges {
            if self.appends(sorted, len) {
                needed += self.append_growth(partition, sorted, start, len);
            } else {
                let stored = Stored::share_of(sorted.slice(start, len), sorted.num_rows());
                needed += stored.overhead;
                shared.extend_from_slice(&stored.allocations);
                whole.push((partition, stored));
            }
        }
        shared.sort_unstable_by_key(|a| a.ptr);
        shared.dedup_by_key(|a| a.ptr);
        needed += self.allocations.added_bytes(&shared);
        self.try_reserve(needed)?;
        let mut whole = whole.into_iter().peekable();
        let mut result = Ok(());
        for &(partition, start, len) in &scattered.ranges {
            let step = match whole.next_if(|(p, _)| *p == partition) {
                Some((_, stored)) => self.cut(partition).map(|()| {
                    self.allocations.insert(&stored.allocations);
                    self.extra += stored.overhead;
                    self.rows_written += len as u64;
                    self.bytes_written += stored.size as u64;
                    self.push_stored(partition, stored);
                }),
                None => self.append(partition, sorted, start, len),
            };
            if step.is_err() {
                // Only a bug gets here (the rows were checked); keep what was stored.
                result = step;
                break;
            }
        }
        self.settle();
        if result.is_ok() {
            self.batches_written += 1;
        }
        result
    }

    /// Charges `batch`'s rows and copies each straight into its partition's open batch
    /// ([`compact::copy_rows`]), or refuses the whole batch. Every range is below the compaction
    /// target and every column flat (the scatter chose [`Grouped::Direct`]).
    fn try_insert_direct(
        &mut self,
        batch: &RecordBatch,
        direct: &Direct,
        ranges: &[(u32, usize, usize)],
    ) -> Result<(), Error> {
        let config = self.compact.expect("a direct scatter only with compaction");
        let has_nulls: Vec<bool> = batch.columns().iter().map(|a| a.null_count() > 0).collect();
        let mut needed = 0;
        for (k, &(partition, _, len)) in ranges.iter().enumerate() {
            let var = |c: usize| direct.var(c, k);
            let p = &self.partitions[partition as usize];
            needed += match &p.open {
                Some(open) if !open.is_full_for(&config, len) => {
                    open.growth_of_rows(len, var, &has_nulls, &config)
                }
                Some(open) => OpenBatch::fresh_charge_of_rows(
                    &self.schema,
                    &open.next_start(),
                    len,
                    var,
                    &has_nulls,
                    &config,
                ),
                None => OpenBatch::fresh_charge_of_rows(
                    &self.schema,
                    &p.start,
                    len,
                    var,
                    &has_nulls,
                    &config,
                ),
            };
        }
        self.try_reserve(needed)?;
        let result = self.copy_direct(batch, direct, ranges, &config);
        self.settle();
        if result.is_ok() {
            self.batches_written += 1;
        }
        result
    }

    /// The reserved part of [`try_insert_direct`](Self::try_insert_direct): cuts the open
    /// batches that are full for their range, copies the rows, then books each partition's new
    /// charge and cuts those that reached a target.
    fn copy_direct(
        &mut self,
        batch: &RecordBatch,
        direct: &Direct,
        ranges: &[(u32, usize, usize)],
        config: &CompactConfig,
    ) -> Result<(), Error> {
        for &(partition, _, len) in ranges {
            let full = self.partitions[partition as usize]
                .open
                .as_ref()
                .is_some_and(|o| o.is_full_for(config, len));
            if full {
                self.cut(partition)?;
            }
        }
        let lens: Vec<usize> = ranges.iter().map(|r| r.2).collect();
        let mut before = Vec::with_capacity(ranges.len());
        {
            // The ranges' open batches, in range order (ranges ascend by partition).
            let schema = Arc::clone(&self.schema);
            let mut targets: Vec<&mut OpenBatch> = Vec::with_capacity(ranges.len());
            let mut rest = &mut self.partitions[..];
            let mut base = 0;
            for &(partition, _, _) in ranges {
                let (_, tail) = rest.split_at_mut(partition as usize - base);
                let (p, tail) = tail.split_first_mut().expect("ranges name partitions");
                let open = p
                    .open
                    .get_or_insert_with(|| OpenBatch::new(&schema, &p.start));
                before.push(open.data_bytes());
                targets.push(open);
                rest = tail;
                base = partition as usize + 1;
            }
            compact::copy_rows(&mut targets, batch, direct, &lens, config)
                .map_err(|e| Error::Arrow(Arc::new(e)))?;
        }
        for (&(partition, _, len), data_before) in ranges.iter().zip(before) {
            self.appended(partition, len, data_before, config)?;
        }
        Ok(())
    }

    /// Whether `len` rows of `batch` are copied into an open batch rather than stored whole.
    pub(crate) fn appends(&self, batch: &RecordBatch, len: usize) -> bool {
        self.compact.is_some_and(|c| len < c.target_rows)
            && crate::compact::compactable(&self.schema, batch)
    }

    /// Pushes an already charged batch after `partition`'s others.
    fn push_stored(&mut self, partition: u32, stored: Stored) {
        let p = &mut self.partitions[partition as usize];
        let old = p.bytes;
        p.bytes += stored.cost();
        p.memory_rows += stored.batch.num_rows();
        p.batches.push(stored);
        self.bytes_changed(partition, old);
    }

    /// What appending `batch[start..start + len]` to `partition`'s open batch would add.
    fn append_growth(
        &self,
        partition: u32,
        batch: &RecordBatch,
        start: usize,
        len: usize,
    ) -> usize {
        let config = self.compact.as_ref().expect("appends only with compaction");
        // A cut never adds to the charge (`OpenBatch::bytes`), so only the append counts.
        let p = &self.partitions[partition as usize];
        match &p.open {
            Some(open) if !open.is_full_for(config, len) => open.growth(batch, start, len, config),
            // Cut first: the fresh batch starts where this one leaves off.
            Some(open) => {
                let next = open.next_start();
                OpenBatch::fresh_charge(&self.schema, &next, batch, start, len, config)
            }
            None => OpenBatch::fresh_charge(&self.schema, &p.start, batch, start, len, config),
        }
    }

    /// Copies `batch[start..start + len]` into `partition`'s open batch, cutting it first if it
    /// is full. The caller has reserved [`append_growth`](Self::append_growth) and settles after.
    fn append(
        &mut self,
        partition: u32,
        batch: &RecordBatch,
        start: usize,
        len: usize,
    ) -> Result<(), Error> {
        let config = self.compact.expect("appends only with compaction");
        let full = self.partitions[partition as usize]
            .open
            .as_ref()
            .is_some_and(|o| o.is_full_for(&config, len));
        if full {
            self.cut(partition)?;
        }
        let schema = Arc::clone(&self.schema);
        let p = &mut self.partitions[partition as usize];
        let open = p
            .open
            .get_or_insert_with(|| OpenBatch::new(&schema, &p.start));
        let before = open.data_bytes();
        open.append(batch, start, len, &config)
            .map_err(|e| Error::Arrow(Arc::new(e)))?;
        self.appended(partition, len, before, &config)
    }

    /// Books `len` rows just copied into `partition`'s open batch (which held `data_before`
    /// bytes of data before): its new charge, the counters, the victim index; then cuts it if
    /// it reached a target.
    fn appended(
        &mut self,
        partition: u32,
        len: usize,
        data_before: usize,
        config: &CompactConfig,
    ) -> Result<(), Error> {
        let p = &mut self.partitions[partition as usize];
        let open = p.open.as_ref().expect("rows were copied into it");
        let (charge, written, full) = (
            open.bytes(),
            open.data_bytes() - data_before,
            open.is_full(config),
        );
        let old = p.bytes;
        self.extra = self.extra + charge - p.open_charge;
        p.bytes = p.bytes + charge - p.open_charge;
        p.open_charge = charge;
        p.memory_rows += len;
        self.rows_written += len as u64;
        self.bytes_written += written as u64;
        self.bytes_changed(partition, old);
        if full {
            self.cut(partition)?;
        }
        Ok(())
    }

    /// Turns `partition`'s open batch, if it has rows, into a stored batch after the others.
    /// The caller settles the reservation afterwards.
    fn cut(&mut self, partition: u32) -> Result<(), Error> {
        let p = &mut self.partitions[partition as usize];
        let Some(open) = p.open.as_mut().filter(|o| o.rows() > 0) else {
            return Ok(());
        };
        let rows = open.rows();
        let next = open.next_start();
        let batch = open
            .cut(&self.schema)
            .map_err(|e| Error::Arrow(Arc::new(e)))?;
        let mut stored = Stored::new(batch);
        // The open batch is dropped: a fresh one allocates on the next append, starting at
        // `next`.
        p.open = None;
        p.start = next;
        let old = p.bytes;
        let charge = std::mem::take(&mut p.open_charge);
        p.bytes -= charge;
        self.extra -= charge;
        p.memory_rows -= rows;
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

    /// Marks `partition` read and takes its segments and batches (including any being spilled
    /// right now, whose spill is voided), with a reservation for the bytes those batches alone
    /// keep alive; allocations shared with other partitions stay charged to the buffer.
    pub(crate) fn take_for_read(&mut self, partition: u32) -> Result<Taken, Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        let finished = self.finished;
        let p = &self.partitions[partition as usize];
        if p.read {
            return Err(Error::AlreadyRead { partition });
        }
        if !(p.sealed || finished) {
            return Err(Error::NotComplete { partition });
        }
        self.cut(partition)?;
        self.settle();
        let held = self.held();
        let p = &mut self.partitions[partition as usize];
        p.read = true;
        p.start = Start::default();
        if p.in_flight.take().is_none() {
            self.victims.update(partition, p.bytes, 0);
        }
        p.bytes = 0;
        p.memory_rows = 0;
        p.spilled_rows = 0;
        let batches = std::mem::take(&mut p.batches);
        let segments = std::mem::take(&mut p.segments);
        for s in &batches {
            self.allocations.remove(&s.allocations);
            self.extra -= s.overhead;
        }
        self.partitions_read += 1;
        let freed = held - self.held();
        Ok(Taken {
            segments,
            batches,
            reservation: self.reservation.split(freed),
        })
    }

    /// The bytes of the largest partition a spill round could take now; 0 if none, or if
    /// spilling is failing or the buffer is closed (another buffer on the pool then spills its
    /// own rather than wait on this one).
    pub(crate) fn largest_spillable(&self) -> usize {
        if self.closed || self.spill_error.is_some() {
            return 0;
        }
        self.victims.largest()
    }

    /// Picks the largest partitions until `want` bytes are chosen (at least one partition if any
    /// holds `floor` bytes or more), cuts their open batches, marks their batches in flight under
    /// a new ticket and returns clones of them to write. `floor` is the largest partition of the
    /// other buffers on the pool (0 if none): a partition smaller than it is left for the buffer
    /// that holds it to spill first.
    pub(crate) fn start_spill(
        &mut self,
        want: usize,
        floor: usize,
    ) -> (u64, Vec<(u32, SizedBatches)>) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let mut chosen = Vec::new();
        let mut bytes = 0;
        while bytes < want.max(1) {
            let Some((partition, size)) = self.victims.pop_largest(floor) else {
                break;
            };
            debug_assert_eq!(self.partitions[partition as usize].bytes, size);
            // Popped from the index: the cut's own index update must not find it there.
            self.partitions[partition as usize].in_flight = Some(InFlight {
                ticket,
                count: 0,
                bytes: 0,
                data: 0,
            });
            let cut = self.cut(partition);
            let p = &mut self.partitions[partition as usize];
            if cut.is_err() {
                // Only a bug gets here; leave the partition out of this round.
                p.in_flight = None;
                continue;
            }
            debug_assert!(!p.read);
            p.in_flight = Some(InFlight {
                ticket,
                count: p.batches.len(),
                bytes: p.bytes,
                data: p.batches.iter().map(|s| s.data).sum(),
            });
            bytes += p.bytes;
            p.bytes = 0;
            chosen.push((
                partition,
                p.batches
                    .iter()
                    .map(|s| (s.batch.clone(), s.size))
                    .collect(),
            ));
        }
        self.settle();
        (ticket, chosen)
    }

    /// Starts spilling exactly `partition`'s batches (for a direct write of an oversized batch).
    /// `None` if it is being spilled already.
    pub(crate) fn start_spill_of(
        &mut self,
        partition: u32,
    ) -> Result<Option<(u64, SizedBatches)>, Error> {
        if self.partitions[partition as usize].in_flight.is_some() {
            return Ok(None);
        }
        self.cut(partition)?;
        self.settle();
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let p = &mut self.partitions[partition as usize];
        self.victims.update(partition, p.bytes, 0);
        p.in_flight = Some(InFlight {
            ticket,
            count: p.batches.len(),
            bytes: p.bytes,
            data: p.batches.iter().map(|s| s.data).sum(),
        });
        p.bytes = 0;
        Ok(Some((
            ticket,
            p.batches
                .iter()
                .map(|s| (s.batch.clone(), s.size))
                .collect(),
        )))
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
        let spilled: Vec<Stored> = p.batches.drain(..flight.count).collect();
        let rows: usize = spilled.iter().map(|s| s.batch.num_rows()).sum();
        p.memory_rows -= rows;
        p.spilled_rows += rows;
        p.segments.extend(segments);
        let now = p.bytes;
        for s in &spilled {
            self.allocations.remove(&s.allocations);
            self.extra -= s.overhead;
        }
        self.bytes_spilled += flight.data as u64;
        self.victims.update(partition, 0, now);
        self.settle();
        Vec::new()
    }

    /// Adds a direct write's parts, which the spiller wrote to disk on their own, each to its
    /// partition after whatever it holds now: all of them, or none if a partition can no
    /// longer be written (the segments are then handed back to be dropped after unlock).
    pub(crate) fn land_direct(
        &mut self,
        parts: Vec<LandedPart>,
    ) -> Result<(), (Error, Vec<SegmentRef>)> {
        if let Some(e) = parts
            .iter()
            .find_map(|part| self.check_writable(part.partition).err())
        {
            return Err((e, parts.into_iter().flat_map(|p| p.segments).collect()));
        }
        // Rows other producers wrote meanwhile are in memory and read after these segments;
        // this producer's earlier rows were spilled ahead of them by the direct write.
        for part in parts {
            let p = &mut self.partitions[part.partition as usize];
            p.segments.extend(part.segments);
            p.spilled_rows += part.rows;
            self.rows_written += part.rows as u64;
            self.bytes_written += part.size as u64;
            self.bytes_spilled += part.data as u64;
        }
        self.batches_written += 1;
        self.direct_writes += 1;
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
            .map(|p| {
                let open = p.open.as_ref().map_or(0, |o| o.rows());
                PartitionSize {
                    memory_bytes: p.batches.iter().map(Stored::cost).sum::<usize>() + p.open_charge,
                    memory_batches: p.batches.len() + usize::from(open > 0),
                    memory_rows: p.memory_rows,
                    spilled_bytes: p.segments.iter().map(SegmentRef::memory_bytes).sum(),
                    spilled_rows: p.spilled_rows,
                    segments: p.segments.len(),
                    spilling: p.in_flight.is_some(),
                }
            })
            .collect()
    }

    /// Takes every batch, open batch and segment out (on close); returns them to drop after
    /// unlock.
    fn drain_all(&mut self) -> Drained {
        let mut batches = Vec::new();
        let mut open = Vec::new();
        let mut segments = Vec::new();
        for (i, p) in self.partitions.iter_mut().enumerate() {
            if p.in_flight.take().is_none() && !p.read {
                self.victims.update(i as u32, p.bytes, 0);
            }
            p.bytes = 0;
            p.open_charge = 0;
            p.memory_rows = 0;
            batches.append(&mut p.batches);
            open.extend(p.open.take());
            segments.append(&mut p.segments);
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
