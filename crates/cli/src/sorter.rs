//! Sorting one partition by `--sort-by` within a memory budget: sorted runs spilled to disk and
//! merged in order.
//!
//! A [`Sorter`] takes the partition's batches as the buffer hands them over
//! ([`Sorter::push`]) and keeps them until they hold the run budget (the output thread's part
//! of the writers' share of `--memory-limit`, [`crate::writer_memory`]). Then it sorts them —
//! each row's key encoded by arrow-row ([`crate::sort_key`]), the (batch, row) positions sorted
//! by those bytes — and writes them, in that order, as a **run**: an Arrow IPC stream of
//! [`RUN_CHUNK_ROWS`]-row batches in a private directory under the spill directory (removed
//! when the thread ends). [`Sorter::finish`] hands the partition back sorted, in batches of
//! `--batch-rows` rows: straight from memory if it never passed the budget (no run was
//! written), else as a k-way merge of its runs ([`Merge`]), which holds one chunk per run.
//! More than [`MAX_FAN_IN`] runs are first merged in consecutive groups of that many into
//! longer runs, pass after pass, so that a merge never holds more chunks and open files.
//!
//! Memory: the batches taken from the buffer were charged to the pool there and are charged to
//! it here instead, through the writers' reservation ([`WriterMemory::charge`]), and while
//! they are sorted so are their keys' encoding and 16 bytes per row of positions; a run's
//! batches are given back once the run is written, a partition's last ones once it is
//! written. Merging holds one chunk of each run with its keys, charged as they are when the
//! merge starts, and one output batch being gathered, not charged. Without a
//! limit, or with `--no-spill` (whose input is all in memory anyway), a partition is sorted
//! whole in memory. A partition's run files are removed once it is merged, the directory when
//! the output thread ends (also after an error or Ctrl-C; a killed process leaves it, named
//! `arrow-shards-sort-*` under the spill directory).
//!
//! Equal keys keep the order they arrived in (the sort is stable, and a merge takes equal keys
//! from earlier runs first); that order is the buffer's, which is not the same from run to run
//! with more than one input thread.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_row::Rows;
use arrow_schema::{ArrowError, SchemaRef};
use arrow_select::interleave::interleave_record_batch;
use arrow_shards_memory::MemoryReservation;
use arrow_shards_memory::sizing::batch_memory_size;

use crate::error::CliError;
use crate::sort_key::SortKey;
use crate::writer_memory::WriterMemory;

/// Rows per batch of a run file: what the merge holds of each run.
pub(crate) const RUN_CHUNK_ROWS: usize = 1024;

/// The most runs merged at once: more are first merged in groups of this many into longer
/// runs (as many passes as it takes), so a merge holds at most this many chunks and open files
/// (128 chunks of 1,024 lineitem rows: ~40 MB).
pub(crate) const MAX_FAN_IN: usize = 128;

/// Where and how runs are kept, shared by the output threads.
#[derive(Debug, Clone)]
pub(crate) struct SortSettings {
    /// The sort key.
    pub(crate) key: std::sync::Arc<SortKey>,
    /// Bytes a thread may hold before it writes a run; `None` never writes one.
    pub(crate) run_budget: Option<usize>,
    /// The directory under which each thread makes its private run directory.
    pub(crate) spill_root: PathBuf,
    /// Rows per sorted batch handed back.
    pub(crate) batch_rows: usize,
    /// The most runs merged at once ([`MAX_FAN_IN`]).
    pub(crate) max_fan_in: usize,
}

/// One output thread's sorting: its key, its run directory (made at its first run) and its
/// reservation.
pub(crate) struct Sorter<'a> {
    settings: &'a SortSettings,
    key: SortKey,
    memory: &'a WriterMemory,
    reservation: MemoryReservation,
    dir: Option<tempfile::TempDir>,
    /// Files made in `dir` so far (runs and merged runs), for their names.
    files: u64,
    /// Sorted runs written so far, by all partitions of this thread (merged runs not counted).
    pub(crate) runs_written: u64,
}

/// One partition being sorted.
pub(crate) struct PartitionSort {
    schema: SchemaRef,
    pending: Vec<RecordBatch>,
    /// Bytes of `pending` charged.
    charged: usize,
    runs: Vec<PathBuf>,
}

