//! [`RunWriter`]: writes one run, a sequence of segments, to an append-only file.
//!
//! Each file of a run opens with the run's schema record (`format.rs`, `schema_message.rs`).
//! Each `append` frames one segment: header, then the segment's dictionary and record batch
//! messages encoded batch by batch straight into the file (small pieces through a reused write buffer, a large
//! batch's pieces from where they are with vectored writes), then the trailer with the CRC32C
//! accumulated on the way. Memory beyond the caller's batches is one
//! concatenated group of small batches, the encoder's output for one batch and the write buffer.
//!
//! Failure policy: a run is all or nothing. After an error while writing (I/O, encoding) the
//! writer refuses further appends, `finish` returns an error, and dropping the writer removes
//! the run's files; the caller still holds every batch it appended, because `append` only
//! borrows them. Errors found before anything is written (schema mismatch, invalid options,
//! closed directory) leave the run as it was.

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::writer::{IpcWriteOptions, StreamEncoder};
use arrow_schema::{ArrowError, SchemaRef};
use arrow_shards_memory::AllocationSet;
use arrow_shards_memory::sizing::batch_allocations;

use crate::decode::IndexEntry;
use crate::dir::SpillDir;
use crate::error::SpillError;
use crate::format::{HEADER_LEN, Header, Trailer, encode_schema_record};
use crate::metrics::{add, add_time};
use crate::schema::conform_batch;
use crate::schema_message::{encode_schema_message, strip_schema};
use crate::segment::{RunFile, SegmentInner, SegmentRef};
use crate::storage::SpillStorage;
use crate::storage::sealed::RunSink;
use crate::views::compact_views;
use crate::{Compression, SpillOptions};

/// Bytes gathered before a `write` call; larger pieces are written directly.
const WRITE_BUFFER: usize = 256 * 1024;

/// Bytes of a large batch checksummed and then written per vectored write: a whole batch
/// as encoded, so one system call per batch (smaller groups, checksummed just before each
/// write so the kernel copies cached bytes, are not measured yet).
const GROUP: usize = 64 * 1024 * 1024;

/// Writes one spill run: [`append`](RunWriter::append) one segment per partition, then
/// [`finish`](RunWriter::finish) to get their [`SegmentRef`]s.
///
/// The file is created on the first append. One file descriptor is open at a time, whatever
/// the number of segments; past [`SpillOptions::with_max_file_bytes`] the run continues in a
/// new file.
#[derive(Debug)]
pub struct RunWriter {
    dir: Arc<dyn SpillStorage>,
    schema: SchemaRef,
    options: SpillOptions,
    ipc_options: Result<IpcWriteOptions, String>,
    /// The run's encoded IPC schema message, made by the first append.
    schema_message: Option<Buffer>,
    current: Option<OpenFile>,
    segments: Vec<SegmentRef>,
    failed: bool,
}

/// The run file being written.
#[derive(Debug)]
struct OpenFile {
    run: Arc<RunFile>,
    sink: Box<dyn RunSink>,
    buf: Vec<u8>,
    /// Bytes of the file including those still in `buf`.
    pos: u64,
}

impl SpillDir {
    /// Starts a run: one append-only file (more if it rotates) written by the returned writer.
    pub fn run_writer(self: &Arc<Self>, schema: SchemaRef, options: SpillOptions) -> RunWriter {
        RunWriter::new(Arc::clone(self) as Arc<dyn SpillStorage>, schema, options)
    }
}

/// Starts a run in any storage: one append-only run file (more if it rotates).
pub fn run_writer(
    storage: &Arc<dyn SpillStorage>,
    schema: SchemaRef,
    options: SpillOptions,
) -> RunWriter {
    RunWriter::new(Arc::clone(storage), schema, options)
}

impl RunWriter {
    fn new(dir: Arc<dyn SpillStorage>, schema: SchemaRef, options: SpillOptions) -> Self {
        let ipc_options = options.ipc_write_options().map_err(|e| e.to_string());
        Self {
            dir,
            schema,
            options,
            ipc_options,
            schema_message: None,
            current: None,
            segments: Vec::new(),
            failed: false,
        }
    }

