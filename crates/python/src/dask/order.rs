//! The ordered read: an output partition's rows in Dask's order, as one contiguous batch.
//!
//! Dask's P2P hands out an output partition sorted by input partition id, stably
//! (`convert_shards`: `concat_tables`, then `sort_by("__input_partition_id__")`, a full copy
//! with the GIL held in pyarrow, then a drop of that column). The buffer reads a partition as
//! the runs it was written in (one run per received shard and output partition), so the rows
//! of one input partition are already together and in order; only the runs need ordering.
//! [`order_by`] sorts the runs by id (stable) and concatenates their slices once, with
//! `arrow_shards_spill::concat_batches` (dictionaries kept as written, unused values
//! included, as pyarrow's `sort_by` keeps them). When the ids are scattered row by row (runs
//! shorter than [`MIN_MEAN_RUN_ROWS`] on average), slicing every run would cost more than
//! the copy: the batches are concatenated and the rows taken in a stable counting order.

use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, SchemaRef};
use arrow_select::take::take_record_batch;

use super::refusal::Refusal;

/// Below this mean run length the runs are not sliced one by one (see the module docs).
pub(crate) const MIN_MEAN_RUN_ROWS: usize = 8;

/// One run of equal ids: `len` rows from `start` of batch `batch`.
#[derive(Debug, Clone, Copy)]
struct Run {
    id: u32,
    batch: usize,
    start: usize,
    len: usize,
}

/// `batches` (of `schema`) as one batch sorted stably by the `uint32` column `column`, without
/// that column; the schema's metadata (pandas') is kept.
pub(crate) fn order_by(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    column: &str,
) -> Result<RecordBatch, Refusal> {
    let index = schema.index_of(column).map_err(|_| {
        Refusal::Value(format!(
            "the table has no column {column:?} to order by (columns: {:?})",
            schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
        ))
    })?;
    let field = schema.field(index);
    if field.data_type() != &DataType::UInt32 {
        return Err(Refusal::Type(format!(
            "the column {column:?} to order by must be uint32, got {}",
            field.data_type()
        )));
    }
    let keep: Vec<usize> = (0..schema.fields().len()).filter(|&i| i != index).collect();
    let out_schema = SchemaRef::new(schema.project(&keep)?);
    let mut runs = Vec::new();
    let mut rows = 0;
    for (b, batch) in batches.iter().enumerate() {
        let ids = batch.column(index).as_primitive::<UInt32Type>();
        if ids.null_count() > 0 {
            return Err(Refusal::Value(format!(
                "the column {column:?} to order by has {} nulls",
                ids.null_count()
            )));
        }
        push_runs(&mut runs, b, ids.values());
        rows += batch.num_rows();
    }
    if u32::try_from(rows).is_err() {
        return Err(Refusal::Value(format!(
            "{rows} rows to order: more than a uint32 row index holds"
        )));
    }
    let projected = batches
        .iter()
        .map(|b| b.project(&keep)?.with_schema(SchemaRef::clone(&out_schema)))
        .collect::<Result<Vec<_>, _>>()?;
    let sorted = runs.windows(2).all(|w| w[0].id <= w[1].id);
    if sorted {
        return Ok(arrow_shards_spill::concat_batches(&out_schema, &projected)?);
    }
    if runs.len().saturating_mul(MIN_MEAN_RUN_ROWS) <= rows {
        runs.sort_by_key(|r| r.id); // stable: a run keeps its place among equal ids
        let slices: Vec<RecordBatch> = runs
            .iter()
            .map(|r| projected[r.batch].slice(r.start, r.len))
            .collect();
        return Ok(arrow_shards_spill::concat_batches(&out_schema, &slices)?);
    }
    let all = arrow_shards_spill::concat_batches(&out_schema, &projected)?;
    let ids: Vec<u32> = batches
        .iter()
        .flat_map(|b| b.column(index).as_primitive::<UInt32Type>().values().iter())
        .copied()
        .collect();
    let order = stable_order(&ids);
    Ok(take_record_batch(&all, &order)?)
}

fn push_runs(runs: &mut Vec<Run>, batch: usize, ids: &[u32]) {
    let mut start = 0;
    while start < ids.len() {
        let id = ids[start];
        let len = ids[start..].iter().take_while(|&&v| v == id).count();
        match runs.last_mut() {
            Some(last)
                if last.batch == batch && last.id == id && last.start + last.len == start =>
            {
                last.len += len;
            }
            _ => runs.push(Run {
                id,
                batch,
                start,
                len,
            }),
        }
        start += len;
    }
}

/// The positions of `keys` in a stable ascending order: a counting sort when the keys' range
/// is small against their number, a stable comparison sort otherwise.
pub(crate) fn stable_order(keys: &[u32]) -> UInt32Array {
    let (Some(&min), Some(&max)) = (keys.iter().min(), keys.iter().max()) else {
        return UInt32Array::from(Vec::<u32>::new());
    };
    let range = (max - min) as usize + 1;
    if range <= keys.len().saturating_mul(4).max(1 << 16) {
        let mut starts = vec![0u32; range + 1];
        for &k in keys {
            starts[(k - min) as usize + 1] += 1;
        }
        let mut sum = 0;
        for start in &mut starts {
            sum += *start;
            *start = sum;
        }
        let mut order = vec![0u32; keys.len()];
        for (position, &k) in keys.iter().enumerate() {
            let slot = &mut starts[(k - min) as usize];
            order[*slot as usize] = position as u32;
            *slot += 1;
        }
        return UInt32Array::from(order);
    }
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    order.sort_by_key(|&i| keys[i as usize]);
    UInt32Array::from(order)
}
