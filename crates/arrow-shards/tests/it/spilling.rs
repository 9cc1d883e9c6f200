//! The spiller: nothing on disk while data fits, largest partitions to disk past the threshold,
//! oversized batches straight to disk, reads that merge disk and memory, failures that lose
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_shards::batch_cost as batch_memory_size;
use arrow_shards::{BoundedPool, Error, MemoryPool, ShardBuffer};
use arrow_shards_spill::{FaultPlan, FsOp};

fn batch(first: i64, rows: i64) -> RecordBatch {
    let k: ArrayRef = Arc::new(Int64Array::from_iter_values(first..first + rows));
    RecordBatch::try_from_iter([("k", k)]).unwrap()
}

fn keys(batch: &RecordBatch) -> Vec<i64> {
    let column = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    column.values().to_vec()
}

fn files_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "run")
            })
            .count()
        })
        .unwrap_or(0)
}

#[test]
fn data_that_fits_never_touches_disk() {
    let root = tempfile::tempdir().unwrap();
    let b = batch(0, 1000);
    let size = batch_memory_size(&b);
    let buffer = ShardBuffer::builder(b.schema(), 8)
        .with_compact_target_rows(0)
        .with_memory_limit(size * 100)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    for i in 0..70 {
        buffer
            .write_blocking(i % 8, batch(i as i64 * 1000, 1000))
            .unwrap();
    }
    buffer.finish().unwrap();
    let rows: usize = (0..8)
        .map(|p| buffer.read(p).unwrap().concat().unwrap().num_rows())
        .sum();
    assert_eq!(rows, 70_000);
    let m = buffer.close().unwrap();
    assert_eq!((m.bytes_spilled, m.spill_runs, m.spill_files), (0, 0, 0));
}

#[test]
fn spills_largest_partitions_and_reads_them_back_in_order() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let limit = size * 10;
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 4)
        .with_compact_target_rows(0)
        .with_memory_limit(limit)
        .with_spill_dir(root.path())
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    // partition 0 gets 4x the data of the others: it must be spilled first and most
    let mut expected: Vec<Vec<i64>> = vec![Vec::new(); 4];
    let mut next = 0;
    for round in 0..20 {
        for p in 0..4u32 {
            let n = if p == 0 { 4 } else { 1 };
            for _ in 0..n {
                let b = batch(next, 1000);
                next += 1000;
                expected[p as usize].extend(keys(&b));
                buffer.write_blocking(p, b).unwrap();
            }
        }
        assert!(buffer.memory_pool().reserved() <= limit, "round {round}");
    }
    let sizes = buffer.partition_sizes();
    assert!(
        sizes[0].spilled_bytes >= sizes[1].spilled_bytes,
        "{sizes:?}"
    );
    buffer.finish().unwrap();
    for p in 0..4 {
        let got: Vec<i64> = buffer
            .read(p)
            .unwrap()
            .flat_map(|b| keys(&b.unwrap()))
            .collect();
        assert_eq!(got, expected[p as usize], "partition {p}");
    }
    let m = buffer.close().unwrap();
    assert!(m.bytes_spilled > 0 && m.spill_runs > 0);
    assert!(m.peak_reserved <= limit);
    // spilled about what was needed to get back to the target: a round takes whole partitions,
    // so it may overshoot by less than one partition's bytes (here at most 4 batches)
    assert!(m.bytes_spilled <= m.bytes_written);
    assert!(m.bytes_needed_to_target > 0);
    let per_round_slack = 4 * size as u64 * m.spill_runs;
    assert!(
        m.bytes_spilled <= m.bytes_needed_to_target + per_round_slack,
        "spilled {} for {} needed over {} rounds",
        m.bytes_spilled,
        m.bytes_needed_to_target,
        m.spill_runs
    );

    assert_eq!(
        std::fs::read_dir(root.path()).unwrap().count(),
        0,
        "spill dir removed"
    );
}

