//! Reading a partition back: [`PartitionReader`], a thin layer over the merge crate's
//! [`Merger`] that keeps the buffer's read counters.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_merge::{MergeOptions, Merger, PartitionSources};
use futures::{Stream, StreamExt};

use crate::buffer::{Counters, Shared};
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
        let batches = taken.batches.into_iter().map(|s| s.batch).collect();
        let sources = PartitionSources::new(Arc::clone(&shared.schema))
            .with_segments(taken.segments)
            .with_memory(batches, taken.reservation);
        let options = match shared.config.read_batch_rows {
            Some(rows) => MergeOptions::new().with_target_rows(rows),
            None => MergeOptions::new().with_pass_through(),
        };
        let merger = Merger::new(sources, options, Arc::clone(&shared.pool));
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

    /// The rest of the partition as a `futures::Stream`; poll it within a tokio runtime.
    pub fn into_stream(self) -> impl Stream<Item = Result<RecordBatch, ArrowError>> + Send + Unpin {
        let shared = self.shared;
        self.merger.into_stream().map(move |item| {
            if let Ok(batch) = &item {
                count(&shared.counters, batch);
            }
            item
        })
    }
}

fn count(counters: &Counters, batch: &RecordBatch) {
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
