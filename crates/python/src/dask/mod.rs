//! The per-byte work of `arrow_shards.dask`'s P2P runs, in Rust.
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
//! 2. [`receive`]: `_native._dask_receive`, the shards a peer sent (Arrow IPC streams in the
//!    frames Dask's comms received, out of band) decoded zero-copy into batches with the
//!    input partition id column, and the output partition of every row: what the scatter
//!    write into the run's buffer takes.
//! 3. [`order`]: `_native._dask_order`, an output partition as one contiguous table in Dask's
//!    order (stable by input partition id).
//!
//! Wrong input (a missing column, a wrong type, nulls) raises `ValueError` or `TypeError`;
//! an Arrow failure raises `arrow_shards.InternalError`. No lock is held anywhere here.

mod order;
mod receive;
mod refusal;
mod split;

use arrow_array::{Array, RecordBatch, UInt8Array};
use arrow_data::ArrayData;
use arrow_ipc::writer::StreamWriter;
use arrow_pyarrow::FromPyArrow;
use arrow_schema::{ArrowError, SchemaRef};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::convert::{Data, array_to_py, batches_to_table, import_data, pyarrow};
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
/// rows for every other, as a `pyarrow.Buffer` over the stream Rust wrote (not copied; the
/// bytes are what Dask's `serialize_table` makes). The split and the serialisation run with
/// the GIL released.
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
            (_, Some(bytes)) => out.append(buffer_to_py(py, bytes)?)?,
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

/// `bytes` as a `pyarrow.Buffer` without a copy: the values of a `uint8` array exported
/// through the C data interface (the workspace keeps `unsafe` to one audited module of the spill
/// crate; a buffer protocol of our own would need it here). pyarrow frees it through the array's release callback.
fn buffer_to_py(py: Python<'_>, bytes: Vec<u8>) -> PyResult<Bound<'_, PyAny>> {
    let array = array_to_py(py, UInt8Array::from(bytes).into_data())?;
    array.call_method0(intern!(py, "buffers"))?.get_item(1)
}

/// A received frame (any object with the buffer protocol, or a `pyarrow.Buffer`) as an arrow
/// `Buffer` over the same memory: pyarrow wraps it (`py_buffer`) as a `uint8` array's values,
/// imported through the C data interface.
fn frame_from_py(frame: &Bound<'_, PyAny>) -> PyResult<arrow_buffer::Buffer> {
    let py = frame.py();
    let pa = pyarrow(py)?;
    let buffer = if frame.is_instance(&pa.getattr(intern!(py, "Buffer"))?)? {
        frame.clone()
    } else {
        pa.call_method1(intern!(py, "py_buffer"), (frame,))?
    };
    let size: usize = buffer.getattr(intern!(py, "size"))?.extract()?;
    let none = py.None().into_bound(py);
    let buffers = PyList::new(py, [none, buffer])?;
    let array = pa.getattr(intern!(py, "Array"))?.call_method1(
        intern!(py, "from_buffers"),
        (pa.call_method0(intern!(py, "uint8"))?, size, buffers),
    )?;
    let data = ArrayData::from_pyarrow_bound(&array)?;
    Ok(data.buffers()[0].slice_with_length(data.offset(), data.len()))
}

/// _dask_receive(shards, partition_column, input_partition_id_column, drop_partition_column)
/// --
///
/// The shards of a received message (`(input_partition, frame)` pairs: each frame an Arrow
/// IPC stream, as a `pyarrow.Buffer`, `bytes` or another buffer) decoded without copying,
/// as a list of `(table, partition_ids)`: one per distinct set of fields, in order of first
/// appearance, the table with the `uint32` column `input_partition_id_column` appended (and
/// `partition_column` dropped if asked), `partition_ids` the `uint32` output partition of each
/// of its rows. The decoding runs with the GIL released. A frame that is not an Arrow IPC
/// stream or a bad partition column raises `ValueError`/`TypeError` naming the shard.
#[pyfunction]
pub(crate) fn _dask_receive<'py>(
    py: Python<'py>,
    shards: &Bound<'py, PyAny>,
    partition_column: &str,
    input_partition_id_column: &str,
    drop_partition_column: bool,
) -> PyResult<Bound<'py, PyList>> {
    let mut decoded = Vec::new();
    for item in shards.try_iter()? {
        let (input_partition, frame): (u32, Bound<'py, PyAny>) = item?.extract()?;
        decoded.push(receive::Shard {
            input_partition,
            frame: frame_from_py(&frame)?,
        });
    }
    let columns = receive::Columns {
        partition: partition_column,
        drop_partition: drop_partition_column,
        input_partition_id: input_partition_id_column,
    };
    let groups = py
        .detach(|| receive::decode(decoded, &columns))
        .map_err(|e| e.into_py(py))?;
    let out = PyList::empty(py);
    for group in groups {
        let table = batches_to_table(py, group.schema, group.batches)?;
        let ids = array_to_py(py, group.partitions.into_data())?;
        out.append(PyTuple::new(py, [table, ids])?)?;
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
