//! A partition's open batch: its columns, what it is charged and when it is cut
//! ([`CompactConfig`]), where its successor starts ([`Start`]), and the appends that fill it,
//! one range of a written batch ([`OpenBatch::append`]) or the rows of a scattered batch spread
//! over many open batches at once ([`OpenBatch::append_tagged`]). Each append's growth is
//! predicted before it is made ([`OpenBatch::growth`], [`OpenBatch::growth_of_rows`]).

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::{ArrowError, DataType, SchemaRef};

use super::column::OpenColumn;
use super::sizing::Hint;

/// When open batches are cut, and which writes are copied into them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompactConfig {
    /// Rows at which an open batch is cut; a written batch with this many rows passes through.
    pub(crate) target_rows: usize,
    /// Bytes of data (buffer lengths) at which an open batch is cut; a written batch whose rows
    /// take this many bytes passes through.
    pub(crate) target_bytes: usize,
    /// Bytes of data at which the open batch of a partition with a subscriber is cut (at most
    /// `target_bytes`): a share of the memory limit, so that the open batches of every
    /// subscribed partition together hold at most a quarter of it (see [`Self::new`]).
    pub(crate) stream_bytes: usize,
}

impl CompactConfig {
    /// The compaction settings of a buffer of `schema` (`None`: off): `target_rows` 0 turns it
    /// off, and so does a memory `limit` too small for four minimal open batches; with a limit
    /// the byte target is at most an eighth of it.
    pub(crate) fn new(
        schema: &SchemaRef,
        target_rows: usize,
        target_bytes: usize,
        limit: Option<usize>,
        partitions: u32,
    ) -> Option<Self> {
        if target_rows == 0 {
            return None;
        }
        let smallest = fixed_bytes(schema.fields().len()) + 3 * 64 * schema.fields().len();
        let target_bytes = match limit {
            Some(limit) if limit / 4 < smallest => return None,
            Some(limit) => target_bytes.min(limit / 8),
            None => target_bytes,
        };
        let stream_bytes = limit.map_or(target_bytes, |limit| {
            (limit / (4 * partitions.max(1) as usize))
                .max(smallest)
                .min(target_bytes)
        });
        Some(Self {
            target_rows,
            target_bytes,
            stream_bytes,
        })
    }

    /// The settings of a partition with a subscriber: cut at [`stream_bytes`](Self::stream_bytes).
    pub(crate) fn streaming(&self) -> Self {
        Self {
            target_bytes: self.stream_bytes,
            ..*self
        }
    }
}

/// How large a partition's next open batch starts (see the module docs); the default starts
/// from nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Start {
    rows: usize,
    /// Per column, bytes of variable-length data (empty: none).
    bytes: Box<[usize]>,
}

/// The next open batch starts at `1 / START_DIVISOR` of the last cut one.
const START_DIVISOR: usize = 4;

/// Fixed bytes an open batch costs besides its buffers (the struct and one column each).
const OPEN_BATCH_OVERHEAD: usize = 64;
const OPEN_COLUMN_OVERHEAD: usize = std::mem::size_of::<OpenColumn>() + 16;

/// A partition's rows copied in from small shards, not yet a batch.
#[derive(Debug)]
pub(crate) struct OpenBatch {
    columns: Vec<OpenColumn>,
    rows: usize,
    /// Sum of the columns' `len_bytes`, kept as they grow (the write path asks per append).
    data: usize,
    /// Sum of the columns' `bytes` (capacities), kept as they grow.
    capacity: usize,
    /// The fixed part of [`bytes`](Self::bytes).
    fixed: usize,
    /// How large its buffers' first allocations are.
    start: Start,
}

impl OpenBatch {
    /// An empty open batch for `schema`; its buffers allocate on the first append, at the
    /// sizes `start` says.
    pub(crate) fn new(schema: &SchemaRef, start: &Start) -> Self {
        let columns: Vec<OpenColumn> = schema
            .fields()
            .iter()
            .map(|f| OpenColumn::new(f.data_type()))
            .collect();
        Self {
            fixed: fixed_bytes(columns.len()),
            columns,
            rows: 0,
            data: 0,
            capacity: 0,
            start: start.clone(),
        }
    }

