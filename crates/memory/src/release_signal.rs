//! Wake-ups for writers waiting on a pool.
//!
//! # Locking
//! One `Mutex<u64>` (the epoch) paired with a `Condvar` for blocking waiters, and a tokio
//! `Notify` for async ones. The mutex is held only to bump or compare the epoch; nothing else
//! happens under it.
//!
//! The pattern that loses no wake-up: take [`ReleaseSignal::epoch`] (or create the async
//! `notified` future), *then* try to reserve, and only on failure wait for the epoch to move on.
//! A release that happens between the try and the wait has already bumped the epoch, so the wait
//! returns at once.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

/// Tells waiters that memory may have been released. Pools call [`ReleaseSignal::notify`]
/// whenever their reserved bytes go down.
#[derive(Debug, Default)]
pub struct ReleaseSignal {
    epoch: Mutex<u64>,
    cond: Condvar,
    notify: Notify,
}

impl ReleaseSignal {
    /// A signal nobody has fired yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes every waiter, blocking and async.
    pub fn notify(&self) {
        *self.epoch.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.cond.notify_all();
        self.notify.notify_waiters();
    }

    /// The current epoch: take it before trying to reserve, then wait for it to change.
    pub fn epoch(&self) -> u64 {
        *self.epoch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parks the thread until the epoch differs from `seen` or `deadline` passes.
    /// Returns `true` if the epoch moved on.
    pub fn wait_blocking(&self, seen: u64, deadline: Option<Instant>) -> bool {
        let mut epoch = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        while *epoch == seen {
            match deadline {
                None => {
                    epoch = self
                        .cond
                        .wait(epoch)
                        .unwrap_or_else(PoisonError::into_inner)
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    epoch = self
                        .cond
                        .wait_timeout(epoch, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
        true
    }

    /// The async side: a `Notified` future. Call `enable()` on it (pinned) before trying to
    /// reserve, then await it on failure.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn blocking_wait_returns_when_epoch_moved_before_waiting() {
        let s = ReleaseSignal::new();
        let seen = s.epoch();
        s.notify();
        assert!(s.wait_blocking(seen, None));
    }

    #[test]
    fn blocking_wait_times_out_without_notify() {
        let s = ReleaseSignal::new();
        let seen = s.epoch();
        assert!(!s.wait_blocking(seen, Some(Instant::now() + Duration::from_millis(5))));
    }

    #[test]
    fn blocking_waiter_is_woken_by_another_thread() {
        let s = Arc::new(ReleaseSignal::new());
        let seen = s.epoch();
        let s2 = Arc::clone(&s);
        let h = std::thread::spawn(move || s2.wait_blocking(seen, None));
        std::thread::sleep(Duration::from_millis(10));
        s.notify();
        assert!(h.join().unwrap());
    }
}
