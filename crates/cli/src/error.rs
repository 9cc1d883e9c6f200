//! What can go wrong, each case naming the file, column or directory it is about.
//!
//! `main` prints an error as one line, `arrow-shards: error: ` followed by the message and its
//! causes on lines of their own, and exits with status 1. Usage errors (bad flags, a bad size
//! string) are clap's: status 2. An interrupted run ([`CliError::Interrupted`]) exits with 130
//! (SIGINT) or 143 (SIGTERM).

use std::error::Error as StdError;
use std::io;
use std::path::{Path, PathBuf};

use arrow_schema::{ArrowError, DataType};
use parquet::errors::ParquetError;

/// Everything `arrow-shards` reports as a failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CliError {
    /// An input path that cannot be opened or listed.
    #[error("cannot read input {}", .path.display())]
    InputUnreadable {
        /// The input.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A file that is neither parquet nor Arrow IPC (file or stream).
    #[error("{} is not a parquet or Arrow IPC file ({reason})", .path.display())]
    NotArrowData {
        /// The input.
        path: PathBuf,
        /// What the readers said.
        reason: String,
    },
    /// A directory given as input that holds no input files.
    #[error(
        "input directory {} holds no .parquet, .arrow, .arrows, .ipc or .feather files",
        .path.display()
    )]
    EmptyDirectory {
        /// The directory.
        path: PathBuf,
    },
    /// Inputs whose schemas differ.
    #[error("{} has a different schema than {}: {detail}", .path.display(), .first.display())]
    SchemaMismatch {
        /// The input that differs.
        path: PathBuf,
        /// The first input, whose schema the others must share.
        first: PathBuf,
        /// The first difference found.
        detail: String,
    },
    /// A key column that the inputs do not have.
    #[error("unknown key column {name:?}; the input has columns: {}", .available.join(", "))]
    UnknownKey {
        /// The name given with --key.
        name: String,
        /// The input's column names.
        available: Vec<String>,
    },
    /// A key column of a type the hash does not cover (lists, structs, maps, ...).
    #[error("key column {name:?} has type {data_type}, which cannot be a key")]
    UnsupportedKeyType {
        /// The column.
        name: String,
        /// Its type.
        data_type: DataType,
    },
    /// A `--sort-by` column that the inputs do not have.
    #[error("unknown --sort-by column {name:?}; the input has columns: {}", .available.join(", "))]
    UnknownSortColumn {
        /// The name given with --sort-by.
        name: String,
        /// The input's column names.
        available: Vec<String>,
    },
    /// A `--sort-by` column of a type arrow-row cannot order.
    #[error("--sort-by column {name:?} has type {data_type}, which cannot be sorted")]
    UnsortableColumn {
        /// The column.
        name: String,
        /// Its type.
        data_type: DataType,
    },
    /// `--layout hive` with a `--hive-key` that is already a column of the input.
    #[error(
        "the hive key {key:?} is a column of the input, which read back would hold it twice; \
         choose another directory key with --hive-key"
    )]
    HiveKeyIsColumn {
        /// The key.
        key: String,
    },
    /// A failure decoding an input file.
    #[error("cannot read input {}", .path.display())]
    InputDecode {
        /// The input.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// The disk holding an output or spill file is full.
    #[error(
        "no space left on the disk holding {}: free some space or choose another directory",
        .path.display()
    )]
    DiskFull {
        /// The file or directory being written.
        path: PathBuf,
    },
    /// An output file or directory that cannot be created or written.
    #[error("cannot write {}", .path.display())]
    OutputWrite {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// `--format arrow` met a dictionary column whose dictionary changes between batches.
    #[error(
        "cannot write {}: a dictionary column changes its dictionary between batches, which the \
         Arrow IPC file format cannot hold; use --format arrow-stream or --format parquet",
        .path.display()
    )]
    DictionaryReplaced {
        /// The output file.
        path: PathBuf,
    },
    /// A spill directory that cannot be created or written.
    #[error("cannot use spill directory {}", .path.display())]
    SpillDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A `--sort-by` run file (under the spill directory) that cannot be written or read.
    #[error("cannot write or read the sort run file {}", .path.display())]
    SortRun {
        /// The run file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// The shuffle buffer refused its configuration or failed while running.
    #[error("shuffle buffer: {message}")]
    Buffer {
        /// What the buffer said (with advice for the command line).
        message: String,
        /// The buffer's error, whose causes are printed after the message.
        #[source]
        source: Option<Box<dyn StdError + Send + Sync>>,
    },
    /// SIGINT or SIGTERM arrived; the run stopped and removed its temporary files.
    #[error("interrupted by {signal}; temporary output and spill files removed")]
    Interrupted {
        /// `SIGINT` or `SIGTERM`.
        signal: &'static str,
        /// The exit status: 128 + the signal's number.
        status: i32,
    },
    /// A bug: something that cannot happen did.
    #[error("internal error (a bug in arrow-shards): {0}")]
    Internal(String),
    /// `--verify` found a difference between input and output.
    #[error("verification failed: {0}")]
    VerifyFailed(String),
}

