//! The one place that drives the shuffle buffer ([`ShardBuffer`]): settings from the command
//! line in, batches in and out, figures out, the buffer's errors turned into [`CliError`]s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use arrow_shards::{Compression, Error, Metrics, ShardBuffer, SubscriptionReader};
use arrow_shards_memory::sizing::batch_data_bytes;
use arrow_shards_memory::{BoundedPool, MemoryPool, UnboundedPool};
use arrow_shards_spill::ObjectStoreSpill;

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
    /// `--spill-to`: the object store behind the local directory.
    pub(crate) spill_to: Option<String>,
    /// `--spill-quota`, bytes.
    pub(crate) spill_quota: Option<u64>,
    /// `--spill-compression`.
    pub(crate) compression: CompressionArg,
    /// `--batch-rows`, for reading partitions back.
    pub(crate) read_batch_rows: usize,
    /// `--compact-rows`.
    pub(crate) compact_rows: usize,
    /// `--threads`: how many input batches are in flight at once.
    pub(crate) threads: u32,
}

/// `--memory-limit` is the whole run's budget. Besides the buffer's pool the process holds, per
/// writing thread, the decoded input batch it is writing (~14 MB for a 65,536-row lineitem
/// batch; its slices are views of it) and the allocator's per-thread caches. A scatter write's
/// reordered copy is not among them: the buffer charges it to its pool, and the common
/// in-place path makes none. Measured on SF 1 lineitem at 256 MiB (docs/memory-accounting.md):
/// peak RSS minus the pool's peak is ~80 MiB on one thread and ~100 MiB on two, the same
/// whatever the reserve, so a thread adds ~20 MiB; the rest is fixed (code, the parquet
/// reader, allocator retention) and within the 64 MiB the budget's bound allows besides the
/// limit. So a twelfth of the limit per thread, at most half of it, is kept from the buffer.
const RESERVE_TWELFTHS_PER_THREAD: u64 = 1;

/// The buffer's own limit and the most bytes of one input slice, for a `--memory-limit` of
/// `limit` shared by `threads` writing threads. A slice bounds what a scatter write may have to
/// reorder and charge at once: a 24th of the limit on up to three threads, an eighth shared by
/// more.
pub(crate) fn split_limit(limit: u64, threads: u32) -> (u64, u64) {
    let threads = u64::from(threads.max(1));
    let reserve = (limit / 12 * (RESERVE_TWELFTHS_PER_THREAD * threads)).min(limit / 2);
    let slice = limit / (8 * threads.max(3));
    (limit - reserve, slice.max(1))
}

/// A handle on the shuffle buffer, shared by every thread.
#[derive(Clone)]
pub(crate) struct Buffer {
    inner: ShardBuffer,
    /// The buffer's pool, which the output writers charge their open row groups to as well
    /// ([`crate::read_back`]): one budget for the buffer and the writers.
    pool: Arc<dyn MemoryPool>,
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
        let pool: Arc<dyn MemoryPool> = match settings.memory_limit {
            Some(limit) => {
                let (buffer_limit, _) = split_limit(limit, settings.threads);
                Arc::new(BoundedPool::new(
                    usize::try_from(buffer_limit).unwrap_or(usize::MAX),
                ))
            }
            None => Arc::new(UnboundedPool::new()),
        };
        builder = builder.with_memory_pool(Arc::clone(&pool));
        // Spill settings act only under a limit (the buffer refuses them otherwise).
        if settings.memory_limit.is_some() {
            builder = builder.with_compression(match settings.compression {
                CompressionArg::None => Compression::None,
                CompressionArg::Lz4 => Compression::Lz4,
                CompressionArg::Zstd => Compression::Zstd { level: 1 },
            });
            builder = match &settings.spill {
                Spill::Default => builder,
                Spill::Dir(dir) => builder.with_spill_dir(dir),
                Spill::Disabled => builder.with_spill(false),
            };
            if let Some(url) = &settings.spill_to {
                let store = ObjectStoreSpill::from_url(url).map_err(|e| CliError::Buffer {
                    message: format!("cannot spill to {url}: {e}"),
                    source: Some(Box::new(e)),
                })?;
                builder = builder.with_spill_tiers(settings.spill_quota, store);
            }
            // The output writers' open row groups share the pool and are freed only when cut:
            // a write the pool refuses while the buffer has nothing left to spill goes to disk
            // rather than wait for them (it would wait for ever if they cannot cut).
            builder = builder.with_disk_when_nothing_to_spill(true);
        }
        let inner = builder.build().map_err(|e| CliError::Buffer {
            message: e.to_string(),
            source: Some(Box::new(e)),
        })?;
        Ok(Buffer {
            inner,
            pool,
            partitions,
            settings: settings.clone(),
        })
    }

    /// The number of partitions.
    pub(crate) fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Writes each row of `batch` to the partition `ids` names; waits while the spiller makes
    /// room. Under a limit the batch goes in slices of at most [`split_limit`]'s slice, so
    /// that a reordered copy (charged to the buffer's pool) stays a small part of it.
    pub(crate) fn write_partitioned(
        &self,
        batch: RecordBatch,
        ids: UInt32Array,
    ) -> Result<(), CliError> {
        let rows = batch.num_rows();
        let step = match self.settings.memory_limit {
            Some(limit) if rows > 0 => {
                // the rows' own data: a slice of a decoded batch would count its parent
                let per_row = batch_data_bytes(&batch).div_ceil(rows).max(1);
                let (_, slice) = split_limit(limit, self.settings.threads);
                let most = usize::try_from(slice).unwrap_or(usize::MAX) / per_row;
                most.clamp(1, rows)
            }
            _ => rows.max(1),
        };
        let parts = (0..rows).step_by(step).map(|start| {
            let len = step.min(rows - start);
            if len == rows {
                (batch.clone(), ids.clone())
            } else {
                (batch.slice(start, len), ids.slice(start, len))
            }
        });
        self.inner
            .write_partitioned_all_blocking(parts)
            .map(|_| ())
            .map_err(|stopped| self.error(stopped.refused.error()))
    }

    /// Declares the input complete.
    pub(crate) fn finish(&self) -> Result<(), CliError> {
        self.inner.finish().map_err(|e| self.error(&e))
    }

    /// Partition `partition`'s batches as they become complete, while the input is still
    /// written; exactly once.
    pub(crate) fn subscribe(&self, partition: u32) -> Result<SubscriptionReader, CliError> {
        self.inner
            .subscribe_blocking(partition)
            .map_err(|e| self.error(&e))
    }

    /// The pool of the buffer and the output writers.
    pub(crate) fn pool(&self) -> &Arc<dyn MemoryPool> {
        &self.pool
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

#[cfg(test)]
mod tests {
    use super::split_limit;

    #[test]
    fn a_twelfth_of_the_limit_per_thread_is_kept_from_the_buffer() {
        // 1200 MiB: 1 thread keeps 100 MiB, 2 keep 200, 6 and more keep half
        assert_eq!(split_limit(1200 << 20, 1), (1100 << 20, 50 << 20));
        assert_eq!(split_limit(1200 << 20, 2), (1000 << 20, 50 << 20));
        assert_eq!(split_limit(1200 << 20, 6).0, 600 << 20);
        let (buffer, slice) = split_limit(1200 << 20, 8);
        assert_eq!(buffer, 600 << 20);
        // more than three threads share an eighth of the limit in slices
        assert_eq!(8 * slice, 150 << 20);
        // never a zero slice, never more than the limit
        assert_eq!(split_limit(3, 4), (3, 1));
        assert_eq!(split_limit(0, 0), (0, 1));
    }
}
