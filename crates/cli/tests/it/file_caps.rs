//! `--max-rows-per-file` and `--max-bytes-per-file`: a partition spans several files, named in
//! order, every row in exactly one of them, each cap as documented (crates/cli/src/part_files.rs).

use std::collections::BTreeMap;
use std::path::Path;

use arrow_array::RecordBatch;

use crate::util::{
    column_names, lineitem, listing, read_arrow_file, read_parquet, row_multiset, rows, shuffle,
};

/// The files of `dir` by partition, each partition's in file order: (file number, size in
/// bytes, batches). Every visible name must be `part-PPPPP-FFFF.<ext>` and the file numbers of
/// a partition must run 0, 1, 2 ... without a gap.
type Files = BTreeMap<u32, Vec<(u64, Vec<RecordBatch>)>>;

fn files(dir: &Path, ext: &str) -> Files {
    let mut found: BTreeMap<u32, BTreeMap<u32, (u64, Vec<RecordBatch>)>> = BTreeMap::new();
    for name in listing(dir) {
        let stem = name
            .strip_prefix("part-")
            .and_then(|r| r.strip_suffix(&format!(".{ext}")))
            .unwrap_or_else(|| panic!("unexpected file {name}"));
        let (p, f) = stem
            .split_once('-')
            .unwrap_or_else(|| panic!("no file number: {name}"));
        assert_eq!((p.len(), f.len()), (5, 4), "{name}");
        let path = dir.join(&name);
        let batches = match ext {
            "parquet" => read_parquet(&path).1,
            _ => read_arrow_file(&path).1,
        };
        let size = std::fs::metadata(&path).unwrap().len();
        found
            .entry(p.parse().unwrap())
            .or_default()
            .insert(f.parse().unwrap(), (size, batches));
    }
    found
        .into_iter()
        .map(|(p, files)| {
            let numbers: Vec<u32> = files.keys().copied().collect();
            assert_eq!(
                numbers,
                (0..numbers.len() as u32).collect::<Vec<_>>(),
                "partition {p}"
            );
            (p, files.into_values().collect())
        })
        .collect()
}

/// Shuffles the fixture into 4 partitions with `flags` into a new directory.
fn shuffled(flags: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    shuffle(
        &[lineitem()],
        &format!("--key l_orderkey --partitions 4 --quiet --verify {flags} --output"),
    )
    .arg(dir.path())
    .assert()
    .success();
    dir
}

/// Every row of the input is in exactly one file.
fn assert_all_rows_once(files: &Files) {
    let (schema, input) = read_parquet(&lineitem());
    let names = column_names(&schema);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let out: Vec<RecordBatch> = files
        .values()
        .flatten()
        .flat_map(|(_, b)| b.iter().cloned())
        .collect();
    assert_eq!(row_multiset(&out, &refs), row_multiset(&input, &refs));
}

#[test]
fn a_rows_cap_fills_every_file_but_the_last() {
    for format in ["parquet", "arrow"] {
        let dir = shuffled(&format!("--max-rows-per-file 4000 --format {format}"));
        let files = files(dir.path(), format);
        assert_eq!(files.len(), 4);
        for (p, list) in &files {
            let counts: Vec<usize> = list.iter().map(|(_, b)| rows(b)).collect();
            let (last, full) = counts.split_last().unwrap();
            assert!(full.iter().all(|&n| n == 4000), "partition {p}: {counts:?}");
            assert!((1..=4000).contains(last), "partition {p}: {counts:?}");
            assert!(
                counts.len() >= 3,
                "partition {p} should span files: {counts:?}"
            );
        }
        assert_all_rows_once(&files);
    }
}

#[test]
fn a_bytes_cap_closes_each_file_once_it_reaches_the_cap() {
    const CAP: u64 = 100 * 1024;
    // Arrow IPC counts the bytes it wrote exactly: every file but a partition's last reached
    // the cap, and passed it by less than 1,024 rows' worth plus the footer.
    let dir = shuffled(&format!("--max-bytes-per-file {CAP} --format arrow"));
    let ipc = files(dir.path(), "arrow");
    for (p, list) in &ipc {
        assert!(list.len() >= 2, "partition {p} should span files");
        for (i, (size, batches)) in list.iter().enumerate() {
            let per_row = size / rows(batches).max(1) as u64;
            if i + 1 < list.len() {
                assert!(*size >= CAP, "partition {p} file {i}: {size} bytes");
            }
            assert!(
                *size <= CAP + 1024 * per_row + 16 * 1024,
                "partition {p} file {i}: {size} bytes"
            );
        }
    }
    assert_all_rows_once(&ipc);

    // parquet: the size is an estimate until the file is complete; uncompressed, files end
    // near the cap and never far past it
    let dir = shuffled(&format!("--max-bytes-per-file {CAP} --compression none"));
    let parquet = files(dir.path(), "parquet");
    for (p, list) in &parquet {
        assert!(list.len() >= 2, "partition {p} should span files");
        for (i, (size, batches)) in list.iter().enumerate() {
            let per_row = size / rows(batches).max(1) as u64;
            if i + 1 < list.len() {
                assert!(*size >= CAP / 2, "partition {p} file {i}: {size} bytes");
            }
            assert!(
                *size <= CAP + 1024 * per_row + 16 * 1024,
                "partition {p} file {i}: {size} bytes"
            );
        }
    }
    assert_all_rows_once(&parquet);
}

#[test]
fn both_caps_and_hive_directories_together() {
    let dir = tempfile::tempdir().unwrap();
    shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 2 --quiet --layout hive --max-rows-per-file 10000 \
         --max-bytes-per-file 10MiB --output",
    )
    .arg(dir.path())
    .assert()
    .success();
    assert_eq!(listing(dir.path()), ["partition=0", "partition=1"]);
    let mut total = 0;
    for p in 0..2 {
        let sub = dir.path().join(format!("partition={p}"));
        let names = listing(&sub);
        let expected: Vec<String> = (0..names.len())
            .map(|i| format!("part-{i:04}.parquet"))
            .collect();
        assert_eq!(names, expected);
        for (i, name) in names.iter().enumerate() {
            let n = rows(&read_parquet(&sub.join(name)).1);
            assert!(n == 10_000 || i + 1 == names.len(), "{p}/{name}: {n}");
            total += n;
        }
    }
    assert_eq!(total, 60_175);
}

#[test]
fn zero_caps_are_refused() {
    for (flag, message) in [
        ("--max-rows-per-file 0", "0 is not in 1.."),
        (
            "--max-bytes-per-file 0",
            "the size must be greater than zero",
        ),
        ("--max-bytes-per-file lots", "not a size"),
    ] {
        let assert = shuffle(
            &[lineitem()],
            &format!("--key l_orderkey --partitions 2 {flag}"),
        )
        .assert()
        .code(2);
        let err = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert!(err.contains(message), "{flag}: {err}");
    }
}