    /// The schema every appended batch must have.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Segments appended so far.
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    /// Appends one segment: `partition`'s `batches`, in order, as one framed IPC stream.
    ///
    /// Borrows the batches: on any error the caller still holds everything. An error while
    /// writing discards the whole run: later appends and `finish` fail and the run's files are
    /// removed. A schema mismatch ([`SpillError::SchemaMismatch`]) is found before writing and
    /// leaves the run usable. An empty `batches` writes an empty segment (zero rows).
    ///
    /// Partition ids need not be distinct or ordered; each append is its own segment.
    pub fn append(&mut self, partition: u32, batches: &[RecordBatch]) -> Result<(), SpillError> {
        if self.failed {
            return Err(SpillError::WriterFailed {
                dir: self.dir.location().to_path_buf(),
            });
        }
        if self.dir.is_closed() {
            return Err(self.dir.closed_error());
        }
        let ipc_options = match &self.ipc_options {
            Ok(options) => options.clone(),
            Err(reason) => {
                return Err(SpillError::InvalidOptions {
                    dir: self.dir.location().to_path_buf(),
                    reason: reason.clone(),
                });
            }
        };
        let batches = self.conform(partition, batches)?;
        let start = Instant::now();
        let result = self.write_segment(partition, &batches, ipc_options);
        add_time(&self.dir.counters().write_nanos, start.elapsed());
        match result {
            Ok(segment) => {
                self.segments.push(segment);
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                self.current = None;
                Err(e)
            }
        }
    }

    /// Flushes the run (and syncs it if [`SpillOptions::with_sync_on_finish`]) and returns one
    /// [`SegmentRef`] per appended segment, in append order.
    ///
    /// On error no segment is registered and the run's files are removed.
    pub fn finish(mut self) -> Result<Vec<SegmentRef>, SpillError> {
        if self.failed {
            return Err(SpillError::WriterFailed {
                dir: self.dir.location().to_path_buf(),
            });
        }
        let start = Instant::now();
        let closed = self.close_current();
        add_time(&self.dir.counters().write_nanos, start.elapsed());
        closed?;
        if self.dir.is_closed() {
            return Err(self.dir.closed_error());
        }
        let segments = std::mem::take(&mut self.segments);
        let counters = self.dir.counters();
        add(&counters.runs, 1);
        add(&counters.segments, segments.len() as u64);
        for segment in &segments {
            add(&counters.bytes_spilled, segment.memory_bytes() as u64);
            add(&counters.rows_spilled, segment.rows());
        }
        Ok(segments)
    }

    /// The batches re-labelled with the run's schema, or the first that does not conform to it
    /// (the workspace's one schema rule, [`conform_batch`]).
    fn conform(
        &self,
        partition: u32,
        batches: &[RecordBatch],
    ) -> Result<Vec<RecordBatch>, SpillError> {
        batches
            .iter()
            .map(|batch| {
                conform_batch(&self.schema, batch.clone()).map_err(|(source, _)| {
                    SpillError::SchemaMismatch {
                        dir: self.dir.location().to_path_buf(),
                        partition,
                        source,
                    }
                })
            })
            .collect()
    }

