//! `SpillForOthersPool`: an operator refused by the session's pool gets room from the
//! exchanges' buffers, which spill for it; the exchanges' own refusals are passed on as they
//! are, and with nothing to spill a refusal stays a refusal.

use std::sync::Arc;
use std::time::Duration;

use arrow_shards::ShardBuffer;
use arrow_shards_datafusion::{SessionPool, SpillForOthersPool};
use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::execution::memory_pool::{FairSpillPool, MemoryConsumer, MemoryPool};

const LIMIT: usize = 8 << 20;

fn batch(first: i64, rows: i64) -> RecordBatch {
    let ids = Int64Array::from_iter_values(first..first + rows);
    RecordBatch::try_from_iter([("id", Arc::new(ids) as _)]).unwrap()
}

/// Batches written by [`filled`], of 32,768 rows of 8 bytes (256 KiB) each: 5 MiB, under the
/// buffer's spill threshold (80% of 8 MiB).
const BATCHES: i64 = 20;

/// A buffer on a bridge over `session`, written with 5 MiB across 4 partitions.
fn filled(session: &Arc<dyn MemoryPool>, root: &std::path::Path) -> ShardBuffer {
    let bridge = Arc::new(SessionPool::new(session, "ShardRepartitionExec"));
    let buffer = ShardBuffer::builder(batch(0, 1).schema(), 4)
        .with_memory_pool(bridge)
        .with_spill_dir(root)
        .with_write_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    if let Some(others) = session.downcast_ref::<SpillForOthersPool>() {
        others.join(&buffer);
    }
    for i in 0..BATCHES {
        let p = u32::try_from(i % 4).unwrap();
        buffer.write_blocking(p, batch(i << 15, 1 << 15)).unwrap();
    }
    buffer
}

/// Reads every partition back and checks each row came back once.
fn read_all(buffer: &ShardBuffer) {
    buffer.finish().unwrap();
    let mut rows = 0;
    for p in 0..4 {
        rows += buffer
            .read(p)
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum::<usize>();
    }
    assert_eq!(rows, usize::try_from(BATCHES << 15).unwrap());
}

#[test]
fn an_operator_refused_beside_an_exchange_gets_room_from_its_spill() {
    let root = tempfile::tempdir().unwrap();
    let session: Arc<dyn MemoryPool> =
        Arc::new(SpillForOthersPool::new(Arc::new(FairSpillPool::new(LIMIT))));
    let buffer = filled(&session, root.path());
    let held = session.reserved();
    assert!(held > 4 << 20, "the exchange holds {held} bytes");
    assert_eq!(buffer.metrics().bytes_spilled, 0);

    // An aggregation that cannot spill asks for 4 MiB: the fair pool alone would refuse it.
    let aggregation = MemoryConsumer::new("final aggregation").register(&session);
    aggregation.try_grow(4 << 20).unwrap();
    assert!(
        buffer.metrics().bytes_spilled > 0,
        "the exchange spilled for it"
    );
    assert!(session.reserved() <= LIMIT);

    drop(aggregation);
    read_all(&buffer);
    buffer.close().unwrap();
    assert_eq!(session.reserved(), 0);
}

#[test]
fn without_the_wrapper_the_same_operator_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let session: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(LIMIT));
    let buffer = filled(&session, root.path());
    let aggregation = MemoryConsumer::new("final aggregation").register(&session);
    let refused = aggregation.try_grow(4 << 20).unwrap_err();
    assert!(
        refused.to_string().contains("Resources exhausted"),
        "{refused}"
    );
    read_all(&buffer);
    buffer.close().unwrap();
}

#[test]
fn with_nothing_to_spill_a_refusal_stays_a_refusal() {
    let session: Arc<dyn MemoryPool> = Arc::new(
        SpillForOthersPool::new(Arc::new(FairSpillPool::new(LIMIT)))
            .with_wait(Duration::from_secs(60)),
    );
    // no exchange at all: refused at once, not after the wait
    let big = MemoryConsumer::new("sort").register(&session);
    let refused = big.try_grow(LIMIT + 1).unwrap_err();
    assert!(
        refused.to_string().contains("Resources exhausted"),
        "{refused}"
    );
    assert_eq!(session.reserved(), 0);
}

#[test]
fn an_exchanges_own_refusal_is_passed_on_for_its_buffer_to_answer() {
    let root = tempfile::tempdir().unwrap();
    let session: Arc<dyn MemoryPool> =
        Arc::new(SpillForOthersPool::new(Arc::new(FairSpillPool::new(LIMIT))));
    // Two exchanges on one session: each is the other's spill peer, and their writes beyond
    // their fair share (4 MiB each) are answered by their own spillers (the wrapper does not
    // wait for them).
    let first = filled(&session, root.path());
    let second = filled(&session, root.path());
    // The first took 5 MiB before the second came; the second's share is then 4 MiB, which
    // only its own spill frees (asking the first would free the first's share, not its own).
    assert_eq!(first.metrics().bytes_spilled, 0);
    assert!(
        second.metrics().bytes_spilled > 0,
        "5 MiB written in a 4 MiB share"
    );
    read_all(&first);
    read_all(&second);
    first.close().unwrap();
    second.close().unwrap();
    assert_eq!(session.reserved(), 0);
}
