//! Memory is counted by distinct allocation, checked against arrow's own tracking pool.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, UInt32Array};
use arrow_buffer::MemoryPool as ArrowPool;
use arrow_buffer::TrackingMemoryPool;
use arrow_shards::{BoundedPool, Error, MemoryPool, ShardBuffer};

fn big_batch(rows: usize, offset: i64) -> RecordBatch {
    RecordBatch::try_from_iter([
        (
            "k",
            Arc::new(Int64Array::from_iter_values(offset..offset + rows as i64)) as ArrayRef,
        ),
        (
            "v",
            Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64))) as ArrayRef,
        ),
    ])
    .unwrap()
}

/// ~1 GiB of input, partitioned both ways real engines do it: contiguous slices (which keep their
/// parent alive) and `take` outputs (fresh allocations). The buffer's reservation must agree with
/// arrow's `TrackingMemoryPool` claim of every held batch within 10%.
#[test]
fn reserved_bytes_match_arrow_tracking_pool_for_a_gib_of_slices_and_takes() {
    const ROWS: usize = 16 << 20; // 16 Mi rows x 16 bytes = 256 MiB per input batch
    const PARTS: u32 = 64;
    let schema = big_batch(1, 0).schema();
    let buffer = ShardBuffer::builder(schema, PARTS)
        .with_compact_target_rows(0)
        .build()
        .unwrap();
    let mut held = Vec::new();
    for i in 0..4 {
        let input = big_batch(ROWS, (i * ROWS) as i64);
        let per = ROWS / PARTS as usize;
        for p in 0..PARTS {
            let shard = if i % 2 == 0 {
                input.slice(p as usize * per, per)
            } else {
                let idx = UInt32Array::from_iter_values((p..ROWS as u32).step_by(PARTS as usize));
                arrow_select::take::take_record_batch(&input, &idx).unwrap()
            };
            held.push(shard.clone());
            buffer.write_blocking(p, shard).unwrap();
        }
    }
    let tracking = TrackingMemoryPool::default();
    for b in &held {
        b.claim(&tracking as &dyn ArrowPool);
    }
    let reserved = buffer.metrics().reserved as f64;
    let truth = tracking.used() as f64;
    assert!(truth > 900.0 * (1 << 20) as f64, "test holds {truth} bytes");
    assert!(
        (reserved - truth).abs() <= truth * 0.10,
        "reserved {reserved} vs arrow's count {truth}"
    );
    // the naive per-batch count would be off by the slice fan-out
    let naive: usize = held.iter().map(|b| b.get_array_memory_size()).sum();
    assert!(naive as f64 > truth * 10.0);
    drop(held);
    buffer.finish().unwrap();
    for p in 0..PARTS {
        buffer.read(p).unwrap().for_each(drop);
    }
    assert_eq!(buffer.close().unwrap().reserved, 0);
}

#[test]
fn shared_parent_is_released_by_the_last_partition_read() {
    let input = big_batch(1000, 0);
    let buffer = ShardBuffer::builder(input.schema(), 2)
        .with_compact_target_rows(0)
        .build()
        .unwrap();
    buffer.write_blocking(0, input.slice(0, 500)).unwrap();
    buffer.write_blocking(1, input.slice(500, 500)).unwrap();
    let whole = arrow_shards_memory::sizing::batch_memory_size(&input);
    // each slice costs its fixed overhead on top of the parent, which is charged once
    let overhead = |b: &arrow_array::RecordBatch| arrow_shards::batch_cost(b) - whole;
    let (o0, o1) = (
        overhead(&input.slice(0, 500)),
        overhead(&input.slice(500, 500)),
    );
    assert_eq!(buffer.metrics().reserved, whole + o0 + o1);
    buffer.finish().unwrap();
    let r0 = buffer.read(0).unwrap();
    // partition 1 still keeps the parent alive: the buffer keeps it charged
    assert_eq!(buffer.metrics().reserved, whole + o1);
    let r1 = buffer.read(1).unwrap();
    // now only the readers hold it, charged once between them
    assert_eq!(buffer.metrics().reserved, 0);
    assert_eq!(buffer.memory_pool().reserved(), whole + o0 + o1);
    drop((r0, r1));
    assert_eq!(buffer.memory_pool().reserved(), 0);
}

#[test]
fn reader_releases_as_it_hands_over_and_on_drop_half_way() {
    let schema = big_batch(1, 0).schema();
    let buffer = ShardBuffer::builder(schema, 1)
        .with_compact_target_rows(0)
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    for i in 0..4 {
        buffer.write_blocking(0, big_batch(1000, i * 1000)).unwrap();
    }
    buffer.finish().unwrap();
    let pool = buffer.memory_pool().clone();
    let full = pool.reserved();
    let mut reader = buffer.read(0).unwrap();
    let _first = reader.next().unwrap().unwrap();
    let after_one = pool.reserved();
    assert!(after_one < full && after_one > 0, "{after_one} of {full}");
    drop(reader);
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn buffers_sharing_a_pool_share_one_budget() {
    let one = big_batch(1000, 0);
    let size = arrow_shards::batch_cost(&one);
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(size * 3));
    let a = ShardBuffer::builder(one.schema(), 2)
        .with_compact_target_rows(0)
        .with_memory_pool(pool.clone())
        .with_spill(false)
        .build()
        .unwrap();
    let b = ShardBuffer::builder(one.schema(), 2)
        .with_compact_target_rows(0)
        .with_memory_pool(pool.clone())
        .with_spill(false)
        .build()
        .unwrap();
    a.write_blocking(0, big_batch(1000, 0)).unwrap();
    b.write_blocking(0, big_batch(1000, 0)).unwrap();
    a.write_blocking(1, big_batch(1000, 0)).unwrap();
    let err = b.write_blocking(1, big_batch(1000, 0)).unwrap_err();
    assert!(matches!(err.error(), Error::MemoryExhausted { .. }));
    assert_eq!(pool.reserved(), a.metrics().reserved + b.metrics().reserved);
    a.finish().unwrap();
    drop(a.read(0).unwrap());
    b.write_blocking(1, err.into_batch()).unwrap();
}
