//! Every producer's open batches ([`Lane`]s): the registry a buffer keeps of them, and the lane
//! each [`ShardBuffer`](crate::ShardBuffer) handle makes at its first copying write.
//!
//! A handle is a producer: rows written through it are copied into its own lane, so handles on
//! different threads copy at the same time (threads sharing one handle take turns on its
//! lane). A clone is a new producer with a lane of its own. When a handle is dropped, its
//! open batches are cut into their partitions and its lane leaves the registry.
//!
//! # Locking
//! Lock order: lanes (in registry order), then `State`. A writer holds its own lane for the
//! whole write and takes `State` twice inside it (to charge, then to book); whoever needs the
//! open batches of every lane ([`Shared::with_lanes`](crate::shared::Shared::with_lanes)) locks
//! each registered lane, then `State`. The registry's own mutex (`shared::Registry`) is held only
//! to add, remove or list lanes, never while taking another lock.

use std::sync::{Arc, Mutex, OnceLock};

use crate::shared::{LaneCell, Shared};
use crate::state::Lane;

/// A handle's own lane, made at its first write that copies rows. A clone has none yet.
#[derive(Debug, Default)]
pub(crate) struct OwnLane {
    lane: OnceLock<LaneCell>,
}

impl Clone for OwnLane {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl OwnLane {
    /// This handle's lane, registered with `shared` when first asked for.
    pub(crate) fn get(&self, shared: &Shared) -> &LaneCell {
        self.lane.get_or_init(|| {
            let lane = Arc::new(Mutex::new(Lane::new(shared.num_partitions)));
            shared.lanes.add(&lane);
            lane
        })
    }

    /// Hands the lane's open batches to their partitions and leaves the registry (the
    /// handle is dropped).
    pub(crate) fn hand_over(&mut self, shared: &Shared) {
        let Some(lane) = self.lane.take() else {
            return;
        };
        {
            let mut own = shared.lock_lane(&lane);
            // Only a bug fails a cut; the rows then stay in the lane, charged, until close.
            if shared.lock().flush_lane(&mut own).is_err() {
                return;
            }
        }
        shared.lanes.remove(&lane);
    }
}
