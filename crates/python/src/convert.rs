//! The Arrow boundary: Python objects in, pyarrow objects out, without copying the data.
//!
//! In: anything that exports the Arrow PyCapsule interface. An object with `__arrow_c_array__`
//! (a `pyarrow.RecordBatch`, a nanoarrow array of a struct type) is one batch; an object with
//! `__arrow_c_stream__` (a `pyarrow.Table` or `RecordBatchReader`, a polars or pandas
//! `DataFrame`, a duckdb result) is a stream of batches, read one at a time. Both are imported
//! with arrow's C data interface (`arrow-pyarrow`): the Rust arrays point at the producer's
//! buffers, which the producer frees when the last Rust reference goes.
//!
//! Out: batches are exported the same way, to pyarrow (`pyarrow.RecordBatch`, `pyarrow.Table`,
//! `pyarrow.RecordBatchReader`); pyarrow frees them through the Rust release callback.

use std::sync::Arc;

use arrow_array::ffi_stream::RecordBatchStreamReader;
use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader, UInt32Array};
use arrow_data::ArrayData;
use arrow_pyarrow::{FromPyArrow, IntoPyArrow, ToPyArrow};
use arrow_schema::{DataType, SchemaRef};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{intern, types::PyModule};

/// What a write was given.
pub(crate) enum Data {
    /// One batch (`__arrow_c_array__`).
    Batch(RecordBatch),
    /// Batches to read in order (`__arrow_c_stream__`).
    Stream(RecordBatchStreamReader),
}

/// `pyarrow`, imported once.
pub(crate) fn pyarrow(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static PYARROW: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    PYARROW
        .get_or_try_init(py, || py.import("pyarrow").map(Bound::unbind))
        .map(|m| m.bind(py))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .fully_qualified_name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "an unknown type".to_owned())
}

/// Imports a batch, a table or a stream of batches, zero-copy.
///
/// A stream is preferred, also for one batch: arrow's stream import checks each array's layout
/// against its type but skips a full validation pass over the values (UTF-8 of every string,
/// every offset), which would read all the data once more on every write; an invalid array from
/// a producer is that producer's bug, as it is for pyarrow's own import. An object that only
/// exports `__arrow_c_array__` is imported with that full validation (skipping it on that
/// path needs an `unsafe` call, which the workspace keeps out of this crate).
pub(crate) fn import_data(value: &Bound<'_, PyAny>) -> PyResult<Data> {
    let py = value.py();
    if value.hasattr(intern!(py, "__arrow_c_stream__"))? {
        return Ok(Data::Stream(RecordBatchStreamReader::from_pyarrow_bound(
            value,
        )?));
    }
    if value.hasattr(intern!(py, "__arrow_c_array__"))? {
        return Ok(Data::Batch(RecordBatch::from_pyarrow_bound(value)?));
    }
    Err(PyTypeError::new_err(format!(
        "expected a pyarrow.RecordBatch, a pyarrow.Table or another object with \
         __arrow_c_array__ or __arrow_c_stream__ (the Arrow PyCapsule interface), got {}",
        type_name(value)
    )))
}

/// Imports the partition ids of a scatter write: a `uint32` Arrow array (pyarrow, or any
/// `__arrow_c_array__`), a chunked one (`__arrow_c_stream__`, combined), a numpy `uint32`
/// array (zero-copy through pyarrow), or a sequence of ints (converted, checked).
pub(crate) fn import_ids(value: &Bound<'_, PyAny>) -> PyResult<UInt32Array> {
    let py = value.py();
    let array = if value.hasattr(intern!(py, "__arrow_c_array__"))? {
        value.clone()
    } else if value.hasattr(intern!(py, "__arrow_c_stream__"))? {
        pyarrow(py)?
            .call_method1(intern!(py, "chunked_array"), (value,))?
            .call_method0(intern!(py, "combine_chunks"))?
    } else if value.hasattr(intern!(py, "dtype"))? && value.hasattr(intern!(py, "__array__"))? {
        let dtype = value.getattr(intern!(py, "dtype"))?.str()?.to_string();
        if dtype != "uint32" {
            return Err(PyTypeError::new_err(format!(
                "partition_ids must be uint32, got a {} array of {dtype}: convert it with \
                 .astype(numpy.uint32) after checking the range",
                type_name(value)
            )));
        }
        pyarrow(py)?.call_method1(intern!(py, "array"), (value,))?
    } else {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("type", pyarrow(py)?.call_method0(intern!(py, "uint32"))?)?;
        pyarrow(py)?.call_method(intern!(py, "array"), (value,), Some(&kwargs))?
    };
    let data = ArrayData::from_pyarrow_bound(&array)?;
    if data.data_type() != &DataType::UInt32 {
        return Err(PyTypeError::new_err(format!(
            "partition_ids must be uint32, got {}: cast them first (pyarrow.compute.cast)",
            data.data_type()
        )));
    }
    Ok(UInt32Array::from(data))
}

/// A batch as a `pyarrow.RecordBatch`.
pub(crate) fn batch_to_py<'py>(
    py: Python<'py>,
    batch: &RecordBatch,
) -> PyResult<Bound<'py, PyAny>> {
    batch.to_pyarrow(py)
}

/// An array as a `pyarrow.Array`.
pub(crate) fn array_to_py(py: Python<'_>, data: ArrayData) -> PyResult<Bound<'_, PyAny>> {
    data.to_pyarrow(py)
}

/// Batches as one `pyarrow.Table` of `schema`, exported as one stream (`read_all` runs without
/// the GIL in pyarrow).
pub(crate) fn batches_to_table(
    py: Python<'_>,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> PyResult<Bound<'_, PyAny>> {
    let reader: Box<dyn RecordBatchReader + Send> = Box::new(RecordBatchIterator::new(
        batches.into_iter().map(Ok),
        Arc::clone(&schema),
    ));
    reader
        .into_pyarrow(py)?
        .call_method0(intern!(py, "read_all"))
}
