//! Spare output threads encode the parquet columns of the partitions still being written
//! (issue #44, item 3): with fewer partitions than `--threads`, a run's files hold the same
//! bytes as a one-thread run's when the row order is fixed (`--sort-by` a unique key; the
//! plain columns fixed with `--dictionary-distinct-ratio 1`, as the sampled input batch
//! differs between thread counts), and the same rows within the memory limit when the output
//! is written while the input is read. `--json`'s `encode_steps_helped` shows the helpers ran.

use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::util::{gen_all_types, json, lineitem, read_parquet, read_parts, row_multiset, shuffle};

/// Shuffles `input` with `flags` and `--threads threads` into a new directory under `dir`;
/// the output directory and the `--json` report.
fn run(input: &Path, flags: &str, threads: u32, dir: &Path) -> (PathBuf, serde_json::Value) {
    let out = dir.join(format!("out-{threads}"));
    let done = shuffle(
        &[input],
        &format!("{flags} --threads {threads} --json --quiet --output"),
    )
    .arg(&out)
    .assert()
    .success();
    let report = json(&done.get_output().stdout);
    (out, report)
}

/// The bytes of every file in `dir`, by name.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// Checks that `input` shuffled with `flags` on 4 threads gives the same files, byte for byte,
/// as on 1 thread, and that helpers ran only on 4.
fn same_bytes_as_one_thread(input: &Path, flags: &str, dir: &Path) {
    let (serial, serial_report) = run(input, flags, 1, dir);
    let (parallel, parallel_report) = run(input, flags, 4, dir);
    assert_eq!(serial_report["encode_steps_helped"], 0, "{flags}");
    assert!(
        parallel_report["encode_steps_helped"].as_u64().unwrap() > 0,
        "{flags}: {parallel_report}"
    );
    let (serial, parallel) = (files(&serial), files(&parallel));
    assert!(!serial.is_empty());
    assert_eq!(
        serial.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        parallel.iter().map(|(name, _)| name).collect::<Vec<_>>()
    );
    for ((name, a), (_, b)) in serial.iter().zip(&parallel) {
        assert!(a == b, "{flags}: {name} differs");
    }
}

/// The lineitem fixture into 1 partition, and `gen all-types` (a dictionary, a list, a struct,
/// nulls) into 2, each in several row groups: 3 and 2 of the 4 threads are spare.
#[test]
fn files_are_the_same_bytes_as_with_one_thread() {
    let dir = tempfile::tempdir().unwrap();
    same_bytes_as_one_thread(
        &lineitem(),
        "--key l_orderkey --partitions 1 --sort-by l_orderkey,l_linenumber \
         --row-group-rows 25000 --dictionary-distinct-ratio 1",
        dir.path(),
    );
    let all_types = dir.path().join("all-types.parquet");
    gen_all_types(&all_types, 30_000);
    let dir = tempfile::tempdir().unwrap();
    same_bytes_as_one_thread(
        &all_types,
        "--key k --partitions 2 --sort-by id --row-group-rows 7000 \
         --dictionary-distinct-ratio 1 --compression zstd",
        dir.path(),
    );
}

/// Written while the input is read, under a memory limit that cuts row groups early (here 4
/// cuts, and some of the input spilled): every input row once, the pool's peak within the
/// limit, helpers used.
#[test]
fn streamed_files_hold_every_row_within_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("all-types.parquet");
    gen_all_types(&input, 40_000);
    let (out, report) = run(
        &input,
        "--key k --partitions 1 --memory-limit 12MiB",
        2,
        dir.path(),
    );
    assert!(
        report["encode_steps_helped"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert!(
        report["rows_out_during_input"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert!(
        report["peak_reserved"].as_u64().unwrap() <= 12 << 20,
        "{report}"
    );
    let (_, expected) = read_parquet(&input);
    let parts = read_parts(&out, "parquet");
    let (_, written) = &parts[&0];
    let columns: Vec<String> = expected[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    assert!(row_multiset(written, &columns) == row_multiset(&expected, &columns));
    // without a limit, one row group of 40,000 rows: more are cuts under the limit
    let file = std::fs::File::open(out.join("part-00000.parquet")).unwrap();
    let groups = SerializedFileReader::new(file)
        .unwrap()
        .metadata()
        .num_row_groups();
    assert!(groups >= 2, "{groups} row groups: {report}");
}
