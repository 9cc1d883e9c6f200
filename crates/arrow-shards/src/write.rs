//! Writing batches: validation, charging the pool, and waiting for room.
//!
//! A write is checked (partition, schema) and sized outside the lock, then inserted under it in
//! one step: a batch is either stored whole or not at all, so dropping an async `write` while it
//! waits loses nothing and leaks no reservation. Waiting uses the pool's
//! [`ReleaseSignal`](arrow_shards_memory::ReleaseSignal): take its epoch (or enable its `Notified`
//! future), try, and wait only if the try failed, so no release is missed.

use std::sync::atomic::Ordering;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_shards_memory::sizing::batch_allocations;

use crate::schema_check::conform;
use crate::state::Stored;
use crate::{Error, ShardBuffer, WriteError};

/// What a write attempt came to.
enum Attempt {
    Done,
    /// No room now; the batch is back for another try.
    Full(Error, Stored),
}

impl ShardBuffer {
    /// Writes `batch` to `partition`, waiting without blocking the runtime thread while memory is
    /// full (as configured; see [`ShardBufferBuilder`](crate::ShardBufferBuilder)).
    ///
    /// Dropping the future while it waits leaves the buffer as if the write never happened.
    pub async fn write(&self, partition: u32, batch: RecordBatch) -> Result<(), WriteError> {
        let Some(mut stored) = self.prepare(partition, batch)? else {
            return Ok(());
        };
        let deadline = self
            .shared
            .config
            .write_timeout
            .map(|t| tokio::time::Instant::now() + t);
        loop {
            let notified = self.shared.pool.release_signal().notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let error = match self.attempt(partition, stored) {
                Ok(Attempt::Done) => return Ok(()),
                Ok(Attempt::Full(error, back)) => {
                    stored = back;
                    error
                }
                Err(e) => return Err(e),
            };
            let Some(deadline) = deadline else {
                return Err(WriteError::new(partition, error, stored.batch));
            };
            let waiting = Instant::now();
            let woken = tokio::time::timeout_at(deadline, notified).await.is_ok();
            self.record_wait(waiting);
            if !woken {
                // One last try: the release may have come with the deadline.
                return self.last_try(partition, stored);
            }
        }
    }

    /// Writes `batch` to `partition`, parking the thread while memory is full (as configured).
    /// Do not call it from an async task; use [`write`](Self::write) there.
    pub fn write_blocking(&self, partition: u32, batch: RecordBatch) -> Result<(), WriteError> {
        let Some(mut stored) = self.prepare(partition, batch)? else {
            return Ok(());
        };
        let deadline = self.shared.config.write_timeout.map(|t| Instant::now() + t);
        let signal = self.shared.pool.release_signal();
        loop {
            let epoch = signal.epoch();
            let error = match self.attempt(partition, stored) {
                Ok(Attempt::Done) => return Ok(()),
                Ok(Attempt::Full(error, back)) => {
                    stored = back;
                    error
                }
                Err(e) => return Err(e),
            };
            if deadline.is_none() {
                return Err(WriteError::new(partition, error, stored.batch));
            }
            let waiting = Instant::now();
            let woken = signal.wait_blocking(epoch, deadline);
            self.record_wait(waiting);
            if !woken {
                return self.last_try(partition, stored);
            }
        }
    }

    /// Writes `batch` to `partition` if it fits now; never waits.
    pub fn try_write(&self, partition: u32, batch: RecordBatch) -> Result<(), WriteError> {
        let Some(stored) = self.prepare(partition, batch)? else {
            return Ok(());
        };
        self.last_try(partition, stored)
    }

    /// Checks partition and schema and sizes the batch; `None` for a valid zero-row batch,
    /// which is accepted and stored nowhere.
    fn prepare(&self, partition: u32, batch: RecordBatch) -> Result<Option<Stored>, WriteError> {
        if let Err(e) = self.shared.check_partition(partition) {
            return Err(WriteError::new(partition, e, batch));
        }
        let batch = conform(&self.shared.schema, batch)
            .map_err(|(e, batch)| WriteError::new(partition, e, batch))?;
        if batch.num_rows() == 0 {
            return match self.shared.lock().check_writable(partition) {
                Ok(()) => Ok(None),
                Err(e) => Err(WriteError::new(partition, e, batch)),
            };
        }
        let allocations = batch_allocations(&batch);
        let size = allocations.iter().map(|a| a.capacity).sum();
        Ok(Some(Stored {
            batch,
            allocations,
            size,
        }))
    }

    fn attempt(&self, partition: u32, stored: Stored) -> Result<Attempt, WriteError> {
        match self.shared.lock().try_insert(partition, stored) {
            Ok(()) => Ok(Attempt::Done),
            Err((error @ Error::MemoryExhausted { .. }, stored)) => {
                Ok(Attempt::Full(error, stored))
            }
            Err((error, stored)) => Err(WriteError::new(partition, error, stored.batch)),
        }
    }

    fn last_try(&self, partition: u32, stored: Stored) -> Result<(), WriteError> {
        match self.attempt(partition, stored)? {
            Attempt::Done => Ok(()),
            Attempt::Full(error, stored) => Err(WriteError::new(partition, error, stored.batch)),
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
