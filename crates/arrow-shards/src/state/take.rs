//! How batches leave the buffer for a reader, under its lock: a read takes a complete
//! partition at once; a subscription claims a partition and takes what is there, again and
//! again, while writers go on; a dropped subscription abandons its partition. Every take voids
//! a spill of the same batches that is running (its segments are dropped when it commits).

use std::sync::Arc;

use arrow_shards_spill::SegmentRef;
use tokio::sync::Notify;

use super::{Lanes, Reader, State, Taken};
use crate::compact::{OpenBatch, Start};
use crate::error::Error;
use crate::shard::Stored;

/// What one take of a subscription hands over.
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) taken: Taken,
    /// Whether this is the partition's last take (it was sealed or the buffer finished).
    pub(crate) last: bool,
}

/// What an abandoned partition held, to drop after unlock (dropping a segment may delete a
/// file).
pub(crate) type Discarded = (Vec<Stored>, Vec<OpenBatch>, Vec<SegmentRef>);

impl State {
    /// Marks `partition` read and takes its segments and batches, open batch included (it must
    /// be sealed or the buffer finished), with a reservation for the bytes those batches alone
    /// keep alive; allocations shared with other partitions stay charged to the buffer.
    pub(crate) fn take_for_read(
        &mut self,
        partition: u32,
        lanes: Lanes<'_, '_>,
    ) -> Result<Taken, Error> {
        self.claim(partition)?;
        let p = &self.partitions[partition as usize];
        if !(p.sealed || self.finished) {
            return Err(Error::NotComplete { partition });
        }
        let taken = self.take_rest(partition, lanes)?;
        self.partitions[partition as usize].reader = Reader::Done;
        self.partitions_read += 1;
        Ok(taken)
    }

    /// Claims `partition` for a subscription: the `Notify` it waits on for more. With
    /// `min_rows` above 0, its takes also cut the open batch once it holds that many rows.
    pub(crate) fn subscribe(
        &mut self,
        partition: u32,
        min_rows: usize,
    ) -> Result<Arc<Notify>, Error> {
        self.claim(partition)?;
        let notify = Arc::new(Notify::new());
        self.partitions[partition as usize].reader = Reader::Streaming {
            notify: Arc::clone(&notify),
            min_rows,
        };
        self.partitions_read += 1;
        Ok(notify)
    }

    /// Refuses a second reader, and anything once closed.
    fn claim(&self, partition: u32) -> Result<(), Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        match self.partitions[partition as usize].reader {
            Reader::Unclaimed => Ok(()),
            _ => Err(Error::AlreadyRead { partition }),
        }
    }

    /// Takes what `partition`'s subscription may have now: its segments and stored batches,
    /// and its open batches (one per lane) that hold the subscription's minimum of rows; once it
    /// is sealed or the buffer finished, its open batches whatever their size, and that take is
    /// the last.
    pub(crate) fn take_some(
        &mut self,
        partition: u32,
        lanes: Lanes<'_, '_>,
    ) -> Result<Chunk, Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        let Reader::Streaming { min_rows, .. } = self.partitions[partition as usize].reader else {
            return Err(Error::Internal("a take by a partition's non-subscriber"));
        };
        let p = &self.partitions[partition as usize];
        if p.sealed || self.finished {
            let taken = self.take_rest(partition, lanes)?;
            self.partitions[partition as usize].reader = Reader::Done;
            return Ok(Chunk { taken, last: true });
        }
        if min_rows > 0 && self.cut_lanes_from(partition, min_rows, lanes)? {
            self.settle();
        }
        let taken = self.take_taken(partition);
        self.rows_streamed += taken.rows() as u64;
        Ok(Chunk { taken, last: false })
    }

    /// Cuts `partition`'s open batches and takes everything.
    fn take_rest(&mut self, partition: u32, lanes: Lanes<'_, '_>) -> Result<Taken, Error> {
        self.cut_lanes(partition, lanes)?;
        self.settle();
        let taken = self.take_taken(partition);
        self.partitions[partition as usize].start = Start::default();
        Ok(taken)
    }

    /// Takes `partition`'s segments and stored batches (voiding a running spill of them) with
    /// the reservation of what they alone keep alive; its open batch stays.
    fn take_taken(&mut self, partition: u32) -> Taken {
        let held = self.held();
        let p = &mut self.partitions[partition as usize];
        let old = match p.in_flight.take() {
            // In flight: out of the victim index, which holds it again below.
            Some(_) => {
                self.spills_voided += 1;
                0
            }
            None => p.bytes,
        };
        p.bytes = p.open_charge;
        let batches = std::mem::take(&mut p.batches);
        let segments = std::mem::take(&mut p.segments);
        p.spilled_rows = 0;
        p.memory_rows = p.open_rows;
        let now = p.bytes;
        self.victims.update(partition, old, now);
        for s in &batches {
            self.allocations.remove(&s.allocations);
            self.extra -= s.overhead;
        }
        let freed = held - self.held();
        Taken {
            segments,
            batches,
            reservation: self.reservation.split(freed),
        }
    }

    /// Ends `partition`'s subscription before its end: what it holds is discarded (returned,
    /// to drop after unlock) and so is what is written to it from now on
    /// (`Metrics::rows_discarded`). Nothing happens if the subscription had reached its end.
    pub(crate) fn abandon(&mut self, partition: u32, lanes: Lanes<'_, '_>) -> Discarded {
        let p = &mut self.partitions[partition as usize];
        if !matches!(p.reader, Reader::Streaming { .. }) {
            return (Vec::new(), Vec::new(), Vec::new());
        }
        p.reader = Reader::Abandoned;
        let rows = p.memory_rows + p.spilled_rows;
        let old = p.bytes;
        let open = self.drop_lanes(partition, lanes);
        let p = &self.partitions[partition as usize];
        if p.in_flight.is_none() {
            self.victims.update(partition, old, p.bytes);
        }
        self.rows_discarded += rows as u64;
        let taken = self.take_taken(partition);
        self.settle();
        // The reservation split off for the batches goes back to the pool with `taken`.
        (taken.batches, open, taken.segments)
    }
}

impl State {
    /// Counts rows a dropped subscription had taken but not handed to its consumer.
    pub(crate) fn note_discarded(&mut self, rows: u64) {
        self.rows_discarded += rows;
    }
}

impl Taken {
    /// Rows in memory batches and segments.
    pub(crate) fn rows(&self) -> usize {
        let memory: usize = self.batches.iter().map(|s| s.batch.num_rows()).sum();
        let spilled: u64 = self.segments.iter().map(SegmentRef::rows).sum();
        memory + spilled as usize
    }
}
