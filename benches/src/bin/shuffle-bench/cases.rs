//! The timed cases: the buffer in three memory settings, and the eager-disk baseline.
//!
//! Every case writes the same shards (a clone of each: the input stays in memory across runs)
//! from `--producers` threads, the shards or chunks dealt to them in turn (one thread: in
//! input order), then reads every partition once and sums its `l_orderkey` column, a minimal
//! consumer that also checks every row came back.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_shards::ShardBuffer;
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::data::{Input, key_sum};

/// What one run of a case measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Run {
    /// Writing every shard, then `finish` (eager disk: then ending every stream).
    pub(crate) write_secs: f64,
    /// Reading every partition.
    pub(crate) read_secs: f64,
    /// `close` (eager disk: removing the files).
    pub(crate) close_secs: f64,
    /// In-memory bytes the buffer spilled.
    pub(crate) bytes_spilled: u64,
    /// Bytes written to files.
    pub(crate) disk_bytes: u64,
    /// Files created.
    pub(crate) files: u64,
    /// The buffer's peak reservation.
    pub(crate) peak_reserved: u64,
    /// Time writers waited for memory.
    pub(crate) write_wait_secs: f64,
    /// Time the spiller spent encoding and writing (in its own thread, overlapping writes).
    pub(crate) spill_secs: f64,
    /// Peak resident bytes of the process during this run.
    pub(crate) peak_rss: u64,
    /// Time threads waited for the buffer's state lock (`Metrics::lock_wait`).
    #[serde(default)]
    pub(crate) lock_wait_secs: f64,
}

impl Run {
    /// A buffer run's figures: its times and its final metrics.
    fn of(
        metrics: &arrow_shards::Metrics,
        write_secs: f64,
        read_secs: f64,
        close_secs: f64,
    ) -> Self {
        Run {
            write_secs,
            read_secs,
            close_secs,
            bytes_spilled: metrics.bytes_spilled,
            disk_bytes: metrics.bytes_written_to_disk,
            files: metrics.spill_files,
            peak_reserved: metrics.peak_reserved as u64,
            write_wait_secs: metrics.write_wait.as_secs_f64(),
            spill_secs: metrics.spill_time.as_secs_f64(),
            peak_rss: 0,
            lock_wait_secs: metrics.lock_wait.as_secs_f64(),
        }
    }

    pub(crate) fn total_secs(&self) -> f64 {
        self.write_secs + self.read_secs + self.close_secs
    }
}

/// How the buffer's readers hand batches out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ReadMode {
    /// Coalesced to 8192 rows (the default `with_read_batch_rows`).
    Coalesced,
    /// `with_read_batch_rows(0)`: batches as written.
    PassThrough,
    /// Every partition subscribed before the first write (`ShardBuffer::subscribe`, one tokio
    /// task each), two producer threads writing; default read batch rows.
    Streaming,
}

/// One run of the buffer: memory only if `limit` is `None`, else spilling under `spill_root`;
/// `producers` threads write.
pub(crate) fn run_buffer(
    input: &Input,
    limit: Option<usize>,
    read: ReadMode,
    spill_root: &Path,
    producers: usize,
) -> Result<Run> {
    let mut builder = ShardBuffer::builder(input.schema.clone(), input.partitions);
    if let Some(limit) = limit {
        builder = builder.with_memory_limit(limit).with_spill_dir(spill_root);
    }
    if read == ReadMode::PassThrough {
        builder = builder.with_read_batch_rows(0);
    }
    let buffer = builder.build()?;

    let started = Instant::now();
    write_from(&buffer, input, producers)?;
    buffer.finish()?;
    let write_secs = started.elapsed().as_secs_f64();

    let (tally, read_secs) = timed(|| {
        let mut tally = Tally::default();
        for partition in 0..input.partitions {
            for batch in buffer.read(partition)? {
                tally.add(&batch?);
            }
        }
        Ok(tally)
    })?;
    let (metrics, close_secs) = timed(|| Ok(buffer.close()?))?;
    tally.check(input)?;
    Ok(Run::of(&metrics, write_secs, read_secs, close_secs))
}