    /// What a new open batch of `schema` starting at `start` would be charged after the
    /// append of `batch[start_row..start_row + len]`: [`bytes`](Self::bytes) plus
    /// [`growth`](Self::growth) of that batch, without making it.
    pub(crate) fn fresh_charge(
        schema: &SchemaRef,
        start: &Start,
        batch: &RecordBatch,
        start_row: usize,
        len: usize,
        config: &CompactConfig,
    ) -> usize {
        let growth: usize = schema
            .fields()
            .iter()
            .zip(batch.columns())
            .enumerate()
            .map(|(i, (f, a))| {
                // An empty column allocates nothing, so making one here is cheap.
                OpenColumn::new(f.data_type()).growth(
                    a.as_ref(),
                    start_row,
                    len,
                    hint(config, start, i),
                )
            })
            .sum();
        fixed_bytes(schema.fields().len()) + growth
    }

    /// What a new open batch of `schema` starting at `start` would be charged after appending
    /// `len` rows, `var(c)` bytes of variable-length data in column `c` and `has_nulls[c]` if
    /// column `c` of their batch has nulls. Only for flat columns (`crate::route::all_flat`).
    pub(crate) fn fresh_charge_of_rows(
        schema: &SchemaRef,
        start: &Start,
        len: usize,
        var: impl Fn(usize) -> usize,
        has_nulls: &[bool],
        config: &CompactConfig,
    ) -> usize {
        let growth: usize = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                OpenColumn::new(f.data_type()).growth_of_rows(
                    len,
                    var(i),
                    has_nulls[i],
                    hint(config, start, i),
                )
            })
            .sum();
        fixed_bytes(schema.fields().len()) + growth
    }

    /// Where the partition's next open batch starts once this one is cut now.
    pub(crate) fn next_start(&self) -> Start {
        let has_var = self.columns.iter().any(|c| c.var_len() > 0);
        Start {
            rows: self.rows / START_DIVISOR,
            bytes: if has_var {
                self.columns
                    .iter()
                    .map(|c| c.var_len() / START_DIVISOR)
                    .collect()
            } else {
                Box::default()
            },
        }
    }

    /// Rows held.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes of data its rows occupy (buffer lengths, not capacities).
    pub(crate) fn data_bytes(&self) -> usize {
        self.data
    }

    /// Bytes charged for it: its buffers' capacities plus its own structs.
    pub(crate) fn bytes(&self) -> usize {
        self.fixed + self.capacity
    }

    /// Whether appending `len` more rows of `batch` (from `start`) would pass a target, so the
    /// batch should be cut first.
    pub(crate) fn is_full_for(&self, config: &CompactConfig, len: usize) -> bool {
        self.rows > 0 && (self.rows + len > config.target_rows || self.is_full(config))
    }

    /// Whether it has reached a target and should be cut.
    pub(crate) fn is_full(&self, config: &CompactConfig) -> bool {
        self.rows >= config.target_rows || self.data_bytes() >= config.target_bytes
    }

    /// Bytes [`append`](Self::append) of the same rows would add to [`bytes`](Self::bytes).
    pub(crate) fn growth(
        &self,
        batch: &RecordBatch,
        start: usize,
        len: usize,
        config: &CompactConfig,
    ) -> usize {
        self.columns
            .iter()
            .zip(batch.columns())
            .enumerate()
            .map(|(i, (c, a))| c.growth(a.as_ref(), start, len, hint(config, &self.start, i)))
            .sum()
    }

    /// Bytes appending `len` rows would add to [`bytes`](Self::bytes): `var(c)` bytes of
    /// variable-length data in column `c`, `has_nulls[c]` if column `c` of their batch has nulls.
    /// Only for flat columns (`crate::route::all_flat`).
    pub(crate) fn growth_of_rows(
        &self,
        len: usize,
        var: impl Fn(usize) -> usize,
        has_nulls: &[bool],
        config: &CompactConfig,
    ) -> usize {
        self.columns
            .iter()
            .enumerate()
            .map(|(i, c)| c.growth_of_rows(len, var(i), has_nulls[i], hint(config, &self.start, i)))
            .sum()
    }

    /// Copies `batch[start..start + len]` in. `batch` has the buffer's schema.
    pub(crate) fn append(
        &mut self,
        batch: &RecordBatch,
        start: usize,
        len: usize,
        config: &CompactConfig,
    ) -> Result<(), ArrowError> {
        for (i, (column, array)) in self.columns.iter_mut().zip(batch.columns()).enumerate() {
            let (data, capacity) = (column.len_bytes(), column.bytes());
            column.append(array.as_ref(), start, len, hint(config, &self.start, i))?;
            self.data += column.len_bytes() - data;
            self.capacity += column.bytes() - capacity;
        }
        self.rows += len;
        Ok(())
    }

    /// Copies every row of `batch` into `targets[k]`, `k = range_of_row[row]`, after growing
    /// each target by what its rows add (`lens[k]` rows, `var(c, k)` bytes of variable-length
    /// data in column `c`). `batch` has the buffer's schema and only flat columns
    /// (`crate::route::all_flat`). Refuses before changing any target if a column does not
    /// match its open columns.
    pub(crate) fn append_tagged(
        targets: &mut [&mut OpenBatch],
        batch: &RecordBatch,
        range_of_row: &[u32],
        lens: &[usize],
        var: impl Fn(usize, usize) -> usize,
        config: &CompactConfig,
    ) -> Result<(), ArrowError> {
        for (c, array) in batch.columns().iter().enumerate() {
            // Every target's column `c` was made from the same field: checking one is checking
            // all before anything changes (`append_tagged` checks them all again).
            if targets
                .first()
                .is_some_and(|t| !t.columns[c].takes(array.data_type()))
            {
                return Err(OpenColumn::mismatch(array.as_ref()));
            }
        }
        for (k, target) in targets.iter_mut().enumerate() {
            for (c, column) in target.columns.iter_mut().enumerate() {
                column.reserve(lens[k], var(c, k), hint(config, &target.start, c));
            }
        }
        for (c, array) in batch.columns().iter().enumerate() {
            let mut columns: Vec<&mut OpenColumn> =
                targets.iter_mut().map(|t| &mut t.columns[c]).collect();
            OpenColumn::append_tagged(&mut columns, array.as_ref(), range_of_row, lens)?;
        }
        for (target, &len) in targets.iter_mut().zip(lens) {
            target.rows += len;
            target.data = target.columns.iter().map(OpenColumn::len_bytes).sum();
            target.capacity = target.columns.iter().map(OpenColumn::bytes).sum();
        }
        Ok(())
    }

    /// The rows held as one batch of `schema`; the open batch is empty afterwards.
    pub(crate) fn cut(&mut self, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
        let rows = std::mem::take(&mut self.rows);
        self.data = 0;
        self.capacity = 0;
        let columns: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .zip(schema.fields())
            .map(|(c, f)| c.finish(f.data_type(), rows))
            .collect::<Result<_, _>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
    }
}

