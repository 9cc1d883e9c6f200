//! Reading a partition back: [`PartitionReader`], a thin layer over the merge crate's
//! [`Merger`] that keeps the buffer's read counters.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_merge::{MergeOptions, MergeStream, Merger, PartitionSources};
use futures::{Stream, StreamExt};

use crate::shared::{Counters, Shared};
use crate::state::Taken;

/// One partition's batches, handed over exactly once: its spilled segments in spill order, then
/// its batches in memory, so each producer's write order holds.
///
/// An `Iterator` of `Result<RecordBatch, ArrowError>` and a [`RecordBatchReader`]; also a
/// [`Stream`] through [`into_stream`](Self::into_stream) (segments read on tokio's blocking
/// threads), or one batch through [`concat`](Self::concat). Batches are coalesced to the
/// buffer's read batch rows unless that is 0. The bytes of the partition's memory batches stay
/// reserved until handed over; a segment is reserved while decoded; dropping the reader half way
/// releases the rest. Errors (a corrupt segment) arrive as `ArrowError::ExternalError` wrapping
/// the merge crate's error, after the batches before them; nothing follows an error.
#[derive(Debug)]
pub struct PartitionReader {
    shared: Arc<Shared>,
    merger: Merger,
}

impl PartitionReader {
    pub(crate) fn new(shared: Arc<Shared>, taken: Taken) -> Self {
        let merger = merger(&shared, taken);
        Self { shared, merger }
    }

    /// The buffer's schema; every batch carries it.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.shared.schema)
    }

    /// The rest of the partition as one batch (a zero-row batch if nothing is left).
    pub fn concat(self) -> Result<RecordBatch, ArrowError> {
        let batch = self.merger.concat()?;
        count(&self.shared.counters, &batch);
        Ok(batch)
    }

    /// The rest of the partition as a [`PartitionStream`]; poll it within a tokio runtime.
    pub fn into_stream(self) -> PartitionStream {
        PartitionStream {
            inner: self.merger.into_stream(),
            shared: self.shared,
        }
    }
}

/// One partition's batches as a `futures::Stream` (segments are read and decoded on tokio's
/// blocking threads), made by [`PartitionReader::into_stream`]. A named type with
/// [`schema`](Self::schema), so it can be kept in a struct or wrapped as an engine's record
/// batch stream (DataFusion's `RecordBatchStreamAdapter`, for one).
#[derive(Debug)]
pub struct PartitionStream {
    inner: MergeStream,
    shared: Arc<Shared>,
}

impl PartitionStream {
    /// The buffer's schema; every batch carries it.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.shared.schema)
    }
}

impl Stream for PartitionStream {
    type Item = Result<RecordBatch, ArrowError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let item = std::task::ready!(self.inner.poll_next_unpin(cx));
        if let Some(Ok(batch)) = &item {
            count(&self.shared.counters, batch);
        }
        std::task::Poll::Ready(item)
    }
}

/// A merge of what a take handed over, with the buffer's read settings.
pub(crate) fn merger(shared: &Shared, taken: Taken) -> Merger {
    // The allocations listed when each batch was written go along, so the merge does not
    // walk the batches again.
    let batches = taken
        .batches
        .into_iter()
        .map(|s| (s.batch, s.allocations))
        .collect();
    let sources = PartitionSources::new(Arc::clone(&shared.schema))
        .with_segments(taken.segments)
        .with_memory_allocations(batches, taken.reservation);

    let mut options = match shared.config.read_batch_rows {
        Some(rows) => MergeOptions::new().with_target_rows(rows),
        None => MergeOptions::new().with_pass_through(),
    };
    if let Some(slots) = &shared.config.read_slots {
        options = options.with_read_slots(slots.clone());
    }
    if let Some(budget) = &shared.config.read_budget {
        options = options.with_read_budget(budget.clone());
    }
    Merger::new(sources, options, Arc::clone(&shared.pool))
}

/// Counts a batch handed to a reader.
pub(crate) fn count(counters: &Counters, batch: &RecordBatch) {
    counters.batches_read.fetch_add(1, Ordering::Relaxed);
    counters
        .rows_read
        .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
}

impl Iterator for PartitionReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.merger.next()?;
        if let Ok(batch) = &item {
            count(&self.shared.counters, batch);
        }
        Some(item)
    }
}

impl RecordBatchReader for PartitionReader {
    fn schema(&self) -> SchemaRef {
        PartitionReader::schema(self)
    }
}
