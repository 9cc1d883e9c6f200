//! Writing batches: validation, charging the pool, waking the spiller, waiting for room.
//!
//! A write is checked (partition, schema) and sized outside the lock, then inserted under it in
//! one step: a batch is either stored whole or not at all, so dropping an async `write` while it
//! waits loses nothing and leaks no reservation. Waiting uses the pool's
//! [`ReleaseSignal`](arrow_shards_memory::ReleaseSignal): take its epoch (or enable its `Notified`
//! future), try, and wait only if the try failed, so no release is missed.
//!
//! With spilling on, a write that does not fit wakes the spiller (saying how much it needs) and
//! waits for it; a batch larger than the whole limit goes to disk directly through the spiller;
//! once a spill has failed, a write that would have to wait gets that error with its batch back.

use std::sync::atomic::Ordering;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_shards_memory::sizing::batch_allocations;
use tokio::sync::oneshot::error::RecvError;

use crate::schema_check::conform;
use crate::spiller::{DirectReply, Landed, NeedGuard};
use crate::state::Stored;
use crate::{Error, ShardBuffer, WriteError};

/// What a write attempt came to.
enum Attempt {
    Done,
    /// No room now; the batch is back for another try.
    Full {
        error: Error,
        needed: usize,
        stored: Stored,
    },
}

/// How a write proceeds after `prepare`.
enum Plan {
    /// A valid zero-row batch: accepted, stored nowhere.
    Nothing,
    /// Into memory, waiting for room if needed.
    Memory(Stored),
    /// Larger than the whole limit: straight to disk.
    Disk(Stored),
}