/// One run of the buffer with every partition streamed while two producers write (the
/// input's chunks or shards split between them, alternately): memory only if `limit` is
/// `None`. `write_secs` is until `finish`; `read_secs` until the last reader ends after it.
pub(crate) fn run_streaming(input: &Input, limit: Option<usize>, spill_root: &Path) -> Result<Run> {
    use futures::StreamExt;

    let mut builder = ShardBuffer::builder(input.schema.clone(), input.partitions);
    if let Some(limit) = limit {
        builder = builder.with_memory_limit(limit).with_spill_dir(spill_root);
    }
    let buffer = builder.build()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let started = Instant::now();
    let readers = (0..input.partitions)
        .map(|p| {
            let mut stream = buffer.subscribe(p)?;
            Ok(runtime.spawn(async move {
                let mut tally = Tally::default();
                while let Some(batch) = stream.next().await {
                    tally.add(&batch?);
                }
                Ok::<_, arrow_schema::ArrowError>(tally)
            }))
        })
        .collect::<Result<Vec<_>>>()?;
    write_from(&buffer, input, 2)?;
    buffer.finish()?;
    let write_secs = started.elapsed().as_secs_f64();
    let (tally, read_secs) = timed(|| {
        let mut all = Tally::default();
        for reader in readers {
            let tally = runtime.block_on(reader)??;
            all.rows += tally.rows;
            all.keys += tally.keys;
        }
        Ok(all)
    })?;
    let (metrics, close_secs) = timed(|| Ok(buffer.close()?))?;
    tally.check(input)?;
    Ok(Run::of(&metrics, write_secs, read_secs, close_secs))
}

/// Writes every shard and chunk of `input` from `producers` threads, dealt to them in turn,
/// each through its own handle (a producer: its copies take no lock the others wait for).
fn write_from(buffer: &ShardBuffer, input: &Input, producers: usize) -> Result<()> {
    let shards: Vec<_> = input.shards().collect();
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..producers)
            .map(|w| {
                let shards = &shards;
                let buffer = buffer.clone();
                s.spawn(move || -> Result<()> {
                    for (partition, shard) in shards.iter().skip(w).step_by(producers) {
                        buffer.write_blocking(*partition, (*shard).clone())?;
                    }
                    for (chunk, ids) in input.whole.iter().skip(w).step_by(producers) {
                        buffer.write_partitioned_blocking(chunk.clone(), ids)?;
                    }
                    Ok(())
                })
            })
            .collect();
        writers
            .into_iter()
            .try_for_each(|w| w.join().map_err(|_| "a producer panicked")?)
    })
}

