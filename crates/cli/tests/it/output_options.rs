//! The output options round-trip: `--compression`, `--compression-level`, `--row-group-rows`,
//! `--statistics`, `--dictionary-limit` and `--dictionary-distinct-ratio` are checked in the
//! files' parquet metadata (the zstd level in the files' size), and the rows read back are the
//! input's.

use std::fs::File;
use std::path::Path;

use parquet::basic::Compression;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::util::{lineitem, read_arrow_file, read_parquet, read_parts, rows, shuffle};

const LINEITEM_ROWS: usize = 60_175;

/// Shuffles the fixture into 4 partitions with `flags`; the output directory.
fn shuffled(flags: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    shuffle(
        &[lineitem()],
        &format!("--key l_orderkey --partitions 4 --quiet {flags} --output"),
    )
    .arg(dir.path())
    .assert()
    .success();
    dir
}

/// Shuffles the fixture into 4 partitions with `flags`, asserting a usage error (status 2).
fn refused(flags: &str) -> assert_cmd::assert::Assert {
    let dir = tempfile::tempdir().unwrap();
    shuffle(
        &[lineitem()],
        &format!("--key l_orderkey --partitions 4 {flags} --output"),
    )
    .arg(dir.path())
    .assert()
    .code(2)
}

fn metadata(path: &Path) -> ParquetMetaData {
    SerializedFileReader::new(File::open(path).unwrap())
        .unwrap()
        .metadata()
        .clone()
}

/// Every column chunk's codec in the partition files of `dir`.
fn codecs(dir: &Path) -> Vec<Compression> {
    let mut codecs = Vec::new();
    for p in 0..4 {
        let meta = metadata(&dir.join(format!("part-{p:05}.parquet")));
        for group in meta.row_groups() {
            codecs.extend(group.columns().iter().map(|c| c.compression()));
        }
    }
    codecs
}

#[test]
fn parquet_codecs_are_as_asked_and_snappy_by_default() {
    for (flags, expected) in [
        ("", Compression::SNAPPY),
        ("--compression snappy", Compression::SNAPPY),
        ("--compression lz4", Compression::LZ4_RAW),
        ("--compression none", Compression::UNCOMPRESSED),
    ] {
        let dir = shuffled(flags);
        let codecs = codecs(dir.path());
        assert!(!codecs.is_empty());
        assert!(codecs.iter().all(|c| *c == expected), "{flags}: {codecs:?}");
        let parts = read_parts(dir.path(), "parquet");
        let total: usize = parts.values().map(|(_, b)| rows(b)).sum();
        assert_eq!(total, LINEITEM_ROWS, "{flags}");
    }
    let dir = shuffled("--compression zstd");
    assert!(
        codecs(dir.path())
            .iter()
            .all(|c| matches!(c, Compression::ZSTD(_)))
    );
}

/// `--compression-level` sets parquet's zstd level (recorded in no file, so it is seen in the
/// size: level 19 compresses the fixture smaller than the default level 1), and is refused
/// with another codec or with Arrow IPC output.
#[test]
fn compression_level_sets_the_zstd_level_and_is_refused_elsewhere() {
    let size = |dir: &Path| -> u64 {
        (0..4)
            .map(|p| {
                std::fs::metadata(dir.join(format!("part-{p:05}.parquet")))
                    .unwrap()
                    .len()
            })
            .sum()
    };
    let level_1 = shuffled("--compression zstd");
    let level_19 = shuffled("--compression zstd --compression-level 19");
    assert!(
        codecs(level_19.path())
            .iter()
            .all(|c| matches!(c, Compression::ZSTD(_)))
    );
    let total: usize = read_parts(level_19.path(), "parquet")
        .values()
        .map(|(_, b)| rows(b))
        .sum();
    assert_eq!(total, LINEITEM_ROWS);
    assert!(
        size(level_19.path()) < size(level_1.path()),
        "level 19 {} bytes, level 1 {}",
        size(level_19.path()),
        size(level_1.path())
    );
    refused("--compression-level 3").stderr(predicates::str::contains(
        "--compression-level is for --compression zstd",
    ));
    refused("--compression snappy --compression-level 3").stderr(predicates::str::contains(
        "--compression-level is for --compression zstd",
    ));
    refused("--format arrow --compression zstd --compression-level 3").stderr(
        predicates::str::contains("--compression-level is for parquet output"),
    );
    refused("--compression zstd --compression-level 23").stderr(predicates::str::contains("23"));
}

