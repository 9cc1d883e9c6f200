//! [`ReadBudget`]: segment reads that wait for room in the pool instead of forcing it, with one
//! overdraft at a time so that some reader always makes progress.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arrow_shards_memory::{MemoryPool, MemoryReservation, SpillPeer};
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
    _permit: OwnedSemaphorePermit,
    pool: Arc<dyn MemoryPool>,
}

impl Drop for Overdraft {
    fn drop(&mut self) {
        // Readers waiting for room may now take the overdraft: wake them as a release would.
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
                _permit: permit,
                pool,
            }),
        ))
    }

    /// Reserves `bytes` for the read a merge needs, waiting on the calling thread while there
    /// is no room and the overdraft is taken (see the type's docs).
    pub(crate) fn reserve_blocking(
        &self,
        pool: &Arc<dyn MemoryPool>,
        bytes: usize,
    ) -> Result<Reserved, MergeError> {
        let signal = pool.release_signal();
        let mut waiting: Option<Instant> = None;
        let mut deadline = Instant::now() + self.inner.stall_timeout;
        let count_wait = |since: Option<Instant>| {
            let waited = since.map_or(0, |s| s.elapsed().as_nanos());
            let waited = u64::try_from(waited).unwrap_or(u64::MAX);
            self.inner.waited_nanos.fetch_add(waited, Ordering::Relaxed);
        };
        loop {
            // Epoch first: a release between the attempt and the wait is not missed.
            let seen = signal.epoch();
            if let Some(reserved) = self.attempt(pool, bytes) {
                count_wait(waiting);
                return Ok(reserved);
            }
            ask_for_room(pool, bytes);
            let since = *waiting.get_or_insert_with(Instant::now);
            if signal.wait_blocking(seen, Some(deadline)) {
                deadline = Instant::now() + self.inner.stall_timeout;
            } else {
                count_wait(Some(since));
                return Err(MergeError::ReadStalled {
                    bytes,
                    reserved: pool.reserved(),
                    limit: pool.limit().unwrap_or(usize::MAX),
                    stalled: self.inner.stall_timeout,
                });
            }
        }
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
