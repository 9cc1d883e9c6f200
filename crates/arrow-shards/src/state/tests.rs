//! The ledger's balance invariant, after each operation on a `State`: the reservation equals
//! what is held (allocations once each, overheads, open batches), the pool sees exactly the
//! reservation, and every row is somewhere (memory, disk, taken by a read or a subscription, or
//! discarded for an abandoned subscription), never twice.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_shards_memory::{BoundedPool, MemoryPool, MemoryReservation};
use proptest::prelude::*;

use std::sync::{Mutex, MutexGuard};

use super::insert::Admitted;
use super::{Lane, Reader, State, Taken};
use crate::compact::CompactConfig;
use crate::route::{Route, Scatter, route_scattered};
use crate::scatter::scatter_routed;
use crate::shard::{Shard, Stored};

const PARTITIONS: u32 = 5;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
    ]))
}

fn batch(first: i64, rows: usize) -> RecordBatch {
    let k = Int64Array::from_iter_values(first..first + rows as i64);
    let s = StringArray::from_iter((0..rows).map(|i| (i % 3 != 0).then(|| "x".repeat(i % 20))));
    RecordBatch::try_new(schema(), vec![Arc::new(k), Arc::new(s)]).unwrap()
}

/// One operation on the state, as the buffer's callers make them.
#[derive(Debug, Clone)]
enum Op {
    Whole(u32, usize),
    Small(u32, usize),
    Scatter(usize, bool),
    Spill(usize),
    SpillOf(u32, bool),
    Read(u32),
    /// A subscription, with its minimum batch (0: none).
    Subscribe(u32, usize),
    TakeSome(u32),
    /// A spill of the partition in flight while its subscription takes, then committed.
    SpillTake(u32),
    Abandon(u32),
    /// A producer's handle dropped: its lane's open batches cut into their partitions.
    HandOver(usize),
}

/// Two producers, each with its own lane.
const LANES: usize = 2;

/// Every lane locked, as `Shared::with_lanes` does.
fn all(lanes: &[Mutex<Lane>]) -> Vec<MutexGuard<'_, Lane>> {
    lanes.iter().map(|l| l.lock().unwrap()).collect()
}

/// A write as `ShardBuffer::attempt` makes it: charged under the lock, then (for a copy) the
/// rows copied into the lane with the lock let go, where the ledger must balance too, then
/// booked. `true` if it went in.
fn insert(state: &mut State, lane: &Mutex<Lane>, partition: u32, shard: Shard) -> bool {
    let mut lane = lane.lock().unwrap();
    match state.try_insert(&mut lane, partition, shard) {
        Ok(Admitted::Stored) => true,
        Ok(Admitted::Copy(pending)) => {
            state.check_balance().unwrap();
            let copied = pending.copy(&mut lane);
            state.book(&mut lane, pending, copied).unwrap();
            true
        }
        Err(_) => false,
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..PARTITIONS, 1usize..3000).prop_map(|(p, n)| Op::Whole(p, n)),
        (0..PARTITIONS, 1usize..50).prop_map(|(p, n)| Op::Small(p, n)),
        (1usize..400, any::<bool>()).prop_map(|(n, flat)| Op::Scatter(n, flat)),
        (0usize..100_000).prop_map(Op::Spill),
        (0..PARTITIONS, any::<bool>()).prop_map(|(p, commit)| Op::SpillOf(p, commit)),
        (0..PARTITIONS).prop_map(Op::Read),
        (0..LANES).prop_map(Op::HandOver),
        (0..PARTITIONS, prop_oneof![Just(0usize), 1usize..300])
            .prop_map(|(p, min)| Op::Subscribe(p, min)),
        (0..PARTITIONS).prop_map(Op::TakeSome),
        (0..PARTITIONS).prop_map(Op::SpillTake),
        (0..PARTITIONS).prop_map(Op::Abandon),
    ]
}

/// Checks the invariant: `check_balance`, the pool holding exactly the reservation and what
/// reads took, and the rows in memory plus on disk plus taken equal to the rows written.
fn assert_balanced(
    state: &State,
    pool: &Arc<dyn MemoryPool>,
    taken: &[Taken],
    taken_rows: usize,
    what: &Op,
) {
    state
        .check_balance()
        .unwrap_or_else(|e| panic!("after {what:?}: {e}"));
    let reads: usize = taken.iter().map(|t| t.reservation.size()).sum();
    assert_eq!(
        pool.reserved(),
        state.reservation.size() + reads,
        "after {what:?}"
    );
    let held: usize = state
        .partitions
        .iter()
        .map(|p| p.memory_rows + p.spilled_rows)
        .sum();
    assert_eq!(
        held + taken_rows + state.rows_discarded as usize,
        state.rows_written as usize,
        "rows lost or doubled after {what:?}"
    );
}

