//! [`SpillForOthersPool`]: a session memory pool in which the exchanges spill for the plan's
//! other operators.
//!
//! DataFusion's pools never ask a spillable consumer to spill for another one: when an exchange
//! holds most of a `FairSpillPool`, an aggregation beside it that cannot spill is refused
//! (`ResourcesExhausted`), although the exchange could have written its partitions to disk.
//! This wrapper goes between the session and its pool: a refusal of any consumer that is not
//! an exchange's asks the exchange holding the largest spillable partition to spill (the
//! buffer's [`SpillPeer`](arrow_shards::SpillPeer) request), waits for a release, and tries
//! again; it refuses only when no exchange has anything left to spill, or once `wait` has
//! passed.
//!
//! # Locking
//! One `Mutex<HashSet<usize>>` (the exchanges' consumer ids), held only to insert, remove or
//! look up an id. The release signal's epoch lock is taken only to bump or compare it. The
//! wait for a release happens with no lock held, on the refused operator's thread: it blocks
//! that thread for as long as one spill round takes (the spill runs on the buffer's spiller
//! thread, which needs nothing from the async runtime), at most `wait`.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arrow_shards::{ReleaseSignal, ShardBuffer, SpillPeer, SpillPeers};
use datafusion::common::Result;
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation,
};

/// How long a refused operator waits, by default, for the exchanges to free room for it.
pub const DEFAULT_SPILL_FOR_OTHERS_WAIT: Duration = Duration::from_secs(10);

/// A DataFusion [`MemoryPool`] around the session's pool (say a `FairSpillPool`) in which the
/// [`ShardRepartitionExec`](crate::ShardRepartitionExec)s spill for the other operators: see
/// the module docs. Exchanges find it through the runtime's pool and join it, so it is
/// installed once, when the runtime is built.
///
/// ```
/// use std::sync::Arc;
/// use arrow_shards_datafusion::SpillForOthersPool;
/// use datafusion::execution::memory_pool::FairSpillPool;
/// use datafusion::execution::runtime_env::RuntimeEnvBuilder;
///
/// let pool = SpillForOthersPool::new(Arc::new(FairSpillPool::new(256 << 20)));
/// let runtime = RuntimeEnvBuilder::new().with_memory_pool(Arc::new(pool)).build_arc().unwrap();
/// # let _ = runtime;
/// ```
///
pub struct SpillForOthersPool {
    inner: Arc<dyn MemoryPool>,
    name: String,
    peers: SpillPeers,
    /// Consumer ids of the exchanges' bridges: their refusals go back to their buffer, which
    /// spills or waits itself.
    exchanges: Mutex<HashSet<usize>>,
    released: ReleaseSignal,
    wait: Duration,
}

impl SpillForOthersPool {
    /// Wraps `inner`; a refused operator waits up to [`DEFAULT_SPILL_FOR_OTHERS_WAIT`].
    pub fn new(inner: Arc<dyn MemoryPool>) -> Self {
        let name = format!("SpillForOthersPool({})", inner.name());
        Self {
            inner,
            name,
            peers: SpillPeers::new(),
            exchanges: Mutex::new(HashSet::new()),
            released: ReleaseSignal::new(),
            wait: DEFAULT_SPILL_FOR_OTHERS_WAIT,
        }
    }

    /// How long a refused operator waits, with nothing released, for the exchanges to spill.
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The pool wrapped.
    pub fn inner(&self) -> &Arc<dyn MemoryPool> {
        &self.inner
    }

    /// Adds `buffer` to the buffers asked to spill for others (it leaves when it closes).
    /// `ShardRepartitionExec` joins its buffer itself; call this for a buffer of your own
    /// built on a [`SessionPool`](crate::SessionPool) over this pool. The buffers are not each
    /// other's spill peers: under a `FairSpillPool` each has its own share, which only its own
    /// spill frees.
    pub fn join(&self, buffer: &ShardBuffer) {
        if let Some(peer) = buffer.spill_peer() {
            self.peers.join(peer);
        }
    }

    /// Marks `consumer` as an exchange's: its refusals are passed on as they are.
    pub(crate) fn exempt(&self, consumer: &MemoryConsumer) {
        self.ids().insert(consumer.id());
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<usize>> {
        self.exchanges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the exchange with the largest spillable partition to make room for `bytes` and
    /// waits for a release; false if no exchange has anything to spill or nothing was released
    /// by `deadline`.
    fn spill_for(&self, bytes: usize, deadline: Instant) -> bool {
        let seen = self.released.epoch();
        let nobody: std::sync::Weak<dyn SpillPeer> = std::sync::Weak::<NoPeer>::new();
        let Some((_, peer)) = self.peers.largest_other(&nobody) else {
            return false;
        };
        peer.request_spill(bytes);
        self.released.wait_blocking(seen, Some(deadline))
    }
}

impl MemoryPool for SpillForOthersPool {
    fn name(&self) -> &str {
        &self.name
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.ids().remove(&consumer.id());
        self.inner.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        self.released.notify();
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let refused = match self.inner.try_grow(reservation, additional) {
            Ok(()) => return Ok(()),
            Err(refused) => refused,
        };
        if self.ids().contains(&reservation.consumer().id()) {
            return Err(refused);
        }
        let deadline = Instant::now() + self.wait;
        let mut refused = refused;
        while self.spill_for(additional, deadline) {
            match self.inner.try_grow(reservation, additional) {
                Ok(()) => return Ok(()),
                Err(again) => refused = again,
            }
        }
        Err(refused)
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        self.inner.memory_limit()
    }
}

impl fmt::Debug for SpillForOthersPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpillForOthersPool")
            .field("inner", &self.inner.name())
            .field("exchanges", &self.peers.len())
            .field("wait", &self.wait)
            .finish()
    }
}

impl fmt::Display for SpillForOthersPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} exchanges)", self.name, self.peers.len())
    }
}

/// A member no peer is: what the pool passes to ask every exchange.
#[derive(Debug)]
struct NoPeer;

impl SpillPeer for NoPeer {
    fn largest_spillable(&self) -> usize {
        0
    }

    fn request_spill(&self, _bytes: usize) {}
}
