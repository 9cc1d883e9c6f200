//! Each failure: exit status 1 (2 for usage errors), one line on stderr that names the thing
//! (then its causes, one `caused by:` line each), no backtrace, and no output left that looks
//! complete.

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use assert_cmd::Command;

use crate::util::{fixture, lineitem, listing, shuffle, write_parquet};

/// Runs `command`, expects exit status `code` and nothing on stdout, and returns stderr,
/// checked to hold no panic and, for status 1, to be one `arrow-shards: error: ` line followed
/// only by its causes (`  caused by: ...` lines).
fn fails(command: &mut Command, code: i32) -> String {
    let run = command.assert().code(code).stdout("");
    let stderr = String::from_utf8(run.get_output().stderr.clone()).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    if code == 1 {
        assert!(stderr.starts_with("arrow-shards: error: "), "{stderr}");
        assert!(
            stderr
                .lines()
                .skip(1)
                .all(|l| l.starts_with("  caused by: ")),
            "one error line, then its causes: {stderr}"
        );
    }
    stderr
}

/// A path below a regular file: nothing can be created there.
fn below_a_file(dir: &Path) -> std::path::PathBuf {
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    file.join("sub")
}

#[test]
fn a_missing_input_is_named() {
    let err = fails(
        &mut shuffle(&["/no/such/in.parquet"], "--key a --partitions 2"),
        1,
    );
    let expected = "cannot read input /no/such/in.parquet\n  caused by: No such file";
    assert!(err.contains(expected), "{err}");
}

#[test]
fn not_parquet_is_named() {
    let input = fixture("not-parquet.parquet");
    let err = fails(&mut shuffle(&[input], "--key a --partitions 2"), 1);
    let expected = "not-parquet.parquet is not a parquet or Arrow IPC file";
    assert!(err.contains(expected), "{err}");
}

#[test]
fn truncated_parquet_is_named() {
    let input = fixture("truncated.parquet");
    let err = fails(&mut shuffle(&[input], "--key l_orderkey --partitions 2"), 1);
    assert!(err.contains("cannot read input"), "{err}");
    assert!(err.contains("truncated.parquet"), "{err}");
}

#[test]
fn an_unknown_key_lists_the_columns() {
    let flags = "--key l_orderkey,orderkey --partitions 2";
    let err = fails(&mut shuffle(&[lineitem()], flags), 1);
    assert!(err.contains("unknown key column \"orderkey\""), "{err}");
    assert!(
        err.contains("the input has columns: l_orderkey, l_partkey,"),
        "{err}"
    );
}

#[test]
fn an_unsupported_key_type_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("lists.parquet");
    let mut lists = ListBuilder::new(Int64Builder::new());
    lists.values().append_slice(&[1, 2]);
    lists.append(true);
    let batch = RecordBatch::try_from_iter([("l", Arc::new(lists.finish()) as ArrayRef)]).unwrap();
    write_parquet(&input, &[batch]);
    let err = fails(&mut shuffle(&[input], "--key l --partitions 2"), 1);
    assert!(err.contains("key column \"l\" has type List"), "{err}");
    assert!(err.contains("cannot be a key"), "{err}");
}

#[test]
fn bad_sizes_and_counts_are_usage_errors() {
    let usage = |flags: &str| fails(&mut shuffle(&[lineitem()], flags), 2);
    let err = usage("--key l_orderkey --partitions 2 --memory-limit 12XB");
    assert!(
        err.contains("invalid value '12XB' for '--memory-limit <SIZE>'"),
        "{err}"
    );
    usage("--key l_orderkey --partitions 2 --memory-limit 0");
    usage("--key l_orderkey --partitions 0");
    usage("--partitions 2");
    usage("--key l_orderkey --partitions 2 --no-spill --spill-dir /tmp");
}

#[test]
fn an_unwritable_output_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = below_a_file(dir.path());
    let mut command = shuffle(&[lineitem()], "--key l_orderkey --partitions 2 --output");
    let err = fails(command.arg(&out), 1);
    assert!(
        err.contains(&format!("cannot write {}", out.display())),
        "{err}"
    );
}

#[test]
fn an_unusable_spill_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let spill = below_a_file(dir.path());
    let mut command = shuffle(&[lineitem()], "--key l_orderkey --partitions 2 --spill-dir");
    let err = fails(command.arg(&spill), 1);
    let expected = format!("cannot use spill directory {}", spill.display());
    assert!(err.contains(&expected), "{err}");
}

#[test]
fn an_empty_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("readme.txt"), "no data here").unwrap();
    let err = fails(&mut shuffle(&[dir.path()], "--key a --partitions 2"), 1);
    assert!(err.contains("holds no .parquet"), "{err}");
}

#[test]
fn inputs_with_different_schemas_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
    let ints: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
    let strings: ArrayRef = Arc::new(StringArray::from(vec!["1", "2"]));
    write_parquet(&a, &[RecordBatch::try_from_iter([("k", ints)]).unwrap()]);
    write_parquet(&b, &[RecordBatch::try_from_iter([("k", strings)]).unwrap()]);
    let err = fails(&mut shuffle(&[a, b], "--key k --partitions 2"), 1);
    assert!(
        err.contains("b.parquet has a different schema than"),
        "{err}"
    );
    assert!(
        err.contains("column 0 is k: Utf8 instead of k: Int64"),
        "{err}"
    );
}

/// A run that fails after output files were started leaves neither final nor temporary files.
#[test]
fn a_failed_run_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let flags = "--key l_orderkey --partitions 4 --memory-limit 64KiB --no-spill --output";
    let err = fails(shuffle(&[lineitem()], flags).arg(&out), 1);
    assert!(err.contains("memory exhausted"), "{err}");
    assert!(err.contains("raise the limit or allow spilling"), "{err}");
    assert!(listing(&out).is_empty(), "left behind: {:?}", listing(&out));
}

/// A full disk while writing output: the partition's temporary file is a symlink to
/// `/dev/full`, where every write fails with ENOSPC.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_named_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let temp = out.join(".part-00001.parquet.tmp");
    std::os::unix::fs::symlink("/dev/full", &temp).unwrap();
    let flags = "--key l_orderkey --partitions 2 --threads 1 --output";
    let err = fails(shuffle(&[lineitem()], flags).arg(&out), 1);
    assert!(err.contains("no space left on the disk holding"), "{err}");
    assert!(err.contains(".part-00001.parquet.tmp"), "{err}");
    assert!(listing(&out).is_empty(), "left behind: {:?}", listing(&out));
}
