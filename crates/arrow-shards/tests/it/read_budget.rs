//! How far reading a partition back takes the pool past its limit after a spilling write.
//! With 32 KiB segments and 8192-row read batches, one output batch spans
//! about ten segments; keeping all of them charged until the batch was handed over took the
//! pool to 2.5x its 256 KiB limit. The bound checked here is the documented one
//! (`docs/memory-accounting.md`, `Merger`'s memory section): one reader at a time and no writer
//! take the pool at most one segment past its limit (the async stream: one more per segment
//! read ahead).
//!
//! Nothing here depends on timing: the spiller decides what stays in memory, but whatever it
//! leaves is within the limit, and the bound holds on top of any such state. The pool's own
//! `peak()` sees every reservation, including the moment between decoding a segment and handing
//! a batch over, which sampling `reserved()` between batches would miss.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_shards::{MemoryPool, ShardBuffer};
use arrow_shards_memory::sizing::batch_memory_size;
use futures::StreamExt;

const LIMIT: usize = 256 << 10;
const SEGMENT_BYTES: usize = 32 << 10;
const PARTITIONS: u32 = 4;
const BATCHES: usize = 400;
const ROWS: usize = 500;

/// `id` counting up from `first`, and a ~30-byte `name` (null every seventh row): about 42
/// bytes a row, so an 8192-row output batch (~340 KB) is larger than the limit by itself.
fn batch(first: i64, rows: usize) -> RecordBatch {
    let ids = first..first + rows as i64;
    let names = StringArray::from_iter(
        ids.clone()
            .map(|i| (i % 7 != 0).then(|| format!("name-{i:024}"))),
    );
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef,
        ),
        ("name", Arc::new(names) as ArrayRef),
    ])
    .unwrap()
}

fn ids(batch: &RecordBatch) -> Vec<i64> {
    let column = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    column.values().to_vec()
}

struct Filled {
    buffer: ShardBuffer,
    /// The pool's limit plus one segment: a segment holds at most `SEGMENT_BYTES` of batches,
    /// or one batch when a single batch is larger.
    segment: usize,
    expected: Vec<Vec<i64>>,
    _root: tempfile::TempDir,
}

/// A finished buffer that spilled most of ~8 MB written round-robin to 4 partitions, with the
/// default read batch rows (8192). Compaction on write is off so that the batches stored (and
/// spilled) are the ones written, and a segment's size is known from them; compaction cuts
/// batches of its own size (with this limit, 1500-row batches of ~62 KB).
fn filled() -> Filled {
    filled_reading(arrow_shards::default_max_concurrent_reads())
}

/// [`filled`], with the streams' concurrent segment reads bounded by `reads`.
fn filled_reading(reads: usize) -> Filled {
    filled_with(reads, None)
}

/// [`filled_reading`], with the read budget's stall timeout.
fn filled_with(reads: usize, stall: Option<std::time::Duration>) -> Filled {
    let root = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), PARTITIONS)
        .with_memory_limit(LIMIT)
        .with_spill_dir(root.path())
        .with_spill_segment_bytes(SEGMENT_BYTES)
        .with_compact_target_rows(0)
        .with_max_concurrent_reads(reads)
        .with_read_stall_timeout(stall)
        .build()
        .unwrap();
    let mut expected = vec![Vec::new(); PARTITIONS as usize];
    let mut largest = 0;
    for i in 0..BATCHES {
        let first = (i * ROWS) as i64;
        let b = batch(first, ROWS);
        largest = largest.max(batch_memory_size(&b));
        let p = i as u32 % PARTITIONS;
        expected[p as usize].extend(first..first + ROWS as i64);
        buffer.write_blocking(p, b).unwrap();
    }
    buffer.finish().unwrap();
    let m = buffer.metrics();
    assert!(
        m.bytes_spilled > (LIMIT as u64) * 8,
        "spilled only {}",
        m.bytes_spilled
    );
    assert!(buffer.memory_pool().reserved() <= LIMIT);
    Filled {
        buffer,
        segment: SEGMENT_BYTES.max(largest),
        expected,
        _root: root,
    }
}

