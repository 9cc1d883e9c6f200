//! Measuring the rows of a written array before they are copied: the bytes they hold of their
//! own (what decides whether a small batch is copied or stored whole), and the bytes of
//! variable-length data they bring to an open column (what its data buffer grows by), for one
//! range of rows or, in one pass, for every range of a scattered batch.

use arrow_array::cast::AsArray;
use arrow_array::types::ByteArrayType;
use arrow_array::{Array, GenericByteArray, RecordBatch};
use arrow_buffer::ArrowNativeType;
use arrow_schema::DataType;

use arrow_shards_memory::sizing::array_allocations;

/// Bytes the rows of `batch` would take in an open batch (their data, not the buffers they
/// share with other rows): what decides whether a small batch is copied or stored whole.
pub(crate) fn copy_bytes(batch: &RecordBatch) -> usize {
    let rows = batch.num_rows();
    batch
        .columns()
        .iter()
        .map(|a| range_bytes(a.as_ref(), 0, rows))
        .sum()
}

/// Bytes `array[start..start + len]` holds of its own (values, offsets, long view data); for
/// types copied as pieces, its share of the array's buffers.
pub(crate) fn range_bytes(array: &dyn Array, start: usize, len: usize) -> usize {
    let validity = if array.null_count() > 0 {
        len.div_ceil(8)
    } else {
        0
    };
    validity
        + match array.data_type() {
            DataType::Boolean => len.div_ceil(8),
            DataType::Utf8 | DataType::Binary => 4 * (len + 1) + byte_range_len(array, start, len),
            DataType::LargeUtf8 | DataType::LargeBinary => {
                8 * (len + 1) + byte_range_len(array, start, len)
            }
            DataType::Utf8View | DataType::BinaryView => {
                16 * len + long_view_bytes(array, start, len)
            }
            t if t.is_primitive() => len * t.primitive_width().unwrap_or(0),
            _ => share_bytes(array, len),
        }
}

/// Bytes of variable-length data `array[start..start + len]` brings to an open column: value
/// bytes of the byte types, values longer than 12 bytes of the view types, 0 for the others.
pub(crate) fn var_range_bytes(array: &dyn Array, start: usize, len: usize) -> usize {
    match array.data_type() {
        DataType::Utf8 | DataType::Binary | DataType::LargeUtf8 | DataType::LargeBinary => {
            byte_range_len(array, start, len)
        }
        DataType::Utf8View | DataType::BinaryView => long_view_bytes(array, start, len),
        _ => 0,
    }
}

/// `len` rows' share of all the bytes `array` allocates (for types copied as pieces).
pub(crate) fn share_bytes(array: &dyn Array, len: usize) -> usize {
    let total: usize = array_allocations(array).iter().map(|a| a.capacity).sum();
    total * len / array.len().max(1)
}

/// Value bytes of `array[start..start + len]` for the byte array types.
fn byte_range_len(array: &dyn Array, start: usize, len: usize) -> usize {
    fn range<T: ByteArrayType>(a: &GenericByteArray<T>, start: usize, len: usize) -> usize {
        let offsets = a.value_offsets();
        (offsets[start + len].as_usize()) - offsets[start].as_usize()
    }
    match array.data_type() {
        DataType::Utf8 => range(array.as_string::<i32>(), start, len),
        DataType::Binary => range(array.as_binary::<i32>(), start, len),
        DataType::LargeUtf8 => range(array.as_string::<i64>(), start, len),
        _ => range(array.as_binary::<i64>(), start, len),
    }
}

/// Bytes of the values longer than 12 bytes in `array[start..start + len]` (a view array).
fn long_view_bytes(array: &dyn Array, start: usize, len: usize) -> usize {
    let views = match array.data_type() {
        DataType::Utf8View => array.as_string_view().views(),
        _ => array.as_binary_view().views(),
    };
    views[start..start + len]
        .iter()
        .map(|v| *v as u32 as usize)
        .filter(|&l| l > 12)
        .sum()
}

/// Per range, the bytes of variable-length data its rows of `array` take in an open column
/// (value bytes of the byte types, values longer than 12 bytes of the view types), `range_of_row`
/// naming each row's range; `None` for the other types.
pub(crate) fn var_bytes(
    array: &dyn Array,
    range_of_row: &[u32],
    ranges: usize,
) -> Option<Vec<usize>> {
    fn by_offsets<T: ByteArrayType>(a: &GenericByteArray<T>, rows: &[u32], sums: &mut [usize]) {
        for (w, &k) in a.value_offsets().windows(2).zip(rows) {
            sums[k as usize] += w[1].as_usize() - w[0].as_usize();
        }
    }
    fn by_views(views: &[u128], rows: &[u32], sums: &mut [usize]) {
        for (&v, &k) in views.iter().zip(rows) {
            let len = v as u32 as usize;
            if len > 12 {
                sums[k as usize] += len;
            }
        }
    }
    let mut sums = vec![0usize; ranges];
    match array.data_type() {
        DataType::Utf8 => by_offsets(array.as_string::<i32>(), range_of_row, &mut sums),
        DataType::Binary => by_offsets(array.as_binary::<i32>(), range_of_row, &mut sums),
        DataType::LargeUtf8 => by_offsets(array.as_string::<i64>(), range_of_row, &mut sums),
        DataType::LargeBinary => by_offsets(array.as_binary::<i64>(), range_of_row, &mut sums),
        DataType::Utf8View => by_views(array.as_string_view().views(), range_of_row, &mut sums),
        DataType::BinaryView => by_views(array.as_binary_view().views(), range_of_row, &mut sums),
        _ => return None,
    }
    Some(sums)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int32Array, LargeBinaryArray, StringArray, StringViewArray};

    use super::*;

    #[test]
    fn one_pass_per_range_sums_agree_with_each_range_measured_alone() {
        let long = "a value longer than twelve bytes";
        let arrays: [ArrayRef; 4] = [
            Arc::new(StringArray::from_iter_values(
                (0..40).map(|i| "x".repeat(i % 9)),
            )),
            Arc::new(LargeBinaryArray::from_iter_values(
                (0..40).map(|i| vec![1u8; i % 5]),
            )),
            Arc::new(StringViewArray::from_iter_values(
                (0..40).map(|i| if i % 3 == 0 { long } else { "short" }),
            )),
            Arc::new(Int32Array::from_iter_values(0..40)),
        ];
        // Ranges of 10 consecutive rows: each range's sum is its rows measured alone.
        let range_of_row: Vec<u32> = (0..40).map(|i| i / 10).collect();
        for array in &arrays {
            let sums = var_bytes(array.as_ref(), &range_of_row, 4);
            let alone: Vec<usize> = (0..4)
                .map(|k| var_range_bytes(array.as_ref(), k * 10, 10))
                .collect();
            match sums {
                Some(sums) => assert_eq!(sums, alone, "{}", array.data_type()),
                None => assert_eq!(alone, [0; 4], "{}", array.data_type()),
            }
        }
        // The view column counts only its long values.
        let views = var_range_bytes(arrays[2].as_ref(), 0, 40);
        assert_eq!(views, 14 * long.len());
    }
}
