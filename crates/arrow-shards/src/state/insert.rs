//! How rows get into the buffer, under its lock: each shard kind (a whole batch, a small batch
//! copied into its partition's open batch, a scattered batch reordered or copied in place) is
//! charged before it is stored, and stored whole or not at all. Which rows are copied was
//! decided before the lock ([`crate::route`]); a copy's route brings its compaction settings.

use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::RecordBatch;

use super::State;
use crate::compact::{self, CompactConfig, Direct, OpenBatch, Start};
use crate::error::Error;
use crate::route::Route;
use crate::shard::{Grouped, Scattered, Shard, Sorted, Stored};

impl State {
    /// Charges and stores `shard`, or refuses it (handing it back) if the pool has no room or
    /// the partition may not be written. `partition` is the target of a `Whole` or `Small`
    /// shard; a scattered one names its own.
    ///
    /// A refusal for more than the whole limit is first retried with the shard's partitions'
    /// next open batches sized from nothing: their start sizes (a quarter of the last cut
    /// batch, see [`crate::compact`]) are a speed hint, and under a small budget the starts of
    /// many partitions at once (after a spill round cut them all) can add up past the limit
    /// although the rows themselves fit: such a write must wait for room, not go to disk.
    pub(crate) fn try_insert(
        &mut self,
        partition: u32,
        shard: Shard,
    ) -> Result<(), (Error, Shard)> {
        match self.try_insert_once(partition, shard) {
            Err((Error::MemoryExhausted { needed, limit, .. }, shard))
                if needed > limit && self.forget_starts(partition, &shard) =>
            {
                self.try_insert_once(partition, shard)
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

    fn try_insert_once(&mut self, partition: u32, shard: Shard) -> Result<(), (Error, Shard)> {
        match shard {
            Shard::Whole(stored) => self
                .try_insert_whole(partition, stored)
                .map_err(|(e, s)| (e, Shard::Whole(s))),
            Shard::Small(batch, config) => self
                .try_insert_small(partition, &batch, &config)
                .map_err(|e| (e, Shard::Small(batch, config))),
            Shard::Scattered(mut scattered) => self
                .try_insert_scattered(&mut scattered)
                .map_err(|e| (e, Shard::Scattered(scattered))),
        }
    }

    /// Charges and copies all of `batch` into `partition`'s open batch, or refuses it.
    fn try_insert_small(
        &mut self,
        partition: u32,
        batch: &RecordBatch,
        config: &CompactConfig,
    ) -> Result<(), Error> {
        self.check_writable(partition)?;
        self.check_route(config)?;
        let rows = batch.num_rows();
        self.try_reserve(self.append_growth(partition, batch, 0, rows, config))?;
        let result = self.append(partition, batch, 0, rows, config);
        self.settled(result)
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
    fn try_insert_scattered(&mut self, scattered: &mut Scattered) -> Result<(), Error> {
        let Scattered {
            original,
            rows,
            ranges,
        } = scattered;
        for &(partition, _, _) in ranges.iter() {
            self.check_writable(partition)?;
        }
        match rows {
            Grouped::Sorted(sorted) => self.try_insert_sorted(sorted, ranges),
            Grouped::Direct(direct, config) => self.try_insert_direct(InPlace {
                batch: original,
                direct,
                ranges,
                config,
            }),
        }
    }

    /// Charges and stores every range of a reordered batch as its route says: copied into its
    /// open batch, or kept whole as a slice (the slices share the batch's allocations, which
    /// count once). The reordered copy itself is charged already (`sorted.charge`): its
    /// allocations kept by slices move into the ledger from that charge, and the rest of it
    /// stays reserved until the copies are made, so the pool covers the copy while it lives
    /// (unless the copy and the write's growth together exceed the whole limit: then the copy
    /// goes uncharged, see below).
    fn try_insert_sorted(
        &mut self,
        sorted: &mut Sorted,
        ranges: &[(u32, usize, usize)],
    ) -> Result<(), Error> {
        let Sorted {
            batch,
            routes,
            charge,
            copied,
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
                    needed += self.append_growth(partition, batch, start, len, config);
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
            let step = match (route, whole.next_if(|(p, _)| *p == partition)) {
                (_, Some((_, stored))) => self.cut(partition).map(|()| {
                    self.allocations.insert(&stored.allocations);
                    self.extra += stored.overhead;
                    self.rows_written += len as u64;
                    self.bytes_written += stored.size as u64;
                    self.push_stored(partition, stored);
                }),
                (Route::Copy(config), None) => self.append(partition, batch, start, len, config),
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

    /// Charges a batch's rows and copies each straight into its partition's open batch
    /// ([`compact::copy_rows`]), or refuses the whole batch. Every range is below the compaction
    /// target and every column flat (the scatter chose [`Grouped::Direct`]).
    fn try_insert_direct(&mut self, rows: InPlace<'_>) -> Result<(), Error> {
        let InPlace {
            batch,
            direct,
            ranges,
            config,
        } = rows;
        self.check_route(config)?;
        let has_nulls: Vec<bool> = batch.columns().iter().map(|a| a.null_count() > 0).collect();
        let mut needed = 0;
        for (k, &(partition, _, len)) in ranges.iter().enumerate() {
            let var = |c: usize| direct.var(c, k);
            needed += match self.landing(partition, len, config) {
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
        let result = self.copy_direct(rows);
        self.settled(result)
    }

    /// The reserved part of [`try_insert_direct`](Self::try_insert_direct): cuts the open
    /// batches that are full for their range, copies the rows, then books each partition's new
    /// charge and cuts those that reached a target.
    fn copy_direct(&mut self, rows: InPlace<'_>) -> Result<(), Error> {
        let (ranges, config) = (rows.ranges, rows.config);
        for &(partition, _, len) in ranges {
            self.cut_if_full_for(partition, len, config)?;
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
                let (p, tail) = tail
                    .split_first_mut()
                    .ok_or(Error::Internal("a scattered range names no partition"))?;
                let open = p
                    .open
                    .get_or_insert_with(|| OpenBatch::new(&schema, &p.start));
                before.push(open.data_bytes());
                targets.push(open);
                rest = tail;
                base = partition as usize + 1;
            }
            compact::copy_rows(&mut targets, rows.batch, rows.direct, &lens, config)
                .map_err(|e| Error::Arrow(Arc::new(e)))?;
        }
        for (&(partition, _, len), data_before) in ranges.iter().zip(before) {
            self.appended(partition, len, data_before, config)?;
        }
        Ok(())
    }

    /// What appending `batch[start..start + len]` to `partition`'s open batch would add.
    fn append_growth(
        &self,
        partition: u32,
        batch: &RecordBatch,
        start: usize,
        len: usize,
        config: &CompactConfig,
    ) -> usize {
        // A cut never adds to the charge (`OpenBatch::bytes`), so only the append counts.
        match self.landing(partition, len, config) {
            Landing::Open(open) => open.growth(batch, start, len, config),
            Landing::Fresh(from) => {
                OpenBatch::fresh_charge(&self.schema, &from, batch, start, len, config)
            }
        }
    }

    /// Where `len` more rows for `partition` land: its open batch, or a fresh one (none yet, or
    /// the open one is full for them and is cut first: the fresh one starts where it leaves off).
    fn landing(&self, partition: u32, len: usize, config: &CompactConfig) -> Landing<'_> {
        let p = &self.partitions[partition as usize];
        match &p.open {
            Some(open) if !open.is_full_for(&self.cut_config(partition, config), len) => {
                Landing::Open(open)
            }
            Some(open) => Landing::Fresh(Cow::Owned(open.next_start())),
            None => Landing::Fresh(Cow::Borrowed(&p.start)),
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

    /// Cuts `partition`'s open batch if `len` more rows would pass a target.
    fn cut_if_full_for(
        &mut self,
        partition: u32,
        len: usize,
        config: &CompactConfig,
    ) -> Result<(), Error> {
        let cut = self.cut_config(partition, config);
        let full = self.partitions[partition as usize]
            .open
            .as_ref()
            .is_some_and(|o| o.is_full_for(&cut, len));
        if full {
            self.cut(partition)?;
        }
        Ok(())
    }

    /// Copies `batch[start..start + len]` into `partition`'s open batch, cutting it first if it
    /// is full. The caller has reserved [`append_growth`](Self::append_growth) and settles after.
    fn append(
        &mut self,
        partition: u32,
        batch: &RecordBatch,
        start: usize,
        len: usize,
        config: &CompactConfig,
    ) -> Result<(), Error> {
        self.cut_if_full_for(partition, len, config)?;
        let schema = Arc::clone(&self.schema);
        let p = &mut self.partitions[partition as usize];
        let open = p
            .open
            .get_or_insert_with(|| OpenBatch::new(&schema, &p.start));
        let before = open.data_bytes();
        open.append(batch, start, len, config)
            .map_err(|e| Error::Arrow(Arc::new(e)))?;
        self.appended(partition, len, before, config)
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
        let cut = self.cut_config(partition, config);
        let p = &mut self.partitions[partition as usize];
        let open = p
            .open
            .as_ref()
            .ok_or(Error::Internal("rows were copied into no open batch"))?;
        let (charge, written, full) = (
            open.bytes(),
            open.data_bytes() - data_before,
            open.is_full(&cut),
        );
        let old = p.bytes;
        self.extra = self.extra + charge - p.open_charge;
        p.bytes = p.bytes + charge - p.open_charge;
        p.open_charge = charge;
        p.memory_rows += len;
        self.rows_written += len as u64;
        self.bytes_written += written as u64;
        // An abandoned partition's rows are discarded by the cut (see `push_stored`).
        let abandoned = matches!(p.reader, super::Reader::Abandoned);
        // A subscriber with a minimum is woken when the open batch reaches it.
        if let super::Reader::Streaming { notify, min_rows } = &p.reader {
            let rows = open.rows();
            if *min_rows > 0 && rows >= *min_rows && rows - len < *min_rows && !full {
                self.wakes.push(Arc::clone(notify));
            }
        }
        self.bytes_changed(partition, old);
        if full || abandoned {
            self.cut(partition)?;
        }
        Ok(())
    }
}

/// Where an append lands (see [`State::landing`]).
enum Landing<'a> {
    /// The partition's open batch.
    Open(&'a OpenBatch),
    /// A new open batch starting at this size.
    Fresh(Cow<'a, Start>),
}

/// A scattered batch copied in place: its rows, their tags, its ranges and the settings its
/// route brought.
#[derive(Clone, Copy)]
struct InPlace<'a> {
    batch: &'a RecordBatch,
    direct: &'a Direct,
    ranges: &'a [(u32, usize, usize)],
    config: &'a CompactConfig,
}
