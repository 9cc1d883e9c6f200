//! Helpers shared by the integration tests.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};

/// A batch of `rows` rows: ids from `start` and strings derived from them.
pub(crate) fn ints_and_strings(start: i64, rows: usize) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(start..start + rows as i64));
    let names: ArrayRef = Arc::new(StringArray::from_iter(
        (start..start + rows as i64).map(|i| (i % 7 != 0).then(|| format!("name-{i}"))),
    ));
    RecordBatch::try_from_iter([("id", ids), ("name", names)]).unwrap()
}
