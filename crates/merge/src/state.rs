//! The merge as a state machine that does no I/O: the iterator and the stream drive it and
//! supply decoded segments when it asks for them.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_memory::MemoryPool;
use arrow_shards_spill::SegmentRef;

use crate::budget::fits;
use crate::input::ChargedBatches;
use crate::output::Output;
use crate::{MergeOptions, PartitionSources};

/// What the driver must do next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Hand this batch over.
    Batch(RecordBatch),
    /// Supply the oldest segment not supplied yet (launch it first if it is not in flight).
    NeedSegment,
    /// Nothing more, ever.
    Done,
}

/// Inputs in read order, the output under construction, and the error state.
#[derive(Debug)]
pub(crate) struct MergeState {
    schema: SchemaRef,
    output: Output,
    /// Segments no read has been started for, with their index in read order.
    unlaunched: VecDeque<(usize, SegmentRef)>,
    /// Segments whose read has started but which were not supplied yet.
    in_flight: usize,
    /// The decoded segment being taken apart.
    current: Option<ChargedBatches>,
    /// Memory batch groups, read after every segment.
    memory: VecDeque<ChargedBatches>,
    inputs_done: bool,
    /// An error to report once the batches before it are handed over.
    error: Option<ArrowError>,
    failed: bool,
}

impl MergeState {
    pub(crate) fn new(sources: PartitionSources, options: &MergeOptions) -> Self {
        // The coalescer reserves room for a whole target batch up front, so a target above the
        // partition's row count (say `usize::MAX`) is cut down to it: same output, sane memory.
        let rows = usize::try_from(sources.num_rows())
            .unwrap_or(usize::MAX)
            .max(1);
        let target_rows = options.target_rows().map(|target| target.min(rows));
        let PartitionSources {
            schema,
            segments,
            memory,
        } = sources;
        let memory = memory
            .into_iter()
            .map(|g| ChargedBatches::memory(g.batches, g.allocations, g.reservation, &schema))
            .collect();
        Self {
            output: Output::new(&schema, target_rows),
            schema,
            unlaunched: segments.into_iter().enumerate().collect(),
            in_flight: 0,
            current: None,
            memory,
            inputs_done: false,
            error: None,
            failed: false,
        }
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Takes the next segment to read and counts it as in flight.
    pub(crate) fn launch_next(&mut self) -> Option<(usize, SegmentRef)> {
        let next = self.unlaunched.pop_front()?;
        self.in_flight += 1;
        Some(next)
    }

    /// The `memory_bytes` of the next segment to launch: what its read reserves up front.
    pub(crate) fn next_segment_bytes(&self) -> Option<usize> {
        self.unlaunched.front().map(|(_, s)| s.memory_bytes())
    }

    /// Call before starting the read the merge needs now. If that read does not fit under
    /// `pool`'s limit while rows are buffered, or the buffered rows hold the read budget's
    /// overdraft (a read that waits for room must not wait on its own overdraft: CI found that
    /// stall with four streams polled at once), hands those rows over first as a shorter batch
    /// (see [`Merger`](crate::Merger)'s memory section) and returns true: the caller steps
    /// again, the batch comes out and releases the inputs it holds, and the next call finds
    /// nothing buffered.
    pub(crate) fn make_room(&mut self, pool: &Arc<dyn MemoryPool>) -> bool {
        let Some(bytes) = self.next_segment_bytes() else {
            return false;
        };
        // Rows buffered with the read budget's overdraft go first whatever the room: the read
        // below may have to wait for room, and the overdraft would be waiting on itself.
        let overdrawn = self.output.holds_overdraft();
        if (fits(pool, bytes) && !overdrawn) || !self.output.has_buffered_rows() {
            return false;
        }
        if let Err(e) = self.output.finish() {
            self.fail(e, false);
        }
        true
    }

    /// Hands buffered rows over now if they hold the read budget's overdraft; true if it did
    /// (the caller steps again). Called before waiting for a read already in flight: that read
    /// may wait for a read slot held by a reader that waits for room, which only the overdraft
    /// held here would give it (a stall CI found with four streams and one slot).
    pub(crate) fn release_overdraft(&mut self) -> bool {
        if !(self.output.holds_overdraft() && self.output.has_buffered_rows()) {
            return false;
        }
        if let Err(e) = self.output.finish() {
            self.fail(e, false);
        }
        true
    }

    /// Segments decoded or being decoded: the one being taken apart plus those in flight.
    pub(crate) fn segments_held(&self) -> usize {
        self.in_flight + usize::from(self.current.is_some())
    }

    /// Supplies the oldest in-flight segment, or the error reading it.
    pub(crate) fn supply(&mut self, segment: Result<ChargedBatches, ArrowError>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match segment {
            Ok(segment) => self.current = Some(segment),
            Err(e) => self.fail(e, true),
        }
    }

    /// Drops every input and keeps `error` for after the batches already complete (and, with
    /// `flush`, the rows buffered before it).
    pub(crate) fn fail(&mut self, error: ArrowError, flush: bool) {
        self.unlaunched.clear();
        self.in_flight = 0;
        self.current = None;
        self.memory.clear();
        self.inputs_done = true;
        if !(flush && self.output.finish().is_ok()) {
            self.output.clear();
        }
        self.error = Some(error);
    }

    /// Switches to pass-through if no rows are buffered.
    pub(crate) fn pass_through_if_idle(&mut self) {
        self.output.pass_through_if_idle();
    }

    /// Advances until there is a batch to hand over, a segment is needed, or the end.
    pub(crate) fn step(&mut self) -> Result<Step, ArrowError> {
        loop {
            if let Some(batch) = self.output.pop() {
                return Ok(Step::Batch(batch));
            }
            if let Some(error) = self.error.take() {
                self.failed = true;
                return Err(error);
            }
            if self.failed || self.inputs_done {
                return Ok(Step::Done);
            }
            let input = if let Some(segment) = &mut self.current {
                let next = segment.next();
                if segment.is_empty() {
                    self.current = None;
                }
                next
            } else if self.in_flight > 0 || !self.unlaunched.is_empty() {
                return Ok(Step::NeedSegment);
            } else if let Some(group) = self.memory.front_mut() {
                let next = group.next();
                if group.is_empty() {
                    self.memory.pop_front();
                }
                next
            } else {
                self.inputs_done = true;
                if let Err(e) = self.output.finish() {
                    self.fail(e, false);
                }
                continue;
            };
            match input {
                None => {}
                Some(Err(e)) => self.fail(e, true),
                Some(Ok(charged)) => {
                    if let Err(e) = self.output.push(charged) {
                        self.fail(e, false);
                    }
                }
            }
        }
    }
}
