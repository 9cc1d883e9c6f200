//! A buffer's spiller as a member of its pool's [`SpillPeers`]: other buffers on the pool ask it
//! for its largest partition and ask it to spill, so that a spill takes the largest partition
//! across every buffer sharing the pool.
//!
//! # Locking
//! [`SpillPeer::largest_spillable`] takes this buffer's `State` lock (alone: the caller, another
//! buffer's spiller, holds none, and the pool's member list is not held while members are
//! called). [`SpillPeer::request_spill`] takes no lock; it sends a `Wake` job.

use std::sync::{Arc, Weak};

use arrow_shards_memory::{SpillPeer, SpillPeers};
use crossbeam_channel::Sender;

use super::side::SpillSide;
use crate::shared::Shared;

use super::job::Job;

/// What other buffers on the pool hold of this buffer: its shared part (weakly: a member never
/// keeps a buffer alive) and its spiller's job queue.
#[derive(Debug)]
pub(crate) struct Peer {
    shared: Weak<Shared>,
    jobs: Sender<Job>,
}

impl Peer {
    /// Makes the peer of `shared`'s spiller and joins the pool's members, if the pool keeps them.
    /// The returned `Arc` is the membership: the member leaves when it is dropped.
    pub(crate) fn join(shared: &Arc<Shared>, jobs: Sender<Job>) -> Arc<Peer> {
        let peer = Arc::new(Peer {
            shared: Arc::downgrade(shared),
            jobs,
        });
        if let Some(peers) = shared.pool.spill_peers() {
            let as_member: Arc<dyn SpillPeer> = peer.clone();
            peers.join(Arc::downgrade(&as_member));
        }
        peer
    }

    /// The largest spillable partition among the *other* members of `shared`'s pool, with the
    /// member holding it; `None` without one (or when the pool keeps no members).
    pub(crate) fn largest_other(
        self: &Arc<Self>,
        peers: Option<&SpillPeers>,
    ) -> Option<(usize, Arc<dyn SpillPeer>)> {
        let as_member: Arc<dyn SpillPeer> = self.clone();
        peers?.largest_other(&Arc::downgrade(&as_member))
    }
}

/// Queues a `Wake` unless one is pending already.
pub(crate) fn wake(jobs: &Sender<Job>, side: &SpillSide) {
    if !side
        .wake_pending
        .swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        // The receiver lives until the spiller stops; a send after that fails harmlessly.
        let _ = jobs.send(Job::Wake);
    }
}

impl SpillPeer for Peer {
    fn largest_spillable(&self) -> usize {
        self.shared
            .upgrade()
            .map_or(0, |shared| shared.lock().largest_spillable())
    }

    fn request_spill(&self, bytes: usize) {
        if let Some(shared) = self.shared.upgrade()
            && let Some(side) = shared.spill.as_ref()
        {
            side.request(bytes);
            wake(&self.jobs, side);
        }
    }
}
