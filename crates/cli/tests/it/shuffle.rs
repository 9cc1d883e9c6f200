//! End-to-end shuffles of the lineitem fixture: every row comes out once, keys stay together,
//! every partition gets a file, and the figures add up.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt32Array};
use arrow_select::concat::concat_batches;
use arrow_select::take::take_record_batch;

use crate::util::{
    fixture, json, lineitem, listing, read_parquet, read_parts, rows, shuffle, write_parquet,
};

const LINEITEM_ROWS: u64 = 60_175;

/// (l_orderkey, l_linenumber) of every row: lineitem's unique key.
fn row_ids(batch: &RecordBatch) -> Vec<(i64, i32)> {
    let orderkeys = batch
        .column_by_name("l_orderkey")
        .unwrap()
        .as_primitive::<Int64Type>();
    let lines = batch
        .column_by_name("l_linenumber")
        .unwrap()
        .as_primitive::<Int32Type>();
    orderkeys
        .values()
        .iter()
        .copied()
        .zip(lines.values().iter().copied())
        .collect()
}

/// Checks that the partitions in `out` hold exactly the fixture's rows, each once, column for
/// column, and that each l_orderkey sits in one partition only.
fn assert_same_rows_and_keys_together(out: &Path, partitions: u32) {
    let (schema, input) = read_parquet(&lineitem());
    let input = concat_batches(&schema, &input).unwrap();
    let parts = read_parts(out, "parquet");
    assert_eq!(
        parts.keys().copied().collect::<Vec<_>>(),
        (0..partitions).collect::<Vec<_>>()
    );

    let position: HashMap<(i64, i32), u32> = row_ids(&input)
        .into_iter()
        .enumerate()
        .map(|(i, id)| (id, i as u32))
        .collect();
    let mut used = vec![false; input.num_rows()];
    let mut key_partition: HashMap<i64, u32> = HashMap::new();
    for (&partition, (part_schema, batches)) in &parts {
        assert_eq!(
            part_schema.fields(),
            schema.fields(),
            "partition {partition} schema"
        );
        if batches.is_empty() {
            continue;
        }
        let part = concat_batches(part_schema, batches).unwrap();
        let mut indices = Vec::with_capacity(part.num_rows());
        for id in row_ids(&part) {
            let at = position[&id];
            assert!(!used[at as usize], "row {id:?} came out twice");
            used[at as usize] = true;
            indices.push(at);
            let first = *key_partition.entry(id.0).or_insert(partition);
            assert_eq!(
                first, partition,
                "l_orderkey {} in partitions {first} and {partition}",
                id.0
            );
        }
        // the same rows of the input, in the partition's order, must equal the partition
        let expected = take_record_batch(&input, &UInt32Array::from(indices)).unwrap();
        for (c, field) in schema.fields().iter().enumerate() {
            assert_eq!(
                expected.column(c).as_ref(),
                part.column(c).as_ref(),
                "column {} of partition {partition}",
                field.name()
            );
        }
    }
    assert!(used.iter().all(|&u| u), "some input rows never came out");
}

#[test]
fn fixture_round_trip_keeps_every_row_once_and_keys_together() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = shuffle(&[lineitem()], "--key l_orderkey --partitions 16 --threads 2 --memory-limit 256MiB --no-spill --verify --json")
        .arg("--output")
        .arg(&out)
        .assert()
        .success()
        .stderr("");
    let report = json(&run.get_output().stdout);
    assert_eq!(report["rows_in"], LINEITEM_ROWS);
    assert_eq!(report["rows_out"], LINEITEM_ROWS);
    assert_eq!(report["partitions"], 16);
    assert_eq!(report["memory_limit"], 256 << 20);
    assert_eq!(report["verified"], true);
    assert_eq!(report["distinct_keys"], 15_000);
    assert!(report["bytes_in"].as_u64().unwrap() > 1 << 20);
    let peak = report["peak_reserved"].as_u64().unwrap();
    assert!(peak > 0 && peak <= 256 << 20, "{peak}");
    assert!(report["peak_rss"].as_u64().unwrap() > 0);
    assert_eq!(report["bytes_spilled"], 0);
    for phase in [
        "read_input_s",
        "partition_s",
        "write_s",
        "read_s",
        "output_s",
        "total_s",
    ] {
        assert!(
            report[phase].as_f64().is_some_and(|s| s >= 0.0),
            "{phase}: {}",
            report[phase]
        );
    }
    assert_same_rows_and_keys_together(&out, 16);
    // nothing but the output files is left behind
    assert_eq!(listing(&out).len(), 16);
}

