//! The scatter write's first step: check a batch's partition ids and group its rows by
//! partition ([`RowsByPartition`], in O(rows + partitions)), route them ([`crate::route`]) and
//! prepare the rows for the insert.
//!
//! Two ways, chosen outside the buffer's lock. In the common case (compaction on, every
//! column flat, every partition's share below the compaction target) the rows stay where they
//! are, each tagged with its partition's range, and are copied row by row into the open
//! batches ([`Grouped::Direct`], `compact/direct.rs`): no reordering copy at all. Otherwise they
//! are ordered by a stable counting sort of their ids and gathered with one `take` of the whole
//! batch ([`Grouped::Sorted`]); each partition's rows are then one range of the reordered batch,
//! copied into its open batch or kept as a slice at or above the compaction target. Either way
//! the per-call costs of arrow's kernels are paid once per input batch, not once per tiny shard
//! (see `docs/architecture.md`, "Small shards: compaction on write and the scatter write").

use std::convert::Infallible;
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use arrow_shards_memory::sizing::{Allocation, batch_allocations};
use arrow_shards_memory::{MemoryPool, MemoryReservation};

use crate::compact::{CompactConfig, Direct};
use crate::error::Error;
use crate::grouping::{PartitionIds, RowsByPartition};
use crate::route::{Route, Scatter, route_scattered};
use crate::shard::{Grouped, Parked, Scattered, Shard, Sorted, reorder};

/// Checks `ids` (one per row of `batch`, no nulls, each below `num_partitions`), groups the
/// rows by partition and routes them ([`route_scattered`]): left where they are and tagged with
/// their ranges, to be copied straight into the open batches ([`Grouped::Direct`]), or
/// reordered with one `take` ([`Grouped::Sorted`]; not when one partition has every row). The
/// error hands `batch` back.
pub(crate) fn scatter(
    batch: RecordBatch,
    ids: PartitionIds<'_>,
    num_partitions: u32,
    compact: Option<CompactConfig>,
    schema: &SchemaRef,
    pool: &Arc<dyn MemoryPool>,
) -> Result<Scattered, (Error, RecordBatch)> {
    scatter_routed(batch, ids, num_partitions, pool, |batch, ranges| {
        route_scattered(compact, schema, batch, ranges)
    })
}

/// [`scatter`] with the routes chosen by `route` (tests choose the reordering path with it).
pub(crate) fn scatter_routed(
    batch: RecordBatch,
    ids: PartitionIds<'_>,
    num_partitions: u32,
    pool: &Arc<dyn MemoryPool>,
    route: impl FnOnce(&RecordBatch, &[(u32, usize, usize)]) -> Scatter,
) -> Result<Scattered, (Error, RecordBatch)> {
    let (mut groups, ids) = match RowsByPartition::count(ids, batch.num_rows(), num_partitions) {
        Ok(counted) => counted,
        Err(error) => return Err((error, batch)),
    };
    let ranges = groups.ranges().len();
    let routes = match route(&batch, groups.ranges()) {
        Scatter::InPlace(config) => {
            if let Some(direct) = Direct::new(&batch, groups.range_of_row(ids), ranges) {
                return Ok(Scattered {
                    original: batch,
                    rows: Grouped::Direct(direct, config),
                    ranges: groups.into_parts().0,
                });
            }
            // Too many variable-length bytes to copy in place: reordered, every range copied.
            vec![Route::Copy(config); ranges]
        }
        Scatter::Reorder(routes) => routes,
    };
    groups.sort(ids);
    let (ranges, order) = groups.into_parts();
    let sorted = match order {
        None => Sorted {
            batch: batch.clone(),
            routes,
            charge: MemoryReservation::new(pool),
            copied: Vec::new(),
            order: None,
        },
        Some(order) => match gather(&batch, UInt32Array::from(order), routes, pool, true) {
            Ok(sorted) => sorted,
            Err(e) => return Err((e, batch)),
        },
    };
    Ok(Scattered {
        original: batch,
        rows: Grouped::Sorted(sorted),
        ranges,
    })
}

/// Reorders `batch` by `order` with one `take` and, if `charged`, charges the copy, past the
/// limit if need be: it exists. Only the buffers the gather made are charged: those `take`
/// shares with the batch as written (a dictionary's values) are the caller's. (A copy goes
/// uncharged only when an earlier try found it and the write's growth together above the
/// whole limit, see `State::try_insert_sorted`.)
fn gather(
    batch: &RecordBatch,
    order: UInt32Array,
    routes: Vec<Route>,
    pool: &Arc<dyn MemoryPool>,
    charged: bool,
) -> Result<Sorted, Error> {
    let sorted = reorder(batch, &order)?;
    let copied = gathered(batch, &sorted);
    let mut charge = MemoryReservation::new(pool);
    if charged {
        charge.grow(copied.iter().map(|a| a.capacity).sum());
    }
    Ok(Sorted {
        batch: sorted,
        routes,
        charge,
        copied,
        order: Some(order),
    })
}

