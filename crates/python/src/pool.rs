//! `MemoryPool`: one memory budget shared by several buffers (several shuffles in one process).

use std::sync::Arc;

use arrow_shards::{BoundedPool, MemoryPool, UnboundedPool};
use pyo3::prelude::*;

use crate::options::size;

/// A memory budget that several `ShardBuffer`s draw from (pass it as `memory_pool=`).
///
/// While the *pool* is above its spill threshold, a spill takes the largest partition across
/// all its buffers (an idle buffer holding more makes room for a busy one). `MemoryPool()` has no limit and only counts; `MemoryPool("1GiB")` or
/// `MemoryPool(1 << 30)` caps the bytes all its buffers hold together.
#[pyclass(module = "arrow_shards", name = "MemoryPool", frozen)]
pub(crate) struct PyMemoryPool {
    pub(crate) pool: Arc<dyn MemoryPool>,
}

#[pymethods]
impl PyMemoryPool {
    #[new]
    #[pyo3(signature = (limit = None))]
    fn new(limit: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let pool: Arc<dyn MemoryPool> = match limit {
            Some(limit) => Arc::new(BoundedPool::new(size("limit", limit)?)),
            None => Arc::new(UnboundedPool::new()),
        };
        Ok(Self { pool })
    }

    /// The pool's limit in bytes, or `None`.
    #[getter]
    fn limit(&self) -> Option<usize> {
        self.pool.limit()
    }

    /// Bytes reserved in the pool now, by all its buffers.
    #[getter]
    fn reserved(&self) -> usize {
        self.pool.reserved()
    }

    /// The most bytes ever reserved in the pool at once.
    #[getter]
    fn peak(&self) -> usize {
        self.pool.peak()
    }

    fn __repr__(&self) -> String {
        match self.pool.limit() {
            Some(limit) => format!(
                "MemoryPool(limit={limit}, reserved={})",
                self.pool.reserved()
            ),
            None => format!("MemoryPool(limit=None, reserved={})", self.pool.reserved()),
        }
    }
}
