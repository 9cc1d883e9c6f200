//! `--sort-by`: each partition's rows in key order (across its files too), every row once,
//! in memory and, past the budget, through sorted runs merged from disk.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::SortOptions;

use crate::util::{
    column_names, json, lineitem, listing, read_parquet, row_multiset, rows, shuffle, write_parquet,
};

/// `(column, descending)` pairs, nulls last.
type Key<'a> = &'a [(&'a str, bool)];

/// Panics unless the rows of `batches`, taken in order, are ordered by `key`.
fn assert_sorted(batches: &[RecordBatch], key: Key<'_>, what: &str) {
    let Some(first) = batches.first() else { return };
    let schema = first.schema();
    let fields = key
        .iter()
        .map(|(name, descending)| {
            let options = SortOptions {
                descending: *descending,
                nulls_first: false,
            };
            let field = schema.field_with_name(name).unwrap();
            SortField::new_with_options(field.data_type().clone(), options)
        })
        .collect();
    let converter = RowConverter::new(fields).unwrap();
    let mut previous: Option<Vec<u8>> = None;
    let mut index = 0;
    for batch in batches {
        let columns: Vec<_> = key
            .iter()
            .map(|(name, _)| batch.column_by_name(name).unwrap().clone())
            .collect();
        for row in converter.convert_columns(&columns).unwrap().iter() {
            let row = row.as_ref().to_vec();
            if let Some(previous) = &previous {
                assert!(previous <= &row, "{what}: row {index} is out of order");
            }
            previous = Some(row);
            index += 1;
        }
    }
}

/// Every partition's rows, its files read in name order, by partition: `part-PPPPP[-FFFF]`.
fn partitions(dir: &Path, partitions: u32) -> Vec<Vec<RecordBatch>> {
    let names = listing(dir);
    (0..partitions)
        .map(|p| {
            let prefix = format!("part-{p:05}");
            names
                .iter()
                .filter(|n| n.starts_with(&prefix))
                .flat_map(|n| read_parquet(&dir.join(n)).1)
                .collect()
        })
        .collect()
}

/// Every row of the fixture is in `parts`, once.
fn assert_all_rows_once(parts: &[Vec<RecordBatch>]) {
    let (schema, input) = read_parquet(&lineitem());
    let names = column_names(&schema);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let out: Vec<RecordBatch> = parts.iter().flatten().cloned().collect();
    assert_eq!(row_multiset(&out, &refs), row_multiset(&input, &refs));
}

#[test]
fn each_partition_is_sorted_across_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let output = shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 3 --sort-by l_partkey:desc,l_suppkey \
         --max-rows-per-file 7000 --verify --json --output",
    )
    .arg(dir.path())
    .assert()
    .success();
    let report = json(&output.get_output().stdout);
    assert_eq!(report["sort_runs"], 0, "no limit: sorted in memory");
    assert_eq!(
        report["sort_by"],
        "l_partkey:desc:nulls_last,l_suppkey:asc:nulls_last"
    );
    let parts = partitions(dir.path(), 3);
    for (p, batches) in parts.iter().enumerate() {
        assert!(rows(batches) > 14_000);
        assert_sorted(
            batches,
            &[("l_partkey", true), ("l_suppkey", false)],
            &format!("partition {p}"),
        );
    }
    assert_all_rows_once(&parts);
}

#[test]
fn a_partition_past_the_budget_is_sorted_in_runs_merged_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let spill = tempfile::tempdir().unwrap();
    let output = shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 2 --memory-limit 4MiB --sort-by l_shipdate,l_orderkey:desc \
         --threads 2 --verify --json --spill-dir",
    )
    .arg(spill.path())
    .arg("--output")
    .arg(dir.path())
    .assert()
    .success();
    let report = json(&output.get_output().stdout);
    let runs = report["sort_runs"].as_u64().unwrap();
    assert!(runs > 2, "each partition should need runs: {report}");
    assert!(
        report["peak_reserved"].as_u64().unwrap() <= 4 << 20,
        "{report}"
    );
    let parts = partitions(dir.path(), 2);
    for (p, batches) in parts.iter().enumerate() {
        assert_sorted(
            batches,
            &[("l_shipdate", false), ("l_orderkey", true)],
            &format!("partition {p}"),
        );
    }
    assert_all_rows_once(&parts);
    assert!(
        listing(spill.path()).is_empty(),
        "left: {:?}",
        listing(spill.path())
    );
}

#[test]
fn nulls_go_last_unless_asked_first() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    let values = Int64Array::from(vec![Some(3), None, Some(1), None, Some(2)]);
    let batch = RecordBatch::try_from_iter([("k", Arc::new(values) as _)]).unwrap();
    write_parquet(&input, &[batch]);
    for (modifiers, expected) in [
        ("", vec![Some(1), Some(2), Some(3), None, None]),
        (":nulls_first", vec![None, None, Some(1), Some(2), Some(3)]),
        (":desc", vec![Some(3), Some(2), Some(1), None, None]),
        (
            ":desc:nulls_first",
            vec![None, None, Some(3), Some(2), Some(1)],
        ),
    ] {
        let out = dir.path().join(format!("out{modifiers}"));
        shuffle(
            &[&input],
            &format!("--key k --partitions 1 --quiet --sort-by k{modifiers} --output"),
        )
        .arg(&out)
        .assert()
        .success();
        let (_, batches) = read_parquet(&out.join("part-00000.parquet"));
        let got: Vec<Option<i64>> = batches
            .iter()
            .flat_map(|b| {
                let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                (0..k.len())
                    .map(|i| k.is_valid(i).then(|| k.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(got, expected, "--sort-by k{modifiers}");
    }
}

#[test]
fn bad_sort_columns_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let assert = shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 2 --sort-by l_partkey,nope --output",
    )
    .arg(&out)
    .assert()
    .code(1);
    let err = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
    assert!(
        err.contains("unknown --sort-by column \"nope\"; the input has columns: l_orderkey"),
        "{err}"
    );
    assert!(!out.exists(), "checked before the output directory is made");
    for (flag, message) in [
        ("l_partkey:up", "unknown sort modifier \"up\""),
        (":desc", "names no column"),
    ] {
        let assert = shuffle(
            &[lineitem()],
            &format!("--key l_orderkey --partitions 2 --sort-by {flag}"),
        )
        .assert()
        .code(2);
        let err = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert!(err.contains(message), "{flag}: {err}");
    }
}
