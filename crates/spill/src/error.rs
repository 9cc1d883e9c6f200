//! The crate's error type: every variant names the path it is about.

use std::io;
use std::path::{Path, PathBuf};

use arrow_schema::ArrowError;

use crate::schema::SchemaMismatch;

/// Errors from spilling to and reading from disk.
///
/// A full disk ([`SpillError::DiskFull`]) is kept apart from other I/O failures because the
/// caller can act on it; [`SpillError::Corrupt`] means the bytes on disk are not what was
/// written and nothing was decoded from them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpillError {
    /// A filesystem operation failed.
    #[error("spill i/o error on {}: {source}", path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The filesystem holding the spill directory is full (ENOSPC) or the user's quota is
    /// exhausted (EDQUOT).
    #[error(
        "no space left for spilling in {}: {source}; free space on that filesystem or point the \
         spill directory at a filesystem with more room",
        dir.display()
    )]
    DiskFull {
        /// The spill directory.
        dir: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// A segment's bytes failed verification: bad checksum, torn or truncated frame, or a
    /// malformed IPC message. Nothing from the segment is returned.
    #[error(
        "corrupt spill segment of partition {partition} at offset {offset} in {}: {reason}",
        file.display()
    )]
    Corrupt {
        /// The run file.
        file: PathBuf,
        /// Byte offset of the segment in `file`.
        offset: u64,
        /// The partition the segment belongs to.
        partition: u32,
        /// What failed.
        reason: String,
    },
    /// Arrow failed to encode or coalesce batches.
    #[error("arrow error while spilling to {}: {source}", path.display())]
    Arrow {
        /// The run file being written.
        path: PathBuf,
        /// Arrow's error.
        source: ArrowError,
    },
    /// The spill directory was closed; its files are gone.
    #[error("spill directory {} is closed", dir.display())]
    Closed {
        /// The spill directory.
        dir: PathBuf,
    },
    /// An earlier append on this run writer failed, so the run is discarded.
    #[error("an earlier write to the spill run in {} failed; the run is discarded", dir.display())]
    WriterFailed {
        /// The spill directory.
        dir: PathBuf,
    },
    /// A batch's schema does not conform to the run writer's schema (see
    /// [`check_schema`](crate::check_schema) for the rule).
    #[error(
        "batch for partition {partition} does not match the spill run's schema in {}: {source}",
        dir.display()
    )]
    SchemaMismatch {
        /// The spill directory.
        dir: PathBuf,
        /// The partition being appended.
        partition: u32,
        /// Which field differs, and how.
        source: SchemaMismatch,
    },
    /// The options given to the run writer are invalid.
    #[error("invalid spill options for {}: {reason}", dir.display())]
    InvalidOptions {
        /// The spill directory.
        dir: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A path is unsafe to use: a symlink where a directory or file of ours should be, or a
    /// directory owned by someone else.
    #[error("refusing to use {} for spilling: {reason}", path.display())]
    UnsafePath {
        /// The refused path.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
}

impl From<SpillError> for ArrowError {
    fn from(error: SpillError) -> Self {
        ArrowError::ExternalError(Box::new(error))
    }
}

/// True if `error` means the filesystem is full (ENOSPC, [`io::ErrorKind::StorageFull`]) or the
/// user's quota is exhausted (EDQUOT, [`io::ErrorKind::QuotaExceeded`]).
///
/// The one test for a full disk in the workspace: [`SpillError::DiskFull`] is built with it, and
/// the layers above use it for their own I/O.
///
/// ```
/// use std::io;
/// use arrow_shards_spill::is_disk_full;
/// assert!(is_disk_full(&io::Error::from_raw_os_error(28))); // ENOSPC on Linux
/// assert!(is_disk_full(&io::ErrorKind::QuotaExceeded.into()));
/// assert!(!is_disk_full(&io::ErrorKind::PermissionDenied.into()));
/// ```
pub fn is_disk_full(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    ) || matches!(error.raw_os_error(), Some(code) if code == libc::ENOSPC || code == libc::EDQUOT)
}

/// Maps an I/O error on `path` inside spill directory `dir`: full disk or quota becomes
/// [`SpillError::DiskFull`], anything else [`SpillError::Io`].
pub(crate) fn io_error(dir: &Path, path: &Path, source: io::Error) -> SpillError {
    if is_disk_full(&source) {
        SpillError::DiskFull {
            dir: dir.to_path_buf(),
            source,
        }
    } else {
        SpillError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(source: io::Error) -> SpillError {
        io_error(Path::new("/spill"), Path::new("/spill/1.run"), source)
    }

    #[test]
    fn enospc_edquot_and_storage_full_are_disk_full() {
        for source in [
            io::Error::from_raw_os_error(libc::ENOSPC),
            io::Error::from_raw_os_error(libc::EDQUOT),
            io::Error::from(io::ErrorKind::StorageFull),
            io::Error::from(io::ErrorKind::QuotaExceeded),
        ] {
            let error = map(source);
            assert!(
                matches!(&error, SpillError::DiskFull { dir, .. } if dir == Path::new("/spill"))
            );
            let message = error.to_string();
            assert!(message.contains("/spill"), "{message}");
            assert!(message.contains("free space"), "{message}");
        }
    }

    #[test]
    fn other_errors_name_the_file() {
        let error = map(io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(&error, SpillError::Io { path, .. } if path == Path::new("/spill/1.run")));
        assert!(error.to_string().contains("/spill/1.run"));
    }

    #[test]
    fn converts_into_arrow_external_error() {
        let error: ArrowError = SpillError::Closed {
            dir: "/spill".into(),
        }
        .into();
        assert!(matches!(error, ArrowError::ExternalError(_)));
        assert!(error.to_string().contains("/spill"));
    }
}
