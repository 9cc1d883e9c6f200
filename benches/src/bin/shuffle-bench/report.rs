//! Turning job results into the markdown report and JSON lines.
//!
//! Times are medians over the runs, with (min-max) where shown; byte counts are medians, peak
//! RSS the largest of the runs. Sizes are in MB (10^6 bytes), rates in GB/s (10^9 bytes/s) of
//! the data's in-memory size.

use std::fmt::Write;

use serde::Serialize;

use crate::cases::{ReadMode, Run};
use crate::reference::RefRun;
use crate::{CaseKind, JobResult};

/// Median, min and max of some samples.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Stat {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Stat {
    fn of(samples: impl IntoIterator<Item = f64>) -> Self {
        let mut xs: Vec<f64> = samples.into_iter().collect();
        if xs.is_empty() {
            return Self::default();
        }
        xs.sort_by(f64::total_cmp);
        let mid = xs.len() / 2;
        let median = if xs.len() % 2 == 1 {
            xs[mid]
        } else {
            (xs[mid - 1] + xs[mid]) / 2.0
        };
        Self {
            median,
            min: xs[0],
            max: xs[xs.len() - 1],
        }
    }

    /// The stat of one measure over `runs`.
    fn over<R>(runs: &[R], measure: impl Fn(&R) -> f64) -> Self {
        Self::of(runs.iter().map(measure))
    }

    fn show(self) -> String {
        format!("{:.3} ({:.3}-{:.3})", self.median, self.min, self.max)
    }
}

/// Per-case summary.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) write_secs: Stat,
    pub(crate) read_secs: Stat,
    pub(crate) close_secs: Stat,
    pub(crate) total_secs: Stat,
    pub(crate) bytes_spilled: u64,
    pub(crate) disk_bytes: u64,
    pub(crate) files: u64,
    pub(crate) peak_reserved: u64,
    pub(crate) peak_rss: u64,
    pub(crate) lock_wait_secs: Stat,
}

impl Summary {
    fn of(runs: &[Run]) -> Self {
        let median_u64 = |f: fn(&Run) -> u64| Stat::of(runs.iter().map(|r| f(r) as f64)).median;
        Self {
            write_secs: Stat::over(runs, |r| r.write_secs),
            read_secs: Stat::over(runs, |r| r.read_secs),
            close_secs: Stat::over(runs, |r| r.close_secs),
            total_secs: Stat::over(runs, Run::total_secs),
            bytes_spilled: median_u64(|r| r.bytes_spilled) as u64,
            disk_bytes: median_u64(|r| r.disk_bytes) as u64,
            files: median_u64(|r| r.files) as u64,
            peak_reserved: median_u64(|r| r.peak_reserved) as u64,
            peak_rss: runs.iter().map(|r| r.peak_rss).max().unwrap_or(0),
            lock_wait_secs: Stat::over(runs, |r| r.lock_wait_secs),
        }
    }
}

/// Medians of each reference.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct RefSummary {
    pub(crate) copy_fresh_secs: Stat,
    pub(crate) copy_pretouched_secs: Stat,
    pub(crate) file_write_secs: Stat,
    pub(crate) file_read_secs: Stat,
    pub(crate) ipc_encode_secs: Stat,
    pub(crate) ipc_decode_secs: Stat,
    pub(crate) ipc_bytes: u64,
}

impl RefSummary {
    fn of(runs: &[RefRun]) -> Self {
        Self {
            copy_fresh_secs: Stat::over(runs, |r| r.copy_fresh_secs),
            copy_pretouched_secs: Stat::over(runs, |r| r.copy_pretouched_secs),
            file_write_secs: Stat::over(runs, |r| r.file_write_secs),
            file_read_secs: Stat::over(runs, |r| r.file_read_secs),
            ipc_encode_secs: Stat::over(runs, |r| r.ipc_encode_secs),
            ipc_decode_secs: Stat::over(runs, |r| r.ipc_decode_secs),
            ipc_bytes: runs.first().map_or(0, |r| r.ipc_bytes),
        }
    }

    /// Seconds to encode, write, read and decode the whole data once (medians).
    fn disk_round_trip(&self) -> f64 {
        self.ipc_encode_secs.median
            + self.file_write_secs.median
            + self.file_read_secs.median
            + self.ipc_decode_secs.median
    }
}

pub(crate) fn read_name(read: ReadMode) -> &'static str {
    match read {
        ReadMode::Coalesced => "coalesced",
        ReadMode::PassThrough => "pass-through",
        ReadMode::Streaming => "streaming",
    }
}

