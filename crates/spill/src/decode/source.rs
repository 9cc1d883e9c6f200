//! What decoding a segment starts from and how it fails: where its bytes come from
//! ([`Source`]: a run file, `read.rs`, or a slice in memory, the fuzz targets and tests), the
//! index entry they must agree with ([`IndexEntry`]), and why they gave no batches ([`Fault`],
//! turned into a [`SpillError`] by whoever knows the file).

use std::io;
use std::path::Path;

use arrow_buffer::Buffer;
use arrow_schema::SchemaRef;

use crate::error::{SpillError, io_error};

/// Where a segment's bytes come from.
pub(crate) trait Source {
    /// Fills `buf` with the run file's bytes at `offset`; past the end gives `UnexpectedEof`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// The `len` bytes at `offset` without a copy, where the source holds them in memory;
    /// `None` otherwise (a file, or a range past the end, which `read_at` then reports).
    fn bytes_at(&self, _offset: u64, _len: usize) -> Option<&[u8]> {
        None
    }
}

/// The bytes of a whole run file, in memory.
impl Source for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let bytes = self
            .bytes_at(offset, buf.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn bytes_at(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        self.get(start..start.checked_add(len)?)
    }
}

/// One segment's entry in the caller's index (what a `SegmentRef` records); the segment's bytes
/// must agree with it.
#[derive(Debug, Clone)]
pub(crate) struct IndexEntry {
    pub(crate) schema: SchemaRef,
    /// The run's encoded IPC schema message (shared by the run's segments), which the
    /// segment's messages are decoded with: the one the writer encoded, kept in memory, so a
    /// read does not read the file's schema record.
    pub(crate) schema_message: Buffer,
    pub(crate) partition: u32,
    /// Byte offset of the segment (its header) in the run file.
    pub(crate) offset: u64,
    /// Length of the segment, frame included.
    pub(crate) len: u64,
    pub(crate) rows: u64,
    pub(crate) batches: u64,
    pub(crate) checksum: u32,
    /// Whether this process's writer encoded the segment (from valid arrays): once its bytes
    /// match `checksum`, it is decoded without validating its arrays again
    /// (`crate::unchecked::SegmentDecoder`). `false` for bytes from anywhere else.
    pub(crate) written_here: bool,
}

/// Why a segment's bytes gave no batches.
#[derive(Debug)]
pub(crate) enum Fault {
    /// The bytes are not a valid segment matching the index.
    Corrupt(String),
    /// The source could not be read (`UnexpectedEof`: it ends inside the segment).
    Source(io::Error),
}

impl From<io::Error> for Fault {
    fn from(error: io::Error) -> Self {
        Fault::Source(error)
    }
}

impl Fault {
    /// The spill error for this fault, reading segment `expected` of run file `file` in spill
    /// directory `dir`: bad bytes and a short file are [`SpillError::Corrupt`], other read
    /// failures [`SpillError::Io`] or [`SpillError::DiskFull`].
    pub(crate) fn into_error(self, dir: &Path, file: &Path, expected: &IndexEntry) -> SpillError {
        let corrupt = |reason| SpillError::Corrupt {
            file: file.to_path_buf(),
            offset: expected.offset,
            partition: expected.partition,
            reason,
        };
        match self {
            Fault::Corrupt(reason) => corrupt(reason),
            Fault::Source(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                corrupt("truncated: the file ends inside the segment".into())
            }
            Fault::Source(e) => io_error(dir, file, e),
        }
    }
}

/// A [`Fault::Corrupt`] for `reason`.
pub(crate) fn corrupt(reason: impl Into<String>) -> Fault {
    Fault::Corrupt(reason.into())
}
