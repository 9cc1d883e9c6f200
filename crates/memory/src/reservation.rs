//! Reservations: bytes taken from a pool that go back when the reservation is dropped.

use std::sync::Arc;

use crate::{MemoryExhausted, MemoryPool};

/// Bytes held from a [`MemoryPool`]; every byte still held is released on drop.
#[derive(Debug)]
pub struct MemoryReservation {
    pool: Arc<dyn MemoryPool>,
    size: usize,
}

impl MemoryReservation {
    /// An empty reservation against `pool`.
    pub fn new(pool: &Arc<dyn MemoryPool>) -> Self {
        Self {
            pool: Arc::clone(pool),
            size: 0,
        }
    }

    /// Bytes this reservation holds.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The pool this reservation draws on.
    pub fn pool(&self) -> &Arc<dyn MemoryPool> {
        &self.pool
    }

    /// Takes `bytes` more, or nothing if the pool refuses.
    pub fn try_grow(&mut self, bytes: usize) -> Result<(), MemoryExhausted> {
        self.pool.try_grow(bytes)?;
        self.size += bytes;
        Ok(())
    }

    /// Takes `bytes` more even past the pool's limit (see [`MemoryPool::grow`]).
    pub fn grow(&mut self, bytes: usize) {
        self.pool.grow(bytes);
        self.size += bytes;
    }

    /// Gives back `bytes`, at most what is held. Returns what was given back.
    pub fn shrink(&mut self, bytes: usize) -> usize {
        let bytes = bytes.min(self.size);
        if bytes > 0 {
            self.size -= bytes;
            self.pool.shrink(bytes);
        }
        bytes
    }

    /// Gives everything back; returns how much that was.
    pub fn free(&mut self) -> usize {
        self.shrink(self.size)
    }

    /// Moves `bytes` (at most what is held) into a new reservation on the same pool, without
    /// touching the pool.
    pub fn split(&mut self, bytes: usize) -> MemoryReservation {
        let bytes = bytes.min(self.size);
        self.size -= bytes;
        Self {
            pool: Arc::clone(&self.pool),
            size: bytes,
        }
    }

    /// Moves everything `other` holds into `self`, without touching the pool.
    pub fn merge(&mut self, mut other: MemoryReservation) {
        self.size += std::mem::take(&mut other.size);
    }
}

impl Drop for MemoryReservation {
    fn drop(&mut self) {
        self.free();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BoundedPool;

    fn pool(limit: usize) -> Arc<dyn MemoryPool> {
        Arc::new(BoundedPool::new(limit))
    }

    #[test]
    fn drop_releases_everything() {
        let pool = pool(100);
        let mut r = MemoryReservation::new(&pool);
        r.try_grow(70).unwrap();
        assert_eq!(pool.reserved(), 70);
        drop(r);
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn refused_grow_changes_nothing() {
        let pool = pool(100);
        let mut r = MemoryReservation::new(&pool);
        r.try_grow(70).unwrap();
        assert!(r.try_grow(31).is_err());
        assert_eq!(r.size(), 70);
        assert_eq!(pool.reserved(), 70);
    }

    #[test]
    fn shrink_is_capped_at_what_is_held() {
        let pool = pool(100);
        let mut r = MemoryReservation::new(&pool);
        r.try_grow(10).unwrap();
        assert_eq!(r.shrink(25), 10);
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn split_and_merge_move_bytes_without_touching_the_pool() {
        let pool = pool(100);
        let mut a = MemoryReservation::new(&pool);
        a.try_grow(50).unwrap();
        let b = a.split(20);
        assert_eq!((a.size(), b.size(), pool.reserved()), (30, 20, 50));
        a.merge(b);
        assert_eq!((a.size(), pool.reserved()), (50, 50));
    }
}
