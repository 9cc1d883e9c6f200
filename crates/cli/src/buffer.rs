//! The one place that drives the shuffle buffer ([`ShardBuffer`]): settings from the command
//! line in, batches in and out, figures out, the buffer's errors turned into [`CliError`]s.

use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_shards::{Compression, Error, Metrics, PartitionReader, ShardBuffer};

use crate::args::CompressionArg;
use crate::error::CliError;

/// Where the buffer may spill.
#[derive(Debug, Clone)]
pub(crate) enum Spill {
    /// The buffer's default directory (the system temp directory).
    Default,
    /// Under this directory.
    Dir(PathBuf),
    /// Never spill.
    Disabled,
}

/// Buffer settings from the command line.
#[derive(Debug, Clone)]
pub(crate) struct BufferSettings {
    /// `--memory-limit`, bytes.
    pub(crate) memory_limit: Option<u64>,
    /// `--spill-dir` / `--no-spill`.
    pub(crate) spill: Spill,
    /// `--spill-compression`.
    pub(crate) compression: CompressionArg,
    /// `--batch-rows`, for reading partitions back.
    pub(crate) read_batch_rows: usize,
    /// `--compact-rows`.
    pub(crate) compact_rows: usize,
}

/// A handle on the shuffle buffer, shared by every thread.
#[derive(Clone)]
pub(crate) struct Buffer {
    inner: ShardBuffer,
    partitions: u32,
    settings: BufferSettings,
}

impl Buffer {
    /// Builds the buffer for `partitions` partitions of `schema`.
    pub(crate) fn new(
        schema: SchemaRef,
        partitions: u32,
        settings: &BufferSettings,
    ) -> Result<Self, CliError> {
        let mut builder = ShardBuffer::builder(schema, partitions)
            .with_read_batch_rows(settings.read_batch_rows)
            .with_compact_target_rows(settings.compact_rows);
        if let Spill::Dir(dir) = &settings.spill {
            // checked even without a limit: a bad --spill-dir is reported before any work
            check_spill_dir(dir)?;
        }
        // Spill settings act only under a limit (the buffer refuses them otherwise).
        if let Some(limit) = settings.memory_limit {
            builder = builder
                .with_memory_limit(usize::try_from(limit).unwrap_or(usize::MAX))
                .with_compression(match settings.compression {
                    CompressionArg::None => Compression::None,
                    CompressionArg::Lz4 => Compression::Lz4,
                    CompressionArg::Zstd => Compression::Zstd { level: 1 },
                });
            builder = match &settings.spill {
                Spill::Default => builder,
                Spill::Dir(dir) => builder.with_spill_dir(dir),
                Spill::Disabled => builder.with_spill(false),
            };
        }
        let inner = builder.build().map_err(|e| CliError::Buffer {
            message: e.to_string(),
            source: Some(Box::new(e)),
        })?;
        Ok(Buffer {
            inner,
            partitions,
            settings: settings.clone(),
        })
    }

    /// The number of partitions.
    pub(crate) fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Writes each row of `batch` to the partition `ids` names; waits while the spiller makes
    /// room. A scatter write must fit in the memory limit as a whole, so under a limit the
    /// batch goes in slices of at most an eighth of it.
    pub(crate) fn write_partitioned(
        &self,
        batch: RecordBatch,
        ids: &[u32],
    ) -> Result<(), CliError> {
        let rows = batch.num_rows();
        let step = match self.settings.memory_limit {
            Some(limit) if rows > 0 => {
                let per_row = batch.get_array_memory_size().div_ceil(rows).max(1);
                let most = usize::try_from(limit / 8).unwrap_or(usize::MAX) / per_row;
                most.clamp(1, rows)
            }
            _ => rows.max(1),
        };
        let mut start = 0;
        while start < rows {
            let len = step.min(rows - start);
            let part = if len == rows {
                batch.clone()
            } else {
                batch.slice(start, len)
            };
            self.inner
                .write_partitioned_blocking(part, &ids[start..start + len])
                .map_err(|e| self.error(e.error()))?;
            start += len;
        }
        Ok(())
    }

    /// Declares the input complete.
    pub(crate) fn finish(&self) -> Result<(), CliError> {
        self.inner.finish().map_err(|e| self.error(&e))
    }

    /// Partition `partition`'s batches, in write order; exactly once.
    pub(crate) fn read(&self, partition: u32) -> Result<PartitionReader, CliError> {
        self.inner.read(partition).map_err(|e| self.error(&e))
    }

    /// The buffer's figures so far.
    pub(crate) fn metrics(&self) -> Metrics {
        self.inner.metrics()
    }

    /// Shuts the buffer down (removing its spill files); the final figures.
    pub(crate) fn close(&self) -> Result<Metrics, CliError> {
        self.inner.close().map_err(|e| self.error(&e))
    }

    /// The buffer's error, with advice where the command line can help.
    fn error(&self, error: &Error) -> CliError {
        let message = match (error, &self.settings.spill) {
            (Error::MemoryExhausted { .. }, Spill::Disabled) => format!(
                "{error}; with --no-spill the whole input must fit in --memory-limit: raise the \
                 limit or allow spilling"
            ),
            _ => error.to_string(),
        };
        CliError::Buffer {
            message,
            source: Some(Box::new(error.clone())),
        }
    }
}

/// Creates `dir` if needed and checks a file can be created in it, so a bad `--spill-dir` is
/// reported before any work rather than at the first spill.
fn check_spill_dir(dir: &Path) -> Result<(), CliError> {
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