#[test]
fn a_batch_larger_than_the_limit_goes_to_disk_after_what_is_in_memory() {
    let root = tempfile::tempdir().unwrap();
    let small = batch(0, 100);
    let big = batch(100, 100_000);
    let limit = batch_memory_size(&big) / 2;
    let buffer = ShardBuffer::builder(small.schema(), 2)
        .with_compact_target_rows(0)
        .with_memory_limit(limit)
        .with_spill_dir(root.path())
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    buffer.write_blocking(0, small.clone()).unwrap();
    buffer.write_blocking(0, big.clone()).unwrap();
    buffer.write_blocking(0, batch(100_100, 10)).unwrap();
    buffer.seal(0).unwrap();
    let got: Vec<i64> = buffer
        .read(0)
        .unwrap()
        .flat_map(|b| keys(&b.unwrap()))
        .collect();
    assert_eq!(got, (0..100_110).collect::<Vec<_>>());
    let m = buffer.close().unwrap();
    assert!(m.bytes_spilled as usize >= batch_memory_size(&big));
    assert_eq!(m.batches_written, 3);
}

#[test]
fn async_write_of_an_oversized_batch() {
    let root = tempfile::tempdir().unwrap();
    let big = batch(0, 50_000);
    let buffer = ShardBuffer::builder(big.schema(), 1)
        .with_compact_target_rows(0)
        .with_memory_limit(1024)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(buffer.write(0, big.clone())).unwrap();
    buffer.finish().unwrap();
    assert_eq!(buffer.read(0).unwrap().concat().unwrap(), big);
}

#[test]
fn writers_blocked_on_a_full_buffer_are_released_by_the_spiller() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 16)
        .with_compact_target_rows(0)
        .with_memory_limit(size * 4)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for w in 0..8i64 {
            let buffer = buffer.clone();
            s.spawn(move || {
                for i in 0..50 {
                    buffer
                        .write_blocking(
                            ((w + i) % 16) as u32,
                            batch(w * 1_000_000 + i * 1000, 1000),
                        )
                        .unwrap();
                }
            });
        }
    });
    buffer.finish().unwrap();
    let rows: usize = (0..16)
        .map(|p| buffer.read(p).unwrap().concat().unwrap().num_rows())
        .sum();
    assert_eq!(rows, 8 * 50 * 1000);
    let m = buffer.close().unwrap();
    assert!(m.spill_runs > 0);
    assert!(m.peak_reserved <= size * 4);
}

#[test]
fn segment_files_are_deleted_once_read() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 2)
        .with_compact_target_rows(0)
        .with_memory_limit(size * 2)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    for i in 0..10 {
        buffer
            .write_blocking(i % 2, batch(i as i64 * 1000, 1000))
            .unwrap();
    }
    let dir = buffer.spill_dir().unwrap().to_path_buf();
    assert!(files_in(&dir) > 0);
    buffer.finish().unwrap();
    for p in 0..2 {
        buffer.read(p).unwrap().for_each(|b| drop(b.unwrap()));
    }
    assert_eq!(files_in(&dir), 0, "every segment read: no run file left");
    assert_eq!(buffer.metrics().bytes_on_disk, 0);
    buffer.close().unwrap();
    assert!(!dir.exists());
}

#[test]
fn a_failed_spill_keeps_batches_in_memory_and_reports_the_error() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 4)
        .with_compact_target_rows(0)
        .with_memory_limit(size * 4)
        .with_spill_dir(root.path())
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    assert!(buffer.set_spill_fault_plan(
        FaultPlan::new().fail_from(FsOp::Write, 1, || std::io::Error::from_raw_os_error(28))
    ));
    let mut accepted = Vec::new();
    let mut refused = None;
    for i in 0..20i64 {
        match buffer.write_blocking((i % 4) as u32, batch(i * 1000, 1000)) {
            Ok(()) => accepted.push(i),
            Err(e) => {
                assert!(matches!(e.error(), Error::Spill(_)), "{e}");
                assert!(e.to_string().contains("no space left"), "{e}");
                assert_eq!(e.batch(), &batch(i * 1000, 1000), "the batch comes back");
                refused = Some(i);
                break;
            }
        }
    }
    let refused = refused.expect("a writer had to wait and got the spill error");
    assert!(buffer.metrics().spill_error.is_some());
    buffer.finish().unwrap();
    let mut got: Vec<i64> = (0..4)
        .flat_map(|p| buffer.read(p).unwrap().flat_map(|b| keys(&b.unwrap())))
        .collect();
    got.sort();
    let want: Vec<i64> = accepted
        .iter()
        .flat_map(|i| i * 1000..i * 1000 + 1000)
        .collect();
    assert_eq!(
        got, want,
        "everything accepted is still readable from memory"
    );
    assert!(!accepted.contains(&refused));
    assert!(matches!(buffer.close(), Err(Error::Spill(_))));
    assert_eq!(
        std::fs::read_dir(root.path()).unwrap().count(),
        0,
        "cleaned up after a failure"
    );
}

