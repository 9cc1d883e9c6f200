//! The spill side of a buffer: its spill directory (and the overflow tier's counters), its
//! spill settings, and what waiting and refused writers need from the spiller (atomics, read by
//! the spiller thread without a lock).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use arrow_shards_spill::SpillDir;

use crate::config::SpillConfig;

/// The spill side of a buffer, shared by its handles, its readers and the spiller thread.
#[derive(Debug)]
pub(crate) struct SpillSide {
    pub(crate) dir: Arc<SpillDir>,
    pub(crate) config: SpillConfig,
    pub(crate) wake_pending: AtomicBool,
    /// What the writers waiting for room right now need, in total (see [`NeedGuard`]). A gauge,
    /// not a last value: a writer that fit or gave up no longer counts.
    pub(crate) waiting_need: AtomicUsize,
    /// The largest need of a refused `try_write` since the last round: the next round makes
    /// room for it, then forgets it (a `try_write` does not wait, so no guard can count it).
    pub(crate) requested: AtomicUsize,
    /// This buffer's runs in the overflow tier (`SpillConfig::overflow`).
    pub(crate) overflow: OverflowCounters,
}

/// This buffer's use of the overflow tier (the tier's own metrics may count other buffers).
#[derive(Debug, Default)]
pub(crate) struct OverflowCounters {
    pub(crate) runs: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) write_nanos: AtomicU64,
}

/// Counts a waiting writer's need in [`SpillSide`] until the write returns or is dropped.
#[derive(Debug)]
pub(crate) struct NeedGuard<'a> {
    side: &'a SpillSide,
    bytes: usize,
}

impl<'a> NeedGuard<'a> {
    pub(crate) fn new(side: &'a SpillSide, bytes: usize) -> Self {
        side.waiting_need.fetch_add(bytes, Ordering::AcqRel);
        Self { side, bytes }
    }

    /// Counts `bytes` instead of the need counted so far: a write refused again may need more
    /// (or less) than at its first refusal, and a round that frees room for a stale, smaller need
    /// leaves the writer waiting for a release that never comes.
    pub(crate) fn set(&mut self, bytes: usize) {
        if bytes > self.bytes {
            self.side
                .waiting_need
                .fetch_add(bytes - self.bytes, Ordering::AcqRel);
        } else {
            self.side
                .waiting_need
                .fetch_sub(self.bytes - bytes, Ordering::AcqRel);
        }
        self.bytes = bytes;
    }
}

impl Drop for NeedGuard<'_> {
    fn drop(&mut self) {
        self.side
            .waiting_need
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl SpillSide {
    pub(crate) fn new(dir: Arc<SpillDir>, config: SpillConfig) -> Self {
        Self {
            dir,
            config,
            wake_pending: AtomicBool::new(false),
            waiting_need: AtomicUsize::new(0),
            requested: AtomicUsize::new(0),
            overflow: OverflowCounters::default(),
        }
    }

    /// Asks the next round to make room for `bytes` (a refused `try_write`).
    pub(crate) fn request(&self, bytes: usize) {
        self.requested.fetch_max(bytes, Ordering::AcqRel);
    }
}
