//! `arrow_shards.ShardBuffer`: the Rust [`ShardBuffer`] behind a Python class.
//!
//! Every method that may wait, do I/O, or take the buffer's state lock runs with the GIL
//! released (`py.detach`): writes (which may wait for memory), reads (which may read spilled
//! segments), seal, finish, metrics, close, and dropping the buffer. The state lock matters too:
//! another thread may free a batch under it whose memory a Python object owns, and pyarrow then
//! takes the GIL to release it; a thread that held the GIL while waiting for that lock would
//! deadlock. Python objects are touched only before (importing the data) and after (building
//! the result or the exception), with the GIL held.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_array::ffi_stream::RecordBatchStreamReader;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_pyarrow::{FromPyArrow, ToPyArrow};
use arrow_schema::{ArrowError, Schema};
use arrow_shards::{ShardBuffer, WriteError, Written};
use arrow_shards_spill::SpillStorage;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::convert::{Data, batches_to_table, import_data, import_ids, pyarrow};
use crate::errors::{Reason, Refused, arrow_to_py, config_to_py, error_to_py, raise};
use crate::metrics::{metrics_dict, partition_size_dict};
use crate::options::Settings;
use crate::pool::PyMemoryPool;
use crate::reader::{Batches, PartitionBatches};

/// A memory-budgeted shuffle buffer of Arrow record batches, each written to one of
/// `num_partitions` output partitions and read back exactly once, in write order.
///
/// Producers (any number of threads) `write` batches to partitions, or `write_partitioned` a
/// whole batch with a partition id per row. When memory runs short the buffer spills its
/// largest partitions to checksummed files under `spill_dir` in the background. After
/// `seal(p)` (or `finish()` for all), a consumer reads each partition once with `read(p)` (a
/// `pyarrow.Table`) or `read_batches(p)` (a streaming `pyarrow.RecordBatchReader`). `close()`
/// (or leaving a `with` block) removes the spill directory and returns the final metrics.
///
/// Writes, reads, waits for memory and close release the GIL, so other Python threads run
/// meanwhile. Data is imported and exported through the Arrow C data interface without copies.
///
/// Settings (keyword-only; `None` means the default):
///
/// - `schema`: a `pyarrow.Schema` or any object with `__arrow_c_schema__`.
/// - `num_partitions`: at least 1.
/// - `memory_limit`: bytes the buffer may hold in memory (int, or a string such as "256MiB" or
///   "1GB"); spilling starts at `spill_threshold` of it. 0 keeps nothing in memory. Default:
///   unlimited (counted, never spilled).
/// - `memory_pool`: a `MemoryPool` shared with other buffers instead of a limit of its own.
/// - `spill`: whether to spill to disk. Without it a write that does not fit waits up to
///   `write_timeout` or fails with `MemoryExhaustedError`. Default: True.
/// - `spill_dir`: the directory under which a private spill directory is made. Default: the
///   system temp dir.
/// - `spill_to`: an object store behind the local spill directory, `"s3://bucket/prefix"`
///   (S3 or an S3-compatible server; credentials and endpoint from the `AWS_*` environment
///   variables as the object_store crate reads them). Spill runs go there when the local
///   directory is full (ENOSPC, or `spill_quota`). Default: none.
/// - `spill_quota`: most bytes of spill files in the local spill directory at once, with
///   `spill_to`; 0 sends every run to the object store. Default: none (as much as the
///   filesystem holds).
/// - `compression`: of spilled data: "none", "lz4", "zstd" (level 1) or "zstd:LEVEL".
///   Default: "none".
/// - `write_timeout`: seconds (or a `timedelta`) a write may wait for memory. Default: none
///   (wait for the spiller with spilling on; fail at once with it off).
/// - `read_stall_timeout`: seconds (or a `timedelta`) a read of a spilled segment may wait for
///   room in the pool with nothing released before it fails with `MemoryExhaustedError`
///   (reads wait for room instead of passing the limit; one reader at a time may overdraw by
///   a segment, so reading always goes on). Default: 60 (`DEFAULT_READ_STALL_TIMEOUT`).
/// - `read_batch_rows`: rows per batch handed out by reads (small batches are coalesced;
///   0: as written). Default: 8192.
/// - `spill_threshold`, `spill_target`: fractions of the limit at which spilling starts and
///   down to which it spills. Default: 0.8 and 0.6.
/// - `max_spill_round_bytes`: most bytes one spill round writes. Default: "64MiB".
/// - `spill_segment_bytes`: most bytes in one spilled segment. Default: "4MiB".
/// - `spill_file_bytes`: size past which a spill run continues in a new file. Default: "1GiB".
/// - `compact_target_rows`, `compact_target_bytes`: batches smaller than both are copied into
///   their partition's open batch, cut at either (0 rows: off). Default: 8192 and "4MiB" (at
///   most an eighth of the memory limit).
/// - `sweep_on_build`: remove the spill leftovers of crashed processes under `spill_dir` (once
///   per process). Default: True.
///
/// Bad settings raise `ConfigError` (a `ValueError`) naming the setting.
#[pyclass(module = "arrow_shards", name = "ShardBuffer", frozen)]
pub(crate) struct PyShardBuffer {
    /// Always `Some` until dropped (taken in `Drop` to drop it without the GIL).
    buffer: Option<ShardBuffer>,
    /// The schema as a `pyarrow.Schema`.
    schema: Py<PyAny>,
    closed: AtomicBool,
    /// The object store of `spill_to`, closed by `close()` after the buffer.
    overflow: Option<Arc<dyn SpillStorage>>,
}

