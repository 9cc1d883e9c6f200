//! Small shards: compaction on write and the scatter write.
//!
//! - A property test: shard sizes from 0 to 20,000 rows, scatter writes and single-shard writes
//!   interleaved from several producers, partitions sealed and read while others are written,
//!   spills forced by a small limit: every accepted row comes back exactly once, per producer in
//!   order; every refused batch is handed back whole.
//! - Rows in a partly filled open batch survive a spill, a seal and read, a dropped write and a
//!   close, and the pool is at zero afterwards.
//! - A producer that only uses `try_write` against a pool just below the spill threshold gets in
//!   after the spill round its refusal asked for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use arrow_select::filter::filter_record_batch;
use arrow_shards::{Error, ShardBuffer};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{KINDS, Written, assert_partition, batch, schema};

/// Rows of `b` whose id is `p`, in order.
fn rows_of(b: &RecordBatch, ids: &[u32], p: u32) -> RecordBatch {
    let mask: BooleanArray = ids.iter().map(|&id| Some(id == p)).collect();
    filter_record_batch(b, &mask).unwrap()
}

/// A shard size: mostly tiny, sometimes large, up to 20,000 rows.
fn rows(rng: &mut StdRng) -> usize {
    match rng.random_range(0..10) {
        0 => 0,
        1..=6 => rng.random_range(1..=16),
        7 | 8 => rng.random_range(17..=2000),
        _ => rng.random_range(2001..=20_000),
    }
}

#[derive(Debug, Clone)]
struct Case {
    kinds: Vec<usize>,
    partitions: u32,
    limit: Option<usize>,
    compact: bool,
    producers: usize,
    writes: usize,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(0..KINDS, 0..4),
        prop_oneof![1u32..4, 4u32..300],
        prop_oneof![Just(None), (256usize << 10..4 << 20).prop_map(Some)],
        prop_oneof![4 => Just(true), 1 => Just(false)],
        1usize..4,
        10usize..60,
        any::<u64>(),
    )
        .prop_map(
            |(kinds, partitions, limit, compact, producers, writes, seed)| Case {
                kinds,
                partitions,
                limit,
                compact,
                producers,
                writes,
                seed,
            },
        )
}

fn run(case: &Case) {
    let schema: SchemaRef = schema(&case.kinds);
    let dir = tempfile::tempdir().unwrap();
    let mut builder = ShardBuffer::builder(schema.clone(), case.partitions)
        .with_compact_target_rows(if case.compact { 1024 } else { 0 });
    if let Some(limit) = case.limit {
        builder = builder
            .with_memory_limit(limit)
            .with_spill_dir(dir.path())
            .with_spill_segment_bytes(64 << 10);
    }
    let buffer = builder.build().unwrap();
    let sealed_reads: Mutex<HashMap<u32, RecordBatch>> = Mutex::new(HashMap::new());
    let written = std::thread::scope(|s| {
        // a reader that seals and reads the low partitions while producers write
        let reader = {
            let (buffer, sealed_reads) = (buffer.clone(), &sealed_reads);
            s.spawn(move || {
                for p in 0..case.partitions / 3 {
                    std::thread::yield_now();
                    buffer.seal(p).unwrap();
                    let read = buffer.read(p).unwrap().concat().unwrap();
                    sealed_reads.lock().unwrap().insert(p, read);
                }
            })
        };
        let handles: Vec<_> = (0..case.producers)
            .map(|w| {
                let (buffer, schema) = (buffer.clone(), schema.clone());
                s.spawn(move || producer(&buffer, &schema, case, w))
            })
            .collect();
        let mut all = Written::new();
        for h in handles {
            for (key, batches) in h.join().unwrap() {
                all.entry(key).or_default().extend(batches);
            }
        }
        reader.join().unwrap();
        all
    });
    buffer.finish().unwrap();
    let mut sealed_reads = sealed_reads.into_inner().unwrap();
    for p in 0..case.partitions {
        let read = match sealed_reads.remove(&p) {
            Some(read) => read,
            None => buffer.read(p).unwrap().concat().unwrap(),
        };
        assert_partition(&read, p, &written);
    }
    let pool = buffer.memory_pool().clone();
    let m = buffer.close().unwrap();
    assert_eq!(pool.reserved(), 0, "pool at zero after close");
    assert_eq!(m.rows_read, m.rows_written, "{m:?}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "spill files left"
    );
}

