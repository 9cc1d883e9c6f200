//! Partitions with spilled segments: order across segments and memory, dictionaries, corrupt
//! segments, memory held while reading, and the async stream.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, DictionaryArray, RecordBatch, StringArray, types::Int32Type};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use arrow_shards_memory::sizing::batch_allocations;
use arrow_shards_memory::{AllocationSet, BoundedPool, MemoryPool, MemoryReservation};
use arrow_shards_merge::{MergeOptions, Merger, PartitionSources};
use arrow_shards_spill::{SegmentRef, SpillDir, SpillError, SpillOptions};
use futures::StreamExt;
use proptest::prelude::*;

use crate::common::*;

const PARTITION: u32 = 3;

/// Writes each of `runs` as one spill run holding `PARTITION` (and a little of partition 0, so
/// segments do not start at offset 0); returns `PARTITION`'s segments in spill order.
pub(crate) fn spill(
    dir: &Arc<SpillDir>,
    schema: &SchemaRef,
    runs: &[Vec<RecordBatch>],
) -> Vec<SegmentRef> {
    let mut segments = Vec::new();
    for run in runs.iter().filter(|r| !r.is_empty()) {
        let mut writer = dir.run_writer(SchemaRef::clone(schema), SpillOptions::default());
        writer.append(0, &run[..1]).unwrap();
        writer.append(PARTITION, run).unwrap();
        segments.extend(
            writer
                .finish()
                .unwrap()
                .into_iter()
                .filter(|s| s.partition() == PARTITION),
        );
    }
    segments
}

fn flip_byte(path: &Path, at: u64) {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(at)).unwrap();
    file.read_exact(&mut byte).unwrap();
    byte[0] ^= 0x5a;
    file.seek(SeekFrom::Start(at)).unwrap();
    file.write_all(&byte).unwrap();
}

/// Bytes the segment's batches hold once decoded, each allocation once.
pub(crate) fn decoded_bytes(segment: &SegmentRef) -> usize {
    let mut set = AllocationSet::new();
    for b in segment.read().unwrap() {
        set.insert(&batch_allocations(&b));
    }
    set.bytes()
}