impl CliError {
    /// An error writing `path`: [`CliError::DiskFull`] when the disk is full, else
    /// [`CliError::OutputWrite`].
    pub(crate) fn output(path: &Path, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        let source = source.into();
        if is_disk_full(source.as_ref()) {
            CliError::DiskFull {
                path: path.to_owned(),
            }
        } else {
            CliError::OutputWrite {
                path: path.to_owned(),
                source,
            }
        }
    }

    /// The process exit status for this error: 128 + the signal for an interrupted run, else 1.
    pub(crate) fn exit_status(&self) -> u8 {
        match self {
            CliError::Interrupted { status, .. } => u8::try_from(*status).unwrap_or(1),
            _ => 1,
        }
    }

    /// An error decoding input `path`.
    pub(crate) fn decode(path: &Path, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        CliError::InputDecode {
            path: path.to_owned(),
            source: source.into(),
        }
    }

    /// The message, then each cause beneath it on a line of its own (`  caused by: ...`),
    /// leaving out causes whose text the lines above already hold (Arrow, parquet and this
    /// project's errors repeat their inner message).
    pub(crate) fn report(&self) -> String {
        let mut report = self.to_string().replace('\n', " ");
        let mut source = self.source();
        while let Some(cause) = source {
            let text = cause.to_string().replace('\n', " ");
            if !report.contains(&text) {
                report.push_str("\n  caused by: ");
                report.push_str(&text);
            }
            source = cause.source();
        }
        report
    }
}

/// Whether `error`, or any error beneath it, is an I/O error for a full disk (ENOSPC, EDQUOT).
pub(crate) fn is_disk_full(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && matches!(
                io.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            )
        {
            return true;
        }
        if let Some(ArrowError::IoError(_, io)) = e.downcast_ref::<ArrowError>()
            && matches!(
                io.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            )
        {
            return true;
        }
        if let Some(ParquetError::External(inner)) = e.downcast_ref::<ParquetError>()
            && is_disk_full(inner.as_ref())
        {
            return true;
        }
        current = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enospc() -> io::Error {
        io::Error::from_raw_os_error(28)
    }

    #[test]
    fn a_full_disk_is_recognised_through_wrappers() {
        assert!(is_disk_full(&enospc()));
        assert!(is_disk_full(&ParquetError::from(enospc())));
        let arrow = ArrowError::IoError("write".into(), enospc());
        assert!(is_disk_full(&arrow));
        let err = CliError::output(
            Path::new("/out/part-00001.parquet"),
            ParquetError::from(enospc()),
        );
        assert!(matches!(err, CliError::DiskFull { .. }));
        assert!(
            err.report().contains("/out/part-00001.parquet"),
            "{}",
            err.report()
        );
        assert!(err.report().contains("no space left"), "{}", err.report());
    }

    #[test]
    fn other_write_errors_keep_their_cause() {
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert!(!is_disk_full(&denied));
        let err = CliError::output(Path::new("/out"), denied);
        assert_eq!(
            err.report(),
            "cannot write /out\n  caused by: permission denied"
        );
    }

    #[test]
    fn causes_not_in_the_message_are_printed_on_lines_of_their_own() {
        let err = CliError::Buffer {
            message: "the buffer failed".into(),
            source: Some(Box::new(io::Error::other("a deeper cause"))),
        };
        assert_eq!(
            err.report(),
            "shuffle buffer: the buffer failed\n  caused by: a deeper cause"
        );
    }

    #[test]
    fn unknown_key_lists_the_columns() {
        let err = CliError::UnknownKey {
            name: "nope".into(),
            available: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            err.report(),
            "unknown key column \"nope\"; the input has columns: a, b"
        );
    }
}
