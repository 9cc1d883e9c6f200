//! Cancellation and shutdown: dropped write futures, readers dropped half way, `close()` while
//! writers wait or readers are open, closing twice.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_shards::batch_cost as batch_memory_size;
use arrow_shards::{BoundedPool, Error, MemoryPool, ShardBuffer};

use crate::harness::{keys, read_all, run_files, spill_error, watchdog};

fn batch(first: i64, rows: i64) -> RecordBatch {
    let k: ArrayRef = Arc::new(Int64Array::from_iter_values(first..first + rows));
    RecordBatch::try_from_iter([("k", k)]).unwrap()
}

/// A pool filled by another buffer that cannot spill. Without spilling, `buffer`'s own writers
/// wait (up to their hour-long timeout): only `close()` can release them. With spilling, a
/// refused write with nothing to free anywhere goes to disk instead of waiting.
fn waiting_setup(spill: bool) -> (ShardBuffer, ShardBuffer, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let pool: Arc<dyn MemoryPool> = Arc::new(BoundedPool::new(size));
    let other = ShardBuffer::builder(batch(0, 1).schema(), 1)
        .with_compact_target_rows(0)
        .with_memory_pool(pool.clone())
        .with_spill(false)
        .build()
        .unwrap();
    other.write_blocking(0, batch(0, 1000)).unwrap();
    let builder = ShardBuffer::builder(batch(0, 1).schema(), 2)
        .with_compact_target_rows(0)
        .with_memory_pool(pool)
        .with_write_timeout(Duration::from_secs(3600))
        .with_disk_when_nothing_to_spill(spill);
    let buffer = if spill {
        builder.with_spill_dir(root.path()).build().unwrap()
    } else {
        builder.with_spill(false).build().unwrap()
    };
    (buffer, other, root)
}

#[test]
fn close_releases_blocked_writers_with_their_batch() {
    {
        let (buffer, other, _root) = waiting_setup(false);
        let results = watchdog(
            "close() must release writers blocked on memory",
            Duration::from_secs(60),
            move || {
                std::thread::scope(|s| {
                    let writers: Vec<_> = (0..3i64)
                        .map(|w| {
                            let buffer = &buffer;
                            s.spawn(move || buffer.write_blocking(0, batch(w * 1000, 1000)))
                        })
                        .collect();
                    // give the writers time to park; if one has not, close() refuses it anyway
                    std::thread::sleep(Duration::from_millis(100));
                    buffer.close().unwrap();
                    buffer.close().unwrap(); // twice is harmless
                    writers
                        .into_iter()
                        .map(|h| h.join().unwrap())
                        .collect::<Vec<_>>()
                })
            },
        );
        for (w, result) in results.into_iter().enumerate() {
            let e = result.expect_err("nothing fits: the write cannot have succeeded");
            assert!(matches!(e.error(), Error::Closed), "{e}");
            assert_eq!(e.into_batch(), batch(w as i64 * 1000, 1000));
        }
        drop(other);
    }
}

/// With spilling, writers refused while nothing anywhere on the pool can be spilled do not
/// wait for a release that only `other` could give: their batches go to disk, and read back.
#[test]
fn refused_writes_with_nothing_to_free_go_to_disk() {
    let (buffer, other, _root) = waiting_setup(true);
    for w in 0..3i64 {
        buffer.write_blocking(0, batch(w * 1000, 1000)).unwrap();
    }
    assert_eq!(buffer.metrics().direct_writes, 3);
    buffer.finish().unwrap();
    let got = buffer.read(0).unwrap().concat().unwrap();
    assert_eq!(keys(&[got]), (0..3000).collect::<Vec<_>>());
    assert_eq!(buffer.close().unwrap().reserved, 0);
    drop(other);
}

#[test]
fn close_releases_blocked_async_writers_with_their_batch() {
    let (buffer, _other, _root) = waiting_setup(false);
    watchdog(
        "close() must wake async writers",
        Duration::from_secs(60),
        move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async {
                let writers: Vec<_> = (0..3i64)
                    .map(|w| {
                        let buffer = buffer.clone();
                        tokio::spawn(async move { buffer.write(1, batch(w, 1000)).await })
                    })
                    .collect();
                tokio::time::sleep(Duration::from_millis(100)).await;
                buffer.close().unwrap();
                for (w, writer) in writers.into_iter().enumerate() {
                    let e = writer.await.unwrap().unwrap_err();
                    assert!(matches!(e.error(), Error::Closed), "{e}");
                    assert_eq!(e.into_batch(), batch(w as i64, 1000));
                }
            });
        },
    );
}

