//! What every handle of a buffer, its readers and its spiller thread share: the schema, the
//! pool, the settings, the state behind its lock, the counters kept outside it, the spill side.
//!
//! # Locking
//! `state` is the buffer's one lock (see [`crate::state`]); `counters` are atomics updated
//! without it. Lock order: `State`, then the pool's release signal (inside `MemoryPool::shrink`).
//! Subscribers a change concerns are woken after the lock is let go ([`StateGuard`]'s drop),
//! never under it. A lock that is contended is timed ([`Shared::lock`]: `try_lock` first, so an
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
use crate::state::State;
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
    pub(crate) counters: Counters,
    pub(crate) spill: Option<SpillSide>,
}

/// Counters updated outside the state lock.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) batches_read: AtomicU64,
    pub(crate) rows_read: AtomicU64,
    pub(crate) write_wait_nanos: AtomicU64,
    /// Time spent waiting for the state lock while another thread held it.
    pub(crate) lock_wait_nanos: AtomicU64,
}

impl Shared {
    pub(crate) fn lock(&self) -> StateGuard<'_> {
        // A panic under the lock cannot leave State half-updated in a way that loses batches:
        // every mutation is a push or a take; keep serving rather than poisoning every handle.
        let guard = match self.state.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // contended: time the wait (an uncontended lock costs no clock read)
                let started = Instant::now();
                let guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                let waited = started.elapsed().as_nanos() as u64;
                self.counters
                    .lock_wait_nanos
                    .fetch_add(waited, Ordering::Relaxed);
                guard
            }
        };
        StateGuard(Some(guard))
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
