//! The [`ShardBuffer`] handle: lifecycle (seal, finish, close), reads and metrics.
//! Writes are in [`crate::write`], the background spiller in [`crate::spiller`].
//!
//! # Locking
//! One `Mutex<State>` ([`crate::state`]) guards partitions and accounting; each handle's lane
//! ([`crate::lanes`]) has its own mutex, locked before `State`; counters touched by readers are
//! atomics outside both. Lock order: lanes, `State`, then the pool's release signal (taken
//! inside `MemoryPool::shrink`). Nothing blocks, spawns, sends or does I/O under `State`; the
//! spiller's thread handle has its own mutex, never taken together with `State`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_schema::SchemaRef;
use arrow_shards_memory::{MemoryPool, MemoryReservation};

use arrow_shards_spill::SpillDir;

use crate::config::{Config, SpillConfig};
use crate::error::{ConfigError, Error};
use crate::lanes::OwnLane;
use crate::metrics::Metrics;
use crate::read::PartitionReader;
use crate::shared::{Counters, Registry, Shared};
use crate::spiller::Spiller;
use crate::spiller::side::SpillSide;
use crate::state::{PartitionSize, State};
use crate::subscribe::{SubscriptionReader, SubscriptionStream};

/// A memory-budgeted buffer of Arrow record batches, each tagged with an output partition.
///
/// A cheap handle: clone it into every producer thread or task. Producers [`write`] batches to
/// partitions `0..num_partitions`; a consumer [`read`]s each partition exactly once after it is
/// [`seal`]ed or the whole buffer is [`finish`]ed, getting its batches back in write order (per
/// producer).
///
/// Each handle is a producer: rows of small writes are copied into open batches of its own,
/// with no lock shared with other handles, so producers on their own clones copy in parallel
/// (threads sharing one handle take turns). Rows written through one handle keep their order
/// per partition; rows of different handles are in no set order. A handle's open batches join
/// their partitions when it is dropped, when its partitions are read, sealed and taken, or
/// spilled.
///
/// [`write`]: ShardBuffer::write
/// [`read`]: ShardBuffer::read
/// [`seal`]: ShardBuffer::seal
/// [`finish`]: ShardBuffer::finish
#[derive(Debug, Clone)]
pub struct ShardBuffer {
    pub(crate) shared: Arc<Shared>,
    /// The spiller thread, stopped when the last handle goes (readers do not keep it).
    pub(crate) spiller: Option<Arc<Spiller>>,
    /// The open batches this handle's writes copy rows into (a clone gets its own).
    pub(crate) lane: OwnLane,
}

impl Drop for ShardBuffer {
    /// Cuts the rows this handle copied into open batches into their partitions.
    fn drop(&mut self) {
        self.lane.hand_over(&self.shared);
    }
}

impl ShardBuffer {
    pub(crate) fn from_parts(
        schema: SchemaRef,
        num_partitions: u32,
        pool: Arc<dyn MemoryPool>,
        config: Config,
        spill: Option<SpillConfig>,
    ) -> Result<Self, ConfigError> {
        let reservation = MemoryReservation::new(&pool);
        let state = Mutex::new(State::new(
            Arc::clone(&schema),
            num_partitions,
            reservation,
            spill.is_some(),
            config.compact,
        ));
        let spill = match spill {
            Some(config) => {
                let dir = SpillDir::create_with_quota(&config.root, config.local_quota)
                    .map_err(|e| ConfigError::SpillDir(Arc::new(e)))?;
                Some(SpillSide::new(dir, config))
            }
            None => None,
        };
        let has_spill = spill.is_some();
        let shared = Arc::new(Shared {
            schema,
            num_partitions,
            pool,
            compact: config.compact,
            config,
            state,
            lanes: Registry::default(),
            counters: Counters::default(),
            spill,
        });
        let spiller = if has_spill {
            let spiller = Spiller::start(Arc::clone(&shared))
                .map_err(|e| ConfigError::SpillerThread(Arc::new(e)))?;
            Some(Arc::new(spiller))
        } else {
            None
        };
        Ok(Self {
            shared,
            spiller,
            lane: OwnLane::default(),
        })
    }