fn rows_of(state: &State, p: u32) -> usize {
    let part = &state.partitions[p as usize];
    part.memory_rows + part.spilled_rows
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_reservation_equals_what_is_held_after_every_operation(
        ops in proptest::collection::vec(op(), 1..40),
        compact_on in any::<bool>(),
    ) {
        let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(64 << 20));
        let schema = schema();
        let compact = compact_on
            .then(|| CompactConfig::new(&schema, 1024, 1 << 20, Some(64 << 20), PARTITIONS))
            .flatten();
        let mut state = State::new(
            Arc::clone(&schema),
            PARTITIONS,
            MemoryReservation::new(&pool),
            true,
            compact,
        );
        let (mut next, mut taken_rows) = (0i64, 0usize);
        let mut taken = Vec::new();
        let lanes: Vec<Mutex<Lane>> = (0..LANES).map(|_| Mutex::new(Lane::new(PARTITIONS))).collect();
        for (i, op) in ops.iter().enumerate() {
            let lane = &lanes[i % LANES];
            match *op {
                Op::Whole(p, n) => {
                    let shard = Shard::Whole(Stored::new(batch(next, n)));
                    if insert(&mut state, lane, p, shard) {
                        next += n as i64;
                    }
                }
                Op::Small(p, n) => {
                    let Some(config) = compact else { continue };
                    if insert(&mut state, lane, p, Shard::Small(batch(next, n), config)) {
                        next += n as i64;
                    }
                }
                Op::Scatter(n, flat) => {
                    let ids: Vec<u32> = (0..n as u32).map(|r| (r * 7 + r / 3) % PARTITIONS).collect();
                    // `flat` false: the reordering path even where the copy in place would do
                    let route = |b: &RecordBatch, ranges: &[(u32, usize, usize)]| {
                        match route_scattered(compact, &schema, b, ranges) {
                            Scatter::InPlace(c) if !flat => {
                                Scatter::Reorder(vec![Route::Copy(c); ranges.len()])
                            }
                            routes => routes,
                        }
                    };
                    let scattered = scatter_routed(batch(next, n), (&ids).into(), PARTITIONS, &pool, route)
                        .map_err(|(e, _)| e)
                        .unwrap();
                    if insert(&mut state, lane, 0, Shard::Scattered(Box::new(scattered))) {
                        next += n as i64;
                    }
                }
                Op::Spill(want) => {
                    let (ticket, chosen) = state.start_spill(want, 0, &mut all(&lanes));
                    for (p, _) in chosen {
                        assert!(state.commit_spill(p, ticket, Vec::new()).is_empty());
                    }
                }
                Op::SpillOf(p, commit) => {
                    let started = state.start_spill_of(p, &mut all(&lanes));
                    if let Ok(Some((ticket, _))) = started {
                        if commit {
                            assert!(state.commit_spill(p, ticket, Vec::new()).is_empty());
                        } else {
                            state.abort_spill(p, ticket);
                        }
                    }
                }
                Op::HandOver(l) => state.flush_lane(&mut lanes[l].lock().unwrap()).unwrap(),
                Op::Subscribe(..) | Op::TakeSome(_) | Op::SpillTake(_) | Op::Abandon(_) => {}
                Op::Read(p) => {
                    state.seal(p).unwrap();
                    let rows = {
                        let part = &state.partitions[p as usize];
                        part.memory_rows + part.spilled_rows
                    };
                    let read = state.take_for_read(p, &mut all(&lanes));
                    if let Ok(t) = read {
                        taken_rows += rows;
                        taken.push(t);
                    }
                }
            }
            match *op {
                Op::Subscribe(p, min_rows) => {
                    let claimed = !matches!(state.partitions[p as usize].reader, Reader::Unclaimed);
                    prop_assert_eq!(state.subscribe(p, min_rows).is_err(), claimed);
                }
                Op::TakeSome(p) => {
                    // Counted from the partition: the fake spills above land no segments.
                    let before = rows_of(&state, p);
                    let took = state.take_some(p, &mut all(&lanes));
                    if let Ok(chunk) = took {
                        taken_rows += before - rows_of(&state, p);
                        taken.push(chunk.taken);
                        // A take leaves an open batch under the subscription's minimum only.
                        if let Reader::Streaming { min_rows, .. } = state.partitions[p as usize].reader {
                            for lane in all(&lanes) {
                                let open = lane.rows(p);
                                prop_assert!(min_rows == 0 || open < min_rows, "{} rows left open", open);
                            }
                        }
                    }
                }
                Op::SpillTake(p) => {
                    if !matches!(state.partitions[p as usize].reader, Reader::Streaming { .. }) {
                        continue;
                    }
                    let started = state.start_spill_of(p, &mut all(&lanes));
                    if let Ok(Some((ticket, batches))) = started {
                        let voided = state.spills_voided;
                        let before = rows_of(&state, p);
                        let chunk = state.take_some(p, &mut all(&lanes)).unwrap();
                        prop_assert_eq!(state.spills_voided, voided + 1);
                        let in_flight: usize = batches.iter().map(|(b, _)| b.num_rows()).sum();
                        let memory: usize = chunk.taken.batches.iter().map(|s| s.batch.num_rows()).sum();
                        prop_assert!(memory >= in_flight, "the in-flight batches are taken");
                        taken_rows += before - rows_of(&state, p);
                        taken.push(chunk.taken);
                        // The voided spill's commit changes nothing.
                        let before = state.partitions[p as usize].memory_rows;
                        prop_assert!(state.commit_spill(p, ticket, Vec::new()).is_empty());
                        prop_assert_eq!(state.partitions[p as usize].memory_rows, before);
                    }
                }
                Op::Abandon(p) => drop(state.abandon(p, &mut all(&lanes))),
                _ => {}
            }
            assert_balanced(&state, &pool, &taken, taken_rows, op);
        }
        drop(taken);
        let (drained, _) = state.close(&mut all(&lanes));
        drop(drained);
        state.check_balance().unwrap();
        prop_assert_eq!(pool.reserved(), 0);
    }
}
