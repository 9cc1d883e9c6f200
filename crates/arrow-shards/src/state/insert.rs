//! How rows get into the buffer: each shard kind (a whole batch, a small batch copied into
//! its partition's open batch, a scattered batch reordered or copied in place) is charged
//! before it is stored, and stored whole or not at all. Which rows are copied was decided
//! before the lock ([`crate::route`]); a copy's route brings its compaction settings.
//!
//! The open batches a write copies into are its producer's ([`Lane`]). A small batch and a
//! scattered batch copied in place are copied outside the state lock, in three steps: under
//! the lock, [`State::try_insert`] checks, charges the growth and cuts the open batches that
//! are full ([`Admitted::Copy`], the charge held in `copying`); with only the lane's lock held,
//! [`Pending::copy`] copies the rows; under the lock again, [`State::book`] books what the
//! copy made (its charge, the counters, cuts of batches now full). A reordered batch is stored
//! and copied in one step under the lock.

use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::RecordBatch;

use super::{Lane, Slot, State};
use crate::compact::{self, CompactConfig, Direct, OpenBatch, Start};
use crate::error::Error;
use crate::route::Route;
use crate::shard::{Grouped, Scattered, Shard, Sorted, Stored};

/// What [`State::try_insert`] admitted.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// In the buffer.
    Stored,
    /// Charged; its rows are to be copied into the lane outside the lock, then booked.
    Copy(Pending),
}

/// A write charged under the lock whose rows are copied into its lane's open batches outside
/// it ([`Pending::copy`]) and then booked ([`State::book`]).
#[derive(Debug)]
pub(crate) struct Pending {
    shard: Shard,
    /// The target of a small shard.
    partition: u32,
    /// The growth charged for the copy, held in `State::copying` until it is booked.
    charged: usize,
}

impl State {
    /// Charges and stores `shard`, or refuses it (handing it back) if the pool has no room or
    /// the partition may not be written; rows copied into open batches go into `lane`, the
    /// writer's. `partition` is the target of a `Whole` or `Small` shard; a scattered one
    /// names its own. A small or in-place scattered shard comes back as [`Admitted::Copy`]:
    /// charged, its copy to be made by the caller outside the lock.
    ///
    /// A refusal for more than the whole limit is first retried with the shard's partitions'
    /// next open batches sized from nothing: their start sizes (a quarter of the last cut
    /// batch, see [`crate::compact`]) are a speed hint, and under a small budget the starts of
    /// many partitions at once (after a spill round cut them all) can add up past the limit
    /// although the rows themselves fit: such a write must wait for room, not go to disk.
    pub(crate) fn try_insert(
        &mut self,
        lane: &mut Lane,
        partition: u32,
        shard: Shard,
    ) -> Result<Admitted, (Error, Shard)> {
        match self.try_insert_once(lane, partition, shard) {
            Err((Error::MemoryExhausted { needed, limit, .. }, shard))
                if needed > limit && self.forget_starts(partition, &shard) =>
            {
                self.try_insert_once(lane, partition, shard)
            }
            other => other,
        }
    }

    /// Resets the start size of the partitions `shard` writes to; `true` if any had one.
    fn forget_starts(&mut self, partition: u32, shard: &Shard) -> bool {
        let mut forget = |p: u32| {
            let start = &mut self.partitions[p as usize].start;
            let had = *start != Start::default();
            *start = Start::default();
            had
        };
        match shard {
            Shard::Scattered(scattered) => scattered
                .ranges
                .iter()
                .fold(false, |any, &(p, _, _)| forget(p) | any),
            _ => forget(partition),
        }
    }

    fn try_insert_once(
        &mut self,
        lane: &mut Lane,
        partition: u32,
        shard: Shard,
    ) -> Result<Admitted, (Error, Shard)> {
        let copy = match &shard {
            Shard::Small(batch, config) => Some(self.admit_small(lane, partition, batch, config)),
            Shard::Scattered(scattered) => match &scattered.rows {
                Grouped::Direct(direct, config) => Some(self.admit_direct(
                    lane,
                    &scattered.original,
                    direct,
                    &scattered.ranges,
                    config,
                )),
                Grouped::Sorted(_) | Grouped::Parked(_) => None,
            },
            Shard::Whole(_) => None,
        };
        match (copy, shard) {
            (Some(Ok(charged)), shard) => Ok(Admitted::Copy(Pending {
                shard,
                partition,
                charged,
            })),
            (Some(Err(e)), shard) => Err((e, shard)),
            (None, Shard::Whole(stored)) => self
                .try_insert_whole(lane, partition, stored)
                .map(|()| Admitted::Stored)
                .map_err(|(e, s)| (e, Shard::Whole(s))),
            (None, Shard::Scattered(mut scattered)) => self
                .try_insert_scattered(lane, &mut scattered)
                .map(|()| Admitted::Stored)
                .map_err(|e| (e, Shard::Scattered(scattered))),
            (None, shard @ Shard::Small(..)) => Err((
                Error::Internal("a small shard not admitted as a copy"),
                shard,
            )),
        }
    }

