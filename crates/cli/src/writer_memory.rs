//! The output writers' share of the run's budget, and of its open files.
//!
//! An output writer encodes a parquet row group in memory before writing it
//! ([`crate::part_writer`]). While the input is read, the output threads ([`crate::read_back`])
//! take each partition's complete batches and append them to its file, so many row groups are
//! open at once: their bytes are charged to the buffer's own pool (one `--memory-limit` covers
//! input in flight, the buffer and the writers). Writers may hold at most [`WRITER_SHARE`] of
//! the pool; beyond it a thread cuts its largest open row group of at least
//! [`MIN_ROW_GROUP_ROWS`] rows (written to the file, its memory freed), and takes no more
//! batches into a row group below that minimum: those stay in the buffer, which spills them as
//! it would without writers (the fallback). A partition's last row group may be smaller.
//!
//! Why a share and not the whole pool: a byte an open row group holds is ~4x cheaper than the
//! buffered Arrow bytes it encodes (snappy lineitem), but the buffer still needs room for every
//! partition's open batch (up to `--compact-rows` rows each) and for the input's scatter
//! writes; half leaves it that.
//!
//! Open files: a partition's file is opened when its first batch is taken. During the input at
//! most [`open_file_budget`] files are open at once (half the process's soft limit on open
//! files); partitions beyond it are written after the input, one at a time per thread.
//!
//! # Locking
//! No locks: the writers' bytes and open files are atomics; reservations are per thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_shards_memory::{MemoryPool, MemoryReservation};

/// The fewest rows of a row group cut early for lack of memory (a partition's last row group,
/// and row groups of `--row-group-rows` below it, excepted): one batch at the buffer's default
/// compaction target. Not 65,536, as first planned: an open row group holds ~130 bytes per
/// lineitem row (each column's dictionary, up to 1 MiB, stays in memory until the row group is
/// cut, beside its compressed pages; measured: 830 MB reserved for 64 open row groups of SF 1
/// without a limit, whose files are 225 MB), so under 256 MiB the writers' ~112 MB hold ~13 K
/// rows per partition at 64 partitions: with a 65,536-row minimum nothing could be cut and the
/// writers stalled after 5% of the input (307 K rows), everything else spilled.
pub(crate) const MIN_ROW_GROUP_ROWS: usize = 8_192;

/// Bytes an open row group holds per row, as measured on SF 1 lineitem (see
/// [`MIN_ROW_GROUP_ROWS`]): what [`WriterMemory::streams`] sizes the switch with.
pub(crate) const OPEN_ROW_BYTES: usize = 130;

/// Numerator and denominator of the pool's share the writers may hold while the input runs.
pub(crate) const WRITER_SHARE: (usize, usize) = (1, 2);

/// What the output threads share to stay within the writers' share.
#[derive(Debug)]
pub(crate) struct WriterMemory {
    pool: Arc<dyn MemoryPool>,
    /// The most bytes writers may hold, `None` without a limit.
    cap: Option<usize>,
    /// Bytes all writers hold (charged to the pool through the threads' reservations).
    held: AtomicUsize,
    /// Rows below which a row group is not cut early.
    min_rows: usize,
    /// Files opened while the input runs, and how many may be.
    files: AtomicUsize,
    file_budget: usize,
    /// What an open writer's codecs hold at least, and what the output threads' cuts take
    /// ([`crate::codec_memory`]): part of [`streams`](Self::streams)' sum.
    codec_per_writer: usize,
    codec_fixed: usize,
}

impl WriterMemory {
    /// The writers' share of `pool`; row groups of at most `row_group_rows` rows.
    pub(crate) fn new(pool: &Arc<dyn MemoryPool>, row_group_rows: usize) -> Self {
        let (share, of) = WRITER_SHARE;
        WriterMemory {
            pool: Arc::clone(pool),
            cap: pool.limit().map(|limit| limit / of * share),
            held: AtomicUsize::new(0),
            min_rows: MIN_ROW_GROUP_ROWS.min(row_group_rows.max(1)),
            files: AtomicUsize::new(0),
            file_budget: open_file_budget(),
            codec_per_writer: 0,
            codec_fixed: 0,
        }
    }

    /// Counts, in [`streams`](Self::streams), `per_writer` bytes of codecs per open writer
    /// and `fixed` bytes the output threads hold for cutting row groups.
    pub(crate) fn with_codec_bytes(self, per_writer: usize, fixed: usize) -> Self {
        WriterMemory {
            codec_per_writer: per_writer,
            codec_fixed: fixed,
            ..self
        }
    }

    /// Writers' memory with a cap and minimum of the test's choosing.
    #[cfg(test)]
    pub(crate) fn with_cap(pool: &Arc<dyn MemoryPool>, cap: usize, min_rows: usize) -> Self {
        WriterMemory {
            cap: Some(cap),
            min_rows,
            ..WriterMemory::new(pool, min_rows)
        }
    }

    /// A thread's reservation, for [`charge`](Self::charge).
    pub(crate) fn reservation(&self) -> MemoryReservation {
        MemoryReservation::new(&self.pool)
    }

