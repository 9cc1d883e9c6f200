//! Small budgets: a write larger than the whole budget goes to disk in every write form, spill
//! rounds have a floor, and `bytes_spilled` counts the data that went to disk.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use arrow_shards::{Error, MIN_SPILL_ROUND_BYTES, ShardBuffer};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{KINDS, batch, schema};

/// Every column kind the random schemas have: Int64, Utf8, Utf8View, a dictionary, a list, a
/// struct, a decimal and a timestamp with a time zone.
fn every_kind() -> SchemaRef {
    schema(&(0..KINDS).collect::<Vec<_>>())
}

/// The `seq` column of `batch`.
fn seqs(batch: &RecordBatch) -> Vec<i64> {
    batch
        .column(1)
        .as_primitive::<Int64Type>()
        .values()
        .to_vec()
}

/// Reads every partition of a finished `buffer`; checks each holds ascending `seq`s (write
/// order) and that together they hold `0..rows` exactly once.
fn assert_all_back_once(buffer: &ShardBuffer, rows: usize) {
    let mut all = Vec::with_capacity(rows);
    for p in 0..buffer.num_partitions() {
        let mut got = Vec::new();
        for b in buffer.read(p).unwrap() {
            got.extend(seqs(&b.unwrap()));
        }
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "partition {p} is out of write order"
        );
        all.extend(got);
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..rows as i64).collect::<Vec<_>>(),
        "rows lost or doubled"
    );
}

/// How a test writes: each write form of the buffer.
#[derive(Debug, Clone, Copy)]
enum Form {
    Blocking,
    Async,
    Try,
    ScatterBlocking,
    ScatterAsync,
    ScatterTry,
}

const FORMS: [Form; 6] = [
    Form::Blocking,
    Form::Async,
    Form::Try,
    Form::ScatterBlocking,
    Form::ScatterAsync,
    Form::ScatterTry,
];

