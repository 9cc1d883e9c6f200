//! One spill round: ask the policy how much to free, pick the largest partitions (here or, if
//! the largest is another buffer's on the same pool, ask that buffer), write them as one run,
//! then commit or abort.
//!
//! # Locking
//! The other pool members are asked first, each under its own `State` lock alone; then this
//! buffer's `State` lock is taken twice: to pick victims and mark their batches in flight, and
//! to commit or abort. The run is written with no lock held; voided segments and the round's
//! batch clones are dropped after unlock (dropping a `SegmentRef` may delete a file).

use std::sync::Weak;
use std::sync::atomic::Ordering;

use arrow_shards_spill::SpillError;

use super::peer::Peer;
use super::policy::{Figures, to_free};
use super::run::write_run;
use super::side::SpillSide;
use crate::shared::Shared;

/// What a round came to.
pub(super) enum Round {
    /// It freed memory; another round may be needed.
    Freed,
    /// Nothing (more) to do.
    Done,
    /// Writing the run failed; its batches stayed in memory.
    Failed(SpillError),
}

/// One spill round; `true` if it freed memory and another round may be needed. The `first`
/// round after a wake starts only if the pool is still at the threshold or a writer still has
/// no room (a charge that woke the spiller may be gone, e.g. an oversized batch that has since
/// reached disk); later rounds continue down to the target.
pub(super) fn round(shared: &Shared, me: &Weak<Peer>, side: &SpillSide, first: bool) -> Round {
    let need = side.waiting_need.load(Ordering::Acquire)
        + if first {
            side.requested.swap(0, Ordering::AcqRel)
        } else {
            0
        };
    let figures = Figures {
        limit: shared.pool.limit().unwrap_or(usize::MAX),
        reserved: shared.pool.reserved(),
        need,
        first,
    };
    let Some(want) = to_free(&figures, &side.config) else {
        return Round::Done;
    };

    // Asked before taking our own lock: each member's lock is taken alone.
    let elsewhere = me
        .upgrade()
        .and_then(|me| me.largest_other(shared.pool.spill_peers()));
    let floor = elsewhere.as_ref().map_or(0, |(bytes, _)| *bytes);
    let started = shared.with_lanes(|state, lanes| {
        if state.is_closed() {
            return None;
        }
        let (ticket, chosen) = state.start_spill(want, floor, lanes);
        if !chosen.is_empty() {
            state.note_needed(want);
        }
        Some((ticket, chosen))
    });
    let Some((ticket, chosen)) = started else {
        return Round::Done;
    };
    if chosen.is_empty() {
        if let Some((_, largest)) = elsewhere {
            // The largest partition is another buffer's: it makes the room (its round sees the
            // pool-wide reservation, and our writers' need), and our writers wake on its release.
            largest.request_spill(need);
        }
        return Round::Done;
    }
    let result = write_run(side, &chosen);
    let mut voided = Vec::new();
    let outcome = {
        let mut state = shared.lock();
        match result {
            Ok(segments) => {
                for (partition, segments) in segments {
                    voided.extend(state.commit_spill(partition, ticket, segments));
                }
                Round::Freed
            }
            Err(error) => {
                for (partition, _) in &chosen {
                    state.abort_spill(*partition, ticket);
                }
                Round::Failed(error)
            }
        }
    };
    drop((voided, chosen));
    outcome
}
