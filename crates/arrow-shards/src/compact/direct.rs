//! The scatter write's copy for many small ranges: every row of a batch goes straight from the
//! batch as written into its partition's open batch, one column at a time, in one pass over
//! the rows.
//!
//! Reordering the batch first (one `take`) and then copying each partition's range column by
//! column copies every value twice and pays a dispatch, a capacity check and a `memcpy` call per
//! range and column: at 4096 partitions and 8192-row batches, 16 columns of 2-row ranges, that
//! per-range work was most of the write path (`docs/architecture.md`, "Small shards: compaction on write and the scatter write"). Here
//! each column is matched once per batch and each value is pushed once into buffers that were
//! grown beforehand, by exactly what the charge predicted.
//!
//! This file owns the rows' tags ([`Direct`]: each row's range, each range's variable-length
//! bytes per column, the grouped order); the copy itself is [`OpenBatch::append_tagged`]. Only
//! for batches whose columns are all of the flat types an open column copies itself
//! (`crate::route::all_flat`) and whose ranges are all below the compaction target.

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;

use super::batch::{CompactConfig, OpenBatch};
use super::measure::var_bytes;
use crate::grouping::grouped_order;

/// Bytes of variable-length data one column of a batch copied row by row holds at most (less).
pub(crate) const MAX_VAR_BYTES: usize = 2 << 30;

/// A scattered batch's rows tagged with their ranges, and what each range adds per column.
#[derive(Debug)]
pub(crate) struct Direct {
    /// Per row of the batch, the index of its range (ranges ascending by partition).
    pub(crate) range_of_row: Vec<u32>,
    /// Per column, per range, bytes of variable-length data (`None`: a fixed-width column).
    var: Vec<Option<Vec<usize>>>,
}

impl Direct {
    /// Tags the rows of `batch` (`range_of_row`, each below `ranges`) and sums each range's
    /// variable-length bytes per column, in one pass over each such column. `None` if a
    /// column's rows hold [`MAX_VAR_BYTES`] or more: such a batch takes the reordering path, so
    /// that an open view column (cut before [`crate::MAX_COMPACT_TARGET_BYTES`]) never passes
    /// the 4 GiB its views can address.
    pub(crate) fn new(batch: &RecordBatch, range_of_row: Vec<u32>, ranges: usize) -> Option<Self> {
        let var: Vec<Option<Vec<usize>>> = batch
            .columns()
            .iter()
            .map(|a| var_bytes(a.as_ref(), &range_of_row, ranges))
            .collect();
        let small = var
            .iter()
            .flatten()
            .all(|sums| sums.iter().sum::<usize>() < MAX_VAR_BYTES);
        small.then_some(Self { range_of_row, var })
    }

    /// The input row at each position of the grouped order (input order within a range), for
    /// `ranges` (`(partition, start, len)` in the grouped order, as tagged).
    pub(crate) fn order(&self, ranges: &[(u32, usize, usize)]) -> Vec<u32> {
        let mut next: Vec<usize> = ranges.iter().map(|&(_, start, _)| start).collect();
        grouped_order(self.range_of_row.iter().map(|&k| k as usize), &mut next)
    }

    /// Bytes of variable-length data range `k` adds to column `c`.
    pub(crate) fn var(&self, c: usize, k: usize) -> usize {
        self.var[c].as_ref().map_or(0, |v| v[k])
    }
}

