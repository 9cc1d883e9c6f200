//! [`ReadBudget`]: segment reads that wait for room in the pool instead of forcing it, with one
//! overdraft at a time so that some reader always makes progress.

use std::fmt;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arrow_shards_memory::{MemoryPool, MemoryReservation, SpillPeer};
use futures::future::{Either, select};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::MergeError;

/// A budget for decoding spilled segments, shared by every reader of a buffer (or of a pool):
/// before a merge reads the segment it needs, it reserves the segment's `memory_bytes` from
/// the pool with `try_grow`. If they do not fit, the read takes the budget's one *overdraft*
/// (a forced grow) if nobody holds it, or else waits: it asks the pool's spill peers (buffers
/// holding spillable data) to make room, and waits for the pool to release memory (other
/// readers handing batches over, a spill completing). The overdraft is given back when the
/// segment it paid for is used up, so at most one segment at a time is decoded past the
/// limit, and its reader always goes on: no deadlock. A wait in which the pool releases nothing
/// for `stall_timeout` ends in [`MergeError::ReadStalled`].
///
/// Reads ahead of need never wait and never overdraw: they start only if `try_grow` succeeds.
/// Cloning shares the budget.
///
/// ```
/// use std::time::Duration;
/// use arrow_shards_merge::{MergeOptions, ReadBudget};
///
/// let budget = ReadBudget::new(Duration::from_secs(60));
/// let options = MergeOptions::new().with_read_budget(budget.clone());
/// assert_eq!(options.read_budget(), Some(&budget));
/// assert_eq!(budget.overdrafts(), 0);
/// ```
#[derive(Clone)]
pub struct ReadBudget {
    inner: Arc<Inner>,
}

struct Inner {
    overdraft: Arc<Semaphore>,
    stall_timeout: Duration,
    waited_nanos: AtomicU64,
    overdrafts: AtomicU64,
}

/// The one overdraft, held while the segment it paid for is decoded and handed over.
pub(crate) struct Overdraft {
    permit: Option<OwnedSemaphorePermit>,
    pool: Arc<dyn MemoryPool>,
}

impl Drop for Overdraft {
    fn drop(&mut self) {
        // Readers waiting for room may now take the overdraft: wake them as a release would.
        // The permit goes back first. A field is dropped only after this body: signalled before
        // it, a reader could take the new epoch, still find the permit held, and wait for a
        // release that had already come; with the writers done every reader waited so.
        drop(self.permit.take());
        self.pool.release_signal().notify();
    }
}

impl fmt::Debug for Overdraft {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Overdraft")
    }
}

/// A reservation for a segment read, with the overdraft if it needed it.
pub(crate) type Reserved = (MemoryReservation, Option<Overdraft>);

