//! The constructor's keyword arguments, checked and turned into a [`ShardBufferBuilder`].
//!
//! Names are the builder's setters without `with_`; defaults are the builder's (the `DEFAULT_*`
//! constants, exported to Python under the same names). Sizes are an `int` of bytes or a string
//! such as `"256MiB"` or `"1GB"` (bytesize: `KiB`, `MiB`, `GiB` are powers of 1024, `KB`, `MB`,
//! `GB` powers of 1000), as on the command line.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;
use arrow_shards::{Compression, MemoryPool, ShardBuffer, ShardBufferBuilder};
use arrow_shards_spill::{ObjectStoreSpill, SpillStorage};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};

use crate::errors::config_error;

/// Every setting of the constructor, as Python gave it; `None` is the builder's default.
pub(crate) struct Settings<'py> {
    pub(crate) memory_limit: Option<Bound<'py, PyAny>>,
    pub(crate) memory_pool: Option<Arc<dyn MemoryPool>>,
    pub(crate) spill: bool,
    pub(crate) spill_dir: Option<PathBuf>,
    pub(crate) spill_to: Option<String>,
    pub(crate) spill_quota: Option<Bound<'py, PyAny>>,
    pub(crate) compression: String,
    pub(crate) write_timeout: Option<Bound<'py, PyAny>>,
    pub(crate) read_stall_timeout: Option<Bound<'py, PyAny>>,
    pub(crate) read_batch_rows: Option<Bound<'py, PyAny>>,
    pub(crate) spill_threshold: Option<f64>,
    pub(crate) spill_target: Option<f64>,
    pub(crate) max_spill_round_bytes: Option<Bound<'py, PyAny>>,
    pub(crate) spill_segment_bytes: Option<Bound<'py, PyAny>>,
    pub(crate) spill_file_bytes: Option<Bound<'py, PyAny>>,
    pub(crate) compact_target_rows: Option<Bound<'py, PyAny>>,
    pub(crate) compact_target_bytes: Option<Bound<'py, PyAny>>,
    pub(crate) sweep_on_build: bool,
}

impl Settings<'_> {
    /// The builder for `schema` and `num_partitions` with every setting applied, and the
    /// object store of `spill_to` (the buffer's owner closes it after the buffer); a bad value
    /// is a `ConfigError` (a `ValueError`) naming the setting, a value of the wrong type a
    /// `TypeError`.
    pub(crate) fn builder(
        &self,
        py: Python<'_>,
        schema: SchemaRef,
        num_partitions: i64,
    ) -> PyResult<(ShardBufferBuilder, Option<Arc<dyn SpillStorage>>)> {
        let num_partitions = u32::try_from(num_partitions).map_err(|_| {
            config_error(
                py,
                format!("num_partitions = {num_partitions} is invalid: must be in [1, 2**32)"),
            )
        })?;
        let mut builder = ShardBuffer::builder(schema, num_partitions);
        if let Some(limit) = &self.memory_limit {
            builder = builder.with_memory_limit(size("memory_limit", limit)?);
        }
        if let Some(pool) = &self.memory_pool {
            builder = builder.with_memory_pool(Arc::clone(pool));
        }
        match (self.spill, &self.spill_dir) {
            (true, Some(dir)) => builder = builder.with_spill_dir(dir.clone()),
            (true, None) => {}
            (false, Some(dir)) => {
                return Err(config_error(
                    py,
                    format!(
                        "spill_dir = {} is invalid: spilling is off (spill=False)",
                        dir.display()
                    ),
                ));
            }
            (false, None) => builder = builder.with_spill(false),
        }
        let mut overflow: Option<Arc<dyn SpillStorage>> = None;
        match (&self.spill_to, &self.spill_quota) {
            (Some(url), quota) if self.spill => {
                let quota = match quota {
                    Some(bytes) => Some(size("spill_quota", bytes)? as u64),
                    None => None,
                };
                let store = ObjectStoreSpill::from_url(url)
                    .map_err(|e| config_error(py, format!("spill_to = {url:?} is invalid: {e}")))?;
                builder = builder.with_spill_tiers(quota, Arc::clone(&store) as _);
                overflow = Some(store);
            }
            (Some(url), _) => {
                return Err(config_error(
                    py,
                    format!("spill_to = {url:?} is invalid: spilling is off (spill=False)"),
                ));
            }
            (None, Some(quota)) => {
                return Err(config_error(
                    py,
                    format!(
                        "spill_quota = {} is invalid: without spill_to",
                        quota.repr()?
                    ),
                ));
            }
            (None, None) => {}
        }
        builder = builder.with_compression(compression(py, &self.compression)?);
        if let Some(timeout) = &self.write_timeout {
            builder = builder.with_write_timeout(duration("write_timeout", timeout)?);
        }
        if let Some(timeout) = &self.read_stall_timeout {
            builder =
                builder.with_read_stall_timeout(Some(duration("read_stall_timeout", timeout)?));
        }
        if let Some(rows) = &self.read_batch_rows {
            builder = builder.with_read_batch_rows(count("read_batch_rows", rows)?);
        }
        if let Some(fraction) = self.spill_threshold {
            builder = builder.with_spill_threshold(fraction);
        }
        if let Some(fraction) = self.spill_target {
            builder = builder.with_spill_target(fraction);
        }
        if let Some(bytes) = &self.max_spill_round_bytes {
            builder = builder.with_max_spill_round_bytes(size("max_spill_round_bytes", bytes)?);
        }
        if let Some(bytes) = &self.spill_segment_bytes {
            builder = builder.with_spill_segment_bytes(size("spill_segment_bytes", bytes)?);
        }
        if let Some(bytes) = &self.spill_file_bytes {
            builder = builder.with_spill_file_bytes(size("spill_file_bytes", bytes)? as u64);
        }
        if let Some(rows) = &self.compact_target_rows {
            builder = builder.with_compact_target_rows(count("compact_target_rows", rows)?);
        }
        if let Some(bytes) = &self.compact_target_bytes {
            builder = builder.with_compact_target_bytes(size("compact_target_bytes", bytes)?);
        }
        Ok((builder.with_sweep_on_build(self.sweep_on_build), overflow))
    }
}

