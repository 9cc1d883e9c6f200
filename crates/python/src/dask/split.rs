//! The send side's split: an input partition's rows grouped by the worker they go to.
//!
//! Dask's `split_by_worker` (distributed 2026.8, `shuffle/_shuffle.py`) merges the pandas frame
//! with the worker code of every output partition (a full copy), converts it to Arrow, sorts
//! it by worker (`sort_by("_worker")`, a copy) and slices it; `_shard_partition` then writes
//! one IPC stream per worker and copies it into `bytes`, all with the GIL held. Here the
//! frame's Arrow table (with Dask's `_worker` column, so the index and pandas metadata are the
//! ones Dask makes) is split in one pass: a stable counting sort by (worker, output partition)
//! and one `take` per worker. Sorting by the output partition too does not change what any
//! output partition holds or its order (the receiver groups each shard's rows by output
//! partition, stably): it hands the receiver one run per output partition.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use arrow_select::take::take_record_batch;

use super::order::stable_order;
use super::refusal::Refusal;

/// An input partition split by worker: the schema (the input's without the worker column,
/// metadata kept) and, for each worker code, its rows (`None` for a worker that gets none).
pub(crate) struct Split {
    pub(crate) schema: SchemaRef,
    pub(crate) parts: Vec<Option<RecordBatch>>,
}

/// Splits `batches` (of `schema`) by the worker code in `worker_column` (`0..num_workers`),
/// rows of each worker sorted stably by `partition_column`; the worker column is dropped.
pub(crate) fn split_by_worker(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    worker_column: &str,
    partition_column: &str,
    num_workers: usize,
) -> Result<Split, Refusal> {
    let worker_index = column_index(schema, worker_column)?;
    let partition_index = column_index(schema, partition_column)?;
    let keep: Vec<usize> = (0..schema.fields().len())
        .filter(|&i| i != worker_index)
        .collect();
    let out_schema = SchemaRef::new(schema.project(&keep)?);
    let mut workers = Vec::new();
    let mut partitions = Vec::new();
    for batch in batches {
        integers(batch.column(worker_index), worker_column, &mut workers)?;
        integers(
            batch.column(partition_index),
            partition_column,
            &mut partitions,
        )?;
    }
    if u32::try_from(workers.len()).is_err() {
        return Err(Refusal::Value(format!(
            "{} rows to split: more than a uint32 row index holds",
            workers.len()
        )));
    }
    if let Some(bad) = workers
        .iter()
        .find(|&&w| w < 0 || w as u64 >= num_workers as u64)
    {
        return Err(Refusal::Value(format!(
            "worker code {bad} in {worker_column:?} is out of range: there are {num_workers} \
             workers"
        )));
    }
    let mut parts: Vec<Option<RecordBatch>> = vec![None; num_workers];
    if workers.is_empty() {
        return Ok(Split {
            schema: out_schema,
            parts,
        });
    }
    let order = sort_order(&workers, &partitions, num_workers)?;
    let projected = batches
        .iter()
        .map(|b| b.project(&keep)?.with_schema(SchemaRef::clone(&out_schema)))
        .collect::<Result<Vec<_>, _>>()?;
    let all = arrow_shards_spill::concat_batches(&out_schema, &projected)?;
    drop(projected);
    let mut counts = vec![0usize; num_workers];
    for &w in &workers {
        counts[w as usize] += 1;
    }
    let mut offset = 0;
    for (worker, &count) in counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        parts[worker] = Some(take_record_batch(&all, &order.slice(offset, count))?);
        offset += count;
    }
    Ok(Split {
        schema: out_schema,
        parts,
    })
}

fn column_index(schema: &SchemaRef, column: &str) -> Result<usize, Refusal> {
    schema.index_of(column).map_err(|_| {
        Refusal::Value(format!(
            "the table has no column {column:?} (columns: {:?})",
            schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
        ))
    })
}

/// The stable order by (worker, partition): one counting sort on a combined `u32` key when the
/// keys' range fits, a stable comparison sort otherwise.
fn sort_order(
    workers: &[i64],
    partitions: &[i64],
    num_workers: usize,
) -> Result<arrow_array::UInt32Array, Refusal> {
    let min = partitions.iter().copied().min().unwrap_or(0);
    let max = partitions.iter().copied().max().unwrap_or(0);
    let span = max.abs_diff(min).saturating_add(1);
    let combined = span.saturating_mul(num_workers as u64);
    if combined <= u64::from(u32::MAX) {
        let keys: Vec<u32> = workers
            .iter()
            .zip(partitions)
            .map(|(&w, &p)| (w as u64 * span + p.abs_diff(min)) as u32)
            .collect();
        return Ok(stable_order(&keys));
    }
    let mut order: Vec<u32> = (0..workers.len() as u32).collect();
    order.sort_by_key(|&i| (workers[i as usize], partitions[i as usize]));
    Ok(arrow_array::UInt32Array::from(order))
}

/// Appends the values of an integer column without nulls to `out`.
pub(crate) fn integers(array: &dyn Array, column: &str, out: &mut Vec<i64>) -> Result<(), Refusal> {
    if array.null_count() > 0 {
        return Err(Refusal::Value(format!(
            "the column {column:?} has {} nulls",
            array.null_count()
        )));
    }
    macro_rules! extend {
        ($t:ty) => {
            out.extend(
                array
                    .as_primitive::<$t>()
                    .values()
                    .iter()
                    .map(|&v| v as i64),
            )
        };
    }
    match array.data_type() {
        DataType::Int8 => extend!(Int8Type),
        DataType::Int16 => extend!(Int16Type),
        DataType::Int32 => extend!(Int32Type),
        DataType::Int64 => extend!(Int64Type),
        DataType::UInt8 => extend!(UInt8Type),
        DataType::UInt16 => extend!(UInt16Type),
        DataType::UInt32 => extend!(UInt32Type),
        DataType::UInt64 => {
            let values = array.as_primitive::<UInt64Type>().values();
            if let Some(big) = values.iter().find(|&&v| i64::try_from(v).is_err()) {
                return Err(Refusal::Value(format!(
                    "the column {column:?} holds {big}, more than an int64"
                )));
            }
            extend!(UInt64Type)
        }
        other => {
            return Err(Refusal::Type(format!(
                "the column {column:?} must be integers, got {other}"
            )));
        }
    }
    Ok(())
}
