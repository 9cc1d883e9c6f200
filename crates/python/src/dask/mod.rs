//! The per-byte work of `arrow_shards.dask`'s P2P runs, in Rust (issue #35).
//!
//! Dask's P2P DataFrame shuffle copies every byte several times with the GIL held: the send
//! side's split of an input partition by worker and its IPC serialisation, and on output the
//! sort of a partition's rows by input partition. Two private functions do those steps here,
//! each in one call with the GIL released; the Python side (`arrow_shards.dask._run`) keeps
//! Dask's own pandas conversions around them, so dtypes, index and pandas metadata stay
//! Dask's. In the order a row meets them:
//! 1. [`split`]: `_native._dask_split`, an input partition's Arrow table split by the worker
//!    each row goes to, one Arrow IPC stream per remote worker (the wire format Dask's
//!    receive side reads) and a table for the local worker.
//! 2. [`order`]: `_native._dask_order`, an output partition as one contiguous table in Dask's
//!    order (stable by input partition id).
//!
//! Wrong input (a missing column, a wrong type, nulls) raises `ValueError` or `TypeError`;
//! an Arrow failure raises `arrow_shards.InternalError`. No lock is held anywhere here.

mod order;
mod refusal;
mod split;

use arrow_array::RecordBatch;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, SchemaRef};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::convert::{Data, batches_to_table, import_data};
use crate::errors::arrow_to_py;
use refusal::Refusal;

/// Imports a table (or a batch, or any Arrow stream) whole: its schema and batches. The
/// stream is read with the GIL released.
fn import_all(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<(SchemaRef, Vec<RecordBatch>)> {
    match import_data(value)? {
        Data::Batch(batch) => Ok((batch.schema(), vec![batch])),
        Data::Stream(mut stream) => {
            let schema = arrow_array::RecordBatchReader::schema(&stream);
            let batches = py
                .detach(|| stream.by_ref().collect::<Result<Vec<_>, _>>())
                .map_err(|e| arrow_to_py(py, e))?;
            Ok((schema, batches))
        }
    }
}

/// _dask_order(table, column)
/// --
///
/// `table`'s rows sorted stably by its `uint32` column `column`, without that column, as a
/// `pyarrow.Table` of one batch (schema metadata kept). The work runs with the GIL released.
#[pyfunction]
pub(crate) fn _dask_order<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    column: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let (schema, batches) = import_all(py, table)?;
    let ordered = py
        .detach(|| order::order_by(&schema, &batches, column))
        .map_err(|e| e.into_py(py))?;
    batches_to_table(py, ordered.schema(), vec![ordered])
}

/// _dask_split(table, worker_column, partition_column, num_workers, local=None)
/// --
///
/// `table` split by the worker code in `worker_column` (integers in `0..num_workers`), each
/// worker's rows sorted stably by `partition_column`, the worker column dropped (schema
/// metadata kept): a list with an item per worker code, `None` for a worker that gets no
/// rows, the `pyarrow.Table` of its rows for the code `local`, and the Arrow IPC stream of its
/// rows (`bytes`, what Dask's `serialize_table` makes) for every other. The split and the
/// serialisation run with the GIL released.
#[pyfunction]
#[pyo3(signature = (table, worker_column, partition_column, num_workers, local=None))]
pub(crate) fn _dask_split<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    worker_column: &str,
    partition_column: &str,
    num_workers: usize,
    local: Option<usize>,
) -> PyResult<Bound<'py, PyList>> {
    let (schema, batches) = import_all(py, table)?;
    let (split, streams) = py
        .detach(|| {
            let split = split::split_by_worker(
                &schema,
                &batches,
                worker_column,
                partition_column,
                num_workers,
            )?;
            drop(batches);
            let streams = split
                .parts
                .iter()
                .enumerate()
                .map(|(worker, part)| match part {
                    Some(batch) if Some(worker) != local => {
                        stream_bytes(&split.schema, batch).map(Some)
                    }
                    _ => Ok(None),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, Refusal>((split, streams))
        })
        .map_err(|e| e.into_py(py))?;
    let out = PyList::empty(py);
    for (part, stream) in split.parts.into_iter().zip(streams) {
        match (part, stream) {
            (_, Some(bytes)) => out.append(PyBytes::new(py, &bytes))?,
            (Some(batch), None) => out.append(batches_to_table(
                py,
                SchemaRef::clone(&split.schema),
                vec![batch],
            )?)?,
            (None, None) => out.append(py.None())?,
        }
    }
    Ok(out)
}

/// One batch as an Arrow IPC stream (schema, batch, end of stream), as pyarrow's
/// `ipc.new_stream(...).write_table` writes it with its default options.
fn stream_bytes(schema: &SchemaRef, batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
    let capacity = batch.get_array_memory_size() + 4096;
    let mut writer = StreamWriter::try_new(Vec::with_capacity(capacity), schema)?;
    writer.write(batch)?;
    writer.finish()?;
    writer.into_inner()
}
