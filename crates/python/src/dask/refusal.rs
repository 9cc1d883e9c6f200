//! [`Refusal`]: why a call of the Dask steps was refused (the caller's input, or Arrow), and
//! the Python exception it becomes. Its own file so that `order` and `split` use it without
//! importing their parent.

use arrow_schema::ArrowError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::arrow_to_py;

/// Why a call was refused: the caller's input, or Arrow.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A bad value (a missing column, nulls, an out-of-range code): `ValueError`.
    Value(String),
    /// A column of the wrong type: `TypeError`.
    Type(String),
    /// An Arrow kernel failed: `arrow_shards.InternalError` (or the class its cause names).
    Arrow(ArrowError),
}

impl Refusal {
    /// The refusal with the received shard it is about named first.
    pub(crate) fn for_input_partition(self, id: u32) -> Self {
        match self {
            Refusal::Value(m) => Refusal::Value(format!("the shard of input partition {id}: {m}")),
            Refusal::Type(m) => Refusal::Type(format!("the shard of input partition {id}: {m}")),
            other => other,
        }
    }

    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Refusal::Value(message) => PyValueError::new_err(message),
            Refusal::Type(message) => PyTypeError::new_err(message),
            Refusal::Arrow(error) => arrow_to_py(py, error),
        }
    }
}

impl From<ArrowError> for Refusal {
    fn from(error: ArrowError) -> Self {
        Refusal::Arrow(error)
    }
}