impl<'a> Sorter<'a> {
    /// A thread's sorter.
    pub(crate) fn new(
        settings: &'a SortSettings,
        memory: &'a WriterMemory,
    ) -> Result<Self, CliError> {
        Ok(Sorter {
            settings,
            key: settings.key.fork()?,
            memory,
            reservation: memory.reservation(),
            dir: None,
            files: 0,
            runs_written: 0,
        })
    }

    /// A new partition to sort.
    pub(crate) fn partition(&self, schema: &SchemaRef) -> PartitionSort {
        PartitionSort {
            schema: SchemaRef::clone(schema),
            pending: Vec::new(),
            charged: 0,
            runs: Vec::new(),
        }
    }

    /// Takes `batch` of `sort`'s partition; writes a run once the pending batches hold the
    /// run budget.
    pub(crate) fn push(
        &mut self,
        sort: &mut PartitionSort,
        batch: RecordBatch,
    ) -> Result<(), CliError> {
        let bytes = batch_memory_size(&batch);
        self.charge(sort, sort.charged + bytes);
        sort.pending.push(batch);
        if self
            .settings
            .run_budget
            .is_some_and(|budget| sort.charged >= budget)
        {
            self.write_run(sort)?;
        }
        Ok(())
    }

    /// The partition's rows in order, in batches of `--batch-rows` rows.
    pub(crate) fn finish(&mut self, mut sort: PartitionSort) -> Result<Sorted, CliError> {
        if sort.runs.is_empty() {
            let pending = std::mem::take(&mut sort.pending);
            let order = self.order(&pending)?;
            // the pending batches stay charged until the partition is written
            return Ok(Sorted::Memory {
                batches: pending,
                order,
                next: 0,
                batch_rows: self.settings.batch_rows,
            });
        }
        if !sort.pending.is_empty() {
            self.write_run(&mut sort)?;
        }
        let fan_in = self.settings.max_fan_in.max(2);
        while sort.runs.len() > fan_in {
            // consecutive groups, each merged into a run in its place: equal keys keep their
            // order
            let mut merged = Vec::with_capacity(sort.runs.len().div_ceil(fan_in));
            for group in sort.runs.chunks(fan_in) {
                let path = self.next_run_path()?;
                let merge = Merge::open(&self.key, group, RUN_CHUNK_ROWS)?;
                let held = merge.held();
                let before = self.reservation.size();
                self.memory
                    .charge(&mut self.reservation, before, before + held);
                let written = write_run_file(&path, &sort.schema, merge);
                self.memory
                    .charge(&mut self.reservation, before + held, before);
                written?;
                merged.push(path);
            }
            sort.runs = merged;
        }
        let merge = Merge::open(&self.key, &sort.runs, self.settings.batch_rows)?;
        // charged until `release`, as at the start: one chunk per run, with its keys
        let held = self.reservation.size();
        self.memory
            .charge(&mut self.reservation, held, held + merge.held());
        Ok(Sorted::Merge(Box::new(merge)))
    }

    /// Gives back what a finished partition held (call once its sorted batches are written).
    pub(crate) fn release(&mut self) {
        let held = self.reservation.size();
        self.memory.charge(&mut self.reservation, held, 0);
    }

    /// Sorts the pending batches and writes them as a run file; their memory is given back.
    fn write_run(&mut self, sort: &mut PartitionSort) -> Result<(), CliError> {
        let pending = std::mem::take(&mut sort.pending);
        let order = self.order(&pending)?;
        let path = self.next_run_path()?;
        let refs: Vec<&RecordBatch> = pending.iter().collect();
        let chunks = order
            .chunks(RUN_CHUNK_ROWS)
            .map(|chunk| interleave_record_batch(&refs, chunk).map_err(sort_error));
        write_run_file(&path, &sort.schema, chunks)?;
        drop(refs);
        self.runs_written += 1;
        sort.runs.push(path);
        let positions = order.len() * size_of::<(usize, usize)>();
        drop((pending, order));
        self.charge(sort, 0);
        let held = self.reservation.size();
        self.memory
            .charge(&mut self.reservation, held, held.saturating_sub(positions));
        Ok(())
    }