/// The fixed part of an open batch's charge: its struct, and per column the column and its
/// entry in the batch's [`Start`].
fn fixed_bytes(columns: usize) -> usize {
    OPEN_BATCH_OVERHEAD + columns * (OPEN_COLUMN_OVERHEAD + std::mem::size_of::<usize>())
}

/// The growth limits and first sizes of column `i`.
fn hint(config: &CompactConfig, start: &Start, i: usize) -> Hint {
    Hint {
        rows: config.target_rows,
        bytes: config.target_bytes,
        start_rows: start.rows,
        start_bytes: start.bytes.get(i).copied().unwrap_or(0),
    }
}

/// Whether an open column copies `data_type` itself (is not [`Pieces`](OpenColumn::Pieces)):
/// a flat type, which the scatter write may copy in place (`crate::route`).
pub(crate) fn is_flat(data_type: &DataType) -> bool {
    !matches!(OpenColumn::new(data_type), OpenColumn::Pieces { .. })
}

#[cfg(test)]
mod tests {
    use arrow_array::builder::{ListBuilder, StringViewBuilder};
    use arrow_array::{Array, BooleanArray, Int64Array, LargeStringArray, StringArray};
    use arrow_select::concat::concat_batches;

    use super::*;

    fn batch() -> RecordBatch {
        let mut views = StringViewBuilder::new();
        let mut lists = ListBuilder::new(arrow_array::builder::Int32Builder::new());
        for i in 0..100 {
            views.append_option((i % 7 != 0).then(|| format!("a long string value number {i}")));
            lists.values().append_slice(&[i, i + 1]);
            lists.append(i % 5 != 0);
        }
        RecordBatch::try_from_iter([
            (
                "i",
                Arc::new(Int64Array::from_iter(
                    (0..100).map(|i| (i % 3 != 0).then_some(i)),
                )) as ArrayRef,
            ),
            (
                "b",
                Arc::new(BooleanArray::from_iter((0..100).map(|i| Some(i % 2 == 0)))),
            ),
            (
                "s",
                Arc::new(StringArray::from_iter(
                    (0..100).map(|i| (i % 4 != 0).then(|| i.to_string())),
                )),
            ),
            (
                "l",
                Arc::new(LargeStringArray::from_iter_values(
                    (0..100).map(|i| "x".repeat(i % 9)),
                )),
            ),
            ("v", Arc::new(views.finish())),
            ("n", Arc::new(lists.finish())),
        ])
        .unwrap()
    }