fn assert_within(pool: &Arc<dyn MemoryPool>, segments: usize, segment: usize, how: &str) {
    let bound = LIMIT + segments * segment;
    let peak = pool.peak();
    assert!(
        peak <= bound,
        "{how}: pool peak {peak} > limit {LIMIT} + {segments} x segment {segment} = {bound} \
         ({:.2}x the limit)",
        peak as f64 / LIMIT as f64
    );
}

#[test]
fn reading_partitions_one_by_one_passes_the_limit_by_at_most_one_segment() {
    let Filled {
        buffer,
        segment,
        expected,
        _root,
    } = filled();
    let pool = Arc::clone(buffer.memory_pool());
    let mut largest_output = 0;
    for p in 0..PARTITIONS {
        let mut got = Vec::new();
        for b in buffer.read(p).unwrap() {
            let b = b.unwrap();
            assert!(b.num_rows() > 0 && b.num_rows() <= 8192);
            largest_output = largest_output.max(batch_memory_size(&b));
            // between batches too, not only at the peak
            assert!(pool.reserved() <= LIMIT + segment, "partition {p}");
            got.extend(ids(&b));
        }
        assert_eq!(got, expected[p as usize], "partition {p}");
    }
    assert!(largest_output > 0);
    assert_within(&pool, 1, segment, "iterator");
    buffer.close().unwrap();
    assert_eq!(pool.reserved(), 0);
}

#[test]
fn concat_passes_the_limit_by_at_most_one_segment() {
    let Filled {
        buffer,
        segment,
        expected,
        _root,
    } = filled();
    let pool = Arc::clone(buffer.memory_pool());
    for p in 0..PARTITIONS {
        let all = buffer.read(p).unwrap().concat().unwrap();
        assert_eq!(ids(&all), expected[p as usize], "partition {p}");
    }
    assert_within(&pool, 1, segment, "concat");
    buffer.close().unwrap();
}

/// The stream reads one segment ahead by default: that read may add one more segment.
#[test]
fn the_stream_passes_the_limit_by_at_most_its_segments() {
    let Filled {
        buffer,
        segment,
        expected,
        _root,
    } = filled();
    let pool = Arc::clone(buffer.memory_pool());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for p in 0..PARTITIONS {
        let reader = buffer.read(p).unwrap();
        let got: Vec<i64> = runtime.block_on(async {
            reader
                .into_stream()
                .flat_map(|b| futures::stream::iter(ids(&b.unwrap())))
                .collect()
                .await
        });
        assert_eq!(got, expected[p as usize], "partition {p}");
    }
    drop(runtime);
    assert_within(&pool, 2, segment, "stream");
    buffer.close().unwrap();
}

/// Every partition streamed at once, as an engine polls its output streams, with one read slot
/// (and with the bound off): each partition whole, in order, and the pool back to zero.
#[test]
fn partitions_streamed_at_once_through_one_read_slot_come_back_whole() {
    let budget = Some(arrow_shards::DEFAULT_READ_STALL_TIMEOUT);
    for (reads, stall) in [(1, budget), (0, budget), (1, None)] {
        let Filled {
            buffer,
            expected,
            _root,
            ..
        } = filled_with(reads, stall);
        let pool = Arc::clone(buffer.memory_pool());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let streams: Vec<_> = (0..PARTITIONS)
            .map(|p| buffer.read(p).unwrap().into_stream())
            .collect();
        let got: Vec<Vec<i64>> = runtime.block_on(futures::future::join_all(
            streams.into_iter().map(|stream| {
                stream
                    .flat_map(|b| futures::stream::iter(ids(&b.unwrap())))
                    .collect::<Vec<i64>>()
            }),
        ));
        assert_eq!(
            got, expected,
            "max concurrent reads {reads}, stall timeout {stall:?}"
        );
        drop(runtime);
        buffer.close().unwrap();
        assert_eq!(pool.reserved(), 0);
    }
}

