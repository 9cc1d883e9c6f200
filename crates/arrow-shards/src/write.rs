//! Writing batches: validation, charging the pool, waking the spiller, waiting for room.
//!
//! A write is checked (partition, schema) and sized outside the lock, then inserted in one
//! synchronous attempt (`attempt`): with its handle's lane held, it is charged under the state
//! lock, its rows copied into the lane outside it, and booked under it again (see
//! [`crate::lanes`]). A batch is either stored whole or not at all, and no attempt spans an
//! `.await`, so dropping an async `write` while it waits loses nothing and leaks no reservation. Waiting uses the pool's
//! [`ReleaseSignal`](arrow_shards_memory::ReleaseSignal): take its epoch (or enable its `Notified`
//! future), try, and wait only if the try failed, so no release is missed. A waiting write holds
//! nothing of the pool: a scatter write that reordered its rows lets that copy go before it
//! waits (`scatter::park`; its own release then must not wake it, so it takes the signal again
//! and checks for room, `room_now`) and gathers it again at its next try.
//!
//! With spilling on, a write that does not fit wakes the spiller (saying how much it needs) and
//! waits for it; once a spill has failed, a write that would have to wait gets that error with
//! its batch back.
//!
//! **Writes that go to disk**, for every write form: a write that needs more than the whole
//! limit, which no wait can make room for (a batch, or the rows a scattered batch brings to its
//! partitions; decided in [`ShardBuffer::attempt`]), and, with `disk_when_nothing_to_spill`, a
//! refused write while the buffer holds nothing to spill and shares its pool with no other
//! spilling buffer (decided in `may_wait`), go to disk directly through the spiller
//! ([`crate::spiller`]'s direct path), one part per partition, committed all or none. The
//! `try_` forms (`last_try`) take only the first verdict. Without spilling an oversized write
//! is refused with [`Error::MemoryExhausted`] and its batch handed back.

use std::sync::atomic::Ordering;
use std::time::Instant;

use arrow_array::RecordBatch;

use crate::buffer::ShardBuffer;
use crate::error::{Error, WriteError};
use crate::grouping::PartitionIds;
use crate::route::{Route, route_batch};
use crate::scatter::{park, scatter, unpark};
use crate::schema_check::conform;
use crate::shard::{Shard, Stored};
use crate::spiller::Spiller;
use crate::spiller::side::NeedGuard;
use crate::state::insert::Admitted;

/// What a write attempt came to.
enum Attempt {
    Done,
    /// No room now; the shard is back for another try.
    Full {
        error: Error,
        needed: usize,
        shard: Shard,
    },
    /// It needs more than the whole limit: it goes to disk (the oversized rule).
    Oversized(Shard),
}

/// How a waiting write goes on after one step.
enum Step {
    Done,
    /// Wait for a release, then try again. `Some(room)` if the write let its reordered copy
    /// go (`scatter::park`): that release must not wake the writer itself, so the caller takes
    /// the release signal again after it and first checks for `room` (the bytes the write
    /// needs, its copy's included), lest a release before it be missed.
    Wait(Shard, Option<usize>),
    /// Too large for the whole limit, or refused with nothing of this buffer's to free: to
    /// disk.
    Disk(Shard),
}

/// What a refused write does.
enum Wait {
    /// Waits for a release.
    Release,
    /// Goes to disk: nothing of this buffer's can be freed.
    Never,
}

