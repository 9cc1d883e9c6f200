//! Reading a segment back from its run file: the I/O around the I/O-free verifier and decoder
//! of `decode/`.
//!
//! One file descriptor per read: open the file (`O_NOFOLLOW`), let the decoder read it with
//! positioned reads (a segment of up to 256 KiB in one read, a larger one piece by piece in two
//! passes), close it. Counts the read in the directory's metrics.

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Instant;

use arrow_array::RecordBatch;

use crate::decode::{Fault, IndexEntry, Source, decode_segment};
use crate::dir::SpillDir;
use crate::error::SpillError;
use crate::fs::Fs;
use crate::metrics::{add, add_time};

/// Reads segment `expected` of run file `path` in `dir` (blocking): verifies it, then decodes
/// it. Bytes that fail verification give [`SpillError::Corrupt`].
pub(crate) fn read_segment(
    dir: &SpillDir,
    path: &Path,
    expected: &IndexEntry,
) -> Result<Vec<RecordBatch>, SpillError> {
    if dir.is_closed() {
        return Err(dir.closed_error());
    }
    let start = Instant::now();
    let error = |fault: Fault| fault.into_error(dir.path(), path, expected);
    let file = dir.fs.open_read(path).map_err(|e| error(e.into()))?;
    let batches = decode_segment(
        &RunFileSource {
            fs: &dir.fs,
            file: &file,
        },
        expected,
    );
    drop(file);
    let batches = batches.map_err(error)?;
    add(&dir.counters.bytes_read, expected.len);
    add(&dir.counters.segments_read, 1);
    add_time(&dir.counters.read_nanos, start.elapsed());
    Ok(batches)
}

/// An open run file, read with positioned reads through the directory's [`Fs`] (so a fault
/// plan sees every read).
struct RunFileSource<'a> {
    fs: &'a Fs,
    file: &'a File,
}

impl Source for RunFileSource<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.fs.read_exact_at(self.file, buf, offset)
    }
}
