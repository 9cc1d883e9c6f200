//! The output side of one thread, running while the input is read: the thread owns the
//! partitions `p` with `p % threads == its index`, subscribes to each
//! ([`Buffer::subscribe`]), and appends every batch a subscription yields to that partition's
//! file ([`crate::part_writer`]), checked with `--verify`.
//!
//! **While the input runs** (the streaming phase) the thread sweeps its partitions, taking
//! whatever is complete without waiting (`try_next`: spilled segments and batches cut at
//! `--compact-rows`), then waits until an input thread has written another batch. Each open
//! row group's bytes are charged to the run's pool ([`WriterMemory`]), its codecs' included,
//! and each thread is charged what cutting one row group takes ([`crate::codec_memory`],
//! charged for all threads at once by [`crate::shuffle`]); above the writers'
//! share the thread cuts its largest row group of at least the minimum, and takes nothing more
//! into smaller ones, which then stay in the buffer and may be spilled: spilling is the
//! fallback when writers cannot hold what the input brings. With more partitions than can
//! each hold a minimum row group within the writers' share ([`WriterMemory::streams`]), the
//! threads take nothing while the input runs and read everything after it;
//! docs/benchmarks.md says where the switch is on SF 1 lineitem and why. The switch is about
//! open row groups: without `--output` there are none, and the threads take what is complete
//! while the input runs at any partition count.
//!
//! **After the input** (the buffer finished) it takes the rest of each partition, largest open
//! row group first, one partition at a time, and completes its file (an empty partition gets a
//! file with no rows).
//!
//! With `--sort-by` nothing is taken while the input runs (a partition's first row in key
//! order is known only once its last row is in), and after the input each partition goes
//! through the thread's [`Sorter`] before it is written.
//!
//! Without `--output` the batches are only counted (and checked).
//!
//! A thread with no partition left to write (none from the start when `--partitions` is below
//! `--threads`, else once its last file is complete) lends itself to the parquet writers of
//! the others, which encode their columns on it ([`crate::spare_threads`],
//! [`crate::parquet_file`]).
//!
//! Test and benchmark hook: with `ARROW_SHARDS_HOLD_WRITERS=1` in the environment the threads
//! take nothing while the input runs (writers slower than any input): everything is read after
//! the input, from memory and spill files. With `ARROW_SHARDS_HOLD_WRITERS=0`
//! they stream whatever the switch says (to measure it: `benches/pipeline_ab.sh`); unset, or
//! any other value, leaves it to the switch. `--sort-by` holds them either way.
//!
//! # Locking
//! No locks of its own: each thread has its own subscriptions, writers, check and reservation;
//! [`WriterMemory`] is atomics; the progress signal's mutex is taken only inside its
//! `epoch`/`wait_blocking`, with nothing else held.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_shards::SubscriptionReader;
use arrow_shards_memory::{MemoryReservation, ReleaseSignal};

use crate::buffer::Buffer;
use crate::error::CliError;
use crate::interrupt::PausePoint;
use crate::output::OutputDir;
use crate::part_files::PartitionFiles;
use crate::sorter::{SortSettings, Sorter};
use crate::verify::PartitionCheck;
use crate::workers::Control;
use crate::writer_memory::WriterMemory;

/// The test hook's environment variable.
const HOLD_VAR: &str = "ARROW_SHARDS_HOLD_WRITERS";

/// How long a thread with nothing to take waits for input progress before it looks at the
/// stop flag again (a signal or another thread's error does not notify the progress signal).
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// Output figures of one thread.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OutTimes {
    /// Rows read back.
    pub(crate) rows: u64,
    /// Of `rows`, those taken while the input was still read.
    pub(crate) rows_during_input: u64,
    /// Partitions that held no rows.
    pub(crate) empty_partitions: u32,
    /// Row groups cut early for lack of memory.
    pub(crate) early_cuts: u64,
    /// Taking batches out of the buffer.
    pub(crate) read: Duration,
    /// Encoding and writing output files.
    pub(crate) output: Duration,
    /// Of `output`, the part spent while the input was still read.
    pub(crate) output_during_input: Duration,
    /// `--verify`'s hashing.
    pub(crate) verify: Duration,
    /// `--sort-by`'s ordering.
    pub(crate) sort: Duration,
    /// Sorted runs written to disk.
    pub(crate) sort_runs: u64,
}

