//! Spill tiers (`with_spill_tiers`): a local directory with a small byte quota, and an object
//! store behind it (`ObjectStoreSpill` on `object_store`'s in-memory store; the same tier
//! against a real S3-compatible server is tested in the spill crate, tests/it/object_store.rs).
//!
//! Checks: runs go local until the quota (or a really full tmpfs), then to the object store;
//! every accepted row is read back exactly once in order; the metrics show both tiers; nothing
//! is left in either after close.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_shards::ShardBuffer;
use arrow_shards_spill::object_store::memory::InMemory;
use arrow_shards_spill::{ObjectStoreSpill, SpillStorage};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::common::{Written, batch, schema};
use crate::full_disk::mount_tmpfs;
use crate::harness::{check_outcome, entries, read_all};

/// Writes ~`batches` x 1000 rows to 8 partitions through `buffer` from one thread.
fn write(buffer: &ShardBuffer, batches: u32) -> Written {
    let schema = buffer.schema().clone();
    let mut rng = StdRng::seed_from_u64(7);
    let mut accepted = Written::new();
    let mut seq: HashMap<u32, i64> = HashMap::new();
    for i in 0..batches {
        let p = (i * 3) % 8;
        let next = seq.entry(p).or_default();
        let b = batch(&schema, &mut rng, 0, *next, 1000);
        buffer.write_blocking(p, b.clone()).unwrap();
        *next += 1000;
        accepted.entry((0, p)).or_default().push(b);
    }
    accepted
}

fn read_back(buffer: &ShardBuffer, accepted: &Written) {
    buffer.finish().unwrap();
    let mut rows = 0;
    for p in 0..8 {
        let outcome = read_all(buffer, p);
        assert!(
            outcome.error.is_none(),
            "partition {p}: {:?}",
            outcome.error
        );
        rows += check_outcome(p, &outcome, accepted).delivered;
    }
    let accepted_rows: usize = accepted.values().flatten().map(|b| b.num_rows()).sum();
    assert_eq!(rows, accepted_rows);
}

/// A buffer of 1 MiB spilling under `root` (rounds of 512 KiB) with `overflow` behind it.
fn tiered(
    root: &std::path::Path,
    quota: Option<u64>,
    overflow: &Arc<dyn SpillStorage>,
) -> ShardBuffer {
    ShardBuffer::builder(schema(&[1, 2]), 8)
        .with_memory_limit(1 << 20)
        .with_spill_dir(root)
        .with_spill_segment_bytes(256 << 10)
        .with_max_spill_round_bytes(512 << 10)
        .with_spill_tiers(quota, Arc::clone(overflow))
        .build()
        .unwrap()
}

#[test]
fn runs_past_the_local_quota_go_to_the_object_store_and_read_back_once() {
    let root = tempfile::tempdir().unwrap();
    let overflow: Arc<dyn SpillStorage> =
        ObjectStoreSpill::create(Arc::new(InMemory::new()), "memory://spill", "tiers").unwrap();
    let quota = 2 << 20;
    // 1 MiB of memory, ~12 MiB of data, 2 MiB of local disk
    let buffer = tiered(root.path(), Some(quota), &overflow);
    let accepted = write(&buffer, 500);
    read_back(&buffer, &accepted);

    let metrics = buffer.metrics();
    assert!(metrics.spill_error.is_none(), "{:?}", metrics.spill_error);
    assert!(metrics.spill_runs > 0, "local runs: {metrics:?}");
    assert!(metrics.overflow_runs > 0, "overflow runs: {metrics:?}");
    assert!(metrics.overflow_bytes_written > 0);
    assert!(metrics.bytes_written_to_disk > 0);
    let tier = overflow.metrics();
    assert_eq!(tier.runs, metrics.overflow_runs);
    assert_eq!(
        tier.segments_read, tier.segments,
        "each overflow segment read once"
    );

    buffer.close().unwrap();
    assert_eq!(
        entries(root.path()),
        Vec::<std::path::PathBuf>::new(),
        "local spill files left"
    );
    assert_eq!(
        overflow.metrics().files,
        0,
        "objects left in the overflow tier"
    );
    overflow.close().unwrap();
}

#[test]
fn a_quota_of_zero_sends_every_run_to_the_object_store() {
    let root = tempfile::tempdir().unwrap();
    let overflow: Arc<dyn SpillStorage> =
        ObjectStoreSpill::create(Arc::new(InMemory::new()), "memory://spill", "tiers").unwrap();
    let buffer = ShardBuffer::builder(schema(&[1]), 8)
        .with_memory_limit(512 << 10)
        .with_spill_dir(root.path())
        .with_spill_tiers(Some(0), Arc::clone(&overflow))
        .build()
        .unwrap();
    let accepted = write(&buffer, 100);
    read_back(&buffer, &accepted);
    let metrics = buffer.metrics();
    assert_eq!(metrics.bytes_on_disk, 0);
    assert!(metrics.overflow_runs > 0);
    assert_eq!(metrics.spill_runs, 0);
    buffer.close().unwrap();
    assert_eq!(overflow.metrics().files, 0);
}

#[test]
fn a_really_full_local_disk_sends_runs_to_the_object_store() {
    // its own 1 MiB tmpfs (not ARROW_SHARDS_FULL_DISK, which full_disk.rs fills at the same time)
    let disk = match mount_tmpfs("1m") {
        Ok(disk) => disk,
        Err(why) => {
            let message = format!("SKIPPED: ENOSPC tier test: {why}");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
            eprintln!("{message}");
            return;
        }
    };
    let overflow: Arc<dyn SpillStorage> =
        ObjectStoreSpill::create(Arc::new(InMemory::new()), "memory://spill", "enospc").unwrap();
    // 1 MiB of memory, ~12 MiB of data, 1 MiB of disk and no quota: ENOSPC decides
    let buffer = tiered(&disk.path, None, &overflow);
    let accepted = write(&buffer, 500);
    read_back(&buffer, &accepted);
    let metrics = buffer.metrics();
    assert!(metrics.spill_error.is_none(), "{:?}", metrics.spill_error);
    assert!(metrics.overflow_runs > 0, "{metrics:?}");
    buffer.close().unwrap();
    assert_eq!(entries(&disk.path), Vec::<std::path::PathBuf>::new());
    assert_eq!(overflow.metrics().files, 0);
}