fn options(target: Option<usize>, read_ahead: usize) -> MergeOptions {
    MergeOptions::new()
        .with_target_rows(target.unwrap_or(0))
        .with_read_ahead(read_ahead)
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

/// Every output has the target's rows except the last, one at or above the target, or one
/// flushed right before a batch at or above the target.
fn check_sizes(out: &[RecordBatch], target: usize) -> Result<(), String> {
    for (i, b) in out.iter().enumerate() {
        let rows = b.num_rows();
        let last = i + 1 == out.len();
        let before_big = out.get(i + 1).is_some_and(|n| n.num_rows() >= target);
        if rows == 0 || (rows < target && !last && !before_big) {
            return Err(format!("output {i} has {rows} rows (target {target})"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn rows_come_back_in_order_across_segments_and_memory(
        sizes in prop::collection::vec(0usize..400, 0..14),
        cuts in prop::collection::vec(0usize..14, 0..5),
        in_memory in 0usize..14,
        target in prop::option::of(1usize..300),
        read_ahead in 0usize..3,
    ) {
        let schema = schema();
        let input = batches(&schema, &sizes);
        let split = in_memory.min(input.len());
        let (spilled, memory) = input.split_at(input.len() - split);
        // cut the spilled batches into runs at the (sorted) cut points
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(spilled.len())).collect();
        cuts.sort_unstable();
        let mut runs = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().chain([spilled.len()]) {
            runs.push(spilled[start..cut].to_vec());
            start = cut;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = SpillDir::create(tmp.path()).unwrap();
        let segments = spill(&dir, &schema, &runs);
        let pool = pool();
        let make = || {
            PartitionSources::new(schema.clone())
                .with_segments(segments.clone())
                .with_memory(memory.to_vec(), charge(&pool, memory))
        };
        let out: Vec<_> = Merger::new(make(), options(target, read_ahead), pool.clone())
            .collect::<Result<_, _>>()
            .unwrap();
        prop_assert_eq!(pool.reserved(), 0);
        prop_assert_eq!(concat(&schema, &out), concat(&schema, &input));
        if let Some(target) = target {
            prop_assert!(check_sizes(&out, target).is_ok(), "{:?}", check_sizes(&out, target));
        }
        let streamed: Vec<_> = runtime().block_on(async {
            let merger = Merger::new(make(), options(target, read_ahead), pool.clone());
            merger.into_stream().map(|r| r.unwrap()).collect::<Vec<_>>().await
        });
        prop_assert_eq!(&streamed, &out);
        prop_assert_eq!(pool.reserved(), 0);
        dir.close().unwrap();
    }
}

fn dict_schema() -> SchemaRef {
    let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    Arc::new(Schema::new(vec![Field::new("d", dict, true)]))
}

fn dict_batch(schema: &SchemaRef, words: &[&str], rows: usize) -> RecordBatch {
    let array: DictionaryArray<Int32Type> = (0..rows)
        .map(|i| (i % 5 != 4).then_some(words[i % words.len()]))
        .collect();
    RecordBatch::try_new(SchemaRef::clone(schema), vec![Arc::new(array) as ArrayRef]).unwrap()
}

fn as_strings(batches: &[RecordBatch]) -> Vec<Option<String>> {
    batches
        .iter()
        .flat_map(|b| {
            let strings = arrow_cast_free_decode(b.column(0));
            strings
                .iter()
                .map(|s| s.map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The dictionary column as plain strings, without arrow-cast.
fn arrow_cast_free_decode(column: &ArrayRef) -> StringArray {
    let dict = column
        .as_any()
        .downcast_ref::<DictionaryArray<Int32Type>>()
        .unwrap();
    let values = dict
        .values()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    dict.keys()
        .iter()
        .map(|k| k.map(|k| values.value(k as usize)))
        .collect()
}

#[test]
fn dictionaries_that_differ_between_segments_and_memory_read_back_as_written() {
    let schema = dict_schema();
    let input = vec![
        dict_batch(&schema, &["apple", "pear"], 70),
        dict_batch(&schema, &["fig", "kiwi", "lime"], 50),
        dict_batch(&schema, &["plum"], 40),
        dict_batch(&schema, &["apple", "date", "nut"], 90),
        dict_batch(&schema, &["grape", "melon"], 30),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let runs = [input[..2].to_vec(), input[2..4].to_vec()];
    let segments = spill(&dir, &schema, &runs);
    for target in [None, Some(64), Some(1000)] {
        let pool = pool();
        let sources = PartitionSources::new(schema.clone())
            .with_segments(segments.clone())
            .with_memory(input[4..].to_vec(), charge(&pool, &input[4..]));
        let out: Vec<_> = Merger::new(sources, options(target, 1), pool.clone())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(as_strings(&out), as_strings(&input), "target {target:?}");
        assert_eq!(pool.reserved(), 0);
    }
    dir.close().unwrap();
}

/// Three segments of 100, 120 and 80 rows; the middle one corrupted.
fn corrupt_middle(dir: &Arc<SpillDir>) -> (Vec<RecordBatch>, Vec<SegmentRef>) {
    let schema = schema();
    let input = batches(&schema, &[60, 40, 120, 50, 30]);
    let runs = [
        input[..2].to_vec(),
        input[2..3].to_vec(),
        input[3..].to_vec(),
    ];
    let segments = spill(dir, &schema, &runs);
    assert_eq!(segments.len(), 3);
    let bad = &segments[1];
    flip_byte(bad.path(), bad.offset() + bad.len() / 2);
    (input, segments)
}

fn assert_corrupt(err: &ArrowError, segment: &SegmentRef) {
    let ArrowError::ExternalError(inner) = err else {
        panic!("not an external error: {err}")
    };
    match inner.downcast_ref::<SpillError>() {
        Some(SpillError::Corrupt {
            offset, partition, ..
        }) => {
            assert_eq!((*offset, *partition), (segment.offset(), PARTITION));
        }
        other => panic!("expected SpillError::Corrupt, got {other:?}"),
    }
}

#[test]
fn a_corrupt_segment_yields_the_rows_before_it_then_the_error_then_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let (input, segments) = corrupt_middle(&dir);
    let schema = schema();
    let pool = pool();
    let memory = batches(&schema, &[10]);
    for target in [None, Some(64)] {
        for read_ahead in [0, 2] {
            let make = || {
                PartitionSources::new(schema.clone())
                    .with_segments(segments.clone())
                    .with_memory(memory.clone(), charge(&pool, &memory))
            };
            let mut merger = Merger::new(make(), options(target, read_ahead), pool.clone());
            let mut before = Vec::new();
            let err = loop {
                match merger.next().expect("an error before the end") {
                    Ok(b) => before.push(b),
                    Err(e) => break e,
                }
            };
            assert_eq!(concat(&schema, &before), concat(&schema, &input[..2]));
            assert_corrupt(&err, &segments[1]);
            assert!(merger.next().is_none());
            assert!(merger.next().is_none());
            assert_eq!(pool.reserved(), 0, "the failed merge still holds memory");

            let rt = runtime();
            let results: Vec<_> = rt.block_on(async {
                Merger::new(make(), options(target, read_ahead), pool.clone())
                    .into_stream()
                    .collect::<Vec<_>>()
                    .await
            });
            drop(rt);
            let (last, ok) = results.split_last().unwrap();
            let ok: Vec<_> = ok.iter().map(|r| r.as_ref().unwrap().clone()).collect();
            assert_eq!(ok, before);
            assert_corrupt(last.as_ref().unwrap_err(), &segments[1]);
            assert_eq!(pool.reserved(), 0);
        }
    }
    dir.close().unwrap();
}

#[test]
fn dropping_half_way_releases_every_reservation() {
    let schema = schema();
    let input = batches(&schema, &[500, 500, 500, 500, 500, 500]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let runs = [input[..2].to_vec(), input[2..4].to_vec()];
    let segments = spill(&dir, &schema, &runs);
    let pool = pool();
    let mut unrelated = MemoryReservation::new(&pool);
    unrelated.grow(777);
    let baseline = pool.reserved();
    // outputs: 1000 and 1000 rows (each segment's batches, coalesced by the spill), then the
    // memory batches: 500 and 500 as they are, or 700 and 300 with a target of 700
    for target in [None, Some(300), Some(700)] {
        for taken in [1, 2, 3] {
            let make = || {
                PartitionSources::new(schema.clone())
                    .with_segments(segments.clone())
                    .with_memory(input[4..].to_vec(), charge(&pool, &input[4..]))
            };
            let mut merger = Merger::new(make(), options(target, 1), pool.clone());
            for _ in 0..taken {
                merger.next().unwrap().unwrap();
            }
            assert!(pool.reserved() > baseline);
            drop(merger);
            assert_eq!(
                pool.reserved(),
                baseline,
                "iterator, target {target:?}, taken {taken}"
            );

            let rt = runtime();
            rt.block_on(async {
                let mut stream =
                    Merger::new(make(), options(target, 2), pool.clone()).into_stream();
                for _ in 0..taken {
                    stream.next().await.unwrap().unwrap();
                }
            });
            // running reads finish on their blocking threads; the runtime waits for them
            drop(rt);
            assert_eq!(
                pool.reserved(),
                baseline,
                "stream, target {target:?}, taken {taken}"
            );
        }
    }
    dir.close().unwrap();
}

#[test]
fn only_one_segment_is_held_at_a_time_by_the_iterator() {
    let schema = schema();
    let input = batches(&schema, &[2000, 2000, 2000, 2000, 2000, 2000]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let runs: Vec<_> = input.chunks(2).map(<[RecordBatch]>::to_vec).collect();
    let segments = spill(&dir, &schema, &runs);
    let largest = segments
        .iter()
        .map(|s| s.memory_bytes().max(decoded_bytes(s)))
        .max()
        .unwrap();
    // a pool far too small for the partition: reads still go through (they use `grow`)
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(1024));
    let sources = PartitionSources::new(schema.clone()).with_segments(segments);
    let merger = Merger::new(
        sources,
        MergeOptions::new().with_pass_through(),
        pool.clone(),
    );
    let out: Vec<_> = merger.collect::<Result<_, _>>().unwrap();
    assert_eq!(concat(&schema, &out), concat(&schema, &input));
    assert!(
        pool.peak() <= largest,
        "peak {} > one segment {largest}",
        pool.peak()
    );
    assert!(pool.peak() > 0);
    assert_eq!(pool.reserved(), 0);
    dir.close().unwrap();
}

#[test]
fn a_stream_polled_outside_a_runtime_reports_an_error() {
    let schema = schema();
    let input = batches(&schema, &[10]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let segments = spill(&dir, &schema, &[input]);
    let pool = pool();
    let sources = PartitionSources::new(schema).with_segments(segments);
    let mut stream = Merger::new(sources, MergeOptions::new(), pool.clone()).into_stream();
    let first = futures::executor::block_on(stream.next()).unwrap();
    assert!(
        first
            .unwrap_err()
            .to_string()
            .contains("outside a tokio runtime")
    );
    assert!(futures::executor::block_on(stream.next()).is_none());
    assert_eq!(pool.reserved(), 0);
    dir.close().unwrap();
}

#[test]
fn the_stream_reserves_exactly_its_read_ahead_segments() {
    let schema = schema();
    let input = batches(&schema, &[3000, 3000, 3000, 3000, 3000]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let runs: Vec<_> = input.chunks(1).map(<[RecordBatch]>::to_vec).collect();
    let segments = spill(&dir, &schema, &runs);
    // a read in flight holds `memory_bytes`; a finished one holds its decoded size
    let sizes: Vec<[usize; 2]> = segments
        .iter()
        .map(|s| [s.memory_bytes(), decoded_bytes(s)])
        .collect();
    let rt = runtime();
    for read_ahead in [0, 1, 2] {
        let pool = pool();
        let sources = PartitionSources::new(schema.clone()).with_segments(segments.clone());
        let options = MergeOptions::new()
            .with_pass_through()
            .with_read_ahead(read_ahead);
        let mut stream = Merger::new(sources, options, pool.clone()).into_stream();
        rt.block_on(async {
            let first = stream.next().await.unwrap().unwrap();
            assert_eq!(first, input[0]);
            // segment 0 is handed over; segments 1..=read_ahead are read or being read
            let ahead = &sizes[1..=read_ahead];
            let reserved = pool.reserved();
            let possible = ahead.iter().fold(vec![0], |sums, pair| {
                sums.iter()
                    .flat_map(|s| pair.iter().map(move |p| s + p))
                    .collect()
            });
            assert!(
                possible.contains(&reserved),
                "read-ahead {read_ahead}: {reserved} not in {possible:?}"
            );
            let rest: Vec<_> = stream.map(|r| r.unwrap()).collect().await;
            assert_eq!(rest, input[1..]);
        });
        assert_eq!(pool.reserved(), 0);
    }
    dir.close().unwrap();
}

/// An empty segment between two full ones, streamed without read-ahead: the stream must launch
/// the next read itself once the empty one is used up (it used to report "segment needed but
/// none in flight").
#[test]
fn a_stream_without_read_ahead_passes_over_an_empty_segment() {
    let schema = schema();
    let input = batches(&schema, &[5, 0, 0, 7]);
    let runs = vec![
        vec![input[0].clone()],
        input[1..3].to_vec(),
        vec![input[3].clone()],
    ];

    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let segments = spill(&dir, &schema, &runs);
    let pool = pool();
    let sources = PartitionSources::new(schema.clone()).with_segments(segments);
    let streamed: Vec<_> = runtime().block_on(async {
        let merger = Merger::new(sources, options(None, 0), pool.clone());
        merger
            .into_stream()
            .map(|r| r.unwrap())
            .collect::<Vec<_>>()
            .await
    });
    assert_eq!(concat(&schema, &streamed), concat(&schema, &input));
    assert_eq!(pool.reserved(), 0);
}
