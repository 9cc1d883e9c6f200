//! `arrow-shards shuffle`: inputs -> partition -> buffer -> read back -> output files.
//!
//! Two phases, each on `--threads` threads inside `std::thread::scope`:
//!
//! 1. **Shuffle in.** Each thread takes the next input batch from the shared [`BatchStream`]
//!    (decoding happens under its mutex, one batch at a time), computes each row's partition
//!    ([`Partitioner`]) and writes the batch with those ids into the shared buffer (the
//!    buffer's scatter write).
//! 2. **Read back.** After `finish`, each thread takes the next partition number from an atomic
//!    counter, reads that partition from the buffer exactly once and, with `--output`, writes it
//!    to the partition's temporary file (with `--verify`, checking its rows on the way).
//!
//! The first error stops both phases (the other threads see a shared flag and stop at their
//! next batch); the output directory's temporary files are then removed on drop.
//!
//! # Locking
//! The only lock is the input stream's mutex; it is held while one batch is decoded and never
//! while partitioning or writing into the buffer (whose own writes may wait for memory).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use arrow_schema::SchemaRef;

use crate::args::ShuffleArgs;
use crate::buffer::{Buffer, BufferSettings, Spill};
use crate::error::CliError;
use crate::hash::{KeyHasher, PARTITION_SEED};
use crate::input::{BatchStream, Inputs};
use crate::output::OutputDir;
use crate::partition::Partitioner;
use crate::progress::Progress;
use crate::summary::{Report, peak_rss, seconds};
use crate::verify::{PartitionCheck, check_row_counts};

/// Rows per input batch at least, whatever `--batch-rows` says (which then sets the size of the
/// batches read back). With 8192-row input batches over 1024 partitions every partition's share
/// of a batch is ~8 rows, and the per-range costs of the scatter write dominate; 65,536-row
/// batches make the shares 8x longer. In flight: one decoded batch and its reordered copy per
/// thread (~15 MB each for lineitem), outside the buffer's limit (docs/benchmarks.md).
const INPUT_BATCH_ROWS: usize = 65_536;

/// Runs a shuffle; the report of a successful run.
pub(crate) fn run(args: &ShuffleArgs) -> Result<Report, CliError> {
    let started = Instant::now();
    let inputs = Inputs::open(&args.inputs)?;
    let hasher = KeyHasher::new(&inputs.schema, &args.key, PARTITION_SEED)?;
    let partitions = args.partitions;
    let output = match &args.output {
        Some(dir) => Some(OutputDir::create(dir, args.format, partitions)?),
        None => None,
    };
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1))
    });
    let settings = BufferSettings {
        memory_limit: args.memory_limit,
        spill: match (&args.spill_dir, args.no_spill) {
            (_, true) => Spill::Disabled,
            (Some(dir), false) => Spill::Dir(dir.clone()),
            (None, false) => Spill::Default,
        },
        compression: args.compression,
        read_batch_rows: args.batch_rows as usize,
        compact_rows: args.compact_rows as usize,
    };
    let buffer = Buffer::new(inputs.schema.clone(), partitions, &settings)?;
    let progress = Progress::new(!args.quiet);
    let stop = AtomicBool::new(false);

    // Phase 1: inputs -> partitions -> buffer.
    progress.start_input(inputs.total_rows());
    // Input batches are partitioned whole, so their rows per partition are what each copy into
    // the buffer moves: larger input batches make those copies longer (see INPUT_BATCH_ROWS).
    let stream = Mutex::new(inputs.batches((args.batch_rows as usize).max(INPUT_BATCH_ROWS)));
    let shuffled = on_threads(threads, &stop, || {
        shuffle_in(
            &stream,
            &buffer,
            Partitioner::new(hasher.clone(), partitions),
            &stop,
            &progress,
        )
    });
    let stream = stream.into_inner().unwrap_or_else(PoisonError::into_inner);
    let shuffled = shuffled?.into_iter().fold(InTimes::default(), InTimes::add);
    buffer.finish()?;
    // Spill files only go away as partitions are read, so the disk is fullest now.
    let on_disk_at_finish = buffer.metrics().bytes_on_disk;
    let read_stats = stream.stats();

    // Phase 2: buffer -> partitions read back -> output files.
    progress.start_output(partitions);
    let next_partition = AtomicU32::new(0);
    let read_back = on_threads(threads, &stop, || {
        let mut check = args
            .verify
            .then(|| PartitionCheck::new(&hasher, partitions));
        let times = read_back(
            &buffer,
            &inputs.schema,
            output.as_ref(),
            check.as_mut(),
            &next_partition,
            &stop,
            &progress,
        )?;
        Ok((times, check))
    })?;
    progress.finish();
    let mut out = OutTimes::default();
    let mut merged: Option<PartitionCheck> = None;
    for (times, check) in read_back {
        out = out.add(times);
        if let Some(check) = check {
            match &mut merged {
                None => merged = Some(check),
                Some(all) => all.merge(check)?,
            }
        }
    }
    if args.verify {
        check_row_counts(read_stats.rows, out.rows)?;
    }
    if let Some(output) = output {
        output.commit()?;
    }
    let metrics = buffer.close()?;

    Ok(Report {
        rows_in: read_stats.rows,
        rows_out: out.rows,
        partitions,
        empty_partitions: out.empty_partitions,
        input_files: inputs.files.len(),
        bytes_in: read_stats.bytes,
        memory_limit: args.memory_limit,
        peak_reserved: metrics.peak_reserved as u64,
        bytes_spilled: metrics.bytes_spilled,
        bytes_on_disk: metrics.bytes_on_disk.max(on_disk_at_finish),
        bytes_written_to_disk: metrics.bytes_written_to_disk,
        spill_runs: metrics.spill_runs,
        spill_files: metrics.spill_files,
        peak_rss: peak_rss(),
        threads,
        output: args.output.as_ref().map(|d| d.display().to_string()),
        verified: args.verify,
        distinct_keys: merged.map(|m| m.distinct_keys() as u64),
        read_input_s: seconds(read_stats.time),
        partition_s: seconds(shuffled.partition),
        write_s: seconds(shuffled.write),
        write_wait_s: seconds(metrics.write_wait),
        read_s: seconds(out.read),
        output_s: seconds(out.output),
        verify_s: seconds(out.verify),
        total_s: seconds(started.elapsed()),
    })
}

