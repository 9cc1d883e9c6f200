//! Writers that may wait (`with_write_timeout`) are released by reads, or time out with their
//! batch back.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_shards::{BoundedPool, Error, MemoryPool, ShardBuffer};

fn batch(rows: i64) -> RecordBatch {
    RecordBatch::try_from_iter([(
        "k",
        Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef,
    )])
    .unwrap()
}

fn size() -> usize {
    arrow_shards::batch_cost(&batch(1000))
}

#[test]
fn blocked_writer_is_released_by_a_read() {
    let buffer = ShardBuffer::builder(batch(1).schema(), 2)
        .with_compact_target_rows(0)
        .with_memory_limit(size())
        .with_spill(false)
        .with_write_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    buffer.write_blocking(0, batch(1000)).unwrap();
    buffer.seal(0).unwrap();
    std::thread::scope(|s| {
        let writer = s.spawn(|| buffer.write_blocking(1, batch(1000)));
        // wait until the writer is parked (its wait shows in the metrics only when done, so poll
        // the pool: nothing else can change it), then free room by reading partition 0
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(buffer.read(0).unwrap().count(), 1);
        writer.join().unwrap().unwrap();
    });
    assert!(buffer.metrics().write_wait > Duration::ZERO);
}

#[test]
fn blocked_writer_times_out_with_its_batch() {
    let buffer = ShardBuffer::builder(batch(1).schema(), 1)
        .with_compact_target_rows(0)
        .with_memory_limit(size())
        .with_spill(false)
        .with_write_timeout(Duration::from_millis(30))
        .build()
        .unwrap();
    buffer.write_blocking(0, batch(1000)).unwrap();
    let err = buffer.write_blocking(0, batch(1000)).unwrap_err();
    assert!(matches!(err.error(), Error::MemoryExhausted { .. }));
    assert_eq!(err.into_batch(), batch(1000));
}

#[test]
fn async_writer_is_released_by_another_buffer_on_the_same_pool() {
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(size()));
    let other = ShardBuffer::builder(batch(1).schema(), 1)
        .with_compact_target_rows(0)
        .with_memory_pool(pool.clone())
        .with_spill(false)
        .build()
        .unwrap();
    let buffer = ShardBuffer::builder(batch(1).schema(), 1)
        .with_compact_target_rows(0)
        .with_memory_pool(pool)
        .with_spill(false)
        .with_write_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    other.write_blocking(0, batch(1000)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let writer = tokio::spawn({
            let buffer = buffer.clone();
            async move { buffer.write(0, batch(1000)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!writer.is_finished());
        other.finish().unwrap();
        drop(other.read(0).unwrap());
        tokio::time::timeout(Duration::from_secs(60), writer)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    });
}

#[test]
fn dropping_a_waiting_write_leaves_nothing_behind() {
    let buffer = ShardBuffer::builder(batch(1).schema(), 1)
        .with_compact_target_rows(0)
        .with_memory_limit(size())
        .with_spill(false)
        .with_write_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    buffer.write_blocking(0, batch(1000)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let fut = buffer.write(0, batch(1000));
        assert!(
            tokio::time::timeout(Duration::from_millis(10), fut)
                .await
                .is_err()
        );
    });
    let m = buffer.metrics();
    assert_eq!((m.batches_written, m.reserved), (1, size()));
}
