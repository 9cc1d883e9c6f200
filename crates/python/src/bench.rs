//! The Rust side of `benches/python_bench.py`: the same work as the Python API, through the
//! Rust API, in the same process and on the same (imported) batches, so the two times compare
//! the Python layer alone. Private (`_native._bench_*`); not part of the package's API.

use std::time::Instant;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_shards::ShardBuffer;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::{Data, import_data, import_ids};

fn one_batch(value: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    match import_data(value)? {
        Data::Batch(batch) => Ok(batch),
        Data::Stream(mut stream) => match (stream.next(), stream.next()) {
            (Some(batch), None) => batch.map_err(|e| PyRuntimeError::new_err(e.to_string())),
            _ => Err(PyRuntimeError::new_err("expected one pyarrow.RecordBatch")),
        },
    }
}

fn build(
    batch: Option<&RecordBatch>,
    num_partitions: u32,
    memory_limit: Option<usize>,
) -> PyResult<ShardBuffer> {
    let batch = batch.ok_or_else(|| PyRuntimeError::new_err("no batches"))?;
    let mut builder = ShardBuffer::builder(batch.schema(), num_partitions);
    if let Some(limit) = memory_limit {
        builder = builder.with_memory_limit(limit);
    }
    builder
        .build()
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Finishes, reads every partition whole (as `ShardBuffer.read` does, without the export to
/// pyarrow), closes; returns the rows read.
fn read_all(buffer: &ShardBuffer) -> Result<usize, String> {
    buffer.finish().map_err(|e| e.to_string())?;
    let mut rows = 0;
    for partition in 0..buffer.num_partitions() {
        let batches: Vec<RecordBatch> = buffer
            .read(partition)
            .map_err(|e| e.to_string())?
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        rows += batches.iter().map(RecordBatch::num_rows).sum::<usize>();
    }
    buffer.close().map_err(|e| e.to_string())?;
    Ok(rows)
}

/// Runs `write` then [`read_all`] with the GIL released; returns `{"write": s, "read": s,
/// "rows": n}`.
fn write_then_read<'py>(
    py: Python<'py>,
    buffer: &ShardBuffer,
    write: impl FnOnce(&ShardBuffer) -> Result<(), String> + Send,
) -> PyResult<Bound<'py, PyDict>> {
    let outcome = py.detach(|| {
        let start = Instant::now();
        write(buffer)?;
        let written = Instant::now();
        let rows = read_all(buffer)?;
        let write = (written - start).as_secs_f64();
        Ok::<_, String>((write, written.elapsed().as_secs_f64(), rows))
    });
    let (write, read, rows) = outcome.map_err(PyRuntimeError::new_err)?;
    let d = PyDict::new(py);
    d.set_item("write", write)?;
    d.set_item("read", read)?;
    d.set_item("rows", rows)?;
    Ok(d)
}

/// Writes `shards` (a list of `(partition, pyarrow.RecordBatch)`) with `write_blocking`, then
/// finishes, reads every partition and closes. Returns `{"write": s, "read": s, "rows": n,
/// "import": s}` (the last: importing the shards from Python, before the timed part).
#[pyfunction]
#[pyo3(signature = (shards, num_partitions, *, memory_limit = None))]
pub(crate) fn _bench_rust_write<'py>(
    py: Python<'py>,
    shards: Vec<(u32, Bound<'py, PyAny>)>,
    num_partitions: u32,
    memory_limit: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let importing = Instant::now();
    let shards = shards
        .iter()
        .map(|(p, b)| Ok((*p, one_batch(b)?)))
        .collect::<PyResult<Vec<_>>>()?;
    let import = importing.elapsed().as_secs_f64();
    let buffer = build(shards.first().map(|(_, b)| b), num_partitions, memory_limit)?;
    let timings = write_then_read(py, &buffer, |buffer| {
        for (partition, batch) in shards {
            buffer
                .write_blocking(partition, batch)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    timings.set_item("import", import)?;
    Ok(timings)
}

/// Writes `batches` (a list of `pyarrow.RecordBatch`) with `write_partitioned_blocking`, each
/// with its uint32 ids from `ids`, then as `_bench_rust_write`.
#[pyfunction]
#[pyo3(signature = (batches, ids, num_partitions, *, memory_limit = None))]
pub(crate) fn _bench_rust_write_partitioned<'py>(
    py: Python<'py>,
    batches: Vec<Bound<'py, PyAny>>,
    ids: Vec<Bound<'py, PyAny>>,
    num_partitions: u32,
    memory_limit: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let batches = batches
        .iter()
        .map(one_batch)
        .collect::<PyResult<Vec<_>>>()?;
    let ids = ids
        .iter()
        .map(import_ids)
        .collect::<PyResult<Vec<UInt32Array>>>()?;
    let buffer = build(batches.first(), num_partitions, memory_limit)?;
    write_then_read(py, &buffer, |buffer| {
        for (batch, ids) in batches.into_iter().zip(&ids) {
            buffer
                .write_partitioned_blocking(batch, ids)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}
