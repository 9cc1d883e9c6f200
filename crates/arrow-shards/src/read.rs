//! Reading a partition back: [`PartitionReader`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_memory::MemoryReservation;
use futures::Stream;

use crate::buffer::Shared;
use crate::state::Stored;

/// One partition's batches, handed over exactly once, in write order (per producer).
///
/// An `Iterator` of `Result<RecordBatch, ArrowError>` and a [`RecordBatchReader`]; also a
/// [`Stream`] through [`into_stream`](Self::into_stream), or one batch through
/// [`concat`](Self::concat). The bytes the partition's batches alone keep alive stay reserved
/// in the pool until each batch is handed over; dropping the reader half way releases the rest.
#[derive(Debug)]
pub struct PartitionReader {
    shared: Arc<Shared>,
    batches: std::vec::IntoIter<Stored>,
    reservation: MemoryReservation,
}

impl PartitionReader {
    pub(crate) fn new(
        shared: Arc<Shared>,
        batches: Vec<Stored>,
        reservation: MemoryReservation,
    ) -> Self {
        Self {
            shared,
            batches: batches.into_iter(),
            reservation,
        }
    }

    /// The buffer's schema; every batch carries it.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.shared.schema)
    }

    /// Bytes still reserved for batches not yet handed over.
    pub fn reserved(&self) -> usize {
        self.reservation.size()
    }

    /// The rest of the partition as one batch (a zero-row batch if nothing is left).
    pub fn concat(self) -> Result<RecordBatch, ArrowError> {
        let schema = self.schema();
        let batches = self.collect::<Result<Vec<_>, _>>()?;
        arrow_select::concat::concat_batches(&schema, &batches)
    }

    /// The rest of the partition as a `futures::Stream`.
    pub fn into_stream(self) -> impl Stream<Item = Result<RecordBatch, ArrowError>> + Send + Unpin {
        futures::stream::iter(self)
    }
}

impl Iterator for PartitionReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let stored = self.batches.next()?;
        if self.batches.len() == 0 {
            self.reservation.free();
        } else {
            self.reservation.shrink(stored.size);
        }
        let counters = &self.shared.counters;
        counters.batches_read.fetch_add(1, Ordering::Relaxed);
        counters
            .rows_read
            .fetch_add(stored.batch.num_rows() as u64, Ordering::Relaxed);
        Some(Ok(stored.batch))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.batches.size_hint()
    }
}

impl RecordBatchReader for PartitionReader {
    fn schema(&self) -> SchemaRef {
        PartitionReader::schema(self)
    }
}
