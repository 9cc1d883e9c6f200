//! Injected filesystem failures: a failed write registers nothing, removes its files and
//! leaves the caller's batches alone; a full disk is `DiskFull`.

use std::io;

use arrow_array::RecordBatch;
use arrow_shards_spill::{FaultPlan, FsOp, SpillDir, SpillError, SpillOptions};

use crate::common::{ints_and_strings, spill_one};

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

fn run_files(dir: &SpillDir) -> Vec<String> {
    std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".run"))
        .collect()
}

fn batches() -> Vec<RecordBatch> {
    (0..4)
        .map(|i| ints_and_strings(i * 10_000, 10_000))
        .collect()
}

#[test]
fn a_full_disk_mid_segment_fails_the_run_and_removes_its_files() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let input = batches();
    let copy = input.clone();
    let mut writer = dir.run_writer(
        input[0].schema(),
        SpillOptions::default().with_coalesce_rows(0),
    );
    writer.append(0, &input).unwrap();
    dir.set_fault_plan(FaultPlan::new().fail_from(FsOp::Write, 2, enospc));
    let error = writer.append(1, &input).unwrap_err();
    match &error {
        SpillError::DiskFull { dir: path, .. } => assert_eq!(path, dir.path()),
        other => panic!("expected DiskFull, got {other}"),
    }
    assert!(
        error
            .to_string()
            .contains(&dir.path().display().to_string())
    );
    // the run is discarded: later appends and finish refuse
    assert!(matches!(
        writer.append(2, &input),
        Err(SpillError::WriterFailed { .. })
    ));
    assert!(matches!(
        writer.finish(),
        Err(SpillError::WriterFailed { .. })
    ));
    assert_eq!(input, copy, "the caller's batches are untouched");
    assert!(run_files(&dir).is_empty());
    let metrics = dir.metrics();
    assert_eq!(
        (
            metrics.files,
            metrics.bytes_on_disk,
            metrics.segments,
            metrics.runs
        ),
        (0, 0, 0, 0)
    );
}

#[test]
fn a_failed_final_flush_registers_no_segment() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 10);
    let mut writer = dir.run_writer(batch.schema(), SpillOptions::default());
    writer.append(0, std::slice::from_ref(&batch)).unwrap();
    writer.append(1, std::slice::from_ref(&batch)).unwrap();
    // small segments sit in the write buffer until finish
    dir.set_fault_plan(
        FaultPlan::new().fail_nth(FsOp::Write, 1, || io::Error::from_raw_os_error(5)),
    );
    let error = writer.finish().unwrap_err();
    assert!(
        matches!(&error, SpillError::Io { path, .. } if path.ends_with("00000000.run")),
        "{error}"
    );
    assert!(run_files(&dir).is_empty());
    assert_eq!(dir.metrics().segments, 0);
}

#[test]
fn a_failed_sync_fails_finish() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 10);
    let mut writer = dir.run_writer(
        batch.schema(),
        SpillOptions::default().with_sync_on_finish(true),
    );
    writer.append(0, std::slice::from_ref(&batch)).unwrap();
    dir.set_fault_plan(
        FaultPlan::new().fail_nth(FsOp::Sync, 1, || io::Error::from_raw_os_error(122)),
    );
    assert!(matches!(writer.finish(), Err(SpillError::DiskFull { .. })));
    assert!(run_files(&dir).is_empty());
    assert_eq!(dir.take_fault_plan().unwrap().count(FsOp::Sync), 1);
}

#[test]
fn a_failed_create_names_the_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    dir.set_fault_plan(
        FaultPlan::new().fail_nth(FsOp::CreateFile, 1, || io::Error::from_raw_os_error(13)),
    );
    let batch = ints_and_strings(0, 10);
    let mut writer = dir.run_writer(batch.schema(), SpillOptions::default());
    let error = writer.append(0, &[batch]).unwrap_err();
    assert!(
        matches!(&error, SpillError::Io { path, .. } if path.starts_with(dir.path())),
        "{error}"
    );
    assert!(error.to_string().contains(".run"), "{error}");
}

#[test]
fn a_read_error_is_io_not_corrupt_and_the_segment_stays_readable() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 10);
    let segments = spill_one(&dir, &batch);
    dir.set_fault_plan(
        // a small segment is read with one positioned read
        FaultPlan::new().fail_nth(FsOp::Read, 1, || io::Error::from_raw_os_error(5)),
    );
    assert!(matches!(segments[0].read(), Err(SpillError::Io { .. })));
    assert_eq!(segments[0].read().unwrap(), vec![batch]);
}
