//! The results: `results.tsv` (one row a file), `differences.md` (every record that differs,
//! real differences first) and the counts printed at the end.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use crate::compare::{Comparison, Verdict};
use crate::run::{FileRun, RunEnd};

/// The outcome of one file: its two runs and their comparison.
#[derive(Debug)]
pub(crate) struct FileResult {
    pub(crate) file: String,
    pub(crate) plain: FileRun,
    pub(crate) rule: FileRun,
    pub(crate) comparison: Comparison,
}

/// A run's outcome as a table cell.
pub(crate) fn outcome(run: &FileRun) -> String {
    match &run.end {
        RunEnd::Skipped => "skip".into(),
        RunEnd::TimedOut => format!("timeout after {} records", run.records.len()),
        RunEnd::Panicked(_) => "panic".into(),
        RunEnd::Setup(_) => "setup error".into(),
        RunEnd::Finished if run.passed() => "pass".into(),
        RunEnd::Finished if run.failures() == 0 => "fail (config changed)".into(),
        RunEnd::Finished => format!("fail ({} of {})", run.failures(), run.records.len()),
    }
}

/// One `results.tsv` row.
pub(crate) fn table_row(result: &FileResult) -> String {
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}",
        result.file,
        outcome(&result.plain),
        outcome(&result.rule),
        result.comparison.verdict.label(),
        result.comparison.plan_count(),
        result.comparison.real().count(),
    )
}

pub(crate) const TABLE_HEADER: &str =
    "file\twithout rule\twith rule\tverdict\tEXPLAIN differences\tother differences";

/// Writes `results.tsv` and `differences.md` into `out` and returns the counts.
pub(crate) fn write(out: &Path, results: &[FileResult]) -> io::Result<String> {
    let mut table = String::from(TABLE_HEADER);
    table.push('\n');
    for result in results {
        table.push_str(&table_row(result));
        table.push('\n');
    }
    std::fs::write(out.join("results.tsv"), table)?;
    std::fs::write(out.join("differences.md"), differences(results))?;
    Ok(counts(results))
}

/// The counts: files by verdict, and records that differ by kind.
pub(crate) fn counts(results: &[FileResult]) -> String {
    let mut verdicts: BTreeMap<Verdict, usize> = BTreeMap::new();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for result in results {
        *verdicts.entry(result.comparison.verdict).or_default() += 1;
        for difference in &result.comparison.differences {
            *kinds.entry(difference.kind.label()).or_default() += 1;
        }
    }
    let mut text = format!("{} files\n", results.len());
    for (verdict, n) in &verdicts {
        let _ = writeln!(text, "  {:<20} {n}", verdict.label());
    }
    let with_rule_fails_too = results
        .iter()
        .filter(|r| r.comparison.verdict == Verdict::FailsWithoutRule && !r.rule.passed())
        .count();
    let _ = writeln!(
        text,
        "  (of the files failing without the rule, {with_rule_fails_too} fail with it too)"
    );
    let _ = writeln!(text, "records passing without the rule, failing with it:");
    for (kind, n) in &kinds {
        let _ = writeln!(text, "  {kind:<28} {n}");
    }
    let real_in_failing = results
        .iter()
        .filter(|r| r.comparison.verdict == Verdict::FailsWithoutRule)
        .map(|r| r.comparison.real().count())
        .sum::<usize>();
    let _ = writeln!(
        text,
        "  (non-EXPLAIN ones in files failing without the rule anyway: {real_in_failing})"
    );
    text
}

fn differences(results: &[FileResult]) -> String {
    let mut text =
        String::from("# Records that pass without ShardRepartitionRule and fail with it\n");
    let sections = [
        (
            Verdict::Different,
            "Files that pass without the rule: real differences",
        ),
        (
            Verdict::FailsWithoutRule,
            "Files that fail without the rule too: their other differences",
        ),
    ];
    for (verdict, title) in sections {
        let _ = write!(text, "\n## {title}\n");
        for result in results.iter().filter(|r| r.comparison.verdict == verdict) {
            let real: Vec<_> = result.comparison.real().collect();
            if real.is_empty() {
                continue;
            }
            let _ = write!(text, "\n### {}\n", result.file);
            for difference in real {
                let _ = write!(
                    text,
                    "\n- `{}` ({})\n\n```\n{}\n```\n",
                    if difference.location.is_empty() {
                        "the file"
                    } else {
                        &difference.location
                    },
                    difference.kind.label(),
                    clip(&difference.message, 60),
                );
            }
        }
    }
    let _ = write!(text, "\n## EXPLAIN differences (plan text)\n\n");
    for result in results {
        let plan: Vec<_> = result
            .comparison
            .differences
            .iter()
            .filter(|d| d.kind.is_plan())
            .collect();
        if plan.is_empty() {
            continue;
        }
        let _ = writeln!(text, "- {}: {} records", result.file, plan.len());
        for difference in plan {
            let _ = writeln!(
                text,
                "  - `{}` ({})",
                difference.location,
                difference.kind.label()
            );
        }
    }
    text
}

/// The first `lines` lines of `text`, with a note of how many were left out.
fn clip(text: &str, lines: usize) -> String {
    let total = text.lines().count();
    let mut clipped: String = text.lines().take(lines).collect::<Vec<_>>().join("\n");
    if total > lines {
        let _ = write!(clipped, "\n... {} more lines", total - lines);
    }
    clipped.replace("```", "'''")
}
