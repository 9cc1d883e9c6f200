//! The names of the output files in each `--layout`, and recognising them again.
//!
//! | layout | cap per file | file `i` of partition `p` (final name) | temporary name |
//! |---|---|---|---|
//! | flat | none | `part-<p:05>.<ext>` | `.part-<p:05>.<ext>.tmp` |
//! | flat | `--max-rows-per-file` or `--max-bytes-per-file` | `part-<p:05>-<i:04>.<ext>` | `.part-<p:05>-<i:04>.<ext>.tmp` |
//! | hive | either | `<KEY>=<p>/part-<i:04>.<ext>` | `.part-<p:05>-<i:04>.<ext>.tmp` |
//!
//! Numbers are zero-padded to 5 (partition) and 4 (file) digits and wider when they need to be,
//! so names sort in partition and file order up to 99,999 partitions and 9,999 files per
//! partition. A hive directory's value is the partition number as written for an integer
//! column by Polars, DuckDB or pyarrow: decimal, no padding (`partition=7`). Temporary files
//! always sit in the output directory itself (hidden, `.tmp`), whatever the layout: a killed
//! run's leftovers are found there ([`is_temp_name`]), and hive directories are made only when
//! the run commits.

use std::path::PathBuf;

use crate::args::{FormatArg, LayoutArg};

/// How this run names its files.
#[derive(Debug, Clone)]
pub(crate) struct FileNames {
    layout: LayoutArg,
    hive_key: String,
    extension: &'static str,
    /// Whether files carry a file number (hive, or a cap per file).
    numbered: bool,
}

impl FileNames {
    /// The names of a run writing `format` files in `layout`, `capped` if a partition may span
    /// several files.
    pub(crate) fn new(layout: LayoutArg, hive_key: &str, format: FormatArg, capped: bool) -> Self {
        FileNames {
            layout,
            hive_key: hive_key.to_owned(),
            extension: format.extension(),
            numbered: capped || layout == LayoutArg::Hive,
        }
    }

    /// The final name of file `index` of partition `p`, relative to the output directory.
    pub(crate) fn final_name(&self, p: u32, index: u32) -> PathBuf {
        let ext = self.extension;
        match (self.layout, self.numbered) {
            (LayoutArg::Flat, false) => PathBuf::from(format!("part-{p:05}.{ext}")),
            (LayoutArg::Flat, true) => PathBuf::from(format!("part-{p:05}-{index:04}.{ext}")),
            (LayoutArg::Hive, _) => {
                PathBuf::from(self.hive_dir(p)).join(format!("part-{index:04}.{ext}"))
            }
        }
    }

    /// The temporary name of file `index` of partition `p`, in the output directory.
    pub(crate) fn temp_name(&self, p: u32, index: u32) -> String {
        let ext = self.extension;
        if self.numbered {
            format!(".part-{p:05}-{index:04}.{ext}.tmp")
        } else {
            format!(".part-{p:05}.{ext}.tmp")
        }
    }

    /// The hive directory of partition `p`: `KEY=p`.
    fn hive_dir(&self, p: u32) -> String {
        format!("{}={p}", self.hive_key)
    }

    /// Whether `name` is one of the output directory's `KEY=<n>` subdirectories.
    pub(crate) fn is_hive_dir(&self, name: &str) -> bool {
        name.strip_prefix(self.hive_key.as_str())
            .and_then(|rest| rest.strip_prefix('='))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
}

const EXTENSIONS: [&str; 3] = [".parquet", ".arrow", ".arrows"];

/// The numbers of a flat output file name, `part-PPPPP.<ext>` or `part-PPPPP-FFFF.<ext>`
/// (`<ext>` one of parquet, arrow, arrows): the partition and, if numbered, the file.
pub(crate) fn parse_flat_name(name: &str) -> Option<(u32, Option<u32>)> {
    let rest = name.strip_prefix("part-")?;
    let stem = EXTENSIONS.iter().find_map(|ext| rest.strip_suffix(ext))?;
    match stem.split_once('-') {
        None => Some((digits(stem, 5)?, None)),
        Some((p, f)) => Some((digits(p, 5)?, Some(digits(f, 4)?))),
    }
}

/// Whether `name` is a file name a hive directory of ours holds, `part-FFFF.<ext>`.
pub(crate) fn is_hive_file_name(name: &str) -> bool {
    name.strip_prefix("part-")
        .and_then(|rest| EXTENSIONS.iter().find_map(|ext| rest.strip_suffix(ext)))
        .and_then(|f| digits(f, 4))
        .is_some()
}

/// Whether `name` is a temporary file name of ours, `.part-PPPPP[-FFFF].<ext>.tmp`.
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
        .and_then(parse_flat_name)
        .is_some()
}

/// `text` as a number if it is at least `width` ASCII digits.
fn digits(text: &str, width: usize) -> Option<u32> {
    if text.len() < width || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_each_layout() {
        let flat = FileNames::new(LayoutArg::Flat, "partition", FormatArg::Parquet, false);
        assert_eq!(flat.final_name(7, 0), PathBuf::from("part-00007.parquet"));
        assert_eq!(flat.temp_name(7, 0), ".part-00007.parquet.tmp");
        let capped = FileNames::new(LayoutArg::Flat, "partition", FormatArg::Arrow, true);
        assert_eq!(
            capped.final_name(7, 12),
            PathBuf::from("part-00007-0012.arrow")
        );
        assert_eq!(capped.temp_name(7, 12), ".part-00007-0012.arrow.tmp");
        let hive = FileNames::new(LayoutArg::Hive, "p", FormatArg::Parquet, false);
        assert_eq!(
            hive.final_name(123_456, 3),
            PathBuf::from("p=123456/part-0003.parquet")
        );
        assert_eq!(hive.temp_name(123_456, 3), ".part-123456-0003.parquet.tmp");
        assert!(hive.is_hive_dir("p=0") && hive.is_hive_dir("p=00012"));
        for other in ["p=", "p=x", "q=1", "p1", "partition=1"] {
            assert!(!hive.is_hive_dir(other), "{other}");
        }
    }

    #[test]
    fn our_names_are_recognised_exactly() {
        assert_eq!(parse_flat_name("part-00000.parquet"), Some((0, None)));
        assert_eq!(parse_flat_name("part-00042.arrow"), Some((42, None)));
        assert_eq!(
            parse_flat_name("part-00007-0003.arrows"),
            Some((7, Some(3)))
        );
        assert_eq!(
            parse_flat_name("part-123456.parquet"),
            Some((123_456, None))
        );
        for other in [
            "part-1.parquet",
            "part-00001-1.parquet",
            ".part-00000.parquet.tmp",
            "part-0000x.arrow",
            "data.parquet",
            "part-00000.csv",
        ] {
            assert_eq!(parse_flat_name(other), None, "{other}");
        }
        assert!(is_hive_file_name("part-0000.parquet") && is_hive_file_name("part-10000.arrow"));
        assert!(!is_hive_file_name("part-000.parquet") && !is_hive_file_name("data_0.parquet"));
        assert!(
            is_temp_name(".part-00003.parquet.tmp") && is_temp_name(".part-00003-0001.arrow.tmp")
        );
        assert!(!is_temp_name(".notes.tmp") && !is_temp_name("part-00003.parquet"));
    }
}