    /// Flushes and closes the current file, syncing it if asked to.
    fn close_current(&mut self) -> Result<(), SpillError> {
        let Some(mut open) = self.current.take() else {
            return Ok(());
        };
        let sync = self.options.sync_on_finish();
        let result = open.flush().and_then(|()| open.sink.finish(sync));
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    /// The run's encoded schema message, encoded on first use.
    fn schema_message(&mut self, ipc_options: &IpcWriteOptions) -> Result<Buffer, SpillError> {
        if let Some(message) = &self.schema_message {
            return Ok(message.clone());
        }
        let message =
            encode_schema_message(&self.schema, ipc_options.clone()).map_err(|source| {
                SpillError::Arrow {
                    path: self.dir.location().to_path_buf(),
                    source,
                }
            })?;
        Ok(self.schema_message.insert(message).clone())
    }

    /// The file to write the next segment to, rotating or creating it as needed; a new file
    /// starts with the schema record of `schema_message`.
    fn file_for_next_segment(
        &mut self,
        schema_message: &[u8],
    ) -> Result<&mut OpenFile, SpillError> {
        if let Some(open) = &self.current
            && open.pos > 0
            && open.pos >= self.options.max_file_bytes()
        {
            self.close_current()?;
        }
        let open = match self.current.take() {
            Some(open) => open,
            None => {
                let record = encode_schema_record(schema_message).map_err(|reason| {
                    SpillError::InvalidOptions {
                        dir: self.dir.location().to_path_buf(),
                        reason,
                    }
                })?;
                let (path, sink) = self.dir.create_run()?;
                let mut open = OpenFile {
                    run: Arc::new(RunFile::new(Arc::clone(&self.dir), path)),
                    sink,
                    buf: Vec::with_capacity(WRITE_BUFFER),
                    pos: 0,
                };
                open.put(&record)?;
                open
            }
        };
        Ok(self.current.insert(open))
    }

    /// Writes one framed segment of `batches` (which conform to the run's schema) at the end
    /// of the current file.
    fn write_segment(
        &mut self,
        partition: u32,
        batches: &[RecordBatch],
        ipc_options: IpcWriteOptions,
    ) -> Result<SegmentRef, SpillError> {
        let memory_bytes = distinct_bytes(batches);
        let schema = Arc::clone(&self.schema);
        // a small segment is written uncompressed (`SpillOptions::with_compress_min_bytes`)
        let compress = memory_bytes >= self.options.compress_min_bytes();
        let ipc_options = if compress {
            ipc_options
        } else {
            ipc_options
                .try_with_compression(None)
                .map_err(|e| SpillError::InvalidOptions {
                    dir: self.dir.location().to_path_buf(),
                    reason: e.to_string(),
                })?
        };
        let header = Header {
            compression: if compress {
                self.options.compression().code()
            } else {
                Compression::None.code()
            },
            partition,
        };
        let coalesce_rows = self.options.coalesce_rows();
        let written_here = self.dir.trusted();
        let schema_message = self.schema_message(&ipc_options)?;
        let open = self.file_for_next_segment(&schema_message)?;
        // a fresh encoder per segment: its dictionaries are written within it
        let encoder = StreamEncoder::try_new_with_options(&schema, ipc_options)
            .map_err(|e| arrow_error(open, e))?;
        let offset = open.pos;
        let mut segment = SegmentWrite::start(open, encoder, header, schema_message.clone())?;
        segment.write_batches(batches, &schema, coalesce_rows)?;
        let trailer = segment.finish()?;
        Ok(SegmentRef {
            inner: Arc::new(SegmentInner {
                file: Arc::clone(&open.run),
                entry: IndexEntry {
                    schema,
                    schema_message,
                    partition,
                    offset,
                    len: open.pos - offset,
                    rows: trailer.rows,
                    batches: trailer.batches,
                    checksum: trailer.crc,
                    written_here,
                },
                memory_bytes,
            }),
        })
    }
}

/// In-memory bytes of `batches`: their distinct allocations, each counted once.
fn distinct_bytes(batches: &[RecordBatch]) -> usize {
    let mut allocations = AllocationSet::new();
    batches
        .iter()
        .map(|b| allocations.insert(&batch_allocations(b)))
        .sum()
}

/// One segment being written: header, then the dictionary and record batch messages batch by
/// batch, then the trailer, with the CRC32C accumulated on the way.
struct SegmentWrite<'a> {
    open: &'a mut OpenFile,
    encoder: StreamEncoder,
    /// The run's schema message, until the encoder's first output has been cut free of it.
    schema_to_strip: Option<Buffer>,
    /// Where the segment starts in the file.
    offset: u64,
    crc: u32,
    rows: u64,
    batches: u64,
}

impl<'a> SegmentWrite<'a> {
    /// Writes the header.
    fn start(
        open: &'a mut OpenFile,
        encoder: StreamEncoder,
        header: Header,
        schema_message: Buffer,
    ) -> Result<Self, SpillError> {
        let offset = open.pos;
        let header = header.encode();
        let crc = crc32c::crc32c(&header);
        open.put(&header)?;
        Ok(Self {
            open,
            encoder,
            schema_to_strip: Some(schema_message),
            offset,
            crc,
            rows: 0,
            batches: 0,
        })
    }

    /// Writes `batches` in order, small ones concatenated into batches of at most
    /// `coalesce_rows` rows (0: each as it is).
    ///
    /// Empty batches are left out. A batch of at least half the target is written as it is;
    /// consecutive smaller ones are gathered greedily into groups of at most the target and
    /// each group of two or more is concatenated (exact-size buffers; a dictionary column on
    /// the union of the group's dictionaries, see [`crate::concat()`]). A lone small batch is
    /// written as it is: no copy.
    /// (arrow-select's `BatchCoalescer` allocated its full target per column for each
    /// segment and copied even a lone batch; with thousands of partitions a segment is
    /// usually one cut open batch of a few hundred rows.)
    fn write_batches(
        &mut self,
        batches: &[RecordBatch],
        schema: &SchemaRef,
        coalesce_rows: usize,
    ) -> Result<(), SpillError> {
        if coalesce_rows == 0 {
            return batches.iter().try_for_each(|batch| self.emit(batch));
        }
        let mut group: Vec<&RecordBatch> = Vec::new();
        let mut rows = 0;
        for batch in batches {
            let n = batch.num_rows();
            if n == 0 {
                continue; // coalescing writes no empty messages
            }
            if n >= coalesce_rows / 2 || rows + n > coalesce_rows {
                self.emit_group(&group, schema)?;
                group.clear();
                rows = 0;
            }
            if n >= coalesce_rows / 2 {
                self.emit(batch)?;
            } else {
                group.push(batch);
                rows += n;
            }
        }
        self.emit_group(&group, schema)
    }