    /// The path of a new run file in this thread's run directory (made the first time).
    fn next_run_path(&mut self) -> Result<PathBuf, CliError> {
        let dir = match &self.dir {
            Some(dir) => dir.path().to_owned(),
            None => {
                let root = &self.settings.spill_root;
                let dir = tempfile::Builder::new()
                    .prefix("arrow-shards-sort-")
                    .tempdir_in(root)
                    .map_err(|e| CliError::SpillDir {
                        path: root.clone(),
                        source: e,
                    })?;
                let path = dir.path().to_owned();
                self.dir = Some(dir);
                path
            }
        };
        self.files += 1;
        Ok(dir.join(format!("run-{:06}.arrows", self.files - 1)))
    }

    /// The positions `(batch, row)` of `batches`' rows in key order (stable). The keys'
    /// encoding is charged while the positions are sorted; the positions stay charged until
    /// [`release`](Self::release).
    fn order(&mut self, batches: &[RecordBatch]) -> Result<Vec<(usize, usize)>, CliError> {
        let rows = batches
            .iter()
            .map(|b| self.key.rows(b))
            .collect::<Result<Vec<Rows>, ArrowError>>()
            .map_err(sort_error)?;
        let keys: usize = rows.iter().map(Rows::size).sum();
        let positions =
            rows.iter().map(Rows::num_rows).sum::<usize>() * size_of::<(usize, usize)>();
        let held = self.reservation.size();
        self.memory
            .charge(&mut self.reservation, held, held + keys + positions);
        let mut order: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .flat_map(|(b, r)| (0..r.num_rows()).map(move |i| (b, i)))
            .collect();
        order.sort_by(|&(ba, ra), &(bb, rb)| rows[ba].row(ra).cmp(&rows[bb].row(rb)));
        drop(rows);
        let held = self.reservation.size();
        self.memory.charge(&mut self.reservation, held, held - keys);
        Ok(order)
    }

    /// Charges `sort`'s pending batches at `to` bytes.
    fn charge(&mut self, sort: &mut PartitionSort, to: usize) {
        self.memory.charge(&mut self.reservation, sort.charged, to);
        sort.charged = to;
    }
}

/// A sorted partition, batch by batch.
pub(crate) enum Sorted {
    /// Sorted in memory: `order` indexes into `batches`.
    Memory {
        /// The partition's batches as taken.
        batches: Vec<RecordBatch>,
        /// Positions in key order.
        order: Vec<(usize, usize)>,
        /// The next position to hand back.
        next: usize,
        /// Rows per batch handed back.
        batch_rows: usize,
    },
    /// Merged from runs.
    Merge(Box<Merge>),
}

impl Iterator for Merge {
    type Item = Result<RecordBatch, CliError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}

impl Iterator for Sorted {
    type Item = Result<RecordBatch, CliError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Sorted::Memory {
                batches,
                order,
                next,
                batch_rows,
            } => {
                if *next >= order.len() {
                    return None;
                }
                let end = (*next + *batch_rows).min(order.len());
                let refs: Vec<&RecordBatch> = batches.iter().collect();
                let batch = interleave_record_batch(&refs, &order[*next..end]).map_err(sort_error);
                *next = end;
                Some(batch)
            }
            Sorted::Merge(merge) => merge.next(),
        }
    }
}

/// Writes `chunks` (sorted, of [`RUN_CHUNK_ROWS`] rows or fewer) to a run file at `path`.
fn write_run_file(
    path: &Path,
    schema: &SchemaRef,
    chunks: impl IntoIterator<Item = Result<RecordBatch, CliError>>,
) -> Result<(), CliError> {
    let fail = |e: ArrowError| run_error(path, e);
    let file = File::create(path).map_err(|e| run_error(path, e))?;
    let mut writer = StreamWriter::try_new_with_options(
        BufWriter::new(file),
        schema,
        IpcWriteOptions::default(),
    )
    .map_err(fail)?;
    for chunk in chunks {
        writer.write(&chunk?).map_err(fail)?;
    }
    writer.finish().map_err(fail)?;
    Ok(())
}

/// One run being merged: its reader, its current chunk and that chunk's keys.
struct Cursor {
    path: PathBuf,
    reader: StreamReader<BufReader<File>>,
    rows: Rows,
    /// The position of the next row in the current chunk.
    pos: usize,
    /// The index of the current chunk in [`Merge::chunks`].
    slot: usize,
}

