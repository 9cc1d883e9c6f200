//! [`SpillDir`]: the private directory that holds one process's run files.
//!
//! # Locking
//!
//! A `SpillDir` is shared (`Arc`) by its run writers and by every run file, and so by every
//! [`SegmentRef`](crate::SegmentRef). Its state is atomics only (the closed flag, the file
//! counter and the metrics, which the quota is checked against); no lock is held across I/O.
//! The fault plan (`test-utils`) has its own short-lived mutex, see `fs.rs`.

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use arrow_array::RecordBatch;

use crate::decode::{Fault, IndexEntry};
use crate::error::{SpillError, io_error};
use crate::fs::Fs;
use crate::metrics::{Counters, SpillMetrics};
use crate::read::read_local_segment;
use crate::storage::SpillStorage;
use crate::storage::sealed::{self, RunSink};

/// Prefix of every spill directory's name.
pub(crate) const DIR_PREFIX: &str = "arrow-shards-spill-";
/// Name of the marker file that identifies a spill directory and its owner process.
pub(crate) const MARKER_NAME: &str = ".arrow-shards-spill";
/// First line of the marker file.
pub(crate) const MARKER_TAG: &str = "arrow-shards-spill 1";

/// A private directory of run files, removed on [`SpillDir::close`] or drop.
///
/// `create` makes a new directory under the given root with a unique name, mode 0700, and a
/// marker file recording the owning process, so that [`sweep`](crate::sweep) can later remove
/// it if this process crashes. Run files inside are named by a counter; nothing the caller
/// supplies ever becomes part of a path. [`SpillDir::run_writer`] starts a run.
///
/// With a quota ([`SpillDir::create_with_quota`]) a write that would take the run files past
/// it fails as a full disk does ([`SpillError::DiskFull`]), so a caller with another storage
/// tier can move the run there.
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
    pub(crate) fs: Arc<Fs>,
    pub(crate) counters: Arc<Counters>,
    quota: Option<u64>,
    closed: AtomicBool,
    next_file: AtomicU64,
}

// `run_writer` is in `writer.rs`, so that the writer depends on the directory and not both ways.
impl SpillDir {
    /// Creates a new private spill directory under `root` (typically `std::env::temp_dir()`).
    ///
    /// Refuses a `root` that is a symlink owned by neither this user nor root, and a created
    /// directory that turns out not to be a plain directory owned by this user.
    pub fn create(root: &Path) -> Result<Arc<SpillDir>, SpillError> {
        Self::create_with_quota(root, None)
    }

    /// As [`SpillDir::create`], with a limit on the bytes of run files in the directory at any
    /// time (`None`: as much as the filesystem holds).
    ///
    /// The quota is checked before each write against the bytes of the run files that exist;
    /// a write past it fails with [`SpillError::DiskFull`] (an `io::ErrorKind::QuotaExceeded`
    /// source) and the run is discarded. Writers running at once may each overshoot it by one
    /// write (at most 64 MiB, the largest write). A quota of 0 refuses every run.
    pub fn create_with_quota(root: &Path, quota: Option<u64>) -> Result<Arc<SpillDir>, SpillError> {
        let fs = Arc::new(Fs::default());
        let io_root = |source| io_error(root, root, source);
        let root_meta = fs.symlink_metadata(root).map_err(io_root)?;
        let uid = current_uid();
        if root_meta.file_type().is_symlink() {
            let owner = root_meta.uid();
            if owner != 0 && Some(owner) != uid {
                return Err(SpillError::UnsafePath {
                    path: root.to_path_buf(),
                    reason: format!("it is a symlink owned by another user (uid {owner})"),
                });
            }
        }

        let pid = std::process::id();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut attempt = 0;
        let path = loop {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = root.join(format!("{DIR_PREFIX}{pid}-{nanos:x}-{n}"));
            match fs.create_private_dir(&path) {
                Ok(()) => break path,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => {
                    attempt += 1;
                }
                Err(e) => return Err(io_error(root, &path, e)),
            }
        };

        let dir = SpillDir {
            path,
            fs,
            counters: Arc::default(),
            quota,
            closed: AtomicBool::new(false),
            next_file: AtomicU64::new(0),
        };
        // From here on, dropping `dir` removes the directory.
        dir.secure()?;
        Ok(Arc::new(dir))
    }

