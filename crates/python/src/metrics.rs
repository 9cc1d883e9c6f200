//! [`Metrics`] and [`PartitionSize`] as Python dicts keyed by the Rust field names. Durations
//! are float seconds; `memory_limit` and `spill_error` may be `None`.

use arrow_shards::{Metrics, PartitionSize};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `metrics()` and `close()`.
pub(crate) fn metrics_dict<'py>(py: Python<'py>, m: &Metrics) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("reserved", m.reserved)?;
    d.set_item("peak_reserved", m.peak_reserved)?;
    d.set_item("pool_reserved", m.pool_reserved)?;
    d.set_item("memory_limit", m.memory_limit)?;
    d.set_item("batches_written", m.batches_written)?;
    d.set_item("rows_written", m.rows_written)?;
    d.set_item("bytes_written", m.bytes_written)?;
    d.set_item("batches_read", m.batches_read)?;
    d.set_item("rows_read", m.rows_read)?;
    d.set_item("partitions_read", m.partitions_read)?;
    d.set_item("write_wait", m.write_wait.as_secs_f64())?;
    d.set_item("lock_wait", m.lock_wait.as_secs_f64())?;
    d.set_item("read_wait", m.read_wait.as_secs_f64())?;
    d.set_item("read_overdrafts", m.read_overdrafts)?;
    d.set_item("rows_streamed", m.rows_streamed)?;
    d.set_item("spills_voided", m.spills_voided)?;
    d.set_item("rows_discarded", m.rows_discarded)?;
    d.set_item("bytes_spilled", m.bytes_spilled)?;
    d.set_item("direct_writes", m.direct_writes)?;
    d.set_item("bytes_needed_to_target", m.bytes_needed_to_target)?;
    d.set_item("bytes_on_disk", m.bytes_on_disk)?;
    d.set_item("bytes_written_to_disk", m.bytes_written_to_disk)?;
    d.set_item("spill_runs", m.spill_runs)?;
    d.set_item("spill_files", m.spill_files)?;
    d.set_item("spill_time", m.spill_time.as_secs_f64())?;
    d.set_item("spill_read_time", m.spill_read_time.as_secs_f64())?;
    d.set_item("overflow_runs", m.overflow_runs)?;
    d.set_item("overflow_bytes_written", m.overflow_bytes_written)?;
    d.set_item("overflow_spill_time", m.overflow_spill_time.as_secs_f64())?;
    d.set_item("spill_error", m.spill_error.as_ref().map(|e| e.to_string()))?;
    Ok(d)
}

/// One entry of `partition_sizes()`.
pub(crate) fn partition_size_dict<'py>(
    py: Python<'py>,
    s: &PartitionSize,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("memory_bytes", s.memory_bytes)?;
    d.set_item("memory_batches", s.memory_batches)?;
    d.set_item("memory_rows", s.memory_rows)?;
    d.set_item("spilled_bytes", s.spilled_bytes)?;
    d.set_item("spilled_rows", s.spilled_rows)?;
    d.set_item("segments", s.segments)?;
    d.set_item("spilling", s.spilling)?;
    Ok(d)
}