/// A k-way merge of sorted runs: a binary min-heap of run cursors ordered by their next row's
/// key, ties by run number (earlier runs hold earlier rows).
pub(crate) struct Merge {
    key_fields: SortKey,
    cursors: Vec<Cursor>,
    /// Cursor indices, a min-heap.
    heap: Vec<usize>,
    /// The chunks the output batch being gathered refers to.
    chunks: Vec<RecordBatch>,
    /// (chunk, row) of the output batch being gathered.
    gathered: Vec<(usize, usize)>,
    batch_rows: usize,
    /// The run files, removed when the merge is dropped.
    paths: Vec<PathBuf>,
}

impl Drop for Merge {
    fn drop(&mut self) {
        for path in &self.paths {
            // Best effort: the run directory goes with the thread's sorter anyway.
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Merge {
    fn open(key: &SortKey, runs: &[PathBuf], batch_rows: usize) -> Result<Self, CliError> {
        let mut merge = Merge {
            key_fields: key.fork()?,
            cursors: Vec::with_capacity(runs.len()),
            heap: Vec::with_capacity(runs.len()),
            chunks: Vec::new(),
            gathered: Vec::with_capacity(batch_rows),
            batch_rows,
            paths: runs.to_vec(),
        };
        for path in runs {
            let file = File::open(path).map_err(|e| run_error(path, e))?;
            let mut reader = StreamReader::try_new(BufReader::new(file), None)
                .map_err(|e| run_error(path, e))?;
            // a run has at least one row
            let Some(chunk) = reader.next().transpose().map_err(|e| run_error(path, e))? else {
                continue;
            };
            let rows = merge.key_fields.rows(&chunk).map_err(sort_error)?;
            merge.chunks.push(chunk);
            merge.cursors.push(Cursor {
                path: path.clone(),
                reader,
                rows,
                pos: 0,
                slot: merge.chunks.len() - 1,
            });
        }
        merge.heap = (0..merge.cursors.len()).collect();
        for i in (0..merge.heap.len() / 2).rev() {
            merge.sift_down(i);
        }
        Ok(merge)
    }

    /// Bytes of the chunks the cursors are in and of their keys.
    fn held(&self) -> usize {
        let chunks: usize = self.chunks.iter().map(batch_memory_size).sum();
        chunks + self.cursors.iter().map(|c| c.rows.size()).sum::<usize>()
    }

    /// The next output batch, `None` once every run is exhausted.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, CliError> {
        while self.gathered.len() < self.batch_rows {
            let Some(&top) = self.heap.first() else { break };
            let cursor = &mut self.cursors[top];
            self.gathered.push((cursor.slot, cursor.pos));
            cursor.pos += 1;
            if cursor.pos == cursor.rows.num_rows() {
                let next = cursor.reader.next().transpose();
                match next.map_err(|e| run_error(&cursor.path, e))? {
                    Some(chunk) => {
                        cursor.rows = self.key_fields.rows(&chunk).map_err(sort_error)?;
                        cursor.pos = 0;
                        self.chunks.push(chunk);
                        cursor.slot = self.chunks.len() - 1;
                    }
                    None => {
                        let last = self.heap.len() - 1;
                        self.heap.swap(0, last);
                        self.heap.pop();
                    }
                }
            }
            self.sift_down(0);
        }
        if self.gathered.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&RecordBatch> = self.chunks.iter().collect();
        let batch = interleave_record_batch(&refs, &self.gathered).map_err(sort_error)?;
        self.gathered.clear();
        // keep only the chunks the cursors are in
        let mut kept = Vec::with_capacity(self.heap.len());
        for &c in &self.heap {
            let cursor = &mut self.cursors[c];
            kept.push(self.chunks[cursor.slot].clone());
            cursor.slot = kept.len() - 1;
        }
        self.chunks = kept;
        Ok(Some(batch))
    }

    /// Whether cursor `a`'s next row comes before cursor `b`'s.
    fn before(&self, a: usize, b: usize) -> bool {
        let (ca, cb) = (&self.cursors[a], &self.cursors[b]);
        match ca.rows.row(ca.pos).cmp(&cb.rows.row(cb.pos)) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => a < b,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.heap.len() && self.before(self.heap[l], self.heap[least]) {
                least = l;
            }
            if r < self.heap.len() && self.before(self.heap[r], self.heap[least]) {
                least = r;
            }
            if least == i {
                return;
            }
            self.heap.swap(i, least);
            i = least;
        }
    }
}

/// An error writing or reading the run file `path`.
fn run_error(path: &Path, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> CliError {
    let source = e.into();
    if crate::error::is_disk_full(source.as_ref()) {
        CliError::DiskFull {
            path: path.to_owned(),
        }
    } else {
        CliError::SortRun {
            path: path.to_owned(),
            source,
        }
    }
}

fn sort_error(e: ArrowError) -> CliError {
    CliError::Internal(format!("sorting a partition: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::Int64Array;
    use arrow_shards_memory::{BoundedPool, MemoryPool};

    use super::*;
    use crate::sort_key::parse_sort_column;

    /// 20 batches of 100 rows: `k` a fixed pseudo-random sequence with repeats, `seq` the
    /// row's place in the input.
    fn batches() -> Vec<RecordBatch> {
        let mut x: u64 = 7;
        (0..20)
            .map(|b| {
                let values = Int64Array::from_iter_values((0..100).map(|_| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    (x >> 33) as i64 % 500
                }));
                let seq = Int64Array::from_iter_values(b * 100..(b + 1) * 100);
                RecordBatch::try_from_iter([
                    ("k", Arc::new(values) as _),
                    ("seq", Arc::new(seq) as _),
                ])
                .unwrap()
            })
            .collect()
    }

    /// `(k, seq)` of every row.
    fn pairs(batches: impl IntoIterator<Item = RecordBatch>) -> Vec<(i64, i64)> {
        batches
            .into_iter()
            .flat_map(|b| {
                let column = |i: usize| {
                    let a = b.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
                    a.values().to_vec()
                };
                column(0).into_iter().zip(column(1)).collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn runs_are_merged_in_order_and_memory_given_back() {
        let input = batches();
        let key = SortKey::new(&input[0].schema(), &[parse_sort_column("k").unwrap()]).unwrap();
        let spill = tempfile::tempdir().unwrap();
        for budget in [None, Some(5_000), Some(1)] {
            let settings = SortSettings {
                key: Arc::new(key.fork().unwrap()),
                run_budget: budget,
                spill_root: spill.path().to_owned(),
                batch_rows: 300,
                max_fan_in: 3,
            };
            let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(1 << 30));
            let memory = WriterMemory::new(&pool, 1 << 20);
            let mut sorter = Sorter::new(&settings, &memory).unwrap();
            let mut sort = sorter.partition(&input[0].schema());
            for batch in &input {
                sorter.push(&mut sort, batch.clone()).unwrap();
            }
            if budget.is_none() {
                assert!(pool.reserved() > 0, "pending batches are charged");
            }
            let got = pairs(sorter.finish(sort).unwrap().map(Result::unwrap));
            // equal keys in input order: sorted by (k, seq)
            let mut expected = pairs(input.iter().cloned());
            expected.sort_unstable();
            assert_eq!(got, expected, "budget {budget:?}");
            let runs = sorter.runs_written;
            match budget {
                None => assert_eq!(runs, 0),
                // 20 runs merged 3 at a time: several passes
                Some(1) => assert_eq!(runs, 20, "one run per batch"),
                Some(_) => assert!((2..20).contains(&runs), "{runs}"),
            }
            sorter.release();
            assert_eq!(pool.reserved(), 0);
            drop(sorter);
            assert_eq!(
                std::fs::read_dir(spill.path()).unwrap().count(),
                0,
                "run directory removed"
            );
        }
    }

    #[test]
    fn an_empty_partition_sorts_to_nothing() {
        let input = batches();
        let key = SortKey::new(&input[0].schema(), &[parse_sort_column("k").unwrap()]).unwrap();
        let settings = SortSettings {
            key: Arc::new(key),
            run_budget: Some(1),
            spill_root: std::env::temp_dir(),
            batch_rows: 300,
            max_fan_in: MAX_FAN_IN,
        };
        let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(1 << 30));
        let memory = WriterMemory::new(&pool, 1 << 20);
        let mut sorter = Sorter::new(&settings, &memory).unwrap();
        let sort = sorter.partition(&input[0].schema());
        assert!(sorter.finish(sort).unwrap().next().is_none());
    }
}
