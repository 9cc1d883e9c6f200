//! `arrow-shards shuffle`: inputs -> partition -> buffer -> output files, as a pipeline.
//!
//! [`run`] goes through its steps in order:
//!
//! 1. [`Job::prepare`]: open the inputs, check the key (and `--hive-key`, `--sort-by`), create
//!    the output directory (removing a killed run's leftovers), build the buffer; nothing is
//!    read yet.
//! 2. [`Job::pipeline`]: two sets of `--threads` threads at once. The input threads
//!    ([`crate::shuffle_in`]) each claim input units (parquet row groups, Arrow IPC files),
//!    decode them, compute each row's partition and scatter the batch into the buffer; the
//!    buffer is then told the input is complete. The output threads ([`crate::read_back`])
//!    each subscribe to their share of the partitions and write what is complete into the
//!    partitions' files while the input is still read, then the rest after it.
//! 3. [`Job::commit`]: with `--verify` the row counts are compared; the output files get their
//!    final names and the buffer is closed (its spill directory removed).
//!
//! The first error, or a signal ([`crate::interrupt`]), stops every thread at its next batch;
//! [`Job::abandon`] then closes the buffer (removing the spill directory before the process
//! exits) and removes the temporary output files.
//!
//! # Locking
//! No locks of its own; the input threads tell the output threads about progress through a
//! `ReleaseSignal` (its mutex taken only inside `notify`, `epoch` and `wait_blocking`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use arrow_shards_memory::ReleaseSignal;

use crate::args::{LayoutArg, ShuffleArgs};
use crate::buffer::{Buffer, BufferSettings, Spill};
use crate::error::CliError;
use crate::hash::{KeyHasher, PARTITION_SEED};
use crate::input::{Inputs, ReadStats};
use crate::interrupt::Interrupt;
use crate::output::OutputDir;
use crate::part_writer::{OutputOptions, leaf_columns};
use crate::partition::Partitioner;
use crate::progress::Progress;
use crate::read_back::{OutTimes, Sink, read_back};
use crate::shuffle_in::{InTimes, shuffle_in};
use crate::sort_key::SortKey;
use crate::sorter::SortSettings;
use crate::summary::{Report, peak_rss, seconds};
use crate::verify::{PartitionCheck, check_row_counts};
use crate::workers::{Control, on_threads};
use crate::writer_memory::WriterMemory;

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
    let (shuffled, read_back) = match job.pipeline(args, started) {
        Ok(done) => done,
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
    /// `--sort-by`'s key, if given.
    sort_key: Option<Arc<SortKey>>,
}

/// What the input threads measured.
struct ShuffledIn {
    times: InTimes,
    read: ReadStats,
    /// Spill bytes on disk when the input ended (the most: files go as partitions are read).
    on_disk_at_finish: u64,
    /// Wall clock from the start of the run to the buffer finished.
    input_done_at: Duration,
}

/// What the output threads measured.
struct ReadBack {
    times: OutTimes,
    /// `--verify`'s checks of all threads, merged.
    check: Option<PartitionCheck>,
    /// The writers' share of the pool, bytes (`None` without a limit).
    writer_cap: Option<u64>,
}

