//! How batches leave memory, under the buffer's lock: spill tickets (a round or a direct write
//! marks a partition's batches in flight, then commits or aborts), the landing of a direct
//! write's parts. (A reader's take, which voids a running spill's ticket, is in `take.rs`.)

use arrow_shards_memory::Exclusive;
use arrow_shards_spill::SegmentRef;

use super::{InFlight, LandedPart, Lanes, Reader, SizedBatches, State};
use crate::error::Error;
use crate::shard::Stored;

impl State {
    /// The bytes of the largest partition a spill round could take now; 0 if none, or if
    /// spilling is failing or the buffer is closed (another buffer on the pool then spills its
    /// own rather than wait on this one).
    pub(crate) fn largest_spillable(&self) -> usize {
        if self.closed || self.spill_error.is_some() {
            return 0;
        }
        self.victims.largest()
    }

    /// True if nothing this buffer holds could be spilled to free memory, now or when a running
    /// round commits: no spillable partition and no spill in flight. A writer refused then
    /// would wait for memory only others can free (a pool shared with other consumers).
    pub(crate) fn nothing_to_free(&self) -> bool {
        self.largest_spillable() == 0 && self.partitions.iter().all(|p| p.in_flight.is_none())
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
        lanes: Lanes<'_, '_>,
    ) -> (u64, Vec<(u32, SizedBatches)>) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let mut chosen = Vec::new();
        // What the chosen partitions really release: batches of different partitions may share
        // an allocation (slices of one parent, a dictionary's values), which goes only when
        // every batch holding it does. Counting each partition's full size instead made rounds
        // that took one partition "of 975 KB" and freed 7 KB, thousands of times (the CLI under
        // 2 MiB, where decoded dictionary values are shared by every partition's batches).
        let mut released = Exclusive::new();
        let mut overheads = 0;
        while released.bytes() + overheads < want.max(1) {
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
            let cut = self.cut_lanes(partition, lanes);
            let p = &mut self.partitions[partition as usize];
            if cut.is_err() || p.batches.is_empty() {
                // Only a bug fails a cut; an abandoned partition's cut batch was discarded.
                // Leave the partition out of this round.
                p.in_flight = None;
                continue;
            }
            debug_assert!(!matches!(p.reader, Reader::Done));
            p.in_flight = Some(InFlight {
                ticket,
                count: p.batches.len(),
                bytes: p.bytes,
                data: p.batches.iter().map(|s| s.data).sum(),
            });
            for stored in &p.batches {
                released.add(&self.allocations, &stored.allocations);
                overheads += stored.overhead;
            }
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
        lanes: Lanes<'_, '_>,
    ) -> Result<Option<(u64, SizedBatches)>, Error> {
        if self.partitions[partition as usize].in_flight.is_some() {
            return Ok(None);
        }
        self.cut_lanes(partition, lanes)?;
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
    /// longer be written (the segments are then handed back to be dropped after unlock). A
    /// part for a partition whose subscription was dropped is discarded (handed back too).
    pub(crate) fn land_direct(
        &mut self,
        parts: Vec<LandedPart>,
    ) -> Result<Vec<SegmentRef>, (Error, Vec<SegmentRef>)> {
        if let Some(e) = parts
            .iter()
            .find_map(|part| self.check_writable(part.partition).err())
        {
            return Err((e, parts.into_iter().flat_map(|p| p.segments).collect()));
        }
        // Rows other producers wrote meanwhile are in memory and read after these segments;
        // this producer's earlier rows were spilled ahead of them by the direct write.
        let mut discarded = Vec::new();
        for part in parts {
            self.rows_written += part.rows as u64;
            self.bytes_written += part.size as u64;
            self.bytes_spilled += part.data as u64;
            let p = &mut self.partitions[part.partition as usize];
            if matches!(p.reader, Reader::Abandoned) {
                self.rows_discarded += part.rows as u64;
                discarded.extend(part.segments);
                continue;
            }
            p.segments.extend(part.segments);
            p.spilled_rows += part.rows;
            self.wake(part.partition);
        }
        self.batches_written += 1;
        self.direct_writes += 1;
        Ok(discarded)
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
}
