//! View-array compaction: a batch whose `Utf8View`/`BinaryView` columns keep alive much more
//! string data than they reference (a slice or `take` of a larger batch) is rewritten to own only
//! its live strings. The spill writer applies it before encoding; anything that hands small
//! pieces of a large batch on (a benchmark's simulated shards, say) can use the same rule.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::{ArrowError, DataType};

/// Compacts view arrays whose data buffers hold mostly bytes they no longer reference (e.g.
/// slices of a larger array), so the spill writes only live strings (DataFusion #19414: 820 MB
/// of spill became 33 MB). A column is compacted when its data buffers are more than twice the
/// bytes it references and the difference is over 64 KiB; other columns (and batches with no
/// such column) are returned as they are, sharing their buffers.
///
/// ```
/// use std::sync::Arc;
/// use arrow_array::{Array, ArrayRef, RecordBatch, StringViewArray};
/// use arrow_shards_spill::compact_views;
///
/// let long: Vec<String> = (0..10_000).map(|i| format!("a string longer than twelve bytes {i}")).collect();
/// let column: ArrayRef = Arc::new(StringViewArray::from_iter_values(&long));
/// let batch = RecordBatch::try_from_iter([("s", column)]).unwrap();
/// let piece = batch.slice(0, 10); // still holds all 10,000 strings' bytes
/// let compact = compact_views(&piece).unwrap();
/// assert_eq!(compact, piece);
/// assert!(compact.get_array_memory_size() < piece.get_array_memory_size() / 10);
/// ```
pub fn compact_views(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let needs = |column: &ArrayRef| match column.data_type() {
        DataType::Utf8View => wasteful(
            column
                .as_string_view()
                .data_buffers()
                .iter()
                .map(|b| b.len())
                .sum(),
            column.as_string_view().total_buffer_bytes_used(),
        ),
        DataType::BinaryView => wasteful(
            column
                .as_binary_view()
                .data_buffers()
                .iter()
                .map(|b| b.len())
                .sum(),
            column.as_binary_view().total_buffer_bytes_used(),
        ),
        _ => false,
    };
    if !batch.columns().iter().any(needs) {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .map(|column| -> ArrayRef {
            if !needs(column) {
                return Arc::clone(column);
            }
            match column.data_type() {
                DataType::Utf8View => Arc::new(column.as_string_view().gc()),
                _ => Arc::new(column.as_binary_view().gc()),
            }
        })
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(batch.schema(), columns, &options)
}

/// True if a view array's data buffers are more than twice what it references (and the waste
/// is worth a copy).
fn wasteful(buffer_bytes: usize, used_bytes: usize) -> bool {
    buffer_bytes > 2 * used_bytes && buffer_bytes - used_bytes > 64 * 1024
}