    /// Checks the new directory is ours and not a symlink, forces mode 0700 (the umask may
    /// have narrowed it; it never widens it) and writes the marker.
    fn secure(&self) -> Result<(), SpillError> {
        let path = &self.path;
        let handle: File = self.fs.open_dir(path).map_err(|e| SpillError::UnsafePath {
            path: path.clone(),
            reason: format!("cannot open it as a directory without following symlinks: {e}"),
        })?;
        let meta = handle.metadata().map_err(|e| io_error(path, path, e))?;
        if !meta.is_dir() {
            return Err(SpillError::UnsafePath {
                path: path.clone(),
                reason: "not a directory".into(),
            });
        }
        if let Some(uid) = current_uid()
            && meta.uid() != uid
        {
            return Err(SpillError::UnsafePath {
                path: path.clone(),
                reason: format!("owned by uid {}, not by this user", meta.uid()),
            });
        }
        self.fs
            .set_mode(&handle, 0o700)
            .map_err(|e| io_error(path, path, e))?;
        drop(handle);

        let marker = path.join(MARKER_NAME);
        let mut file = self
            .fs
            .create_file(&marker)
            .map_err(|e| io_error(path, &marker, e))?;
        let contents = marker_contents(&Marker {
            pid: std::process::id(),
            start: process_start_time("self"),
            pid_namespace: pid_namespace(),
        });
        self.fs
            .write_all(&mut file, contents.as_bytes())
            .map_err(|e| io_error(path, &marker, e))?;
        Ok(())
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A snapshot of the directory's counters.
    pub fn metrics(&self) -> SpillMetrics {
        self.counters.snapshot()
    }

    /// Removes the directory and every file in it. Idempotent.
    ///
    /// Afterwards run writers fail with [`SpillError::Closed`] and so does
    /// [`SegmentRef::read`](crate::SegmentRef::read); existing `SegmentRef`s can still be
    /// dropped.
    pub fn close(&self) -> Result<(), SpillError> {
        self.closed.store(true, Ordering::Release);
        match self.fs.remove_dir_all(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(&self.path, &self.path, e)),
        }
    }

    /// True once [`SpillDir::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Installs a fault plan for this directory's file operations; returns the previous one.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn set_fault_plan(&self, plan: crate::FaultPlan) -> Option<crate::FaultPlan> {
        self.fs.set_fault_plan(Some(plan))
    }

    /// Removes the fault plan and returns it (with its operation counts).
    #[cfg(any(test, feature = "test-utils"))]
    pub fn take_fault_plan(&self) -> Option<crate::FaultPlan> {
        self.fs.set_fault_plan(None)
    }

    /// The byte quota given to [`SpillDir::create_with_quota`].
    pub fn quota(&self) -> Option<u64> {
        self.quota
    }

    /// The path of a new run file.
    fn next_file_path(&self) -> PathBuf {
        let n = self.next_file.fetch_add(1, Ordering::Relaxed);
        self.path.join(format!("{n:08}.run"))
    }
}

impl SpillStorage for SpillDir {
    fn location(&self) -> &Path {
        &self.path
    }

    fn metrics(&self) -> SpillMetrics {
        SpillDir::metrics(self)
    }

    fn close(&self) -> Result<(), SpillError> {
        SpillDir::close(self)
    }

    fn is_closed(&self) -> bool {
        SpillDir::is_closed(self)
    }
}

#[expect(
    private_interfaces,
    reason = "sealed: the working half of `SpillStorage` speaks the crate's private types"
)]
impl sealed::Storage for SpillDir {
    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn create_run(&self) -> Result<(PathBuf, Box<dyn RunSink>), SpillError> {
        let path = self.next_file_path();
        let file = self
            .fs
            .create_file(&path)
            .map_err(|e| io_error(&self.path, &path, e))?;
        let sink = LocalRunFile {
            dir: self.path.clone(),
            path: path.clone(),
            file,
            fs: Arc::clone(&self.fs),
            counters: Arc::clone(&self.counters),
            quota: self.quota,
        };
        Ok((path, Box::new(sink)))
    }

    fn read_segment(&self, location: &Path, entry: &IndexEntry) -> Result<Vec<RecordBatch>, Fault> {
        read_local_segment(&self.fs, location, entry)
    }

