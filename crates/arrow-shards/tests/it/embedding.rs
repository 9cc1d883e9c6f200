//! What an embedding engine builds on: the named stream, the spill barrier, the async close.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::SchemaRef;
use arrow_shards::{PartitionStream, ShardBuffer};
use futures::StreamExt;

fn ints(range: std::ops::Range<i64>) -> RecordBatch {
    RecordBatch::try_from_iter([(
        "k",
        Arc::new(Int64Array::from_iter_values(range)) as ArrayRef,
    )])
    .unwrap()
}

/// An engine's stream wrapper: a named stream type can be a field.
struct EngineStream {
    schema: SchemaRef,
    inner: PartitionStream,
}

#[test]
fn a_partition_stream_is_a_named_type_with_its_schema() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(ints(0..1).schema(), 2)
        .with_memory_limit(256 << 10)
        .with_spill_dir(dir.path())
        .build()
        .unwrap();
    for i in 0..40 {
        buffer
            .write_blocking(i % 2, ints(i as i64 * 1000..(i as i64 + 1) * 1000))
            .unwrap();
    }
    buffer.wait_for_spills();
    assert!(buffer.metrics().bytes_spilled > 0);
    buffer.finish().unwrap();
    let metrics = rt.block_on(async {
        let inner = buffer.read(0).unwrap().into_stream();
        let mut stream = EngineStream {
            schema: inner.schema(),
            inner,
        };
        assert_eq!(stream.schema, *buffer.schema());
        let mut rows = 0;
        while let Some(batch) = stream.inner.next().await {
            rows += batch.unwrap().num_rows();
        }
        assert_eq!(rows, 20_000);
        buffer.spills_done().await;
        drop(buffer.read(1).unwrap());
        buffer.close_async().await.unwrap()
    });
    assert_eq!(metrics.rows_read, 20_000);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

fn spilling_buffer(dir: &std::path::Path) -> ShardBuffer {
    let buffer = ShardBuffer::builder(ints(0..1).schema(), 2)
        .with_memory_limit(64 << 10)
        .with_spill_dir(dir)
        .build()
        .unwrap();
    for i in 0..20 {
        buffer.write_blocking(i % 2, ints(0..1000)).unwrap();
    }
    buffer
}

#[test]
fn dropping_the_last_handle_outside_a_runtime_removes_the_spill_dir_before_returning() {
    // a process that exits right after the drop (the CLI on an error) leaves nothing behind
    let dir = tempfile::tempdir().unwrap();
    let buffer = spilling_buffer(dir.path());
    let spill_dir = buffer.spill_dir().unwrap().to_path_buf();
    let pool = buffer.memory_pool().clone();
    drop(buffer);
    assert!(!spill_dir.exists(), "the spill directory outlived the drop");
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn dropping_the_last_handle_in_a_runtime_does_not_wait_and_still_removes_the_spill_dir() {
    let dir = tempfile::tempdir().unwrap();
    let buffer = spilling_buffer(dir.path());
    let spill_dir = buffer.spill_dir().unwrap().to_path_buf();
    let pool = buffer.memory_pool().clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async move { drop(buffer) });
    // the spiller thread ends by itself and drops the last share of the buffer
    for _ in 0..10_000 {
        if !spill_dir.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(
        !spill_dir.exists(),
        "the spill directory outlived the buffer"
    );
    assert_eq!(pool.reserved(), 0);
}