/// A write of several batches that stopped.
enum StreamStop {
    Refused(Box<Refused>),
    /// The input stream itself failed (a producer's error).
    Input {
        error: ArrowError,
        written: (usize, usize),
    },
}

impl StreamStop {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            StreamStop::Refused(refused) => refused.into_py(py),
            StreamStop::Input {
                error,
                written: (batches, rows),
            } => PyValueError::new_err(format!(
                "reading the input failed after {batches} of its batches ({rows} rows) were \
                 written: {error}"
            )),
        }
    }
}

/// The batches left in a stream, up to its end or its first error.
fn drain(stream: &mut RecordBatchStreamReader) -> Vec<RecordBatch> {
    stream.by_ref().map_while(Result::ok).collect()
}

fn refused_write(
    error: WriteError,
    rest: Vec<RecordBatch>,
    ids: Option<UInt32Array>,
    written: (usize, usize),
) -> Refused {
    let partition = Some(i64::from(error.partition()));
    let (error, batch) = error.into_parts();
    Refused {
        reason: Reason::Buffer(error),
        partition,
        batch: Some(batch),
        rest,
        ids,
        written,
    }
}

fn write_stream(
    buffer: &ShardBuffer,
    partition: u32,
    mut stream: RecordBatchStreamReader,
) -> Result<(), StreamStop> {
    // The input's own error ends the batches handed to `write_all_blocking`; it is reported
    // after what came before it was written.
    let mut input_error = None;
    let batches = stream.by_ref().map_while(|item| match item {
        Ok(batch) => Some((partition, batch)),
        Err(error) => {
            input_error = Some(error);
            None
        }
    });
    let result = buffer.write_all_blocking(batches).map_err(|stopped| {
        let written = counts(stopped.written);
        (stopped.refused, written)
    });
    match (result, input_error) {
        (Ok(_), None) => Ok(()),
        (Ok(written), Some(error)) => Err(StreamStop::Input {
            error,
            written: counts(written),
        }),
        (Err((refused, written)), _) => {
            let rest = drain(&mut stream);
            let refused = refused_write(refused, rest, None, written);
            Err(StreamStop::Refused(Box::new(refused)))
        }
    }
}

fn write_partitioned_batches(
    buffer: &ShardBuffer,
    batches: Vec<RecordBatch>,
    ids: &UInt32Array,
) -> Result<(), Box<Refused>> {
    let mut offset = 0;
    let with_ids = batches.into_iter().map(|batch| {
        let rows = batch.num_rows();
        let part = ids.slice(offset, rows);
        offset += rows;
        (batch, part)
    });
    buffer
        .write_partitioned_all_blocking(with_ids)
        .map(|_| ())
        .map_err(|stopped| {
            let stopped = *stopped;
            let written = counts(stopped.written);
            // the refused batch's ids and every later batch's
            let from = usize::try_from(stopped.written.rows).unwrap_or(usize::MAX);
            let unwritten_ids = ids.slice(from, ids.len() - from);
            let rest: Vec<RecordBatch> = stopped.rest.map(|(batch, _)| batch).collect();
            Box::new(refused_write(
                stopped.refused,
                rest,
                Some(unwritten_ids),
                written,
            ))
        })
}

