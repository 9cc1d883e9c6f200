//! A producer's open batches: one [`Lane`] per writing handle, one open batch per partition in
//! it. Rows are copied into a lane with only the lane's own mutex held, so producers on
//! different handles copy at the same time; the [`State`] lock charges the copy before it is
//! made and books it after (`insert.rs`), and cuts full open batches into stored batches
//! (moving their buffers, no copy).
//!
//! Everyone else who needs a partition's open batches (a spill round, a read, a take, an
//! abandon, a direct write, close) locks every lane first, then the state
//! ([`crate::shared::Shared::with_lanes`]), and cuts or drops them here. Each producer's rows
//! stay in write order per partition: they live in one lane, whose open batch is cut before
//! anything else of that producer's joins the partition.

use super::{Lane, Lanes, Reader, Slot, State};
use crate::compact::OpenBatch;
use crate::error::Error;

impl Lane {
    pub(crate) fn new(num_partitions: u32) -> Self {
        Self {
            slots: (0..num_partitions).map(|_| Slot::default()).collect(),
        }
    }

    /// Rows in `partition`'s open batch of this lane.
    pub(crate) fn rows(&self, partition: u32) -> usize {
        self.slots[partition as usize]
            .open
            .as_ref()
            .map_or(0, OpenBatch::rows)
    }
}

impl State {
    /// Cuts `partition`'s open batch in every lane, in lane order.
    pub(super) fn cut_lanes(&mut self, partition: u32, lanes: Lanes<'_, '_>) -> Result<(), Error> {
        for lane in lanes.iter_mut() {
            self.cut(partition, &mut lane.slots[partition as usize])?;
        }
        Ok(())
    }

    /// Cuts `partition`'s open batches of `min_rows` rows or more (a subscription's minimum).
    pub(super) fn cut_lanes_from(
        &mut self,
        partition: u32,
        min_rows: usize,
        lanes: Lanes<'_, '_>,
    ) -> Result<bool, Error> {
        let mut any = false;
        for lane in lanes.iter_mut() {
            if lane.rows(partition) >= min_rows {
                self.cut(partition, &mut lane.slots[partition as usize])?;
                any = true;
            }
        }
        Ok(any)
    }

    /// Takes `partition`'s open batches out of every lane, uncharged (an abandoned partition's
    /// rows, or close): returned to drop after unlock. The caller settles.
    pub(super) fn drop_lanes(&mut self, partition: u32, lanes: Lanes<'_, '_>) -> Vec<OpenBatch> {
        let p = &mut self.partitions[partition as usize];
        let mut dropped = Vec::new();
        for lane in lanes.iter_mut() {
            let slot = &mut lane.slots[partition as usize];
            self.extra -= slot.charge;
            p.bytes -= slot.charge;
            p.open_charge -= slot.charge;
            slot.charge = 0;
            if let Some(open) = slot.open.take() {
                p.open_rows -= open.rows();
                p.memory_rows -= open.rows();
                dropped.push(open);
            }
        }
        dropped
    }

    /// Cuts every open batch of `lane` into its partition (a handle that stops writing hands
    /// its rows over); on a closed buffer they are dropped (close took their charges).
    pub(crate) fn flush_lane(&mut self, lane: &mut Lane) -> Result<(), Error> {
        if self.closed {
            lane.slots.iter_mut().for_each(|s| *s = Slot::default());
            return Ok(());
        }
        let mut result = Ok(());
        for (partition, slot) in lane.slots.iter_mut().enumerate() {
            if slot.open.is_some() {
                // A read partition holds no open rows: they were cut when it was read.
                debug_assert!(
                    !matches!(self.partitions[partition].reader, Reader::Done) || slot.charge == 0
                );
                let step = self.cut(partition as u32, slot);
                result = result.and(step);
            }
        }
        self.settle();
        result
    }
}