    /// Writes `group` as one batch: itself if it is one, concatenated if more.
    fn emit_group(&mut self, group: &[&RecordBatch], schema: &SchemaRef) -> Result<(), SpillError> {
        match group {
            [] => Ok(()),
            [batch] => self.emit(batch),
            _ => {
                // dictionaries kept as written: `concat` has the why
                let batch = crate::concat_batches(schema, group.iter().copied())
                    .map_err(|e| arrow_error(self.open, e))?;
                self.emit(&batch)
            }
        }
    }

    /// Encodes one batch (its wasteful view arrays compacted first) and writes it.
    fn emit(&mut self, batch: &RecordBatch) -> Result<(), SpillError> {
        let batch = compact_views(batch).map_err(|e| arrow_error(self.open, e))?;
        let mut buffers = self
            .encoder
            .encode(&batch)
            .map_err(|e| arrow_error(self.open, e))?;
        if let Some(schema) = self.schema_to_strip.take() {
            // the run's schema record has it; the segment is decoded with that
            buffers = strip_schema(buffers, &schema).map_err(|e| arrow_error(self.open, e))?;
        }
        self.open.put_all(&buffers, &mut self.crc)?;
        self.rows += batch.num_rows() as u64;
        self.batches += 1;
        Ok(())
    }

    /// Writes the trailer (no end-of-stream marker: the frame's length ends the messages);
    /// returns the trailer written.
    fn finish(self) -> Result<Trailer, SpillError> {
        let Self {
            open,
            offset,
            crc,
            rows,
            batches,
            ..
        } = self;
        let payload_len = open.pos - offset - HEADER_LEN as u64;
        let trailer = Trailer {
            payload_len,
            rows,
            batches,
            crc: crc32c::crc32c_append(crc, &Trailer::covered(payload_len, rows, batches)),
        };
        open.put(&trailer.encode())?;
        Ok(trailer)
    }
}

fn arrow_error(open: &OpenFile, source: ArrowError) -> SpillError {
    SpillError::Arrow {
        path: open.run.path.clone(),
        source,
    }
}

impl OpenFile {
    /// Appends `bytes` to the file, through the write buffer if small.
    fn put(&mut self, bytes: &[u8]) -> Result<(), SpillError> {
        if bytes.len() >= WRITE_BUFFER / 4 {
            // large pieces (array buffers) skip the copy; keep the file in order
            self.flush()?;
            self.write(bytes)?;
        } else {
            if self.buf.len() + bytes.len() > WRITE_BUFFER {
                self.flush()?;
            }
            self.buf.extend_from_slice(bytes);
        }
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Appends the pieces of one encoded batch, updating `crc`. A small batch goes through
    /// the write buffer; a large one is written from where its pieces are (the encoder's
    /// output is zero-copy over the batch's arrays), after what the buffer holds, with
    /// vectored writes: no copy, few system calls, and large writes (the page cache uses
    /// larger folios for them).
    fn put_all(
        &mut self,
        pieces: &[arrow_buffer::Buffer],
        crc: &mut u32,
    ) -> Result<(), SpillError> {
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        if total < WRITE_BUFFER / 4 {
            for piece in pieces {
                *crc = crc32c::crc32c_append(*crc, piece.as_slice());
                self.put(piece.as_slice())?;
            }
            return Ok(());
        }
        let mut start = 0;
        while start < pieces.len() {
            // a group of pieces of about GROUP bytes: checksummed just before the write, so
            // the write copies bytes still in the cache
            let mut end = start;
            let mut bytes = 0;
            while end < pieces.len() && (end == start || bytes + pieces[end].len() <= GROUP) {
                bytes += pieces[end].len();
                end += 1;
            }
            let mut slices = Vec::with_capacity(end - start + 1);
            let pending = self.buf.len();
            if pending > 0 {
                slices.push(IoSlice::new(&self.buf));
            }
            for piece in &pieces[start..end] {
                *crc = crc32c::crc32c_append(*crc, piece.as_slice());
                slices.push(IoSlice::new(piece.as_slice()));
            }
            self.sink.write_all_vectored(&mut slices)?;
            drop(slices);
            self.buf.clear();
            self.run.grew((pending + bytes) as u64);
            self.pos += bytes as u64;
            start = end;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SpillError> {
        if !self.buf.is_empty() {
            let buf = std::mem::take(&mut self.buf);
            let result = self.write(&buf);
            self.buf = buf;
            self.buf.clear();
            result?;
        }
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), SpillError> {
        self.sink.write_all(bytes)?;
        self.run.grew(bytes.len() as u64);
        Ok(())
    }
}
