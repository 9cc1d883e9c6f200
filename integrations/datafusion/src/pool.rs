//! The memory pool bridge: the buffer's reservations charged to the session's `MemoryPool`.
//!
//! [`SessionPool`] implements the buffer's [`MemoryPool`] trait on top of one DataFusion
//! [`MemoryReservation`], registered with the session's pool as a *spillable* consumer (the
//! buffer spills when refused), so one limit covers DataFusion's operators and the buffer. A
//! refusal from DataFusion (`ResourcesExhausted`) becomes the buffer's [`MemoryExhausted`],
//! which the buffer answers by spilling or waiting; the buffer's own errors go back to
//! DataFusion through `errors.rs`. When the session's pool is a [`SpillForOthersPool`], the
//! bridge's consumer is exempt from the wrapper's spilling for others (the buffer answers its
//! own refusals); the exchange joins its buffer to the wrapper
//! ([`SpillForOthersPool::join`]).
//!
//! # Locking
//! None of its own: DataFusion's reservation and the session pool are atomic (or lock inside
//! their own calls), the peak is an atomic, and the release signal takes its epoch lock only
//! to notify. Nothing here does I/O or calls back into the buffer.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::spill_for_others::SpillForOthersPool;
use arrow_shards::{MemoryExhausted, MemoryPool, ReleaseSignal};
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool as SessionMemoryPool, MemoryReservation,
};

/// The buffer's view of a DataFusion session's memory pool: one registered, spillable
/// consumer whose reservation grows and shrinks with the buffer's.
///
/// ```
/// use std::sync::Arc;
/// use arrow_shards::MemoryPool;
/// use arrow_shards_datafusion::SessionPool;
/// use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool as _};
///
/// let session: Arc<dyn datafusion::execution::memory_pool::MemoryPool> =
///     Arc::new(GreedyMemoryPool::new(1000));
/// let pool = SessionPool::new(&session, "ShardRepartitionExec");
/// pool.try_grow(600).unwrap();
/// assert_eq!(session.reserved(), 600);
/// let refused = pool.try_grow(600).unwrap_err();
/// assert_eq!((refused.needed, refused.reserved, refused.limit), (600, 600, 1000));
/// pool.shrink(600);
/// assert_eq!(session.reserved(), 0);
/// ```
pub struct SessionPool {
    reservation: MemoryReservation,
    session: Arc<dyn SessionMemoryPool>,
    peak: AtomicUsize,
    signal: ReleaseSignal,
}

impl SessionPool {
    /// Registers a spillable consumer called `name` with `session` (its reservation starts
    /// empty and is freed when the bridge is dropped).
    pub fn new(session: &Arc<dyn SessionMemoryPool>, name: impl Into<String>) -> Self {
        let consumer = MemoryConsumer::new(name).with_can_spill(true);
        if let Some(others) = session.downcast_ref::<SpillForOthersPool>() {
            others.exempt(&consumer);
        }
        let reservation = consumer.register(session);
        Self {
            reservation,
            session: Arc::clone(session),
            peak: AtomicUsize::new(0),
            signal: ReleaseSignal::new(),
        }
    }

    /// The session pool's limit in bytes (`usize::MAX` when infinite or unknown).
    fn session_limit(&self) -> usize {
        match self.session.memory_limit() {
            MemoryLimit::Finite(limit) => limit,
            MemoryLimit::Infinite | MemoryLimit::Unknown => usize::MAX,
        }
    }

    fn note_peak(&self) {
        self.peak
            .fetch_max(self.reservation.size(), Ordering::AcqRel);
    }
}

impl fmt::Debug for SessionPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionPool")
            .field("consumer", &self.reservation.consumer().name())
            .field("reserved", &self.reservation.size())
            .field("session_reserved", &self.session.reserved())
            .finish()
    }
}

impl MemoryPool for SessionPool {
    fn try_grow(&self, bytes: usize) -> Result<(), MemoryExhausted> {
        // DataFusion's message (which consumers hold what) is not kept: the buffer answers a
        // refusal by spilling or waiting, and reports the bytes itself if it gives up.
        self.reservation.try_grow(bytes).map_err(|_| {
            MemoryExhausted::new(bytes, self.reservation.size(), self.session_limit())
        })?;
        self.note_peak();
        Ok(())
    }

    fn grow(&self, bytes: usize) {
        self.reservation.grow(bytes);
        self.note_peak();
    }

    fn shrink(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let bytes = bytes.min(self.reservation.size());
        self.reservation.shrink(bytes);
        self.signal.notify();
    }

    fn reserved(&self) -> usize {
        self.reservation.size()
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }

    fn limit(&self) -> Option<usize> {
        match self.session.memory_limit() {
            MemoryLimit::Finite(limit) => Some(limit),
            MemoryLimit::Infinite | MemoryLimit::Unknown => None,
        }
    }

    fn release_signal(&self) -> &ReleaseSignal {
        &self.signal
    }
}