#[test]
fn row_groups_hold_at_most_row_group_rows() {
    let dir = shuffled("--row-group-rows 1000");
    let mut total = 0;
    for p in 0..4 {
        let path = dir.path().join(format!("part-{p:05}.parquet"));
        let meta = metadata(&path);
        let rows_here = meta.file_metadata().num_rows() as usize;
        let groups: Vec<usize> = meta
            .row_groups()
            .iter()
            .map(|g| g.num_rows() as usize)
            .collect();
        assert!(groups.iter().all(|&n| n <= 1000), "{groups:?}");
        assert_eq!(groups.len(), rows_here.div_ceil(1000), "{groups:?}");
        assert_eq!(rows(&read_parquet(&path).1), rows_here);
        total += rows_here;
    }
    assert_eq!(total, LINEITEM_ROWS);
}

#[test]
fn statistics_are_written_unless_turned_off() {
    for (flags, wanted) in [
        ("", true),
        ("--statistics chunk", true),
        ("--statistics none", false),
    ] {
        let dir = shuffled(flags);
        let meta = metadata(&dir.path().join("part-00000.parquet"));
        let key = meta.row_group(0).column(0);
        assert_eq!(key.column_path().string(), "l_orderkey");
        assert_eq!(key.statistics().is_some(), wanted, "{flags}");
        if let Some(stats) = key.statistics() {
            assert!(stats.min_bytes_opt().is_some() && stats.max_bytes_opt().is_some());
        }
    }
}

#[test]
fn arrow_output_takes_lz4_and_zstd_but_not_snappy() {
    let plain = shuffled("--format arrow");
    let zstd = shuffled("--format arrow --compression zstd");
    let size = |dir: &Path| {
        std::fs::metadata(dir.join("part-00000.arrow"))
            .unwrap()
            .len()
    };
    assert!(
        size(zstd.path()) < size(plain.path()) / 2,
        "zstd did not compress"
    );
    let (_, plain_batches) = read_arrow_file(&plain.path().join("part-00000.arrow"));
    let (_, zstd_batches) = read_arrow_file(&zstd.path().join("part-00000.arrow"));
    assert_eq!(plain_batches, zstd_batches);

    refused("--format arrow --compression snappy").stderr(predicates::str::contains(
        "--compression snappy is for parquet output",
    ));
}

#[test]
fn dictionaries_stop_at_the_dictionary_limit_or_are_off() {
    // Whether each column chunk of partition 0's first row group has a dictionary page.
    let dictionaries = |flags: &str| -> Vec<(String, bool)> {
        let dir = shuffled(flags);
        let meta = metadata(&dir.path().join("part-00000.parquet"));
        meta.row_group(0)
            .columns()
            .iter()
            .map(|c| {
                (
                    c.column_path().string(),
                    c.dictionary_page_offset().is_some(),
                )
            })
            .collect()
    };
    let has =
        |columns: &[(String, bool)], name: &str| columns.iter().find(|(n, _)| n == name).unwrap().1;
    let default = dictionaries("");
    assert!(has(&default, "l_returnflag"), "{default:?}");
    // mostly distinct in the input's first batch: plain by default, a dictionary with ratio 1
    // (the fixture is SF 0.01: l_partkey has 2,000 values, so it repeats and keeps one)
    assert!(has(&default, "l_partkey"), "{default:?}");
    for column in ["l_extendedprice", "l_comment"] {
        assert!(!has(&default, column), "{column}: {default:?}");
    }
    let all = dictionaries("--dictionary-distinct-ratio 1");
    assert!(all.iter().all(|(_, dict)| *dict), "{all:?}");
    let off = dictionaries("--dictionary-limit off");
    assert!(off.iter().all(|(_, dict)| !dict), "{off:?}");
    // a limit of 1 byte: every column's dictionary is full at its first value, so every
    // chunk falls back to plain after one (possibly empty) dictionary page: rows still read
    let dir = shuffled("--dictionary-limit 1 --data-page-size 1KiB");
    let parts = read_parts(dir.path(), "parquet");
    let total: usize = parts.values().map(|(_, b)| rows(b)).sum();
    assert_eq!(total, LINEITEM_ROWS);
}

#[test]
fn the_plain_columns_are_reported_and_the_rows_are_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let out = shuffle(
        &[lineitem()],
        "--key l_orderkey --partitions 4 --threads 1 --quiet --json --output",
    )
    .arg(dir.path())
    .output()
    .unwrap();
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["plain_columns"],
        serde_json::json!(["l_extendedprice", "l_comment"])
    );
    let plain = read_parts(dir.path(), "parquet");
    // one thread each: the same order of rows within a partition
    let with_dictionaries = shuffled("--threads 1 --dictionary-distinct-ratio 1");
    assert_eq!(plain, read_parts(with_dictionaries.path(), "parquet"));
}

#[test]
fn a_bad_distinct_ratio_is_a_usage_error() {
    for ratio in ["1.5", "-0.1", "half", "NaN"] {
        refused(&format!("--dictionary-distinct-ratio={ratio}"))
            .stderr(predicates::str::contains("is not a ratio from 0 to 1"));
    }
}

#[test]
fn a_bad_dictionary_limit_is_a_usage_error() {
    refused("--dictionary-limit lots");
}
