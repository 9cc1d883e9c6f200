//! Shuffles of `gen all-types` (100,000 rows: 25.6 MiB of Arrow buffers, 35 MiB as the parquet
//! reader allocates them) under a 2 MiB `--memory-limit`.
//!
//! A budget far below the data must still finish, with every row back once, and must
//! spill sensibly: the bytes the buffer counts as spilled are the bytes it wrote, within 10%
//! at 1 partition (spill format 2 writes the schema once per run file, not once per segment);
//! at 37 and 257 plus each segment's message headers (see `SEGMENT_METADATA`). And it must
//! not spill in slivers (at most one spill run per 64 KiB written).

use std::path::Path;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;

use crate::util::{gen_all_types, json, read_parts, rows, shuffle};

/// Rows of the generated input: the `gen all-types` default.
const ROWS: u64 = 100_000;
/// The smallest spill a run should make on average: runs are bounded by the bytes
/// written over this.
const MIN_AVERAGE_SPILL: u64 = 64 * 1024;

/// The most metadata one spilled segment of this table's schema carries: the 48-byte frame,
/// the record batch message's 904-byte flatbuffer, the dictionary message's 168 and the
/// padding of 35 buffers to 16 bytes (docs/spill-format.md, "Overhead"). At 257 partitions
/// under 2 MiB a segment holds a few rows and this is more than its data: the files are ~1.6x
/// `bytes_spilled` there (2.0x in format 1, whose segments each carried the 912-byte schema).
const SEGMENT_METADATA: u64 = 1536;

/// Longest a shuffle may run before it counts as hung: while the buffer spills in slivers a
/// debug build has taken 250 s for 257 partitions on two busy cores; a sound run takes seconds.
const HUNG: Duration = Duration::from_secs(600);

/// Generates the input, shuffles it on `keys` into `partitions` under 2 MiB, and checks the run.
fn shuffle_under_2_mib(keys: &str, partitions: u32) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("all-types.parquet");
    gen_all_types(&input, ROWS);
    let out = dir.path().join("out");
    // spill files inside the test's directory: a run killed as hung cannot remove its own
    let spill = dir.path().join("spill");
    let run = shuffle(
        &[&input],
        &format!(
            "--key {keys} --partitions {partitions} --memory-limit 2MiB --verify --json --output"
        ),
    )
    .arg(&out)
    .arg("--spill-dir")
    .arg(&spill)
    .timeout(HUNG)
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.code().is_some(),
        "--key {keys} --partitions {partitions} was killed after {HUNG:?}, hung? {stderr}"
    );
    assert!(
        run.status.success(),
        "--key {keys} --partitions {partitions} failed ({}): {stderr}",
        run.status
    );
    let report = json(&run.stdout);
    // shown with --nocapture: runs, bytes spilled and written per case
    eprintln!("--key {keys} --partitions {partitions}: {report}");

    assert_eq!(report["rows_in"], ROWS, "{report}");
    assert_eq!(report["rows_out"], ROWS, "{report}");
    assert_eq!(report["verified"], true, "{report}");
    assert_every_id_once(&out, partitions);

    let spilled = report["bytes_spilled"].as_u64().unwrap();
    let written = report["bytes_written_to_disk"].as_u64().unwrap();
    let runs = report["spill_runs"].as_u64().unwrap();
    assert!(written > 0, "26 MiB under 2 MiB must spill: {report}");
    // `bytes_spilled` is the Arrow data that went to disk; the files add each segment's
    // 48-byte frame and IPC message headers, and each run file the schema once
    // (docs/spill-format.md, "Overhead"). A run writes at most one segment per partition.
    // One partition stays within 10%. From 37 on, the output writers' codecs (charged to the
    // budget, `codec_memory.rs`) leave the buffer so little of 2 MiB that most writes go to
    // disk directly, a segment of a few rows each, whose IPC message headers are not small
    // against their data (issue 45's 10% target at 37 and 257 partitions is open).
    if partitions == 1 {
        assert!(
            written.abs_diff(spilled) <= spilled / 10,
            "bytes_written_to_disk {written} is not within 10% of bytes_spilled {spilled}: \
             {report}"
        );
    } else {
        let metadata = runs * u64::from(partitions) * SEGMENT_METADATA;
        assert!(
            spilled <= written && written <= spilled + spilled / 10 + metadata,
            "bytes_written_to_disk {written} is not within bytes_spilled {spilled} + 10% + \
             {metadata} of segment metadata: {report}"
        );
    }
    assert!(
        runs <= written / MIN_AVERAGE_SPILL + 2,
        "{runs} spill runs for {written} bytes written (at most {} allowed): {report}",
        written / MIN_AVERAGE_SPILL + 2
    );
}

/// The output files hold every `id` of the input exactly once.
fn assert_every_id_once(out: &Path, partitions: u32) {
    let parts = read_parts(out, "parquet");
    assert_eq!(parts.len(), partitions as usize);
    let total: usize = parts.values().map(|(_, batches)| rows(batches)).sum();
    assert_eq!(total as u64, ROWS);
    let mut seen = vec![false; ROWS as usize];
    for (_, batches) in parts.values() {
        for batch in batches {
            let ids = batch
                .column_by_name("id")
                .unwrap()
                .as_primitive::<Int64Type>();
            for &id in ids.values() {
                let slot = &mut seen[usize::try_from(id).unwrap()];
                assert!(!*slot, "id {id} came out twice");
                *slot = true;
            }
        }
    }
    assert!(seen.iter().all(|&s| s), "some ids never came out");
}

#[test]
fn one_partition_on_a_string_and_int_key() {
    shuffle_under_2_mib("k,s", 1);
}

#[test]
fn thirty_seven_partitions() {
    shuffle_under_2_mib("k", 37);
}

#[test]
fn two_hundred_fifty_seven_partitions() {
    shuffle_under_2_mib("k", 257);
}
