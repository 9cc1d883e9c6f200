//! The progress bar on stderr: the phase, rows (or partitions) done, the rate, bytes spilled.
//!
//! Shown only when stderr is a terminal and `--quiet` is not given; otherwise every call is a
//! no-op, so scripts, pipes and tests see clean output.

use std::io::IsTerminal;
use std::time::Duration;

use bytesize::ByteSize;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// A progress display shared by all threads (cloning shares it).
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A progress bar if `wanted` and stderr is a terminal, else a silent one.
    pub(crate) fn new(wanted: bool) -> Self {
        let bar = (wanted && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress { bar }
    }

    /// Whether anything is shown (callers skip gathering figures otherwise).
    pub(crate) fn is_shown(&self) -> bool {
        self.bar.is_some()
    }

    /// Starts the input phase, with the total row count if known.
    pub(crate) fn start_input(&self, total_rows: Option<u64>) {
        self.phase("shuffle", total_rows, "rows");
    }

    /// Starts the read-back phase over `partitions` partitions.
    pub(crate) fn start_output(&self, partitions: u32) {
        self.phase("read back", Some(u64::from(partitions)), "partitions");
    }

    fn phase(&self, name: &'static str, total: Option<u64>, unit: &str) {
        let Some(bar) = &self.bar else { return };
        let template = match total {
            Some(_) => format!(
                "{{prefix:>9}} {{elapsed_precise}} [{{wide_bar}}] {{human_pos}}/{{human_len}} {unit} ({{rate}}) {{msg}}"
            ),
            None => format!(
                "{{prefix:>9}} {{elapsed_precise}} {{spinner}} {{human_pos}} {unit} ({{rate}}) {{msg}}"
            ),
        };
        if let Ok(style) = ProgressStyle::with_template(&template) {
            let style = style.progress_chars("=> ").with_key(
                "rate",
                |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}/s", state.per_sec());
                },
            );
            bar.set_style(style);
        }
        bar.reset();
        bar.set_prefix(name);
        match total {
            Some(total) => bar.set_length(total),
            None => bar.unset_length(),
        }
    }

    /// Counts `n` more rows or partitions done.
    pub(crate) fn advance(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
    }

    /// Shows how much the buffer has spilled so far.
    pub(crate) fn spilled(&self, bytes: u64) {
        if let Some(bar) = &self.bar
            && bytes > 0
        {
            bar.set_message(format!("spilled {}", ByteSize(bytes).display().iec()));
        }
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
