//! `--layout hive`: one `partition=P` directory per partition, read back as input with the
//! partition as a column; and what a run leaves of an earlier run's files in either layout.

use std::path::Path;

use arrow_array::{Array, RecordBatch, StringArray};

use crate::util::{
    column_names, lineitem, listing, read_parquet, read_parts, row_multiset, shuffle,
};

/// The fixture's rows over all of its columns, and the column names.
fn input_rows() -> (Vec<String>, Vec<Vec<u8>>) {
    let (schema, batches) = read_parquet(&lineitem());
    let names = column_names(&schema);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let rows = row_multiset(&batches, &refs);
    (names, rows)
}

/// Runs a shuffle of the fixture into `out` with `flags`, expecting success.
fn run_into(out: &Path, flags: &str) {
    shuffle(
        &[lineitem()],
        &format!("--key l_orderkey --quiet {flags} --output"),
    )
    .arg(out)
    .assert()
    .success();
}

/// Each batch with a Utf8 column `partition` of value `p` added.
fn with_partition(batches: &[RecordBatch], p: u32) -> Vec<RecordBatch> {
    batches
        .iter()
        .map(|b| {
            let mut columns = b.columns().to_vec();
            let values = StringArray::from(vec![p.to_string(); b.num_rows()]);
            columns.push(std::sync::Arc::new(values));
            let mut fields: Vec<_> = b.schema().fields().iter().cloned().collect();
            fields.push(std::sync::Arc::new(arrow_schema::Field::new(
                "partition",
                arrow_schema::DataType::Utf8,
                true,
            )));
            let schema = std::sync::Arc::new(arrow_schema::Schema::new(fields));
            RecordBatch::try_new(schema, columns).unwrap()
        })
        .collect()
}

#[test]
fn hive_output_reads_back_with_every_row_and_its_partition() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    run_into(&out, "--partitions 4 --layout hive");
    let dirs: Vec<String> = (0..4).map(|p| format!("partition={p}")).collect();
    assert_eq!(listing(&out), dirs);

    // every row once, each in the directory of its hash partition (the flat layout's file)
    let flat = dir.path().join("flat");
    run_into(&flat, "--partitions 4");
    let flat_parts = read_parts(&flat, "parquet");
    let (names, input) = input_rows();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut tagged = Vec::new();
    let mut all = Vec::new();
    for p in 0..4u32 {
        let sub = out.join(format!("partition={p}"));
        assert_eq!(listing(&sub), ["part-0000.parquet"]);
        let (_, batches) = read_parquet(&sub.join("part-0000.parquet"));
        assert_eq!(
            row_multiset(&batches, &refs),
            row_multiset(&flat_parts[&p].1, &refs),
            "partition {p}"
        );
        all.extend(batches.iter().cloned());
        tagged.extend(with_partition(&batches, p));
    }
    assert_eq!(row_multiset(&all, &refs), input);

    // the directory as input: the partition comes back as a Utf8 column
    let back = dir.path().join("back");
    shuffle(
        &[&out],
        "--key l_orderkey --partitions 1 --quiet --verify --output",
    )
    .arg(&back)
    .assert()
    .success();
    let (schema, batches) = read_parquet(&back.join("part-00000.parquet"));
    let mut expected_names = names.clone();
    expected_names.push("partition".to_owned());
    assert_eq!(column_names(&schema), expected_names);
    let partitions = batches[0]
        .column_by_name("partition")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .map(|a| a.null_count());
    assert_eq!(partitions, Some(0));
    let mut with_key = refs.clone();
    with_key.push("partition");
    assert_eq!(
        row_multiset(&batches, &with_key),
        row_multiset(&tagged, &with_key)
    );
}

#[test]
fn empty_partitions_get_a_directory_with_an_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("one.parquet");
    let batch = RecordBatch::try_from_iter([(
        "k",
        std::sync::Arc::new(arrow_array::Int64Array::from(vec![7, 7, 7])) as _,
    )])
    .unwrap();
    crate::util::write_parquet(&input, &[batch]);
    let out = dir.path().join("out");
    shuffle(
        &[&input],
        "--key k --partitions 3 --layout hive --hive-key bucket --quiet --output",
    )
    .arg(&out)
    .assert()
    .success();
    assert_eq!(listing(&out), ["bucket=0", "bucket=1", "bucket=2"]);
    let rows: Vec<usize> = (0..3)
        .map(|p| {
            let (_, batches) = read_parquet(&out.join(format!("bucket={p}/part-0000.parquet")));
            crate::util::rows(&batches)
        })
        .collect();
    assert_eq!(rows.iter().sum::<usize>(), 3);
    assert_eq!(rows.iter().filter(|&&n| n == 0).count(), 2, "{rows:?}");
}

#[test]
fn a_run_replaces_an_earlier_runs_files_in_either_layout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "kept").unwrap();
    run_into(&out, "--partitions 3");
    run_into(&out, "--partitions 2 --layout hive");
    assert_eq!(listing(&out), ["notes.txt", "partition=0", "partition=1"]);
    run_into(&out, "--partitions 2 --max-rows-per-file 20000");
    let names = listing(&out);
    assert!(
        names
            .iter()
            .all(|n| n == "notes.txt" || n.starts_with("part-0000")),
        "{names:?}"
    );
    assert!(
        names.contains(&"part-00000-0000.parquet".to_owned()),
        "{names:?}"
    );
    run_into(&out, "--partitions 2");
    assert_eq!(
        listing(&out),
        ["notes.txt", "part-00000.parquet", "part-00001.parquet"]
    );
}

#[test]
fn a_hive_key_that_is_a_column_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let assert = shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 2 --layout hive --hive-key l_partkey --output",
    )
    .arg(dir.path().join("out"))
    .assert()
    .code(1);
    let err = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
    assert!(
        err.contains("the hive key \"l_partkey\" is a column of the input"),
        "{err}"
    );
    let usage = shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 2 --layout hive --hive-key a=b",
    )
    .assert()
    .code(2);
    let err = String::from_utf8_lossy(&usage.get_output().stderr).into_owned();
    assert!(err.contains("the hive key must not hold '='"), "{err}");
}