/// Lets the reordered copy of a write that is about to wait for room go, with its charge: a
/// waiting write holds no memory of the pool. Writers that waited holding their copies could
/// fill the pool between them with nothing left to spill, each waiting for the others (seen
/// with three producers under a 196 KiB limit). Returns the bytes of charge let go (0 for any
/// other shard, returned as it is); [`unpark`] gathers the copy again before the next try.
pub(crate) fn park(shard: Shard) -> (Shard, usize) {
    let Shard::Scattered(scattered) = shard else {
        return (shard, 0);
    };
    let mut freed = 0;
    let parked = scattered.map_rows(|_, rows| {
        Ok::<_, Infallible>(match rows {
            Grouped::Sorted(Sorted {
                order: Some(order),
                routes,
                charge,
                copied,
                ..
            }) => {
                freed = charge.size();
                // A charge given back by the insert (see `gather`) stays given back.
                let charged = freed > 0 || copied.is_empty();
                Grouped::Parked(Parked {
                    order,
                    routes,
                    charged,
                })
            }
            rows => rows,
        })
    });
    let Ok(parked) = parked;
    (Shard::Scattered(parked), freed)
}

/// Gathers a parked write's copy again (see [`park`]); the error hands the batch as written
/// back. Any other shard is returned as it is.
pub(crate) fn unpark(
    shard: Shard,
    pool: &Arc<dyn MemoryPool>,
) -> Result<Shard, (Error, RecordBatch)> {
    let Shard::Scattered(scattered) = shard else {
        return Ok(shard);
    };
    let gathered = scattered.map_rows(|original, rows| match rows {
        Grouped::Parked(Parked {
            order,
            routes,
            charged,
        }) => gather(original, order, routes, pool, charged).map(Grouped::Sorted),
        rows => Ok(rows),
    })?;
    Ok(Shard::Scattered(gathered))
}