impl OutTimes {
    /// The sum of two threads' figures.
    pub(crate) fn add(self, o: OutTimes) -> OutTimes {
        OutTimes {
            rows: self.rows + o.rows,
            rows_during_input: self.rows_during_input + o.rows_during_input,
            empty_partitions: self.empty_partitions + o.empty_partitions,
            early_cuts: self.early_cuts + o.early_cuts,
            read: self.read + o.read,
            output: self.output + o.output,
            output_during_input: self.output_during_input + o.output_during_input,
            verify: self.verify + o.verify,
            sort: self.sort + o.sort,
            sort_runs: self.sort_runs + o.sort_runs,
        }
    }
}

/// What the output threads share.
pub(crate) struct Sink<'a> {
    /// The schema of every output file.
    pub(crate) schema: &'a SchemaRef,
    /// The output directory, if any.
    pub(crate) output: Option<&'a OutputDir>,
    /// The next thread index to hand out.
    pub(crate) next_thread: &'a AtomicU32,
    /// How many output threads share the partitions.
    pub(crate) threads: u32,
    /// The writers' share of the budget.
    pub(crate) memory: &'a WriterMemory,
    /// Set (before `progressed` is notified) once the buffer is finished.
    pub(crate) input_done: &'a AtomicBool,
    /// Notified whenever an input thread has written a batch, and at the end of the input.
    pub(crate) progressed: &'a ReleaseSignal,
    /// `--sort-by`: how partitions are sorted, if they are.
    pub(crate) sort: Option<&'a SortSettings>,
}

/// One partition this thread owns.
struct Part<'o> {
    partition: u32,
    reader: SubscriptionReader,
    writer: Option<PartitionFiles<'o>>,
    /// The writer's bytes charged to the pool.
    charged: usize,
    rows: u64,
    /// Whether its file may be opened while the input runs (one of the open-file budget).
    may_open: bool,
}

impl Part<'_> {
    /// Whether its open row group may be cut early (has at least `min_rows` rows).
    fn cuttable(&self, min_rows: usize) -> bool {
        self.writer
            .as_ref()
            .is_some_and(|w| w.open_rows() >= min_rows)
    }
}

/// One output thread's state: its partitions, figures, check and reservation.
struct Drain<'a, 'b> {
    sink: &'a Sink<'b>,
    control: &'a Control,
    check: Option<&'a mut PartitionCheck>,
    reservation: MemoryReservation,
    times: OutTimes,
    streaming: bool,
    /// `--sort-by`'s sorter, if partitions are sorted.
    sorter: Option<Sorter<'a>>,
}

