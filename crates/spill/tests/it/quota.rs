//! A spill directory with a byte quota, and runs written through `dyn SpillStorage`.

use std::sync::Arc;

use arrow_shards_spill::{SpillDir, SpillError, SpillOptions, SpillStorage, run_writer};

use crate::common::{ints_and_strings, spill_one};

#[test]
fn a_run_past_the_quota_is_disk_full_and_leaves_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create_with_quota(root.path(), Some(64 * 1024)).unwrap();
    assert_eq!(dir.quota(), Some(64 * 1024));
    let small = ints_and_strings(0, 100);
    let kept = spill_one(&dir, &small);
    let before = dir.metrics();

    let large = ints_and_strings(0, 100_000);
    let mut writer = dir.run_writer(large.schema(), SpillOptions::default());
    let error = writer
        .append(1, std::slice::from_ref(&large))
        .and_then(|()| writer.finish().map(drop))
        .unwrap_err();
    assert!(
        matches!(&error, SpillError::DiskFull { dir: d, .. } if d == dir.path()),
        "{error}"
    );
    assert!(error.to_string().contains("quota"), "{error}");
    // the failed run's file is gone; the earlier run is intact
    assert_eq!(dir.metrics().files, before.files);
    assert_eq!(dir.metrics().bytes_on_disk, before.bytes_on_disk);
    assert_eq!(kept[0].read().unwrap(), vec![small]);
}

#[test]
fn a_quota_of_zero_refuses_every_run() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create_with_quota(root.path(), Some(0)).unwrap();
    let batch = ints_and_strings(0, 10);
    let mut writer = dir.run_writer(batch.schema(), SpillOptions::default());
    let result = writer
        .append(0, std::slice::from_ref(&batch))
        .and_then(|()| writer.finish().map(drop));
    assert!(matches!(result, Err(SpillError::DiskFull { .. })));
    assert_eq!(dir.metrics().files, 0);
}

#[test]
fn runs_are_written_and_read_through_the_storage_trait() {
    let root = tempfile::tempdir().unwrap();
    let storage: Arc<dyn SpillStorage> = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 1000);
    let mut writer = run_writer(&storage, batch.schema(), SpillOptions::default());
    writer.append(3, std::slice::from_ref(&batch)).unwrap();
    let segments = writer.finish().unwrap();
    assert_eq!(segments[0].read().unwrap(), vec![batch]);
    assert_eq!(storage.metrics().segments_read, 1);
    drop(segments);
    assert_eq!(storage.metrics().files, 0);
    storage.close().unwrap();
    assert!(storage.is_closed());
    assert!(!storage.location().exists());
}