/// One producer's writes; what it wrote, per partition, in order.
fn producer(buffer: &ShardBuffer, schema: &SchemaRef, case: &Case, w: usize) -> Written {
    let mut rng = StdRng::seed_from_u64(case.seed ^ ((w as u64) << 40));
    let mut written = Written::new();
    let mut seq: i64 = 0;
    for _ in 0..case.writes {
        let n = rows(&mut rng);
        let b = batch(schema, &mut rng, w as i64, seq, n);
        seq += n as i64;
        if rng.random_bool(0.5) {
            let ids: Vec<u32> = (0..n)
                .map(|_| rng.random_range(0..case.partitions))
                .collect();
            let ids_array = UInt32Array::from(ids.clone());
            let result = if rng.random_bool(0.5) {
                buffer.write_partitioned_blocking(b.clone(), &ids_array)
            } else {
                buffer.write_partitioned_blocking(b.clone(), &ids)
            };
            match result {
                Ok(()) => {
                    for p in 0..case.partitions {
                        let part = rows_of(&b, &ids, p);
                        if part.num_rows() > 0 {
                            written.entry((w as i64, p)).or_default().push(part);
                        }
                    }
                }
                Err(e) => {
                    match e.error() {
                        Error::Sealed { .. } => {}
                        // a scattered batch near the size of the whole limit is refused at
                        // once (its copy and the open batches' growth would not fit)
                        Error::MemoryExhausted { needed, limit, .. } => {
                            let own = arrow_shards_memory::sizing::batch_memory_size(&b);
                            assert!(
                                *needed > *limit && own > *limit / 4,
                                "a {own}-byte batch refused: needs {needed} of {limit}"
                            )
                        }
                        other => panic!("unexpected refusal: {other}"),
                    }
                    assert_eq!(e.into_batch(), b, "the whole batch comes back");
                }
            }
        } else {
            let p = rng.random_range(0..case.partitions);
            match buffer.write_blocking(p, b.clone()) {
                Ok(()) => written.entry((w as i64, p)).or_default().push(b),
                Err(e) => {
                    assert!(matches!(e.error(), Error::Sealed { .. }), "{e}");
                    assert_eq!(e.into_batch(), b);
                }
            }
        }
    }
    written
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn every_row_once_in_order_with_scatter_and_single_writes(case in case()) {
        run(&case);
    }
}

fn ints(range: std::ops::Range<i64>) -> RecordBatch {
    RecordBatch::try_from_iter([(
        "k",
        std::sync::Arc::new(Int64Array::from_iter_values(range)) as ArrayRef,
    )])
    .unwrap()
}

