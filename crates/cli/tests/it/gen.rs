//! `arrow-shards gen lineitem`: deterministic TPC-H data.
//!
//! tpchgen is slow in a debug build (it builds its text pool first), so this runs it once and
//! pins what it must produce rather than generating twice and comparing.

use std::collections::HashSet;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;

use crate::util::{arrow_shards, read_parquet, rows};

#[test]
fn gen_writes_the_same_lineitem_rows_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lineitem.parquet");
    arrow_shards()
        .args(["gen", "lineitem", "--scale", "0.001", "--output"])
        .arg(&file)
        .assert()
        .success()
        .stdout(predicates::str::contains("wrote 6005 rows to"));
    let (schema, batches) = read_parquet(&file);
    assert_eq!(rows(&batches), 6005);
    assert_eq!(schema.fields().len(), 16);
    assert_eq!(schema.field(0).name(), "l_orderkey");
    let column = |name: &str| -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                b.column_by_name(name)
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect()
    };
    let orders: HashSet<i64> = column("l_orderkey").into_iter().collect();
    assert_eq!(orders.len(), 1500, "SF 0.001 has 1,500 orders");
    let partkey_sum: i64 = column("l_partkey").iter().sum();
    assert_eq!(
        partkey_sum, 615_388,
        "pinned: the generator is deterministic"
    );
    // only the finished file is left, no temporary
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["lineitem.parquet"]);
}

#[test]
fn gen_refuses_a_bad_scale() {
    arrow_shards()
        .args([
            "gen",
            "lineitem",
            "--scale",
            "-1",
            "--output",
            "/tmp/never.parquet",
        ])
        .assert()
        .code(2);
}
