//! Reading a segment back from its run file: the I/O around the I/O-free verifier and decoder
//! of `decode/`. The storage fetches the bytes; the counters are counted here.
//!
//! A local run file: one file descriptor per read: open the file (`O_NOFOLLOW`), let the decoder read it with
//! positioned reads (a segment of up to 256 KiB in one read, a larger one piece by piece in two
//! passes), close it. Counts the read in the directory's metrics.

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Instant;

use arrow_array::RecordBatch;

use crate::decode::{Fault, IndexEntry, Source, decode_segment};
use crate::error::SpillError;
use crate::fs::Fs;
use crate::metrics::{add, add_time};
use crate::storage::SpillStorage;

/// Reads segment `expected` of run file `path` in `storage` (blocking): verifies it, then
/// decodes it. Bytes that fail verification give [`SpillError::Corrupt`].
pub(crate) fn read_segment(
    storage: &dyn SpillStorage,
    path: &Path,
    expected: &IndexEntry,
) -> Result<Vec<RecordBatch>, SpillError> {
    if storage.is_closed() {
        return Err(storage.closed_error());
    }
    let start = Instant::now();
    let batches = storage
        .read_segment(path, expected)
        .map_err(|fault| fault.into_error(storage.location(), path, expected))?;
    let counters = storage.counters();
    add(&counters.bytes_read, expected.len);
    add(&counters.segments_read, 1);
    add_time(&counters.read_nanos, start.elapsed());
    Ok(batches)
}

/// Reads segment `expected` of the local run file `path` with positioned reads through `fs`.
pub(crate) fn read_local_segment(
    fs: &Fs,
    path: &Path,
    expected: &IndexEntry,
) -> Result<Vec<RecordBatch>, Fault> {
    let file = fs.open_read(path)?;
    decode_segment(&RunFileSource { fs, file: &file }, expected)
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