/// The allocations of `sorted` (gathered from `batch`) that `batch` does not hold, by address.
fn gathered(batch: &RecordBatch, sorted: &RecordBatch) -> Vec<Allocation> {
    let mut written: Vec<usize> = batch_allocations(batch).iter().map(|a| a.ptr).collect();
    written.sort_unstable();
    let mut copied: Vec<Allocation> = batch_allocations(sorted)
        .into_iter()
        .filter(|a| written.binary_search(&a.ptr).is_err())
        .collect();
    copied.sort_unstable_by_key(|a| a.ptr);
    copied
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array};

    fn pool() -> Arc<dyn MemoryPool> {
        Arc::new(arrow_shards_memory::UnboundedPool::new())
    }

    /// Compaction at `target_rows`, any bytes.
    fn rows(target_rows: usize) -> Option<CompactConfig> {
        Some(CompactConfig {
            target_rows,
            target_bytes: 1 << 30,
            stream_bytes: 1 << 30,
        })
    }

    fn batch(n: i64) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "a",
            Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef,
        )])
        .unwrap()
    }

    #[test]
    fn groups_rows_by_partition_keeping_input_order() {
        let ids = UInt32Array::from(vec![2, 0, 2, 1, 0, 2]);
        let s = scatter(
            batch(6),
            (&ids).into(),
            3,
            None,
            &batch(0).schema(),
            &pool(),
        )
        .unwrap();
        assert_eq!(s.ranges, vec![(0, 0, 2), (1, 2, 1), (2, 3, 3)]);
        let Grouped::Sorted(Sorted { batch: sorted, .. }) = &s.rows else {
            panic!("no copy target: reordered");
        };
        let a = sorted
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(a.values().to_vec(), vec![1, 4, 3, 0, 2, 5]);
    }

    #[test]
    fn bad_ids_are_refused_with_the_batch() {
        let (e, b) = scatter(
            batch(3),
            (&UInt32Array::from(vec![0, 1])).into(),
            2,
            None,
            &batch(0).schema(),
            &pool(),
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::PartitionIdsLength { rows: 3, ids: 2 }),
            "{e}"
        );
        assert_eq!(b.num_rows(), 3);
        let (e, _) = scatter(
            batch(3),
            (&UInt32Array::from(vec![Some(0), None, Some(1)])).into(),
            2,
            rows(8),
            &batch(0).schema(),
            &pool(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::NullPartitionId { row: 1 }), "{e}");
        let (e, _) = scatter(
            batch(3),
            (&[0u32, 1, 7][..]).into(),
            2,
            rows(8),
            &batch(0).schema(),
            &pool(),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::PartitionIdOutOfRange {
                    row: 2,
                    partition: 7,
                    num_partitions: 2
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn one_partition_needs_no_copy() {
        let b = batch(4);
        let s = scatter(
            b.clone(),
            (&vec![1u32; 4]).into(),
            2,
            rows(8),
            &b.schema(),
            &pool(),
        )
        .unwrap();
        assert_eq!(s.ranges, vec![(1, 0, 4)]);
        let Grouped::Sorted(Sorted { batch: sorted, .. }) = &s.rows else {
            panic!("one range: kept as it is");
        };
        assert!(Arc::ptr_eq(sorted.column(0), b.column(0)));
    }

    #[test]
    fn small_ranges_are_tagged_in_place_and_a_large_one_reorders() {
        let ids = [3u32, 0, 3, 1, 0, 3];
        let s = scatter(
            batch(6),
            (&ids[..]).into(),
            4,
            rows(4),
            &batch(0).schema(),
            &pool(),
        )
        .unwrap();
        assert_eq!(s.ranges, vec![(0, 0, 2), (1, 2, 1), (3, 3, 3)]);
        let Grouped::Direct(direct, _) = &s.rows else {
            panic!("every range below 4 rows: copied in place");
        };
        assert_eq!(direct.range_of_row, vec![2, 0, 2, 1, 0, 2]);
        let s = scatter(
            batch(6),
            (&ids[..]).into(),
            4,
            rows(3),
            &batch(0).schema(),
            &pool(),
        )
        .unwrap();
        assert!(
            matches!(&s.rows, Grouped::Sorted(_)),
            "partition 2 has 3 rows, not below 3: reordered"
        );
    }

    /// Six rows scattered over 4 partitions with compaction off (reordered).
    fn uncompacted(ids: &[u32], pool: &Arc<dyn MemoryPool>) -> Scattered {
        scatter(batch(6), ids.into(), 4, None, &batch(0).schema(), pool).unwrap()
    }

    #[test]
    fn the_reordered_copy_is_charged_until_it_is_dropped() {
        let pool: Arc<dyn MemoryPool> = Arc::new(arrow_shards_memory::BoundedPool::new(1 << 20));
        let s = uncompacted(&[3, 0, 3, 1, 0, 3], &pool);
        let Grouped::Sorted(sorted) = &s.rows else {
            panic!("compaction off: reordered");
        };
        assert!(pool.reserved() >= 6 * 8, "{}", pool.reserved());
        assert_eq!(sorted.charge.size(), pool.reserved());
        drop(s);
        assert_eq!(pool.reserved(), 0);
        // one partition: the batch as written, no copy, nothing charged
        let s = uncompacted(&[1; 6], &pool);
        assert_eq!((s.ranges.len(), pool.reserved()), (1, 0));
    }

    #[test]
    fn a_parked_write_holds_no_charge_and_gathers_the_same_rows_again() {
        let pool: Arc<dyn MemoryPool> = Arc::new(arrow_shards_memory::BoundedPool::new(1 << 20));
        let s = uncompacted(&[3, 0, 3, 1, 0, 3], &pool);
        let Grouped::Sorted(Sorted { batch: first, .. }) = &s.rows else {
            panic!("compaction off: reordered");
        };
        let (first, charged) = (first.clone(), pool.reserved());
        let (parked, freed) = park(Shard::Scattered(Box::new(s)));
        assert_eq!((freed, pool.reserved()), (charged, 0));
        let Shard::Scattered(again) = unpark(parked, &pool).unwrap() else {
            panic!("still scattered");
        };
        let Grouped::Sorted(Sorted { batch: second, .. }) = &again.rows else {
            panic!("gathered again");
        };
        assert_eq!(second, &first);
        assert_eq!(pool.reserved(), charged);
        // one partition: no copy to let go
        let one = uncompacted(&[1; 6], &pool);
        let (one, freed) = park(Shard::Scattered(Box::new(one)));
        assert_eq!(freed, 0);
        let Shard::Scattered(one) = one else {
            panic!("still scattered");
        };
        assert!(matches!(one.rows, Grouped::Sorted(_)));
    }

    #[test]
    fn buffers_the_gather_shares_with_the_batch_are_not_charged() {
        use arrow_array::DictionaryArray;
        use arrow_array::types::Int32Type;
        let pool: Arc<dyn MemoryPool> = Arc::new(arrow_shards_memory::BoundedPool::new(1 << 20));
        // 64 KB of dictionary values that `take` keeps as they are, 6 keys it copies
        let values = (0..1000).map(|i| format!("{i:064}")).collect::<Vec<_>>();
        let keys: DictionaryArray<Int32Type> = (0..6).map(|i| values[i * 100].as_str()).collect();
        let keys = keys.with_values(Arc::new(arrow_array::StringArray::from(values.clone())));
        let b = RecordBatch::try_from_iter([("d", Arc::new(keys) as ArrayRef)]).unwrap();
        let s = scatter(
            b.clone(),
            (&[1u32, 0, 1, 0, 1, 0][..]).into(),
            2,
            None,
            &b.schema(),
            &pool,
        );
        let s = s.unwrap();
        assert!(matches!(s.rows, Grouped::Sorted(_)));
        assert!(
            pool.reserved() > 0 && pool.reserved() < 1024,
            "{}",
            pool.reserved()
        );
    }
}