fn keys(batches: impl IntoIterator<Item = RecordBatch>) -> Vec<i64> {
    batches
        .into_iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

#[test]
fn rows_in_an_open_batch_survive_spill_seal_read_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(ints(0..1).schema(), 4)
        .with_memory_limit(1 << 20)
        .with_spill_dir(dir.path())
        .build()
        .unwrap();
    // partition 0: tiny shards, a spill in the middle, more tiny shards
    for k in 0..100 {
        buffer.write_blocking(0, ints(k..k + 1)).unwrap();
    }
    assert_eq!(buffer.partition_sizes()[0].memory_rows, 100);
    assert_eq!(
        buffer.partition_sizes()[0].memory_batches,
        1,
        "one open batch"
    );
    // a batch larger than the limit goes to disk through the spiller, after the open rows
    buffer.write_blocking(0, ints(100..200_000)).unwrap();
    for k in 200_000..200_050 {
        buffer.write_blocking(0, ints(k..k + 1)).unwrap();
    }
    // partition 1: only an open batch, sealed and read
    for k in 0..10 {
        buffer.write_blocking(1, ints(k..k + 1)).unwrap();
    }
    buffer.seal(1).unwrap();
    assert_eq!(
        keys(buffer.read(1).unwrap().map(Result::unwrap)),
        (0..10).collect::<Vec<_>>()
    );
    // partition 2: open rows left unread at close
    for k in 0..10 {
        buffer.write_blocking(2, ints(k..k + 1)).unwrap();
    }
    buffer.finish().unwrap();
    let sizes = buffer.partition_sizes();
    assert!(sizes[0].spilled_rows > 0, "{sizes:?}");
    let expected: Vec<i64> = (0..200_050).collect();
    assert_eq!(keys(buffer.read(0).unwrap().map(Result::unwrap)), expected);
    let pool = buffer.memory_pool().clone();
    let m = buffer.close().unwrap();
    assert_eq!(pool.reserved(), 0);
    assert_eq!(m.rows_written, 200_050 + 10 + 10);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn a_dropped_scatter_write_leaves_nothing_and_a_retry_lands_once() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let schema = ints(0..1).schema();
    let buffer = ShardBuffer::builder(schema, 3)
        .with_memory_limit(64 << 10)
        .with_spill(false)
        .with_write_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    // open batches with a few rows each
    for k in 0..30 {
        buffer
            .write_blocking((k % 3) as u32, ints(k..k + 1))
            .unwrap();
    }
    // fill the pool with a big batch in partition 2 so the scatter write must wait
    let filler = ints(1000..8000);
    buffer.write_blocking(2, filler).unwrap();
    let big = ints(100..1100);
    let ids: Vec<u32> = (0..1000).map(|i| (i % 2) as u32).collect();
    rt.block_on(async {
        let write = buffer.write_partitioned(big.clone(), &ids);
        // poll once: it waits for memory; then drop it
        let dropped = tokio::time::timeout(Duration::from_millis(50), write).await;
        assert!(dropped.is_err(), "the write had to wait: {dropped:?}");
    });
    buffer.seal(2).unwrap();
    drop(buffer.read(2).unwrap());
    buffer.write_partitioned_blocking(big, &ids).unwrap();
    buffer.finish().unwrap();
    let p0 = keys(buffer.read(0).unwrap().map(Result::unwrap));
    let p1 = keys(buffer.read(1).unwrap().map(Result::unwrap));
    let mut expected0: Vec<i64> = (0..30).filter(|k| k % 3 == 0).collect();
    expected0.extend((100..1100).step_by(2));
    let mut expected1: Vec<i64> = (0..30).filter(|k| k % 3 == 1).collect();
    expected1.extend((101..1100).step_by(2));
    assert_eq!(p0, expected0);
    assert_eq!(p1, expected1);
    let pool = buffer.memory_pool().clone();
    buffer.close().unwrap();
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn try_write_alone_gets_in_after_the_spill_round_its_refusal_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let one = ints(0..1000);
    let cost = arrow_shards::batch_cost(&one);
    // 10 batches fill 79% of the limit: below the 80% threshold, so nothing spills by itself
    let limit = cost * 10 * 100 / 79;
    let buffer = ShardBuffer::builder(one.schema(), 4)
        .with_memory_limit(limit)
        .with_spill_dir(dir.path())
        .with_compact_target_rows(0)
        .build()
        .unwrap();
    for i in 0..10 {
        buffer
            .try_write(i % 4, ints(i as i64 * 1000..(i as i64 + 1) * 1000))
            .unwrap();
    }
    let mut next = ints(10_000..13_000);
    let mut refusals = 0;
    loop {
        match buffer.try_write(0, next) {
            Ok(()) => break,
            Err(e) => {
                assert!(matches!(e.error(), Error::MemoryExhausted { .. }), "{e}");
                next = e.into_batch();
                refusals += 1;
                // the refusal asked for a round: wait for it to be on disk, then try again
                assert!(
                    refusals < 100,
                    "try_write never got in: no spill round freed room"
                );
                buffer.wait_for_spills();
            }
        }
    }
    assert!(refusals > 0, "the pool was full enough to refuse once");
    assert!(buffer.metrics().bytes_spilled > 0);
    buffer.finish().unwrap();
    let mut all = Vec::new();
    for p in 0..4 {
        all.extend(keys(buffer.read(p).unwrap().map(Result::unwrap)));
    }
    all.sort();
    assert_eq!(all, (0..13_000).collect::<Vec<_>>());
    buffer.close().unwrap();
}