    /// Makes chosen file operations of the spill directory fail (tests of error paths).
    /// Returns `false` if spilling is off.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn set_spill_fault_plan(&self, plan: arrow_shards_spill::FaultPlan) -> bool {
        self.shared
            .spill
            .as_ref()
            .map(|s| s.dir.set_fault_plan(plan))
            .is_some()
    }

    /// The private spill directory, if spilling is on.
    pub fn spill_dir(&self) -> Option<&std::path::Path> {
        self.shared.spill.as_ref().map(|s| s.dir.path())
    }

    /// The schema every batch is written and read with.
    pub fn schema(&self) -> &SchemaRef {
        &self.shared.schema
    }

    /// The number of partitions.
    pub fn num_partitions(&self) -> u32 {
        self.shared.num_partitions
    }

    /// The pool this buffer draws memory from.
    pub fn memory_pool(&self) -> &Arc<dyn MemoryPool> {
        &self.shared.pool
    }

    /// Accepts no more writes to `partition`; it may then be read while other partitions are
    /// still written. Sealing twice is harmless.
    pub fn seal(&self, partition: u32) -> Result<(), Error> {
        self.shared.check_partition(partition)?;
        self.shared.lock().seal(partition)
    }

    /// Accepts no more writes at all; every partition may then be read. Idempotent.
    pub fn finish(&self) -> Result<(), Error> {
        self.shared.lock().finish()
    }

    /// Takes `partition` for reading, exactly once, after it is sealed or the buffer finished
    /// ([`subscribe`](Self::subscribe) reads it while it is written).
    ///
    /// The reader yields the partition's batches in write order (per producer); a partition that
    /// got no data reads as empty. Memory goes back to the pool as the reader hands batches over.
    ///
    /// Spilled segments come first, in spill order, then batches in memory, so each producer's
    /// write order holds across spills. A read racing a spill of the same partition takes the
    /// batches being spilled back from memory; the spill's copy is discarded.
    pub fn read(&self, partition: u32) -> Result<PartitionReader, Error> {
        self.shared.check_partition(partition)?;
        let taken = self
            .shared
            .with_lanes(|state, lanes| state.take_for_read(partition, lanes))?;
        Ok(PartitionReader::new(Arc::clone(&self.shared), taken))
    }

    /// Claims `partition` for a streaming read, exactly once (a later `read` or `subscribe` of
    /// it is [`Error::AlreadyRead`]): the stream yields its batches while producers still write
    /// to it, and ends once it is sealed (or the buffer finished) and everything is handed over.
    ///
    /// Guarantees:
    /// - every row written to `partition` comes out exactly once, each producer's rows in write
    ///   order: spilled segments, then stored batches, as they become available, and the open
    ///   batch (rows copied in by small writes) once the partition is sealed or the buffer
    ///   finished;
    /// - batches are as large as compaction makes them: a take never cuts an open batch of a
    ///   partition still open, so a consumer keeping up sees whole compacted batches, not each
    ///   small write (under a memory limit a subscribed partition's open batch is cut at its
    ///   share of the limit, see
    ///   [`with_compact_target_bytes`](crate::ShardBufferBuilder::with_compact_target_bytes));
    /// - what is not taken yet stays in the buffer, spillable like any partition's data: a
    ///   consumer that falls behind costs disk, not memory. Producers never wait for readers,
    ///   only for memory. A take of batches being spilled takes them from memory and voids that
    ///   spill ([`Metrics::spills_voided`]);
    /// - dropping the stream before its end (cancelling) releases what it holds and abandons
    ///   the partition: what is written to it afterwards is accepted and discarded, counted in
    ///   [`Metrics::rows_discarded`] (refusing instead would fail every scattered write that
    ///   has a row for it, so one consumer that stops early, a `LIMIT`, would fail the whole
    ///   exchange);
    /// - closing the buffer ends a waiting stream with [`Error::Closed`].
    ///
    /// Poll the stream within a tokio runtime.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use arrow_array::{Int64Array, RecordBatch};
    /// use arrow_schema::{DataType, Field, Schema};
    /// use arrow_shards::ShardBuffer;
    /// use futures::StreamExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    /// let buffer = ShardBuffer::builder(schema.clone(), 2).with_memory_limit(1 << 20).build()?;
    /// let mut stream = buffer.subscribe(0)?;
    ///
    /// let writer = buffer.clone();
    /// let producer = tokio::spawn(async move {
    ///     for k in 0..10_000i64 {
    ///         let batch = RecordBatch::try_new(
    ///             writer.schema().clone(),
    ///             vec![Arc::new(Int64Array::from(vec![k]))],
    ///         )?;
    ///         writer.write((k % 2) as u32, batch).await?;
    ///     }
    ///     writer.finish()?;
    ///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    /// });
    ///
    /// let mut rows = 0;
    /// while let Some(batch) = stream.next().await {
    ///     rows += batch?.num_rows();
    /// }
    /// producer.await?.map_err(|e| e.to_string())?;
    /// assert_eq!(rows, 5_000);
    /// buffer.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(&self, partition: u32) -> Result<SubscriptionStream, Error> {
        SubscriptionStream::new(Arc::clone(&self.shared), partition, 0)
    }

    /// [`subscribe`](Self::subscribe) with a minimum batch: a producer's open batch of the
    /// partition (each handle has its own) is also handed over (cut) once it holds `min_rows`
    /// rows, before it reaches the compaction target, and the subscription is woken when it
    /// does. For partitions that would reach
    /// the target late or never (many partitions, small tables): a consumer then gets batches
    /// of at least `min_rows` rows while producers write, instead of everything at the end.
    /// `min_rows` 0 is [`subscribe`](Self::subscribe). The last batch may be shorter.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::task::Poll;
    /// # use arrow_array::{Int64Array, RecordBatch};
    /// # use arrow_shards::ShardBuffer;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let batch = |first: i64| {
    ///     let ids = Int64Array::from_iter_values(first..first + 100);
    ///     RecordBatch::try_from_iter([("id", Arc::new(ids) as _)]).unwrap()
    /// };
    /// let buffer = ShardBuffer::builder(batch(0).schema(), 1).build()?;
    /// let mut reader = buffer.subscribe_blocking_with_min_rows(0, 250)?;
    /// for first in [0, 100, 200] {
    ///     buffer.write_blocking(0, batch(first))?;
    /// }
    /// // 300 rows in the open batch (the compaction target is 8192): past the minimum
    /// let Poll::Ready(Some(early)) = reader.try_next() else { panic!("nothing taken") };
    /// assert_eq!(early?.num_rows(), 300);
    /// buffer.finish()?;
    /// assert!(reader.next().is_none());
    /// buffer.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe_with_min_rows(
        &self,
        partition: u32,
        min_rows: usize,
    ) -> Result<SubscriptionStream, Error> {
        SubscriptionStream::new(Arc::clone(&self.shared), partition, min_rows)
    }

    /// [`subscribe`](Self::subscribe) as a blocking iterator and `RecordBatchReader`: `next`
    /// waits on the calling thread while nothing is there to take yet.
    pub fn subscribe_blocking(&self, partition: u32) -> Result<SubscriptionReader, Error> {
        SubscriptionReader::new(Arc::clone(&self.shared), partition, 0)
    }

    /// [`subscribe_with_min_rows`](Self::subscribe_with_min_rows) as a blocking iterator and
    /// `RecordBatchReader`.
    pub fn subscribe_blocking_with_min_rows(
        &self,
        partition: u32,
        min_rows: usize,
    ) -> Result<SubscriptionReader, Error> {
        SubscriptionReader::new(Arc::clone(&self.shared), partition, min_rows)
    }

    /// This buffer's spiller as a [`SpillPeer`](arrow_shards_memory::SpillPeer), held weakly
    /// (it never keeps the buffer alive), for a registry that asks buffers to spill for
    /// others, such as the DataFusion integration's `SpillForOthersPool`. Buffers on a pool
    /// that keeps [`SpillPeers`](arrow_shards_memory::SpillPeers) join it themselves; this is
    /// for registries the buffer's own spill choice should not consult. `None` without a
    /// spiller (spilling off).
    pub fn spill_peer(&self) -> Option<std::sync::Weak<dyn arrow_shards_memory::SpillPeer>> {
        self.spiller.as_ref().map(|s| s.peer())
    }

    /// A snapshot of the buffer's counters.
    pub fn metrics(&self) -> Metrics {
        let state = self.shared.lock();
        self.metrics_of(&state)
    }

    fn metrics_of(&self, state: &State) -> Metrics {
        let counters = &self.shared.counters;
        let budget = self.shared.config.read_budget.as_ref();
        let mut metrics = Metrics {
            pool_reserved: self.shared.pool.reserved(),
            memory_limit: self.shared.pool.limit(),
            batches_read: counters.batches_read.load(Ordering::Relaxed),
            rows_read: counters.rows_read.load(Ordering::Relaxed),
            write_wait: Duration::from_nanos(counters.write_wait_nanos.load(Ordering::Relaxed)),
            lock_wait: Duration::from_nanos(counters.lock_wait_nanos.load(Ordering::Relaxed)),
            read_wait: budget.map_or(Duration::ZERO, |b| b.waited()),
            read_overdrafts: budget.map_or(0, |b| b.overdrafts()),
            ..self.spill_metrics()
        };
        state.fill_metrics(&mut metrics);
        metrics
    }

    fn spill_metrics(&self) -> Metrics {
        let Some(side) = &self.shared.spill else {
            return Metrics::default();
        };
        let m = side.dir.metrics();
        let overflow = &side.overflow;
        Metrics {
            overflow_runs: overflow.runs.load(Ordering::Relaxed),
            overflow_bytes_written: overflow.bytes_written.load(Ordering::Relaxed),
            overflow_spill_time: Duration::from_nanos(overflow.write_nanos.load(Ordering::Relaxed)),
            bytes_on_disk: m.bytes_on_disk,
            bytes_written_to_disk: m.bytes_written,
            spill_runs: m.runs,
            spill_files: m.files_created,
            spill_time: m.write_time,
            spill_read_time: m.read_time,
            ..Metrics::default()
        }
    }

    /// Per-partition sizes in memory and on disk (a scan of all partitions: for diagnostics).
    pub fn partition_sizes(&self) -> Vec<PartitionSize> {
        self.shared.lock().partition_sizes()
    }

    /// Waits until every spill round asked for so far is on disk (or has failed): a barrier for
    /// tests and for callers that want memory back before going on. Returns at once without
    /// spilling. Blocks the thread: in async code use
    /// [`spills_done`](Self::spills_done).
    pub fn wait_for_spills(&self) {
        if let Some(done) = self.spiller.as_ref().and_then(|s| s.barrier()) {
            let _ = done.blocking_recv();
        }
    }

    /// [`wait_for_spills`](Self::wait_for_spills) without blocking the runtime thread.
    pub async fn spills_done(&self) {
        if let Some(done) = self.spiller.as_ref().and_then(|s| s.barrier()) {
            let _ = done.await;
        }
    }

    /// [`close`](Self::close) on tokio's blocking threads, so that waiting for the spiller to
    /// stop and removing the spill files never blocks a runtime worker. Needs a tokio runtime.
    pub async fn close_async(&self) -> Result<Metrics, Error> {
        let buffer = self.clone();
        match tokio::task::spawn_blocking(move || buffer.close()).await {
            Ok(result) => result,
            Err(_) => Err(Error::Internal("close panicked")),
        }
    }

    /// Shuts the buffer: stops the spiller (after the round it is on), refuses everything
    /// afterwards, drops batches nobody read, removes the spill directory, and returns the final
    /// metrics after checking that the reservation matches the bytes held (a mismatch is
    /// [`Error::AccountingMismatch`], a bug). Writers waiting for memory are woken and refused
    /// with [`Error::Closed`], their batch handed back. If a spill failed, its error is returned
    /// instead, after the same clean-up. Readers already handed out keep their memory batches;
    /// their segments not yet read fail with an I/O error naming the removed file. Closing twice
    /// is harmless.
    ///
    /// It waits for the spiller thread to finish its round and does file I/O: in async code use
    /// [`close_async`](Self::close_async). Dropping the last handle without closing stops the
    /// spiller too: outside an async runtime the drop waits for its round, so the spill directory
    /// is gone when the drop returns; inside a tokio runtime it never blocks, and the directory
    /// is removed when the spiller thread lets go of the buffer, after its round.
    pub fn close(&self) -> Result<Metrics, Error> {
        if let Some(spiller) = &self.spiller {
            spiller.stop();
        }
        let (metrics, drained, spill_error) = self.shared.with_lanes(|state, lanes| {
            state.check_balance()?;
            let metrics = self.metrics_of(state);
            let (drained, spill_error) = state.close(lanes);
            Ok::<_, Error>((metrics, drained, spill_error))
        })?;
        drop(drained);
        // Writers waiting for room must wake up to see `closed` and take their batch back, even
        // when this buffer released nothing (its pool is full of another buffer's batches).
        self.shared.pool.release_signal().notify();
        if let Some(side) = &self.shared.spill {
            side.dir.close().map_err(|e| Error::Spill(Arc::new(e)))?;
        }
        match spill_error {
            Some(error) => Err(Error::Spill(error)),
            None => Ok(metrics),
        }
    }
}
