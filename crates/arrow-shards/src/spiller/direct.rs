//! The oversized path, the spiller's side: a write that cannot fit even in an empty budget (a
//! batch, or the parts of a scattered batch) is written to disk in one run, each partition's
//! part after that partition's batches in memory, so every partition keeps its write order.
//!
//! The memory batches' spill is committed here; the parts' segments go back to the writer,
//! which commits them all or none under one lock
//! ([`State::land_direct`](crate::state::State::land_direct)): a write whose future was
//! dropped never lands, and a scattered write stays all or nothing.
//!
//! # Locking
//! The buffer's `State` lock is taken twice, as in a round: to check the partitions and mark
//! their memory batches in flight, and to commit or abort. The run is written with no lock
//! held; voided segments are dropped after unlock.

use std::sync::Arc;

use arrow_shards_memory::MemoryReservation;
use arrow_shards_spill::SegmentRef;

use super::run::write_run;
use super::side::SpillSide;
use crate::error::Error;
use crate::shard::Part;
use crate::shared::Shared;
use crate::state::{Lanes, SizedBatches, State};

/// A direct write's segments on disk, per partition, not yet part of their partitions: the
/// writer commits them with [`State::land_direct`](crate::state::State::land_direct), or drops
/// them.
pub(crate) type Landed = Vec<(u32, Vec<SegmentRef>)>;

/// The spiller's answer to a direct write; an error names the partition it concerns.
pub(crate) type DirectReply = tokio::sync::oneshot::Receiver<Result<Landed, (u32, Error)>>;

/// Writes `parts` (ascending by partition, one per partition) straight to disk, each after its
/// partition's batches in memory; commits those batches' spill and returns the parts' segments
/// uncommitted.
pub(crate) fn write(
    shared: &Shared,
    side: &SpillSide,
    parts: Vec<Part>,
) -> Result<Landed, (u32, Error)> {
    // Counted while on their way to disk: the process holds them, even past the limit.
    let mut in_flight = MemoryReservation::new(&shared.pool);
    in_flight.grow(parts.iter().map(|(_, stored)| stored.size).sum());
    let started = start(shared, &parts)?;
    let mut chosen: Vec<(u32, SizedBatches)> = Vec::with_capacity(2 * parts.len());
    for ((partition, _, batches), (_, stored)) in started.iter().zip(&parts) {
        if !batches.is_empty() {
            chosen.push((*partition, batches.clone()));
        }
        chosen.push((*partition, vec![(stored.batch.clone(), stored.size)]));
    }
    let result = write_run(side, &chosen);
    drop(chosen);
    let mut state = shared.lock();
    let written = match result {
        Ok(written) => written,
        Err(error) => {
            for (partition, ticket, _) in &started {
                state.abort_spill(*partition, *ticket);
            }
            let error = state.spill_error().unwrap_or_else(|| Arc::new(error));
            state.set_spill_error(Arc::clone(&error));
            drop(state);
            shared.pool.release_signal().notify();
            return Err((parts[0].0, Error::Spill(error)));
        }
    };
    // `written` follows `chosen`: per partition, its memory batches' segments (if it had any),
    // then its part's.
    let mut written = written.into_iter();
    let mut landed = Vec::with_capacity(parts.len());
    let mut voided = Vec::new();
    for (partition, ticket, batches) in &started {
        // Committed even with no batches: it ends the partition's flight. A reader that took
        // the batches meanwhile voided it (they precede the part either way); a partition no
        // longer writable refuses the part when the writer lands it.
        let memory = match batches.is_empty() {
            true => Vec::new(),
            false => written.next().expect("one entry per chosen").1,
        };
        voided.extend(state.commit_spill(*partition, *ticket, memory));
        landed.push(written.next().expect("one entry per part"));
    }
    drop(state);
    drop(voided);
    // The charge goes with this function: the parts are on disk.
    Ok(landed)
}

/// A part's partition with its spill ticket and the memory batches it marked in flight.
type Started = (u32, u64, SizedBatches);

/// Checks that every part's partition may be written and marks its memory batches in flight,
/// all under one lock: `(partition, ticket, batches)` per part.
fn start(shared: &Shared, parts: &[Part]) -> Result<Vec<Started>, (u32, Error)> {
    shared.with_lanes(|state, lanes| start_locked(state, lanes, parts))
}

/// [`start`] with every lane and the state locked.
fn start_locked(
    state: &mut State,
    lanes: Lanes<'_, '_>,
    parts: &[Part],
) -> Result<Vec<Started>, (u32, Error)> {
    for (partition, _) in parts {
        state
            .check_writable(*partition)
            .map_err(|e| (*partition, e))?;
    }
    if let Some(failed) = state.spill_error() {
        return Err((parts[0].0, Error::Spill(failed)));
    }
    let mut started = Vec::with_capacity(parts.len());
    for (partition, _) in parts {
        match state.start_spill_of(*partition, lanes) {
            Ok(Some((ticket, batches))) => started.push((*partition, ticket, batches)),
            refused => {
                for (partition, ticket, _) in &started {
                    state.abort_spill(*partition, *ticket);
                }
                let error = match refused {
                    Err(error) => error,
                    _ => Error::Internal("partition already in flight"),
                };
                return Err((*partition, error));
            }
        }
    }
    Ok(started)
}
