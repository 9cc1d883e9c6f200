//! The scatter write's copy for many small ranges: every row of a batch goes straight from the
//! batch as written into its partition's open batch, one column at a time, in one pass over
//! the rows.
//!
//! Reordering the batch first (one `take`) and then copying each partition's range column by
//! column copies every value twice and pays a dispatch, a capacity check and a `memcpy` call per
//! range and column: at 4096 partitions and 8192-row batches, 16 columns of 2-row ranges, that
//! per-range work was most of the write path (`docs/architecture.md`, "Scatter write"). Here
//! each column is matched once per batch and each value is pushed once into buffers that were
//! grown beforehand, by exactly what the charge predicted.
//!
//! Only for batches whose columns are all of the flat types an open column copies itself
//! ([`super::is_flat`]) and whose ranges are all below the compaction target.

use arrow_array::cast::AsArray;
use arrow_array::types::{ByteArrayType, ByteViewType};
use arrow_array::{
    Array, GenericByteArray, GenericByteViewArray, RecordBatch, downcast_primitive_array,
};
use arrow_buffer::{
    ArrowNativeType, BooleanBufferBuilder, MutableBuffer, NullBufferBuilder, ToByteSlice,
};
use arrow_data::ByteView;
use arrow_schema::{ArrowError, DataType};

use super::column::{OpenColumn, var_bytes};
use super::{CompactConfig, OpenBatch, hint};

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
        let mut order = vec![0u32; self.range_of_row.len()];
        for (row, &k) in self.range_of_row.iter().enumerate() {
            let slot = &mut next[k as usize];
            order[*slot] = row as u32;
            *slot += 1;
        }
        order
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
    for (c, array) in batch.columns().iter().enumerate() {
        // Every target's column `c` was made from the same field: checking one is checking all.
        if targets
            .first()
            .is_some_and(|t| !t.columns[c].takes(array.data_type()))
        {
            return Err(mismatch(array.as_ref()));
        }
    }
    for (k, target) in targets.iter_mut().enumerate() {
        for c in 0..target.columns.len() {
            let h = hint(config, &target.start, c);
            target.columns[c].reserve(lens[k], direct.var(c, k), h);
        }
    }
    for (c, array) in batch.columns().iter().enumerate() {
        let columns: Vec<&mut OpenColumn> = targets.iter_mut().map(|t| &mut t.columns[c]).collect();
        copy_column(columns, array.as_ref(), &direct.range_of_row, lens)?;
    }
    for (k, target) in targets.iter_mut().enumerate() {
        target.rows += lens[k];
        target.recount();
    }
    Ok(())
}

fn mismatch(array: &dyn Array) -> ArrowError {
    ArrowError::SchemaError(format!(
        "a {} column does not match its open column",
        array.data_type()
    ))
}

