//! Resident memory from `/proc/self/status` (Linux only; zeros elsewhere).
//!
//! `VmHWM` is the peak resident set of the whole process and only grows, so each case runs in a
//! child process of its own (see `main.rs`), and the peak is reset (writing `5` to
//! `/proc/self/clear_refs`) after the input is prepared, so it does not include the transient
//! memory of generating and partitioning the input.

/// Current resident bytes (`VmRSS`).
pub(crate) fn rss() -> u64 {
    field("VmRSS:")
}

/// Peak resident bytes since start or the last [`reset_peak`] (`VmHWM`).
pub(crate) fn peak_rss() -> u64 {
    field("VmHWM:")
}

/// Resets `VmHWM` to the current resident size. Returns whether the kernel allowed it.
pub(crate) fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The soft limit on open files, if known.
pub(crate) fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn field(name: &str) -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