fn read_of(r: &JobResult) -> &'static str {
    r.job.read.map_or("as written", read_name)
}

fn mb(bytes: u64) -> String {
    format!("{:.0}", bytes as f64 / 1e6)
}

fn gbps(bytes: u64, secs: f64) -> String {
    if secs > 0.0 {
        format!("{:.2}", bytes as f64 / 1e9 / secs)
    } else {
        "-".into()
    }
}

fn refs_for(results: &[JobResult], partitions: u32) -> Option<RefSummary> {
    results
        .iter()
        .find(|r| r.job.case == CaseKind::References && r.job.partitions == partitions)
        .map(|r| RefSummary::of(&r.references))
}

fn find(
    results: &[JobResult],
    case: CaseKind,
    partitions: u32,
    read: Option<ReadMode>,
) -> Option<&JobResult> {
    results
        .iter()
        .find(|r| r.job.case == case && r.job.partitions == partitions && r.job.read == read)
}

/// Upper bound of the peak-RSS target: input + limit + 10% + 64 MiB, plus what the process
/// held before the first run beyond the input (tpchgen's static ~300 MB text pool, the
/// allocator's leftovers from partitioning): `RSS before - input`.
///
/// In scatter mode the buffer holds copies (the input stays in the process for the next run),
/// so the bounds are the small-shard issue's: memory only, `RSS before + 1.2 x peak reserved +
/// 128 MiB`; with a limit L, `RSS before + L + 10% + 64 MiB`.
fn rss_bound(r: &JobResult) -> u64 {
    if r.job.scatter {
        return match r.memory_limit {
            None => {
                let reserved = r
                    .runs
                    .iter()
                    .map(|run| run.peak_reserved)
                    .max()
                    .unwrap_or(0);
                r.rss_before + reserved + reserved / 5 + (128 << 20)
            }
            Some(limit) => r.rss_before + limit + limit / 10 + (64 << 20),
        };
    }
    let base = r.data_bytes + r.memory_limit.unwrap_or(0);
    base + base / 10 + (64 << 20) + r.rss_before.saturating_sub(r.data_bytes)
}

/// The markdown report.
pub(crate) fn markdown(results: &[JobResult], command: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "`shuffle-bench {command}`\n");
    setup_table(&mut out, results);
    reference_table(&mut out, results);
    case_table(&mut out, results);
    target_table(&mut out, results);
    scaling_table(&mut out, results);
    out
}

fn setup_table(out: &mut String, results: &[JobResult]) {
    let _ = writeln!(
        out,
        "| input | partitions | rows | chunk MB | shard MB | shards | load s | partition s | partition GB/s |\n|---|---|---|---|---|---|---|---|---|"
    );
    let mut seen = Vec::new();
    for r in results {
        let key = (r.job.partitions, r.scale.map(f64::to_bits));
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let input = r
            .scale
            .map_or_else(|| "lineitem".to_string(), |s| format!("lineitem SF {s}"));
        let _ = writeln!(
            out,
            "| {input} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} |",
            r.job.partitions,
            r.rows,
            mb(r.chunk_bytes),
            mb(r.data_bytes),
            r.shards,
            r.load_secs,
            r.partition_secs,
            gbps(r.chunk_bytes, r.partition_secs),
        );
    }
    out.push('\n');
}

fn reference_table(out: &mut String, results: &[JobResult]) {
    let refs: Vec<_> = results
        .iter()
        .filter(|r| r.job.case == CaseKind::References)
        .collect();
    if refs.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "References for the data's in-memory size (s, median (min-max); GB/s of in-memory bytes):\n\n\
         | partitions | MB | copy, fresh | copy, pre-touched | file write | file read | IPC encode | IPC decode | IPC MB |\n|---|---|---|---|---|---|---|---|---|"
    );
    for r in refs {
        let s = RefSummary::of(&r.references);
        let cell = |st: Stat| format!("{} = {} GB/s", st.show(), gbps(r.data_bytes, st.median));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.job.partitions,
            mb(r.data_bytes),
            cell(s.copy_fresh_secs),
            cell(s.copy_pretouched_secs),
            cell(s.file_write_secs),
            cell(s.file_read_secs),
            cell(s.ipc_encode_secs),
            cell(s.ipc_decode_secs),
            mb(s.ipc_bytes),
        );
    }
    out.push('\n');
}