/// With the read budget, every partition read at once, each by its own blocking reader thread,
/// takes the pool past its limit by at most one segment (the one overdraft) plus what decoding
/// adds over a segment's `memory_bytes`, not one segment per reader; every row comes back.
#[test]
fn readers_at_once_share_one_overdraft() {
    let Filled {
        buffer,
        segment,
        expected,
        _root,
    } = filled_with(
        arrow_shards::default_max_concurrent_reads(),
        Some(arrow_shards::DEFAULT_READ_STALL_TIMEOUT),
    );
    let pool = Arc::clone(buffer.memory_pool());
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..PARTITIONS)
            .map(|p| {
                let reader = buffer.read(p).unwrap();
                s.spawn(move || reader.flat_map(|b| ids(&b.unwrap())).collect::<Vec<_>>())
            })
            .collect();
        for (p, reader) in readers.into_iter().enumerate() {
            assert_eq!(reader.join().unwrap(), expected[p], "partition {p}");
        }
    });
    // Decoded batches may exceed their `memory_bytes` a little (each reader's own segment).
    assert_within(&pool, 2, segment, "readers at once, with the budget");
    buffer.close().unwrap();
    assert_eq!(pool.reserved(), 0);
}

/// A reader that needs a segment while the pool is full and another reader holds the overdraft
/// (its consumer stopped in the middle of a segment) waits, then fails with `ReadStalled`,
/// naming the sizes, instead of hanging or passing the limit; the first reader then goes on to
/// the end.
#[test]
fn a_stalled_read_ends_in_an_error() {
    const BIG: usize = 4 << 20;
    let root = tempfile::tempdir().unwrap();
    let pool: Arc<dyn MemoryPool> = Arc::new(arrow_shards::BoundedPool::new(BIG));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 2)
        .with_memory_pool(Arc::clone(&pool))
        .with_spill_dir(root.path())
        .with_compact_target_rows(0)
        .with_read_batch_rows(0)
        .with_read_stall_timeout(Some(std::time::Duration::from_millis(200)))
        .build()
        .unwrap();
    // Batches of 10,000 rows (~420 KB) stay whole in segments (the spill writer coalesces
    // only batches under 8192 rows), several to a segment.
    for i in 0..40 {
        buffer
            .write_blocking(i % 2, batch(i64::from(i) * 10_000, 10_000))
            .unwrap();
    }
    buffer.finish().unwrap();
    buffer.wait_for_spills();
    let sizes = buffer.partition_sizes();
    assert!(
        sizes
            .iter()
            .all(|s| s.segments > 0 && s.spilled_rows > s.segments * 10_000),
        "{sizes:?}"
    );
    // Someone else fills the pool.
    let mut other = arrow_shards::MemoryReservation::new(&pool);
    other.grow(BIG.saturating_sub(pool.reserved()));
    let mut first = buffer.read(0).unwrap();
    // Its first segment needs the overdraft, and keeps it until its last batch is handed over.
    first.next().unwrap().unwrap();
    assert_eq!(buffer.metrics().read_overdrafts, 1);
    let mut second = buffer.read(1).unwrap();
    let error = second.next().unwrap().unwrap_err();
    let stalled = match &error {
        arrow_schema::ArrowError::ExternalError(e) => {
            e.downcast_ref::<arrow_shards_merge::MergeError>()
        }
        _ => None,
    };
    assert!(
        matches!(
            stalled,
            Some(arrow_shards_merge::MergeError::ReadStalled { .. })
        ),
        "{error}"
    );
    assert!(error.to_string().contains("waited"), "{error}");
    assert!(second.next().is_none(), "nothing follows an error");
    // The first reader goes on to the end, one overdraft after the other.
    let rest: usize = first.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rest + 10_000, 20 * 10_000);
    drop(other);
    assert!(buffer.metrics().read_wait > std::time::Duration::ZERO);
    buffer.close().unwrap();
    assert_eq!(pool.reserved(), 0);
}
