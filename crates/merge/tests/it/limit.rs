//! Reading under a pool limit: a read needs memory it may not wait for, so before a read that
//! would pass the limit the rows buffered so far come out as a shorter batch, and a merge never
//! holds more than one segment past the limit (coalescing 8192-row batches out of 32 KiB
//! segments would otherwise keep about ten of them charged).

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use arrow_shards_memory::{BoundedPool, MemoryPool, MemoryReservation};
use arrow_shards_merge::{MergeOptions, Merger, PartitionSources};
use arrow_shards_spill::{SegmentRef, SpillDir};
use futures::StreamExt;
use proptest::prelude::*;

use crate::common::*;
use crate::segments::{decoded_bytes, runtime, spill};

/// The largest segment, counted as the documented bound counts it: the larger of its
/// `memory_bytes` and its decoded size.
fn largest_segment(segments: &[SegmentRef]) -> usize {
    segments
        .iter()
        .map(|s| s.memory_bytes().max(decoded_bytes(s)))
        .max()
        .unwrap_or(0)
}

/// A pool of `limit` bytes holding `memory`'s charge (returned) and `others` more bytes (kept
/// alive by the second reservation), as a buffer's other partitions would.
fn pool_holding(
    limit: usize,
    memory: &[RecordBatch],
    others: usize,
) -> (Arc<dyn MemoryPool>, MemoryReservation, MemoryReservation) {
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(limit));
    let charged = charge(&pool, memory);
    let mut held = MemoryReservation::new(&pool);
    held.try_grow(others).expect("others fit under the limit");
    (pool, charged, held)
}

fn rows(out: &[RecordBatch]) -> Vec<usize> {
    out.iter().map(RecordBatch::num_rows).collect()
}

fn sources(
    schema: &SchemaRef,
    segments: &[SegmentRef],
    memory: &[RecordBatch],
    charged: MemoryReservation,
) -> PartitionSources {
    PartitionSources::new(SchemaRef::clone(schema))
        .with_segments(segments.to_vec())
        .with_memory(memory.to_vec(), charged)
}

#[test]
fn a_full_pool_cuts_batches_short_before_each_read_and_holds_one_segment() {
    let schema = schema();
    let input = batches(&schema, &[700, 700, 700, 700, 700, 700, 700, 700, 100, 100]);
    let (spilled, memory) = input.split_at(8);
    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let runs: Vec<_> = spilled.chunks(1).map(<[RecordBatch]>::to_vec).collect();
    let segments = spill(&dir, &schema, &runs);
    let segment = largest_segment(&segments);
    let limit = 256 << 10;
    let options = MergeOptions::new()
        .with_target_rows(4096)
        .with_read_ahead(2);
    let memory_bytes = charge(&pool(), memory).size();
    // what the partition's other users leave: less than any segment
    let others = limit - memory_bytes - segment / 2;

    // every read meets a full pool: each segment's rows come out before the next is read;
    // the memory batches, read without reserving anything, still coalesce
    let (pool, charged, held) = pool_holding(limit, memory, others);
    let merger = Merger::new(
        sources(&schema, &segments, memory, charged),
        options.clone(),
        pool.clone(),
    );
    let out: Vec<_> = merger.collect::<Result<_, _>>().unwrap();
    assert_eq!(rows(&out), [700, 700, 700, 700, 700, 700, 700, 900]);
    assert_eq!(concat(&schema, &out), concat(&schema, &input));
    assert!(
        pool.peak() <= limit + segment,
        "iterator: peak {} > limit {limit} + segment {segment}",
        pool.peak()
    );
    drop(held);
    assert_eq!(pool.reserved(), 0);

    // the stream: no read ahead fits, so the same batches and the same bound
    let (pool, charged, held) = pool_holding(limit, memory, others);
    let merger = Merger::new(
        sources(&schema, &segments, memory, charged),
        options.clone(),
        pool.clone(),
    );
    let streamed: Vec<_> = runtime().block_on(async {
        let stream = merger.into_stream();
        stream.map(|r| r.unwrap()).collect::<Vec<_>>().await
    });
    assert_eq!(streamed, out);
    assert!(
        pool.peak() <= limit + segment,
        "stream: peak {} > limit {limit} + segment {segment}",
        pool.peak()
    );
    drop(held);
    assert_eq!(pool.reserved(), 0);

    // with room, nothing is cut
    let (pool, charged, _held) = pool_holding(64 << 20, memory, 0);
    let merger = Merger::new(sources(&schema, &segments, memory, charged), options, pool);
    let out: Vec<_> = merger.collect::<Result<_, _>>().unwrap();
    assert_eq!(rows(&out), [4096, 1704]);
    dir.close().unwrap();
}