impl Job {
    /// Step 1: inputs opened, key, hive key and sort key checked, output directory and buffer
    /// made.
    fn prepare(
        args: &ShuffleArgs,
        options: OutputOptions,
        interrupt: Interrupt,
    ) -> Result<Self, CliError> {
        let inputs = Inputs::open(&args.inputs)?;
        let hasher = KeyHasher::new(&inputs.schema, &args.key, PARTITION_SEED)?;
        if args.output.is_some()
            && args.layout == LayoutArg::Hive
            && inputs.schema.field_with_name(&args.hive_key).is_ok()
        {
            return Err(CliError::HiveKeyIsColumn {
                key: args.hive_key.clone(),
            });
        }
        let sort_key = if args.sort_by.is_empty() {
            None
        } else {
            Some(Arc::new(SortKey::new(&inputs.schema, &args.sort_by)?))
        };
        let output = match &args.output {
            Some(dir) => Some(OutputDir::create(dir, options)?),
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
            sort_key,
        })
    }

    /// Step 2: the input and output threads at once; the input's figures, then the output's.
    fn pipeline(
        &self,
        args: &ShuffleArgs,
        started: Instant,
    ) -> Result<(ShuffledIn, ReadBack), CliError> {
        let input_done = AtomicBool::new(false);
        let progressed = ReleaseSignal::new();
        let codec = self.output.as_ref().map(|output| {
            let columns = leaf_columns(&self.inputs.schema);
            let codec = output.codec_memory();
            (
                codec.open_row_group(columns, 1),
                codec.cut(columns).saturating_mul(self.threads as usize),
            )
        });
        let (per_writer, cuts) = codec.unwrap_or_default();
        let memory = WriterMemory::new(self.buffer.pool(), args.row_group_rows as usize)
            .with_codec_bytes(per_writer, cuts);
        let next_thread = AtomicU32::new(0);
        let sort = self.sort_key.as_ref().map(|key| SortSettings {
            key: Arc::clone(key),
            // without spilling the input is all in memory: partitions are sorted whole
            run_budget: memory
                .cap()
                .filter(|_| !args.no_spill)
                .map(|cap| (cap / self.threads as usize).max(1)),
            spill_root: args.spill_dir.clone().unwrap_or_else(std::env::temp_dir),
            batch_rows: args.batch_rows as usize,
            max_fan_in: crate::sorter::MAX_FAN_IN,
        });
        let sink = Sink {
            sort: sort.as_ref(),
            schema: &self.inputs.schema,
            output: self.output.as_ref(),
            next_thread: &next_thread,
            threads: self.threads,
            memory: &memory,
            input_done: &input_done,
            progressed: &progressed,
        };
        let (shuffled, read_back) = std::thread::scope(|scope| {
            let output = scope.spawn(|| self.read_back(args.verify, &sink, cuts));
            let shuffled = self.shuffle_in(args, &progressed, started);
            if shuffled.is_err() {
                self.control.stop();
            } else {
                self.control.progress.start_output(self.buffer.partitions());
            }
            input_done.store(true, Ordering::Release);
            progressed.notify();
            let read_back = output
                .join()
                .unwrap_or_else(|_| Err(CliError::Internal("the output threads panicked".into())));
            (shuffled, read_back)
        });
        self.control.progress.finish();
        // An interruption is the error to report, then the input's: the others follow.
        match (shuffled, read_back) {
            (Ok(shuffled), Ok(mut read_back)) => {
                read_back.writer_cap = memory.cap().map(|c| c as u64);
                Ok((shuffled, read_back))
            }
            (_, Err(e @ CliError::Interrupted { .. })) | (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    /// The input threads: every input batch partitioned into the buffer, which is then
    /// finished.
    fn shuffle_in(
        &self,
        args: &ShuffleArgs,
        progressed: &ReleaseSignal,
        started: Instant,
    ) -> Result<ShuffledIn, CliError> {
        self.control.progress.start_input(self.inputs.total_rows());
        // Input batches are partitioned whole, so their rows per partition are what each copy
        // into the buffer moves: larger input batches make those copies longer.
        let units = self
            .inputs
            .units((args.batch_rows as usize).max(INPUT_BATCH_ROWS));
        let results = on_threads(self.threads, &self.control, || {
            let partitioner = Partitioner::new(self.hasher.clone(), self.buffer.partitions());
            // A handle per thread: each is a producer that copies without waiting for the
            // others (its open batches join their partitions when it is dropped, at the end).
            let buffer = self.buffer.clone();
            shuffle_in(
                &units,
                &buffer,
                partitioner,
                &self.control,
                progressed,
                self.output.as_ref(),
            )
        })?;
        self.buffer.finish()?;
        let (times, read) = results.into_iter().fold(
            (InTimes::default(), ReadStats::default()),
            |(times, read), (t, r)| (times.add(t), read.add(r)),
        );
        Ok(ShuffledIn {
            times,
            read,
            on_disk_at_finish: self.buffer.metrics().bytes_on_disk,
            input_done_at: started.elapsed(),
        })
    }

    /// The output threads: every partition taken once, while the input runs and after it,
    /// and written to its temporary file. `cuts`: what cutting a row group takes at its peak
    /// (`crate::codec_memory`), once per output thread.
    fn read_back(&self, verify: bool, sink: &Sink<'_>, cuts: usize) -> Result<ReadBack, CliError> {
        let partitions = self.buffer.partitions();
        // Cutting a row group compresses every column before any codec is freed: `cuts` is
        // charged for as long as any output thread runs, since a thread done with its
        // partitions lends itself to the writers of the others (`crate::spare_threads`), which
        // then compress on it.
        let mut reservation = sink.memory.reservation();
        sink.memory.charge(&mut reservation, 0, cuts);
        let results = on_threads(self.threads, &self.control, || {
            let mut check = verify.then(|| PartitionCheck::new(&self.hasher, partitions));
            let times = read_back(&self.buffer, sink, check.as_mut(), &self.control)?;
            Ok((times, check))
        });
        sink.memory.charge(&mut reservation, cuts, 0);
        let results = results?;
        let mut read_back = ReadBack {
            times: OutTimes::default(),
            check: None,
            writer_cap: None,
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

    /// Step 3: counts checked, output committed, buffer closed; the figures.
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
        let plain_columns = self
            .output
            .as_ref()
            .map(|o| o.plain_columns().to_vec())
            .unwrap_or_default();
        let encode_steps_helped = self
            .output
            .as_ref()
            .map_or(0, |o| o.spare_threads().helped());
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
            overflow_runs: metrics.overflow_runs,
            overflow_bytes_written: metrics.overflow_bytes_written,
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
            output_during_input_s: seconds(out.output_during_input),
            rows_out_during_input: out.rows_during_input,
            input_wall_s: seconds(shuffled.input_done_at),
            early_row_group_cuts: out.early_cuts,
            encode_steps_helped,
            writer_share: read_back.writer_cap,
            verify_s: seconds(out.verify),
            sort_by: (!args.sort_by.is_empty()).then(|| {
                let columns: Vec<String> = args.sort_by.iter().map(ToString::to_string).collect();
                columns.join(",")
            }),
            sort_s: seconds(out.sort),
            sort_runs: out.sort_runs,
            plain_columns,
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
        spill_to: args.spill_to.clone(),
        spill_quota: args.spill_quota,
        compression: args.spill_compression,
        read_batch_rows: args.batch_rows as usize,
        compact_rows: args.compact_rows as usize,
        threads,
    }
}
