//! Input formats and awkward keys: Arrow IPC files and streams, directories, nulls, strings in
//! every layout, dictionaries, several key columns.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::StringDictionaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{
    ArrayRef, BooleanArray, Decimal128Array, Int32Array, Int64Array, RecordBatch, StringArray,
    StringViewArray, TimestampMicrosecondArray,
};

use crate::util::{
    json, read_parts, rows, shuffle, write_arrow_file, write_arrow_stream, write_parquet,
};

const ROWS: i64 = 400;

/// The string key of row `id`: 13 values, null every 7th row.
fn s(id: i64) -> Option<String> {
    (id % 7 != 0).then(|| format!("key-{:02}-a-string-longer-than-twelve-bytes", id % 13))
}

/// The integer key of row `id`: 3 values, null every 5th row.
fn n(id: i64) -> Option<i32> {
    (id % 5 != 0).then_some((id % 3) as i32)
}

/// Rows `ids` of a table with an `id` column and the same keys in many types and layouts.
fn table(ids: std::ops::Range<i64>) -> RecordBatch {
    let mut dict = StringDictionaryBuilder::<Int32Type>::new();
    for id in ids.clone().rev() {
        dict.append_option(s(id)); // dictionary built in another order than the rows
    }
    let dict = dict.finish();
    let dict_rows: Vec<i32> = ids.clone().map(|id| (ids.end - 1 - id) as i32).collect();
    let dict = arrow_select::take::take(&dict, &Int32Array::from(dict_rows), None).unwrap();
    RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(ids.clone())) as ArrayRef,
        ),
        (
            "s",
            Arc::new(StringArray::from_iter(ids.clone().map(s))) as _,
        ),
        (
            "v",
            Arc::new(StringViewArray::from_iter(ids.clone().map(s))) as _,
        ),
        ("d", dict),
        (
            "n",
            Arc::new(Int32Array::from_iter(ids.clone().map(n))) as _,
        ),
        (
            "b",
            Arc::new(BooleanArray::from_iter(
                ids.clone().map(|i| Some(i % 2 == 0)),
            )) as _,
        ),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from_iter_values(
                ids.clone().map(|i| i % 11 * 1000),
            )) as _,
        ),
        (
            "dec",
            Arc::new(
                Decimal128Array::from_iter_values(ids.clone().map(|i| i128::from(i % 9) * 100))
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
            ) as _,
        ),
    ])
    .unwrap()
}

/// Shuffles `inputs` on `key` into `partitions` and returns the partition of every row id.
fn assignment(inputs: &[&Path], key: &str, partitions: u32, out: &Path) -> HashMap<i64, u32> {
    let flags = format!("--key {key} --partitions {partitions} --verify --json --output");
    let run = shuffle(inputs, &flags).arg(out).assert().success();
    let report = json(&run.get_output().stdout);
    let mut by_id = HashMap::new();
    for (partition, (_, batches)) in read_parts(out, "parquet") {
        for batch in batches {
            for &id in batch.column(0).as_primitive::<Int64Type>().values() {
                assert!(
                    by_id.insert(id, partition).is_none(),
                    "row {id} came out twice"
                );
            }
        }
    }
    assert_eq!(report["rows_out"].as_u64().unwrap(), by_id.len() as u64);
    by_id
}

/// Checks rows with equal `group` values share a partition; returns group -> partition.
fn grouped<K: std::hash::Hash + Eq + std::fmt::Debug>(
    by_id: &HashMap<i64, u32>,
    group: impl Fn(i64) -> K,
) -> HashMap<K, u32> {
    let mut seen = HashMap::new();
    for (&id, &partition) in by_id {
        let first = *seen.entry(group(id)).or_insert(partition);
        assert_eq!(
            first,
            partition,
            "key {:?} in partitions {first} and {partition}",
            group(id)
        );
    }
    seen
}

#[test]
fn null_keys_go_to_partition_zero_and_equal_keys_stay_together() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.parquet");
    write_parquet(&input, &[table(0..ROWS)]);
    let by_id = assignment(&[&input], "s", 7, &dir.path().join("s"));
    assert_eq!(by_id.len(), ROWS as usize);
    let groups = grouped(&by_id, s);
    assert_eq!(groups[&None], 0, "null keys go to partition 0");
    assert_eq!(groups.len(), 14, "13 strings and null");
    // several key columns: only an all-null key is forced to partition 0
    let both = assignment(&[&input], "s,n", 7, &dir.path().join("sn"));
    let groups = grouped(&both, |id| (s(id), n(id)));
    assert_eq!(groups[&(None, None)], 0);
}

#[test]
fn strings_partition_alike_in_every_layout() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.parquet");
    write_parquet(&input, &[table(0..ROWS)]);
    let utf8 = assignment(&[&input], "s", 16, &dir.path().join("s"));
    let view = assignment(&[&input], "v", 16, &dir.path().join("v"));
    let dictionary = assignment(&[&input], "d", 16, &dir.path().join("d"));
    assert_eq!(utf8, view, "Utf8View hashes like Utf8");
    assert_eq!(
        utf8, dictionary,
        "a dictionary hashes its values, not its keys"
    );
}