/// Like the size check of the unbounded tests, plus the cut: a batch may also be short if it
/// ends where a segment ends (the rows buffered before a read that did not fit).
fn check_sizes(out: &[RecordBatch], target: usize, boundaries: &[usize]) -> Result<(), String> {
    let mut end = 0;
    for (i, b) in out.iter().enumerate() {
        let rows = b.num_rows();
        end += rows;
        let last = i + 1 == out.len();
        let before_big = out.get(i + 1).is_some_and(|n| n.num_rows() >= target);
        let cut = boundaries.contains(&end);
        if rows == 0 || (rows < target && !last && !before_big && !cut) {
            return Err(format!("output {i} has {rows} rows (target {target})"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Any partition, any limit, any fill of the pool by others: rows in order, every
    /// reservation released, and the documented bound: the iterator holds at most one segment
    /// past the limit, the stream at most `1 + read_ahead`.
    #[test]
    fn reading_under_a_limit_passes_it_by_at_most_the_documented_segments(
        sizes in prop::collection::vec(0usize..400, 1..14),
        in_memory in 0usize..4,
        target in 1usize..1500,
        read_ahead in 0usize..3,
        limit in 0usize..200_000,
        fill in 0usize..=100,
    ) {
        let schema = schema();
        let input = batches(&schema, &sizes);
        let split = in_memory.min(input.len());
        let (spilled, memory) = input.split_at(input.len() - split);
        let runs: Vec<_> = spilled.chunks(1).map(<[RecordBatch]>::to_vec).collect();
        let tmp = tempfile::tempdir().unwrap();
        let dir = SpillDir::create(tmp.path()).unwrap();
        let segments = spill(&dir, &schema, &runs);
        let segment = largest_segment(&segments);
        let boundaries: Vec<usize> = segments
            .iter()
            .scan(0, |end, s| {
                *end += s.rows() as usize;
                Some(*end)
            })
            .collect();
        // the memory batches are within the limit, as a buffer's are
        let limit = limit.max(charge(&pool(), memory).size());
        let others = (limit - charge(&pool(), memory).size()) * fill / 100;
        let options = MergeOptions::new().with_target_rows(target).with_read_ahead(read_ahead);

        let (pool, charged, held) = pool_holding(limit, memory, others);
        let merger = Merger::new(sources(&schema, &segments, memory, charged), options.clone(), pool.clone());
        let out: Vec<_> = merger.collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(concat(&schema, &out), concat(&schema, &input));
        let sizes = check_sizes(&out, target, &boundaries);
        prop_assert!(sizes.is_ok(), "{:?}", sizes);
        prop_assert!(pool.peak() <= limit + segment, "iterator: peak {} > {limit} + {segment}", pool.peak());
        drop(held);
        prop_assert_eq!(pool.reserved(), 0);

        let (pool, charged, held) = pool_holding(limit, memory, others);
        let merger = Merger::new(sources(&schema, &segments, memory, charged), options, pool.clone());
        let streamed: Vec<_> = runtime().block_on(async {
            merger.into_stream().map(|r| r.unwrap()).collect::<Vec<_>>().await
        });
        prop_assert_eq!(concat(&schema, &streamed), concat(&schema, &input));
        let sizes = check_sizes(&streamed, target, &boundaries);
        prop_assert!(sizes.is_ok(), "{:?}", sizes);
        let bound = limit + (1 + read_ahead) * segment;
        prop_assert!(pool.peak() <= bound, "stream: peak {} > {bound}", pool.peak());
        drop(held);
        prop_assert_eq!(pool.reserved(), 0);
        dir.close().unwrap();
    }
}
