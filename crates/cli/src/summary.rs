//! The figures of a run: one JSON object (`--json`) or a table for people.
//!
//! Both go to **stdout** at the end of a successful run; progress and errors go to stderr. With
//! `--json`, stdout carries only the JSON object (one line); with `--quiet` and no `--json`,
//! nothing is printed.
//!
//! Phase times: `read_input_s` is time spent opening and decoding inputs; `partition_s`
//! (hashing into partition ids) and `write_s` (the scatter writes into the buffer, waits for
//! memory included) are summed over the partitioning threads; `read_s` (taking batches out of the
//! buffer) and `output_s` (writing the output files) are summed over the output threads, so
//! with several threads they can exceed the wall clock. The output threads run while the input
//! is read: `output_during_input_s` is the part of `output_s` spent before the input was
//! complete and `rows_out_during_input` the rows taken by then; `input_wall_s` is the wall
//! clock at which the input was complete, `total_s` the wall clock of the whole run.

use std::fmt::Write as _;
use std::time::Duration;

use bytesize::ByteSize;
use serde::Serialize;

/// What a shuffle did.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Report {
    /// Rows read from the inputs.
    pub(crate) rows_in: u64,
    /// Rows read back from the buffer.
    pub(crate) rows_out: u64,
    /// Partitions.
    pub(crate) partitions: u32,
    /// Partitions that received no rows.
    pub(crate) empty_partitions: u32,
    /// Input files read.
    pub(crate) input_files: usize,
    /// Arrow in-memory size of the input batches, by distinct allocation.
    pub(crate) bytes_in: u64,
    /// `--memory-limit`, or null.
    pub(crate) memory_limit: Option<u64>,
    /// Most bytes the buffer held in memory at once.
    pub(crate) peak_reserved: u64,
    /// Bytes the buffer wrote to spill files.
    pub(crate) bytes_spilled: u64,
    /// Bytes of spill files on disk when the input was finished (files are only removed as
    /// partitions are read, so this is the most the run kept on disk).
    pub(crate) bytes_on_disk: u64,
    /// Bytes written to spill files in all (compressed, framed).
    pub(crate) bytes_written_to_disk: u64,
    /// Spill runs (rounds and direct writes).
    pub(crate) spill_runs: u64,
    /// Writes that needed more than the buffer's whole limit and went to disk directly.
    pub(crate) direct_writes: u64,
    /// Spill files created (in the local directory).
    pub(crate) spill_files: u64,
    /// Spill runs written to the object store of `--spill-to`.
    pub(crate) overflow_runs: u64,
    /// Bytes written to the object store of `--spill-to`.
    pub(crate) overflow_bytes_written: u64,
    /// Peak resident set size of the process (VmHWM), or null where unknown.
    pub(crate) peak_rss: Option<u64>,
    /// Threads used.
    pub(crate) threads: u32,
    /// The output directory, or null in benchmark mode.
    pub(crate) output: Option<String>,
    /// Whether `--verify` ran (and passed: a failed check is an error, not a report).
    pub(crate) verified: bool,
    /// Distinct keys seen by `--verify` (null without it).
    pub(crate) distinct_keys: Option<u64>,
    /// Seconds opening and decoding inputs.
    pub(crate) read_input_s: f64,
    /// Seconds hashing and splitting batches, summed over threads.
    pub(crate) partition_s: f64,
    /// Seconds writing shards into the buffer, summed over threads.
    pub(crate) write_s: f64,
    /// Of `write_s`, seconds the buffer made writers wait for memory.
    pub(crate) write_wait_s: f64,
    /// Seconds reading partitions from the buffer, summed over threads.
    pub(crate) read_s: f64,
    /// Seconds writing output files, summed over threads.
    pub(crate) output_s: f64,
    /// Of `output_s`, seconds spent while the input was still read: the overlap of the
    /// pipeline (output written during the input instead of after it).
    pub(crate) output_during_input_s: f64,
    /// Rows the output threads took from the buffer while the input was still read.
    pub(crate) rows_out_during_input: u64,
    /// Wall-clock seconds from the start of the run until the input was complete (the buffer
    /// finished); `total_s` minus this is what the output took after the input.
    pub(crate) input_wall_s: f64,
    /// Parquet row groups cut before `--row-group-rows` because the writers held their share
    /// of the memory limit.
    pub(crate) early_row_group_cuts: u64,
    /// Parquet encoding steps (a batch's columns, or a row group's cut) that ran on more than
    /// one thread: output threads with no partition left helped the writers still at work.
    pub(crate) encode_steps_helped: u64,
    /// The most bytes the output writers' open row groups may hold (half the buffer's pool),
    /// or null without a limit.
    pub(crate) writer_share: Option<u64>,
    /// Seconds `--verify` spent hashing, summed over threads.
    pub(crate) verify_s: f64,
    /// The `--sort-by` key as it applies (`COL:asc:nulls_last,...`), or null without one.
    pub(crate) sort_by: Option<String>,
    /// Seconds `--sort-by` spent ordering partitions (keys encoded, positions sorted, runs
    /// written and merged), summed over threads; 0 without it.
    pub(crate) sort_s: f64,
    /// Sorted runs `--sort-by` wrote to disk (0 when every partition was sorted in memory).
    pub(crate) sort_runs: u64,
    /// Parquet columns written without a dictionary (`--dictionary-distinct-ratio`); empty
    /// for other formats and without output.
    pub(crate) plain_columns: Vec<String>,
    /// Wall-clock seconds of the whole run.
    pub(crate) total_s: f64,
}