/// `(batches, rows)` as the Python errors report them.
fn counts(written: Written) -> (usize, usize) {
    let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    (count(written.batches), count(written.rows))
}

impl PyShardBuffer {
    fn buffer(&self) -> &ShardBuffer {
        self.buffer
            .as_ref()
            .expect("the buffer is only taken when the object is dropped")
    }

    /// `partition` as the buffer's id, or the error a read or seal of it raises.
    fn partition(&self, py: Python<'_>, partition: i64) -> PyResult<u32> {
        let num_partitions = self.buffer().num_partitions();
        match u32::try_from(partition) {
            Ok(p) if p < num_partitions => Ok(p),
            _ => Err(raise(
                py,
                "PartitionOutOfRangeError",
                format!(
                    "partition {partition} is out of range: the buffer has {num_partitions} \
                     partitions"
                ),
                vec![],
            )),
        }
    }

    /// A write to a partition that is not a `u32`: refused with its data handed back.
    fn refuse_partition(py: Python<'_>, partition: i64, num_partitions: u32, data: Data) -> PyErr {
        let (batch, rest) = match data {
            Data::Batch(batch) => (Some(batch), Vec::new()),
            Data::Stream(mut stream) => {
                let mut all = py.detach(|| drain(&mut stream)).into_iter();
                (all.next(), all.collect())
            }
        };
        Refused {
            reason: Reason::PartitionOutOfRange {
                partition,
                num_partitions,
            },
            partition: Some(partition),
            batch,
            rest,
            ids: None,
            written: (0, 0),
        }
        .into_py(py)
    }
}