/// One output thread: its partitions subscribed, drained while the input runs and after it.
pub(crate) fn read_back(
    buffer: &Buffer,
    sink: &Sink<'_>,
    check: Option<&mut PartitionCheck>,
    control: &Control,
) -> Result<OutTimes, CliError> {
    let index = sink.next_thread.fetch_add(1, Ordering::Relaxed);
    let mut parts = (index..buffer.partitions())
        .step_by(sink.threads.max(1) as usize)
        .map(|partition| {
            Ok(Part {
                partition,
                reader: buffer.subscribe(partition)?,
                writer: None,
                charged: 0,
                rows: 0,
                may_open: false,
            })
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    let mut drain = Drain {
        sink,
        control,
        check,
        reservation: sink.memory.reservation(),
        times: OutTimes::default(),
        streaming: true,
        sorter: sink
            .sort
            .map(|settings| Sorter::new(settings, sink.memory))
            .transpose()?,
    };
    // A thread with no partition lends itself to the writers of the others from the start.
    if parts.is_empty()
        && let Some(output) = sink.output
    {
        output.spare_threads().lend();
    }
    // Past the switch (or held by the test hook, or sorting) nothing is taken while the
    // input runs. Counting only (no --output) opens no row group: it streams at any count.
    let hold = holds(
        std::env::var(HOLD_VAR).ok().as_deref(),
        sink.output.is_none() || sink.memory.streams(buffer.partitions()),
        sink.sort.is_some(),
    );
    // The streaming phase.
    loop {
        if !control.go_on()? {
            return Ok(drain.times);
        }
        let seen = sink.progressed.epoch();
        if sink.input_done.load(Ordering::Acquire) {
            break;
        }
        let took = !hold && drain.sweep(&mut parts)?;
        if !took {
            sink.progressed
                .wait_blocking(seen, Some(Instant::now() + IDLE_WAIT));
        }
    }
    // After the input: the largest open row groups are completed first, freeing their memory.
    drain.streaming = false;
    let had_parts = !parts.is_empty();
    parts.sort_by_key(|p| std::cmp::Reverse(p.charged));
    for part in parts {
        if !control.go_on()? {
            break;
        }
        if drain.sorter.is_some() {
            drain.complete_sorted(part)?;
        } else {
            drain.complete(part)?;
        }
        control.progress.advance(1);
        if sink.output.is_some() {
            control.interrupt.pause(PausePoint::Output)?;
        }
    }
    if let Some(sorter) = &drain.sorter {
        drain.times.sort_runs = sorter.runs_written;
    }
    // Its last partition written, the thread lends itself to the writers still at work.
    if had_parts && let Some(output) = sink.output {
        output.spare_threads().lend();
    }
    Ok(drain.times)
}

impl<'b> Drain<'_, 'b> {
    /// One pass over `parts` taking what is complete without waiting; whether anything was.
    fn sweep(&mut self, parts: &mut [Part<'b>]) -> Result<bool, CliError> {
        let memory = self.sink.memory;
        let mut took = false;
        for i in 0..parts.len() {
            loop {
                let part = &mut parts[i];
                // Over the share, only row groups that can be cut take more.
                if memory.over() && !part.cuttable(memory.min_rows()) {
                    break;
                }
                if self.sink.output.is_some() && !part.may_open {
                    if !memory.claim_file() {
                        break;
                    }
                    part.may_open = true;
                }
                let t = Instant::now();
                let next = part.reader.try_next();
                self.times.read += t.elapsed();
                let batch = match next {
                    Poll::Pending | Poll::Ready(None) => break,
                    Poll::Ready(Some(batch)) => batch,
                };
                let batch = batch.map_err(|e| read_error(part.partition, e))?;
                self.write(part, &batch)?;
                took = true;
                self.relieve(parts)?;
            }
        }
        Ok(took)
    }

    /// Cuts this thread's largest row groups that may be cut while the writers are over
    /// their share.
    fn relieve(&mut self, parts: &mut [Part<'b>]) -> Result<(), CliError> {
        let min_rows = self.sink.memory.min_rows();
        while self.sink.memory.over() {
            let largest = parts
                .iter_mut()
                .filter(|p| p.cuttable(min_rows))
                .max_by_key(|p| p.charged);
            let Some(part) = largest else { break };
            self.cut(part)?;
        }
        Ok(())
    }

    /// Cuts `part`'s open row group early: written to its file, its memory given back.
    fn cut(&mut self, part: &mut Part<'b>) -> Result<(), CliError> {
        let t = Instant::now();
        if let Some(writer) = part.writer.as_mut() {
            writer.cut_row_group()?;
        }
        self.recharge(part);
        self.times.early_cuts += 1;
        self.add_output(t.elapsed());
        Ok(())
    }

    /// Appends `batch` to `part`'s file (opened at its first batch), checks and counts it.
    fn write(&mut self, part: &mut Part<'b>, batch: &RecordBatch) -> Result<(), CliError> {
        part.rows += batch.num_rows() as u64;
        if self.streaming {
            self.times.rows_during_input += batch.num_rows() as u64;
        }
        if let Some(check) = self.check.as_deref_mut() {
            let t = Instant::now();
            check.check(part.partition, batch)?;
            self.times.verify += t.elapsed();
        }
        let Some(output) = self.sink.output else {
            return Ok(());
        };
        let t = Instant::now();
        let writer = match &mut part.writer {
            Some(writer) => writer,
            none => none.insert(PartitionFiles::new(
                output,
                part.partition,
                self.sink.schema,
            )),
        };
        writer.write(batch)?;
        self.recharge(part);
        self.add_output(t.elapsed());
        if self.streaming {
            self.control.interrupt.pause(PausePoint::Stream)?;
        }
        Ok(())
    }

    /// `part`'s next batch (after checking for an interrupt), its read time counted.
    fn next_batch(&mut self, part: &mut Part<'b>) -> Result<Option<RecordBatch>, CliError> {
        self.control.interrupt.check()?;
        let t = Instant::now();
        let next = part.reader.next();
        self.times.read += t.elapsed();
        next.transpose().map_err(|e| read_error(part.partition, e))
    }

    /// Takes the rest of `part` (waiting for nothing: the buffer is finished) and completes
    /// its file.
    fn complete(&mut self, mut part: Part<'b>) -> Result<(), CliError> {
        while let Some(batch) = self.next_batch(&mut part)? {
            self.write(&mut part, &batch)?;
            if self.sink.memory.over() && part.cuttable(self.sink.memory.min_rows()) {
                self.cut(&mut part)?;
            }
        }
        self.finish_part(part)
    }

    /// Completes `part`'s file (an empty partition gets one) and counts its rows.
    fn finish_part(&mut self, mut part: Part<'b>) -> Result<(), CliError> {
        self.times.rows += part.rows;
        self.times.empty_partitions += u32::from(part.rows == 0);
        let Some(output) = self.sink.output else {
            return Ok(());
        };
        let t = Instant::now();
        let writer = match part.writer.take() {
            Some(writer) => writer,
            None => PartitionFiles::new(output, part.partition, self.sink.schema),
        };
        writer.finish()?;
        self.sink
            .memory
            .charge(&mut self.reservation, part.charged, 0);
        self.times.output += t.elapsed();
        Ok(())
    }

    /// Takes the rest of `part` into the sorter, then writes it in key order and completes its
    /// file (the buffer is finished: nothing is waited for).
    fn complete_sorted(&mut self, mut part: Part<'b>) -> Result<(), CliError> {
        let Some(mut sorter) = self.sorter.take() else {
            return self.complete(part);
        };
        let result = (|| {
            let mut sort = sorter.partition(self.sink.schema);
            while let Some(batch) = self.next_batch(&mut part)? {
                let t = Instant::now();
                sorter.push(&mut sort, batch)?;
                self.times.sort += t.elapsed();
            }
            let t = Instant::now();
            let mut sorted = sorter.finish(sort)?;
            self.times.sort += t.elapsed();
            loop {
                self.control.interrupt.check()?;
                let t = Instant::now();
                let next = sorted.next();
                self.times.sort += t.elapsed();
                let Some(batch) = next.transpose()? else {
                    break;
                };
                self.write(&mut part, &batch)?;
                if self.sink.memory.over() && part.cuttable(self.sink.memory.min_rows()) {
                    self.cut(&mut part)?;
                }
            }
            drop(sorted);
            self.finish_part(part)
        })();
        sorter.release();
        self.sorter = Some(sorter);
        result
    }

    /// Charges `part`'s writer's bytes as they are now.
    fn recharge(&mut self, part: &mut Part<'b>) {
        let now = part.writer.as_ref().map_or(0, PartitionFiles::memory_size);
        self.sink
            .memory
            .charge(&mut self.reservation, part.charged, now);
        part.charged = now;
    }

    fn add_output(&mut self, spent: Duration) {
        self.times.output += spent;
        if self.streaming {
            self.times.output_during_input += spent;
        }
    }
}

/// Whether the output threads take nothing while the input runs: with `--sort-by` always;
/// otherwise as the hook `ARROW_SHARDS_HOLD_WRITERS` (`hook`) says (`1` holds, `0` streams),
/// else as the switch does (`streams`: [`WriterMemory::streams`], or `true` without
/// `--output`).
fn holds(hook: Option<&str>, streams: bool, sorting: bool) -> bool {
    sorting
        || match hook {
            Some("1") => true,
            Some("0") => false,
            _ => !streams,
        }
}

fn read_error(partition: u32, e: arrow_schema::ArrowError) -> CliError {
    CliError::Buffer {
        message: format!("reading partition {partition}: {e}"),
        source: Some(Box::new(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, UInt32Array};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;
    use crate::args::{CompressionArg, OutputCompression};
    use crate::buffer::{BufferSettings, Spill};
    use crate::interrupt::Interrupt;
    use crate::part_writer::test_options;
    use crate::progress::Progress;

    #[test]
    fn the_hook_overrides_the_switch_but_not_the_sort() {
        assert!(!holds(None, true, false));
        assert!(holds(None, false, false), "past the switch");
        assert!(holds(Some("1"), true, false));
        assert!(!holds(Some("0"), false, false), "streaming forced");
        assert!(holds(Some("yes"), false, false), "other values: the switch");
        assert!(holds(Some("0"), true, true), "sorting always holds");
    }

    /// While the input runs a thread takes no more into a row group below the minimum once
    /// the writers are over their share (the rest stays in the buffer); after the input it
    /// cuts row groups at the minimum, and the partition's last one may be smaller.
    #[test]
    fn over_the_share_row_groups_are_cut_at_the_minimum_and_no_smaller() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let settings = BufferSettings {
            memory_limit: None,
            spill: Spill::Disabled,
            spill_to: None,
            spill_quota: None,
            compression: CompressionArg::None,
            // takes are merged into batches of up to this many rows: one per written batch
            read_batch_rows: 100,
            compact_rows: 100,
            threads: 1,
        };
        let buffer = Buffer::new(Arc::clone(&schema), 1, &settings).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let options = test_options(OutputCompression::None, 1);
        let output = OutputDir::create(dir.path(), options).unwrap();
        // every byte a writer holds is over a 1-byte share; cuts at 200 rows
        let memory = WriterMemory::with_cap(buffer.pool(), 1, 200);
        let (input_done, progressed, next_thread) = (
            AtomicBool::new(false),
            ReleaseSignal::new(),
            AtomicU32::new(0),
        );
        let sink = Sink {
            schema: &schema,
            output: Some(&output),
            next_thread: &next_thread,
            threads: 1,
            memory: &memory,
            input_done: &input_done,
            progressed: &progressed,
            sort: None,
        };
        let control = Control::new(Interrupt::unregistered(None), Progress::new(false));
        let mut drain = Drain {
            sink: &sink,
            control: &control,
            check: None,
            reservation: memory.reservation(),
            times: OutTimes::default(),
            streaming: true,
            sorter: None,
        };
        let mut parts = vec![Part {
            partition: 0,
            reader: buffer.subscribe(0).unwrap(),
            writer: None,
            charged: 0,
            rows: 0,
            may_open: false,
        }];
        for b in 0..9 {
            let keys = Int64Array::from_iter_values(b * 100..(b + 1) * 100);
            let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(keys)]).unwrap();
            buffer
                .write_partitioned(batch, UInt32Array::from(vec![0; 100]))
                .unwrap();
        }
        assert!(drain.sweep(&mut parts).unwrap());
        assert_eq!(drain.times.rows_during_input, 100, "one batch, then over");
        assert!(
            !drain.sweep(&mut parts).unwrap(),
            "nothing more below the minimum"
        );
        assert!(
            buffer.pool().reserved() > 0,
            "the open row group is charged"
        );

        buffer.finish().unwrap();
        drain.streaming = false;
        let part = parts.pop().unwrap();
        drain.complete(part).unwrap();
        assert_eq!(drain.times.rows, 900);
        assert_eq!(drain.times.early_cuts, 4);
        let file = std::fs::File::open(output.temp_path(0, 0)).unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        let groups: Vec<i64> = reader
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .collect();
        assert_eq!(groups, [200, 200, 200, 200, 100]);
        drop(drain);
        assert_eq!(buffer.pool().reserved(), 0, "writers gave their bytes back");
        buffer.close().unwrap();
    }
}
