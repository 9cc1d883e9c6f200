//! The inputs of one partition, in the order they were written.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_shards_memory::MemoryReservation;
use arrow_shards_spill::SegmentRef;

/// Everything one partition holds, in write order: its spilled segments in the order they were
/// spilled, then the batches still in memory.
///
/// The order matters. A buffer spills a partition's *oldest* pending batches, so every row on
/// disk was written before every row still in memory; reading segments first, in spill order,
/// then memory batches in arrival order, gives the rows back in the order they were written.
///
/// ```no_run
/// # fn demo(
/// #     schema: arrow_schema::SchemaRef,
/// #     segments: Vec<arrow_shards_spill::SegmentRef>,
/// #     batches: Vec<arrow_array::RecordBatch>,
/// #     charged: arrow_shards_memory::MemoryReservation,
/// # ) {
/// use arrow_shards_merge::PartitionSources;
/// let sources = PartitionSources::new(schema).with_segments(segments).with_memory(batches, charged);
/// # }
/// ```
#[derive(Debug)]
pub struct PartitionSources {
    pub(crate) schema: SchemaRef,
    pub(crate) segments: Vec<SegmentRef>,
    pub(crate) memory: Vec<MemoryGroup>,
}

/// Memory batches handed over together with the reservation that pays for them.
#[derive(Debug)]
pub(crate) struct MemoryGroup {
    pub(crate) batches: Vec<RecordBatch>,
    pub(crate) reservation: MemoryReservation,
}

impl PartitionSources {
    /// No sources yet; every batch must have `schema`'s fields.
    pub fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            segments: Vec::new(),
            memory: Vec::new(),
        }
    }

    /// Appends spilled segments, oldest first. They are read before any memory batch, whatever
    /// the order of the `with_*` calls.
    pub fn with_segments(mut self, segments: impl IntoIterator<Item = SegmentRef>) -> Self {
        self.segments.extend(segments);
        self
    }

    /// Appends in-memory batches, oldest first, with `reservation`: the bytes the caller already
    /// charged for them. The merger releases that reservation as the batches leave it
    /// (each allocation once, when the last batch using it is handed over), and whatever is left
    /// when the batches are used up or the merger is dropped.
    ///
    /// Zero-row batches are skipped when read.
    pub fn with_memory(
        mut self,
        batches: Vec<RecordBatch>,
        reservation: MemoryReservation,
    ) -> Self {
        self.memory.push(MemoryGroup {
            batches,
            reservation,
        });
        self
    }

    /// The schema every batch must have.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The spilled segments, in read order.
    pub fn segments(&self) -> &[SegmentRef] {
        &self.segments
    }

    /// Rows in all sources (from the segment index; nothing is read).
    pub fn num_rows(&self) -> u64 {
        let spilled: u64 = self.segments.iter().map(SegmentRef::rows).sum();
        let memory: usize = self
            .memory
            .iter()
            .flat_map(|g| &g.batches)
            .map(RecordBatch::num_rows)
            .sum();
        spilled + memory as u64
    }

    /// True if there is nothing to read.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty() && self.memory.iter().all(|g| g.batches.is_empty())
    }
}