#[test]
fn other_key_types_keep_equal_values_together() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.parquet");
    write_parquet(&input, &[table(0..ROWS)]);
    grouped(
        &assignment(&[&input], "b", 4, &dir.path().join("b")),
        |id| id % 2,
    );
    grouped(
        &assignment(&[&input], "ts", 4, &dir.path().join("ts")),
        |id| id % 11,
    );
    grouped(
        &assignment(&[&input], "dec", 4, &dir.path().join("dec")),
        |id| id % 9,
    );
    grouped(
        &assignment(&[&input], "n,ts,dec", 4, &dir.path().join("mixed")),
        |id| (n(id), id % 11, id % 9),
    );
}

/// The same rows as one parquet file, or split over an Arrow IPC file, an Arrow stream and a
/// parquet file in a directory, partition identically.
#[test]
fn arrow_files_streams_and_directories_are_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.parquet");
    write_parquet(&whole, &[table(0..ROWS)]);
    let parts = dir.path().join("parts");
    std::fs::create_dir(&parts).unwrap();
    write_arrow_file(&parts.join("a.arrow"), &[table(0..150)]);
    write_arrow_stream(&parts.join("b.arrows"), &[table(150..250), table(250..300)]);
    write_parquet(&parts.join("c.parquet"), &[table(300..ROWS)]);
    // not inputs: hidden files, other extensions, subdirectories
    std::fs::write(parts.join(".hidden.parquet"), "junk").unwrap();
    std::fs::write(parts.join("notes.txt"), "junk").unwrap();
    std::fs::create_dir(parts.join("sub.parquet")).unwrap();

    let from_whole = assignment(&[&whole], "s", 5, &dir.path().join("w"));
    let from_dir = assignment(&[&parts], "s", 5, &dir.path().join("p"));
    assert_eq!(from_whole, from_dir);
    // an Arrow stream named without a known extension is still recognised by its content
    let odd = dir.path().join("stream.bin");
    write_arrow_stream(&odd, &[table(0..ROWS)]);
    assert_eq!(
        from_whole,
        assignment(&[&odd], "s", 5, &dir.path().join("o"))
    );
}

#[test]
fn large_input_batches_are_cut_to_batch_rows() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big-batch.arrows");
    write_arrow_stream(&input, &[table(0..ROWS)]);
    let out = dir.path().join("out");
    shuffle(
        &[input],
        "--key id --partitions 1 --batch-rows 64 --quiet --output",
    )
    .arg(&out)
    .assert()
    .success();
    let parts = read_parts(&out, "parquet");
    let (_, batches) = &parts[&0];
    assert_eq!(rows(batches), ROWS as usize);
}

/// Dictionaries that change between batches: refused by the IPC file format with a clear
/// message, written by the IPC stream format.
#[test]
fn changing_dictionaries_need_the_arrow_stream_format() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.arrows");
    write_arrow_stream(&input, &[table(0..100), table(100..200)]);
    // one-row batches and no compaction, so the buffer cannot merge the dictionaries
    let run = |format: &str, out: &Path| {
        let flags = format!(
            "--key n --partitions 2 --batch-rows 1 --compact-rows 0 --quiet --format {format}"
        );
        shuffle(&[&input], &flags).arg("--output").arg(out).assert()
    };
    let file = dir.path().join("file");
    let failed = run("arrow", &file).code(1);
    let err = String::from_utf8(failed.get_output().stderr.clone()).unwrap();
    assert!(
        err.contains("use --format arrow-stream or --format parquet"),
        "{err}"
    );
    assert!(crate::util::listing(&file).is_empty());
    let stream = dir.path().join("stream");
    run("arrow-stream", &stream).success();
    let parts = read_parts(&stream, "arrows");
    assert_eq!(parts.values().map(|(_, b)| rows(b)).sum::<usize>(), 200);
}

/// A hive-partitioned directory (`key=value` subdirectories) is read with each key as a Utf8
/// column holding its directory's value, nulls for `__HIVE_DEFAULT_PARTITION__`.
#[test]
fn hive_directories_become_columns() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
        "k",
        arrow_schema::DataType::Int64,
        false,
    )]));
    let batch = |from: i64| {
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(from..from + 10))],
        )
        .unwrap()
    };
    for (sub, from) in [
        ("g=a", 0),
        ("g=b%2Fc", 10),
        ("g=__HIVE_DEFAULT_PARTITION__", 20),
    ] {
        let sub = dir.path().join("in").join(sub);
        std::fs::create_dir_all(&sub).unwrap();
        write_parquet(&sub.join("part-0.parquet"), &[batch(from)]);
    }
    let out = dir.path().join("out");
    shuffle(
        &[dir.path().join("in")],
        "--key k --partitions 2 --verify --quiet --output",
    )
    .arg(&out)
    .assert()
    .success();
    let mut seen = std::collections::BTreeMap::new();
    for (_, (schema, batches)) in read_parts(&out, "parquet") {
        assert_eq!(schema.field(1).name(), "g");
        for b in &batches {
            let keys = b.column(0).as_primitive::<Int64Type>();
            let groups = b.column(1).as_string::<i32>();
            for i in 0..b.num_rows() {
                let group =
                    arrow_array::Array::is_valid(groups, i).then(|| groups.value(i).to_owned());
                seen.insert(keys.value(i), group);
            }
        }
    }
    assert_eq!(seen.len(), 30);
    assert_eq!(seen[&0], Some("a".to_owned()));
    assert_eq!(seen[&15], Some("b/c".to_owned()));
    assert_eq!(seen[&29], None);
}
