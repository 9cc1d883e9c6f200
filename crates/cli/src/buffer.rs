//! The one place that drives the shuffle buffer: settings from the command line in, batches
//! in and out, figures out, errors turned into [`CliError`]s.
//!
//! STAND-IN: until `arrow_shards::ShardBuffer` lands on main, this holds shards in memory in a
//! `Mutex<Vec<Vec<RecordBatch>>>` with the same contract (a write over the memory limit fails,
//! each partition is read once, in write order, after `finish`). It is replaced by the real
//! buffer in the next commits; nothing outside this file changes then.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_memory::sizing::batch_memory_size;

use crate::args::CompressionArg;
use crate::error::CliError;

/// Where the buffer may spill.
#[derive(Debug, Clone)]
pub(crate) enum Spill {
    /// The buffer's default directory.
    Default,
    /// This directory.
    Dir(PathBuf),
    /// Never spill.
    Disabled,
}

/// Buffer settings from the command line.
#[derive(Debug, Clone)]
#[expect(
    dead_code,
    reason = "the stand-in ignores spill settings; the real buffer reads them"
)]
pub(crate) struct BufferSettings {
    /// `--memory-limit`, bytes.
    pub(crate) memory_limit: Option<u64>,
    /// `--spill-dir` / `--no-spill`.
    pub(crate) spill: Spill,
    /// `--compression`.
    pub(crate) compression: CompressionArg,
    /// `--batch-rows`, for reading partitions back.
    pub(crate) read_batch_rows: usize,
}

/// The figures of the buffer the report shows.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BufferFigures {
    /// Most bytes held in memory at once.
    pub(crate) peak_reserved: u64,
    /// Bytes written to spill files.
    pub(crate) bytes_spilled: u64,
    /// Bytes spill files occupied on disk at most.
    pub(crate) bytes_on_disk: u64,
    /// Spill rounds.
    pub(crate) spill_runs: u64,
    /// Spill files created.
    pub(crate) spill_files: u64,
    /// Time writers waited for memory.
    pub(crate) write_wait: Duration,
}

struct State {
    partitions: Vec<Option<Vec<RecordBatch>>>,
    reserved: u64,
    peak: u64,
    finished: bool,
}

/// Creates `dir` if needed and checks a file can be created in it, so a bad `--spill-dir` is
/// reported before any work rather than at the first spill.
fn check_spill_dir(dir: &std::path::Path) -> Result<(), CliError> {
    let fail = |source| CliError::SpillDir {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(".arrow-shards-probe.tmp");
    std::fs::File::create(&probe).map_err(fail)?;
    // Best effort: the probe is empty and hidden.
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// A handle on the shuffle buffer, shared by every thread.
#[derive(Clone)]
pub(crate) struct Buffer {
    state: Arc<Mutex<State>>,
    limit: Option<u64>,
}

impl Buffer {
    /// Builds the buffer for `partitions` partitions of `schema`.
    pub(crate) fn new(
        _schema: SchemaRef,
        partitions: u32,
        settings: &BufferSettings,
    ) -> Result<Self, CliError> {
        if let Spill::Dir(dir) = &settings.spill {
            check_spill_dir(dir)?;
        }
        let state = State {
            partitions: (0..partitions).map(|_| Some(Vec::new())).collect(),
            reserved: 0,
            peak: 0,
            finished: false,
        };
        Ok(Buffer {
            state: Arc::new(Mutex::new(state)),
            limit: settings.memory_limit,
        })
    }

    /// The number of partitions.
    pub(crate) fn partitions(&self) -> u32 {
        self.lock().partitions.len() as u32
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `batch` to `partition`, waiting for memory or spilling as configured.
    pub(crate) fn write(&self, partition: u32, batch: RecordBatch) -> Result<(), CliError> {
        let size = batch_memory_size(&batch) as u64;
        let mut state = self.lock();
        if let Some(limit) = self.limit
            && state.reserved + size > limit
        {
            return Err(CliError::Buffer {
                message: format!(
                    "memory exhausted: the batch needs {size} more bytes with {} of {limit} bytes reserved",
                    state.reserved
                ),
            });
        }
        state.reserved += size;
        state.peak = state.peak.max(state.reserved);
        let Some(Some(shards)) = state.partitions.get_mut(partition as usize) else {
            return Err(CliError::Buffer {
                message: format!("partition {partition} unavailable"),
            });
        };
        shards.push(batch);
        Ok(())
    }

    /// Declares the input complete.
    pub(crate) fn finish(&self) -> Result<(), CliError> {
        self.lock().finished = true;
        Ok(())
    }

    /// Partition `partition`'s batches, in write order; exactly once.
    pub(crate) fn read(
        &self,
        partition: u32,
    ) -> Result<impl Iterator<Item = Result<RecordBatch, ArrowError>> + use<>, CliError> {
        let mut state = self.lock();
        if !state.finished {
            return Err(CliError::Buffer {
                message: "read before finish".into(),
            });
        }
        let shards = state
            .partitions
            .get_mut(partition as usize)
            .and_then(Option::take)
            .ok_or_else(|| CliError::Buffer {
                message: format!("partition {partition} already read"),
            })?;
        let freed: u64 = shards.iter().map(|b| batch_memory_size(b) as u64).sum();
        state.reserved -= freed;
        Ok(shards.into_iter().map(Ok))
    }

    /// The figures so far.
    pub(crate) fn figures(&self) -> BufferFigures {
        BufferFigures {
            peak_reserved: self.lock().peak,
            ..Default::default()
        }
    }

    /// Shuts the buffer down; the final figures.
    pub(crate) fn close(&self) -> Result<BufferFigures, CliError> {
        Ok(self.figures())
    }
}
