//! Crash leftovers: the first buffer built over a spill root in a process sweeps it, removing
//! the spill directories of processes that died without cleaning up (killed, crashed, out of
//! memory). `arrow_shards_spill::sweep` decides what is ours and dead; everything else under
//! the root is left alone.
//!
//! # Locking
//! One process-wide `Mutex<HashSet<PathBuf>>` of the roots already swept, held only to check
//! and insert a root, never during the sweep itself (which reads and removes directories).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, PoisonError};

static SWEPT: LazyLock<Mutex<HashSet<PathBuf>>> = LazyLock::new(Mutex::default);

/// Sweeps `root` unless this process has already done so. Best effort: a root that cannot be
/// read (missing, no permission) is not an error here; creating the buffer's own spill
/// directory reports such problems clearly.
pub(crate) fn sweep_once(root: &Path) {
    let first = SWEPT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(root.to_path_buf());
    if first {
        let _ = arrow_shards_spill::sweep(root);
    }
}
