//! `arrow_shards._native`: the extension module behind the Python package `arrow_shards`.
//!
//! The package gives Python (pyarrow, polars, pandas) the Rust shuffle buffer
//! ([`arrow_shards::ShardBuffer`]). The data flow, in the order a batch meets it:
//! 1. `convert`: a Python object exporting the Arrow PyCapsule interface (`__arrow_c_array__`
//!    or `__arrow_c_stream__`) becomes Rust `RecordBatch`es, zero-copy.
//! 2. `buffer`: `arrow_shards.ShardBuffer`, whose constructor's settings are checked by
//!    `options`, writes them with the GIL released (writers may wait for memory).
//! 3. Reads come back as pyarrow objects, exported the same way: a `pyarrow.Table`, or a
//!    `pyarrow.RecordBatchReader` over `reader`'s iterator that takes one batch at a time.
//! 4. `dask`: the per-byte steps of `arrow_shards.dask`'s P2P runs (the send side's split by
//!    worker, the ordered read of an output partition), private functions with the GIL
//!    released.
//! 5. Refusals and failures are Python exceptions (`errors`) whose classes mirror the Rust
//!    error kinds; a refused write's exception hands the data back.
//!
//! The Python side (`python/arrow_shards/`) re-exports these classes, defines the exception
//! classes, and ships the type stubs. Tests are pytest (`tests/`); see `docs/python.md`.

mod bench;
mod buffer;
mod convert;
mod dask;
mod errors;
mod metrics;
mod options;
mod pool;
mod reader;

use pyo3::prelude::*;

/// The native part of `arrow_shards`; import `arrow_shards` instead.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<buffer::PyShardBuffer>()?;
    m.add_class::<reader::PartitionBatches>()?;
    m.add_class::<pool::PyMemoryPool>()?;
    m.add(
        "DEFAULT_READ_BATCH_ROWS",
        arrow_shards::DEFAULT_READ_BATCH_ROWS,
    )?;
    m.add(
        "DEFAULT_SPILL_THRESHOLD",
        arrow_shards::DEFAULT_SPILL_THRESHOLD,
    )?;
    m.add("DEFAULT_SPILL_TARGET", arrow_shards::DEFAULT_SPILL_TARGET)?;
    m.add(
        "DEFAULT_READ_STALL_TIMEOUT",
        arrow_shards::DEFAULT_READ_STALL_TIMEOUT.as_secs_f64(),
    )?;
    m.add(
        "DEFAULT_MAX_SPILL_ROUND_BYTES",
        arrow_shards::DEFAULT_MAX_SPILL_ROUND_BYTES,
    )?;
    m.add(
        "DEFAULT_SPILL_SEGMENT_BYTES",
        arrow_shards::DEFAULT_SPILL_SEGMENT_BYTES,
    )?;
    m.add(
        "DEFAULT_COMPACT_TARGET_ROWS",
        arrow_shards::DEFAULT_COMPACT_TARGET_ROWS,
    )?;
    m.add(
        "DEFAULT_COMPACT_TARGET_BYTES",
        arrow_shards::DEFAULT_COMPACT_TARGET_BYTES,
    )?;
    m.add(
        "DEFAULT_SPILL_FILE_BYTES",
        arrow_shards_spill::DEFAULT_MAX_FILE_BYTES,
    )?;
    m.add_function(wrap_pyfunction!(dask::_dask_split, m)?)?;
    m.add_function(wrap_pyfunction!(dask::_dask_order, m)?)?;
    m.add_function(wrap_pyfunction!(dask::_dask_receive, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_bench_rust_write, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_bench_rust_write_partitioned, m)?)?;
    Ok(())
}
