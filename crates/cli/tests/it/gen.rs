//! `arrow-shards gen`: deterministic test tables.
//!
//! lineitem: tpchgen is slow in a debug build (it builds its text pool first), so this runs it
//! once and pins what it must produce rather than generating twice and comparing. all-types:
//! pinned figures, its 13 column types, and its row groups.

use std::collections::HashSet;
use std::fs::File;
use std::path::Path;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type};
use arrow_schema::{DataType, Field, TimeUnit};
use arrow_select::concat::concat_batches;
use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::util::{arrow_shards, gen_all_types, listing, read_parquet, rows};

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

/// The row count of each row group of a parquet file.
fn row_groups(file: &Path) -> Vec<i64> {
    let reader = SerializedFileReader::new(File::open(file).unwrap()).unwrap();
    reader
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows())
        .collect()
}

/// The 13 columns `gen all-types` promises, in order.
fn all_types_columns() -> Vec<(&'static str, DataType)> {
    let item = Field::new_list_field(DataType::Int32, true);
    let struct_fields = vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ];
    vec![
        ("id", DataType::Int64),
        ("k", DataType::Int64),
        ("s", DataType::Utf8),
        (
            "dict",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
        ),
        ("list", DataType::List(item.into())),
        ("struct", DataType::Struct(struct_fields.into())),
        ("dec", DataType::Decimal128(18, 2)),
        (
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ),
        ("large", DataType::LargeUtf8),
        ("bin", DataType::Binary),
        ("f", DataType::Float64),
        ("flag", DataType::Boolean),
        ("date", DataType::Date32),
    ]
}

// Figures of the default 100,000 rows, pinned: the generator is seeded.
/// Nulls in `k`.
const PINNED_K_NULLS: usize = 5_075;
/// Sum of the non-null `k`.
const PINNED_K_SUM: i64 = 2_374_315_009;
/// Distinct non-null `k`.
const PINNED_K_DISTINCT: usize = 42_521;
/// NaN in `f`.
const PINNED_F_NANS: usize = 966;
/// Bytes of all `large` strings.
const PINNED_LARGE_BYTES: usize = 15_008_997;

#[test]
fn gen_all_types_writes_13_typed_columns_in_row_groups_of_14300() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("all-types.parquet");
    // the default size is 100,000 rows
    arrow_shards()
        .args(["gen", "all-types", "--output"])
        .arg(&file)
        .assert()
        .success()
        .stdout(predicates::str::contains("wrote 100000 rows to"));
    assert_eq!(
        row_groups(&file),
        [14_300, 14_300, 14_300, 14_300, 14_300, 14_300, 14_200]
    );

    let (schema, batches) = read_parquet(&file);
    let columns: Vec<(&str, DataType)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f.data_type().clone()))
        .collect();
    assert_eq!(
        columns,
        all_types_columns(),
        "dictionary must come back as one"
    );
    assert_eq!(rows(&batches), 100_000);
    let table = concat_batches(&schema, &batches).unwrap();
    let int64 = |name: &str| {
        table
            .column_by_name(name)
            .unwrap()
            .as_primitive::<Int64Type>()
            .clone()
    };

    let ids = int64("id");
    assert_eq!(ids.null_count(), 0);
    assert!(
        ids.values().iter().copied().eq(0..100_000),
        "id is 0..N in order"
    );

    let k = int64("k");
    let k_sum: i64 = k.iter().flatten().sum();
    let k_distinct: HashSet<i64> = k.iter().flatten().collect();
    assert_eq!(
        (k.null_count(), k_sum, k_distinct.len()),
        (PINNED_K_NULLS, PINNED_K_SUM, PINNED_K_DISTINCT)
    );
    let f = table
        .column_by_name("f")
        .unwrap()
        .as_primitive::<Float64Type>();
    let nans = f.iter().flatten().filter(|v| v.is_nan()).count();
    let dict = table
        .column_by_name("dict")
        .unwrap()
        .as_dictionary::<Int32Type>();
    let used: HashSet<&str> = dict
        .downcast_dict::<arrow_array::StringArray>()
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(used.len(), 50);
    let large = table.column_by_name("large").unwrap().as_string::<i64>();
    let large_bytes: usize = large.iter().flatten().map(str::len).sum();
    assert_eq!((nans, large_bytes), (PINNED_F_NANS, PINNED_LARGE_BYTES));

    // fewer rows are a prefix of more, still cut into row groups of 14,300
    let small = dir.path().join("small.parquet");
    gen_all_types(&small, 20_000);
    assert_eq!(row_groups(&small), [14_300, 5_700]);
    let (small_schema, small_batches) = read_parquet(&small);
    let small_table = concat_batches(&small_schema, &small_batches).unwrap();
    assert_eq!(small_table, table.slice(0, 20_000));

    // only the finished files are left, no temporary
    assert_eq!(listing(dir.path()), ["all-types.parquet", "small.parquet"]);
}

/// Runs `gen` with `flags` and expects a usage error (status 2) whose message holds `says`,
/// and no file.
fn gen_refuses(flags: &str, says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("never.parquet");
    let run = arrow_shards()
        .arg("gen")
        .args(flags.split_whitespace())
        .arg("--output")
        .arg(&file)
        .assert()
        .code(2)
        .stdout("");
    let stderr = String::from_utf8_lossy(&run.get_output().stderr).into_owned();
    assert!(stderr.contains(says), "{flags}: {stderr}");
    assert!(listing(dir.path()).is_empty(), "{flags} left a file");
}

#[test]
fn gen_sizes_belong_to_their_table() {
    gen_refuses("lineitem", "`gen lineitem` needs --scale SF");
    gen_refuses(
        "lineitem --scale 1 --rows 10",
        "--rows applies to `gen all-types` only",
    );
    gen_refuses(
        "all-types --scale 1",
        "--scale applies to `gen lineitem` only",
    );
    gen_refuses(
        "all-types --rows 1000 --scale 0.1",
        "--scale applies to `gen lineitem` only",
    );
    gen_refuses("all-types --rows 0", "--rows");
}