#[test]
fn dropped_write_futures_insert_whole_batches_or_nothing_and_leak_nothing() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 4)
        .with_compact_target_rows(0)
        .with_memory_limit(size * 6)
        .with_spill_dir(root.path())
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    // 400 writes, each abandoned after a deadline between 0 and 2 ms; a few are larger than
    // the limit and go to disk directly
    let completed: Vec<(u32, i64, i64, bool)> = rt.block_on(async {
        let tasks: Vec<_> = (0..400i64)
            .map(|i| {
                let buffer = buffer.clone();
                tokio::spawn(async move {
                    let p = (i % 4) as u32;
                    let rows = if i % 50 == 7 { 20_000 } else { 1000 };
                    let first = i * 100_000;
                    let write = buffer.write(p, batch(first, rows));
                    let deadline = Duration::from_micros((i as u64 * 37) % 2000);
                    let done = match tokio::time::timeout(deadline, write).await {
                        Ok(result) => {
                            result.unwrap();
                            true
                        }
                        Err(_) => false, // dropped while waiting
                    };
                    (p, first, rows, done)
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    buffer.finish().unwrap();
    let mut read: Vec<i64> = Vec::new();
    for p in 0..4 {
        let outcome = read_all(&buffer, p);
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        read.extend(keys(&outcome.batches));
    }
    read.sort_unstable();
    let mut expected: Vec<i64> = Vec::new();
    for (_, first, rows, done) in &completed {
        let present = read.binary_search(first).is_ok();
        // in the buffer exactly when the write returned `Ok`, oversized batches included
        assert_eq!(
            present, *done,
            "batch {first} ({rows} rows): written {done}"
        );
        if *done {
            expected.extend(*first..first + rows);
        }
    }
    expected.sort_unstable();
    assert_eq!(read, expected, "a batch was split or duplicated");

    let m = buffer.close().unwrap();
    assert_eq!(m.rows_written as usize, read.len());
    assert_eq!(buffer.memory_pool().reserved(), 0, "a reservation leaked");
}

/// An oversized batch's write future dropped while the spiller writes it: the batch is written
/// to disk, but never joins its partition; its file bytes go with the run file.
#[test]
fn a_dropped_oversized_write_never_lands() {
    use futures::FutureExt;

    let root = tempfile::tempdir().unwrap();
    let small = batch_memory_size(&batch(0, 1000));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 2)
        .with_compact_target_rows(0)
        .with_memory_limit(small * 4)
        .with_spill_dir(root.path())
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    buffer.write_blocking(1, batch(0, 1000)).unwrap();
    let mut pending = 0;
    let mut landed = Vec::new();
    for i in 1..=20i64 {
        // one poll: the batch is handed to the spiller, then the future is dropped
        match buffer.write(1, batch(i * 100_000, 20_000)).now_or_never() {
            None => pending += 1,
            Some(result) => {
                result.unwrap();
                landed.push(i * 100_000);
            }
        }
    }
    assert!(
        pending > 0,
        "no write was still on its way to disk when dropped"
    );
    // The spiller takes jobs in order: once this one is in, the dropped ones are done with.
    buffer.write_blocking(1, batch(9_000_000, 20_000)).unwrap();
    buffer.write_blocking(1, batch(9_100_000, 10)).unwrap();
    buffer.finish().unwrap();
    let outcome = read_all(&buffer, 1);
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    let mut expected: Vec<i64> = (0..1000).collect();
    for first in landed {
        expected.extend(first..first + 20_000);
    }
    expected.extend(9_000_000..9_020_000);
    expected.extend(9_100_000..9_100_010);
    let got = keys(&outcome.batches);
    let starts = |k: &[i64]| -> Vec<i64> {
        k.iter()
            .enumerate()
            .filter(|(i, v)| *i == 0 || k[i - 1] + 1 != **v)
            .map(|(_, v)| *v)
            .collect()
    };
    assert!(
        got == expected,
        "read {} rows in runs starting at {:?}, expected {} rows starting at {:?}",
        got.len(),
        starts(&got),
        expected.len(),
        starts(&expected)
    );
    let m = buffer.close().unwrap();
    assert_eq!(m.rows_written as usize, expected.len());
    assert_eq!(buffer.memory_pool().reserved(), 0, "a reservation leaked");
    assert_eq!(
        std::fs::read_dir(root.path()).unwrap().count(),
        0,
        "files left"
    );
}

#[test]
fn a_reader_dropped_half_way_releases_memory_and_unreferenced_files() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 2)
        .with_compact_target_rows(0)
        .with_memory_limit(size * 4)
        .with_spill_dir(root.path())
        .with_spill_segment_bytes(size)
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    // partition 0 is large: several segments in several run files, plus batches in memory
    for i in 0..24i64 {
        buffer
            .write_blocking((i % 3).min(1) as u32, batch(i * 1000, 1000))
            .unwrap();
    }
    let dir = buffer.spill_dir().unwrap().to_path_buf();
    buffer.finish().unwrap();
    // rounds woken by the last writes may still be running: let them end before counting
    buffer.wait_for_spills();
    let files_before = run_files(&dir).len();
    assert!(files_before > 1, "the test needs several run files");
    let before = buffer.memory_pool().reserved();
    let mut reader = buffer.read(1).unwrap();
    let first = reader.next().unwrap().unwrap();
    assert_eq!(first.num_rows(), 1000);
    drop(reader);
    // what partition 1 held (memory and the segment being decoded) is back in the pool, and
    // the files only it used are gone
    assert!(buffer.memory_pool().reserved() <= before);
    assert_eq!(
        buffer.memory_pool().reserved(),
        buffer.metrics().reserved,
        "only the buffer's own batches are still charged"
    );
    let files_mid = run_files(&dir).len();
    assert!(files_mid <= files_before);
    // partition 0 is still whole: shared run files were kept for it
    let outcome = read_all(&buffer, 0);
    assert!(outcome.error.is_none());
    let want: Vec<i64> = (0..24i64)
        .filter(|i| i % 3 == 0)
        .flat_map(|i| i * 1000..i * 1000 + 1000)
        .collect();
    assert_eq!(keys(&outcome.batches), want);
    assert!(
        run_files(&dir).is_empty(),
        "every file unreferenced: all deleted"
    );
    assert_eq!(buffer.memory_pool().reserved(), 0);
    buffer.close().unwrap();
}

#[test]
fn close_with_a_reader_open_fails_its_unread_segments_cleanly() {
    let root = tempfile::tempdir().unwrap();
    let size = batch_memory_size(&batch(0, 1000));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 1)
        .with_compact_target_rows(0)
        .with_memory_limit(size * 2)
        .with_spill_dir(root.path())
        .with_spill_segment_bytes(size)
        .with_read_batch_rows(0)
        .build()
        .unwrap();
    for i in 0..10i64 {
        buffer.write_blocking(0, batch(i * 1000, 1000)).unwrap();
    }
    buffer.finish().unwrap();
    let mut reader = buffer.read(0).unwrap();
    let first = reader.next().unwrap().unwrap();
    assert_eq!(keys(&[first]), (0..1000).collect::<Vec<_>>());
    buffer.close().unwrap();
    assert!(
        root.path().read_dir().unwrap().next().is_none(),
        "dir removed"
    );
    // the reader's next segment is gone: an error naming the spill directory, then nothing
    let mut rest = Vec::new();
    let mut error = None;
    for item in reader.by_ref() {
        match item {
            Ok(b) => rest.push(b),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let error = error.expect("the removed segments are reported");
    let cause = spill_error(&error).expect("a SpillError");
    assert!(cause.to_string().contains("arrow-shards-spill-"), "{cause}");
    assert!(reader.next().is_none());
    // rows handed out are still a prefix of what was written
    let got = keys(&rest);
    assert_eq!(got, (1000..1000 + got.len() as i64).collect::<Vec<_>>());
    buffer.close().unwrap();
    assert_eq!(buffer.memory_pool().reserved(), 0);
}
