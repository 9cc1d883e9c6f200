//! Copying rows into open columns: a range of a written array into one column
//! ([`OpenColumn::append`]), or every row of a scattered batch's array into the column its tag
//! names ([`OpenColumn::append_tagged`], the scatter write's copy in place, `direct.rs`).
//!
//! Both go through the same kernels, one per flat kind: the array is matched once, then each
//! value is pushed into buffers grown beforehand ([`OpenColumn::reserve`], by what the charge
//! predicted), so a push never reallocates. A tagged copy thus costs one type dispatch per
//! column per batch, not per range and column (`docs/benchmarks.md`, "The buffer on its own").

use arrow_array::cast::AsArray;
use arrow_array::types::{ByteArrayType, ByteViewType};
use arrow_array::{
    Array, ArrayRef, GenericByteArray, GenericByteViewArray, downcast_primitive_array,
};
use arrow_array::{make_array, types::ArrowPrimitiveType};
use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder, MutableBuffer, NullBufferBuilder};
use arrow_data::transform::MutableArrayData;
use arrow_schema::{ArrowError, DataType};
use arrow_shards_spill::{CopiedBytes, CopiedViews};

use arrow_shards_memory::sizing::{array_allocations, array_data_bytes};

use super::column::OpenColumn;
use super::measure::var_range_bytes;
use super::sizing::Hint;

impl OpenColumn {
    /// Copies `array[start..start + len]` in.
    pub(crate) fn append(
        &mut self,
        array: &dyn Array,
        start: usize,
        len: usize,
        hint: Hint,
    ) -> Result<(), ArrowError> {
        if let OpenColumn::Pieces { pieces, bytes } = self {
            let source = array.to_data();
            let mut copy = MutableArrayData::new(vec![&source], false, len);
            copy.try_extend(0, start, start + len)?;
            let piece = own_dictionary(make_array(copy.freeze()))?;
            *bytes += array_allocations(piece.as_ref())
                .iter()
                .map(|a| a.capacity)
                .sum::<usize>();
            pieces.push(piece);
            return Ok(());
        }
        let var = var_range_bytes(array, start, len);
        if let OpenColumn::Views { views, .. } = self
            && views.data().len() + var > u32::MAX as usize
        {
            return Err(ArrowError::ComputeError(
                "an open view column would pass 4 GiB of data".into(),
            ));
        }
        self.reserve(len, var, hint);
        copy_into(&mut [self], array, Rows::Range { start, len })
    }

    /// Copies every row of `array` into `columns[range_of_row[row]]`; column `k` takes `lens[k]`
    /// rows in all and was grown for them beforehand ([`reserve`](Self::reserve)). Refuses
    /// before copying a row if a column cannot take `array` ([`takes`](Self::takes)).
    pub(crate) fn append_tagged(
        columns: &mut [&mut OpenColumn],
        array: &dyn Array,
        range_of_row: &[u32],
        lens: &[usize],
    ) -> Result<(), ArrowError> {
        copy_into(columns, array, Rows::Tagged { range_of_row, lens })
    }

    // The kernels reach a column's buffers through these; `copy_into` checked its kind first.

    fn values_mut(&mut self) -> &mut MutableBuffer {
        match self {
            OpenColumn::Fixed { values, .. } => values,
            _ => unreachable!("checked by copy_into"),
        }
    }

    fn bits_mut(&mut self) -> &mut BooleanBufferBuilder {
        match self {
            OpenColumn::Boolean { values, .. } => values,
            _ => unreachable!("checked by copy_into"),
        }
    }

    fn bytes_mut(&mut self) -> &mut CopiedBytes {
        match self {
            OpenColumn::Bytes { bytes, .. } => bytes,
            _ => unreachable!("checked by copy_into"),
        }
    }

    fn views_mut(&mut self) -> &mut CopiedViews {
        match self {
            OpenColumn::Views { views, .. } => views,
            _ => unreachable!("checked by copy_into"),
        }
    }

    fn nulls_mut(&mut self) -> &mut NullBufferBuilder {
        match self {
            OpenColumn::Fixed { nulls, .. }
            | OpenColumn::Boolean { nulls, .. }
            | OpenColumn::Bytes { nulls, .. }
            | OpenColumn::Views { nulls, .. } => nulls,
            OpenColumn::Pieces { .. } => unreachable!("checked by copy_into"),
        }
    }
}

/// Which rows of a written array are copied, and into which of the target columns.
#[derive(Debug, Clone, Copy)]
enum Rows<'a> {
    /// `start..start + len`, into the one target.
    Range { start: usize, len: usize },
    /// Every row, row `i` into target `range_of_row[i]`, which takes `lens[k]` rows in all.
    Tagged {
        range_of_row: &'a [u32],
        lens: &'a [usize],
    },
}

impl Rows<'_> {
    /// Calls `push(row, target)` for every row copied, in row order.
    fn each(self, mut push: impl FnMut(usize, usize)) {
        match self {
            Rows::Range { start, len } => (start..start + len).for_each(|i| push(i, 0)),
            Rows::Tagged { range_of_row, .. } => {
                for (i, &k) in range_of_row.iter().enumerate() {
                    push(i, k as usize);
                }
            }
        }
    }
}