#[pymethods]
impl PyShardBuffer {
    #[new]
    #[pyo3(
        signature = (
            schema,
            num_partitions,
            *,
            memory_limit = None,
            memory_pool = None,
            spill = true,
            spill_dir = None,
            spill_to = None,
            spill_quota = None,
            compression = "none",
            write_timeout = None,
            read_stall_timeout = None,
            read_batch_rows = None,
            spill_threshold = None,
            spill_target = None,
            max_spill_round_bytes = None,
            spill_segment_bytes = None,
            spill_file_bytes = None,
            compact_target_rows = None,
            compact_target_bytes = None,
            sweep_on_build = true,
        ),
        text_signature = "(schema, num_partitions, *, memory_limit=None, memory_pool=None, \
            spill=True, spill_dir=None, spill_to=None, spill_quota=None, compression='none', \
            write_timeout=None, read_stall_timeout=60.0, read_batch_rows=8192, \
            spill_threshold=0.8, spill_target=0.6, max_spill_round_bytes='64MiB', spill_segment_bytes='4MiB', \
            spill_file_bytes='1GiB', compact_target_rows=8192, compact_target_bytes='4MiB', \
            sweep_on_build=True)"
    )]
    #[expect(
        clippy::too_many_arguments,
        reason = "the constructor's keyword arguments"
    )]
    fn new(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        num_partitions: i64,
        memory_limit: Option<Bound<'_, PyAny>>,
        memory_pool: Option<PyRef<'_, PyMemoryPool>>,
        spill: bool,
        spill_dir: Option<PathBuf>,
        spill_to: Option<String>,
        spill_quota: Option<Bound<'_, PyAny>>,
        compression: &str,
        write_timeout: Option<Bound<'_, PyAny>>,
        read_stall_timeout: Option<Bound<'_, PyAny>>,
        read_batch_rows: Option<Bound<'_, PyAny>>,
        spill_threshold: Option<f64>,
        spill_target: Option<f64>,
        max_spill_round_bytes: Option<Bound<'_, PyAny>>,
        spill_segment_bytes: Option<Bound<'_, PyAny>>,
        spill_file_bytes: Option<Bound<'_, PyAny>>,
        compact_target_rows: Option<Bound<'_, PyAny>>,
        compact_target_bytes: Option<Bound<'_, PyAny>>,
        sweep_on_build: bool,
    ) -> PyResult<Self> {
        let schema = std::sync::Arc::new(Schema::from_pyarrow_bound(schema)?);
        let settings = Settings {
            memory_limit,
            memory_pool: memory_pool.map(|p| std::sync::Arc::clone(&p.pool)),
            spill,
            spill_dir,
            spill_to,
            spill_quota,
            compression: compression.to_owned(),
            write_timeout,
            read_stall_timeout,
            read_batch_rows,
            spill_threshold,
            spill_target,
            max_spill_round_bytes,
            spill_segment_bytes,
            spill_file_bytes,
            compact_target_rows,
            compact_target_bytes,
            sweep_on_build,
        };
        let (builder, overflow) =
            settings.builder(py, std::sync::Arc::clone(&schema), num_partitions)?;
        // Building may sweep the spill root and starts the spiller thread.
        let buffer = py
            .detach(|| builder.build())
            .map_err(|e| config_to_py(py, e))?;
        let schema = schema.to_pyarrow(py)?.unbind();
        Ok(Self {
            buffer: Some(buffer),
            schema,
            closed: AtomicBool::new(false),
            overflow,
        })
    }

    /// The schema every batch is written and read with, as a `pyarrow.Schema`.
    #[getter]
    fn schema(&self, py: Python<'_>) -> Py<PyAny> {
        self.schema.clone_ref(py)
    }

    /// The number of partitions.
    #[getter]
    fn num_partitions(&self) -> u32 {
        self.buffer().num_partitions()
    }

    /// The private spill directory (made under `spill_dir`), or `None` when nothing can spill
    /// (spilling off, or no memory limit). Removed by `close()`.
    #[getter]
    fn spill_dir(&self) -> Option<PathBuf> {
        self.buffer().spill_dir().map(PathBuf::from)
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// write(partition, data)
    /// --
    ///
    /// Writes `data` to `partition`, waiting (without the GIL) while memory is full.
    ///
    /// `data` is a `pyarrow.RecordBatch`, a `pyarrow.Table` (each of its batches, in order) or
    /// any object with `__arrow_c_array__` or `__arrow_c_stream__` (a polars DataFrame, a
    /// `pyarrow.RecordBatchReader`, ...). Nothing is copied: the buffer keeps the producer's
    /// memory alive until the rows are read, except small batches, which are copied into the
    /// partition's open batch (compaction on write).
    ///
    /// A refused write raises an `ArrowShardsError` subclass whose `batch` is the refused
    /// batch (a `pyarrow.RecordBatch`) and `unwritten` a `pyarrow.Table` of every batch of
    /// this call that was not written (the refused one first); batches before it were written.
    fn write(&self, py: Python<'_>, partition: i64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = import_data(data)?;
        let buffer = self.buffer();
        let num_partitions = buffer.num_partitions();
        let Ok(partition_id) = u32::try_from(partition) else {
            return Err(Self::refuse_partition(py, partition, num_partitions, data));
        };
        match data {
            Data::Batch(batch) => py
                .detach(|| buffer.write_blocking(partition_id, batch))
                .map_err(|e| refused_write(e, Vec::new(), None, (0, 0)).into_py(py)),
            Data::Stream(stream) => py
                .detach(|| write_stream(buffer, partition_id, stream))
                .map_err(|e| e.into_py(py)),
        }
    }

    /// write_partitioned(data, partition_ids)
    /// --
    ///
    /// Writes every row of `data` to the partition `partition_ids` names for it (the scatter
    /// write): one id per row, in row order.
    ///
    /// `data` is anything `write` takes; a stream is read whole first, to check the ids' count.
    /// `partition_ids` is a uint32 pyarrow array (or chunked array), a numpy uint32 array
    /// (zero-copy), or a sequence of ints. Each batch is written all or nothing; a refused
    /// write raises with `batch`, `unwritten` and `partition_ids` (the ids of the unwritten
    /// rows) handed back. Bad ids raise `PartitionIdsError` (count, nulls) or
    /// `PartitionOutOfRangeError`; ids that are not uint32 raise `TypeError`.
    fn write_partitioned(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        partition_ids: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let ids = import_ids(partition_ids)?;
        let data = import_data(data)?;
        let buffer = self.buffer();
        match data {
            Data::Batch(batch) => py
                .detach(|| buffer.write_partitioned_blocking(batch, &ids))
                .map_err(|e| refused_write(e, Vec::new(), Some(ids), (0, 0)).into_py(py)),
            Data::Stream(mut stream) => {
                let batches = py
                    .detach(|| stream.by_ref().collect::<Result<Vec<_>, _>>())
                    .map_err(|error| {
                        StreamStop::Input {
                            error,
                            written: (0, 0),
                        }
                        .into_py(py)
                    })?;
                let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
                if rows != ids.len() {
                    let mut batches = batches.into_iter();
                    return Err(Refused {
                        reason: Reason::IdsLength {
                            rows,
                            ids: ids.len(),
                        },
                        partition: None,
                        batch: batches.next(),
                        rest: batches.collect(),
                        ids: Some(ids),
                        written: (0, 0),
                    }
                    .into_py(py));
                }
                py.detach(|| write_partitioned_batches(buffer, batches, &ids))
                    .map_err(|e| e.into_py(py))
            }
        }
    }

    /// seal(partition)
    /// --
    ///
    /// Accepts no more writes to `partition`; it may then be read while others are still
    /// written. Sealing twice is harmless.
    fn seal(&self, py: Python<'_>, partition: i64) -> PyResult<()> {
        let partition = self.partition(py, partition)?;
        let buffer = self.buffer();
        py.detach(|| buffer.seal(partition))
            .map_err(|e| error_to_py(py, e))
    }

    /// finish()
    /// --
    ///
    /// Accepts no more writes at all; every partition may then be read. Idempotent.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        let buffer = self.buffer();
        py.detach(|| buffer.finish())
            .map_err(|e| error_to_py(py, e))
    }

    /// read(partition)
    /// --
    ///
    /// The whole of `partition` as a `pyarrow.Table`, exactly once, after it is sealed or the
    /// buffer finished: its spilled rows first, then those in memory, each producer's rows in
    /// write order. A partition that got nothing reads as an empty table.
    ///
    /// Raises `NotCompleteError` before the seal, `AlreadyReadError` the second time, and
    /// `CorruptSpillError` (with `partial`, a table of the rows before the damage) if a spilled
    /// segment fails its checksum.
    fn read<'py>(&self, py: Python<'py>, partition: i64) -> PyResult<Bound<'py, PyAny>> {
        let partition = self.partition(py, partition)?;
        let buffer = self.buffer();
        let schema = std::sync::Arc::clone(buffer.schema());
        let outcome = py.detach(|| {
            let reader = buffer.read(partition).map_err(|e| (Err(e), Vec::new()))?;
            let mut batches = Vec::new();
            for item in reader {
                match item {
                    Ok(batch) => batches.push(batch),
                    Err(e) => return Err((Ok(e), batches)),
                }
            }
            Ok(batches)
        });
        match outcome {
            Ok(batches) => batches_to_table(py, schema, batches),
            Err((Err(error), _)) => Err(error_to_py(py, error)),
            Err((Ok(error), before)) => {
                let error = arrow_to_py(py, error);
                let partial = batches_to_table(py, schema, before)?;
                error.value(py).setattr(intern!(py, "partial"), partial)?;
                Err(error)
            }
        }
    }

    /// read_batches(partition)
    /// --
    ///
    /// `partition` as a streaming `pyarrow.RecordBatchReader`, exactly once (as `read`): each
    /// batch is taken from the buffer (reading spilled segments without the GIL) when the
    /// reader asks for it, and its memory goes back to the buffer's budget as it is handed
    /// over. Errors while reading (`CorruptSpillError`) are raised by the reader.
    fn read_batches<'py>(&self, py: Python<'py>, partition: i64) -> PyResult<Bound<'py, PyAny>> {
        let partition = self.partition(py, partition)?;
        let buffer = self.buffer();
        let reader = py
            .detach(|| buffer.read(partition))
            .map_err(|e| error_to_py(py, e))?;
        self.batch_reader(py, Box::new(reader))
    }

    /// subscribe(partition, *, min_rows=0)
    /// --
    ///
    /// `partition` as a `pyarrow.RecordBatchReader` that yields its batches while producers
    /// still write them (the streaming read), exactly once: claiming it makes a later `read`,
    /// `read_batches` or `subscribe` of it raise `AlreadyReadError`. Each batch comes as soon
    /// as it is complete (compacted or spilled); the reader waits, without the GIL, while
    /// nothing is there, and ends once the partition is sealed or the buffer finished and
    /// every row is handed over. Each producer's rows come in write order. Closing the buffer
    /// ends a waiting reader with `ClosedError`; dropping the reader before its end discards
    /// the partition's rows, those written afterwards too (counted in `metrics()`'s
    /// `rows_discarded`). With `min_rows` above 0, the partition's open batch is also handed
    /// over once it holds that many rows (for partitions that reach the compaction target late
    /// or never, e.g. 1,024 of them); 0 (the default) waits for complete batches.
    #[pyo3(signature = (partition, *, min_rows = 0))]
    fn subscribe<'py>(
        &self,
        py: Python<'py>,
        partition: i64,
        min_rows: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let partition = self.partition(py, partition)?;
        let min_rows = usize::try_from(min_rows).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "min_rows must be 0 or more, got {min_rows}"
            ))
        })?;
        let buffer = self.buffer();
        let reader = py
            .detach(|| buffer.subscribe_blocking_with_min_rows(partition, min_rows))
            .map_err(|e| error_to_py(py, e))?;
        self.batch_reader(py, Box::new(reader))
    }

    /// metrics()
    /// --
    ///
    /// A snapshot of the buffer's counters: a dict keyed by the Rust `Metrics` field names
    /// (bytes and counts as ints, `write_wait`, `lock_wait`, `read_wait`, `spill_time` and
    /// `spill_read_time` as float seconds, `memory_limit` and `spill_error` possibly `None`).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let buffer = self.buffer();
        let metrics = py.detach(|| buffer.metrics());
        metrics_dict(py, &metrics)
    }

    /// partition_sizes()
    /// --
    ///
    /// Per partition, its bytes, batches and rows in memory and on disk: a list of dicts keyed
    /// by the Rust `PartitionSize` field names (a scan of all partitions: for diagnostics).
    fn partition_sizes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let buffer = self.buffer();
        let sizes = py.detach(|| buffer.partition_sizes());
        let dicts = sizes
            .iter()
            .map(|s| partition_size_dict(py, s))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, dicts)
    }

    /// wait_for_spills()
    /// --
    ///
    /// Waits (without the GIL) until every spill round asked for so far is on disk or has
    /// failed: a barrier for tests, and for callers that want memory back before going on.
    /// Returns at once when nothing can spill.
    fn wait_for_spills(&self, py: Python<'_>) {
        let buffer = self.buffer();
        py.detach(|| buffer.wait_for_spills());
    }

    /// close()
    /// --
    ///
    /// Shuts the buffer: stops the spiller, refuses everything afterwards (`ClosedError`;
    /// writers waiting for memory are woken and refused, their data handed back), drops what
    /// nobody read, removes the spill directory, and returns the final `metrics()`. Raises the
    /// spill error if spilling failed, after the same clean-up. Closing twice is harmless.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let buffer = self.buffer();
        self.closed.store(true, Ordering::Relaxed);
        let metrics = py
            .detach(|| buffer.close())
            .map_err(|e| error_to_py(py, e))?;
        if let Some(overflow) = &self.overflow {
            // after the buffer, which dropped its segments: deletes what is left of the prefix
            py.detach(|| overflow.close())
                .map_err(|e| error_to_py(py, arrow_shards::Error::Spill(Arc::new(e))))?;
        }
        metrics_dict(py, &metrics)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Closes the buffer (an error from `close` is raised, chained to the block's exception).
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let buffer = self.buffer();
        let limit = match buffer.memory_pool().limit() {
            Some(limit) => limit.to_string(),
            None => "None".to_owned(),
        };
        format!(
            "ShardBuffer(num_partitions={}, memory_limit={limit}, spill_dir={}{})",
            buffer.num_partitions(),
            match buffer.spill_dir() {
                Some(dir) => format!("{:?}", dir.display().to_string()),
                None => "None".to_owned(),
            },
            if self.closed() { ", closed" } else { "" }
        )
    }
}

impl Drop for PyShardBuffer {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            // The last handle stops the spiller and may free batches a Python object owns:
            // never with the GIL held (see the module docs). Unread data is freed; the spill
            // directory goes with the last reader.
            Python::attach(|py| py.detach(|| drop(buffer)));
        }
    }
}

impl PyShardBuffer {
    /// `batches` as a `pyarrow.RecordBatchReader` of the buffer's schema.
    fn batch_reader<'py>(&self, py: Python<'py>, batches: Batches) -> PyResult<Bound<'py, PyAny>> {
        let batches = Bound::new(py, PartitionBatches::new(batches))?;
        pyarrow(py)?
            .getattr(intern!(py, "RecordBatchReader"))?
            .call_method1(intern!(py, "from_batches"), (self.schema.bind(py), batches))
    }
}
