//! The input phase of one thread: batches of the input units it claims (decoded on this
//! thread), partition ids computed, the batch scattered into the buffer, until the inputs end
//! or the run stops. After each write the output threads are told input has progressed, so
//! they look for complete batches to take ([`crate::read_back`]).
//!
//! # Locking
//! No lock of its own: units are claimed with an atomic; the progress signal's mutex is taken
//! only inside `notify`, after the write, with nothing else held.

use std::time::{Duration, Instant};

use arrow_shards_memory::ReleaseSignal;

use crate::buffer::Buffer;
use crate::error::CliError;
use crate::input::{ReadStats, Units};
use crate::interrupt::PausePoint;
use crate::output::OutputDir;
use crate::partition::Partitioner;
use crate::workers::Control;

/// Input-phase time of one thread.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct InTimes {
    /// Hashing and computing partition ids.
    pub(crate) partition: Duration,
    /// Writing into the buffer, waits for memory included.
    pub(crate) write: Duration,
}

impl InTimes {
    /// The sum of two threads' times.
    pub(crate) fn add(self, other: InTimes) -> InTimes {
        InTimes {
            partition: self.partition + other.partition,
            write: self.write + other.write,
        }
    }
}

/// One input-phase thread: batches of the `units` it claims, scattered into `buffer`;
/// `progressed` notified after each write. The first batch decoded (of all threads) chooses
/// `output`'s plain parquet columns before it is written. Its times and what it read.
pub(crate) fn shuffle_in(
    units: &Units,
    buffer: &Buffer,
    mut partitioner: Partitioner,
    control: &Control,
    progressed: &ReleaseSignal,
    output: Option<&OutputDir>,
) -> Result<(InTimes, ReadStats), CliError> {
    let mut times = InTimes::default();
    let watch_spill = control.interrupt.pauses_at(PausePoint::Spill);
    let mut stream = units.stream();
    while control.go_on()? {
        let batch = stream.next_batch()?;
        let Some(batch) = batch else { break };
        control.interrupt.pause(PausePoint::Input)?;
        if let Some(output) = output {
            output.sample_input(&batch);
        }
        let t = Instant::now();
        let rows = batch.num_rows() as u64;
        let ids = partitioner
            .partition_ids(&batch)
            .map_err(|e| CliError::Internal(format!("cannot partition a batch: {e}")))?;
        times.partition += t.elapsed();
        let t = Instant::now();
        buffer.write_partitioned(batch, ids)?;
        times.write += t.elapsed();
        progressed.notify();
        control.interrupt.hold_for(PausePoint::Stream)?;
        control.progress.advance(rows);
        if control.progress.is_shown() {
            control.progress.spilled(buffer.metrics().bytes_spilled);
        }
        if watch_spill && buffer.metrics().spill_files > 0 {
            control.interrupt.pause(PausePoint::Spill)?;
        }
    }
    Ok((times, stream.stats()))
}