    /// A writer's bytes went from `from` to `to`: the difference charged or given back. A
    /// growth is charged even past the limit: it is the encoding of one batch already taken
    /// (taking is refused while the writers are over their share, see [`over`](Self::over)),
    /// and refusing it would lose the batch.
    pub(crate) fn charge(&self, reservation: &mut MemoryReservation, from: usize, to: usize) {
        if to > from {
            reservation.grow(to - from);
            self.held.fetch_add(to - from, Ordering::Relaxed);
        } else if from > to {
            reservation.shrink(from - to);
            self.held.fetch_sub(from - to, Ordering::Relaxed);
        }
    }

    /// Whether the writers hold more than their share.
    pub(crate) fn over(&self) -> bool {
        self.cap
            .is_some_and(|cap| self.held.load(Ordering::Relaxed) > cap)
    }

    /// Whether writing while the input is read pays with `partitions` partitions: always
    /// without a limit; under one only while every partition can hold a row group of the
    /// minimum within the writers' share (`partitions x (MIN_ROW_GROUP_ROWS x OPEN_ROW_BYTES +
    /// its codecs)` plus the threads' charge for cutting: on 2 threads at 256 MiB, 16 columns
    /// of lineitem, 98 partitions with snappy, 33 with zstd level 1 and 25 at level 3 (its
    /// contexts hold 99 KiB per column, and a cut up to 16 workspaces: [`crate::codec_memory`]).
    /// Beyond it the writers could cut nothing and would only
    /// squeeze the buffer (measured at 1024 partitions under 256 MiB: 18.75 s streaming against
    /// 15.71 s writing after the input, more spilled, peak RSS past the limit's bound;
    /// docs/benchmarks.md, "The main job as a pipeline").
    pub(crate) fn streams(&self, partitions: u32) -> bool {
        self.cap.is_none_or(|cap| {
            (partitions as usize)
                .saturating_mul(self.min_rows * OPEN_ROW_BYTES + self.codec_per_writer)
                .saturating_add(self.codec_fixed)
                <= cap
        })
    }

    /// The most bytes writers may hold, `None` without a limit.
    pub(crate) fn cap(&self) -> Option<usize> {
        self.cap
    }

    /// Rows a row group must have to be cut early.
    pub(crate) fn min_rows(&self) -> usize {
        self.min_rows
    }

    /// Claims one of the files that may be open during the input; `false` once all are.
    pub(crate) fn claim_file(&self) -> bool {
        self.files
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.file_budget).then_some(n + 1)
            })
            .is_ok()
    }
}

/// How many output files may be open during the input: half the soft limit on open files
/// (`/proc/self/limits`), leaving the rest to inputs, spill files and the files written after
/// the input; 512 where it cannot be read.
pub(crate) fn open_file_budget() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| soft_open_files(&limits))
        .map_or(512, |soft| soft / 2)
}

/// The soft limit of the "Max open files" line of a `/proc/self/limits` text.
fn soft_open_files(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    match line["Max open files".len()..].split_whitespace().next()? {
        "unlimited" => Some(1 << 20),
        soft => soft.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use arrow_shards_memory::BoundedPool;

    use super::*;

    #[test]
    fn the_soft_limit_is_read_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max processes             63414                63414                processes\n\
                    Max open files            1024                 4096                 files\n";
        assert_eq!(soft_open_files(text), Some(1024));
        assert_eq!(
            soft_open_files("Max open files unlimited unlimited files"),
            Some(1 << 20)
        );
        assert_eq!(soft_open_files("nothing here"), None);
    }

    #[test]
    fn writers_charge_the_pool_and_stop_at_half_of_it() {
        let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(1000));
        let memory = WriterMemory::new(&pool, 1 << 20);
        assert_eq!(memory.min_rows(), MIN_ROW_GROUP_ROWS);
        let mut reservation = memory.reservation();
        memory.charge(&mut reservation, 0, 500);
        assert!(!memory.over());
        memory.charge(&mut reservation, 500, 501);
        assert!(memory.over());
        assert_eq!(pool.reserved(), 501);
        memory.charge(&mut reservation, 501, 100);
        assert!(!memory.over());
        assert_eq!(pool.reserved(), 100);
        drop(reservation);
        assert_eq!(pool.reserved(), 0);
        // small row groups asked for are the minimum
        assert_eq!(WriterMemory::new(&pool, 1000).min_rows(), 1000);
        // the switch: every partition's minimum row group must fit the share
        let share = 10 * MIN_ROW_GROUP_ROWS * OPEN_ROW_BYTES;
        let memory = WriterMemory::with_cap(&pool, share, MIN_ROW_GROUP_ROWS);
        assert!(memory.streams(10));
        assert!(!memory.streams(11));
        // an open writer's codecs and the threads' cuts count too
        let codecs =
            WriterMemory::with_cap(&pool, share, MIN_ROW_GROUP_ROWS).with_codec_bytes(1, 0);
        assert!(!codecs.streams(10));
        let cuts = WriterMemory::with_cap(&pool, share, MIN_ROW_GROUP_ROWS).with_codec_bytes(0, 1);
        assert!(!cuts.streams(10));
        assert!(cuts.streams(9));
        let unlimited: Arc<dyn MemoryPool> = Arc::new(arrow_shards_memory::UnboundedPool::new());
        assert!(WriterMemory::new(&unlimited, 1 << 20).streams(1_000_000));
    }
}