#[test]
fn a_reordered_scatter_write_waiting_for_room_holds_no_charge() {
    // Compaction off: the scatter write reorders its batch (one gather) and keeps the slices.
    // A write that waits lets that copy go (and its charge), and gathers it again when it
    // tries again: writers waiting with their copies charged could fill the pool between
    // them, each waiting for the others with nothing left to spill.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let buffer = ShardBuffer::builder(ints(0..1).schema(), 3)
        .with_memory_limit(64 << 10)
        .with_spill(false)
        .with_compact_target_rows(0)
        .with_write_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    // 60 KB of the 64 KiB in partition 2: an 8 KB scatter write does not fit
    buffer.write_blocking(2, ints(0..7500)).unwrap();
    let pool = buffer.memory_pool().clone();
    let before = pool.reserved();
    let big = ints(10_000..11_000);
    let ids: Vec<u32> = (0..1000).map(|i| (i % 2) as u32).collect();
    rt.block_on(async {
        let mut writes: Vec<_> = (0..3)
            .map(|_| Box::pin(buffer.write_partitioned(big.clone(), &ids)))
            .collect();
        for write in &mut writes {
            assert!(
                futures::poll!(write.as_mut()).is_pending(),
                "the write must wait"
            );
        }
        assert_eq!(
            pool.reserved(),
            before,
            "three writes wait, none holding its reordered copy (1000 x 8 bytes) charged"
        );
        // room: the first gathers its copy again and lands
        buffer.seal(2).unwrap();
        drop(buffer.read(2).unwrap());
        assert!(matches!(
            futures::poll!(writes[0].as_mut()),
            std::task::Poll::Ready(Ok(()))
        ));
        let landed = pool.reserved();
        assert!(landed >= 8000, "the landed write's slices: {landed}");
        drop(writes);
        assert_eq!(
            pool.reserved(),
            landed,
            "dropped waiting writes held nothing"
        );
    });
    // partition 0 read and sealed: a write refused under the lock (for the seal) leaves no
    // charge behind either
    buffer.seal(0).unwrap();
    assert_eq!(buffer.read(0).unwrap().concat().unwrap().num_rows(), 500);
    let err = buffer.write_partitioned_blocking(big, &ids).unwrap_err();
    assert!(
        matches!(err.error(), Error::Sealed { partition: 0 }),
        "{err}"
    );
    buffer.seal(1).unwrap();
    assert_eq!(buffer.read(1).unwrap().concat().unwrap().num_rows(), 500);
    assert_eq!(pool.reserved(), 0);
    buffer.close().unwrap();
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn a_scatter_write_without_compaction_charges_its_reordered_batch_once() {
    let dir = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(ints(0..1).schema(), 200)
        .with_memory_limit(1 << 20)
        .with_spill_dir(dir.path())
        .with_compact_target_rows(0)
        .build()
        .unwrap();
    // 200 slices of one 80 KB reordered batch: 80 KB plus 200 batch overheads, not 200 x 80 KB
    let batch = ints(0..10_000);
    let ids: Vec<u32> = (0..10_000).map(|i| (i % 200) as u32).collect();
    buffer.write_partitioned_blocking(batch, &ids).unwrap();
    let reserved = buffer.metrics().reserved;
    assert!(reserved < 400 << 10, "{reserved}");
    buffer.finish().unwrap();
    let rows: usize = (0..200)
        .map(|p| {
            buffer
                .read(p)
                .unwrap()
                .map(|b| b.unwrap().num_rows())
                .sum::<usize>()
        })
        .sum();
    assert_eq!(rows, 10_000);
    buffer.close().unwrap();
}

#[test]
fn scattered_slices_count_their_share_in_bytes_written_and_spilled() {
    // 20 batches of 80 KB scattered over 200 partitions, stored whole (compaction off), into a
    // 512 KiB pool: each slice counts its share of its reordered batch, not the whole batch
    // (which would make bytes_written 200x the data and every slice look like a large victim).
    let dir = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(ints(0..1).schema(), 200)
        .with_memory_limit(512 << 10)
        .with_spill_dir(dir.path())
        .with_compact_target_rows(0)
        .build()
        .unwrap();
    let mut data = 0;
    for b in 0..20 {
        let batch = ints(b * 10_000..(b + 1) * 10_000);
        data += arrow_shards_memory::sizing::batch_memory_size(&batch) as u64;
        let ids: Vec<u32> = (0..10_000).map(|i| ((i * 7 + b) % 200) as u32).collect();
        buffer.write_partitioned_blocking(batch, &ids).unwrap();
    }
    buffer.finish().unwrap();
    buffer.wait_for_spills();
    let m = buffer.metrics();
    assert!(
        m.bytes_written >= data && m.bytes_written < 2 * data,
        "{m:?}, data {data}"
    );
    assert!(
        m.bytes_spilled > 0 && m.bytes_spilled <= m.bytes_written,
        "{m:?}"
    );
    let rows: usize = (0..200)
        .map(|p| {
            buffer
                .read(p)
                .unwrap()
                .map(|b| b.unwrap().num_rows())
                .sum::<usize>()
        })
        .sum();
    assert_eq!(rows, 200_000);
    buffer.close().unwrap();
}

/// `k: Int64, s: Utf8`, the Dask-like shards of the two tiny-budget scatter tests.
fn keyed_schema() -> SchemaRef {
    Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("k", arrow_schema::DataType::Int64, false),
        arrow_schema::Field::new("s", arrow_schema::DataType::Utf8, false),
    ]))
}