/// Copies `rows` of `array` into `columns` with the kernel for its type, once every column was
/// checked to take it.
fn copy_into(
    columns: &mut [&mut OpenColumn],
    array: &dyn Array,
    rows: Rows<'_>,
) -> Result<(), ArrowError> {
    let kind = OpenColumn::new(array.data_type());
    if !columns.iter().all(|c| c.is_like(&kind)) {
        return Err(OpenColumn::mismatch(array));
    }
    match kind {
        OpenColumn::Boolean { .. } => bits(columns, array.as_boolean().values(), rows),
        OpenColumn::Bytes { .. } => {
            let mut targets: Vec<&mut CopiedBytes> =
                columns.iter_mut().map(|c| c.bytes_mut()).collect();
            match array.data_type() {
                DataType::Utf8 => bytes(&mut targets, array.as_string::<i32>(), rows)?,
                DataType::LargeUtf8 => bytes(&mut targets, array.as_string::<i64>(), rows)?,
                DataType::Binary => bytes(&mut targets, array.as_binary::<i32>(), rows)?,
                DataType::LargeBinary => bytes(&mut targets, array.as_binary::<i64>(), rows)?,
                _ => return Err(OpenColumn::mismatch(array)),
            }
        }
        OpenColumn::Views { .. } => {
            let mut targets: Vec<&mut CopiedViews> =
                columns.iter_mut().map(|c| c.views_mut()).collect();
            match array.as_string_view_opt() {
                Some(strings) => views(&mut targets, strings, rows)?,
                None => views(&mut targets, array.as_binary_view(), rows)?,
            }
        }
        _ => downcast_primitive_array!(
            array => values(columns, array, rows),
            _ => return Err(OpenColumn::mismatch(array))
        ),
    }
    nulls(columns, array, rows);
    Ok(())
}

/// Copies fixed-width values.
fn values<T: ArrowPrimitiveType>(
    columns: &mut [&mut OpenColumn],
    array: &arrow_array::PrimitiveArray<T>,
    rows: Rows<'_>,
) {
    let source = array.values();
    match rows {
        // a range is one copy of its bytes
        Rows::Range { start, len } => {
            columns[0]
                .values_mut()
                .extend_from_slice(&source[start..start + len]);
        }
        Rows::Tagged { .. } => rows.each(|i, k| columns[k].values_mut().push(source[i])),
    }
}

/// Copies booleans (`source`: the array's values, with their offset).
fn bits(columns: &mut [&mut OpenColumn], source: &BooleanBuffer, rows: Rows<'_>) {
    match rows {
        Rows::Range { start, len } => {
            let from = source.offset() + start;
            columns[0]
                .bits_mut()
                .append_packed_range(from..from + len, source.inner().as_slice());
        }
        Rows::Tagged { .. } => rows.each(|i, k| columns[k].bits_mut().append(source.value(i))),
    }
}

/// Copies the values of a byte array: whole values appended, offsets rebased on the column's
/// (a range as one copy of its value bytes).
fn bytes<T: ByteArrayType>(
    targets: &mut [&mut CopiedBytes],
    array: &GenericByteArray<T>,
    rows: Rows<'_>,
) -> Result<(), ArrowError> {
    match rows {
        Rows::Range { start, len } => targets[0].append_range(array, start, len),
        Rows::Tagged { range_of_row, .. } => {
            CopiedBytes::append_tagged(targets, array, range_of_row)
        }
    }
}

/// Copies the values of a view array: short views as they are, long values into the column's
/// one data buffer, their views pointing there.
fn views<T: ByteViewType + ?Sized>(
    targets: &mut [&mut CopiedViews],
    array: &GenericByteViewArray<T>,
    rows: Rows<'_>,
) -> Result<(), ArrowError> {
    match rows {
        Rows::Range { start, len } => targets[0].append_range(array, start, len),
        Rows::Tagged { range_of_row, .. } => {
            CopiedViews::append_tagged(targets, array, range_of_row)
        }
    }
}

/// Copies the validity of `array`'s rows (a range as one slice of bits).
fn nulls(columns: &mut [&mut OpenColumn], array: &dyn Array, rows: Rows<'_>) {
    let source = array.nulls().filter(|n| n.null_count() > 0);
    match (source, rows) {
        (Some(source), Rows::Range { start, len }) => {
            columns[0]
                .nulls_mut()
                .append_buffer(&source.slice(start, len));
        }
        (Some(source), Rows::Tagged { range_of_row, .. }) => {
            for (valid, &k) in source.iter().zip(range_of_row) {
                columns[k as usize].nulls_mut().append(valid);
            }
        }
        (None, Rows::Range { len, .. }) => columns[0].nulls_mut().append_n_non_nulls(len),
        (None, Rows::Tagged { lens, .. }) => {
            for (column, &len) in columns.iter_mut().zip(lens) {
                column.nulls_mut().append_n_non_nulls(len);
            }
        }
    }
}

/// A dictionary piece keeps its source's values array, shared by every piece cut from the same
/// batch; when that array's buffers are mostly empty (a decoder's buffers sized for a whole
/// page: 972 KB of capacity for 50 categories seen from parquet), the piece gets a tight copy
/// of the values instead, so that a few rows do not keep, and are not charged for, the whole
/// allocation. Tight values (a large dictionary) stay shared.
fn own_dictionary(piece: ArrayRef) -> Result<ArrayRef, ArrowError> {
    let Some(dictionary) = piece.as_any_dictionary_opt() else {
        return Ok(piece);
    };
    let values = dictionary.values();
    let held: usize = array_allocations(values.as_ref())
        .iter()
        .map(|a| a.capacity)
        .sum();
    let used = array_data_bytes(values.as_ref());
    if held <= 2 * used + WASTE_ALLOWED {
        return Ok(piece);
    }
    let source = values.to_data();
    let mut copy = MutableArrayData::new(vec![&source], false, values.len());
    copy.try_extend(0, 0, values.len())?;
    Ok(dictionary.with_values(make_array(copy.freeze())))
}

/// Unused capacity a shared dictionary values array may have before a piece copies it.
const WASTE_ALLOWED: usize = 4096;
