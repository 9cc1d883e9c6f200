//! Who can spill on a pool: the members that hold spillable data on it, so that whoever needs
//! room can ask the one holding the largest partition, not only itself.
//!
//! A buffer with spilling on joins its pool's [`SpillPeers`] when it is built and leaves when its
//! last handle goes (the registry keeps only a [`Weak`] reference; dead members are pruned on the
//! next [`SpillPeers::join`] or [`SpillPeers::largest_other`]).
//!
//! # Locking
//! One `Mutex` over the member list, a leaf lock: held only to push, prune or upgrade members,
//! never while calling one ([`SpillPeer::largest_spillable`] takes the member's own lock, and
//! [`SpillPeer::request_spill`] sends it a job). So it nests with no other lock in either order.

use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A member of a pool that can spill its data to disk (a buffer's spiller).
pub trait SpillPeer: Debug + Send + Sync {
    /// The bytes in memory of its largest partition that could be spilled now; 0 if none (or if
    /// its spilling is failing, so that nobody waits on it).
    fn largest_spillable(&self) -> usize;
    /// Asks it to spill its largest partitions until the pool has room for `bytes` more, or
    /// down to its spill target. Does not wait.
    fn request_spill(&self, bytes: usize);
}

/// The members of a pool that can spill (see the module docs).
#[derive(Debug, Default)]
pub struct SpillPeers {
    members: Mutex<Vec<Weak<dyn SpillPeer>>>,
}

impl SpillPeers {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `peer`; it leaves when its last strong reference is dropped.
    pub fn join(&self, peer: Weak<dyn SpillPeer>) {
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        members.retain(|m| m.strong_count() > 0);
        members.push(peer);
    }

    /// The member other than `me` with the largest spillable partition, with its bytes; `None`
    /// if no other member has anything to spill.
    pub fn largest_other(&self, me: &Weak<dyn SpillPeer>) -> Option<(usize, Arc<dyn SpillPeer>)> {
        let others: Vec<Arc<dyn SpillPeer>> = {
            let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
            members.retain(|m| m.strong_count() > 0);
            members
                .iter()
                .filter(|m| !Weak::ptr_eq(m, me))
                .filter_map(Weak::upgrade)
                .collect()
        };
        others
            .into_iter()
            .map(|peer| (peer.largest_spillable(), peer))
            .filter(|(bytes, _)| *bytes > 0)
            .max_by_key(|(bytes, _)| *bytes)
    }

    /// Live members.
    pub fn len(&self) -> usize {
        let members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        members.iter().filter(|m| m.strong_count() > 0).count()
    }

    /// Whether no member is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Default)]
    struct Fake {
        largest: usize,
        requested: AtomicUsize,
    }

    impl SpillPeer for Fake {
        fn largest_spillable(&self) -> usize {
            self.largest
        }
        fn request_spill(&self, bytes: usize) {
            self.requested.store(bytes, Ordering::Release);
        }
    }

    fn member(largest: usize) -> (Arc<Fake>, Weak<dyn SpillPeer>) {
        let fake = Arc::new(Fake {
            largest,
            ..Fake::default()
        });
        let as_peer: Arc<dyn SpillPeer> = fake.clone();
        let weak = Arc::downgrade(&as_peer);
        (fake, weak)
    }

    #[test]
    fn picks_the_largest_other_member_and_forgets_dropped_ones() {
        let peers = SpillPeers::new();
        let (a, wa) = member(10);
        let (b, wb) = member(30);
        let (c, wc) = member(0);
        peers.join(wa.clone());
        peers.join(wb.clone());
        peers.join(wc);
        let (bytes, largest) = peers.largest_other(&wa).unwrap();
        assert_eq!(bytes, 30);
        largest.request_spill(7);
        assert_eq!(b.requested.load(Ordering::Acquire), 7);
        assert_eq!(a.requested.load(Ordering::Acquire), 0);
        // b asks: a is the only other member with something to spill (c has nothing).
        assert_eq!(peers.largest_other(&wb).unwrap().0, 10);
        drop((a, c));
        assert_eq!(peers.len(), 1);
        assert!(peers.largest_other(&wb).is_none());
    }
}
