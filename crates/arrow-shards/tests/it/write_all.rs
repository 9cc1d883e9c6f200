//! `write_all` and `write_partitioned_all`: every batch of the input in order, or a stop that
//! hands back the refused batch and the rest of the input, so that nothing is lost.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Int64Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_shards::{Error, ShardBuffer};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]))
}

fn batch(first: i64, rows: i64) -> RecordBatch {
    let k = Int64Array::from_iter_values(first..first + rows);
    RecordBatch::try_new(schema(), vec![Arc::new(k)]).unwrap()
}

fn keys(batches: impl IntoIterator<Item = RecordBatch>) -> Vec<i64> {
    batches
        .into_iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn read_all(buffer: &ShardBuffer, partition: u32) -> Vec<i64> {
    keys(buffer.read(partition).unwrap().map(|b| b.unwrap()))
}

/// Ten batches of ten rows, `k` 0..100, batch `i` to partition `i % 3`.
fn input() -> Vec<(u32, RecordBatch)> {
    (0..10).map(|i| (i as u32 % 3, batch(i * 10, 10))).collect()
}

#[test]
fn every_batch_is_written_in_order_blocking_and_async() {
    for run_async in [false, true] {
        let buffer = ShardBuffer::builder(schema(), 3).build().unwrap();
        let written = if run_async {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime
                .block_on(buffer.write_all(futures::stream::iter(input())))
                .unwrap()
        } else {
            buffer.write_all_blocking(input()).unwrap()
        };
        assert_eq!((written.batches, written.rows), (10, 100));
        buffer.finish().unwrap();
        let expected: Vec<i64> = (0..10)
            .filter(|i| i % 3 == 1)
            .flat_map(|i| i * 10..i * 10 + 10)
            .collect();
        assert_eq!(read_all(&buffer, 1), expected);
        buffer.close().unwrap();
    }
}

#[test]
fn a_refusal_hands_back_the_batch_and_the_rest() {
    let buffer = ShardBuffer::builder(schema(), 3).build().unwrap();
    buffer.seal(2).unwrap();
    let stopped = *buffer.write_all_blocking(input()).unwrap_err();
    // batches 0 and 1 went in; batch 2 (to sealed partition 2) was refused
    assert_eq!((stopped.written.batches, stopped.written.rows), (2, 20));
    assert!(
        matches!(stopped.refused.error(), Error::Sealed { partition: 2 }),
        "{stopped}"
    );
    assert_eq!(stopped.refused.partition(), 2);
    let refused = stopped.refused.into_batch();
    let rest: Vec<RecordBatch> = stopped.rest.map(|(_, b)| b).collect();
    assert_eq!(rest.len(), 7);
    // nothing lost: written + refused + rest is the input
    buffer.finish().unwrap();
    let mut all = read_all(&buffer, 0);
    all.extend(read_all(&buffer, 1));
    all.extend(keys([refused]));
    all.extend(keys(rest));
    all.sort_unstable();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
    buffer.close().unwrap();
}

#[test]
fn a_partitioned_refusal_hands_back_the_ids_too() {
    let input = || -> Vec<(RecordBatch, UInt32Array)> {
        (0..4)
            .map(|i| (batch(i * 10, 10), UInt32Array::from(vec![i as u32 % 3; 10])))
            .collect()
    };
    let buffer = ShardBuffer::builder(schema(), 3).build().unwrap();
    let written = buffer.write_partitioned_all_blocking(input()).unwrap();
    assert_eq!(written.rows, 40);
    buffer.seal(1).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let stopped = *runtime
        .block_on(buffer.write_partitioned_all(futures::stream::iter(input())))
        .unwrap_err();
    assert_eq!(stopped.written.batches, 1);
    assert_eq!(stopped.ids, Some(UInt32Array::from(vec![1; 10])));
    assert_eq!(
        keys([stopped.refused.into_batch()]),
        (10..20).collect::<Vec<_>>()
    );
    buffer.close().unwrap();
}

/// The async loop yields to the runtime after each batch, so that a reader on the same runtime
/// takes what was written while the input goes on (DataFusion's scan hands over ~128 batches
/// before it yields itself: without this the exchange's readers lagged by ~200 MB and it
/// spilled). On a one-thread runtime, the subscriber has batches before the last write.
#[test]
fn the_async_loop_lets_readers_on_the_same_runtime_take_batches_meanwhile() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt;

    let buffer = ShardBuffer::builder(schema(), 1).build().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let taken = Arc::new(AtomicUsize::new(0));
    let seen_while_writing = runtime.block_on(async {
        let mut stream = buffer.subscribe(0).unwrap();
        let reader = {
            let taken = Arc::clone(&taken);
            tokio::spawn(async move {
                let mut keys = Vec::new();
                while let Some(batch) = stream.next().await {
                    keys.extend(self::keys([batch.unwrap()]));
                    taken.fetch_add(1, Ordering::SeqCst);
                }
                keys
            })
        };
        let target = arrow_shards::DEFAULT_COMPACT_TARGET_ROWS as i64;
        // Each batch is stored whole (the compaction target): takeable at once.
        let input = futures::stream::iter((0..8).map(|i| (0, batch(i * target, target))));
        let mut seen = Vec::new();
        let input = input.inspect(|_| seen.push(taken.load(Ordering::SeqCst)));
        buffer.write_all(input).await.unwrap();
        buffer.finish().unwrap();
        let keys = reader.await.unwrap();
        assert_eq!(keys, (0..8 * target).collect::<Vec<_>>());
        seen
    });
    assert!(
        seen_while_writing.last().is_some_and(|&taken| taken > 0),
        "batches the reader had taken at each write: {seen_while_writing:?}"
    );
    buffer.close().unwrap();
}