/// A duration as seconds, to the microsecond.
pub(crate) fn seconds(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e6
}

impl Report {
    /// The report as one line of JSON.
    pub(crate) fn to_json(&self) -> String {
        // A struct of numbers, strings and options always serializes.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The report as a table for people.
    pub(crate) fn table(&self) -> String {
        let bytes = |b: u64| ByteSize(b).display().iec().to_string();
        let rate = |rows: u64, s: f64| {
            if s > 0.0 {
                format!("{:.2} M rows/s", rows as f64 / s / 1e6)
            } else {
                "-".into()
            }
        };
        let mut lines: Vec<(&str, String)> = vec![
            (
                "rows in",
                format!("{} ({} files)", self.rows_in, self.input_files),
            ),
            ("rows out", self.rows_out.to_string()),
            (
                "partitions",
                format!("{} ({} empty)", self.partitions, self.empty_partitions),
            ),
            ("input size", bytes(self.bytes_in)),
            (
                "memory limit",
                self.memory_limit.map_or("none".into(), bytes),
            ),
            ("peak reserved", bytes(self.peak_reserved)),
            (
                "spilled",
                format!(
                    "{} in {} runs, {} files ({} written, {} on disk when the input ended)",
                    bytes(self.bytes_spilled),
                    self.spill_runs,
                    self.spill_files,
                    bytes(self.bytes_written_to_disk),
                    bytes(self.bytes_on_disk)
                ),
            ),
            ("peak rss", self.peak_rss.map_or("unknown".into(), bytes)),
            ("threads", self.threads.to_string()),
            (
                "overlap",
                format!(
                    "{} rows out while the input was read ({:.3} s of output; input done at {:.3} s)",
                    self.rows_out_during_input, self.output_during_input_s, self.input_wall_s
                ),
            ),
            (
                "output",
                self.output
                    .clone()
                    .unwrap_or_else(|| "none (read and counted)".into()),
            ),
        ];
        if self.overflow_runs > 0 {
            // after "spilled" (the local directory), before "peak rss"
            let at = lines.iter().position(|(name, _)| *name == "peak rss");
            lines.insert(
                at.unwrap_or(lines.len()),
                (
                    "to object store",
                    format!(
                        "{} runs ({} written; --spill-to)",
                        self.overflow_runs,
                        bytes(self.overflow_bytes_written)
                    ),
                ),
            );
        }
        if !self.plain_columns.is_empty() {
            lines.push(("plain columns", self.plain_columns.join(", ")));
        }
        if let Some(key) = &self.sort_by {
            lines.push((
                "sorted by",
                format!(
                    "{key} ({:.3} s, {} runs on disk)",
                    self.sort_s, self.sort_runs
                ),
            ));
        }
        if self.verified {
            let keys = self.distinct_keys.unwrap_or_default();
            lines.push((
                "verify",
                format!("passed: rows match, {keys} keys each in one partition"),
            ));
        }
        let phases = [
            ("read input", self.read_input_s),
            ("partition", self.partition_s),
            ("write", self.write_s),
            ("read", self.read_s),
            ("output", self.output_s),
        ];
        let mut out = String::new();
        for (name, value) in lines {
            let _ = writeln!(out, "{name:>15}  {value}");
        }
        for (name, s) in phases {
            let _ = writeln!(out, "{:>15}  {s:.3} s", format!("{name} time"));
        }
        let _ = writeln!(
            out,
            "{:>15}  {:.3} s ({})",
            "total time",
            self.total_s,
            rate(self.rows_in, self.total_s)
        );
        out
    }
}

/// The peak resident set size of this process, from `VmHWM` in `/proc/self/status` (Linux).
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let mut words = line["VmHWM:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => Some(value * 1024),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_hwm_is_read_in_bytes() {
        let status = "Name:\tx\nVmPeak:\t  2000 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(1234 * 1024));
        assert_eq!(parse_vm_hwm("Name: x\n"), None);
        if cfg!(target_os = "linux") {
            assert!(peak_rss().is_some_and(|b| b > 0));
        }
    }

    #[test]
    fn json_has_the_promised_keys_and_nulls() {
        let report = Report {
            rows_in: 3,
            rows_out: 3,
            partitions: 2,
            ..Default::default()
        };
        let value: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        for key in [
            "rows_in",
            "rows_out",
            "partitions",
            "bytes_in",
            "memory_limit",
            "peak_reserved",
            "bytes_spilled",
            "bytes_on_disk",
            "spill_runs",
            "direct_writes",
            "spill_files",
            "overflow_runs",
            "overflow_bytes_written",
            "peak_rss",
            "read_input_s",
            "partition_s",
            "write_s",
            "read_s",
            "output_s",
            "output_during_input_s",
            "rows_out_during_input",
            "input_wall_s",
            "early_row_group_cuts",
            "encode_steps_helped",
            "writer_share",
            "sort_by",
            "sort_s",
            "sort_runs",
            "plain_columns",
            "total_s",
        ] {
            assert!(value.get(key).is_some(), "missing {key}");
        }
        assert!(value["memory_limit"].is_null());
        assert_eq!(value["rows_in"], 3);
    }

    #[test]
    fn seconds_round_to_microseconds() {
        assert_eq!(seconds(Duration::from_nanos(1_234_567_891)), 1.234568);
    }
}