impl ReadBudget {
    /// A budget whose waits fail after `stall_timeout` without any memory released.
    pub fn new(stall_timeout: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                overdraft: Arc::new(Semaphore::new(1)),
                stall_timeout,
                waited_nanos: AtomicU64::new(0),
                overdrafts: AtomicU64::new(0),
            }),
        }
    }

    /// How long a read waits with nothing released before it fails.
    pub fn stall_timeout(&self) -> Duration {
        self.inner.stall_timeout
    }

    /// Total time reads waited for memory.
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.inner.waited_nanos.load(Ordering::Relaxed))
    }

    /// Reads that took the overdraft (a forced grow past the limit).
    pub fn overdrafts(&self) -> u64 {
        self.inner.overdrafts.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` for a read at once if they fit, or with the overdraft if it is free.
    fn attempt(&self, pool: &Arc<dyn MemoryPool>, bytes: usize) -> Option<Reserved> {
        let mut reservation = MemoryReservation::new(pool);
        if reservation.try_grow(bytes).is_ok() {
            return Some((reservation, None));
        }
        let permit = Arc::clone(&self.inner.overdraft).try_acquire_owned().ok()?;
        reservation.grow(bytes);
        self.inner.overdrafts.fetch_add(1, Ordering::Relaxed);
        let pool = Arc::clone(pool);
        Some((
            reservation,
            Some(Overdraft {
                permit: Some(permit),
                pool,
            }),
        ))
    }

    /// Reserves `bytes` for the read a merge needs, waiting as a task (no thread) while there is
    /// no room and the overdraft is taken (see the type's docs). The stream waits here *before*
    /// it takes a read slot: a read holding a slot never waits for memory, so a slot always
    /// comes back, and a read ahead already paid for (which needs only a slot) always runs. CI
    /// found the stall the other order makes (four streams through one slot, the slot held by a
    /// read waiting for room that the queued read-aheads held).
    ///
    /// The stall timeout runs on `futures-timer`'s own thread, so the wait needs no tokio time
    /// driver.
    pub(crate) async fn reserve(
        &self,
        pool: &Arc<dyn MemoryPool>,
        bytes: usize,
    ) -> Result<Reserved, MergeError> {
        let signal = pool.release_signal();
        let mut waiting = Waiting::new(self);
        loop {
            // Enabled first: a release between the attempt and the wait is not missed.
            let mut released = pin!(signal.notified());
            released.as_mut().enable();
            if let Some(reserved) = self.try_now(pool, bytes, &waiting) {
                return Ok(reserved);
            }
            let Some(left) = waiting.left() else {
                waiting.count();
                return Err(self.stalled(pool, bytes));
            };
            let timer = pin!(futures_timer::Delay::new(left));
            if let Either::Left(_) = select(released, timer).await {
                waiting.released();
            }
        }
    }

    /// Reserves `bytes` for the read a merge needs, waiting on the calling thread while there
    /// is no room and the overdraft is taken (see the type's docs).
    pub(crate) fn reserve_blocking(
        &self,
        pool: &Arc<dyn MemoryPool>,
        bytes: usize,
    ) -> Result<Reserved, MergeError> {
        let signal = pool.release_signal();
        let mut waiting = Waiting::new(self);
        loop {
            // Epoch first: a release between the attempt and the wait is not missed.
            let seen = signal.epoch();
            if let Some(reserved) = self.try_now(pool, bytes, &waiting) {
                return Ok(reserved);
            }
            let deadline = waiting.deadline();
            if signal.wait_blocking(seen, Some(deadline)) {
                waiting.released();
            } else {
                waiting.count();
                return Err(self.stalled(pool, bytes));
            }
        }
    }

    /// One try of a wait: the reservation if it can be had now (the wait so far counted), else
    /// `None` after asking the pool's spill peers for room.
    fn try_now(
        &self,
        pool: &Arc<dyn MemoryPool>,
        bytes: usize,
        waiting: &Waiting<'_>,
    ) -> Option<Reserved> {
        let reserved = self.attempt(pool, bytes);
        match reserved {
            Some(_) => waiting.count(),
            None => ask_for_room(pool, bytes),
        }
        reserved
    }

    fn stalled(&self, pool: &Arc<dyn MemoryPool>, bytes: usize) -> MergeError {
        MergeError::ReadStalled {
            bytes,
            reserved: pool.reserved(),
            limit: pool.limit().unwrap_or(usize::MAX),
            stalled: self.inner.stall_timeout,
        }
    }
}

/// One read's wait: when it began (for the `waited` metric) and when it stalls, which every
/// release pushes back by the stall timeout.
struct Waiting<'a> {
    budget: &'a ReadBudget,
    since: Option<Instant>,
    deadline: Instant,
}

impl<'a> Waiting<'a> {
    fn new(budget: &'a ReadBudget) -> Self {
        Self {
            budget,
            since: None,
            deadline: Instant::now() + budget.inner.stall_timeout,
        }
    }

    /// The deadline of the wait about to start (which starts the clock of `waited`).
    fn deadline(&mut self) -> Instant {
        self.since.get_or_insert_with(Instant::now);
        self.deadline
    }

    /// Time left before the wait about to start stalls; `None` if it has.
    fn left(&mut self) -> Option<Duration> {
        let left = self.deadline().saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Memory was released: the stall clock starts again.
    fn released(&mut self) {
        self.deadline = Instant::now() + self.budget.inner.stall_timeout;
    }

    /// Adds the time waited to the budget's total.
    fn count(&self) {
        let waited = self.since.map_or(0, |s| s.elapsed().as_nanos());
        let waited = u64::try_from(waited).unwrap_or(u64::MAX);
        self.budget
            .inner
            .waited_nanos
            .fetch_add(waited, Ordering::Relaxed);
    }
}

/// Asks the pool's member holding the largest spillable partition to make room for `bytes`.
fn ask_for_room(pool: &Arc<dyn MemoryPool>, bytes: usize) {
    let Some(peers) = pool.spill_peers() else {
        return;
    };
    let nobody: Weak<dyn SpillPeer> = Weak::<NoPeer>::new();
    if let Some((_, peer)) = peers.largest_other(&nobody) {
        peer.request_spill(bytes);
    }
}

/// A member no peer is: what a reader passes to ask every member.
#[derive(Debug)]
struct NoPeer;

impl SpillPeer for NoPeer {
    fn largest_spillable(&self) -> usize {
        0
    }

    fn request_spill(&self, _bytes: usize) {}
}

impl PartialEq for ReadBudget {
    /// Two budgets are equal when they are the same budget (clones of one another).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for ReadBudget {}

impl fmt::Debug for ReadBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadBudget")
            .field("stall_timeout", &self.inner.stall_timeout)
            .field(
                "overdraft_free",
                &(self.inner.overdraft.available_permits() > 0),
            )
            .field("overdrafts", &self.overdrafts())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arrow_shards_memory::{BoundedPool, MemoryPool, MemoryReservation};

    use super::ReadBudget;
    use crate::MergeError;

    /// A runtime without tokio's time driver, as an engine may build one.
    fn runtime_without_timers() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn an_async_read_takes_the_free_overdraft_then_the_next_waits_for_a_release() {
        let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(100));
        let mut other = MemoryReservation::new(&pool);
        other.grow(100);
        let budget = ReadBudget::new(Duration::from_secs(60));
        runtime_without_timers().block_on(async {
            let (first, overdraft) = budget.reserve(&pool, 40).await.unwrap();
            assert!(overdraft.is_some());
            assert_eq!(first.size(), 40);
            // The overdraft is taken and the pool is full: the second read waits, as a task,
            // until memory is released.
            let mut second = std::pin::pin!(budget.reserve(&pool, 40));
            assert!(futures::poll!(second.as_mut()).is_pending());
            other.shrink(100);
            let (reserved, overdraft) = second.await.unwrap();
            assert!(
                overdraft.is_none(),
                "room was released: no overdraft needed"
            );
            assert_eq!(reserved.size(), 40);
            drop(overdraft);
        });
        assert_eq!(budget.overdrafts(), 1);
    }

    #[test]
    fn an_async_read_with_nothing_released_stalls_into_an_error_without_a_time_driver() {
        let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(100));
        let mut other = MemoryReservation::new(&pool);
        other.grow(100);
        let budget = ReadBudget::new(Duration::from_millis(20));
        runtime_without_timers().block_on(async {
            let held = budget.reserve(&pool, 10).await.unwrap();
            let error = budget.reserve(&pool, 10).await.unwrap_err();
            match error {
                MergeError::ReadStalled {
                    bytes,
                    reserved,
                    limit,
                    ..
                } => assert_eq!((bytes, reserved, limit), (10, 110, 100)),
                other => panic!("expected ReadStalled, got {other}"),
            }
            drop(held);
        });
        assert!(budget.waited() > Duration::ZERO);
    }

    /// A pool that notes, each time its release signal is taken, whether the budget's
    /// overdraft is free.
    #[derive(Debug)]
    struct Watching {
        pool: BoundedPool,
        budget: std::sync::OnceLock<ReadBudget>,
        free_at_signal: std::sync::Mutex<Vec<usize>>,
    }

    impl MemoryPool for Watching {
        fn try_grow(&self, bytes: usize) -> Result<(), arrow_shards_memory::MemoryExhausted> {
            self.pool.try_grow(bytes)
        }
        fn grow(&self, bytes: usize) {
            self.pool.grow(bytes)
        }
        fn shrink(&self, bytes: usize) {
            self.pool.shrink(bytes)
        }
        fn reserved(&self) -> usize {
            self.pool.reserved()
        }
        fn peak(&self) -> usize {
            self.pool.peak()
        }
        fn limit(&self) -> Option<usize> {
            self.pool.limit()
        }
        fn release_signal(&self) -> &arrow_shards_memory::ReleaseSignal {
            if let Some(budget) = self.budget.get() {
                let free = budget.inner.overdraft.available_permits();
                self.free_at_signal.lock().unwrap().push(free);
            }
            self.pool.release_signal()
        }
    }

    #[test]
    fn the_overdraft_is_free_before_its_return_is_signalled() {
        let watching = Arc::new(Watching {
            pool: BoundedPool::new(100),
            budget: std::sync::OnceLock::new(),
            free_at_signal: std::sync::Mutex::new(Vec::new()),
        });
        let budget = ReadBudget::new(Duration::from_secs(60));
        let pool: Arc<dyn MemoryPool> = watching.clone();
        let (reservation, overdraft) = budget.reserve_blocking(&pool, 150).unwrap();
        assert!(overdraft.is_some(), "150 bytes of 100 need the overdraft");
        watching.budget.set(budget.clone()).unwrap();
        drop(overdraft);
        // A reader woken by the signal must find the overdraft free, or it waits for a release
        // that already came.
        assert_eq!(*watching.free_at_signal.lock().unwrap(), [1]);
        drop(reservation);
    }
}
