//! Comparing a file's run without the rule with its run with it: a [`Verdict`] for the file
//! and a [`Difference`] for each record that passes without the rule and fails with it.

use crate::run::{FileRun, RecordError, RunEnd};

/// What the two runs of a file say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    /// Passes without the rule and with it.
    Same,
    /// Passes without the rule; with it, only `EXPLAIN` records fail.
    PlanTextOnly,
    /// Passes without the rule; with it, some other record fails, or the run hangs, panics
    /// or leaves the config changed: a bug to explain.
    Different,
    /// Fails without the rule already (out of scope; its differences are still listed).
    FailsWithoutRule,
    /// `TestContext` skips the file in this build.
    Skipped,
}

impl Verdict {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::PlanTextOnly => "plan text only",
            Verdict::Different => "DIFFERENT",
            Verdict::FailsWithoutRule => "fails without rule",
            Verdict::Skipped => "skipped",
        }
    }
}

/// What kind of difference a record shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An `EXPLAIN` whose only change is `ShardRepartitionExec` in place of `RepartitionExec`.
    ExchangeName,
    /// Another change in an `EXPLAIN` (metrics, tree rendering, ...).
    PlanText,
    /// The same rows in another order.
    RowOrder,
    /// Anything else: other rows, an error, a statement failing.
    Other,
}

impl Kind {
    pub(crate) fn is_plan(self) -> bool {
        matches!(self, Kind::ExchangeName | Kind::PlanText)
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::ExchangeName => "EXPLAIN, exchange name only",
            Kind::PlanText => "EXPLAIN, other plan text",
            Kind::RowOrder => "row order only",
            Kind::Other => "other",
        }
    }
}

/// A record that passes without the rule and fails with it, or a file-level failure of the
/// run with the rule (`location` empty).
#[derive(Debug, Clone)]
pub(crate) struct Difference {
    pub(crate) location: String,
    pub(crate) kind: Kind,
    pub(crate) message: String,
}

/// The comparison of a file's two runs.
#[derive(Debug, Clone)]
pub(crate) struct Comparison {
    pub(crate) verdict: Verdict,
    pub(crate) differences: Vec<Difference>,
}

impl Comparison {
    /// Differences that are not plan text.
    pub(crate) fn real(&self) -> impl Iterator<Item = &Difference> {
        self.differences.iter().filter(|d| !d.kind.is_plan())
    }

    /// How many differences are plan text.
    pub(crate) fn plan_count(&self) -> usize {
        self.differences.iter().filter(|d| d.kind.is_plan()).count()
    }
}

/// Compares the run without the rule (`plain`) with the run with it (`rule`).
pub(crate) fn compare(plain: &FileRun, rule: &FileRun) -> Comparison {
    let mut differences = Vec::new();
    // both runs go through the same parsed records, so they align by index
    for (before, after) in plain.records.iter().zip(&rule.records) {
        if let (None, Some(error)) = (&before.error, &after.error) {
            differences.push(Difference {
                location: after.location.clone(),
                kind: kind_of(&after.sql, error),
                message: error.message.clone(),
            });
        }
    }
    let file_level = match &rule.end {
        _ if rule.end == plain.end => None,
        RunEnd::TimedOut => Some("timed out".to_string()),
        RunEnd::Panicked(message) => Some(format!("panicked: {message}")),
        RunEnd::Setup(message) => Some(format!("setup failed: {message}")),
        RunEnd::Skipped | RunEnd::Finished => None,
    };
    let file_level = file_level.or_else(|| {
        rule.config_changed
            .as_ref()
            .filter(|_| plain.config_changed.is_none())
            .map(|message| format!("config changed: {message}"))
    });
    if let Some(message) = file_level {
        differences.push(Difference {
            location: String::new(),
            kind: Kind::Other,
            message,
        });
    }

    let verdict = if plain.end == RunEnd::Skipped {
        Verdict::Skipped
    } else if !plain.passed() {
        Verdict::FailsWithoutRule
    } else if rule.passed() {
        Verdict::Same
    } else if !differences.is_empty() && differences.iter().all(|d| d.kind.is_plan()) {
        Verdict::PlanTextOnly
    } else {
        Verdict::Different
    };
    Comparison {
        verdict,
        differences,
    }
}

fn kind_of(sql: &str, error: &RecordError) -> Kind {
    let explain = sql
        .trim_start()
        .get(..7)
        .is_some_and(|word| word.eq_ignore_ascii_case("explain"));
    match (&error.mismatch, explain) {
        (Some((expected, actual)), true) => {
            if *expected == actual.replace("ShardRepartitionExec", "RepartitionExec") {
                Kind::ExchangeName
            } else {
                Kind::PlanText
            }
        }
        (None, true) => Kind::PlanText,
        (Some((expected, actual)), false) if sorted_lines(expected) == sorted_lines(actual) => {
            Kind::RowOrder
        }
        _ => Kind::Other,
    }
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    lines.sort_unstable();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::RecordOutcome;

    fn record(sql: &str, error: Option<(&str, &str)>) -> RecordOutcome {
        RecordOutcome {
            location: "t.slt:1".into(),
            sql: sql.into(),
            error: error.map(|(expected, actual)| RecordError {
                message: "mismatch".into(),
                mismatch: Some((expected.into(), actual.into())),
            }),
        }
    }

    fn finished(records: Vec<RecordOutcome>) -> FileRun {
        FileRun {
            end: RunEnd::Finished,
            records,
            config_changed: None,
        }
    }

    #[test]
    fn explain_with_the_exchange_renamed_is_plan_text() {
        let plain = finished(vec![record("EXPLAIN SELECT 1", None)]);
        let rule = finished(vec![record(
            "explain select 1",
            Some((
                "RepartitionExec: partitioning=RoundRobinBatch(4)",
                "ShardRepartitionExec: partitioning=RoundRobinBatch(4)",
            )),
        )]);
        let comparison = compare(&plain, &rule);
        assert_eq!(comparison.verdict, Verdict::PlanTextOnly);
        assert_eq!(comparison.differences[0].kind, Kind::ExchangeName);
    }

    #[test]
    fn other_rows_are_different_and_reordered_rows_are_marked() {
        let plain = finished(vec![record("SELECT a", None), record("SELECT b", None)]);
        let rule = finished(vec![
            record("SELECT a", Some(("1\n2", "2\n1"))),
            record("SELECT b", Some(("1\n2", "1\n3"))),
        ]);
        let comparison = compare(&plain, &rule);
        assert_eq!(comparison.verdict, Verdict::Different);
        let kinds: Vec<Kind> = comparison.differences.iter().map(|d| d.kind).collect();
        assert_eq!(kinds, [Kind::RowOrder, Kind::Other]);
    }

    #[test]
    fn a_hang_with_the_rule_is_different() {
        let plain = finished(vec![record("SELECT a", None)]);
        let rule = FileRun {
            end: RunEnd::TimedOut,
            records: vec![],
            config_changed: None,
        };
        assert_eq!(compare(&plain, &rule).verdict, Verdict::Different);
    }
}
