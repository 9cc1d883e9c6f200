//! Streaming reads: subscriptions take their partition's rows while producers write, every row
//! exactly once in each producer's order, under spilling; drop, close and oversized writes
//! while subscribed.

use std::collections::HashMap;
use std::task::Poll;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::ArrowError;
use arrow_shards::{Error, ShardBuffer};
use futures::StreamExt;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{KINDS, Written, assert_partition, batch, schema};
use crate::harness::entries;

fn concat(schema: &arrow_schema::SchemaRef, batches: &[RecordBatch]) -> RecordBatch {
    arrow_select::concat::concat_batches(schema, batches).unwrap()
}

/// Producer `w`'s writes: single writes, or scatter writes with a random partition per row.
fn produce(
    buffer: &ShardBuffer,
    seed: u64,
    w: usize,
    batches: usize,
    max_rows: usize,
    scatter: bool,
) -> Written {
    let schema = buffer.schema().clone();
    let partitions = buffer.num_partitions();
    let mut rng = StdRng::seed_from_u64(seed ^ ((w as u64) << 32));
    let mut written = Written::new();
    let mut seq: HashMap<u32, i64> = HashMap::new();
    for _ in 0..batches {
        let rows = rng.random_range(0..=max_rows);
        if scatter {
            let b = batch(&schema, &mut rng, w as i64, 0, rows);
            let ids: Vec<u32> = (0..rows).map(|_| rng.random_range(0..partitions)).collect();
            for p in 0..partitions {
                let idx: UInt32Array = (0..rows as u32).filter(|&r| ids[r as usize] == p).collect();
                if !idx.is_empty() {
                    let part = arrow_select::take::take_record_batch(&b, &idx).unwrap();
                    written.entry((w as i64, p)).or_default().push(part);
                }
            }
            buffer
                .write_partitioned_blocking(b, &UInt32Array::from(ids))
                .expect("write fits");
        } else {
            let p = rng.random_range(0..partitions);
            let next = seq.entry(p).or_default();
            let b = batch(&schema, &mut rng, w as i64, *next, rows);
            *next += rows as i64;
            buffer.write_blocking(p, b.clone()).expect("write fits");
            written.entry((w as i64, p)).or_default().push(b);
        }
    }
    written
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Every partition streamed by its own reader while producers write, under a limit small
    /// enough to spill, with or without a minimum batch: every row once, in each producer's
    /// order.
    #[test]
    fn streamed_rows_come_back_once_in_producer_order(
        kinds in proptest::collection::vec(0..KINDS, 0..4),
        partitions in 1u32..48,
        producers in 1usize..=3,
        batches in 1usize..40,
        max_rows in 0usize..3000,
        limit_kib in 64usize..4096,
        scatter in any::<bool>(),
        seal in any::<bool>(),
        min_rows in prop_oneof![Just(0usize), 1usize..2000],
        seed in any::<u64>(),
    ) {
        let schema = schema(&kinds);
        let tmp = tempfile::tempdir().unwrap();
        let buffer = ShardBuffer::builder(schema.clone(), partitions)
            .with_memory_limit(limit_kib << 10)
            .with_spill_dir(tmp.path())
            .build()
            .unwrap();
        let (written, read) = std::thread::scope(|s| {
            let readers: Vec<_> = (0..partitions)
                .map(|p| {
                    let reader = buffer.subscribe_blocking_with_min_rows(p, min_rows).unwrap();
                    s.spawn(move || reader.collect::<Result<Vec<_>, ArrowError>>())
                })
                .collect();
            let writers: Vec<_> = (0..producers)
                .map(|w| {
                    let buffer = buffer.clone();
                    s.spawn(move || produce(&buffer, seed, w, batches, max_rows, scatter))
                })
                .collect();
            let mut written = Written::new();
            for h in writers {
                written.extend(h.join().unwrap());
            }
            if seal {
                (0..partitions).for_each(|p| buffer.seal(p).unwrap());
            } else {
                buffer.finish().unwrap();
            }
            let read: Vec<_> = readers.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
            (written, read)
        });
        for (p, batches) in read.iter().enumerate() {
            prop_assert!(batches.iter().all(|b| b.num_rows() > 0), "an empty batch");
            assert_partition(&concat(&schema, batches), p as u32, &written);
        }
        let metrics = buffer.close().unwrap();
        let rows: u64 = written.values().flatten().map(|b| b.num_rows() as u64).sum();
        prop_assert_eq!(metrics.rows_read, rows);
        prop_assert_eq!(metrics.rows_discarded, 0);
        prop_assert_eq!(buffer.memory_pool().reserved(), 0);
        prop_assert!(entries(tmp.path()).is_empty(), "files left after close");
    }
}