    fn config() -> CompactConfig {
        CompactConfig {
            target_rows: 1000,
            target_bytes: 1 << 20,
            stream_bytes: 1 << 20,
        }
    }

    #[test]
    fn appended_ranges_come_back_equal_to_their_concatenation() {
        let batch = batch();
        let schema = batch.schema();
        let mut open = OpenBatch::new(&schema, &Start::default());
        let ranges = [(0, 1), (1, 0), (5, 30), (50, 50), (3, 7)];
        for (start, len) in ranges {
            open.append(&batch, start, len, &config()).unwrap();
        }
        let cut = open.cut(&schema).unwrap();
        let expected: Vec<_> = ranges.iter().map(|&(s, l)| batch.slice(s, l)).collect();
        assert_eq!(cut, concat_batches(&schema, &expected).unwrap());
        assert_eq!(open.rows(), 0);
        assert_eq!(open.cut(&schema).unwrap().num_rows(), 0);
    }

    #[test]
    fn growth_predicts_the_bytes_an_append_adds() {
        let batch = batch();
        let schema = batch.schema();
        let mut open = OpenBatch::new(&schema, &Start::default());
        for start in (0..100).step_by(10) {
            let before = open.bytes();
            let predicted = open.growth(&batch, start, 10, &config());
            open.append(&batch, start, 10, &config()).unwrap();
            let added = open.bytes() - before;
            assert!(added <= predicted, "added {added} > predicted {predicted}");
            // the validity bound and nested pieces may overestimate, the buffers are exact
            assert!(
                predicted - added <= 1024,
                "predicted {predicted}, added {added}"
            );
        }
    }

    #[test]
    fn the_next_batch_starts_at_a_quarter_of_the_last_and_its_charge_is_predicted() {
        let batch = batch();
        let schema = batch.schema();
        let mut open = OpenBatch::new(&schema, &Start::default());
        open.append(&batch, 0, 100, &config()).unwrap();
        let next = open.next_start();
        assert_eq!(next.rows, 25);
        assert_eq!(next.bytes.len(), schema.fields().len());
        assert!(next.bytes[2] > 0 && next.bytes[0] == 0, "{next:?}");
        let predicted = OpenBatch::fresh_charge(&schema, &next, &batch, 0, 3, &config());
        assert_eq!(open.cut(&schema).unwrap().num_rows(), 100);

        let mut fresh = OpenBatch::new(&schema, &next);
        fresh.append(&batch, 0, 3, &config()).unwrap();
        assert!(
            fresh.bytes() <= predicted,
            "{} > {predicted}",
            fresh.bytes()
        );
        assert!(
            predicted - fresh.bytes() <= 1024,
            "{predicted} vs {}",
            fresh.bytes()
        );
        // The row-sized buffers were made for 25 rows at once: the next 22 rows need none of
        // them to grow (validity and nested pieces may).
        let before = fresh.bytes();
        fresh.append(&batch, 3, 22, &config()).unwrap();
        let from_scratch = {
            let mut o = OpenBatch::new(&schema, &Start::default());
            o.append(&batch, 0, 3, &config()).unwrap();
            o.bytes()
        };
        assert!(before > from_scratch, "{before} <= {from_scratch}");
        assert!(
            fresh.bytes() - before <= 1024,
            "{before} -> {}",
            fresh.bytes()
        );
        let cut = fresh.cut(&schema).unwrap();
        assert_eq!(cut, batch.slice(0, 25));
    }

    #[test]
    fn sliced_sources_copy_only_their_rows() {
        let batch = batch().slice(17, 40);
        let schema = batch.schema();
        let mut open = OpenBatch::new(&schema, &Start::default());
        open.append(&batch, 3, 20, &config()).unwrap();
        let cut = open.cut(&schema).unwrap();
        assert_eq!(cut, batch.slice(3, 20));
        let views = cut
            .column(4)
            .as_any()
            .downcast_ref::<arrow_array::StringViewArray>();
        assert!(views.unwrap().data_buffers().len() <= 1);
    }
}