    /// Checks and charges the copy of all of `batch` into `partition`'s open batch in `lane`,
    /// cutting it first if it is full; the charge is held in `copying`. Returns it.
    fn admit_small(
        &mut self,
        lane: &mut Lane,
        partition: u32,
        batch: &RecordBatch,
        config: &CompactConfig,
    ) -> Result<usize, Error> {
        self.check_writable(partition)?;
        self.check_route(config)?;
        let rows = batch.num_rows();
        let slot = &mut lane.slots[partition as usize];
        let needed = self.append_growth(slot, partition, batch, 0, rows, config);
        self.try_reserve(needed)?;
        self.admitted(needed, lane, [(partition, rows)], config)
    }

    /// After the reservation of `needed` bytes for a copy of rows into open batches of `lane`
    /// (`len` rows into `partition`'s, for each of `targets`): holds `needed` in
    /// `copying`, cuts each open batch that is full for its rows and makes a fresh one where
    /// there is none (its buffers allocate at the copy), then settles once. `copying` is raised
    /// before anything settles, so the reservation is never let go and grown back in between
    /// (that released the write's room to the pool, for other writers to take, and woke every
    /// waiting writer, once per write). On failure (only a bug) the reservation is settled
    /// back.
    fn admitted(
        &mut self,
        needed: usize,
        lane: &mut Lane,
        targets: impl IntoIterator<Item = (u32, usize)>,
        config: &CompactConfig,
    ) -> Result<usize, Error> {
        self.copying += needed;
        let mut opened = Ok(());
        for (partition, len) in targets {
            let slot = &mut lane.slots[partition as usize];
            opened = self.cut_if_full_for(slot, partition, len, config);
            if opened.is_err() {
                self.copying -= needed;
                break;
            }
            let start = &self.partitions[partition as usize].start;
            slot.open
                .get_or_insert_with(|| OpenBatch::new(&self.schema, start));
        }
        self.settle();
        opened.map(|()| needed)
    }

    /// Books a copy made outside the lock: drops its charge from `copying`, then, per range,
    /// the open batch's new charge, the counters and the victim index, cutting open batches
    /// that reached a target. `copied` is each range's open batch's data bytes before the copy,
    /// or the copy's error (only a bug: the copy checks before it changes anything).
    pub(crate) fn book(
        &mut self,
        lane: &mut Lane,
        pending: Pending,
        copied: Result<Vec<usize>, Error>,
    ) -> Result<(), (Error, Shard)> {
        let Pending {
            shard,
            partition,
            charged,
        } = pending;
        self.copying -= charged;
        let result = copied.and_then(|before| match &shard {
            Shard::Small(batch, config) => {
                let slot = &mut lane.slots[partition as usize];
                let before = before.first().copied().unwrap_or(0);
                self.appended(slot, partition, batch.num_rows(), before, config)
            }
            Shard::Scattered(scattered) => {
                let Grouped::Direct(_, config) = &scattered.rows else {
                    return Err(Error::Internal("a reordered batch booked as a copy"));
                };
                scattered
                    .ranges
                    .iter()
                    .zip(before)
                    .try_for_each(|(&(p, _, len), before)| {
                        self.appended(&mut lane.slots[p as usize], p, len, before, config)
                    })
            }
            Shard::Whole(_) => Err(Error::Internal("a whole batch booked as a copy")),
        });
        self.settled(result).map_err(|e| (e, shard))
    }

    /// The end of every insert that reserved: the reservation settled to what is held, and the
    /// write counted if it went in.
    fn settled(&mut self, result: Result<(), Error>) -> Result<(), Error> {
        self.settle();
        if result.is_ok() {
            self.batches_written += 1;
        }
        result
    }

