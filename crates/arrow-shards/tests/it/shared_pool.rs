//! Buffers sharing one pool: a spill takes the largest partition across all of them, so a
//! buffer that needs room gets it from an idle buffer holding more, and nothing is lost.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_shards::batch_cost as batch_memory_size;
use arrow_shards::{BoundedPool, MemoryPool, ShardBuffer};

fn batch(first: i64, rows: i64) -> RecordBatch {
    let k: ArrayRef = Arc::new(Int64Array::from_iter_values(first..first + rows));
    RecordBatch::try_from_iter([("k", k)]).unwrap()
}

fn buffer_on(pool: &Arc<dyn MemoryPool>, root: &std::path::Path) -> ShardBuffer {
    ShardBuffer::builder(batch(0, 1).schema(), 4)
        .with_compact_target_rows(0)
        .with_memory_pool(pool.clone())
        .with_spill_dir(root)
        .build()
        .unwrap()
}

fn read_all(buffer: &ShardBuffer) -> Vec<i64> {
    buffer.finish().unwrap();
    let mut keys: Vec<i64> = (0..buffer.num_partitions())
        .flat_map(|p| {
            let batch = buffer.read(p).unwrap().concat().unwrap();
            batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    keys.sort_unstable();
    keys
}

#[test]
fn the_bigger_buffers_partition_is_spilled_when_the_other_asks_for_memory() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    // threshold 80% = 8 batches, target 60% = 6
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(size * 10));
    let (big, small) = (buffer_on(&pool, root.path()), buffer_on(&pool, root.path()));
    for i in 0..7 {
        big.write_blocking(0, batch(i * 1000, 1000)).unwrap();
    }
    assert_eq!(
        pool.reserved(),
        7 * size,
        "below the threshold: nothing spilled"
    );
    // the small buffer crosses the threshold: its spiller finds the largest partition in `big`
    small.write_blocking(1, batch(100_000, 1000)).unwrap();
    small.write_blocking(2, batch(101_000, 1000)).unwrap();
    // small's round (which forwards the request) is done, then big's round it queued
    small.wait_for_spills();
    big.wait_for_spills();
    assert_eq!(big.metrics().spill_runs, 1);
    assert!(big.metrics().bytes_spilled > 0);
    assert_eq!(small.metrics().bytes_spilled, 0, "small's partitions stay");
    assert_eq!(pool.reserved(), 2 * size);
    assert_eq!(read_all(&big), (0..7000).collect::<Vec<_>>());
    assert_eq!(read_all(&small), (100_000..102_000).collect::<Vec<_>>());
    big.close().unwrap();
    small.close().unwrap();
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn a_writer_waiting_for_memory_gets_it_from_an_idle_buffer() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(size * 10));
    let (idle, busy) = (buffer_on(&pool, root.path()), buffer_on(&pool, root.path()));
    for i in 0..4 {
        idle.write_blocking(0, batch(i * 1000, 1000)).unwrap();
    }
    // 40 batches through a pool of 10: the busy writer waits. Until something is spilled busy
    // holds at most 6 batches over its 4 partitions, none as large as idle's 4: so idle's
    // partition goes first, then busy spills its own.
    for i in 0..40 {
        busy.write_blocking(i % 4, batch(1_000_000 + i as i64 * 1000, 1000))
            .unwrap();
    }
    idle.wait_for_spills();
    assert!(idle.metrics().bytes_spilled > 0);
    assert!(pool.peak() <= size * 10);
    assert_eq!(read_all(&idle), (0..4000).collect::<Vec<_>>());
    assert_eq!(read_all(&busy), (1_000_000..1_040_000).collect::<Vec<_>>());
    drop((idle, busy));
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn a_dropped_buffer_leaves_the_pool() {
    let root = tempfile::tempdir().unwrap();
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(1 << 20));
    let a = buffer_on(&pool, root.path());
    let b = buffer_on(&pool, root.path());
    assert_eq!(pool.spill_peers().unwrap().len(), 2);
    b.close().unwrap();
    drop(b);
    assert_eq!(pool.spill_peers().unwrap().len(), 1);
    drop(a);
    assert!(pool.spill_peers().unwrap().is_empty());
}
