//! Rust errors as Python exceptions.
//!
//! The exception classes are Python classes (`python/arrow_shards/_errors.py`), so that they can
//! also derive from the built-in exception a Python caller expects (`ValueError`, `IndexError`)
//! and carry documented attributes. This module picks the class for each Rust error kind, keeps
//! the Rust message (they name the object and the limit), and sets the attributes: the refused
//! data for a write (`batch`, `unwritten`, `partition_ids`), the partition, and the numbers of
//! the error.

use arrow_array::{Array, RecordBatch, UInt32Array};
use arrow_schema::ArrowError;
use arrow_shards::{ConfigError, Error, SpillError};
use arrow_shards_merge::MergeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

use crate::convert::{array_to_py, batch_to_py, batches_to_table};

/// The Python module that defines the exception classes.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Makes an exception of the class `class` of `arrow_shards._errors` with `message` and
/// `attributes`. A failure to make it (the module missing) is returned as the error instead.
pub(crate) fn raise(
    py: Python<'_>,
    class: &str,
    message: String,
    attributes: Vec<(&'static str, Bound<'_, PyAny>)>,
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let module =
            ERRORS.get_or_try_init(py, || py.import("arrow_shards._errors").map(Bound::unbind))?;
        let value = module.bind(py).getattr(class)?.call1((message,))?;
        for (name, attribute) in attributes {
            value.setattr(name, attribute)?;
        }
        Ok(PyErr::from_value(value))
    })();
    made.unwrap_or_else(|e| e)
}

/// The class for a buffer error.
fn class_of(error: &Error) -> &'static str {
    match error {
        Error::PartitionOutOfRange { .. } | Error::PartitionIdOutOfRange { .. } => {
            "PartitionOutOfRangeError"
        }
        Error::PartitionIdsLength { .. } | Error::NullPartitionId { .. } => "PartitionIdsError",
        Error::SchemaMismatch(_) => "SchemaMismatchError",
        Error::Finished => "FinishedError",
        Error::Sealed { .. } => "SealedError",
        Error::MemoryExhausted { .. } => "MemoryExhaustedError",
        Error::Closed => "ClosedError",
        Error::NotComplete { .. } => "NotCompleteError",
        Error::AlreadyRead { .. } => "AlreadyReadError",
        Error::Spill(spill) => spill_class_of(spill),
        Error::Arrow(_) | Error::Internal(_) | Error::AccountingMismatch { .. } => "InternalError",
        _ => "ArrowShardsError",
    }
}

fn spill_class_of(error: &SpillError) -> &'static str {
    match error {
        SpillError::DiskFull { .. } => "DiskFullError",
        SpillError::Corrupt { .. } => "CorruptSpillError",
        _ => "SpillError",
    }
}

/// The attributes that carry an error's numbers.
fn attributes_of<'py>(py: Python<'py>, error: &Error) -> Vec<(&'static str, Bound<'py, PyAny>)> {
    let int = |v: u64| v.into_pyobject(py).map(Bound::into_any).ok();
    let mut out = Vec::new();
    let mut push = |name: &'static str, value: Option<Bound<'py, PyAny>>| {
        if let Some(value) = value {
            out.push((name, value));
        }
    };
    match error {
        Error::PartitionOutOfRange {
            partition,
            num_partitions,
        } => {
            push("partition", int(u64::from(*partition)));
            push("num_partitions", int(u64::from(*num_partitions)));
        }
        Error::PartitionIdOutOfRange {
            row,
            partition,
            num_partitions,
        } => {
            push("row", int(*row as u64));
            push("partition", int(u64::from(*partition)));
            push("num_partitions", int(u64::from(*num_partitions)));
        }
        Error::NullPartitionId { row } => push("row", int(*row as u64)),
        Error::Sealed { partition }
        | Error::NotComplete { partition }
        | Error::AlreadyRead { partition } => push("partition", int(u64::from(*partition))),
        Error::MemoryExhausted {
            needed,
            reserved,
            limit,
        } => {
            push("needed", int(*needed as u64));
            push("reserved", int(*reserved as u64));
            push("limit", int(*limit as u64));
        }
        Error::Spill(spill) => return spill_attributes(py, spill),
        _ => {}
    }
    out
}

fn spill_attributes<'py>(
    py: Python<'py>,
    error: &SpillError,
) -> Vec<(&'static str, Bound<'py, PyAny>)> {
    let mut out = Vec::new();
    let path = |p: &std::path::Path| p.into_pyobject(py).map(Bound::into_any).ok();
    match error {
        SpillError::DiskFull { dir, .. } => out.extend(path(dir).map(|d| ("spill_dir", d))),
        SpillError::Corrupt {
            file,
            offset,
            partition,
            ..
        } => {
            out.extend(path(file).map(|f| ("file", f)));
            out.extend(
                offset
                    .into_pyobject(py)
                    .ok()
                    .map(|o| ("offset", o.into_any())),
            );
            out.extend(
                partition
                    .into_pyobject(py)
                    .ok()
                    .map(|p| ("partition", p.into_any())),
            );
        }
        _ => {}
    }
    out
}

/// A buffer error that carries no data (seal, finish, read, close).
pub(crate) fn error_to_py(py: Python<'_>, error: Error) -> PyErr {
    raise(
        py,
        class_of(&error),
        error.to_string(),
        attributes_of(py, &error),
    )
}

/// A builder error: bad settings are `ConfigError`, a spill directory that cannot be made is a
/// spill error.
pub(crate) fn config_to_py(py: Python<'_>, error: ConfigError) -> PyErr {
    let class = match &error {
        ConfigError::SpillDir(spill) => spill_class_of(spill),
        _ => "ConfigError",
    };
    let attributes = match &error {
        ConfigError::SpillDir(spill) => spill_attributes(py, spill),
        _ => Vec::new(),
    };
    raise(py, class, error.to_string(), attributes)
}

