//! Spill run write and segment read throughput, each beside a plain `std::fs::File` write/read
//! of the same bytes and arrow-ipc's `StreamWriter`/`StreamReader` on the same batches.
//!
//! Data: seeded lineitem-like batches of 8192 rows (ints, decimals, dates, strings), ~60 MB in
//! memory, spread over 16 partitions (one segment each). Files go to the system temp dir; reads
//! are from the page cache. Throughput is in in-memory bytes for the Arrow paths and in file
//! bytes for the plain-file baselines.
//!
//! Run: `cargo bench -p arrow-shards-benches --bench spill_io -- --warm-up-time 1 --measurement-time 3`

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{
    ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_shards_memory::sizing::batch_memory_size;
use arrow_shards_spill::{Compression, SegmentRef, SpillDir, SpillOptions};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const ROWS_PER_BATCH: usize = 8192;
const BATCHES: usize = 48;
const PARTITIONS: usize = 16;

/// A small seeded generator (xorshift64*), so the data is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn lineitem_schema() -> SchemaRef {
    let money = DataType::Decimal128(15, 2);
    Arc::new(Schema::new(vec![
        Field::new("l_orderkey", DataType::Int64, false),
        Field::new("l_partkey", DataType::Int64, false),
        Field::new("l_suppkey", DataType::Int64, false),
        Field::new("l_linenumber", DataType::Int32, false),
        Field::new("l_quantity", money.clone(), false),
        Field::new("l_extendedprice", money.clone(), false),
        Field::new("l_discount", money.clone(), false),
        Field::new("l_tax", money, false),
        Field::new("l_returnflag", DataType::Utf8, false),
        Field::new("l_linestatus", DataType::Utf8, false),
        Field::new("l_shipdate", DataType::Date32, false),
        Field::new("l_commitdate", DataType::Date32, false),
        Field::new("l_receiptdate", DataType::Date32, false),
        Field::new("l_shipinstruct", DataType::Utf8, false),
        Field::new("l_shipmode", DataType::Utf8, false),
        Field::new("l_comment", DataType::Utf8, false),
    ]))
}

const WORDS: &[&str] = &[
    "furiously",
    "carefully",
    "quickly",
    "slyly",
    "blithely",
    "final",
    "pending",
    "regular",
    "express",
    "ironic",
    "bold",
    "even",
    "special",
    "deposits",
    "requests",
    "accounts",
    "packages",
    "theodolites",
    "pinto",
    "beans",
    "foxes",
    "ideas",
    "instructions",
    "dependencies",
    "across",
];

fn lineitem_batch(rng: &mut Rng, first_key: i64) -> RecordBatch {
    let n = ROWS_PER_BATCH;
    let int64 = |rng: &mut Rng, max: u64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            (0..n).map(|_| rng.below(max) as i64),
        ))
    };
    let money = |rng: &mut Rng, max: u64| -> ArrayRef {
        Arc::new(
            Decimal128Array::from_iter_values((0..n).map(|_| rng.below(max) as i128))
                .with_precision_and_scale(15, 2)
                .unwrap(),
        )
    };
    let date = |rng: &mut Rng| -> ArrayRef {
        Arc::new(Date32Array::from_iter_values(
            (0..n).map(|_| 8035 + rng.below(2526) as i32),
        ))
    };
    let pick = |rng: &mut Rng, choices: &[&str]| -> ArrayRef {
        Arc::new(StringArray::from_iter_values((0..n).map(|_| {
            choices[rng.below(choices.len() as u64) as usize].to_string()
        })))
    };
    let comment: ArrayRef = Arc::new(StringArray::from_iter_values((0..n).map(|_| {
        let words = 2 + rng.below(5);
        (0..words)
            .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    })));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(
            (0..n as i64).map(|i| first_key + i / 4),
        )),
        int64(rng, 200_000),
        int64(rng, 10_000),
        Arc::new(Int32Array::from_iter_values(
            (0..n).map(|i| (i % 7) as i32 + 1),
        )),
        money(rng, 5_000),
        money(rng, 10_000_000),
        money(rng, 11),
        money(rng, 9),
        pick(rng, &["R", "A", "N"]),
        pick(rng, &["O", "F"]),
        date(rng),
        date(rng),
        date(rng),
        pick(
            rng,
            &[
                "DELIVER IN PERSON",
                "COLLECT COD",
                "NONE",
                "TAKE BACK RETURN",
            ],
        ),
        pick(
            rng,
            &["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"],
        ),
        comment,
    ];
    RecordBatch::try_new(lineitem_schema(), columns).unwrap()
}

fn lineitem() -> Vec<RecordBatch> {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    (0..BATCHES)
        .map(|i| lineitem_batch(&mut rng, (i * ROWS_PER_BATCH) as i64))
        .collect()
}

fn codecs() -> [(&'static str, Compression); 3] {
    [
        ("none", Compression::None),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd { level: 1 }),
    ]
}

/// Writes `batches` as one run of `PARTITIONS` segments.
fn write_run(
    dir: &Arc<SpillDir>,
    batches: &[RecordBatch],
    compression: Compression,
) -> Vec<SegmentRef> {
    write_run_with(
        dir,
        batches,
        SpillOptions::default().with_compression(compression),
    )
}

fn write_run_with(
    dir: &Arc<SpillDir>,
    batches: &[RecordBatch],
    options: SpillOptions,
) -> Vec<SegmentRef> {
    let mut writer = dir.run_writer(batches[0].schema(), options);
    let per = batches.len().div_ceil(PARTITIONS);
    for (partition, chunk) in batches.chunks(per).enumerate() {
        writer.append(partition as u32, chunk).unwrap();
    }
    writer.finish().unwrap()
}

