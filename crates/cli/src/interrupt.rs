//! Ctrl-C: SIGINT and SIGTERM become a flag the shuffle's threads poll at every batch.
//!
//! [`Interrupt::install`] registers both signals with signal-hook (its `flag` module: the
//! handler only stores the signal's number in an atomic, so no code of ours runs in the
//! handler and nothing here needs `unsafe`). The threads call [`Interrupt::check`] between
//! batches; the first call after a signal returns [`CliError::Interrupted`], which unwinds the
//! run like any error: the output directory's temporary files and the buffer's spill directory
//! are removed on the way out, and `main` exits with 128 + the signal's number (130, 143).
//! A second signal while that clean-up runs ends the process at once, with the same status.
//!
//! # Test pause points
//! With `ARROW_SHARDS_PAUSE_AT=input|spill|stream|output` in the environment (for the tests,
//! not documented in `--help`), the run prints `arrow-shards: paused at PHASE` on stderr when it
//! first reaches that point (the first input batch read, the first spill file on disk, the
//! first batch written to an output file while the input runs, the first output file
//! complete) and waits there for a signal, so a test can signal it at a
//! known point without any timing assumption.
//!
//! # Locking
//! No locks: two atomics written by the signal handlers, read by any thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};

use crate::error::CliError;

/// The environment variable naming the test pause point.
const PAUSE_VAR: &str = "ARROW_SHARDS_PAUSE_AT";

/// A point of the run where a test may pause it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PausePoint {
    /// The first input batch has been read.
    Input,
    /// The first spill file is on disk.
    Spill,
    /// The first batch is written to an output file while the input is still read.
    Stream,
    /// The first output file is complete (under its temporary name).
    Output,
}

impl PausePoint {
    fn name(self) -> &'static str {
        match self {
            PausePoint::Input => "input",
            PausePoint::Spill => "spill",
            PausePoint::Stream => "stream",
            PausePoint::Output => "output",
        }
    }
}

/// The signal flag, shared by every thread (cloning shares it).
#[derive(Debug, Clone)]
pub(crate) struct Interrupt {
    /// The number of the first signal received, 0 while none.
    signal: Arc<AtomicUsize>,
    /// Set by any signal: a second one then exits at once.
    any: Arc<AtomicBool>,
    /// Where a test asked the run to pause, and whether it has paused there yet.
    pause: Option<(PausePoint, Arc<AtomicBool>)>,
}

impl Interrupt {
    /// Registers the SIGINT and SIGTERM handlers (for the life of the process).
    pub(crate) fn install() -> Result<Self, CliError> {
        let interrupt = Interrupt::unregistered(pause_point_from_env());
        for signal in [SIGINT, SIGTERM] {
            let status = exit_status(signal);
            // Registered first, so it sees the flag as the previous signal left it.
            signal_hook::flag::register_conditional_shutdown(
                signal,
                status,
                Arc::clone(&interrupt.any),
            )
            .and_then(|_| {
                signal_hook::flag::register_usize(
                    signal,
                    Arc::clone(&interrupt.signal),
                    usize::try_from(signal).unwrap_or_default(),
                )
            })
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&interrupt.any)))
            .map_err(|e| CliError::Internal(format!("cannot handle signal {signal}: {e}")))?;
        }
        Ok(interrupt)
    }

    /// A flag no signal sets (unit tests).
    pub(crate) fn unregistered(pause: Option<PausePoint>) -> Self {
        Interrupt {
            signal: Arc::new(AtomicUsize::new(0)),
            any: Arc::new(AtomicBool::new(false)),
            pause: pause.map(|p| (p, Arc::new(AtomicBool::new(false)))),
        }
    }

    /// [`CliError::Interrupted`] once a signal has arrived.
    pub(crate) fn check(&self) -> Result<(), CliError> {
        match i32::try_from(self.signal.load(Ordering::Relaxed)) {
            Ok(0) | Err(_) => Ok(()),
            Ok(signal) => Err(CliError::Interrupted {
                signal: signal_name(signal),
                status: exit_status(signal),
            }),
        }
    }

    /// Whether a test asked to pause at `point` (callers skip gathering figures otherwise).
    pub(crate) fn pauses_at(&self, point: PausePoint) -> bool {
        self.pause.as_ref().is_some_and(|(p, _)| *p == point)
    }

    /// At the test pause point `point`, the first time: says so on stderr and waits for a
    /// signal, then reports it. Elsewhere (and always without the variable) just [`check`]s.
    ///
    /// [`check`]: Self::check
    pub(crate) fn pause(&self, point: PausePoint) -> Result<(), CliError> {
        if let Some((wanted, paused)) = &self.pause
            && *wanted == point
            && !paused.swap(true, Ordering::Relaxed)
        {
            eprintln!("arrow-shards: paused at {}", point.name());
            while self.signal.load(Ordering::Relaxed) == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.check()
    }
}

impl Interrupt {
    /// With the test pause point `point`, waits for a signal without a marker, then reports
    /// it: a thread that must not run ahead waits here while another reaches `point`
    /// (`stream`: the input threads after their first write, so that an output thread
    /// writes a batch while the input is still read). Elsewhere just [`check`](Self::check)s.
    pub(crate) fn hold_for(&self, point: PausePoint) -> Result<(), CliError> {
        if self.pauses_at(point) {
            while self.signal.load(Ordering::Relaxed) == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.check()
    }
}

fn pause_point_from_env() -> Option<PausePoint> {
    match std::env::var(PAUSE_VAR).ok()?.as_str() {
        "input" => Some(PausePoint::Input),
        "spill" => Some(PausePoint::Spill),
        "stream" => Some(PausePoint::Stream),
        "output" => Some(PausePoint::Output),
        _ => None,
    }
}

/// The exit status for `signal`: 128 + its number, as shells report it.
fn exit_status(signal: i32) -> i32 {
    128 + signal
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_signal_no_error() {
        let interrupt = Interrupt::unregistered(None);
        assert!(interrupt.check().is_ok());
        assert!(interrupt.pause(PausePoint::Input).is_ok());
        assert!(!interrupt.pauses_at(PausePoint::Spill));
    }

    #[test]
    fn a_signal_is_reported_with_its_exit_status() {
        let interrupt = Interrupt::unregistered(Some(PausePoint::Output));
        interrupt.signal.store(SIGTERM as usize, Ordering::Relaxed);
        match interrupt.pause(PausePoint::Output) {
            Err(CliError::Interrupted { signal, status }) => {
                assert_eq!((signal, status), ("SIGTERM", 143));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(exit_status(SIGINT), 130);
    }
}
