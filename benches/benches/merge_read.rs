//! `Merger/read/*`: reading one partition back from memory, from spilled segments, and from
//! both, next to `arrow_ipc::reader::StreamReader` reading the same batches from a file.
//!
//! Run: `cargo bench -p arrow-shards-benches --bench merge_read -- --warm-up-time 1
//! --measurement-time 3`. Data: 64 batches of 8192 rows (id Int64, value Float64, key Int32,
//! name Utf8 of ~14 bytes, 10% null), seeded, about 19 MB; spilled as 8 segments of 8 batches
//! (and, for comparison, 64 segments of one batch); files are in the page cache (hot reads).
//! Throughput is in batches per second.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_shards_memory::sizing::batch_memory_size;
use arrow_shards_memory::{MemoryPool, MemoryReservation, UnboundedPool};
use arrow_shards_merge::{MergeOptions, Merger, PartitionSources};
use arrow_shards_spill::{SegmentRef, SpillDir, SpillOptions};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const BATCHES: usize = 64;
const ROWS: usize = 8192;
/// Batches per spilled segment: 8 segments of 8 batches.
const PER_SEGMENT: usize = 8;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("value", DataType::Float64, false),
        Field::new("key", DataType::Int32, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// Seeded pseudo-random batches (xorshift), so every run reads the same bytes.
fn batches(schema: &SchemaRef) -> Vec<RecordBatch> {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..BATCHES)
        .map(|b| {
            let first = (b * ROWS) as i64;
            let ids = Int64Array::from_iter_values(first..first + ROWS as i64);
            let values = Float64Array::from_iter_values((0..ROWS).map(|_| next() as f64 / 1e9));
            let keys = Int32Array::from_iter_values((0..ROWS).map(|_| (next() % 1000) as i32));
            let names = StringArray::from_iter(
                (0..ROWS)
                    .map(|_| next())
                    .map(|r| (r % 10 != 0).then(|| format!("customer{r:06}"))),
            );
            let columns = vec![
                Arc::new(ids) as _,
                Arc::new(values) as _,
                Arc::new(keys) as _,
                Arc::new(names) as _,
            ];
            RecordBatch::try_new(SchemaRef::clone(schema), columns).unwrap()
        })
        .collect()
}

/// Spills `batches` for partition 0 as runs of `per_segment` batches: one segment per run.
fn spill(
    dir: &Arc<SpillDir>,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    per_segment: usize,
) -> Vec<SegmentRef> {
    batches
        .chunks(per_segment)
        .flat_map(|chunk| {
            let mut run = dir.run_writer(SchemaRef::clone(schema), SpillOptions::default());
            run.append(0, chunk).unwrap();
            run.finish().unwrap()
        })
        .collect()
}

fn write_ipc_stream(path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) {
    let mut writer = StreamWriter::try_new(File::create(path).unwrap(), schema).unwrap();
    for b in batches {
        writer.write(b).unwrap();
    }
    writer.finish().unwrap();
}

fn sources(
    schema: &SchemaRef,
    pool: &Arc<dyn MemoryPool>,
    segments: &[SegmentRef],
    memory: &[RecordBatch],
) -> PartitionSources {
    let mut charged = MemoryReservation::new(pool);
    charged.grow(memory.iter().map(batch_memory_size).sum());
    PartitionSources::new(SchemaRef::clone(schema))
        .with_segments(segments.to_vec())
        .with_memory(memory.to_vec(), charged)
}

fn drain(merger: Merger) -> usize {
    merger.map(|b| b.unwrap().num_rows()).sum()
}

fn bench(c: &mut Criterion) {
    let schema = schema();
    let batches = batches(&schema);
    let tmp = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(tmp.path()).unwrap();
    let all_segments = spill(&dir, &schema, &batches, PER_SEGMENT);
    let small_segments = spill(&dir, &schema, &batches, 1);
    let half = BATCHES / 2;
    let half_segments = spill(&dir, &schema, &batches[..half], PER_SEGMENT);
    let ipc_path = tmp.path().join("baseline.arrows");
    write_ipc_stream(&ipc_path, &schema, &batches);
    let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedPool::new());
    let total_rows = BATCHES * ROWS;

    let mut group = c.benchmark_group("Merger/read");
    group.throughput(Throughput::Elements(BATCHES as u64));

    // (id, segments, memory batches, options); one-batch segments hold less decoded at once
    let cases: [(&str, &[SegmentRef], &[RecordBatch], MergeOptions); 4] = [
        (
            "memory_only",
            &[],
            &batches,
            MergeOptions::new().with_pass_through(),
        ),
        ("spilled_only", &all_segments, &[], MergeOptions::new()),
        (
            "spilled_only_1_batch_segments",
            &small_segments,
            &[],
            MergeOptions::new(),
        ),
        (
            "mixed",
            &half_segments,
            &batches[half..],
            MergeOptions::new(),
        ),
    ];
    for (id, segments, memory, options) in cases {
        group.bench_function(id, |b| {
            b.iter_batched(
                || sources(&schema, &pool, segments, memory),
                |s| {
                    assert_eq!(
                        drain(Merger::new(s, options.clone(), pool.clone())),
                        total_rows
                    )
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();

    // The baselines: the spill crate's own segment reads (what the merge adds is the
    // difference), and the same batches as one plain IPC stream file, read by arrow-ipc.
    let mut group = c.benchmark_group("SegmentRef/read");
    group.throughput(Throughput::Elements(BATCHES as u64));
    for (id, segments) in [
        ("spilled_only", &all_segments),
        ("spilled_only_1_batch_segments", &small_segments),
    ] {
        group.bench_function(id, |b| {
            b.iter(|| {
                let rows: usize = segments
                    .iter()
                    .flat_map(|s| s.read().unwrap())
                    .map(|b| b.num_rows())
                    .sum();
                assert_eq!(rows, total_rows);
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("StreamReader/read");
    group.throughput(Throughput::Elements(BATCHES as u64));
    group.bench_function("spilled_only", |b| {
        b.iter(|| {
            let reader =
                StreamReader::try_new(BufReader::new(File::open(&ipc_path).unwrap()), None)
                    .unwrap();
            let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
            assert_eq!(rows, total_rows);
        })
    });
    group.finish();

    dir.close().unwrap();
}

criterion_group!(benches, bench);
criterion_main!(benches);