fn stream_write(path: &Path, batches: &[RecordBatch]) {
    let file = BufWriter::new(File::create(path).unwrap());
    let mut writer = StreamWriter::try_new(file, &batches[0].schema()).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.finish().unwrap();
    writer.into_inner().unwrap().flush().unwrap();
}

fn plain_write(path: &Path, bytes: &[u8]) {
    let mut file = File::create(path).unwrap();
    file.write_all(bytes).unwrap();
}

fn bench_spill_io(c: &mut Criterion) {
    let batches = lineitem();
    let memory: u64 = batches.iter().map(|b| batch_memory_size(b) as u64).sum();
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let scratch = root.path().join("scratch");

    // the bytes of an uncompressed run, for the plain-file baselines
    let run_bytes = {
        let segments = write_run(&dir, &batches, Compression::None);
        std::fs::read(segments[0].path()).unwrap()
    };
    eprintln!(
        "spill_io: {} batches x {} rows, {:.1} MB in memory, {:.1} MB uncompressed run",
        batches.len(),
        ROWS_PER_BATCH,
        memory as f64 / 1e6,
        run_bytes.len() as f64 / 1e6
    );

    let mut group = c.benchmark_group("SpillWriter");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(memory));
    for (name, compression) in codecs() {
        group.bench_function(format!("write/{name}"), |b| {
            b.iter_batched(
                || (),
                |()| write_run(&dir, &batches, compression),
                BatchSize::PerIteration,
            )
        });
    }
    // the cost of SpillOptions::with_sync_on_finish, which is off by default
    group.bench_function("write/none_fdatasync", |b| {
        b.iter_batched(
            || (),
            |()| {
                write_run_with(
                    &dir,
                    &batches,
                    SpillOptions::default().with_sync_on_finish(true),
                )
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("arrow_ipc_StreamWriter", |b| {
        b.iter_batched(
            || {
                let _ = std::fs::remove_file(&scratch);
            },
            |()| stream_write(&scratch, &batches),
            BatchSize::PerIteration,
        )
    });
    group.throughput(Throughput::Bytes(run_bytes.len() as u64));
    group.bench_function("plain_file_write", |b| {
        b.iter_batched(
            || {
                let _ = std::fs::remove_file(&scratch);
            },
            |()| plain_write(&scratch, &run_bytes),
            BatchSize::PerIteration,
        )
    });
    group.finish();

    let mut group = c.benchmark_group("SpillReader");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(memory));
    for (name, compression) in codecs() {
        let segments = write_run(&dir, &batches, compression);
        group.bench_function(format!("read/{name}"), |b| {
            b.iter(|| {
                segments
                    .iter()
                    .map(|s| s.read().unwrap().len())
                    .sum::<usize>()
            })
        });
    }
    // The same shape as a segment read: one IPC stream per partition, each collected into a
    // Vec (all of a partition's batches alive at once, as `SegmentRef::read` returns them).
    let per = batches.len().div_ceil(PARTITIONS);
    let streams: Vec<_> = batches
        .chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            let path = root.path().join(format!("stream-{i}"));
            stream_write(&path, chunk);
            path
        })
        .collect();
    group.bench_function("arrow_ipc_StreamReader_collect", |b| {
        b.iter(|| {
            let mut count = 0;
            for path in &streams {
                let file = BufReader::new(File::open(path).unwrap());
                let read: Vec<RecordBatch> = StreamReader::try_new(file, None)
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                count += read.len();
            }
            count
        })
    });
    // StreamReader over the payloads of our own segments: the same bytes in the same file as
    // read/none, without the frame checks and checksum. A payload holds only dictionary and
    // batch messages (spill format 2), so the stream is the run file's schema message (from
    // its schema record, whose bytes 12..16 give its length), the payload and an
    // end-of-stream marker.
    let segments = write_run(&dir, &batches, Compression::None);
    group.bench_function("arrow_ipc_StreamReader_on_segments", |b| {
        b.iter(|| {
            let mut count = 0;
            for segment in &segments {
                let mut file = File::open(segment.path()).unwrap();
                let mut head = [0u8; 16];
                file.read_exact(&mut head).unwrap();
                let mut schema =
                    vec![0u8; u32::from_le_bytes(head[12..16].try_into().unwrap()) as usize];
                file.read_exact(&mut schema).unwrap();
                file.seek(SeekFrom::Start(segment.offset() + 16)).unwrap();
                let payload = BufReader::new(file.take(segment.len() - 48));
                let end_of_stream: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
                let stream = schema.as_slice().chain(payload).chain(end_of_stream);
                let read: Vec<RecordBatch> = StreamReader::try_new(stream, None)
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                count += read.len();
            }
            count
        })
    });
    drop(segments);
    // Streaming: each batch is dropped before the next is read, so the allocator hands the
    // same warm memory back every time.
    stream_write(&scratch, &batches);
    group.bench_function("arrow_ipc_StreamReader", |b| {
        b.iter(|| {
            let file = BufReader::new(File::open(&scratch).unwrap());
            StreamReader::try_new(file, None)
                .unwrap()
                .map(|b| b.unwrap().num_rows())
                .sum::<usize>()
        })
    });
    plain_write(&scratch, &run_bytes);
    group.throughput(Throughput::Bytes(run_bytes.len() as u64));
    group.bench_function("plain_file_read", |b| {
        b.iter(|| {
            // std::fs::read sizes the buffer from the file's length, like a segment read
            std::fs::read(&scratch).unwrap().len()
        })
    });
    group.finish();
    dir.close().unwrap();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench_spill_io
}
criterion_main!(benches);