/// 300 scatter writes of mixed sizes (10 to 3,050 rows) with keys `0..n` over 16 partitions by
/// `k % 16`; returns `n`.
fn scatter_mixed_sizes(buffer: &ShardBuffer, seed: u64) -> i64 {
    let schema = buffer.schema().clone();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut written = 0i64;
    for i in 0..300 {
        let rows = [10, 100, 1000, 3000][i % 4] + rng.random_range(0..50);
        let k: Vec<i64> = (written..written + rows as i64).collect();
        let s: Vec<String> = k.iter().map(|k| format!("value {k}")).collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(k.clone())),
            Arc::new(arrow_array::StringArray::from(s)),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let ids: Vec<u32> = k.iter().map(|k| k.rem_euclid(16) as u32).collect();
        buffer
            .write_partitioned_blocking(batch, &ids)
            .unwrap_or_else(|e| panic!("write {i} of {rows} rows: {e}"));
        written += rows as i64;
    }
    written
}

/// Finishes `buffer` and checks that its 16 partitions hold keys `0..written` exactly once, each
/// in its partition, in order.
fn assert_every_key_once(buffer: &ShardBuffer, written: i64) {
    buffer.finish().unwrap();
    let mut all = Vec::new();
    for p in 0..16 {
        let part = keys(buffer.read(p).unwrap().map(|b| b.unwrap()));
        assert!(part.iter().all(|k| k.rem_euclid(16) == i64::from(p)));
        assert!(
            part.windows(2).all(|w| w[0] < w[1]),
            "order within partition {p}"
        );
        all.extend(part);
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..written).collect::<Vec<_>>(),
        "every row exactly once"
    );
}

#[test]
fn scatter_writes_into_a_tiny_budget_never_wait_for_a_release_that_does_not_come() {
    // What the Dask receive side does with a small worker budget: whole batches of mixed sizes
    // scattered over 16 partitions into a 256 KiB pool with the default compaction. A write
    // whose need grew after its first refusal must not wait for a round that frees room only
    // for the old need (it used to, until the 60 s timeout). The timeout turns a hang into a
    // failure naming the write; it is not a timing assertion.
    let dir = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(keyed_schema(), 16)
        .with_memory_limit(256 << 10)
        .with_spill_dir(dir.path())
        .with_write_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let written = scatter_mixed_sizes(&buffer, 7);
    assert_every_key_once(&buffer, written);
    assert!(buffer.close().unwrap().bytes_spilled > 0);
}

#[test]
fn two_buffers_on_one_tiny_pool_scatter_and_read_back_every_row() {
    // The Dask plugin's shape: one pool per worker, a buffer per shuffle run, both scattering.
    use arrow_shards::{BoundedPool, MemoryPool};
    let dir = tempfile::tempdir().unwrap();
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(256 << 10));
    let buffers: Vec<ShardBuffer> = (0..2)
        .map(|_| {
            ShardBuffer::builder(keyed_schema(), 16)
                .with_memory_pool(pool.clone())
                .with_spill_dir(dir.path())
                .with_write_timeout(Duration::from_secs(20))
                .build()
                .unwrap()
        })
        .collect();
    let written: Vec<i64> = std::thread::scope(|s| {
        let writers: Vec<_> = (buffers.iter().zip(0u64..))
            .map(|(buffer, seed)| s.spawn(move || scatter_mixed_sizes(buffer, seed)))
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for (buffer, written) in buffers.iter().zip(written) {
        assert_every_key_once(buffer, written);
        buffer.close().unwrap();
    }
    assert_eq!(pool.reserved(), 0);
}