/// A size: an int of bytes, or a string like `"256MiB"`.
pub(crate) fn size(setting: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    let py = value.py();
    if value.is_instance_of::<PyString>() {
        let text = value.extract::<String>()?;
        let shown = value.repr()?;
        let trimmed = text.trim();
        let parsed = trimmed
            .parse::<bytesize::ByteSize>()
            .map_err(|e| format!("not a size ({e}); expected e.g. 256MiB, 1GB or 4096"))
            .and_then(|s| {
                usize::try_from(s.as_u64()).map_err(|_| "too large for this machine".to_owned())
            });
        return match (trimmed.is_empty(), parsed) {
            (false, Ok(bytes)) => Ok(bytes),
            (true, _) => Err(config_error(
                py,
                format!("{setting} = {shown} is invalid: empty; expected e.g. 256MiB or 1GB"),
            )),
            (false, Err(why)) => Err(config_error(
                py,
                format!("{setting} = {shown} is invalid: {why}"),
            )),
        };
    }
    non_negative(
        setting,
        value,
        "a number of bytes (or a string like \"256MiB\")",
    )
}

/// A non-negative int (rows).
fn count(setting: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    non_negative(setting, value, "a number of rows")
}

fn non_negative(setting: &str, value: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{setting} must be {what}, got {}",
            value.get_type().name()?
        )));
    }
    value.extract::<usize>().map_err(|_| {
        config_error(
            value.py(),
            format!("{setting} = {value} is invalid: must be at least 0 and fit in 64 bits"),
        )
    })
}

/// The longest timeout, in seconds (about 31 years): the waits add a timeout to the current
/// `Instant`, which a much longer one would overflow (a panic, not an error).
const MAX_TIMEOUT_SECS: f64 = 1e9;

/// A duration: seconds as an int or float, or a `datetime.timedelta`, in
/// `[0, MAX_TIMEOUT_SECS]` (NaN, negative, infinite or longer: a `ConfigError`).
fn duration(setting: &str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let py = value.py();
    let number = value.is_instance_of::<PyFloat>()
        || (value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>());
    let timedelta = py.import("datetime")?.getattr("timedelta")?;
    let seconds: Option<f64> = if number {
        // an int too large for a float: out of range like an infinite one
        value.extract::<f64>().ok()
    } else if value.is_instance(&timedelta)? {
        Some(value.call_method0("total_seconds")?.extract::<f64>()?)
    } else {
        return Err(PyTypeError::new_err(format!(
            "{setting} must be seconds (int or float) or a datetime.timedelta, got {}",
            value.get_type().name()?
        )));
    };
    match seconds {
        Some(s) if (0.0..=MAX_TIMEOUT_SECS).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => {
            let shown = match seconds {
                Some(s) => s.to_string(),
                None => value.str()?.to_string(),
            };
            Err(config_error(
                py,
                format!(
                    "{setting} = {shown} is invalid: must be a finite number of seconds >= 0 \
                     (at most 1e9)"
                ),
            ))
        }
    }
}

/// `"none"`, `"lz4"`, `"zstd"` (level 1, as the CLI) or `"zstd:LEVEL"`.
fn compression(py: Python<'_>, text: &str) -> PyResult<Compression> {
    let lower = text.trim().to_ascii_lowercase();
    let parsed = match lower.as_str() {
        "none" => Some(Compression::None),
        "lz4" => Some(Compression::Lz4),
        "zstd" => Some(Compression::Zstd { level: 1 }),
        other => other
            .strip_prefix("zstd:")
            .and_then(|level| level.trim().parse::<i32>().ok())
            .filter(|level| (-7..=22).contains(level))
            .map(|level| Compression::Zstd { level }),
    };
    parsed.ok_or_else(|| {
        let shown = PyString::new(py, text)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| format!("{text:?}"));
        config_error(
            py,
            format!(
                "compression = {shown} is invalid: expected 'none', 'lz4', 'zstd' or \
                 'zstd:LEVEL' (LEVEL in -7..=22)"
            ),
        )
    })
}
