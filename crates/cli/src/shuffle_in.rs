//! The input phase of one thread: batches from the shared input stream, partition ids
//! computed, the batch scattered into the buffer, until the inputs end or the run stops.
//!
//! # Locking
//! The input stream's mutex is held while one batch is decoded and never while partitioning or
//! writing into the buffer (whose writes may wait for memory).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::buffer::Buffer;
use crate::error::CliError;
use crate::input::BatchStream;
use crate::interrupt::PausePoint;
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

/// One input-phase thread: batches from `stream`, scattered into `buffer`.
pub(crate) fn shuffle_in(
    stream: &Mutex<BatchStream>,
    buffer: &Buffer,
    mut partitioner: Partitioner,
    control: &Control,
) -> Result<InTimes, CliError> {
    let mut times = InTimes::default();
    let watch_spill = control.interrupt.pauses_at(PausePoint::Spill);
    while control.go_on()? {
        let batch = stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_batch()?;
        let Some(batch) = batch else { break };
        control.interrupt.pause(PausePoint::Input)?;
        let t = Instant::now();
        let rows = batch.num_rows() as u64;
        let ids = partitioner
            .partition_ids(&batch)
            .map_err(|e| CliError::Internal(format!("cannot partition a batch: {e}")))?;
        times.partition += t.elapsed();
        let t = Instant::now();
        buffer.write_partitioned(batch, ids)?;
        times.write += t.elapsed();
        control.progress.advance(rows);
        if control.progress.is_shown() {
            control.progress.spilled(buffer.metrics().bytes_spilled);
        }
        if watch_spill && buffer.metrics().spill_files > 0 {
            control.interrupt.pause(PausePoint::Spill)?;
        }
    }
    Ok(times)
}
