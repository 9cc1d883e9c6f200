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

use arrow_array::ffi::{FFI_ArrowArray, from_ffi_and_data_type};
use arrow_array::ffi_stream::RecordBatchStreamReader;
use arrow_array::{
    Array, RecordBatch, RecordBatchIterator, RecordBatchOptions, RecordBatchReader, StructArray,
    UInt32Array,
};
use arrow_data::ArrayData;
use arrow_pyarrow::{FromPyArrow, FromPyArrowUnchecked, IntoPyArrow, ToPyArrow};
use arrow_schema::{DataType, SchemaRef};
use pyo3::exceptions::{PyTypeError, PyValueError};
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

/// `pyarrow.RecordBatch`, imported once.
fn record_batch_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    CLASS
        .get_or_try_init(py, || {
            pyarrow(py)?
                .getattr(intern!(py, "RecordBatch"))
                .map(Bound::unbind)
        })
        .map(|c| c.bind(py))
}

/// The schema a write expects: the buffer's, in Rust and as a `pyarrow.Schema`.
#[derive(Clone, Copy)]
pub(crate) struct Expected<'a, 'py> {
    pub(crate) schema: &'a SchemaRef,
    pub(crate) pyarrow: &'a Bound<'py, PyAny>,
}

/// A `pyarrow.RecordBatch` whose schema equals the buffer's, imported without exporting and
/// parsing its schema again (`None`: not such a batch; take the general path). Half of a small
/// batch's import time went into its schema (exported by pyarrow, parsed by arrow) for every
/// write, though the buffer knows it.
fn import_known_batch(
    value: &Bound<'_, PyAny>,
    expected: Expected<'_, '_>,
) -> PyResult<Option<RecordBatch>> {
    let py = value.py();
    if !value.get_type().is(record_batch_class(py)?) {
        return Ok(None);
    }
    let same = value
        .getattr(intern!(py, "schema"))?
        .call_method1(intern!(py, "equals"), (expected.pyarrow,))?
        .is_truthy()?;
    if !same {
        return Ok(None);
    }
    let mut array = FFI_ArrowArray::empty();
    value.call_method1(intern!(py, "_export_to_c"), (&raw mut array as usize,))?;
    let data_type = DataType::Struct(expected.schema.fields().clone());
    // SAFETY: `array` was just filled by pyarrow's `_export_to_c` with the batch as a struct
    // array of the batch's schema, which pyarrow compared equal to the buffer's (names, types,
    // nullability, nested fields, dictionary types): `data_type` is its type. The import checks
    // the layout against it as for any C data interface import (see `import_data`).
    #[expect(unsafe_code, reason = "import of an array of a known type; see SAFETY")]
    let data = unsafe { from_ffi_and_data_type(array, data_type) }
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let array = StructArray::from(data);
    let rows = array.len();
    let (_, columns, _) = array.into_parts();
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(Arc::clone(expected.schema), columns, &options)
        .map(Some)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Imports a batch, a table or a stream of batches, zero-copy. With `expected`, a
/// `pyarrow.RecordBatch` of exactly that schema takes a shorter way in.
pub(crate) fn import_data(
    value: &Bound<'_, PyAny>,
    expected: Option<Expected<'_, '_>>,
) -> PyResult<Data> {
    let py = value.py();
    if let Some(expected) = expected
        && let Some(batch) = import_known_batch(value, expected)?
    {
        return Ok(Data::Batch(batch));
    }
    if value.hasattr(intern!(py, "__arrow_c_array__"))? {
        // SAFETY: the PyCapsule protocol hands over an ArrowSchema and ArrowArray the producer
        // built; the import checks their layout (buffer counts, lengths against the declared
        // type), as arrow's own stream import (the branch below) does for every batch. What it
        // skips is a full validation pass over the values (UTF-8 of every string, every offset),
        // which would read all the data once more on every write: an invalid array from a
        // producer is that producer's bug, as it is for pyarrow's own import.
        #[expect(unsafe_code, reason = "one import of a producer's batch; see SAFETY")]
        let batch = unsafe { RecordBatch::from_pyarrow_bound_unchecked(value) }?;
        return Ok(Data::Batch(batch));
    }
    if value.hasattr(intern!(py, "__arrow_c_stream__"))? {
        return Ok(Data::Stream(RecordBatchStreamReader::from_pyarrow_bound(
            value,
        )?));
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