    fn remove_run(&self, location: &Path) {
        // After `close` the file is already gone; any other failure leaves the file to the
        // directory's removal.
        let _ = self.fs.remove_file(location);
    }

    fn trusted(&self) -> bool {
        true
    }

    fn closed_error(&self) -> SpillError {
        SpillError::Closed {
            dir: self.path.clone(),
        }
    }
}

/// A run file being written in a [`SpillDir`].
#[derive(Debug)]
struct LocalRunFile {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    fs: Arc<Fs>,
    counters: Arc<Counters>,
    quota: Option<u64>,
}

impl LocalRunFile {
    /// Refuses a write of `bytes` that would take the directory past its quota.
    fn check_quota(&self, bytes: usize) -> Result<(), SpillError> {
        let Some(quota) = self.quota else {
            return Ok(());
        };
        let on_disk = self.counters.bytes_on_disk.load(Ordering::Relaxed);
        if on_disk.saturating_add(bytes as u64) > quota {
            let source = io::Error::new(
                io::ErrorKind::QuotaExceeded,
                format!(
                    "the spill directory's quota of {quota} bytes is reached ({on_disk} bytes in \
                     run files, {bytes} more to write)"
                ),
            );
            return Err(io_error(&self.dir, &self.path, source));
        }
        Ok(())
    }
}

impl RunSink for LocalRunFile {
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SpillError> {
        self.check_quota(bytes.len())?;
        self.fs
            .write_all(&mut self.file, bytes)
            .map_err(|e| io_error(&self.dir, &self.path, e))
    }

    fn write_all_vectored(&mut self, slices: &mut [IoSlice<'_>]) -> Result<(), SpillError> {
        self.check_quota(slices.iter().map(|s| s.len()).sum())?;
        self.fs
            .write_all_vectored(&mut self.file, slices)
            .map_err(|e| io_error(&self.dir, &self.path, e))
    }

    fn finish(&mut self, sync: bool) -> Result<(), SpillError> {
        if sync {
            self.fs
                .sync(&self.file)
                .map_err(|e| io_error(&self.dir, &self.path, e))?;
        }
        Ok(())
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        if !self.is_closed() {
            // best effort: an error here has nobody to report to; `sweep` is the fallback
            let _ = self.close();
        }
    }
}

/// What a spill directory's marker says about its owner process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker {
    pub(crate) pid: u32,
    /// See [`process_start_time`]; absent when `/proc` could not be read.
    pub(crate) start: Option<u64>,
    /// See [`pid_namespace`]; absent in markers of older versions or without `/proc`.
    pub(crate) pid_namespace: Option<u64>,
}

/// The marker file's text: the tag line, `pid <pid>`, then `start <ticks>` and
/// `pidns <inode>` when known.
pub(crate) fn marker_contents(marker: &Marker) -> String {
    let mut text = format!("{MARKER_TAG}\npid {}\n", marker.pid);
    if let Some(start) = marker.start {
        text.push_str(&format!("start {start}\n"));
    }
    if let Some(ns) = marker.pid_namespace {
        text.push_str(&format!("pidns {ns}\n"));
    }
    text
}

/// The inode of this process's pid namespace (`/proc/self/ns/pid` links to `pid:[<inode>]`).
/// A pid only names a process within its namespace: `sweep` leaves alone the directories of
/// processes in another one (another container sharing the spill root), whose pids it cannot
/// check.
pub(crate) fn pid_namespace() -> Option<u64> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let link = link.to_str()?;
    link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// The effective uid of this process: the owner of `/proc/self`.
pub(crate) fn current_uid() -> Option<u32> {
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Start time of process `pid` ("self" or a number) in clock ticks since boot, field 22 of
/// `/proc/<pid>/stat`; with the pid it identifies a process even after the pid is reused.
pub(crate) fn process_start_time(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name (field 2) is in parentheses and may itself contain ") "
    let rest = &stat[stat.rfind(')')? + 1..];
    // fields from 3 on; starttime is field 22
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_self_is_known_and_stable() {
        let a = process_start_time("self");
        assert!(a.is_some());
        assert_eq!(a, process_start_time(&std::process::id().to_string()));
    }
}