/// The partition a key lands in is pinned: `hash.rs` documents the hash, and its unit tests pin
/// l_orderkey 1 (Int64 1) at hash 0x4a3a3a4ba6523826, which is 38 mod 64.
#[test]
fn a_key_lands_in_its_documented_partition() {
    let dir = tempfile::tempdir().unwrap();
    shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 64 --quiet --output",
    )
    .arg(dir.path())
    .assert()
    .success()
    .stdout("");
    let (_, batches) = read_parquet(&dir.path().join("part-00038.parquet"));
    let order_one: usize = batches
        .iter()
        .map(|b| {
            b.column(0)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .filter(|&&k| k == 1)
                .count()
        })
        .sum();
    assert_eq!(
        order_one, 6,
        "order 1 has six line items, all in partition 38"
    );
}

#[test]
fn every_partition_gets_a_file_even_when_empty() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("three-keys.parquet");
    let keys: ArrayRef = Arc::new(Int64Array::from_iter_values((0..300).map(|i| i % 3)));
    let payload: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..300).map(|i| format!("p{i}")),
    ));
    write_parquet(
        &input,
        &[RecordBatch::try_from_iter([("k", keys), ("p", payload)]).unwrap()],
    );
    let out = dir.path().join("out");
    shuffle(
        &[input],
        "--key k --partitions 32 --quiet --verify --output",
    )
    .arg(&out)
    .assert()
    .success();
    let parts = read_parts(&out, "parquet");
    assert_eq!(parts.len(), 32);
    let non_empty: Vec<(u32, usize)> = parts
        .iter()
        .map(|(&p, (_, b))| (p, rows(b)))
        .filter(|&(_, r)| r > 0)
        .collect();
    // keys 0, 1, 2 hash (see hash.rs) to partitions 30, 6 and 26 of 32
    assert_eq!(non_empty, [(6, 100), (26, 100), (30, 100)]);
    for (schema, _) in parts.values() {
        assert_eq!(schema.fields().len(), 2);
        assert_eq!(schema.field(0).name(), "k");
    }
}

#[test]
fn zero_row_input_gives_zero_row_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let run = shuffle(
        &[fixture("zero-rows.parquet")],
        "--key l_orderkey --partitions 4 --json --verify --output",
    )
    .arg(dir.path())
    .assert()
    .success();
    let report = json(&run.get_output().stdout);
    assert_eq!(report["rows_in"], 0);
    assert_eq!(report["rows_out"], 0);
    assert_eq!(report["empty_partitions"], 4);
    let parts = read_parts(dir.path(), "parquet");
    assert_eq!(parts.len(), 4);
    for (schema, batches) in parts.values() {
        assert_eq!(rows(batches), 0);
        assert_eq!(schema.fields().len(), 16);
    }
}

#[test]
fn without_output_partitions_are_only_counted() {
    let flags = "--key l_orderkey,l_linenumber --partitions 8 --json --verify";
    let run = shuffle(&[lineitem()], flags).assert().success();
    let report = json(&run.get_output().stdout);
    assert_eq!(report["rows_out"], LINEITEM_ROWS);
    assert!(report["output"].is_null());
    assert_eq!(
        report["distinct_keys"], LINEITEM_ROWS,
        "(orderkey, linenumber) is unique"
    );
}

