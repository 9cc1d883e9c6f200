//! [`ReadSlots`]: a bound on how many segment reads run at once, shared by many streams.

use std::fmt;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many segment reads may run at once across every [`MergeStream`](crate::MergeStream)
/// given the same slots (see [`MergeOptions::with_read_slots`](crate::MergeOptions::with_read_slots)).
///
/// A stream's read waits for a slot before it starts on a blocking thread and gives it back
/// when the segment is read and decoded, before the batches are handed over; so a slot is never
/// held while a consumer is slow, and streams cannot deadlock on slots. Without slots, each
/// stream starts its reads at once: a thousand streams polled together then run up to a
/// thousand blocking threads, each decoding into its own allocator arena (see
/// docs/datafusion.md for what that costs in resident memory). Cloning shares the slots.
///
/// ```
/// use arrow_shards_merge::ReadSlots;
///
/// let slots = ReadSlots::new(4);
/// let shared = slots.clone();
/// assert_eq!(shared.capacity(), 4);
/// assert_eq!(slots.available(), 4);
/// assert_eq!(slots, shared); // the same slots
/// assert_ne!(slots, ReadSlots::new(4));
/// ```
#[derive(Clone)]
pub struct ReadSlots {
    semaphore: Arc<Semaphore>,
    capacity: usize,
}

impl ReadSlots {
    /// `capacity` reads at once; at least one (0 is taken as 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            semaphore: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// The most reads that run at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slots free now (a snapshot: other streams take and give back slots concurrently).
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Waits for a slot; the slot is given back when the permit is dropped. `None` only if
    /// the semaphore were closed, which it never is; the read then goes ahead without a slot
    /// rather than failing the merge.
    pub(crate) async fn acquire(self) -> Option<OwnedSemaphorePermit> {
        self.semaphore.acquire_owned().await.ok()
    }
}

impl PartialEq for ReadSlots {
    /// Two `ReadSlots` are equal when they are the same slots (clones of one another).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.semaphore, &other.semaphore)
    }
}

impl Eq for ReadSlots {}

impl fmt::Debug for ReadSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadSlots")
            .field("capacity", &self.capacity)
            .field("available", &self.available())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_shards_memory::{MemoryPool, UnboundedPool};
    use arrow_shards_spill::{SpillDir, SpillOptions};
    use futures::StreamExt;

    use super::ReadSlots;
    use crate::{MergeOptions, MergeStream, Merger, PartitionSources};

    fn spilled_stream(
        dir: &Arc<SpillDir>,
        pool: &Arc<dyn MemoryPool>,
        slots: &ReadSlots,
    ) -> MergeStream {
        let ids = Int64Array::from_iter_values(0..1000);
        let batch = RecordBatch::try_from_iter([("id", Arc::new(ids) as _)]).unwrap();
        let mut run = dir.run_writer(batch.schema(), SpillOptions::default());
        run.append(1, std::slice::from_ref(&batch)).unwrap();
        let sources = PartitionSources::new(batch.schema()).with_segments(run.finish().unwrap());
        let options = MergeOptions::new()
            .with_read_ahead(0)
            .with_read_slots(slots.clone());
        Merger::new(sources, options, Arc::clone(pool)).into_stream()
    }

    /// Waits (polling, no fixed sleep) until `done` holds; fails after a minute.
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..60_000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("condition never held");
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_read_starts_only_once_a_slot_is_free() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SpillDir::create(tmp.path()).unwrap();
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedPool::new());
        let slots = ReadSlots::new(1);
        let mut stream = spilled_stream(&dir, &pool, &slots);
        runtime().block_on(async {
            let held = slots.clone().acquire().await;
            let task = tokio::spawn(async move { stream.next().await.map(|b| b.unwrap()) });
            // queued: its segment is reserved, but it cannot read without the slot
            until(|| pool.reserved() > 0 || task.is_finished()).await;
            for _ in 0..50 {
                tokio::time::sleep(Duration::from_millis(2)).await;
                assert!(!task.is_finished(), "the read ran without a slot");
            }
            assert_eq!(slots.available(), 0);
            drop(held);
            let batch = task.await.unwrap().unwrap();
            assert_eq!(batch.num_rows(), 1000);
            until(|| slots.available() == 1).await;
        });
        dir.close().unwrap();
    }

    #[test]
    fn a_stream_dropped_while_waiting_for_a_slot_releases_its_segment() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SpillDir::create(tmp.path()).unwrap();
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedPool::new());
        let slots = ReadSlots::new(1);
        let mut stream = spilled_stream(&dir, &pool, &slots);
        runtime().block_on(async {
            let held = slots.clone().acquire().await;
            // one poll queues the read, which then waits for the slot
            assert!(futures::poll!(stream.next()).is_pending());
            assert!(pool.reserved() > 0);
            drop(stream);
            until(|| pool.reserved() == 0).await;
            drop(held);
            assert_eq!(slots.available(), 1);
        });
        dir.close().unwrap();
    }
}
