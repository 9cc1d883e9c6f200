//! The output phase of one thread: the next partition number from a shared counter, that
//! partition read from the buffer exactly once, checked with `--verify`, and written to its
//! temporary output file with `--output`; until every partition is taken or the run stops.
//!
//! # Locking
//! No locks of its own: the counter is an atomic; each thread has its own writer and check.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use arrow_schema::SchemaRef;

use crate::buffer::Buffer;
use crate::error::CliError;
use crate::interrupt::PausePoint;
use crate::output::OutputDir;
use crate::verify::PartitionCheck;
use crate::workers::Control;

/// Output-phase figures of one thread.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OutTimes {
    /// Rows read back.
    pub(crate) rows: u64,
    /// Partitions that held no rows.
    pub(crate) empty_partitions: u32,
    /// Taking batches out of the buffer.
    pub(crate) read: Duration,
    /// Encoding and writing output files.
    pub(crate) output: Duration,
    /// `--verify`'s hashing.
    pub(crate) verify: Duration,
}

impl OutTimes {
    /// The sum of two threads' figures.
    pub(crate) fn add(self, o: OutTimes) -> OutTimes {
        OutTimes {
            rows: self.rows + o.rows,
            empty_partitions: self.empty_partitions + o.empty_partitions,
            read: self.read + o.read,
            output: self.output + o.output,
            verify: self.verify + o.verify,
        }
    }
}

/// Where read-back partitions go.
pub(crate) struct Sink<'a> {
    /// The schema of every output file.
    pub(crate) schema: &'a SchemaRef,
    /// The output directory, if any.
    pub(crate) output: Option<&'a OutputDir>,
    /// The next partition to take.
    pub(crate) next: &'a AtomicU32,
}

/// One output-phase thread: partitions by number from `sink.next`, each read once and written.
pub(crate) fn read_back(
    buffer: &Buffer,
    sink: &Sink<'_>,
    mut check: Option<&mut PartitionCheck>,
    control: &Control,
) -> Result<OutTimes, CliError> {
    let mut times = OutTimes::default();
    while control.go_on()? {
        let partition = sink.next.fetch_add(1, Ordering::Relaxed);
        if partition >= buffer.partitions() {
            break;
        }
        let rows = read_partition(
            buffer,
            partition,
            sink,
            check.as_deref_mut(),
            control,
            &mut times,
        )?;
        times.rows += rows;
        times.empty_partitions += u32::from(rows == 0);
        control.progress.advance(1);
        if sink.output.is_some() {
            control.interrupt.pause(PausePoint::Output)?;
        }
    }
    Ok(times)
}

/// Reads `partition` whole into its writer (and check); its row count.
fn read_partition(
    buffer: &Buffer,
    partition: u32,
    sink: &Sink<'_>,
    mut check: Option<&mut PartitionCheck>,
    control: &Control,
    times: &mut OutTimes,
) -> Result<u64, CliError> {
    let t = Instant::now();
    let mut writer = sink
        .output
        .map(|o| o.writer(partition, sink.schema))
        .transpose()?;
    times.output += t.elapsed();
    let t = Instant::now();
    let mut batches = buffer.read(partition)?;
    times.read += t.elapsed();
    let mut rows = 0u64;
    loop {
        control.interrupt.check()?;
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
    Ok(rows)
}
