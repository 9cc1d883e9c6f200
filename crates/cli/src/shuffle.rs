//! `arrow-shards shuffle`: inputs -> partition -> buffer -> read back -> output files.
//!
//! [`run`] goes through its steps in order:
//!
//! 1. [`Job::prepare`]: open the inputs, check the key, create the output directory (removing
//!    a killed run's leftovers), build the buffer; nothing is read yet.
//! 2. [`Job::shuffle_in`]: on `--threads` threads ([`crate::shuffle_in`]), each takes the next
//!    input batch from the shared stream, computes each row's partition and scatters the batch
//!    into the buffer; then the buffer is told the input is complete.
//! 3. [`Job::read_back`]: on `--threads` threads ([`crate::read_back`]), each takes the next
//!    partition number, reads that partition once and writes its temporary output file.
//! 4. [`Job::commit`]: with `--verify` the row counts are compared; the output files get their
//!    final names and the buffer is closed (its spill directory removed).
//!
//! The first error, or a signal ([`crate::interrupt`]), stops every thread at its next batch;
//! [`Job::abandon`] then closes the buffer (removing the spill directory before the process
//! exits) and removes the temporary output files.
//!
//! # Locking
//! The only lock is the input stream's mutex (see [`crate::shuffle_in`]).

use std::sync::atomic::AtomicU32;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use crate::args::ShuffleArgs;
use crate::buffer::{Buffer, BufferSettings, Spill};
use crate::error::CliError;
use crate::hash::{KeyHasher, PARTITION_SEED};
use crate::input::{Inputs, ReadStats};
use crate::interrupt::Interrupt;
use crate::output::OutputDir;
use crate::part_writer::OutputOptions;
use crate::partition::Partitioner;
use crate::progress::Progress;
use crate::read_back::{OutTimes, Sink, read_back};
use crate::shuffle_in::{InTimes, shuffle_in};
use crate::summary::{Report, peak_rss, seconds};
use crate::verify::{PartitionCheck, check_row_counts};
use crate::workers::{Control, on_threads};

/// Rows per input batch at least, whatever `--batch-rows` says (which then sets the size of the
/// batches read back). With 8192-row input batches over 1024 partitions every partition's share
/// of a batch is ~8 rows, and the per-range costs of the scatter write dominate; 65,536-row
/// batches make the shares 8x longer. In flight: one decoded batch and its reordered copy per
/// thread (~14 MB each for lineitem), within the share of `--memory-limit` kept from the buffer
/// for them (`buffer::split_limit`; docs/memory-accounting.md).
const INPUT_BATCH_ROWS: usize = 65_536;

/// Runs a shuffle; the report of a successful run. `options` are the output's.
pub(crate) fn run(
    args: &ShuffleArgs,
    options: OutputOptions,
    interrupt: Interrupt,
) -> Result<Report, CliError> {
    let started = Instant::now();
    let job = Job::prepare(args, options, interrupt)?;
    let shuffled = match job.shuffle_in(args) {
        Ok(shuffled) => shuffled,
        Err(e) => return Err(job.abandon(e)),
    };
    let read_back = match job.read_back(args.verify) {
        Ok(read_back) => read_back,
        Err(e) => return Err(job.abandon(e)),
    };
    let mut report = job.commit(args, shuffled, read_back)?;
    report.total_s = seconds(started.elapsed());
    Ok(report)
}

/// Everything a shuffle works with, made before any data moves.
struct Job {
    inputs: Inputs,
    hasher: KeyHasher,
    output: Option<OutputDir>,
    threads: u32,
    buffer: Buffer,
    control: Control,
}

/// What the input phase measured.
struct ShuffledIn {
    times: InTimes,
    read: ReadStats,
    /// Spill bytes on disk when the input ended (the most: files go as partitions are read).
    on_disk_at_finish: u64,
}

/// What the output phase measured.
struct ReadBack {
    times: OutTimes,
    /// `--verify`'s checks of all threads, merged.
    check: Option<PartitionCheck>,
}