#[test]
fn a_read_racing_a_spill_of_the_same_partition_loses_and_duplicates_nothing() {
    for attempt in 0..20 {
        let root = tempfile::tempdir().unwrap();
        let size = batch_memory_size(&batch(0, 1000));
        let buffer = ShardBuffer::builder(batch(0, 1).schema(), 1)
            .with_compact_target_rows(0)
            .with_memory_limit(size * 8)
            .with_spill_threshold(0.1)
            .with_spill_target(0.0)
            .with_spill_dir(root.path())
            .build()
            .unwrap();
        for i in 0..6 {
            buffer.write_blocking(0, batch(i * 1000, 1000)).unwrap();
        }
        // the spiller was woken past 10%: seal and read while it may be writing
        buffer.seal(0).unwrap();
        let got = buffer.read(0).unwrap().concat().unwrap();
        assert_eq!(
            keys(&got),
            (0..6000).collect::<Vec<_>>(),
            "attempt {attempt}"
        );
        let m = buffer.close().unwrap();
        assert_eq!(m.reserved, 0);
    }
}

#[test]
fn buffers_sharing_a_pool_both_spill_to_stay_under_it() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(size * 6));
    let make = || {
        ShardBuffer::builder(batch(0, 1).schema(), 4)
            .with_compact_target_rows(0)
            .with_memory_pool(pool.clone())
            .with_spill_dir(root.path())
            .build()
            .unwrap()
    };
    let (a, b) = (make(), make());
    std::thread::scope(|s| {
        for buffer in [&a, &b] {
            s.spawn(move || {
                for i in 0..40 {
                    buffer
                        .write_blocking(i % 4, batch(i as i64 * 1000, 1000))
                        .unwrap();
                }
            });
        }
    });
    assert!(pool.peak() <= size * 6);
    for buffer in [&a, &b] {
        buffer.finish().unwrap();
        let rows: usize = (0..4)
            .map(|p| buffer.read(p).unwrap().concat().unwrap().num_rows())
            .sum();
        assert_eq!(rows, 40_000);
        assert!(buffer.close().unwrap().spill_runs > 0);
    }
}

#[test]
fn close_is_idempotent_and_refuses_later_writes() {
    let root = tempfile::tempdir().unwrap();
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 1)
        .with_compact_target_rows(0)
        .with_memory_limit(1 << 20)
        .with_spill_dir(root.path())
        .with_write_timeout(Duration::from_millis(1))
        .build()
        .unwrap();
    buffer.close().unwrap();
    buffer.close().unwrap();
    assert!(matches!(
        buffer.write_blocking(0, batch(0, 1)).unwrap_err().error(),
        Error::Closed
    ));
}

#[test]
fn a_failed_spill_round_is_retried_and_spilling_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 4)
        .with_compact_target_rows(0)
        .with_memory_limit(size * 4)
        .with_spill_dir(root.path())
        .build()
        .unwrap();
    // the first two writes to spill files fail (a transient error), later ones work
    assert!(
        buffer.set_spill_fault_plan(
            FaultPlan::new()
                .fail_nth(FsOp::Write, 1, || std::io::Error::from_raw_os_error(5))
                .fail_nth(FsOp::Write, 2, || std::io::Error::from_raw_os_error(5))
        )
    );
    for i in 0..20i64 {
        buffer
            .write_blocking((i % 4) as u32, batch(i * 1000, 1000))
            .expect("a transient spill failure is retried, not handed to the writer");
    }
    let m = buffer.metrics();
    assert!(m.bytes_spilled > 0 && m.spill_error.is_none(), "{m:?}");
    buffer.finish().unwrap();
    let mut got: Vec<i64> = (0..4)
        .flat_map(|p| buffer.read(p).unwrap().flat_map(|b| keys(&b.unwrap())))
        .collect();
    got.sort();
    assert_eq!(got, (0..20_000).collect::<Vec<_>>());
    buffer.close().unwrap();
}
