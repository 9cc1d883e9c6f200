//! Every filesystem operation of the crate goes through [`Fs`], so that tests can inject faults
//! in one place (feature `test-utils`, [`FaultPlan`]).
//!
//! Files are created new (`O_CREAT|O_EXCL`) with mode 0600, directories with mode 0700, and no
//! open follows a symlink (`O_NOFOLLOW`).
//!
//! # Locking
//!
//! With `test-utils`, [`Fs`] holds the fault plan in a `Mutex` that is taken only to count an
//! operation and decide whether it fails; it is never held across the I/O itself.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::Path;

/// The kinds of filesystem operation, for fault injection.
//
// Every operation of `Fs` names its kind; without `test-utils` the kind goes unused (and the
// type is not exported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    not(any(test, feature = "test-utils")),
    expect(
        unreachable_pub,
        reason = "public only with test-utils, where lib.rs re-exports it"
    )
)]
pub enum FsOp {
    /// Creating a run file.
    CreateFile,
    /// Opening a run file for reading.
    Open,
    /// One `write_all` or `write_all_vectored` call on a run file.
    Write,
    /// `fdatasync` of a run file.
    Sync,
    /// One positioned read (`read_exact_at`) of a run file.
    Read,
    /// Removing a run file or the spill directory.
    Remove,
}

#[cfg(any(test, feature = "test-utils"))]
#[derive(Debug, Clone, Copy)]
struct FaultRule {
    op: FsOp,
    first: u64,
    repeat: bool,
    error: fn() -> io::Error,
}

/// Makes chosen filesystem operations of one [`SpillDir`](crate::SpillDir) fail, for tests of
/// error paths. Operations are counted per kind from 1, from the moment the plan is installed
/// with [`SpillDir::set_fault_plan`](crate::SpillDir::set_fault_plan).
///
/// ```
/// use std::io;
/// use arrow_shards_spill::{FaultPlan, FsOp};
/// // the third write fails as if the disk were full, and so does every later one
/// let plan = FaultPlan::new()
///     .fail_from(FsOp::Write, 3, || io::Error::from_raw_os_error(28));
/// # let _ = plan;
/// ```
#[cfg(any(test, feature = "test-utils"))]
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    rules: Vec<FaultRule>,
    counts: std::collections::HashMap<FsOp, u64>,
}

#[cfg(any(test, feature = "test-utils"))]
impl FaultPlan {
    /// A plan that injects nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `nth` (1-based) operation of kind `op` fails with `error()`.
    pub fn fail_nth(mut self, op: FsOp, nth: u64, error: fn() -> io::Error) -> Self {
        self.rules.push(FaultRule {
            op,
            first: nth,
            repeat: false,
            error,
        });
        self
    }

    /// The `nth` (1-based) and every later operation of kind `op` fail with `error()`.
    pub fn fail_from(mut self, op: FsOp, nth: u64, error: fn() -> io::Error) -> Self {
        self.rules.push(FaultRule {
            op,
            first: nth,
            repeat: true,
            error,
        });
        self
    }

    /// How many operations of kind `op` were attempted since the plan was installed.
    pub fn count(&self, op: FsOp) -> u64 {
        self.counts.get(&op).copied().unwrap_or(0)
    }

    fn check(&mut self, op: FsOp) -> io::Result<()> {
        let count = self.counts.entry(op).or_insert(0);
        *count += 1;
        let n = *count;
        for rule in &self.rules {
            if rule.op == op && (n == rule.first || (rule.repeat && n > rule.first)) {
                return Err((rule.error)());
            }
        }
        Ok(())
    }
}

/// The filesystem as the crate sees it.
#[derive(Debug, Default)]
pub(crate) struct Fs {
    #[cfg(any(test, feature = "test-utils"))]
    plan: std::sync::Mutex<Option<FaultPlan>>,
}

impl Fs {
    #[cfg(any(test, feature = "test-utils"))]
    fn check(&self, op: FsOp) -> io::Result<()> {
        let mut plan = self
            .plan
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match plan.as_mut() {
            Some(plan) => plan.check(op),
            None => Ok(()),
        }
    }

    #[cfg(not(any(test, feature = "test-utils")))]
    #[inline(always)]
    fn check(&self, _op: FsOp) -> io::Result<()> {
        Ok(())
    }