/// Partition contents depend on the keys only: not on the thread count, not on the run.
#[test]
fn partitions_are_the_same_across_runs_and_thread_counts() {
    let dir = tempfile::tempdir().unwrap();
    let contents = |threads: &str, name: &str| {
        let out = dir.path().join(name);
        let flags = format!("--key l_partkey --partitions 8 --quiet --threads {threads} --output");
        shuffle(&[lineitem()], &flags).arg(&out).assert().success();
        read_parts(&out, "parquet")
            .into_iter()
            .map(|(p, (_, batches))| {
                let ids: BTreeSet<(i64, i32)> = batches.iter().flat_map(row_ids).collect();
                (p, ids)
            })
            .collect::<Vec<_>>()
    };
    let one = contents("1", "one");
    assert_eq!(one, contents("1", "one-again"));
    assert_eq!(one, contents("2", "two"));
    // with one thread, the files are identical byte for byte
    for p in 0..8 {
        let name = format!("part-{p:05}.parquet");
        let a = std::fs::read(dir.path().join("one").join(&name)).unwrap();
        let b = std::fs::read(dir.path().join("one-again").join(&name)).unwrap();
        assert!(a == b, "{name} differs between runs");
    }
}

#[test]
fn a_rerun_replaces_the_earlier_output() {
    let dir = tempfile::tempdir().unwrap();
    let run = |partitions: &str, format: &str| {
        let flags = format!("--key l_orderkey --quiet --partitions {partitions} --format {format}");
        let mut command = shuffle(&[fixture("zero-rows.parquet")], &flags);
        command.arg("--output").arg(dir.path()).assert().success();
    };
    std::fs::write(dir.path().join("notes.txt"), "not ours").unwrap();
    run("6", "parquet");
    run("3", "arrow");
    assert_eq!(
        listing(dir.path()),
        [
            "notes.txt",
            "part-00000.arrow",
            "part-00001.arrow",
            "part-00002.arrow"
        ]
    );
}

#[test]
fn arrow_output_holds_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    shuffle(
        &[lineitem()],
        "--key l_suppkey --partitions 5 --format arrow --quiet --output",
    )
    .arg(dir.path())
    .assert()
    .success();
    let parts = read_parts(dir.path(), "arrow");
    assert_eq!(parts.len(), 5);
    let mut ids: Vec<(i64, i32)> = parts
        .values()
        .flat_map(|(_, b)| b.iter().flat_map(row_ids))
        .collect();
    ids.sort();
    let (_, input) = read_parquet(&lineitem());
    let mut expected: Vec<(i64, i32)> = input.iter().flat_map(row_ids).collect();
    expected.sort();
    assert_eq!(ids, expected);
}

#[test]
fn the_summary_table_goes_to_stdout_and_quiet_silences_it() {
    let table = shuffle(&[lineitem()], "--key l_orderkey --partitions 4")
        .assert()
        .success()
        .stderr(""); // not a terminal: no progress bar
    let text = String::from_utf8(table.get_output().stdout.clone()).unwrap();
    assert!(text.contains("rows in  60175"), "{text}");
    assert!(text.contains("partitions  4 (0 empty)"), "{text}");
    shuffle(&[lineitem()], "--key l_orderkey --partitions 4 --quiet")
        .assert()
        .success()
        .stdout("")
        .stderr("");
}

/// A memory limit far below the data makes the buffer spill; the output is still exact and the
/// spill directory is left empty.
#[test]
fn a_small_memory_limit_spills_and_still_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let (out, spill) = (dir.path().join("out"), dir.path().join("spill"));
    let run = shuffle(&[lineitem()], "--key l_orderkey --partitions 16 --threads 2 --memory-limit 2MiB --spill-compression lz4 --verify --json --output")
        .arg(&out)
        .arg("--spill-dir")
        .arg(&spill)
        .assert()
        .success();
    let report = json(&run.get_output().stdout);
    assert!(report["bytes_spilled"].as_u64().unwrap() > 0, "{report}");
    assert!(report["spill_files"].as_u64().unwrap() > 0, "{report}");
    // a twelfth of --memory-limit per thread is kept from the buffer: on 2 threads it gets 5/6
    // of 2 MiB (a cut's forced overhead may pass that by a few KiB)
    assert!(
        report["peak_reserved"].as_u64().unwrap() <= (2 << 20) - (2 << 20) / 12 * 2 + (64 << 10),
        "{report}"
    );
    assert_same_rows_and_keys_together(&out, 16);
    assert!(
        !spill.exists() || listing(&spill).is_empty(),
        "spill files left behind"
    );
}