/// A setting the Python layer refuses before the builder sees it.
pub(crate) fn config_error(py: Python<'_>, message: String) -> PyErr {
    raise(py, "ConfigError", message, Vec::new())
}

/// An error a partition reader handed out: a corrupt or unreadable segment (the spill crate's
/// error inside the merge's `ExternalError`), a merge bug, or a buffer error.
pub(crate) fn arrow_to_py(py: Python<'_>, error: ArrowError) -> PyErr {
    if let ArrowError::ExternalError(inner) = &error {
        if let Some(spill) = inner.downcast_ref::<SpillError>() {
            return raise(
                py,
                spill_class_of(spill),
                spill.to_string(),
                spill_attributes(py, spill),
            );
        }
        if let Some(buffer) = inner.downcast_ref::<Error>() {
            return raise(
                py,
                class_of(buffer),
                buffer.to_string(),
                attributes_of(py, buffer),
            );
        }
        if let Some(merge) = inner.downcast_ref::<MergeError>() {
            let int = |v: usize| (v as u64).into_pyobject(py).map(Bound::into_any);
            return match merge {
                MergeError::ReadTask { .. } => {
                    raise(py, "SpillError", merge.to_string(), Vec::new())
                }
                // the read waited `read_stall_timeout` for memory: the pool is exhausted, as
                // when a write's `write_timeout` passes
                MergeError::ReadStalled {
                    bytes,
                    reserved,
                    limit,
                    ..
                } => {
                    let attributes = [
                        ("needed", *bytes),
                        ("reserved", *reserved),
                        ("limit", *limit),
                    ]
                    .into_iter()
                    .filter_map(|(name, v)| int(v).ok().map(|v| (name, v)))
                    .collect();
                    raise(py, "MemoryExhaustedError", merge.to_string(), attributes)
                }
                _ => raise(py, "InternalError", merge.to_string(), Vec::new()),
            };
        }
        // Something else boxed (an I/O error from a reader): say what, with its source chain.
        let mut message = inner.to_string();
        let mut source = inner.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        return raise(py, "ArrowShardsError", message, Vec::new());
    }
    raise(py, "InternalError", error.to_string(), Vec::new())
}

/// Why a write of one call was refused.
pub(crate) enum Reason {
    /// The buffer refused a batch.
    Buffer(Error),
    /// The partition is not a `u32` (negative or huge): the buffer never saw it.
    PartitionOutOfRange { partition: i64, num_partitions: u32 },
    /// A multi-batch scatter write's ids do not match its rows.
    IdsLength { rows: usize, ids: usize },
}

/// A refused write, with everything it did not write.
pub(crate) struct Refused {
    pub(crate) reason: Reason,
    /// The partition the write was for (a scatter write: as the buffer reported it).
    pub(crate) partition: Option<i64>,
    /// The refused batch (`None` when the input had no batch at all).
    pub(crate) batch: Option<RecordBatch>,
    /// The batches after it, not written either.
    pub(crate) rest: Vec<RecordBatch>,
    /// A scatter write: the ids of the refused batch's rows and the rest's, in order.
    pub(crate) ids: Option<UInt32Array>,
    /// Batches and rows of this call the buffer accepted before the refusal.
    pub(crate) written: (usize, usize),
}

impl Refused {
    /// The exception: the Rust message, then what was written before; attributes `batch`,
    /// `unwritten`, `partition_ids`, `partition` and the error's numbers.
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        let (class, mut message, mut attributes) = match &self.reason {
            Reason::Buffer(error) => {
                let message = match self.partition {
                    Some(p) => format!("write to partition {p} refused: {error}"),
                    None => format!("write refused: {error}"),
                };
                (class_of(error), message, attributes_of(py, error))
            }
            Reason::PartitionOutOfRange {
                partition,
                num_partitions,
            } => (
                "PartitionOutOfRangeError",
                format!(
                    "write to partition {partition} refused: partition {partition} is out of \
                     range: the buffer has {num_partitions} partitions"
                ),
                Vec::new(),
            ),
            Reason::IdsLength { rows, ids } => (
                "PartitionIdsError",
                format!(
                    "write refused: the data has {rows} rows but {ids} partition ids were \
                     given: one per row is needed"
                ),
                Vec::new(),
            ),
        };
        let (batches, rows) = self.written;
        if batches > 0 {
            message.push_str(&format!(
                " ({batches} batches, {rows} rows, of this call were written before it; \
                 `unwritten` holds the rest)"
            ));
        }
        attributes.retain(|(name, _)| *name != "partition");
        if let Some(p) = self.partition.and_then(|p| p.into_pyobject(py).ok()) {
            attributes.push(("partition", p.into_any()));
        }
        let schema = self
            .batch
            .as_ref()
            .or(self.rest.first())
            .map(|b| b.schema());
        if let Some(batch) = &self.batch {
            match batch_to_py(py, batch) {
                Ok(b) => attributes.push(("batch", b)),
                Err(e) => return e,
            }
        }
        if let Some(schema) = schema {
            let unwritten: Vec<RecordBatch> = self.batch.into_iter().chain(self.rest).collect();
            match batches_to_table(py, schema, unwritten) {
                Ok(t) => attributes.push(("unwritten", t)),
                Err(e) => return e,
            }
        }
        if let Some(ids) = &self.ids {
            match array_to_py(py, ids.to_data()) {
                Ok(a) => attributes.push(("partition_ids", a)),
                Err(e) => return e,
            }
        }
        raise(py, class, message, attributes)
    }
}
