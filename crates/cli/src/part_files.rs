//! One partition's output, split into files by `--max-rows-per-file` and
//! `--max-bytes-per-file`.
//!
//! [`PartitionFiles`] opens file 0 at the partition's first row (or, for an empty partition,
//! at [`PartitionFiles::finish`]: every partition gets at least one file) and appends the
//! batches it is given; when the open file is full it is completed (footer written) and the
//! next rows go to file 1, 2, ... The files are named by [`crate::file_names`] and committed by
//! [`crate::output`]. Rows keep their order: file `i`'s rows all come before file `i + 1`'s.
//!
//! What each cap guarantees:
//! - **rows** (exact): every file holds at most `--max-rows-per-file` rows; with this cap
//!   alone, every file but the partition's last exactly that many.
//! - **bytes** (approximate): batches are appended in pieces of at most [`BYTES_CHECK_ROWS`](crate::part_writer::BYTES_CHECK_ROWS)
//!   rows, and after each piece the file's size ([`PartitionWriter::size`]: for parquet the
//!   bytes written plus the writer's estimate of its open row group, for Arrow IPC the bytes
//!   written) is checked: the file is completed as soon as it has reached the cap. A file
//!   therefore passes the cap by at most the encoding of its last piece (at most
//!   [`BYTES_CHECK_ROWS`](crate::part_writer::BYTES_CHECK_ROWS) rows) plus its footer, and, for parquet, by what the estimate of
//!   the open row group missed (it counts pages not yet compressed at their uncompressed
//!   size, so compressed files tend to end below the cap). With this cap alone, every file
//!   but a partition's last has reached the cap, by that measure, when it is completed.
//!
//! With both caps a file is completed at whichever it reaches first.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::error::CliError;
use crate::output::OutputDir;
use crate::part_writer::{FileCaps, PartitionWriter};

/// Writes one partition's files: create, `write` batches, `finish`.
pub(crate) struct PartitionFiles<'a> {
    dir: &'a OutputDir,
    partition: u32,
    schema: SchemaRef,
    caps: FileCaps,
    /// The open file, if any.
    open: Option<PartitionWriter>,
    /// The number of the next file to open.
    next: u32,
}

impl<'a> PartitionFiles<'a> {
    /// The files of `partition` in `dir`, none open yet; the first is opened at the first row.
    pub(crate) fn new(dir: &'a OutputDir, partition: u32, schema: &SchemaRef) -> Self {
        PartitionFiles {
            dir,
            partition,
            schema: SchemaRef::clone(schema),
            caps: dir.caps(),
            open: None,
            next: 0,
        }
    }

    /// Appends `batch`, opening and completing files as the caps say.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), CliError> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let writer = match &mut self.open {
                Some(writer) => writer,
                none => {
                    let writer = self.dir.file(self.partition, self.next, &self.schema)?;
                    self.next += 1;
                    none.insert(writer)
                }
            };
            let take = self.caps.room(writer).min(batch.num_rows() - offset);
            if take == batch.num_rows() {
                writer.write(batch)?;
            } else {
                writer.write(&batch.slice(offset, take))?;
            }
            offset += take;
            if self.caps.full(writer) {
                self.complete_open()?;
            }
        }
        Ok(())
    }

    /// Rows in the open file's open parquet row group.
    pub(crate) fn open_rows(&self) -> usize {
        self.open.as_ref().map_or(0, PartitionWriter::open_rows)
    }

    /// Bytes the open file's writer holds in memory.
    pub(crate) fn memory_size(&self) -> usize {
        self.open.as_ref().map_or(0, PartitionWriter::memory_size)
    }

    /// Cuts the open file's open parquet row group (see [`PartitionWriter::cut_row_group`]).
    pub(crate) fn cut_row_group(&mut self) -> Result<(), CliError> {
        match &mut self.open {
            Some(writer) => writer.cut_row_group(),
            None => Ok(()),
        }
    }

    /// Completes the open file; an empty partition gets one file with no rows.
    pub(crate) fn finish(mut self) -> Result<(), CliError> {
        if self.next == 0 {
            self.open = Some(self.dir.file(self.partition, 0, &self.schema)?);
        }
        self.complete_open()
    }

    fn complete_open(&mut self) -> Result<(), CliError> {
        match self.open.take() {
            Some(writer) => writer.finish().map(drop),
            None => Ok(()),
        }
    }
}
