//! Running one piece of work on several scoped threads, stopping them all at the first error
//! or signal.
//!
//! # Locking
//! No locks: the shared flags ([`Control`]) are atomics the workers poll between batches.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::CliError;
use crate::interrupt::Interrupt;
use crate::progress::Progress;

/// What every worker looks at between batches: the stop flag, the signal flag, the progress bar.
pub(crate) struct Control {
    stop: AtomicBool,
    /// Ctrl-C and the test pause points.
    pub(crate) interrupt: Interrupt,
    /// The progress display.
    pub(crate) progress: Progress,
}

impl Control {
    /// Fresh flags.
    pub(crate) fn new(interrupt: Interrupt, progress: Progress) -> Self {
        Control {
            stop: AtomicBool::new(false),
            interrupt,
            progress,
        }
    }

    /// Asks every worker to stop at its next batch (a step outside the workers failed).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether to go on with the next batch: `false` once another worker failed, the
    /// interruption once a signal arrived.
    pub(crate) fn go_on(&self) -> Result<bool, CliError> {
        self.interrupt.check()?;
        Ok(!self.stop.load(Ordering::Relaxed))
    }
}

/// Runs `work` on `threads` scoped threads; all results, or the first error (an interruption
/// before any other). An error (or a panic, reported as an error) raises the stop flag so the
/// other threads finish early.
pub(crate) fn on_threads<T: Send>(
    threads: u32,
    control: &Control,
    work: impl Fn() -> Result<T, CliError> + Sync,
) -> Result<Vec<T>, CliError> {
    let stop = &control.stop;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let result = work();
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    result
                })
            })
            .collect();
        let mut results = Vec::with_capacity(handles.len());
        let mut first_error = None;
        for handle in handles {
            match handle.join() {
                Ok(Ok(value)) => results.push(value),
                Ok(Err(e)) => {
                    // An interruption is the error to report: the others follow from it.
                    if matches!(e, CliError::Interrupted { .. }) || first_error.is_none() {
                        first_error = Some(e);
                    }
                }
                Err(_) => {
                    stop.store(true, Ordering::Relaxed);
                    first_error
                        .get_or_insert(CliError::Internal("a worker thread panicked".into()));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(results),
        }
    })
}