    /// Refuses a copy routed with settings other than this buffer's (a bug).
    fn check_route(&self, config: &CompactConfig) -> Result<(), Error> {
        match self.compact {
            Some(own) if own == *config => Ok(()),
            _ => Err(Error::Internal(
                "rows routed to an open batch with other compaction settings",
            )),
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

    fn try_insert_whole(
        &mut self,
        lane: &mut Lane,
        partition: u32,
        stored: Stored,
    ) -> Result<(), (Error, Stored)> {
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
        // Rows this producer copied into its open batch were written first: cut it so they
        // stay first.
        if let Err(e) = self.cut(partition, &mut lane.slots[partition as usize]) {
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

    /// Charges and stores every range of a reordered batch, or none (refusing the whole
    /// batch). (A batch copied in place is [`admit_direct`](Self::admit_direct)'s.)
    fn try_insert_scattered(
        &mut self,
        lane: &mut Lane,
        scattered: &mut Scattered,
    ) -> Result<(), Error> {
        let Scattered { rows, ranges, .. } = scattered;
        for &(partition, _, _) in ranges.iter() {
            self.check_writable(partition)?;
        }
        match rows {
            Grouped::Sorted(sorted) => self.try_insert_sorted(lane, sorted, ranges),
            Grouped::Direct(..) => Err(Error::Internal("a batch copied in place stored whole")),
            Grouped::Parked(_) => Err(Error::Internal("a parked batch inserted before its gather")),
        }
    }

    /// Charges and stores every range of a reordered batch as its route says: copied into its
    /// open batch, or kept whole as a slice (the slices share the batch's allocations, which
    /// count once). The reordered copy itself is charged already (`sorted.charge`): its
    /// allocations kept by slices move into the ledger from that charge, and the rest of it
    /// stays reserved until the copies are made, so the pool covers the copy while it lives
    /// (unless the copy and the write's growth together exceed the whole limit: then the copy
    /// goes uncharged, see below). Its copies are made under the lock.
    fn try_insert_sorted(
        &mut self,
        lane: &mut Lane,
        sorted: &mut Sorted,
        ranges: &[(u32, usize, usize)],
    ) -> Result<(), Error> {
        let Sorted {
            batch,
            routes,
            charge,
            copied,
            ..
        } = sorted;
        if routes.len() != ranges.len() {
            return Err(Error::Internal(
                "a scattered batch without a route per range",
            ));
        }
        let mut whole = Vec::new();
        let mut needed = 0;
        let mut shared = Vec::new();
        for (&(partition, start, len), route) in ranges.iter().zip(routes.iter()) {
            match route {
                Route::Copy(config) => {
                    self.check_route(config)?;
                    let slot = &lane.slots[partition as usize];
                    needed += self.append_growth(slot, partition, batch, start, len, config);
                }
                Route::Whole => {
                    let stored = Stored::share_of(batch.slice(start, len), batch.num_rows());
                    needed += stored.overhead;
                    shared.extend_from_slice(&stored.allocations);
                    whole.push((partition, stored));
                }
            }
        }
        shared.sort_unstable_by_key(|a| a.ptr);
        shared.dedup_by_key(|a| a.ptr);
        let kept = self.allocations.added_bytes(&shared);
        // The copy's own allocations among those kept are charged already.
        let covered: usize = shared
            .iter()
            .filter(|a| copied.binary_search_by_key(&a.ptr, |c| c.ptr).is_ok())
            .map(|a| a.capacity)
            .sum();
        let charged = charge.size();
        // What the pool must give on top of the copy's charge (none once that charge was given
        // back, by an earlier try of this write).
        let more = needed + kept - covered.min(kept).min(charged);
        match self.try_reserve(more) {
            Ok(()) => self.reservation.merge(charge.split(charged)),
            // The copy and the rest together need more than the whole limit, so no wait would
            // make room for both: the copy's charge is given back and the write charged as if
            // it were not there (it lives only until the ranges are copied),
            // rather than sent to disk: under a tiny budget (2 MiB, small_budget.rs in the
            // CLI's tests) a write's growth alone can be most of the limit.
            Err(Error::MemoryExhausted { limit, .. }) if more + charged > limit => {
                charge.free();
                self.try_reserve(needed + kept)?;
            }
            Err(e) => return Err(e),
        }
        let mut whole = whole.into_iter().peekable();
        let mut result = Ok(());
        for (&(partition, start, len), route) in ranges.iter().zip(routes.iter()) {
            let slot = &mut lane.slots[partition as usize];
            let step = match (route, whole.next_if(|(p, _)| *p == partition)) {
                (_, Some((_, stored))) => self.cut(partition, slot).map(|()| {
                    self.allocations.insert(&stored.allocations);
                    self.extra += stored.overhead;
                    self.rows_written += len as u64;
                    self.bytes_written += stored.size as u64;
                    self.push_stored(partition, stored);
                }),
                (Route::Copy(config), None) => {
                    self.append(slot, partition, batch, start, len, config)
                }
                (Route::Whole, None) => Err(Error::Internal("a range stored whole was not sized")),
            };
            if step.is_err() {
                // Only a bug gets here (the rows were checked); keep what was stored.
                result = step;
                break;
            }
        }
        // Down to what is held: the copy's charge beyond the slices kept goes back to the pool.
        self.settled(result)
    }

    /// Checks and charges a batch's rows copied straight into their partitions' open batches
    /// in `lane` ([`compact::copy_rows`], by [`Pending::copy`]), or refuses the whole batch;
    /// cuts the open batches that are full for their range. Every range is below the
    /// compaction target and every column flat (the scatter chose [`Grouped::Direct`]).
    /// Returns the charge, held in `copying`.
    fn admit_direct(
        &mut self,
        lane: &mut Lane,
        batch: &RecordBatch,
        direct: &Direct,
        ranges: &[(u32, usize, usize)],
        config: &CompactConfig,
    ) -> Result<usize, Error> {
        for &(partition, _, _) in ranges {
            self.check_writable(partition)?;
        }
        self.check_route(config)?;
        let has_nulls: Vec<bool> = batch.columns().iter().map(|a| a.null_count() > 0).collect();
        let mut needed = 0;
        for (k, &(partition, _, len)) in ranges.iter().enumerate() {
            let var = |c: usize| direct.var(c, k);
            let slot = &lane.slots[partition as usize];
            needed += match self.landing(slot, partition, len, config) {
                Landing::Open(open) => open.growth_of_rows(len, var, &has_nulls, config),
                Landing::Fresh(start) => OpenBatch::fresh_charge_of_rows(
                    &self.schema,
                    &start,
                    len,
                    var,
                    &has_nulls,
                    config,
                ),
            };
        }
        self.try_reserve(needed)?;
        let targets = ranges.iter().map(|&(partition, _, len)| (partition, len));
        self.admitted(needed, lane, targets, config)
    }

    /// What appending `batch[start..start + len]` to `partition`'s open batch in `slot` would
    /// add.
    fn append_growth(
        &self,
        slot: &Slot,
        partition: u32,
        batch: &RecordBatch,
        start: usize,
        len: usize,
        config: &CompactConfig,
    ) -> usize {
        // A cut never adds to the charge (`OpenBatch::bytes`), so only the append counts.
        match self.landing(slot, partition, len, config) {
            Landing::Open(open) => open.growth(batch, start, len, config),
            Landing::Fresh(from) => {
                OpenBatch::fresh_charge(&self.schema, &from, batch, start, len, config)
            }
        }
    }

    /// Where `len` more rows for `partition` land: its open batch in `slot`, or a fresh one
    /// (none yet, or the open one is full for them and is cut first: the fresh one starts
    /// where it leaves off).
    fn landing<'a>(
        &'a self,
        slot: &'a Slot,
        partition: u32,
        len: usize,
        config: &CompactConfig,
    ) -> Landing<'a> {
        match &slot.open {
            Some(open) if !open.is_full_for(&self.cut_config(partition, config), len) => {
                Landing::Open(open)
            }
            Some(open) => Landing::Fresh(Cow::Owned(open.next_start())),
            None => Landing::Fresh(Cow::Borrowed(&self.partitions[partition as usize].start)),
        }
    }

    /// When `partition`'s open batch is cut: at the streaming byte target while it has a
    /// subscriber (see [`CompactConfig::stream_bytes`]).
    fn cut_config(&self, partition: u32, config: &CompactConfig) -> CompactConfig {
        match self.partitions[partition as usize].reader {
            super::Reader::Streaming { .. } => config.streaming(),
            _ => *config,
        }
    }

    /// Cuts `partition`'s open batch in `slot` if `len` more rows would pass a target.
    fn cut_if_full_for(
        &mut self,
        slot: &mut Slot,
        partition: u32,
        len: usize,
        config: &CompactConfig,
    ) -> Result<(), Error> {
        let cut = self.cut_config(partition, config);
        let full = slot.open.as_ref().is_some_and(|o| o.is_full_for(&cut, len));
        if full {
            self.cut(partition, slot)?;
        }
        Ok(())
    }

    /// Copies `batch[start..start + len]` into `partition`'s open batch in `slot` under the
    /// lock (a reordered batch's range), cutting it first if it is full. The caller has
    /// reserved [`append_growth`](Self::append_growth) and settles after.
    fn append(
        &mut self,
        slot: &mut Slot,
        partition: u32,
        batch: &RecordBatch,
        start: usize,
        len: usize,
        config: &CompactConfig,
    ) -> Result<(), Error> {
        self.cut_if_full_for(slot, partition, len, config)?;
        let from = &self.partitions[partition as usize].start;
        let open = slot
            .open
            .get_or_insert_with(|| OpenBatch::new(&self.schema, from));
        let before = open.data_bytes();
        open.append(batch, start, len, config)
            .map_err(|e| Error::Arrow(Arc::new(e)))?;
        self.appended(slot, partition, len, before, config)
    }

    /// Books `len` rows just copied into `partition`'s open batch in `slot` (which held
    /// `data_before` bytes of data before): its new charge, the counters, the victim index;
    /// then cuts it if it reached a target.
    fn appended(
        &mut self,
        slot: &mut Slot,
        partition: u32,
        len: usize,
        data_before: usize,
        config: &CompactConfig,
    ) -> Result<(), Error> {
        let cut = self.cut_config(partition, config);
        let p = &mut self.partitions[partition as usize];
        let open = slot
            .open
            .as_ref()
            .ok_or(Error::Internal("rows were copied into no open batch"))?;
        let (charge, written, full) = (
            open.bytes(),
            open.data_bytes() - data_before,
            open.is_full(&cut),
        );
        let old = p.bytes;
        self.extra = self.extra + charge - slot.charge;
        p.bytes = p.bytes + charge - slot.charge;
        p.open_charge = p.open_charge + charge - slot.charge;
        slot.charge = charge;
        p.memory_rows += len;
        p.open_rows += len;
        self.rows_written += len as u64;
        self.bytes_written += written as u64;
        // An abandoned partition's rows are discarded by the cut (see `push_stored`).
        let abandoned = matches!(p.reader, super::Reader::Abandoned);
        // A subscriber with a minimum is woken when an open batch reaches it.
        if let super::Reader::Streaming { notify, min_rows } = &p.reader {
            let rows = open.rows();
            if *min_rows > 0 && rows >= *min_rows && rows - len < *min_rows && !full {
                self.wakes.push(Arc::clone(notify));
            }
        }
        self.bytes_changed(partition, old);
        if full || abandoned {
            self.cut(partition, slot)?;
        }
        Ok(())
    }
}

impl Pending {
    /// Copies the rows into `lane`'s open batches (made by [`State::try_insert`]), with no
    /// lock but the lane's: each range's open batch's data bytes before the copy, for
    /// [`State::book`].
    pub(crate) fn copy(&self, lane: &mut Lane) -> Result<Vec<usize>, Error> {
        let arrow = |e| Error::Arrow(Arc::new(e));
        match &self.shard {
            Shard::Small(batch, config) => {
                let open = open_of(&mut lane.slots[self.partition as usize])?;
                let before = open.data_bytes();
                open.append(batch, 0, batch.num_rows(), config)
                    .map_err(arrow)?;
                Ok(vec![before])
            }
            Shard::Scattered(scattered) => {
                let Grouped::Direct(direct, config) = &scattered.rows else {
                    return Err(Error::Internal("a reordered batch copied outside the lock"));
                };
                let ranges = &scattered.ranges;
                let lens: Vec<usize> = ranges.iter().map(|r| r.2).collect();
                let mut before = Vec::with_capacity(ranges.len());
                // The ranges' open batches, in range order (ranges ascend by partition).
                let mut targets: Vec<&mut OpenBatch> = Vec::with_capacity(ranges.len());
                let mut rest = &mut lane.slots[..];
                let mut base = 0;
                for &(partition, _, _) in ranges {
                    let (_, tail) = rest.split_at_mut(partition as usize - base);
                    let (slot, tail) = tail
                        .split_first_mut()
                        .ok_or(Error::Internal("a scattered range names no partition"))?;
                    let open = open_of(slot)?;
                    before.push(open.data_bytes());
                    targets.push(open);
                    rest = tail;
                    base = partition as usize + 1;
                }
                compact::copy_rows(&mut targets, &scattered.original, direct, &lens, config)
                    .map_err(arrow)?;
                Ok(before)
            }
            Shard::Whole(_) => Err(Error::Internal("a whole batch copied")),
        }
    }
}

/// The open batch [`State::try_insert`] made ready in `slot`.
fn open_of(slot: &mut Slot) -> Result<&mut OpenBatch, Error> {
    slot.open
        .as_mut()
        .ok_or(Error::Internal("a copy into no open batch"))
}

/// Where an append lands (see [`State::landing`]).
enum Landing<'a> {
    /// The partition's open batch.
    Open(&'a OpenBatch),
    /// A new open batch starting at this size.
    Fresh(Cow<'a, Start>),
}