    /// Installs `plan`, replacing any earlier one; `None` removes it.
    #[cfg(any(test, feature = "test-utils"))]
    pub(crate) fn set_fault_plan(&self, plan: Option<FaultPlan>) -> Option<FaultPlan> {
        let mut guard = self
            .plan
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::replace(&mut *guard, plan)
    }

    /// Creates directory `path` with mode 0700. Fails if anything exists at `path`, including a
    /// symlink (mkdir never follows one).
    pub(crate) fn create_private_dir(&self, path: &Path) -> io::Result<()> {
        DirBuilder::new().mode(0o700).create(path)
    }

    /// Creates file `path` for writing: new, mode 0600, not through a symlink.
    pub(crate) fn create_file(&self, path: &Path) -> io::Result<File> {
        self.check(FsOp::CreateFile)?;
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    }

    /// Opens `path` for reading, not through a symlink.
    pub(crate) fn open_read(&self, path: &Path) -> io::Result<File> {
        self.check(FsOp::Open)?;
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    }

    /// Writes all of `bytes` to `file`.
    pub(crate) fn write_all(&self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        self.check(FsOp::Write)?;
        file.write_all(bytes)
    }

    /// Writes all of `bufs`, in order, to `file` with vectored writes (one operation for the
    /// fault plan). `bufs` is consumed (advanced past what was written).
    pub(crate) fn write_all_vectored(
        &self,
        file: &mut File,
        mut bufs: &mut [IoSlice<'_>],
    ) -> io::Result<()> {
        self.check(FsOp::Write)?;
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match file.write_vectored(bufs) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `fdatasync`.
    pub(crate) fn sync(&self, file: &File) -> io::Result<()> {
        self.check(FsOp::Sync)?;
        file.sync_data()
    }

    /// Fills `buf` from `file` at `offset`; a short file gives `UnexpectedEof`.
    pub(crate) fn read_exact_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(FsOp::Read)?;
        file.read_exact_at(buf, offset)
    }

    /// Removes file `path` (a symlink itself, never its target).
    pub(crate) fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(FsOp::Remove)?;
        fs::remove_file(path)
    }

    /// Removes directory `path` and its contents without following symlinks.
    pub(crate) fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.check(FsOp::Remove)?;
        fs::remove_dir_all(path)
    }

    /// Metadata of `path` itself (a symlink is reported as a symlink).
    pub(crate) fn symlink_metadata(&self, path: &Path) -> io::Result<fs::Metadata> {
        fs::symlink_metadata(path)
    }

    /// Reads a small file, not through a symlink, up to `limit` bytes.
    pub(crate) fn read_small(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let file = self.open_read(path)?;
        let mut bytes = Vec::new();
        file.take(limit).read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// The entries of directory `path`.
    pub(crate) fn read_dir(&self, path: &Path) -> io::Result<fs::ReadDir> {
        fs::read_dir(path)
    }

    /// Sets the mode of an open file or directory.
    pub(crate) fn set_mode(&self, file: &File, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(mode))
    }

    /// Opens directory `path` (not through a symlink) to inspect or chmod it.
    pub(crate) fn open_dir(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
            .open(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_and_from_rules_fire_on_the_right_calls() {
        let mut plan = FaultPlan::new()
            .fail_nth(FsOp::Write, 2, || io::Error::other("second"))
            .fail_from(FsOp::Read, 3, || io::Error::other("third on"));
        assert!(plan.check(FsOp::Write).is_ok());
        assert!(plan.check(FsOp::Write).is_err());
        assert!(plan.check(FsOp::Write).is_ok());
        assert!(plan.check(FsOp::Read).is_ok());
        assert!(plan.check(FsOp::Read).is_ok());
        assert!(plan.check(FsOp::Read).is_err());
        assert!(plan.check(FsOp::Read).is_err());
        assert_eq!(plan.count(FsOp::Read), 4);
    }

    #[test]
    fn files_are_private_and_never_follow_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::default();
        let path = dir.path().join("a");
        drop(fs.create_file(&path).unwrap());
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        // create_new refuses an existing name, including a dangling symlink
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
        assert!(fs.create_file(&link).is_err());
        assert!(!dir.path().join("target").exists());
        std::os::unix::fs::symlink(&path, dir.path().join("link2")).unwrap();
        assert!(fs.open_read(&dir.path().join("link2")).is_err());
    }
}
