//! [`sweep`]: removes spill directories left behind by crashed processes.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::dir::{
    DIR_PREFIX, MARKER_NAME, MARKER_TAG, Marker, current_uid, pid_namespace, process_start_time,
};
use crate::error::{SpillError, io_error};
use crate::fs::Fs;

/// What [`sweep`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Directories removed: their owner process is gone.
    pub removed: Vec<PathBuf>,
    /// Spill directories left alone because their owner process is alive.
    pub live: Vec<PathBuf>,
    /// Directories with our name prefix that were not touched because they lack a valid marker,
    /// are symlinks, belong to another user, or were made in another pid namespace (another
    /// container sharing the root: its pids cannot be checked from here).
    pub skipped: Vec<PathBuf>,
    /// Directories whose removal failed, with the error.
    pub failed: Vec<(PathBuf, String)>,
}

/// Removes the spill directories under `root` whose owner process has died.
///
/// Only directories of this library are candidates: a real directory (not a symlink) owned by
/// this user, named `arrow-shards-spill-*`, holding a regular marker file that records the
/// owner's pid (and start time and pid namespace). It is removed only if its owner ran in this
/// process's pid namespace and `/proc/<pid>` is gone or belongs to a different process (start
/// time differs). Nothing else under `root` is touched. Without `/proc` no process can be
/// proven dead, so nothing is removed.
pub fn sweep(root: &Path) -> Result<SweepReport, SpillError> {
    let fs = Fs::default();
    let mut report = SweepReport::default();
    let Some(uid) = current_uid() else {
        return Ok(report);
    };
    let entries = fs.read_dir(root).map_err(|e| io_error(root, root, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error(root, root, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(DIR_PREFIX) {
            continue;
        }
        let path = entry.path();
        match owner_of(&fs, &path, uid) {
            Some(Owner::Dead) => match fs.remove_dir_all(&path) {
                Ok(()) => report.removed.push(path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => report.failed.push((path, e.to_string())),
            },
            Some(Owner::Alive) => report.live.push(path),
            None => report.skipped.push(path),
        }
    }
    Ok(report)
}

enum Owner {
    Alive,
    Dead,
}

/// Whether the spill directory at `path` belongs to a live process; `None` if it is not a
/// spill directory of ours (so it must not be touched).
fn owner_of(fs: &Fs, path: &Path, uid: u32) -> Option<Owner> {
    let meta = fs.symlink_metadata(path).ok()?;
    if !meta.is_dir() || meta.uid() != uid {
        return None;
    }
    let marker = path.join(MARKER_NAME);
    let marker_meta = fs.symlink_metadata(&marker).ok()?;
    if !marker_meta.is_file() || marker_meta.uid() != uid {
        return None;
    }
    let text = String::from_utf8(fs.read_small(&marker, 256).ok()?).ok()?;
    let owner = parse_marker(&text)?;
    if owner.pid_namespace.is_some() && owner.pid_namespace != pid_namespace() {
        return None;
    }
    let proc_dir = PathBuf::from(format!("/proc/{}", owner.pid));
    if fs.symlink_metadata(&proc_dir).is_err() {
        return Some(Owner::Dead);
    }
    match (owner.start, process_start_time(&owner.pid.to_string())) {
        (Some(recorded), Some(now)) if recorded != now => Some(Owner::Dead),
        _ => Some(Owner::Alive),
    }
}

/// Parses a marker; `None` if it is not one of ours (any line out of place).
fn parse_marker(text: &str) -> Option<Marker> {
    let mut lines = text.lines();
    if lines.next()? != MARKER_TAG {
        return None;
    }
    parse_owner(lines)
}

/// Parses the owner lines of a marker (a directory's, or an object store instance's after its
/// own lines): `pid <pid>`, then optionally `start <ticks>` and `pidns <inode>`, once each;
/// `None` if any line is out of place.
pub(crate) fn parse_owner<'a>(mut lines: impl Iterator<Item = &'a str>) -> Option<Marker> {
    let pid = lines.next()?.strip_prefix("pid ")?.parse().ok()?;
    let mut marker = Marker {
        pid,
        start: None,
        pid_namespace: None,
    };
    for line in lines {
        let (key, value) = line.split_once(' ')?;
        let value = Some(value.parse().ok()?);
        match key {
            "start" if marker.start.is_none() => marker.start = value,
            "pidns" if marker.pid_namespace.is_none() => marker.pid_namespace = value,
            _ => return None,
        }
    }
    Some(marker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dir::marker_contents;

    #[test]
    fn marker_round_trips() {
        for start in [None, Some(7)] {
            for pid_namespace in [None, Some(4_026_531_836)] {
                let marker = Marker {
                    pid: 42,
                    start,
                    pid_namespace,
                };
                assert_eq!(parse_marker(&marker_contents(&marker)), Some(marker));
            }
        }
        // the first version's markers still parse
        let old = format!("{MARKER_TAG}\npid 42\nstart 7\n");
        assert_eq!(
            parse_marker(&old).map(|m| (m.pid, m.start)),
            Some((42, Some(7)))
        );
        assert_eq!(parse_marker("something else\npid 1\n"), None);
        assert_eq!(parse_marker(&format!("{MARKER_TAG}\npid x\n")), None);
        assert_eq!(
            parse_marker(&format!("{MARKER_TAG}\npid 1\nowner me\n")),
            None
        );
        assert_eq!(
            parse_marker(&format!("{MARKER_TAG}\npid 1\nstart 1\nstart 2\n")),
            None
        );
    }

    #[test]
    fn this_process_has_a_pid_namespace() {
        assert!(pid_namespace().is_some());
    }
}
