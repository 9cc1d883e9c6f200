//! [`Merger`]: one partition's batches, in write order, as a blocking iterator.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_memory::MemoryPool;
use arrow_shards_spill::concat_batches;

use crate::budget::reserve_segment;
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
/// - a batch cut short for memory: when the next segment must be read and its `memory_bytes`
///   do not fit under the pool's limit, the rows buffered so far come out first as one shorter
///   batch (see below). Never with a pool that has no limit;
/// - the last batch.
///
/// So if no input batch reaches the target and reading never meets a full pool, all outputs
/// but the last have exactly `n` rows. In pass-through mode
/// ([`MergeOptions::with_pass_through`]) every non-empty input batch comes out as it went in;
/// memory batches are the very same arrays. Zero-row batches are dropped.
///
/// # Memory
/// Before a segment is read, its `memory_bytes` are reserved from the pool passed to
/// [`Merger::new`]; after decoding, the reservation is set to the batches' real size
/// (`batch_memory_size`, each allocation once). Every input's bytes (the decoded segment's, or
/// the caller's reservation for memory batches) are released when the output batch holding its
/// last row is handed over; rows the coalescer has copied stay covered by their input's charge
/// until then (arrow's coalescer keeps slices of non-primitive columns, so the decoded segments
/// really are alive until the batch is built). Dropping the merger half way releases everything
/// it still holds.
///
/// Reading is what frees memory, so a read never waits for memory: the read the merge needs is
/// reserved with `MemoryPool::grow`, which may pass the pool's limit. Coalescing would let that
/// add up: with 32 KiB segments an 8192-row output spans about ten of them, all charged until it
/// is handed over (a 256 KiB pool was measured at 2.5x its limit that way). So before that read,
/// if `reserved + memory_bytes` would pass the limit while rows are buffered, those rows are
/// handed over first as a shorter batch, releasing every input they came from. The read then
/// starts either within the limit or with nothing of this merge charged but its memory batches.
/// The bound that follows, with `S` the partition's largest segment counted at the larger of
/// its `memory_bytes` and its decoded size:
///
/// - **This iterator and [`Merger::concat`]**: if everything else charged to the pool stays
///   within the limit, the pool never holds more than `limit + S`. Each merge reading at the
///   same time adds at most its own `S`.
/// - **[`MergeStream`]**: it starts a read ahead of need only if the segment's `memory_bytes`
///   fit under the limit, so each of its [`MergeOptions::read_ahead`] reads adds at most what
///   its decoded size exceeds its `memory_bytes` by: never more than
///   `limit + (1 + read_ahead) x S`.
///
/// A pool without a limit never cuts a batch short and the stream always reads ahead.
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

    /// Everything left, concatenated into one batch (zero rows if there is nothing; dictionary
    /// columns on the union of their dictionaries, as [`arrow_shards_spill::concat()`]). Skips
    /// coalescing when no rows are buffered, so rows are copied once. The result is not charged
    /// to any pool: it is the caller's.
    pub fn concat(mut self) -> Result<RecordBatch, ArrowError> {
        self.state.pass_through_if_idle();
        let schema = self.schema();
        let batches = self.collect::<Result<Vec<_>, _>>()?;
        concat_batches(&schema, &batches)
    }
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
                    if self.state.make_room(&self.pool) {
                        continue;
                    }
                    // Nothing is launched ahead here, so the needed segment is the next one.
                    if let Some((index, segment)) = self.state.launch_next() {
                        let reserved = match self.options.read_budget() {
                            None => (reserve_segment(&self.pool, &segment), None),
                            Some(budget) => {
                                match budget.reserve_blocking(&self.pool, segment.memory_bytes()) {
                                    Ok(reserved) => reserved,
                                    Err(e) => {
                                        self.state.supply(Err(e.into()));
                                        continue;
                                    }
                                }
                            }
                        };
                        let schema = self.schema();
                        self.state.supply(ChargedBatches::read_segment(
                            &segment, index, reserved, &schema,
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