fn case_table(out: &mut String, results: &[JobResult]) {
    let rows: Vec<_> = results
        .iter()
        .filter(|r| !matches!(r.job.case, CaseKind::References | CaseKind::Fixed))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Cases (s, median (min-max); total = write + read + close; x = total / reference):\n\n\
         | case | partitions | read | runs | write s | read s | total s | GB/s | x copy fresh | x copy touched | x file w+r | x IPC enc+dec | spilled MB | disk MB | files | peak reserved MB | RSS before MB | peak RSS MB | RSS bound MB | lock wait s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let s = Summary::of(&r.runs);
        let total = s.total_secs.median;
        let x = |reference: Option<f64>| {
            reference.map_or("-".into(), |secs| format!("{:.2}", total / secs))
        };
        let refs = refs_for(results, r.job.partitions);
        let bound = if r.job.case == CaseKind::EagerDisk {
            "-".into()
        } else {
            mb(rss_bound(r))
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.job.label(),
            r.job.partitions,
            read_of(r),
            r.runs.len(),
            s.write_secs.show(),
            s.read_secs.show(),
            s.total_secs.show(),
            gbps(r.data_bytes, total),
            x(refs.map(|f| f.copy_fresh_secs.median)),
            x(refs.map(|f| f.copy_pretouched_secs.median)),
            x(refs.map(|f| f.file_write_secs.median + f.file_read_secs.median)),
            x(refs.map(|f| f.ipc_encode_secs.median + f.ipc_decode_secs.median)),
            mb(s.bytes_spilled),
            mb(s.disk_bytes),
            s.files,
            mb(s.peak_reserved),
            mb(r.rss_before),
            mb(s.peak_rss),
            bound,
            s.lock_wait_secs.show(),
        );
    }
    out.push('\n');
}

struct Target {
    what: String,
    value: f64,
    goal: f64,
    /// `true` if the value must be at most the goal, `false` if at least.
    at_most: bool,
    note: String,
}

fn targets(results: &[JobResult]) -> Vec<Target> {
    let mut targets = Vec::new();
    let mut parts: Vec<u32> = results.iter().map(|r| r.job.partitions).collect();
    parts.sort_unstable();
    parts.dedup();
    let total = |r: &JobResult| Summary::of(&r.runs).total_secs.median;
    let reads = [Some(ReadMode::Coalesced), Some(ReadMode::PassThrough)];
    for &p in &parts {
        let Some(refs) = refs_for(results, p) else {
            continue;
        };
        let fresh = refs.copy_fresh_secs.median;
        for (read, goal) in [(ReadMode::PassThrough, 0.2), (ReadMode::Coalesced, 1.5)] {
            if let Some(r) = find(results, CaseKind::Memory, p, Some(read)) {
                targets.push(Target {
                    what: format!(
                        "memory only, {} read, {p} partitions: total / fresh copy",
                        read_name(read)
                    ),
                    value: total(r) / fresh,
                    goal,
                    at_most: true,
                    note: format!("{:.3} s vs {:.3} s", total(r), fresh),
                });
            }
        }
        for case in [CaseKind::Limit50, CaseKind::Limit10] {
            for read in reads {
                let (Some(r), Some(m)) = (
                    find(results, case, p, read),
                    find(results, CaseKind::Memory, p, read),
                ) else {
                    continue;
                };
                let spilled = Summary::of(&r.runs).bytes_spilled;
                let reference = spilled as f64 / r.data_bytes as f64 * refs.disk_round_trip();
                let model = total(m) + reference;
                targets.push(Target {
                    what: format!(
                        "{}, {} read, {p} partitions: total / (memory-only total + reference cost of the spilled bytes)",
                        case.name(),
                        read.map_or("-", read_name)
                    ),
                    value: total(r) / model,
                    goal: 1.5,
                    at_most: true,
                    note: format!(
                        "{:.3} s vs {:.3} + {:.3} s ({} MB spilled)",
                        total(r),
                        total(m),
                        reference,
                        mb(spilled)
                    ),
                });
            }
        }
    }
    if parts.contains(&64) && parts.contains(&1024) {
        for case in [CaseKind::Memory, CaseKind::Limit50, CaseKind::Limit10] {
            for read in reads {
                let (Some(big), Some(small)) = (
                    find(results, case, 1024, read),
                    find(results, case, 64, read),
                ) else {
                    continue;
                };
                targets.push(Target {
                    what: format!(
                        "{}, {} read: total at 1024 / at 64 partitions",
                        case.name(),
                        read.map_or("-", read_name)
                    ),
                    value: total(big) / total(small),
                    goal: 2.0,
                    at_most: true,
                    note: format!("{:.3} s vs {:.3} s", total(big), total(small)),
                });
            }
        }
    }
    for &p in &parts {
        let Some(eager) = find(results, CaseKind::EagerDisk, p, None) else {
            continue;
        };
        let goal = if p >= 1024 { 5.0 } else { 2.0 };
        for case in [CaseKind::Memory, CaseKind::Limit50, CaseKind::Limit10] {
            for read in reads {
                let Some(r) = find(results, case, p, read) else {
                    continue;
                };
                targets.push(Target {
                    what: format!(
                        "eager disk / {}, {} read, {p} partitions",
                        case.name(),
                        read.map_or("-", read_name)
                    ),
                    value: total(eager) / total(r),
                    goal,
                    at_most: false,
                    note: format!("{:.3} s vs {:.3} s", total(eager), total(r)),
                });
            }
        }
    }
    for r in results {
        if matches!(r.job.case, CaseKind::References | CaseKind::EagerDisk) {
            continue;
        }
        let s = Summary::of(&r.runs);
        let bound = rss_bound(r);
        targets.push(Target {
            what: format!(
                "{}, {} read, {} partitions{}: peak RSS / {}",
                r.job.label(),
                read_of(r),
                r.job.partitions,
                r.scale
                    .filter(|_| r.job.case == CaseKind::Fixed)
                    .map(|s| format!(", SF {s}"))
                    .unwrap_or_default(),
                match (r.job.scatter, r.memory_limit) {
                    (true, None) => "(RSS before + 1.2 x peak reserved + 128 MiB)",
                    (true, Some(_)) => "(RSS before + limit + 10% + 64 MiB)",
                    (false, _) => "(input + limit + 10% + 64 MiB + non-input RSS before)",
                },
            ),
            value: s.peak_rss as f64 / bound as f64,
            goal: 1.0,
            at_most: true,
            note: format!("{} MB vs {} MB", mb(s.peak_rss), mb(bound)),
        });
    }
    targets
}