fn ints(schema: &arrow_schema::SchemaRef, first: i64, rows: usize) -> RecordBatch {
    batch(
        schema,
        &mut StdRng::seed_from_u64(first as u64),
        0,
        first,
        rows,
    )
}

fn seqs(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(1).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

#[test]
fn a_take_hands_over_complete_batches_while_the_partition_is_open() {
    let schema = schema(&[0]);
    let buffer = ShardBuffer::builder(schema.clone(), 2).build().unwrap();
    let mut reader = buffer.subscribe_blocking(0).unwrap();
    // A batch of the compaction target is stored whole: it can be taken at once.
    let target = arrow_shards::DEFAULT_COMPACT_TARGET_ROWS;
    buffer.write_blocking(0, ints(&schema, 0, target)).unwrap();
    let first = reader.next().unwrap().unwrap();
    assert_eq!(first.num_rows(), target);
    assert_eq!(buffer.metrics().rows_streamed, target as u64);
    // Small writes are copied into the open batch, which a take of an open partition leaves.
    for k in 0..3 {
        let first = target as i64 + k * 10;
        buffer.write_blocking(0, ints(&schema, first, 10)).unwrap();
    }
    assert!(
        reader.try_next().is_pending(),
        "an open batch is not cut for a take"
    );
    buffer.seal(0).unwrap();
    let rest: Vec<_> = reader.by_ref().map(Result::unwrap).collect();
    assert_eq!(
        seqs(&rest),
        (target as i64..target as i64 + 30).collect::<Vec<_>>()
    );
    assert!(reader.next().is_none());
    // One claim per partition, whichever way.
    assert!(matches!(
        buffer.read(0),
        Err(Error::AlreadyRead { partition: 0 })
    ));
    assert!(matches!(
        buffer.subscribe(0),
        Err(Error::AlreadyRead { partition: 0 })
    ));
    buffer.seal(1).unwrap();
    buffer.read(1).unwrap();
    assert!(matches!(
        buffer.subscribe_blocking(1),
        Err(Error::AlreadyRead { partition: 1 })
    ));
    assert!(matches!(
        buffer.subscribe(2),
        Err(Error::PartitionOutOfRange { .. })
    ));
    let metrics = buffer.close().unwrap();
    assert_eq!(metrics.rows_read, target as u64 + 30);
}

/// Under a memory limit a subscribed partition's open batch is cut at its share of the limit
/// (a quarter of it over the partitions, in data bytes), long before the compaction target in
/// rows: with 1,024 partitions an open batch would otherwise reach 8,192 rows only at the end,
/// and every subscriber would wait for the spill. A partition without a subscriber keeps
/// growing to the target.
#[test]
fn under_a_limit_a_subscribed_partition_is_cut_at_its_share_of_it() {
    let schema = schema(&[0]);
    // 4 MiB over 16 partitions: cut at 64 KiB of data, ~2,700 rows of these three columns.
    let buffer = ShardBuffer::builder(schema.clone(), 16)
        .with_memory_limit(4 << 20)
        .build()
        .unwrap();
    let target = arrow_shards::DEFAULT_COMPACT_TARGET_ROWS;
    let mut reader = buffer.subscribe_blocking(0).unwrap();
    let mut written = 0;
    let first = loop {
        assert!(
            written < target,
            "no batch handed over below the row target"
        );
        buffer
            .write_blocking(0, ints(&schema, written as i64, 100))
            .unwrap();
        buffer
            .write_blocking(1, ints(&schema, written as i64, 100))
            .unwrap();
        written += 100;
        if let Poll::Ready(Some(batch)) = reader.try_next() {
            break batch.unwrap();
        }
    };
    assert!(
        (1000..target).contains(&first.num_rows()),
        "cut at {} rows",
        first.num_rows()
    );
    // Partition 1 had no subscriber: its open batch was not cut, nothing there to take.
    let mut other = buffer.subscribe_blocking(1).unwrap();
    assert!(other.try_next().is_pending(), "partition 1 was cut");
    buffer.finish().unwrap();
    let mut got = vec![first];
    got.extend(reader.map(Result::unwrap));
    assert_eq!(seqs(&got), (0..written as i64).collect::<Vec<_>>());
    let rest: Vec<_> = other.map(Result::unwrap).collect();
    assert_eq!(seqs(&rest), (0..written as i64).collect::<Vec<_>>());
    buffer.close().unwrap();
}

/// Counts wake-ups, to tell whether a subscription was woken (no timing involved).
#[derive(Default)]
struct Woken(std::sync::atomic::AtomicUsize);

impl futures::task::ArcWake for Woken {
    fn wake_by_ref(arc_self: &std::sync::Arc<Self>) {
        arc_self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_minimum_hands_over_the_open_batch_once_it_holds_that_many_rows() {
    let schema = schema(&[0]);
    let buffer = ShardBuffer::builder(schema.clone(), 1).build().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let mut stream = buffer.subscribe_with_min_rows(0, 100).unwrap();
    let woken = std::sync::Arc::new(Woken::default());
    let waker = futures::task::waker(std::sync::Arc::clone(&woken));
    let mut cx = std::task::Context::from_waker(&waker);
    let woken_times = || woken.0.load(std::sync::atomic::Ordering::SeqCst);

    buffer.write_blocking(0, ints(&schema, 0, 60)).unwrap();
    assert!(
        stream.poll_next_unpin(&mut cx).is_pending(),
        "60 rows: under the minimum"
    );
    buffer.write_blocking(0, ints(&schema, 60, 30)).unwrap();
    assert_eq!(woken_times(), 0, "90 rows: not woken");
    buffer.write_blocking(0, ints(&schema, 90, 30)).unwrap();
    assert_eq!(
        woken_times(),
        1,
        "120 rows: woken once the minimum is reached"
    );
    let Poll::Ready(Some(first)) = stream.poll_next_unpin(&mut cx) else {
        panic!("the open batch was not handed over");
    };
    assert_eq!(seqs(&[first.unwrap()]), (0..120).collect::<Vec<_>>());
    buffer.write_blocking(0, ints(&schema, 120, 10)).unwrap();
    assert!(
        stream.poll_next_unpin(&mut cx).is_pending(),
        "10 rows: under the minimum"
    );
    buffer.finish().unwrap();
    let rest: Vec<_> = runtime.block_on(stream.collect::<Vec<_>>());
    let rest: Vec<_> = rest.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        seqs(&rest),
        (120..130).collect::<Vec<_>>(),
        "the last batch is shorter"
    );
    assert_eq!(buffer.close().unwrap().rows_streamed, 120);
}

#[test]
fn a_dropped_subscription_discards_its_partition_and_frees_everything() {
    let schema = schema(&[1]);
    let tmp = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(schema.clone(), 3)
        .with_memory_limit(256 << 10)
        .with_spill_dir(tmp.path())
        .build()
        .unwrap();
    let mut reader = buffer.subscribe_blocking(1).unwrap();
    let target = arrow_shards::DEFAULT_COMPACT_TARGET_ROWS;
    buffer.write_blocking(1, ints(&schema, 0, target)).unwrap();
    buffer
        .write_blocking(1, ints(&schema, target as i64, target))
        .unwrap();
    assert_eq!(reader.next().unwrap().unwrap().num_rows(), target);
    drop(reader);
    // The second batch, and everything written afterwards, is discarded; other partitions are
    // untouched and writes to the abandoned one are still accepted (a scatter write included).
    buffer.write_blocking(1, ints(&schema, 0, 5000)).unwrap();
    buffer.write_blocking(1, ints(&schema, 0, 7)).unwrap();
    let ids = UInt32Array::from((0..300u32).map(|r| r % 3).collect::<Vec<_>>());
    buffer
        .write_partitioned_blocking(ints(&schema, 0, 300), &ids)
        .unwrap();
    buffer.finish().unwrap();
    assert_eq!(buffer.read(0).unwrap().concat().unwrap().num_rows(), 100);
    assert_eq!(buffer.read(2).unwrap().concat().unwrap().num_rows(), 100);
    let metrics = buffer.close().unwrap();
    assert_eq!(metrics.rows_discarded, (target + 5000 + 7 + 100) as u64);
    assert_eq!(metrics.reserved, 0);
    assert_eq!(buffer.memory_pool().reserved(), 0);
    assert!(entries(tmp.path()).is_empty());
}

#[test]
fn closing_ends_a_waiting_subscription_with_an_error() {
    let schema = schema(&[]);
    let buffer = ShardBuffer::builder(schema, 1).build().unwrap();
    let mut reader = buffer.subscribe_blocking(0).unwrap();
    std::thread::scope(|s| {
        // Whether it waits before the close or takes after it, it ends with Closed.
        let waiting = s.spawn(move || reader.next());
        buffer.close().unwrap();
        let error = waiting.join().unwrap().expect("an item").unwrap_err();
        let ArrowError::ExternalError(inner) = &error else {
            panic!("{error}")
        };
        assert!(
            matches!(inner.downcast_ref::<Error>(), Some(Error::Closed)),
            "{error}"
        );
    });
}

#[test]
fn an_oversized_write_to_a_subscribed_partition_keeps_its_place() {
    let schema = schema(&[1]);
    let tmp = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(schema.clone(), 2)
        .with_memory_limit(128 << 10)
        .with_spill_dir(tmp.path())
        .build()
        .unwrap();
    let mut reader = buffer.subscribe_blocking(0).unwrap();
    let mut got = Vec::new();
    buffer.write_blocking(0, ints(&schema, 0, 100)).unwrap();
    // Far above the whole limit: it goes to disk directly, after the 100 rows before it.
    buffer
        .write_blocking(0, ints(&schema, 100, 40_000))
        .unwrap();
    while let Poll::Ready(Some(batch)) = reader.try_next() {
        got.push(batch.unwrap());
    }
    buffer.write_blocking(0, ints(&schema, 40_100, 50)).unwrap();
    buffer.finish().unwrap();
    got.extend(reader.map(Result::unwrap));
    assert_eq!(seqs(&got), (0..40_150).collect::<Vec<_>>());
    let metrics = buffer.close().unwrap();
    assert_eq!(metrics.direct_writes, 1);
    assert_eq!(buffer.memory_pool().reserved(), 0);
}

/// Many async readers at once, each streaming its partition while two producers scatter.
fn stream_all(partitions: u32, limit: usize, segment: usize) -> (u64, usize) {
    let schema = schema(&[1]);
    let tmp = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(schema.clone(), partitions)
        .with_memory_limit(limit)
        .with_spill_dir(tmp.path())
        .with_spill_segment_bytes(segment)
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let written: u64 = runtime.block_on(async {
        let readers: Vec<_> = (0..partitions)
            .map(|p| {
                let mut stream = buffer.subscribe(p).unwrap();
                tokio::spawn(async move {
                    let mut rows = 0u64;
                    while let Some(batch) = stream.next().await {
                        rows += batch.unwrap().num_rows() as u64;
                    }
                    rows
                })
            })
            .collect();
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let buffer = buffer.clone();
                tokio::task::spawn_blocking(move || {
                    let mut rng = StdRng::seed_from_u64(w);
                    let mut rows = 0u64;
                    for i in 0..40 {
                        let b = ints(buffer.schema(), i * 8192, 8192);
                        let ids: Vec<u32> =
                            (0..8192).map(|_| rng.random_range(0..partitions)).collect();
                        buffer
                            .write_partitioned_blocking(b, &UInt32Array::from(ids))
                            .unwrap();
                        rows += 8192;
                    }
                    rows
                })
            })
            .collect();
        let mut written = 0;
        for w in writers {
            written += w.await.unwrap();
        }
        buffer.finish().unwrap();
        let mut read = 0;
        for r in readers {
            read += r.await.unwrap();
        }
        assert_eq!(read, written);
        written
    });
    let metrics = buffer.close().unwrap();
    assert_eq!(metrics.rows_read, written);
    assert_eq!(buffer.memory_pool().reserved(), 0);
    (written, buffer.memory_pool().peak())
}

/// With 64 and 1,024 readers streaming at once under a small limit, the pool's peak stays
/// within the limit plus two segments (at most the segment size, or one stored batch when a
/// batch is larger; compacted batches here are ~330 KB): readers that keep up take batches from
/// memory and seldom read a segment back.
#[test]
fn sixty_four_and_a_thousand_streams_at_once() {
    let (limit, segment) = (4 << 20, 256 << 10);
    for partitions in [64, 1024] {
        let (_, peak) = stream_all(partitions, limit, segment);
        let bound = limit + 2 * (512 << 10);
        assert!(
            peak <= bound,
            "{partitions} streams: pool peak {peak} > {bound}"
        );
    }
}