/// Runs `work` on `threads` scoped threads; all results, or the first error. An error (or a
/// panic, reported as an error) raises `stop` so the other threads finish early.
fn on_threads<T: Send>(
    threads: u32,
    stop: &AtomicBool,
    work: impl Fn() -> Result<T, CliError> + Sync,
) -> Result<Vec<T>, CliError> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let result = work();
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    result
                })
            })
            .collect();
        let mut results = Vec::with_capacity(handles.len());
        let mut first_error = None;
        for handle in handles {
            match handle.join() {
                Ok(Ok(value)) => results.push(value),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    stop.store(true, Ordering::Relaxed);
                    first_error
                        .get_or_insert(CliError::Internal("a worker thread panicked".into()));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(results),
        }
    })
}

/// Phase-1 time of one thread.
#[derive(Debug, Default, Clone, Copy)]
struct InTimes {
    partition: Duration,
    write: Duration,
}

impl InTimes {
    fn add(self, other: InTimes) -> InTimes {
        InTimes {
            partition: self.partition + other.partition,
            write: self.write + other.write,
        }
    }
}

/// One phase-1 thread: batches from `stream`, shards into `buffer`, until the end or `stop`.
fn shuffle_in(
    stream: &Mutex<BatchStream>,
    buffer: &Buffer,
    mut partitioner: Partitioner,
    stop: &AtomicBool,
    progress: &Progress,
) -> Result<InTimes, CliError> {
    let mut times = InTimes::default();
    while !stop.load(Ordering::Relaxed) {
        let batch = stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_batch()?;
        let Some(batch) = batch else { break };
        let t = Instant::now();
        let rows = batch.num_rows() as u64;
        let ids = partitioner
            .partition_ids(&batch)
            .map_err(|e| CliError::Internal(format!("cannot partition a batch: {e}")))?;
        times.partition += t.elapsed();
        let t = Instant::now();
        buffer.write_partitioned(batch, ids)?;
        times.write += t.elapsed();
        progress.advance(rows);
        if progress.is_shown() {
            progress.spilled(buffer.metrics().bytes_spilled);
        }
    }
    Ok(times)
}

/// Phase-2 figures of one thread.
#[derive(Debug, Default, Clone, Copy)]
struct OutTimes {
    rows: u64,
    empty_partitions: u32,
    read: Duration,
    output: Duration,
    verify: Duration,
}

impl OutTimes {
    fn add(self, o: OutTimes) -> OutTimes {
        OutTimes {
            rows: self.rows + o.rows,
            empty_partitions: self.empty_partitions + o.empty_partitions,
            read: self.read + o.read,
            output: self.output + o.output,
            verify: self.verify + o.verify,
        }
    }
}

/// One phase-2 thread: partitions by number from `next`, each read once and written out.
fn read_back(
    buffer: &Buffer,
    schema: &SchemaRef,
    output: Option<&OutputDir>,
    mut check: Option<&mut PartitionCheck>,
    next: &AtomicU32,
    stop: &AtomicBool,
    progress: &Progress,
) -> Result<OutTimes, CliError> {
    let mut times = OutTimes::default();
    let partitions = buffer.partitions();
    while !stop.load(Ordering::Relaxed) {
        let partition = next.fetch_add(1, Ordering::Relaxed);
        if partition >= partitions {
            break;
        }
        let t = Instant::now();
        let mut writer = output.map(|o| o.writer(partition, schema)).transpose()?;
        times.output += t.elapsed();
        let t = Instant::now();
        let mut batches = buffer.read(partition)?;
        times.read += t.elapsed();
        let mut rows = 0u64;
        loop {
            let t = Instant::now();
            let batch = batches.next();
            times.read += t.elapsed();
            let Some(batch) = batch else { break };
            let batch = batch.map_err(|e| CliError::Buffer {
                message: format!("reading partition {partition}: {e}"),
                source: Some(Box::new(e)),
            })?;
            rows += batch.num_rows() as u64;
            if let Some(check) = check.as_deref_mut() {
                let t = Instant::now();
                check.check(partition, &batch)?;
                times.verify += t.elapsed();
            }
            if let Some(writer) = writer.as_mut() {
                let t = Instant::now();
                writer.write(&batch)?;
                times.output += t.elapsed();
            }
        }
        if let Some(writer) = writer {
            let t = Instant::now();
            writer.finish()?;
            times.output += t.elapsed();
        }
        times.rows += rows;
        times.empty_partitions += u32::from(rows == 0);
        progress.advance(1);
    }
    Ok(times)
}
