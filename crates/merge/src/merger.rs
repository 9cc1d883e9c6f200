//! [`Merger`]: one partition's batches, in write order, as a blocking iterator.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_select::concat::concat_batches;
use arrow_shards_memory::{MemoryPool, MemoryReservation};
use arrow_shards_spill::SegmentRef;

use crate::input::ChargedBatches;
use crate::state::{MergeState, Step};
use crate::{MergeError, MergeOptions, MergeStream, PartitionSources};

/// Reads one partition back: its spilled segments in spill order, then its memory batches, as
/// `Iterator<Item = Result<RecordBatch, ArrowError>>` and [`RecordBatchReader`].
///
/// # Output batches
/// With a target of `n` rows ([`MergeOptions::with_target_rows`]) every output batch has
/// exactly `n` rows, except:
/// - an input batch of `n` rows or more passes through whole, without a copy; rows buffered
///   before it come out first as one shorter batch;
/// - the last batch.
///
/// So if no input batch reaches the target, all outputs but the last have exactly `n` rows.
/// In pass-through mode ([`MergeOptions::with_pass_through`]) every non-empty input batch comes
/// out as it went in; memory batches are the very same arrays. Zero-row batches are dropped.
///
/// # Memory
/// Only the segment being handed over is decoded at a time (the stream adds its read-ahead).
/// Before a segment is read, its `memory_bytes` are reserved from the pool passed to
/// [`Merger::new`] with `MemoryPool::grow`, which may pass the pool's limit: reading is what
/// frees memory, so it must not wait for memory. A merge therefore overshoots the limit by at
/// most one segment (plus the stream's read-ahead segments). After decoding, the reservation is
/// set to the batches' real size (`batch_memory_size`, each allocation once).
///
/// Every input's bytes (the decoded segment's, or the caller's reservation for memory batches)
/// are released when the output batch holding its last row is handed over; rows the coalescer
/// has copied stay covered by their input's charge until then. Dropping the merger half way
/// releases everything it still holds.
///
/// # Errors
/// A failed segment read (for example a checksum mismatch) yields every row before the
/// segment, then the error as [`ArrowError::ExternalError`] wrapping the spill crate's
/// `SpillError`, then nothing more. A batch whose fields differ from the schema fails the same
/// way with a [`MergeError`](crate::MergeError).
///
/// The iterator reads segments on the calling thread; in async code use
/// [`Merger::into_stream`].
#[derive(Debug)]
pub struct Merger {
    state: MergeState,
    pool: Arc<dyn MemoryPool>,
    options: MergeOptions,
}

impl Merger {
    /// A merger over `sources`, reserving decoded segments from `pool`. Nothing is read yet.
    pub fn new(
        sources: PartitionSources,
        options: MergeOptions,
        pool: Arc<dyn MemoryPool>,
    ) -> Self {
        Self {
            state: MergeState::new(sources, &options),
            pool,
            options,
        }
    }

    /// The schema of every output batch.
    pub fn schema(&self) -> SchemaRef {
        SchemaRef::clone(self.state.schema())
    }

    /// The options this merger was built with.
    pub fn options(&self) -> &MergeOptions {
        &self.options
    }

    /// The same batches as an async stream that reads segments on tokio's blocking threads,
    /// [`MergeOptions::read_ahead`] segments ahead. Must be polled within a tokio runtime.
    pub fn into_stream(self) -> MergeStream {
        MergeStream::new(self.state, self.pool, self.options)
    }

    /// Everything left, concatenated into one batch (zero rows if there is nothing). Skips
    /// coalescing when no rows are buffered, so rows are copied once. The result is not charged
    /// to any pool: it is the caller's.
    pub fn concat(mut self) -> Result<RecordBatch, ArrowError> {
        self.state.pass_through_if_idle();
        let schema = self.schema();
        let batches = self.collect::<Result<Vec<_>, _>>()?;
        concat_batches(&schema, &batches)
    }
}

/// Reserves a segment's expected size before reading it; see [`Merger`]'s memory section.
pub(crate) fn reserve_segment(
    pool: &Arc<dyn MemoryPool>,
    segment: &SegmentRef,
) -> MemoryReservation {
    let mut reservation = MemoryReservation::new(pool);
    reservation.grow(segment.memory_bytes());
    reservation
}

impl Iterator for Merger {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.state.step() {
                Ok(Step::Batch(batch)) => return Some(Ok(batch)),
                Ok(Step::Done) => return None,
                Err(e) => return Some(Err(e)),
                Ok(Step::NeedSegment) => {
                    // Nothing is launched ahead here, so the needed segment is the next one.
                    if let Some((index, segment)) = self.state.launch_next() {
                        let reservation = reserve_segment(&self.pool, &segment);
                        let schema = self.schema();
                        self.state.supply(ChargedBatches::read_segment(
                            &segment,
                            index,
                            reservation,
                            &schema,
                        ));
                    } else {
                        let e = MergeError::Internal("segment needed but none left to read".into());
                        self.state.fail(e.into(), false);
                    }
                }
            }
        }
    }
}

impl RecordBatchReader for Merger {
    fn schema(&self) -> SchemaRef {
        Merger::schema(self)
    }
}
