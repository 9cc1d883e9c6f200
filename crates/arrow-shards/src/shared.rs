//! What every handle of a buffer, its readers and its spiller thread share: the schema, the
//! pool, the settings, the state behind its lock, the counters kept outside it, the spill side.
//!
//! # Locking
//! `state` is the buffer's ledger lock (see [`crate::state`]); each producer's lane has its own
//! mutex ([`crate::lanes`]); `counters` are atomics updated without any. Lock order: lanes (a
//! writer its own, [`Shared::with_lanes`] every one in registry order), then `State`, then the
//! pool's release signal (inside `MemoryPool::shrink`).
//! Subscribers a change concerns are woken after the lock is let go ([`StateGuard`]'s drop),
//! never under it. A lock (state or lane) that is contended is timed (`try_lock` first, so an
//! uncontended one reads no clock) into `counters.lock_wait_nanos` (`Metrics::lock_wait`).

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;

use arrow_schema::SchemaRef;
use arrow_shards_memory::MemoryPool;

use crate::compact::CompactConfig;
use crate::config::Config;
use crate::error::Error;
use crate::spiller::side::SpillSide;
use crate::state::{Lane, Lanes, State};
use std::sync::Arc;

/// State shared by every clone of a buffer and by its readers.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) schema: SchemaRef,
    pub(crate) num_partitions: u32,
    pub(crate) pool: Arc<dyn MemoryPool>,
    pub(crate) config: Config,
    /// `config.compact`, read on every write.
    pub(crate) compact: Option<CompactConfig>,
    pub(crate) state: Mutex<State>,
    /// Every producer's open batches (locked before `state`, see [`crate::lanes`]).
    pub(crate) lanes: Registry,
    pub(crate) counters: Counters,
    pub(crate) spill: Option<SpillSide>,
}

/// Counters updated outside the state lock.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) batches_read: AtomicU64,
    pub(crate) rows_read: AtomicU64,
    pub(crate) write_wait_nanos: AtomicU64,
    /// Time spent waiting for the state lock or a lane while another thread held it.
    pub(crate) lock_wait_nanos: AtomicU64,
}

impl Shared {
    pub(crate) fn lock(&self) -> StateGuard<'_> {
        StateGuard(Some(self.timed(&self.state)))
    }

    /// Locks `lane` (a writer's own; see [`crate::lanes`] for the order).
    pub(crate) fn lock_lane<'a>(&self, lane: &'a Mutex<Lane>) -> MutexGuard<'a, Lane> {
        self.timed(lane)
    }

    /// Locks every lane, then the state, and runs `f` with them: for whoever needs the open
    /// batches of every producer (spill rounds, reads, takes, close). The state is let go
    /// (and subscribers woken) before the lanes.
    ///
    /// A lane registered after the snapshot of the registry was taken may have been charged
    /// and booked before the state lock was had (its writer needs only its own lane and the
    /// state): `f` would then miss its open batches (a spill round zeroed a partition's bytes
    /// while such a lane still held an open batch of it). So once the state is held, the
    /// registry is checked again, and the lanes are taken anew if it changed. A lane registered
    /// after that holds nothing yet: its first charge needs the state.
    pub(crate) fn with_lanes<R>(&self, f: impl FnOnce(&mut State, Lanes<'_, '_>) -> R) -> R {
        loop {
            let (generation, cells) = self.lanes.snapshot();
            let mut lanes: Vec<MutexGuard<'_, Lane>> =
                cells.iter().map(|l| self.timed(l)).collect();
            let mut state = self.lock();
            if self.lanes.generation() != generation {
                drop(state);
                drop(lanes);
                continue;
            }
            let result = f(&mut state, &mut lanes);
            drop(state);
            drop(lanes);
            return result;
        }
    }

    /// Locks `mutex`, timing the wait into `lock_wait_nanos` if another thread holds it (an
    /// uncontended lock reads no clock). A panic under a lock cannot leave the state
    /// half-updated in a way that loses batches (every mutation is a push or a take): a
    /// poisoned lock keeps serving rather than failing every handle.
    fn timed<'a, T>(&self, mutex: &'a Mutex<T>) -> MutexGuard<'a, T> {
        match mutex.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let started = Instant::now();
                let guard = mutex.lock().unwrap_or_else(PoisonError::into_inner);
                let waited = started.elapsed().as_nanos() as u64;
                self.counters
                    .lock_wait_nanos
                    .fetch_add(waited, Ordering::Relaxed);
                guard
            }
        }
    }

    pub(crate) fn check_partition(&self, partition: u32) -> Result<(), Error> {
        if partition < self.num_partitions {
            Ok(())
        } else {
            Err(Error::PartitionOutOfRange {
                partition,
                num_partitions: self.num_partitions,
            })
        }
    }
}

/// A lane behind its mutex, shared by its handle and the registry.
pub(crate) type LaneCell = Arc<Mutex<Lane>>;

/// The lanes of a buffer, in the order they are locked together, and a count of the changes
/// to that list (so that [`Shared::with_lanes`] can tell that its snapshot is still the list).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    lanes: Mutex<(u64, Vec<LaneCell>)>,
}

impl Registry {
    fn list(&self) -> MutexGuard<'_, (u64, Vec<LaneCell>)> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lanes registered now, with the count of changes so far.
    pub(crate) fn snapshot(&self) -> (u64, Vec<LaneCell>) {
        let list = self.list();
        (list.0, list.1.clone())
    }

    /// The count of changes so far.
    pub(crate) fn generation(&self) -> u64 {
        self.list().0
    }

    pub(crate) fn add(&self, lane: &LaneCell) {
        let mut list = self.list();
        list.0 += 1;
        list.1.push(Arc::clone(lane));
    }

    pub(crate) fn remove(&self, lane: &LaneCell) {
        let mut list = self.list();
        list.0 += 1;
        list.1.retain(|l| !Arc::ptr_eq(l, lane));
    }
}

/// The buffer's lock, held: derefs to the [`State`]. Dropping it unlocks, then wakes the
/// subscribers that the changes made under it concern (`State::take_wakes`), so that no waker
/// runs under the lock.
pub(crate) struct StateGuard<'a>(Option<MutexGuard<'a, State>>);

impl Deref for StateGuard<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        self.0.as_deref().expect("held until dropped")
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.0.as_deref_mut().expect("held until dropped")
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let Some(mut guard) = self.0.take() else {
            return;
        };
        let wakes = guard.take_wakes();
        drop(guard);
        for wake in wakes {
            wake.notify_one();
        }
    }
}
