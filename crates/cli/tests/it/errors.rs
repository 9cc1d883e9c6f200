//! Each failure: exit status 1 (2 for usage errors), one line on stderr that names the thing,
//! no backtrace, and no output left that looks complete.

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};

use crate::util::{arrow_shards, fixture, lineitem, listing, write_parquet};

/// Runs `arrow-shards shuffle <args>`, expects exit status `code`, and returns stderr, checked
/// to be one line (two for clap's usage errors) without a panic.
fn fails(args: &[&str], code: i32) -> String {
    let run = arrow_shards()
        .arg("shuffle")
        .args(args)
        .assert()
        .code(code)
        .stdout("");
    let stderr = String::from_utf8(run.get_output().stderr.clone()).unwrap();
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    if code == 1 {
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with("arrow-shards: error: "), "{stderr}");
    }
    stderr
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_missing_input_is_named() {
    let err = fails(
        &["/no/such/input.parquet", "--key", "a", "--partitions", "2"],
        1,
    );
    assert!(
        err.contains("cannot read input /no/such/input.parquet: No such file"),
        "{err}"
    );
}

#[test]
fn not_parquet_is_named() {
    let input = fixture("not-parquet.parquet");
    let err = fails(&[path(&input), "--key", "a", "--partitions", "2"], 1);
    assert!(
        err.contains("not-parquet.parquet is not a parquet or Arrow IPC file"),
        "{err}"
    );
}

#[test]
fn truncated_parquet_is_named() {
    let input = fixture("truncated.parquet");
    let err = fails(
        &[path(&input), "--key", "l_orderkey", "--partitions", "2"],
        1,
    );
    assert!(
        err.contains("cannot read input") && err.contains("truncated.parquet"),
        "{err}"
    );
}

#[test]
fn an_unknown_key_lists_the_columns() {
    let input = lineitem();
    let err = fails(
        &[
            path(&input),
            "--key",
            "l_orderkey,orderkey",
            "--partitions",
            "2",
        ],
        1,
    );
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
    let err = fails(&[path(&input), "--key", "l", "--partitions", "2"], 1);
    assert!(err.contains("key column \"l\" has type List"), "{err}");
    assert!(err.contains("cannot be a key"), "{err}");
}

#[test]
fn bad_sizes_and_counts_are_usage_errors() {
    let input = lineitem();
    let err = fails(
        &[
            path(&input),
            "--key",
            "l_orderkey",
            "--partitions",
            "2",
            "--memory-limit",
            "12XB",
        ],
        2,
    );
    assert!(
        err.contains("invalid value '12XB' for '--memory-limit <SIZE>'"),
        "{err}"
    );
    fails(
        &[
            path(&input),
            "--key",
            "l_orderkey",
            "--partitions",
            "2",
            "--memory-limit",
            "0",
        ],
        2,
    );
    fails(
        &[path(&input), "--key", "l_orderkey", "--partitions", "0"],
        2,
    );
    fails(&[path(&input), "--partitions", "2"], 2);
    fails(
        &[
            path(&input),
            "--key",
            "l_orderkey",
            "--partitions",
            "2",
            "--no-spill",
            "--spill-dir",
            "/tmp",
        ],
        2,
    );
}

#[test]
fn an_unwritable_output_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("out");
    let input = lineitem();
    let err = fails(
        &[
            path(&input),
            "--key",
            "l_orderkey",
            "--partitions",
            "2",
            "--output",
            path(&out),
        ],
        1,
    );
    assert!(
        err.contains(&format!("cannot write {}", out.display())),
        "{err}"
    );
}

#[test]
fn an_unusable_spill_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let spill = file.join("spill");
    let input = lineitem();
    let err = fails(
        &[
            path(&input),
            "--key",
            "l_orderkey",
            "--partitions",
            "2",
            "--spill-dir",
            path(&spill),
        ],
        1,
    );
    assert!(
        err.contains(&format!("cannot use spill directory {}", spill.display())),
        "{err}"
    );
}

#[test]
fn an_empty_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("readme.txt"), "no data here").unwrap();
    let err = fails(&[path(dir.path()), "--key", "a", "--partitions", "2"], 1);
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
    let err = fails(&[path(&a), path(&b), "--key", "k", "--partitions", "2"], 1);
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
    let input = lineitem();
    let err = fails(
        &[
            path(&input),
            "--key",
            "l_orderkey",
            "--partitions",
            "4",
            "--memory-limit",
            "64KiB",
            "--no-spill",
            "--output",
            path(&out),
        ],
        1,
    );
    assert!(err.contains("memory"), "{err}");
    assert!(listing(&out).is_empty(), "left behind: {:?}", listing(&out));
}