/// Copies one column's rows into the matching column of each target.
fn copy_column(
    columns: Vec<&mut OpenColumn>,
    array: &dyn Array,
    rows: &[u32],
    lens: &[usize],
) -> Result<(), ArrowError> {
    let mut nulls = Vec::with_capacity(columns.len());
    match array.data_type() {
        DataType::Boolean => {
            let mut values = Vec::with_capacity(columns.len());
            for column in columns {
                let OpenColumn::Boolean {
                    values: v,
                    nulls: n,
                } = column
                else {
                    return Err(mismatch(array));
                };
                values.push(v);
                nulls.push(n);
            }
            copy_booleans(&mut values, array, rows);
        }
        DataType::Utf8 | DataType::Binary | DataType::LargeUtf8 | DataType::LargeBinary => {
            let mut buffers = Vec::with_capacity(columns.len());
            for column in columns {
                let OpenColumn::Bytes {
                    offsets,
                    values,
                    nulls: n,
                    ..
                } = column
                else {
                    return Err(mismatch(array));
                };
                buffers.push((offsets, values));
                nulls.push(n);
            }
            match array.data_type() {
                DataType::Utf8 => copy_bytes(&mut buffers, array.as_string::<i32>(), rows),
                DataType::Binary => copy_bytes(&mut buffers, array.as_binary::<i32>(), rows),
                DataType::LargeUtf8 => copy_bytes(&mut buffers, array.as_string::<i64>(), rows),
                _ => copy_bytes(&mut buffers, array.as_binary::<i64>(), rows),
            }
        }
        DataType::Utf8View | DataType::BinaryView => {
            let mut buffers = Vec::with_capacity(columns.len());
            for column in columns {
                let OpenColumn::Views {
                    views,
                    data,
                    nulls: n,
                } = column
                else {
                    return Err(mismatch(array));
                };
                buffers.push((views, data));
                nulls.push(n);
            }
            if let DataType::Utf8View = array.data_type() {
                copy_views(&mut buffers, array.as_string_view(), rows);
            } else {
                copy_views(&mut buffers, array.as_binary_view(), rows);
            }
        }
        _ => {
            let mut values = Vec::with_capacity(columns.len());
            for column in columns {
                let OpenColumn::Fixed {
                    values: v,
                    nulls: n,
                    ..
                } = column
                else {
                    return Err(mismatch(array));
                };
                values.push(v);
                nulls.push(n);
            }
            downcast_primitive_array!(
                array => copy_values(&mut values, array.values(), rows),
                _ => return Err(mismatch(array))
            );
        }
    }
    copy_nulls(&mut nulls, array, rows, lens);
    Ok(())
}

fn copy_values<T: ArrowNativeType + ToByteSlice>(
    values: &mut [&mut MutableBuffer],
    source: &[T],
    rows: &[u32],
) {
    for (&value, &k) in source.iter().zip(rows) {
        values[k as usize].push(value);
    }
}

fn copy_booleans(values: &mut [&mut BooleanBufferBuilder], array: &dyn Array, rows: &[u32]) {
    for (value, &k) in array.as_boolean().values().iter().zip(rows) {
        values[k as usize].append(value);
    }
}

fn copy_nulls(
    nulls: &mut [&mut NullBufferBuilder],
    array: &dyn Array,
    rows: &[u32],
    lens: &[usize],
) {
    match array.nulls() {
        Some(source) if source.null_count() > 0 => {
            for (valid, &k) in source.iter().zip(rows) {
                nulls[k as usize].append(valid);
            }
        }
        _ => {
            for (n, &len) in nulls.iter_mut().zip(lens) {
                n.append_n_non_nulls(len);
            }
        }
    }
}

fn copy_bytes<T: ByteArrayType>(
    buffers: &mut [(&mut MutableBuffer, &mut MutableBuffer)],
    array: &GenericByteArray<T>,
    rows: &[u32],
) {
    for (offsets, _) in buffers.iter_mut() {
        if offsets.is_empty() {
            offsets.push(T::Offset::usize_as(0));
        }
    }
    let data = array.value_data();
    for (w, &k) in array.value_offsets().windows(2).zip(rows) {
        let (offsets, values) = &mut buffers[k as usize];
        values.extend_from_slice(&data[w[0].as_usize()..w[1].as_usize()]);
        offsets.push(T::Offset::usize_as(values.len()));
    }
}

fn copy_views<T: ByteViewType + ?Sized>(
    buffers: &mut [(&mut MutableBuffer, &mut MutableBuffer)],
    array: &GenericByteViewArray<T>,
    rows: &[u32],
) {
    let sources = array.data_buffers();
    for (&view, &k) in array.views().iter().zip(rows) {
        let (views, data) = &mut buffers[k as usize];
        let length = view as u32;
        if length <= 12 {
            views.push(view);
            continue;
        }
        let v = ByteView::from(view);
        let from = v.offset as usize;
        let offset = data.len() as u32;
        data.extend_from_slice(&sources[v.buffer_index as usize][from..from + length as usize]);
        views.push(
            ByteView {
                buffer_index: 0,
                offset,
                ..v
            }
            .as_u128(),
        );
    }
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