/// Shuffles the fixture into `partitions` under 2 MiB with batches of 1,024 rows, `--verify`
/// and `--json`, the writers' test hook set to `hold` (or unset); the run's report, after
/// checking it succeeded with every row, keys together. A run still going after 600 s is
/// killed and fails the test as hung.
fn under_2_mib_with_hook(partitions: u32, hold: Option<&str>) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut command = shuffle(
        &[lineitem()],
        &format!(
            "--key l_orderkey --partitions {partitions} --threads 2 --memory-limit 2MiB \
             --compact-rows 1024 --verify --json --output"
        ),
    );
    command.arg(&out).env_remove("ARROW_SHARDS_HOLD_WRITERS");
    if let Some(hold) = hold {
        command.env("ARROW_SHARDS_HOLD_WRITERS", hold);
    }
    let run = command
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.code().is_some(),
        "killed after 600 s: hung? {stderr}"
    );
    assert!(run.status.success(), "{}: {stderr}", run.status);
    let report = json(&run.stdout);
    assert_eq!(report["rows_out"], LINEITEM_ROWS, "{report}");
    assert_same_rows_and_keys_together(&out, partitions);
    report
}

/// Output writers slower than the input (the test hook holds them until the input ends): the
/// buffer spills what they do not take, and the files hold the same rows, keys together.
#[test]
fn writers_held_back_until_the_input_ends_spill_and_write_the_same_rows() {
    let report = under_2_mib_with_hook(8, Some("1"));
    assert_eq!(report["rows_out_during_input"], 0, "{report}");
    assert_eq!(report["output_during_input_s"], 0.0, "{report}");
    assert!(report["bytes_spilled"].as_u64().unwrap() > 0, "{report}");
}

/// Past the switch (16 partitions cannot each hold a minimum row group in the writers' share of
/// 2 MiB) the writers take nothing before the input's end, and the files hold the same rows,
/// keys together.
#[test]
fn past_the_switch_writers_wait_for_the_input_and_write_the_same_rows() {
    let report = under_2_mib_with_hook(16, None);
    assert_eq!(
        report["rows_out_during_input"], 0,
        "past the switch: {report}"
    );
}

/// Streaming forced past the switch under 2 MiB: the writers' open row groups (below the
/// minimum, so never cut during the input) fill the pool, and the buffer has nothing left to
/// spill. Its writes then go to disk directly; before, they waited for ever (every run of the
/// release build; a debug build's slower writers sometimes leave the buffer something to spill,
/// so whether a write goes to disk directly is not asserted).
#[test]
fn writers_that_hold_the_whole_limit_send_the_input_to_disk_instead_of_hanging() {
    under_2_mib_with_hook(16, Some("0"));
}

/// Counting only (no `--output`) at 1,024 and 4,096 partitions, far past the switch of 8 MiB's
/// writers' share: no row group is open, so the partitions are read while the input is (before,
/// the readers were held until its end and nothing was taken during it). Shards are kept as
/// written (`--compact-rows 0`) so each is complete as soon as it is in the buffer.
#[test]
fn counting_without_output_streams_at_any_partition_count() {
    for partitions in [1024, 4096] {
        let run = shuffle(
            &[lineitem()],
            &format!(
                "--key l_orderkey --partitions {partitions} --threads 1 --memory-limit 8MiB \
                 --batch-rows 1024 --compact-rows 0 --verify --json"
            ),
        )
        .env_remove("ARROW_SHARDS_HOLD_WRITERS")
        .assert()
        .success();
        let report = json(&run.get_output().stdout);
        assert_eq!(report["rows_out"], LINEITEM_ROWS, "{report}");
        assert!(
            report["rows_out_during_input"].as_u64().unwrap() > 0,
            "{partitions} partitions: nothing read during the input: {report}"
        );
    }
}