/// Writes `batch` in `form`: single forms to `ids[0]`, scatter forms by `ids`. A `try` refused
/// for memory is retried after the spiller has run (it never waits itself).
fn write(
    buffer: &ShardBuffer,
    runtime: &tokio::runtime::Runtime,
    form: Form,
    batch: RecordBatch,
    ids: &[u32],
) -> Result<(), arrow_shards::WriteError> {
    let ids = UInt32Array::from(ids.to_vec());
    let first = ids.values().first().copied().unwrap_or(0);
    let mut batch = batch;
    loop {
        let result = match form {
            Form::Blocking => buffer.write_blocking(first, batch),
            Form::Async => runtime.block_on(buffer.write(first, batch)),
            Form::Try => buffer.try_write(first, batch),
            Form::ScatterBlocking => buffer.write_partitioned_blocking(batch, &ids),
            Form::ScatterAsync => runtime.block_on(buffer.write_partitioned(batch, &ids)),
            Form::ScatterTry => buffer.try_write_partitioned(batch, &ids),
        };
        match result {
            Err(e)
                if matches!(form, Form::Try | Form::ScatterTry)
                    && matches!(e.error(), Error::MemoryExhausted { needed, limit, .. } if needed <= limit) =>
            {
                buffer.wait_for_spills();
                batch = e.into_batch();
            }
            other => return other,
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// The case of the issue: a batch larger than the whole budget, all its rows for one
/// partition, in every write form, goes to disk and comes back; so does one spread over many
/// partitions.
#[test]
fn a_batch_larger_than_the_budget_goes_to_disk_in_every_write_form() {
    let schema = every_kind();
    let runtime = runtime();
    for form in FORMS {
        for partitions in [1u32, 7] {
            let root = tempfile::tempdir().unwrap();
            let buffer = ShardBuffer::builder(schema.clone(), partitions)
                .with_memory_limit(256 << 10)
                .with_spill_dir(root.path())
                .build()
                .unwrap();
            let mut rng = StdRng::seed_from_u64(1);
            let mut rows = 0;
            for _ in 0..3 {
                let b = batch(&schema, &mut rng, 0, rows as i64, 6000);
                let ids: Vec<u32> = (0..b.num_rows())
                    .map(|_| rng.random_range(0..partitions))
                    .collect();
                let ids = match form {
                    // single forms write to one partition
                    Form::Blocking | Form::Async | Form::Try => vec![ids[0]; ids.len()],
                    _ => ids,
                };
                assert!(arrow_shards::batch_cost(&b) > 256 << 10);
                rows += b.num_rows();
                write(&buffer, &runtime, form, b, &ids)
                    .unwrap_or_else(|e| panic!("{form:?}, {partitions} partitions: {e}"));
            }
            let m = buffer.metrics();
            assert_eq!(m.direct_writes, 3, "{form:?}");
            assert!(
                m.peak_reserved <= 256 << 10,
                "{form:?}: {}",
                m.peak_reserved
            );
            buffer.finish().unwrap();
            assert_all_back_once(&buffer, rows);
            buffer.close().unwrap();
        }
    }
}

/// With spilling off, such a batch is refused with `MemoryExhausted` and handed back whole.
#[test]
fn without_spilling_a_batch_larger_than_the_budget_is_refused_with_its_batch() {
    let schema = every_kind();
    let runtime = runtime();
    let mut rng = StdRng::seed_from_u64(2);
    let b = batch(&schema, &mut rng, 0, 0, 6000);
    for form in FORMS {
        let buffer = ShardBuffer::builder(schema.clone(), 4)
            .with_memory_limit(256 << 10)
            .with_spill(false)
            .build()
            .unwrap();
        let ids: Vec<u32> = (0..b.num_rows() as u32).map(|r| r % 4).collect();
        let e = write(&buffer, &runtime, form, b.clone(), &ids).unwrap_err();
        assert!(
            matches!(e.error(), Error::MemoryExhausted { needed, limit, .. } if needed > limit),
            "{form:?}: {e}"
        );
        assert_eq!(
            e.into_batch(),
            b,
            "{form:?}: the batch comes back as written"
        );
        assert_eq!(buffer.metrics().rows_written, 0);
        buffer.close().unwrap();
    }
}

/// `bytes_spilled` counts the data that went to disk, not the parents of slices: sliced,
/// scattered, view and dictionary columns, through spill rounds and direct writes, within 10%
/// of the bytes written to disk (segments large enough that their metadata is small).
#[test]
fn bytes_spilled_is_the_data_written_to_disk() {
    let schema = every_kind();
    let root = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(schema.clone(), 4)
        .with_memory_limit(4 << 20)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let parent = batch(&schema, &mut rng, 0, 0, 24_000);
    let mut rows = 0;
    // slices of one parent, each kept whole (at the compaction target)
    for _ in 0..2 {
        let slice = parent.slice(rows, 8192);
        buffer
            .write_blocking(rng.random_range(0..4), slice)
            .unwrap();
        rows += 8192;
    }
    // scattered writes of the parent's other rows and of more, copied into open batches
    let more = batch(&schema, &mut rng, 0, 24_000, 30_000);
    let rest =
        arrow_select::concat::concat_batches(&schema, &[parent.slice(rows, 24_000 - rows), more])
            .unwrap();
    drop(parent);
    let mut at = 0;
    while at < rest.num_rows() {
        let len = 3000.min(rest.num_rows() - at);
        let ids: Vec<u32> = (0..len).map(|_| rng.random_range(0..4)).collect();
        buffer
            .write_partitioned_blocking(rest.slice(at, len), &ids)
            .unwrap();
        at += len;
    }
    rows += rest.num_rows();
    // and one scattered batch larger than the budget, straight to disk
    let big = batch(&schema, &mut rng, 0, rows as i64, 40_000);
    let ids: Vec<u32> = (0..big.num_rows())
        .map(|_| rng.random_range(0..4))
        .collect();
    rows += big.num_rows();
    buffer.write_partitioned_blocking(big, &ids).unwrap();
    buffer.wait_for_spills();
    let m = buffer.metrics();
    assert_eq!(m.direct_writes, 1);
    assert!(m.spill_runs > m.direct_writes, "spill rounds ran too");
    let (spilled, disk) = (m.bytes_spilled as f64, m.bytes_written_to_disk as f64);
    assert!(
        (spilled - disk).abs() <= 0.1 * disk,
        "bytes_spilled {spilled} vs bytes_written_to_disk {disk}"
    );
    buffer.finish().unwrap();
    let mut all: Vec<i64> = (0..4)
        .flat_map(|p| buffer.read(p).unwrap().map(|b| seqs(&b.unwrap())))
        .flatten()
        .collect();
    all.sort_unstable();
    assert_eq!(all.len(), rows);
    buffer.close().unwrap();
}

/// Spill runs made by rounds (not direct writes), at most one per this many bytes on disk:
/// the round floor ([`MIN_SPILL_ROUND_BYTES`] of memory) gives runs of tens of KiB at least.
const RUN_BYTES_FLOOR: u64 = (MIN_SPILL_ROUND_BYTES / 4) as u64;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Budgets from 64 KiB to 64 MiB, shards of 0 to 50,000 rows, every write form, 1 to 4,096
    /// partitions, every column kind: no `MemoryExhausted` while spilling is on, every row
    /// back exactly once and in write order, and spill rounds' runs bounded per byte written.
    #[test]
    fn small_budgets_lose_nothing_and_make_few_runs(
        budget_log in 16u32..=26,
        partitions_log in 0u32..=12,
        shards in proptest::collection::vec((0usize..=50_000, 0usize..6), 1..5),
        seed in any::<u64>(),
    ) {
        let schema = every_kind();
        let partitions = 1u32 << partitions_log;
        let root = tempfile::tempdir().unwrap();
        let buffer = ShardBuffer::builder(schema.clone(), partitions)
            .with_memory_limit(1usize << budget_log)
            .with_spill_dir(root.path())
            .build()
            .unwrap();
        let runtime = runtime();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut rows = 0;
        for (len, form) in shards {
            // shards above a few thousand rows are rare: most writes are small
            let len = if rng.random_ratio(1, 3) { len } else { len % 2000 };
            let b = batch(&schema, &mut rng, 0, rows as i64, len);
            let form = FORMS[form];
            let ids: Vec<u32> = match form {
                Form::Blocking | Form::Async | Form::Try => {
                    vec![rng.random_range(0..partitions); len]
                }
                _ => (0..len).map(|_| rng.random_range(0..partitions)).collect(),
            };
            rows += len;
            if let Err(e) = write(&buffer, &runtime, form, b, &ids) {
                panic!("{form:?}, {len} rows, {partitions} partitions: {e}");
            }
        }
        buffer.wait_for_spills();
        let m = buffer.metrics();
        let rounds = m.spill_runs - m.direct_writes;
        prop_assert!(
            rounds <= 1 + m.bytes_written_to_disk / RUN_BYTES_FLOOR,
            "{} rounds for {} bytes on disk", rounds, m.bytes_written_to_disk
        );
        buffer.finish().unwrap();
        assert_all_back_once(&buffer, rows);
        let pool = Arc::clone(buffer.memory_pool());
        buffer.close().unwrap();
        prop_assert_eq!(pool.reserved(), 0);
    }
}