/// The peer's way of doing the scatter write (`RepartitionExec`): each producer gathers each
/// chunk's rows per partition with arrow's `take` and pushes them into its own
/// `BatchCoalescer` per partition (8,192-row batches), keeping every completed batch in
/// memory. `write_secs` is until every coalescer is finished; there is no read or close.
pub(crate) fn run_take_coalesce(input: &Input, producers: usize) -> Result<Run> {
    use arrow_array::UInt32Array;
    use arrow_select::coalesce::BatchCoalescer;
    use arrow_select::take::take_record_batch;

    if input.whole.is_empty() {
        return Err("the take + coalesce case needs --scatter".into());
    }
    let parts = input.partitions as usize;
    let started = Instant::now();
    let outputs = std::thread::scope(|s| {
        let workers: Vec<_> = (0..producers)
            .map(|w| {
                s.spawn(move || -> Result<Vec<RecordBatch>> {
                    let mut coalescers: Vec<BatchCoalescer> = (0..parts)
                        .map(|_| BatchCoalescer::new(input.schema.clone(), 8192))
                        .collect();
                    let mut indices: Vec<Vec<u32>> = vec![Vec::new(); parts];
                    let mut done = Vec::new();
                    for (chunk, ids) in input.whole.iter().skip(w).step_by(producers) {
                        for (row, &p) in ids.iter().enumerate() {
                            indices[p as usize].push(row as u32);
                        }
                        for (p, rows) in indices.iter_mut().enumerate() {
                            if rows.is_empty() {
                                continue;
                            }
                            let picked = UInt32Array::from(std::mem::take(rows));
                            let piece = take_record_batch(chunk, &picked)?;
                            coalescers[p].push_batch(piece)?;
                            while let Some(batch) = coalescers[p].next_completed_batch() {
                                done.push(batch);
                            }
                        }
                    }
                    for coalescer in &mut coalescers {
                        coalescer.finish_buffered_batch()?;
                        while let Some(batch) = coalescer.next_completed_batch() {
                            done.push(batch);
                        }
                    }
                    Ok(done)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "a producer panicked")?)
            .collect::<Result<Vec<_>>>()
    })?;
    let write_secs = started.elapsed().as_secs_f64();
    let mut all = Tally::default();
    outputs.iter().flatten().for_each(|batch| all.add(batch));
    all.check(input)?;
    Ok(Run {
        write_secs,
        ..Run::default()
    })
}

/// The eager-disk baseline, as Dask's disk buffer does it: every shard is appended to its
/// partition's file as soon as it arrives (one Arrow IPC stream file per partition, its
/// `StreamWriter` kept open, a 64 KiB write buffer flushed after every shard), every stream is
/// ended, then every file is read back with a `StreamReader`, batches as written.
///
/// Kept-open writers are kinder than Dask, which reopens the file in append mode per step and
/// repeats the schema per shard; this baseline is the stronger opponent.
pub(crate) fn run_eager_disk(input: &Input, spill_root: &Path) -> Result<Run> {
    let dir = tempfile::Builder::new()
        .prefix("eager-disk-")
        .tempdir_in(spill_root)?;
    let path_of = |p: u32| -> PathBuf { dir.path().join(format!("{p}.arrows")) };
    let mut writers: Vec<Option<StreamWriter<BufWriter<File>>>> =
        (0..input.partitions).map(|_| None).collect();

    let started = Instant::now();
    for (partition, shard) in input.shards() {
        let writer = match &mut writers[*partition as usize] {
            Some(writer) => writer,
            slot @ None => {
                let file = File::create(path_of(*partition))?;
                let out = BufWriter::with_capacity(64 << 10, file);
                slot.insert(StreamWriter::try_new(out, &input.schema)?)
            }
        };
        writer.write(shard)?;
        writer.flush()?;
    }
    let mut files = 0;
    for writer in writers.iter_mut().flatten() {
        writer.finish()?;
        files += 1;
    }
    drop(writers); // closes every file
    let write_secs = started.elapsed().as_secs_f64();

    let mut disk_bytes = 0;
    for p in 0..input.partitions {
        if let Ok(meta) = std::fs::metadata(path_of(p)) {
            disk_bytes += meta.len();
        }
    }

    let (tally, read_secs) = timed(|| {
        let mut tally = Tally::default();
        for p in 0..input.partitions {
            let file = match File::open(path_of(p)) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            for batch in StreamReader::try_new(BufReader::with_capacity(64 << 10, file), None)? {
                tally.add(&batch?);
            }
        }
        Ok(tally)
    })?;
    let ((), close_secs) = timed(|| Ok(dir.close()?))?;
    tally.check(input)?;
    Ok(Run {
        write_secs,
        read_secs,
        close_secs,
        disk_bytes,
        files,
        ..Run::default()
    })
}

/// Runs `f` and returns its result with the seconds it took.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let started = Instant::now();
    let value = f()?;
    Ok((value, started.elapsed().as_secs_f64()))
}

/// What a case read back: rows and the sum of their keys, checked against the input.
#[derive(Debug, Default)]
struct Tally {
    rows: u64,
    keys: i128,
}

impl Tally {
    fn add(&mut self, batch: &RecordBatch) {
        self.rows += batch.num_rows() as u64;
        self.keys += key_sum(batch);
    }

    fn check(&self, input: &Input) -> Result<()> {
        if self.rows != input.rows || self.keys != input.key_sum {
            return Err(format!(
                "read back {} rows with key sum {}, wrote {} rows with key sum {}",
                self.rows, self.keys, input.rows, input.key_sum
            )
            .into());
        }
        Ok(())
    }
}
