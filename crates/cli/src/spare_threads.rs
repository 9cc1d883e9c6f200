//! Output threads with nothing left to write, lent to the parquet writers that still have
//! something: with fewer partitions being written than output threads, a row group's columns
//! are encoded on the spare ones (issue #44, item 3; [`crate::parquet_file`]).
//!
//! An output thread ([`crate::read_back`]) lends itself once it has no partition left to write:
//! at its start if it owns none (`--partitions` below `--threads`), else when its last
//! partition's file is complete. A writer about to encode borrows up to as many threads as it
//! has columns to spread (less one, its own), runs its helpers for that step only and gives
//! them back when the step is done. The rule is automatic and needs no flag: there are never
//! more encoding threads than `--threads` output threads (a borrowed thread is one that is
//! idle), so the cores are shared as before, and the output threads' codec charge, which
//! counts one page compression in flight per output thread, still covers the helpers' pages
//! ([`crate::codec_memory`]).
//!
//! # Locking
//! No locks: the count of idle threads is an atomic, claimed and given back with
//! compare-and-swap.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The output threads idle and lent to the writers, and how often a step used them.
#[derive(Debug, Default)]
pub(crate) struct SpareThreads {
    /// Lent threads not borrowed right now.
    idle: AtomicUsize,
    /// Steps (a batch's columns, or a row group's close) run with at least one helper.
    helped: AtomicU64,
}

impl SpareThreads {
    /// `idle` threads to lend from the start (tests; a run starts with none).
    #[cfg(test)]
    pub(crate) fn with_idle(idle: usize) -> Self {
        SpareThreads {
            idle: AtomicUsize::new(idle),
            helped: AtomicU64::new(0),
        }
    }

    /// An output thread has nothing left to write: from now on writers may borrow it.
    pub(crate) fn lend(&self) {
        self.idle.fetch_add(1, Ordering::Relaxed);
    }

    /// Borrows up to `most` idle threads, for one step; given back when the [`Helpers`] drop.
    pub(crate) fn borrow(&self, most: usize) -> Helpers<'_> {
        let count = match self
            .idle
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |idle| {
                (idle > 0 && most > 0).then(|| idle - idle.min(most))
            }) {
            Ok(before) => before.min(most),
            Err(_) => 0,
        };
        if count > 0 {
            self.helped.fetch_add(1, Ordering::Relaxed);
        }
        Helpers { spare: self, count }
    }

    /// Steps run with at least one helper so far.
    pub(crate) fn helped(&self) -> u64 {
        self.helped.load(Ordering::Relaxed)
    }
}

/// Threads borrowed for one step; given back on drop.
#[derive(Debug)]
pub(crate) struct Helpers<'a> {
    spare: &'a SpareThreads,
    count: usize,
}

impl Helpers<'_> {
    /// How many threads were borrowed (0: the step runs on the calling thread alone).
    pub(crate) fn count(&self) -> usize {
        self.count
    }
}

impl Drop for Helpers<'_> {
    fn drop(&mut self) {
        if self.count > 0 {
            self.spare.idle.fetch_add(self.count, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_threads_are_given_back_and_never_more_than_lent() {
        let spare = SpareThreads::default();
        assert_eq!(spare.borrow(4).count(), 0, "none lent");
        spare.lend();
        spare.lend();
        spare.lend();
        {
            let first = spare.borrow(2);
            assert_eq!(first.count(), 2);
            let second = spare.borrow(2);
            assert_eq!(second.count(), 1, "only one left");
            assert_eq!(spare.borrow(1).count(), 0, "all borrowed");
        }
        assert_eq!(spare.borrow(0).count(), 0, "nothing asked");
        assert_eq!(spare.borrow(10).count(), 3, "all given back");
        assert_eq!(spare.helped(), 3);
    }
}
