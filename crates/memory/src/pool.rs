//! Memory pools: where reservations take their bytes from.
//!
//! # Locking
//! Pools here are lock-free (one atomic for reserved bytes, one for the peak); the only locks are
//! the [`ReleaseSignal`]'s epoch, taken on release, and the [`SpillPeers`] member list, a leaf
//! lock taken when a buffer joins or looks for the largest partition across buffers.

use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{MemoryExhausted, ReleaseSignal, SpillPeers};

/// A budget shared by everything that holds Arrow data for one or more shuffles.
///
/// Implement it to plug an engine's own memory manager in. `shrink` must call
/// `release_signal().notify()` so that waiting writers wake up.
pub trait MemoryPool: Debug + Send + Sync {
    /// Reserves `bytes` or refuses without changing anything.
    fn try_grow(&self, bytes: usize) -> Result<(), MemoryExhausted>;
    /// Reserves `bytes` even past the limit. Used only where refusing would lose data or stall
    /// the only path that frees memory (for example a read decoding one segment); every caller
    /// documents its bound.
    fn grow(&self, bytes: usize);
    /// Gives `bytes` back and wakes waiters.
    fn shrink(&self, bytes: usize);
    /// Bytes reserved right now.
    fn reserved(&self) -> usize;
    /// The most bytes ever reserved at once.
    fn peak(&self) -> usize;
    /// The limit, or `None` for an unbounded pool.
    fn limit(&self) -> Option<usize>;
    /// Fired whenever reserved bytes go down.
    fn release_signal(&self) -> &ReleaseSignal;
    /// The members that can spill on this pool, if it keeps them: buffers sharing it then spill
    /// the largest partition across all of them. `None` (the default): each buffer spills only
    /// its own partitions.
    fn spill_peers(&self) -> Option<&SpillPeers> {
        None
    }
}

/// Counts reserved bytes and their peak; shared by both pools here.
#[derive(Debug, Default)]
struct Counter {
    reserved: AtomicUsize,
    peak: AtomicUsize,
    signal: ReleaseSignal,
    peers: SpillPeers,
}

impl Counter {
    fn grow(&self, bytes: usize) {
        let now = self.reserved.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::AcqRel);
    }

    fn try_grow(&self, bytes: usize, limit: usize) -> Result<(), MemoryExhausted> {
        let mut current = self.reserved.load(Ordering::Acquire);
        loop {
            let new = current
                .checked_add(bytes)
                .filter(|new| *new <= limit)
                .ok_or(MemoryExhausted::new(bytes, current, limit))?;
            match self.reserved.compare_exchange_weak(
                current,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(new, Ordering::AcqRel);
                    return Ok(());
                }
                Err(actual) => current = actual,
            }
        }
    }

    fn shrink(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let before = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                Some(r.saturating_sub(bytes))
            })
            .unwrap_or_else(|r| r);
        debug_assert!(
            before >= bytes,
            "pool shrunk by {bytes} with only {before} reserved"
        );
        self.signal.notify();
    }
}

/// The [`MemoryPool`] methods both pools answer from their [`Counter`] alone (a `counter` field).
macro_rules! counted_methods {
    () => {
        fn grow(&self, bytes: usize) {
            self.counter.grow(bytes)
        }
        fn shrink(&self, bytes: usize) {
            self.counter.shrink(bytes)
        }
        fn reserved(&self) -> usize {
            self.counter.reserved.load(Ordering::Acquire)
        }
        fn peak(&self) -> usize {
            self.counter.peak.load(Ordering::Acquire)
        }
        fn release_signal(&self) -> &ReleaseSignal {
            &self.counter.signal
        }
        fn spill_peers(&self) -> Option<&SpillPeers> {
            Some(&self.counter.peers)
        }
    };
}

/// A pool that refuses reservations past a fixed limit.
#[derive(Debug)]
pub struct BoundedPool {
    limit: usize,
    counter: Counter,
}

impl BoundedPool {
    /// A pool of `limit` bytes. A limit of 0 refuses every non-empty reservation.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            counter: Counter::default(),
        }
    }
}

impl MemoryPool for BoundedPool {
    fn try_grow(&self, bytes: usize) -> Result<(), MemoryExhausted> {
        self.counter.try_grow(bytes, self.limit)
    }
    counted_methods!();
    fn limit(&self) -> Option<usize> {
        Some(self.limit)
    }
}

/// A pool that never refuses but still counts, so metrics and the accounting check work.
#[derive(Debug, Default)]
pub struct UnboundedPool {
    counter: Counter,
}

impl UnboundedPool {
    /// A new, empty pool.
    pub fn new() -> Self {
        Self::default()
    }
}

impl MemoryPool for UnboundedPool {
    fn try_grow(&self, bytes: usize) -> Result<(), MemoryExhausted> {
        self.counter.grow(bytes);
        Ok(())
    }
    counted_methods!();
    fn limit(&self) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_refuses_past_limit_and_reports_numbers() {
        let pool = BoundedPool::new(100);
        pool.try_grow(60).unwrap();
        let err = pool.try_grow(41).unwrap_err();
        assert_eq!(err, MemoryExhausted::new(41, 60, 100));
        assert_eq!(pool.reserved(), 60);
        pool.try_grow(40).unwrap();
        assert_eq!(pool.reserved(), 100);
        pool.shrink(100);
        assert_eq!(pool.reserved(), 0);
        assert_eq!(pool.peak(), 100);
    }

    #[test]
    fn zero_limit_refuses_everything_but_zero() {
        let pool = BoundedPool::new(0);
        pool.try_grow(0).unwrap();
        assert!(pool.try_grow(1).is_err());
    }

    #[test]
    fn forced_grow_may_pass_the_limit() {
        let pool = BoundedPool::new(10);
        pool.grow(20);
        assert_eq!(pool.reserved(), 20);
        assert!(pool.try_grow(1).is_err());
    }

    #[test]
    fn shrink_fires_the_release_signal() {
        let pool = UnboundedPool::new();
        pool.try_grow(5).unwrap();
        let seen = pool.release_signal().epoch();
        pool.shrink(5);
        assert_ne!(pool.release_signal().epoch(), seen);
    }

    #[test]
    fn concurrent_try_grow_never_passes_the_limit() {
        let pool = std::sync::Arc::new(BoundedPool::new(1000));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let pool = pool.clone();
                std::thread::spawn(move || (0..1000).filter(|_| pool.try_grow(7).is_ok()).count())
            })
            .collect();
        let granted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(granted, 1000 / 7);
        assert!(pool.peak() <= 1000);
    }
}
