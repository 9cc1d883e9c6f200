//! `read_batches` and `subscribe`: one partition as an iterator of `pyarrow.RecordBatch`, which
//! `ShardBuffer` wraps in a `pyarrow.RecordBatchReader`.
//!
//! Each `__next__` takes the next batch from the Rust [`PartitionReader`] (or, for a
//! subscription, [`SubscriptionReader`], which may wait for producers) without the GIL (it may
//! read and verify a spilled segment), so memory goes back to the pool as batches are consumed.
//! An error (a corrupt segment) is raised as its `arrow_shards` exception; pyarrow passes a
//! Python iterator's exception through unchanged. Nothing follows an error.
//!
//! # Locking
//! The reader is taken out of its mutex for the call, so the mutex is never held while the GIL
//! is released (a second thread calling `__next__` then gets a `RuntimeError` instead of
//! waiting with the GIL held).

use std::sync::{Mutex, PoisonError};

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;
#[cfg(doc)]
use arrow_shards::{PartitionReader, SubscriptionReader};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::convert::batch_to_py;
use crate::errors::arrow_to_py;

/// A partition's batches: a `PartitionReader` or a `SubscriptionReader`.
pub(crate) type Batches = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

enum Slot {
    Ready(Batches),
    InUse,
    Done,
}

/// The batches of one partition, in write order; made by `ShardBuffer.read_batches`.
#[pyclass(module = "arrow_shards", name = "PartitionBatches", frozen)]
pub(crate) struct PartitionBatches {
    slot: Mutex<Slot>,
}

impl PartitionBatches {
    pub(crate) fn new(reader: Batches) -> Self {
        Self {
            slot: Mutex::new(Slot::Ready(reader)),
        }
    }

    fn take(&self) -> Slot {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        match *slot {
            Slot::Ready(_) => std::mem::replace(&mut *slot, Slot::InUse),
            Slot::InUse => Slot::InUse,
            Slot::Done => Slot::Done,
        }
    }

    fn put(&self, slot: Slot) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = slot;
    }
}

#[pymethods]
impl PartitionBatches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut reader = match self.take() {
            Slot::Ready(reader) => reader,
            Slot::InUse => {
                return Err(PyRuntimeError::new_err(
                    "this partition's reader is in use by another thread",
                ));
            }
            Slot::Done => return Ok(None),
        };
        let next = py.detach(|| reader.next());
        match next {
            Some(Ok(batch)) => {
                self.put(Slot::Ready(reader));
                batch_to_py(py, &batch).map(Some)
            }
            Some(Err(error)) => {
                self.put(Slot::Done);
                py.detach(|| drop(reader));
                Err(arrow_to_py(py, error))
            }
            None => {
                self.put(Slot::Done);
                py.detach(|| drop(reader));
                Ok(None)
            }
        }
    }
}

impl Drop for PartitionBatches {
    fn drop(&mut self) {
        let slot = std::mem::replace(
            self.slot.get_mut().unwrap_or_else(PoisonError::into_inner),
            Slot::Done,
        );
        if let Slot::Ready(reader) = slot {
            // Dropping may free batches whose memory a Python object owns (pyarrow then takes
            // the GIL itself) and releases the pool, which wakes writers: never with the GIL.
            Python::attach(|py| py.detach(|| drop(reader)));
        }
    }
}