fn target_table(out: &mut String, results: &[JobResult]) {
    let targets = targets(results);
    if targets.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Targets:\n\n| target | value | goal | met | detail |\n|---|---|---|---|---|"
    );
    for t in targets {
        let met = if t.at_most {
            t.value <= t.goal
        } else {
            t.value >= t.goal
        };
        let _ = writeln!(
            out,
            "| {} | {:.2} | {} {} | {} | {} |",
            t.what,
            t.value,
            if t.at_most { "<=" } else { ">=" },
            t.goal,
            if met { "yes" } else { "**no**" },
            t.note
        );
    }
    out.push('\n');
}

fn scaling_table(out: &mut String, results: &[JobResult]) {
    let rows: Vec<_> = results
        .iter()
        .filter(|r| r.job.case == CaseKind::Fixed)
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Scaling (fixed limit, coalesced read; s, median (min-max)):\n\n\
         | SF | rows | data MB | limit MB | partitions | runs | write s | read s | total s | GB/s | spilled MB | disk MB | files | peak reserved MB | RSS before MB | peak RSS MB | RSS bound MB |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let s = Summary::of(&r.runs);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scale.map_or("-".into(), |s| s.to_string()),
            r.rows,
            mb(r.data_bytes),
            mb(r.memory_limit.unwrap_or(0)),
            r.job.partitions,
            r.runs.len(),
            s.write_secs.show(),
            s.read_secs.show(),
            s.total_secs.show(),
            gbps(r.data_bytes, s.total_secs.median),
            mb(s.bytes_spilled),
            mb(s.disk_bytes),
            s.files,
            mb(s.peak_reserved),
            mb(r.rss_before),
            mb(s.peak_rss),
            mb(rss_bound(r)),
        );
    }
    out.push('\n');
}

/// One JSON object per job: its raw runs and their summary.
pub(crate) fn json_lines(results: &[JobResult]) -> Vec<String> {
    results
        .iter()
        .map(|r| {
            let mut value = serde_json::to_value(r).unwrap_or_default();
            if let Some(map) = value.as_object_mut() {
                let summary = if r.job.case == CaseKind::References {
                    serde_json::to_value(RefSummary::of(&r.references))
                } else {
                    serde_json::to_value(Summary::of(&r.runs))
                };
                map.insert("summary".into(), summary.unwrap_or_default());
                map.insert("case_name".into(), r.job.label().into());
            }
            value.to_string()
        })
        .collect()
}