impl Job {
    /// Step 1: inputs opened, key checked, output directory and buffer made.
    fn prepare(
        args: &ShuffleArgs,
        options: OutputOptions,
        interrupt: Interrupt,
    ) -> Result<Self, CliError> {
        let inputs = Inputs::open(&args.inputs)?;
        let hasher = KeyHasher::new(&inputs.schema, &args.key, PARTITION_SEED)?;
        let output = match &args.output {
            Some(dir) => Some(OutputDir::create(dir, options, args.partitions)?),
            None => None,
        };
        let threads = args.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1))
        });
        let buffer = Buffer::new(
            inputs.schema.clone(),
            args.partitions,
            &settings(args, threads),
        )?;
        let control = Control::new(interrupt, Progress::new(!args.quiet));
        Ok(Job {
            inputs,
            hasher,
            output,
            threads,
            buffer,
            control,
        })
    }

    /// Step 2: every input batch partitioned into the buffer, which is then finished.
    fn shuffle_in(&self, args: &ShuffleArgs) -> Result<ShuffledIn, CliError> {
        self.control.progress.start_input(self.inputs.total_rows());
        // Input batches are partitioned whole, so their rows per partition are what each copy
        // into the buffer moves: larger input batches make those copies longer.
        let stream = Mutex::new(
            self.inputs
                .batches((args.batch_rows as usize).max(INPUT_BATCH_ROWS)),
        );
        let times = on_threads(self.threads, &self.control, || {
            let partitioner = Partitioner::new(self.hasher.clone(), self.buffer.partitions());
            shuffle_in(&stream, &self.buffer, partitioner, &self.control)
        })?;
        let read = stream
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .stats();
        self.buffer.finish()?;
        Ok(ShuffledIn {
            times: times.into_iter().fold(InTimes::default(), InTimes::add),
            read,
            on_disk_at_finish: self.buffer.metrics().bytes_on_disk,
        })
    }

    /// Step 3: every partition read back once (and written to its temporary file).
    fn read_back(&self, verify: bool) -> Result<ReadBack, CliError> {
        let partitions = self.buffer.partitions();
        self.control.progress.start_output(partitions);
        let next = AtomicU32::new(0);
        let sink = Sink {
            schema: &self.inputs.schema,
            output: self.output.as_ref(),
            next: &next,
        };
        let results = on_threads(self.threads, &self.control, || {
            let mut check = verify.then(|| PartitionCheck::new(&self.hasher, partitions));
            let times = read_back(&self.buffer, &sink, check.as_mut(), &self.control)?;
            Ok((times, check))
        })?;
        self.control.progress.finish();
        let mut read_back = ReadBack {
            times: OutTimes::default(),
            check: None,
        };
        for (times, check) in results {
            read_back.times = read_back.times.add(times);
            match (&mut read_back.check, check) {
                (Some(all), Some(check)) => all.merge(check)?,
                (all @ None, check) => *all = check,
                (Some(_), None) => {}
            }
        }
        Ok(read_back)
    }

    /// Step 4: counts checked, output committed, buffer closed; the figures.
    fn commit(
        self,
        args: &ShuffleArgs,
        shuffled: ShuffledIn,
        read_back: ReadBack,
    ) -> Result<Report, CliError> {
        let out = read_back.times;
        let checked = args
            .verify
            .then(|| check_row_counts(shuffled.read.rows, out.rows))
            .transpose();
        if let Err(e) = checked {
            return Err(self.abandon(e));
        }
        let metrics = self.buffer.close()?;
        if let Some(output) = self.output {
            output.commit()?;
        }
        Ok(Report {
            rows_in: shuffled.read.rows,
            rows_out: out.rows,
            partitions: self.buffer.partitions(),
            empty_partitions: out.empty_partitions,
            input_files: self.inputs.files.len(),
            bytes_in: shuffled.read.bytes,
            memory_limit: args.memory_limit,
            peak_reserved: metrics.peak_reserved as u64,
            bytes_spilled: metrics.bytes_spilled,
            bytes_on_disk: metrics.bytes_on_disk.max(shuffled.on_disk_at_finish),
            bytes_written_to_disk: metrics.bytes_written_to_disk,
            spill_runs: metrics.spill_runs,
            direct_writes: metrics.direct_writes,
            spill_files: metrics.spill_files,
            peak_rss: peak_rss(),
            threads: self.threads,
            output: args.output.as_ref().map(|d| d.display().to_string()),
            verified: args.verify,
            distinct_keys: read_back.check.map(|m| m.distinct_keys() as u64),
            read_input_s: seconds(shuffled.read.time),
            partition_s: seconds(shuffled.times.partition),
            write_s: seconds(shuffled.times.write),
            write_wait_s: seconds(metrics.write_wait),
            read_s: seconds(out.read),
            output_s: seconds(out.output),
            verify_s: seconds(out.verify),
            total_s: 0.0,
        })
    }

    /// After `error`: the buffer closed (its spill directory removed now, not by a thread the
    /// exit would cut short) and the temporary output files removed; `error` handed back.
    fn abandon(self, error: CliError) -> CliError {
        self.control.progress.finish();
        // The run has failed already; a second failure while cleaning up says nothing new.
        let _ = self.buffer.close();
        drop(self.output);
        error
    }
}

/// The buffer's settings from the command line.
fn settings(args: &ShuffleArgs, threads: u32) -> BufferSettings {
    BufferSettings {
        memory_limit: args.memory_limit,
        spill: match (&args.spill_dir, args.no_spill) {
            (_, true) => Spill::Disabled,
            (Some(dir), false) => Spill::Dir(dir.clone()),
            (None, false) => Spill::Default,
        },
        compression: args.spill_compression,
        read_batch_rows: args.batch_rows as usize,
        compact_rows: args.compact_rows as usize,
        threads,
    }
}
