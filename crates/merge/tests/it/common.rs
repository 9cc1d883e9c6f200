//! Batches, pools and checks shared by the tests.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_select::concat::concat_batches;
use arrow_shards_memory::sizing::batch_memory_size;
use arrow_shards_memory::{MemoryPool, MemoryReservation, UnboundedPool};

/// `id: Int64` (not null) and `name: Utf8` (nullable).
pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// A batch of `rows` rows whose ids start at `first`; every seventh name is null.
pub(crate) fn batch(schema: &SchemaRef, first: i64, rows: usize) -> RecordBatch {
    let ids = Int64Array::from_iter_values(first..first + rows as i64);
    let names = StringArray::from_iter(
        (first..first + rows as i64).map(|i| (i % 7 != 0).then(|| format!("name-{i}"))),
    );
    RecordBatch::try_new(
        SchemaRef::clone(schema),
        vec![Arc::new(ids), Arc::new(names)],
    )
    .unwrap()
}

/// Consecutive batches of the given sizes, ids counting up from 0 across them.
pub(crate) fn batches(schema: &SchemaRef, sizes: &[usize]) -> Vec<RecordBatch> {
    let mut first = 0;
    sizes
        .iter()
        .map(|&rows| {
            let b = batch(schema, first, rows);
            first += rows as i64;
            b
        })
        .collect()
}

pub(crate) fn pool() -> Arc<dyn MemoryPool> {
    Arc::new(UnboundedPool::new())
}

/// Charges `batches` to `pool` the way a buffer would (each batch's own bytes).
pub(crate) fn charge(pool: &Arc<dyn MemoryPool>, batches: &[RecordBatch]) -> MemoryReservation {
    let mut r = MemoryReservation::new(pool);
    r.grow(batches.iter().map(batch_memory_size).sum());
    r
}

/// All rows of `batches` as one batch with `schema`.
pub(crate) fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> RecordBatch {
    concat_batches(schema, batches).unwrap()
}

/// The allocation the first buffer of `array` lives in.
pub(crate) fn first_buffer_ptr(array: &ArrayRef) -> usize {
    array.to_data().buffers()[0].data_ptr().as_ptr() as usize
}

/// True if `a` and `b` are the same arrays (same `Arc`s), column by column.
pub(crate) fn same_arrays(a: &RecordBatch, b: &RecordBatch) -> bool {
    a.num_columns() == b.num_columns()
        && a.columns()
            .iter()
            .zip(b.columns())
            .all(|(x, y)| Arc::ptr_eq(x, y))
        && a.num_rows() == b.num_rows()
        && a.columns().iter().all(|c| c.len() == a.num_rows())
}