impl ShardBuffer {
    /// Writes `batch` to `partition`, waiting without blocking the runtime thread while memory
    /// is full (for the spiller, or up to `with_write_timeout`).
    ///
    /// Cancel-safe: dropping the future before it completes leaves the batch out of the buffer
    /// and leaks no reservation. A batch waiting for memory is simply not inserted; an oversized
    /// batch being written to disk by the spiller (see
    /// [`ShardBufferBuilder`](crate::ShardBufferBuilder)) joins its partition only when this
    /// future commits it, so its segment is dropped instead. The batch is in the buffer exactly
    /// when the future returned `Ok`.
    pub async fn write(&self, partition: u32, batch: RecordBatch) -> Result<(), WriteError> {
        let mut stored = match self.prepare(partition, batch)? {
            Plan::Nothing => return Ok(()),
            Plan::Memory(stored) => stored,
            Plan::Disk(stored) => return self.write_direct_async(partition, stored).await,
        };
        let deadline = self
            .shared
            .config
            .write_timeout
            .map(|t| tokio::time::Instant::now() + t);
        let mut need = None;
        loop {
            let notified = self.shared.pool.release_signal().notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            stored = match self.try_or_wait(partition, stored, &mut need)? {
                Some(stored) => stored,
                None => return Ok(()),
            };
            let waiting = Instant::now();
            let woken = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, notified).await.is_ok(),
                None => {
                    notified.await;
                    true
                }
            };
            self.record_wait(waiting);
            if !woken {
                // One last try: the release may have come with the deadline.
                return self.last_try(partition, stored);
            }
        }
    }

    /// Writes `batch` to `partition`, parking the thread while memory is full (for the spiller,
    /// or up to `with_write_timeout`). Do not call it from an async task; use
    /// [`write`](Self::write) there.
    pub fn write_blocking(&self, partition: u32, batch: RecordBatch) -> Result<(), WriteError> {
        let mut stored = match self.prepare(partition, batch)? {
            Plan::Nothing => return Ok(()),
            Plan::Memory(stored) => stored,
            Plan::Disk(stored) => return self.write_direct_blocking(partition, stored),
        };
        let deadline = self.shared.config.write_timeout.map(|t| Instant::now() + t);
        let signal = self.shared.pool.release_signal();
        let mut need = None;
        loop {
            let epoch = signal.epoch();
            stored = match self.try_or_wait(partition, stored, &mut need)? {
                Some(stored) => stored,
                None => return Ok(()),
            };
            let waiting = Instant::now();
            let woken = signal.wait_blocking(epoch, deadline);
            self.record_wait(waiting);
            if !woken {
                return self.last_try(partition, stored);
            }
        }
    }

    /// Writes `batch` to `partition` if it fits in memory now; never waits and never writes to
    /// disk itself (a refusal does wake the spiller, so a later try may fit).
    pub fn try_write(&self, partition: u32, batch: RecordBatch) -> Result<(), WriteError> {
        match self.prepare(partition, batch)? {
            Plan::Nothing => Ok(()),
            Plan::Memory(stored) | Plan::Disk(stored) => self.last_try(partition, stored),
        }
    }

    /// Checks partition and schema and sizes the batch.
    fn prepare(&self, partition: u32, batch: RecordBatch) -> Result<Plan, WriteError> {
        if let Err(e) = self.shared.check_partition(partition) {
            return Err(WriteError::new(partition, e, batch));
        }
        let batch = conform(&self.shared.schema, batch)
            .map_err(|(e, batch)| WriteError::new(partition, e, batch))?;
        if batch.num_rows() == 0 {
            return match self.shared.lock().check_writable(partition) {
                Ok(()) => Ok(Plan::Nothing),
                Err(e) => Err(WriteError::new(partition, e, batch)),
            };
        }
        let allocations = batch_allocations(&batch);
        let size = allocations.iter().map(|a| a.capacity).sum();
        let stored = Stored {
            batch,
            allocations,
            size,
        };
        let oversized =
            self.spiller.is_some() && self.shared.pool.limit().is_some_and(|limit| size > limit);
        Ok(if oversized {
            Plan::Disk(stored)
        } else {
            Plan::Memory(stored)
        })
    }

    /// One try under the lock; wakes the spiller when the pool is past its threshold.
    fn attempt(&self, partition: u32, stored: Stored) -> Result<Attempt, WriteError> {
        let result = self.shared.lock().try_insert(partition, stored);
        match result {
            Ok(()) => {
                self.wake_spiller_if_over_threshold();
                Ok(Attempt::Done)
            }
            Err((error @ Error::MemoryExhausted { needed, .. }, stored)) => Ok(Attempt::Full {
                error,
                needed,
                stored,
            }),
            Err((error, stored)) => Err(WriteError::new(partition, error, stored.batch)),
        }
    }

    /// One step of a waiting write: `None` once the batch is in, the batch back if the writer
    /// should wait for a release (its need counted in `need`), an error if it may not wait.
    fn try_or_wait<'a>(
        &'a self,
        partition: u32,
        stored: Stored,
        need: &mut Option<NeedGuard<'a>>,
    ) -> Result<Option<Stored>, WriteError> {
        match self.attempt(partition, stored)? {
            Attempt::Done => Ok(None),
            Attempt::Full {
                error,
                needed,
                stored,
            } => match self.may_wait(error, needed, need) {
                Ok(()) => Ok(Some(stored)),
                Err(error) => Err(WriteError::new(partition, error, stored.batch)),
            },
        }
    }

    /// Whether a write refused for memory may wait: with spilling, after waking the spiller,
    /// unless spilling has failed; without, only with a write timeout.
    /// While it waits, the writer's need is counted in `need` so that the spiller frees room for
    /// it even below the threshold.
    fn may_wait<'a>(
        &'a self,
        error: Error,
        needed: usize,
        need: &mut Option<NeedGuard<'a>>,
    ) -> Result<(), Error> {
        match (&self.spiller, &self.shared.spill) {
            (Some(spiller), Some(side)) => {
                if let Some(failed) = self.shared.lock().spill_error.clone() {
                    return Err(Error::Spill(failed));
                }
                need.get_or_insert_with(|| NeedGuard::new(side, needed));
                spiller.wake(side);
                Ok(())
            }
            _ if self.shared.config.write_timeout.is_some() => Ok(()),
            _ => Err(error),
        }
    }

    fn wake_spiller_if_over_threshold(&self) {
        if let (Some(spiller), Some(side)) = (&self.spiller, &self.shared.spill)
            && self.shared.pool.reserved() >= side.config.threshold_bytes
        {
            spiller.wake(side);
        }
    }

    fn last_try(&self, partition: u32, stored: Stored) -> Result<(), WriteError> {
        match self.attempt(partition, stored)? {
            Attempt::Done => Ok(()),
            Attempt::Full { error, stored, .. } => {
                if let (Some(spiller), Some(side)) = (&self.spiller, &self.shared.spill) {
                    spiller.wake(side);
                }
                Err(WriteError::new(partition, error, stored.batch))
            }
        }
    }

    fn write_direct_blocking(&self, partition: u32, stored: Stored) -> Result<(), WriteError> {
        let (reply, keep, size) = self.hand_to_spiller(partition, stored)?;
        self.land(partition, reply.blocking_recv(), keep, size)
    }

    async fn write_direct_async(&self, partition: u32, stored: Stored) -> Result<(), WriteError> {
        let (reply, keep, size) = self.hand_to_spiller(partition, stored)?;
        // Dropping the future here drops the reply, and with it the landed segments.
        self.land(partition, reply.await, keep, size)
    }

    /// Sends an oversized batch to the spiller; returns the reply to wait for, with the batch
    /// (kept to hand back on failure) and its size.
    fn hand_to_spiller(
        &self,
        partition: u32,
        stored: Stored,
    ) -> Result<(DirectReply, RecordBatch, usize), WriteError> {
        let spiller = self
            .spiller
            .as_ref()
            .expect("Plan::Disk only with a spiller");
        let (keep, size) = (stored.batch.clone(), stored.size);
        Ok((spiller.direct(partition, stored)?, keep, size))
    }

    /// Commits an oversized batch's segments, written by the spiller, to its partition.
    fn land(
        &self,
        partition: u32,
        reply: Result<Result<Landed, WriteError>, RecvError>,
        batch: RecordBatch,
        size: usize,
    ) -> Result<(), WriteError> {
        let segments = match reply {
            Ok(landed) => landed?,
            Err(_) => return Err(WriteError::new(partition, self.spiller_gone(), batch)),
        };
        let result = self
            .shared
            .lock()
            .land_direct(partition, segments, batch.num_rows(), size);
        match result {
            Ok(()) => Ok(()),
            Err((error, segments)) => {
                drop(segments);
                Err(WriteError::new(partition, error, batch))
            }
        }
    }

    /// Why a direct write got no answer: the buffer was closed under it, or the spiller died.
    fn spiller_gone(&self) -> Error {
        if self.shared.lock().closed {
            Error::Closed
        } else {
            Error::Internal("the spiller thread stopped")
        }
    }

    fn record_wait(&self, since: Instant) {
        let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.shared
            .counters
            .write_wait_nanos
            .fetch_add(nanos, Ordering::Relaxed);
    }
}