/// Copies every row of `batch` into `targets[k]`, `k` its range, after growing each target by
/// what its range adds (`lens[k]` rows). `targets` are the ranges' open batches, in range order,
/// none of them full for its range (so each holds less than the byte target). Refuses before
/// changing any row if a column does not match its open columns.
pub(crate) fn copy_rows(
    targets: &mut [&mut OpenBatch],
    batch: &RecordBatch,
    direct: &Direct,
    lens: &[usize],
    config: &CompactConfig,
) -> Result<(), ArrowError> {
    let var = |c: usize, k: usize| direct.var(c, k);
    OpenBatch::append_tagged(targets, batch, &direct.range_of_row, lens, var, config)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, BinaryArray, BooleanArray, Decimal256Array, Int16Array, Int64Array,
        LargeStringArray, StringArray, StringViewArray, UInt32Array,
    };
    use arrow_buffer::i256;
    use arrow_schema::SchemaRef;
    use arrow_select::concat::concat_batches;
    use arrow_select::take::take_record_batch;

    use super::*;
    use crate::compact::Start;
    use arrow_array::Array;
    use arrow_schema::DataType;

    /// Every flat type family, with nulls, long and short strings, widths 2 to 32.
    fn batch(rows: usize) -> RecordBatch {
        let text = |i: usize| {
            (!i.is_multiple_of(5)).then(|| {
                if i.is_multiple_of(3) {
                    format!("a value long enough to be stored apart {i}")
                } else {
                    format!("s{i}")
                }
            })
        };
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "i",
                Arc::new(Int64Array::from_iter(
                    (0..rows).map(|i| (i % 7 != 0).then_some(i as i64)),
                )),
            ),
            (
                "b",
                Arc::new(BooleanArray::from_iter(
                    (0..rows).map(|i| (i % 4 != 1).then_some(i % 3 == 0)),
                )),
            ),
            (
                "h",
                Arc::new(Int16Array::from_iter_values((0..rows).map(|i| i as i16))),
            ),
            (
                "d",
                Arc::new(Decimal256Array::from_iter_values(
                    (0..rows).map(|i| i256::from_i128(i as i128 * 1_000_003)),
                )),
            ),
            ("s", Arc::new(StringArray::from_iter((0..rows).map(text)))),
            (
                "l",
                Arc::new(LargeStringArray::from_iter((0..rows).map(text))),
            ),
            (
                "v",
                Arc::new(StringViewArray::from_iter((0..rows).map(text))),
            ),
            (
                "y",
                Arc::new(BinaryArray::from_iter_values(
                    (0..rows).map(|i| vec![i as u8; i % 17]),
                )),
            ),
        ];
        RecordBatch::try_from_iter(columns).unwrap()
    }

    fn config() -> CompactConfig {
        CompactConfig {
            target_rows: 1000,
            target_bytes: 1 << 20,
            stream_bytes: 1 << 20,
        }
    }

    #[test]
    fn every_row_lands_in_its_range_in_order_and_the_charge_is_predicted() {
        let source = batch(300).slice(20, 250);
        let schema: SchemaRef = source.schema();
        let ranges = 7;
        let range_of_row: Vec<u32> = (0..source.num_rows())
            .map(|i| ((i * 31 + i / 5) % ranges) as u32)
            .collect();
        let lens: Vec<usize> = (0..ranges as u32)
            .map(|k| range_of_row.iter().filter(|&&r| r == k).count())
            .collect();
        // Targets 0 to 3 already hold rows; the others are fresh.
        let earlier = batch(40);
        let mut open: Vec<OpenBatch> = (0..ranges)
            .map(|k| {
                let mut o = OpenBatch::new(&schema, &Start::default());
                if k < 4 {
                    o.append(&earlier, k * 10, 10, &config()).unwrap();
                }
                o
            })
            .collect();
        let direct = Direct::new(&source, range_of_row.clone(), ranges).unwrap();
        let has_nulls: Vec<bool> = source
            .columns()
            .iter()
            .map(|a| a.null_count() > 0)
            .collect();
        let before: Vec<(usize, usize)> =
            open.iter().map(|o| (o.bytes(), o.data_bytes())).collect();
        let predicted: Vec<usize> = open
            .iter()
            .enumerate()
            .map(|(k, o)| o.growth_of_rows(lens[k], |c| direct.var(c, k), &has_nulls, &config()))
            .collect();
        let mut targets: Vec<&mut OpenBatch> = open.iter_mut().collect();
        copy_rows(&mut targets, &source, &direct, &lens, &config()).unwrap();
        for (k, o) in open.iter_mut().enumerate() {
            let added = o.bytes() - before[k].0;
            assert!(
                added <= predicted[k],
                "range {k}: added {added} > predicted {}",
                predicted[k]
            );
            // the validity bound may overestimate (twice the bits), the buffers are exact
            assert!(
                predicted[k] - added <= 1024,
                "range {k}: predicted {} added {added}",
                predicted[k]
            );
            assert!(o.data_bytes() > before[k].1);
            let mine: Vec<u32> = (0..source.num_rows() as u32)
                .filter(|&i| range_of_row[i as usize] == k as u32)
                .collect();
            let rows = take_record_batch(&source, &UInt32Array::from(mine)).unwrap();
            let mut expected = vec![rows];
            if k < 4 {
                expected.insert(0, earlier.slice(k * 10, 10));
            }
            let cut = o.cut(&schema).unwrap();
            assert_eq!(
                cut,
                concat_batches(&schema, &expected).unwrap(),
                "range {k}"
            );
        }
    }

    #[test]
    fn a_column_that_does_not_match_is_refused_before_any_row_moves() {
        let source = batch(10);
        let schema = source.schema();
        let other = Arc::new(arrow_schema::Schema::new(
            schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_data_type(DataType::Int32))
                .collect::<Vec<_>>(),
        ));
        let mut open = OpenBatch::new(&other, &Start::default());
        let direct = Direct::new(&source, vec![0; 10], 1).unwrap();
        let err = copy_rows(&mut [&mut open], &source, &direct, &[10], &config()).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        assert_eq!((open.rows(), open.data_bytes()), (0, 0));
    }
}