/// How a write proceeds after `prepare`.
enum Plan {
    /// A valid zero-row batch: accepted, stored nowhere.
    Nothing,
    /// Into memory (or to disk, if it cannot fit even in an empty budget).
    Memory(Shard),
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
        let plan = self.prepare(partition, batch)?;
        self.write_plan(partition, plan).await
    }

    /// Writes every row of `batch` to the partition `partitions` names for it, in one step: all
    /// rows are accepted, or none and the whole batch comes back in the error. Waits for memory
    /// like [`write`](Self::write) and is cancel-safe the same way.
    ///
    /// Rows are grouped by partition with one counting pass (O(rows + partitions)); each
    /// partition's rows are then copied into its open batch (straight from the batch as
    /// written when every column is flat and every partition's share is small, else after one
    /// reordering gather), or kept as a slice when they reach the compaction target. Within a
    /// partition rows keep their order. The ids must be one per row, not null, and below
    /// [`num_partitions`](Self::num_partitions) ([`Error::PartitionIdsLength`],
    /// [`Error::NullPartitionId`], [`Error::PartitionIdOutOfRange`]); the error's
    /// [`WriteError::partition`] is the partition it names, or the first partition the batch
    /// has rows for.
    ///
    /// A batch whose rows need more than the whole memory limit goes to disk directly, one
    /// part per partition, all or none (with spilling off it is refused with
    /// [`Error::MemoryExhausted`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use arrow_array::{Int64Array, RecordBatch, UInt32Array};
    /// use arrow_schema::{DataType, Field, Schema};
    /// use arrow_shards::ShardBuffer;
    ///
    /// let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    /// let buffer = ShardBuffer::builder(schema.clone(), 3).build()?;
    /// let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![10, 11, 12, 13]))])?;
    /// buffer.write_partitioned_blocking(batch, &UInt32Array::from(vec![2, 0, 2, 1]))?;
    /// buffer.finish()?;
    /// assert_eq!(buffer.read(2)?.concat()?.num_rows(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn write_partitioned<'a>(
        &self,
        batch: RecordBatch,
        partitions: impl Into<PartitionIds<'a>>,
    ) -> Result<(), WriteError> {
        let (partition, plan) = self.prepare_scatter(batch, partitions.into())?;
        self.write_plan(partition, plan).await
    }

    /// [`write_partitioned`](Self::write_partitioned), parking the thread while memory is full.
    pub fn write_partitioned_blocking<'a>(
        &self,
        batch: RecordBatch,
        partitions: impl Into<PartitionIds<'a>>,
    ) -> Result<(), WriteError> {
        let (partition, plan) = self.prepare_scatter(batch, partitions.into())?;
        self.write_plan_blocking(partition, plan)
    }

    /// [`write_partitioned`](Self::write_partitioned) if it fits now; never waits. A refusal
    /// asks the spiller to make room for it, so a later try may fit.
    pub fn try_write_partitioned<'a>(
        &self,
        batch: RecordBatch,
        partitions: impl Into<PartitionIds<'a>>,
    ) -> Result<(), WriteError> {
        match self.prepare_scatter(batch, partitions.into())? {
            (_, Plan::Nothing) => Ok(()),
            (partition, Plan::Memory(shard)) => self.try_plan(partition, shard),
        }
    }

    /// The try forms' one step: never waits for memory; a write too large for the whole limit
    /// goes to disk before it returns (the caller's thread waits for that write).
    fn try_plan(&self, partition: u32, shard: Shard) -> Result<(), WriteError> {
        match self.last_try(partition, shard)? {
            None => Ok(()),
            Some(shard) => {
                let (reply, parts) = self.hand_to_spiller(partition, shard)?;
                // Not `blocking_recv`: a try may be called from an async task.
                self.land(partition, futures::executor::block_on(reply), parts)
            }
        }
    }

    async fn write_plan(&self, partition: u32, plan: Plan) -> Result<(), WriteError> {
        let mut stored = match plan {
            Plan::Nothing => return Ok(()),
            Plan::Memory(shard) => shard,
        };
        let deadline = self
            .shared
            .config
            .write_timeout
            .map(|t| tokio::time::Instant::now() + t);
        let mut need = None;
        let signal = self.shared.pool.release_signal();
        loop {
            let notified = signal.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let (shard, parked) = match self.try_or_wait(partition, stored, &mut need)? {
                Step::Wait(shard, parked) => (shard, parked),
                Step::Done => return Ok(()),
                Step::Disk(shard) => {
                    drop(need);
                    return self.write_direct_async(partition, shard).await;
                }
            };
            stored = shard;
            if let Some(room) = parked {
                notified.set(signal.notified());
                notified.as_mut().enable();
                if self.room_now(room) {
                    continue;
                }
            }
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
                drop(need);
                return match self.last_try(partition, stored)? {
                    None => Ok(()),
                    Some(shard) => self.write_direct_async(partition, shard).await,
                };
            }
        }
    }

    /// Writes `batch` to `partition`, parking the thread while memory is full (for the spiller,
    /// or up to `with_write_timeout`). Do not call it from an async task; use
    /// [`write`](Self::write) there.
    pub fn write_blocking(&self, partition: u32, batch: RecordBatch) -> Result<(), WriteError> {
        let plan = self.prepare(partition, batch)?;
        self.write_plan_blocking(partition, plan)
    }

    fn write_plan_blocking(&self, partition: u32, plan: Plan) -> Result<(), WriteError> {
        let mut stored = match plan {
            Plan::Nothing => return Ok(()),
            Plan::Memory(shard) => shard,
        };
        let deadline = self.shared.config.write_timeout.map(|t| Instant::now() + t);
        let signal = self.shared.pool.release_signal();
        let mut need = None;
        loop {
            let mut epoch = signal.epoch();
            let (shard, parked) = match self.try_or_wait(partition, stored, &mut need)? {
                Step::Wait(shard, parked) => (shard, parked),
                Step::Done => return Ok(()),
                Step::Disk(shard) => {
                    drop(need);
                    return self.write_direct_blocking(partition, shard);
                }
            };
            stored = shard;
            if let Some(room) = parked {
                epoch = signal.epoch();
                if self.room_now(room) {
                    continue;
                }
            }
            let waiting = Instant::now();
            let woken = signal.wait_blocking(epoch, deadline);
            self.record_wait(waiting);
            if !woken {
                drop(need);
                return match self.last_try(partition, stored)? {
                    None => Ok(()),
                    Some(shard) => self.write_direct_blocking(partition, shard),
                };
            }
        }
    }

    /// Writes `batch` to `partition` if it fits in memory now; never waits for memory. A
    /// refusal asks the spiller to make room for this batch (even below the spill threshold),
    /// so a later try fits once a spill round has run. A batch that cannot fit even in an
    /// empty budget goes to disk through the spiller before this returns (the calling thread
    /// waits for that write), as with [`write`](Self::write).
    pub fn try_write(&self, partition: u32, batch: RecordBatch) -> Result<(), WriteError> {
        match self.prepare(partition, batch)? {
            Plan::Nothing => Ok(()),
            Plan::Memory(shard) => self.try_plan(partition, shard),
        }
    }

    /// Checks partition and schema and routes the batch ([`route_batch`]): copied into the
    /// partition's open batch, or sized and stored whole.
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
        Ok(Plan::Memory(
            match route_batch(self.shared.compact, &self.shared.schema, &batch) {
                Route::Copy(config) => Shard::Small(batch, config),
                Route::Whole => Shard::Whole(Stored::new(batch)),
            },
        ))
    }

    /// Checks schema and partition ids and groups the rows by partition (outside the lock).
    fn prepare_scatter(
        &self,
        batch: RecordBatch,
        ids: PartitionIds<'_>,
    ) -> Result<(u32, Plan), WriteError> {
        let first = |ids: PartitionIds<'_>| {
            match ids {
                PartitionIds::Array(a) => a.values().first().copied(),
                PartitionIds::Slice(s) => s.first().copied(),
            }
            .unwrap_or(0)
        };
        let partition = first(ids);
        let batch = conform(&self.shared.schema, batch)
            .map_err(|(e, batch)| WriteError::new(partition, e, batch))?;
        let (schema, compact) = (&self.shared.schema, self.shared.compact);
        let scattered = scatter(
            batch,
            ids,
            self.shared.num_partitions,
            compact,
            schema,
            &self.shared.pool,
        )
        .map_err(|(e, batch)| WriteError::new(error_partition(&e, partition), e, batch))?;
        if scattered.ranges.is_empty() {
            return match self.shared.lock().check_open() {
                Ok(()) => Ok((partition, Plan::Nothing)),
                Err(e) => Err(WriteError::new(partition, e, scattered.original)),
            };
        }
        Ok((
            partition,
            Plan::Memory(Shard::Scattered(Box::new(scattered))),
        ))
    }

    /// One try under the lock; wakes the spiller when the pool is past its threshold. This is
    /// where the oversized rule is decided, for every write form: a shard that needs more than
    /// the whole limit goes to disk when the buffer spills, and is refused otherwise (the other
    /// way to disk, a buffer with nothing to spill, is decided in `may_wait`).
    fn attempt(&self, partition: u32, shard: Shard) -> Result<Attempt, WriteError> {
        // A write that waited gathers its reordered copy again (`try_or_wait` let it go).
        let shard = unpark(shard, &self.shared.pool)
            .map_err(|(e, batch)| WriteError::new(partition, e, batch))?;
        let result = {
            let mut lane = self.shared.lock_lane(self.lane.get(&self.shared));
            let admitted = self.shared.lock().try_insert(&mut lane, partition, shard);
            match admitted {
                Ok(Admitted::Stored) => Ok(()),
                // Charged: the rows are copied with only this producer's lane held.
                Ok(Admitted::Copy(pending)) => {
                    let copied = pending.copy(&mut lane);
                    self.shared.lock().book(&mut lane, pending, copied)
                }
                Err(refused) => Err(refused),
            }
        };
        match result {
            Ok(()) => {
                self.wake_spiller_if_over_threshold();
                Ok(Attempt::Done)
            }
            Err((error @ Error::MemoryExhausted { needed, limit, .. }, shard))
                if needed <= limit =>
            {
                Ok(Attempt::Full {
                    error,
                    needed,
                    shard,
                })
            }
            // More than the whole limit: waiting would never end.
            Err((Error::MemoryExhausted { .. }, shard)) if self.spiller.is_some() => {
                Ok(Attempt::Oversized(shard))
            }
            Err((error, shard)) => Err(WriteError::new(
                error_partition(&error, partition),
                error,
                shard.into_batch(),
            )),
        }
    }

    /// One step of a waiting write: done once the batch is in, the batch back if the writer
    /// should wait for a release (its need counted in `need`) or go to disk, an error if it may
    /// not wait.
    fn try_or_wait<'a>(
        &'a self,
        partition: u32,
        shard: Shard,
        need: &mut Option<NeedGuard<'a>>,
    ) -> Result<Step, WriteError> {
        match self.attempt(partition, shard)? {
            Attempt::Done => Ok(Step::Done),
            Attempt::Oversized(shard) => Ok(Step::Disk(shard)),
            Attempt::Full {
                error,
                needed,
                shard,
            } => {
                // A waiting write holds no charge: its reordered copy goes until the next try.
                let (shard, copy) = park(shard);
                let room = needed + copy;
                match self.may_wait(error, room, need) {
                    Ok(Wait::Release) => Ok(Step::Wait(shard, (copy > 0).then_some(room))),
                    Ok(Wait::Never) => Ok(Step::Disk(shard)),
                    Err(error) => Err(WriteError::new(partition, error, shard.into_batch())),
                }
            }
        }
    }

    /// Whether a write refused for memory may wait: with spilling, after waking the spiller,
    /// unless spilling has failed, or goes to disk if this buffer holds nothing it could spill
    /// and no other spilling buffer shares its pool (the pool is held by others, such as
    /// DataFusion's other operators on a session pool: waiting would end only at the write
    /// timeout); without spilling, it waits only with a write timeout. While it waits, the writer's need is counted in `need` so that the
    /// spiller frees room for it even below the threshold.
    fn may_wait<'a>(
        &'a self,
        error: Error,
        needed: usize,
        need: &mut Option<NeedGuard<'a>>,
    ) -> Result<Wait, Error> {
        match (&self.spiller, &self.shared.spill) {
            (Some(spiller), Some(side)) => {
                // Asked before our lock: the peers' list lock is never taken under it.
                let alone = !Spiller::shares_pool(&self.shared);
                {
                    let state = self.shared.lock();
                    if let Some(failed) = state.spill_error() {
                        return Err(Error::Spill(failed));
                    }
                    if self.shared.config.disk_when_nothing_to_spill
                        && alone
                        && state.nothing_to_free()
                    {
                        return Ok(Wait::Never);
                    }
                }
                match need {
                    Some(guard) => guard.set(needed),
                    None => *need = Some(NeedGuard::new(side, needed)),
                }
                spiller.wake(side);
                Ok(Wait::Release)
            }
            _ if self.shared.config.write_timeout.is_some() => Ok(Wait::Release),
            _ => Err(error),
        }
    }

    /// Whether the pool would give `bytes` now (asked by reserving them and giving them back):
    /// a write that let its copy go checks this after taking the release signal, so a release
    /// that came before is not missed.
    fn room_now(&self, bytes: usize) -> bool {
        let pool = &self.shared.pool;
        let fits = pool.try_grow(bytes).is_ok();
        if fits {
            pool.shrink(bytes);
        }
        fits
    }

    fn wake_spiller_if_over_threshold(&self) {
        if let (Some(spiller), Some(side)) = (&self.spiller, &self.shared.spill)
            && self.shared.pool.reserved() >= side.config.threshold_bytes
        {
            spiller.wake(side);
        }
    }

    /// The last try of a write that will not wait: `None` once it is in, the shard back if it
    /// must go to disk; a refusal asks the spiller to make room for `needed` bytes in its next
    /// round (even below the threshold).
    fn last_try(&self, partition: u32, shard: Shard) -> Result<Option<Shard>, WriteError> {
        match self.attempt(partition, shard)? {
            Attempt::Done => Ok(None),
            Attempt::Oversized(shard) => Ok(Some(shard)),
            Attempt::Full {
                error,
                shard,
                needed,
            } => {
                if let (Some(spiller), Some(side)) = (&self.spiller, &self.shared.spill) {
                    side.request(needed);
                    spiller.wake(side);
                }
                Err(WriteError::new(partition, error, shard.into_batch()))
            }
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

/// The partition an error names, else `fallback`.
pub(crate) fn error_partition(error: &Error, fallback: u32) -> u32 {
    match error {
        Error::Sealed { partition } | Error::PartitionIdOutOfRange { partition, .. } => *partition,
        _ => fallback,
    }
}
