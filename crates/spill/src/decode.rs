//! Verifying and decoding one segment's bytes, without I/O of its own: the bytes come from a
//! [`Source`], a run file (`read.rs`) or a slice in memory (the fuzz targets, tests).
//!
//! A segment of up to 256 KiB (`READ_WHOLE`) is first read whole, with one positioned read,
//! and both passes below run over that copy in memory (the first checksums the bodies where
//! they are, without the scratch buffer). A larger one is read piece by piece.
//!
//! Two passes over the bytes:
//!
//! 1. Verify: walk the whole segment through a small reused buffer, checking the frame, every
//!    IPC length and the CRC32C; remember each message's metadata, body position and the
//!    running CRC before and after its body.
//! 2. Decode: read each body into its own 64-byte aligned allocation, check it still has the
//!    CRC seen in pass 1, then decode it (zero-copy over that allocation).
//!
//! Why two passes: the checksum must be verified before anything is decoded, and holding every
//! body of a segment until then, then decoding, made reads ~2x slower on our machine, nearly
//! all of it page faults (the allocator returned fresh memory each time); reading a body and
//! decoding it at once, as arrow-ipc's `StreamReader` does, gets warm memory. From a file, the
//! second read comes from the page cache.
//!
//! The IPC framing (continuation marker, metadata length, metadata flatbuffer's body length) is
//! parsed before the checksum is known, to find where each message ends; every length is
//! checked against the segment's remaining bytes, and the flatbuffer is parsed with its
//! verifier. Decoding proper (schema, dictionaries, arrays) happens only on verified bytes,
//! and is still guarded: errors and panics become [`SpillError::Corrupt`]. The decoded batches
//! must conform to the run's schema ([`crate::check_schema`]) and are re-labelled with it.

use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_ipc::reader::StreamDecoder;
use arrow_schema::{ArrowError, Schema, SchemaRef};

use crate::error::{SpillError, io_error};
use crate::format::{FRAME_LEN, HEADER_LEN, Header, TRAILER_CRC_COVERED, TRAILER_LEN, Trailer};
use crate::ipc_checks::{check_message, check_schema_message};
use crate::panic::panic_message;
use crate::schema::{check_schema, conform_batch};

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
    pub(crate) partition: u32,
    /// Byte offset of the segment (its header) in the run file.
    pub(crate) offset: u64,
    /// Length of the segment, frame included.
    pub(crate) len: u64,
    pub(crate) rows: u64,
    pub(crate) batches: u64,
    pub(crate) checksum: u32,
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

fn corrupt(reason: impl Into<String>) -> Fault {
    Fault::Corrupt(reason.into())
}

/// Verifies segment `expected` in `source`, then decodes it: the segment's batches, re-labelled
/// with the run's schema.
pub(crate) fn decode_segment<S: Source + ?Sized>(
    source: &S,
    expected: &IndexEntry,
) -> Result<Vec<RecordBatch>, Fault> {
    if expected.len <= READ_WHOLE {
        // At most READ_WHOLE bytes: the same bound as the verifying pass's scratch buffer.
        let len = expected.len as usize;
        // a memset, not a zeroed allocation (see `decode_messages`)
        let mut bytes = MutableBuffer::with_capacity(len);
        bytes.resize(len, 0);
        source.read_at(bytes.as_slice_mut(), expected.offset)?;
        let in_memory = IndexEntry {
            offset: 0,
            ..expected.clone()
        };
        return verify_and_decode(bytes.as_slice(), &in_memory);
    }
    verify_and_decode(source, expected)
}

/// A segment of at most this many bytes is read with one positioned read, then verified and
/// decoded from memory: with thousands of partitions segments are a few dozen KiB, and reading
/// each message's pieces with their own system calls, twice, cost more than the copy.
const READ_WHOLE: u64 = SCRATCH as u64;

fn verify_and_decode<S: Source + ?Sized>(
    source: &S,
    expected: &IndexEntry,
) -> Result<Vec<RecordBatch>, Fault> {
    let messages = verify(source, expected)?;
    decode(source, expected, messages)
}

/// One IPC message of a verified segment.
struct Message {
    /// Continuation marker, metadata length and metadata flatbuffer, as verified.
    meta: Buffer,
    /// Where the body is in the run file.
    body_offset: u64,
    /// Body length in bytes (0 for bodiless messages).
    body_len: u64,
    /// The segment's running CRC32C just before the body, and just after it, as the verifying
    /// pass saw them: the second pass appends the body it reads to the first and must get the
    /// second (no per-body CRC to combine: `crc32c_combine` cost ~3% of a many-segment read).
    crc_before: u32,
    crc_after: u32,
}

const CONTINUATION: [u8; 4] = [0xff; 4];

/// Scratch buffer of the verifying pass, reused for every chunk of a segment.
const SCRATCH: usize = 256 * 1024;

/// First pass: reads the whole segment through a small reused buffer, checking frame, message
/// lengths and checksum. Message bodies are not kept: the second pass reads each into its own
/// allocation and decodes it at once, which lets the allocator hand back warm memory (holding
/// every body before decoding made reads ~2.5x slower, all in page faults).
fn verify<S: Source + ?Sized>(source: &S, expected: &IndexEntry) -> Result<Vec<Message>, Fault> {
    let payload_len = expected
        .len
        .checked_sub(FRAME_LEN)
        .ok_or_else(|| corrupt("segment shorter than its frame"))?;
    let crc = verify_header(source, expected)?;
    let mut walk = Walk {
        source,
        start: expected.offset + HEADER_LEN as u64,
        len: payload_len,
        pos: 0,
        crc,
        scratch: Vec::new(),
    };
    let mut messages = Vec::new();
    loop {
        let (message, end) = walk.next_message()?;
        messages.push(message);
        if end {
            break;
        }
    }
    verify_trailer(source, expected, payload_len, walk.crc)?;
    Ok(messages)
}

/// Checks the header and returns the CRC32C of its bytes.
fn verify_header<S: Source + ?Sized>(source: &S, expected: &IndexEntry) -> Result<u32, Fault> {
    let mut header = [0u8; HEADER_LEN];
    source.read_at(&mut header, expected.offset)?;
    let crc = crc32c::crc32c(&header);
    let parsed = Header::decode(&header).map_err(Fault::Corrupt)?;
    if parsed.partition != expected.partition {
        return Err(corrupt(format!(
            "header names partition {}",
            parsed.partition
        )));
    }
    Ok(crc)
}

/// Checks the trailer against `crc` (of everything before it) and against the index.
fn verify_trailer<S: Source + ?Sized>(
    source: &S,
    expected: &IndexEntry,
    payload_len: u64,
    crc: u32,
) -> Result<(), Fault> {
    let mut trailer = [0u8; TRAILER_LEN];
    let at = expected.offset + HEADER_LEN as u64 + payload_len;
    source.read_at(&mut trailer, at)?;
    let crc = crc32c::crc32c_append(crc, &trailer[..TRAILER_CRC_COVERED]);
    let parsed = Trailer::decode(&trailer).map_err(Fault::Corrupt)?;
    if parsed.crc != crc {
        return Err(corrupt(format!(
            "checksum mismatch: trailer has {:08x}, bytes give {crc:08x}",
            parsed.crc
        )));
    }
    if parsed.crc != expected.checksum {
        return Err(corrupt(format!(
            "checksum {:08x} differs from the index's {:08x}",
            parsed.crc, expected.checksum
        )));
    }
    if parsed.payload_len != payload_len
        || parsed.rows != expected.rows
        || parsed.batches != expected.batches
    {
        return Err(corrupt(
            "trailer does not match the index (length, rows or batches)",
        ));
    }
    Ok(())
}

/// The verifying pass's walk over the payload, message by message.
struct Walk<'a, S: ?Sized> {
    source: &'a S,
    /// Where the payload starts in the run file.
    start: u64,
    /// Payload length.
    len: u64,
    /// Bytes of the payload walked so far.
    pos: u64,
    /// CRC32C of the header and the payload so far.
    crc: u32,
    scratch: Vec<u8>,
}

impl<S: Source + ?Sized> Walk<'_, S> {
    /// Reads `buf.len()` bytes at the walk's position into `buf`, adding them to the CRC.
    fn take(&mut self, buf: &mut [u8]) -> Result<(), Fault> {
        self.source.read_at(buf, self.start + self.pos)?;
        self.crc = crc32c::crc32c_append(self.crc, buf);
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// The next message, and whether it is the end-of-stream marker (the last one).
    fn next_message(&mut self) -> Result<(Message, bool), Fault> {
        if self.len - self.pos < 8 {
            return Err(corrupt("ipc stream ends without its end-of-stream marker"));
        }
        let mut prefix = [0u8; 8];
        self.take(&mut prefix)?;
        if prefix[..4] != CONTINUATION {
            return Err(corrupt(format!(
                "no ipc continuation marker at payload byte {}",
                self.pos - 8
            )));
        }
        let meta_len = u64::from(u32::from_le_bytes([
            prefix[4], prefix[5], prefix[6], prefix[7],
        ]));
        if meta_len == 0 {
            // end-of-stream marker: must be the last bytes of the payload
            if self.pos != self.len {
                return Err(corrupt("bytes after the ipc end-of-stream marker"));
            }
            let end = Message {
                meta: Buffer::from_vec(prefix.to_vec()),
                body_offset: self.start + self.pos,
                body_len: 0,
                crc_before: self.crc,
                crc_after: self.crc,
            };
            return Ok((end, true));
        }
        if meta_len > self.len - self.pos {
            return Err(corrupt(format!(
                "ipc metadata length {meta_len} overruns the segment"
            )));
        }
        let mut meta = vec![0u8; 8 + meta_len as usize];
        meta[..8].copy_from_slice(&prefix);
        self.take(&mut meta[8..])?;
        let body_len = self.body_len(&meta[8..])?;
        let body_offset = self.start + self.pos;
        let crc_before = self.crc;
        self.skip_body(body_len)?;
        let message = Message {
            meta: Buffer::from_vec(meta),
            body_offset,
            body_len,
            crc_before,
            crc_after: self.crc,
        };
        Ok((message, false))
    }

    /// The body length the metadata flatbuffer declares, checked against the bytes left and
    /// against the buffers the message declares.
    fn body_len(&self, flatbuffer: &[u8]) -> Result<u64, Fault> {
        let message = arrow_ipc::root_as_message(flatbuffer)
            .map_err(|e| corrupt(format!("malformed ipc message metadata: {e}")))?;
        let declared = message.bodyLength();
        let body_len = u64::try_from(declared)
            .ok()
            .filter(|&n| n <= self.len - self.pos)
            .ok_or_else(|| corrupt(format!("ipc body length {declared} overruns the segment")))?;
        check_buffers(message, body_len).map_err(Fault::Corrupt)?;
        Ok(body_len)
    }

    /// Reads past a body of `body_len` bytes through the scratch buffer, adding it to the
    /// segment's CRC.
    fn skip_body(&mut self, body_len: u64) -> Result<(), Fault> {
        let mut left = body_len;
        let source = self.source;
        while left > 0 {
            let n = left.min(SCRATCH as u64) as usize;
            let at = self.start + self.pos;
            // in memory (a segment read whole): checksummed where it is, not copied first
            let bytes = match source.bytes_at(at, n) {
                Some(bytes) => bytes,
                None => {
                    self.scratch.resize(n, 0);
                    source.read_at(&mut self.scratch[..n], at)?;
                    &self.scratch[..n]
                }
            };
            self.crc = crc32c::crc32c_append(self.crc, bytes);
            self.pos += n as u64;
            left -= n as u64;
        }
        Ok(())
    }
}

/// Checks that the buffers a record batch or dictionary message declares lie inside its body
/// and start 8-byte aligned (the IPC format's rule; our writer aligns to 16). arrow-ipc 60
/// slices them unchecked and panics on one that overruns (found by the `ipc_payload` fuzz
/// target); this makes it a plain `Corrupt` error, also under `panic = "abort"`.
fn check_buffers(message: arrow_ipc::Message<'_>, body_len: u64) -> Result<(), String> {
    let batch = match message.header_type() {
        arrow_ipc::MessageHeader::RecordBatch => message.header_as_record_batch(),
        arrow_ipc::MessageHeader::DictionaryBatch => message
            .header_as_dictionary_batch()
            .and_then(|dictionary| dictionary.data()),
        _ => return Ok(()),
    };
    let Some(buffers) = batch.and_then(|batch| batch.buffers()) else {
        return Ok(());
    };
    for (i, buffer) in buffers.iter().enumerate() {
        let (offset, length) = (buffer.offset(), buffer.length());
        let end = u64::try_from(offset)
            .ok()
            .zip(u64::try_from(length).ok())
            .and_then(|(offset, length)| offset.checked_add(length));
        if end.is_none_or(|end| end > body_len) || offset % 8 != 0 {
            return Err(format!(
                "ipc buffer {i} (offset {offset}, length {length}) is outside its message's \
                 {body_len}-byte body or not 8-byte aligned"
            ));
        }
    }
    Ok(())
}

/// Second pass: reads each body into its own 64-byte aligned allocation, checks it has the CRC
/// the first pass verified (a file could have changed in between), and only then decodes it,
/// guarding against decoder errors and panics.
fn decode<S: Source + ?Sized>(
    source: &S,
    expected: &IndexEntry,
    messages: Vec<Message>,
) -> Result<Vec<RecordBatch>, Fault> {
    let decoded = catch_unwind(AssertUnwindSafe(|| decode_messages(source, messages)));
    let (schema, batches) = match decoded {
        Ok(decoded) => decoded?,
        Err(panic) => {
            let message = panic_message(&*panic).unwrap_or_default();
            return Err(corrupt(format!("ipc decoder panicked: {message}")));
        }
    };
    check_schema(&expected.schema, &schema).map_err(|mismatch| {
        corrupt(format!(
            "decoded schema differs from the run's schema: {mismatch}"
        ))
    })?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if rows != expected.rows || batches.len() as u64 != expected.batches {
        return Err(corrupt("decoded rows or batches differ from the index"));
    }
    batches
        .into_iter()
        .map(|b| conform_batch(&expected.schema, b).map_err(|(m, _)| corrupt(m.to_string())))
        .collect()
}

type Decoded = (SchemaRef, Vec<RecordBatch>);

fn decode_messages<S: Source + ?Sized>(
    source: &S,
    messages: Vec<Message>,
) -> Result<Decoded, Fault> {
    let arrow = |e: ArrowError| corrupt(format!("ipc decode failed: {e}"));
    let mut decoder = StreamDecoder::new();
    let mut batches = Vec::new();
    for message in messages {
        let body = if message.body_len == 0 {
            Buffer::from_vec(Vec::<u8>::new())
        } else {
            // 64-byte aligned, so every array is zero-copy over it. Zeroed by a memset, not
            // asked for zeroed: jemalloc zeroes a recycled large extent with madvise, and the
            // page faults and TLB shootdowns that follow cost ~20% of a many-segment read.
            let len = message.body_len as usize;
            let mut body = MutableBuffer::with_capacity(len);
            body.resize(len, 0);
            source.read_at(body.as_slice_mut(), message.body_offset)?;
            if crc32c::crc32c_append(message.crc_before, body.as_slice()) != message.crc_after {
                return Err(corrupt("the segment changed while it was being read"));
            }
            body.into()
        };
        check_before_decoding(&message.meta, &body, decoder.schema().as_deref())?;
        for mut buffer in [message.meta, body] {
            while !buffer.is_empty() {
                if let Some(batch) = decoder.decode(&mut buffer).map_err(arrow)? {
                    batches.push(batch);
                }
            }
        }
    }
    decoder.finish().map_err(arrow)?;
    let schema = decoder
        .schema()
        .ok_or_else(|| corrupt("ipc stream has no schema"))?;
    Ok((schema, batches))
}

/// The checks arrow-ipc 59 lacks (`ipc_checks.rs`), on a message's metadata (its 8-byte
/// prefix first) and body.
fn check_before_decoding(meta: &[u8], body: &[u8], schema: Option<&Schema>) -> Result<(), Fault> {
    let Some(flatbuffer) = meta.get(8..).filter(|f| !f.is_empty()) else {
        return Ok(()); // the end-of-stream marker
    };
    // parsed with its verifier in the first pass; a failure here is that pass's error
    let Ok(message) = arrow_ipc::root_as_message(flatbuffer) else {
        return Ok(());
    };
    // a schema message may come again later in the stream: checked wherever it stands
    check_schema_message(message).map_err(corrupt)?;
    match schema {
        Some(schema) => check_message(message, body, schema).map_err(corrupt),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringDictionaryBuilder};
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, Decimal128Array, StringArray};

    use super::*;
    use crate::{SpillDir, SpillOptions};

    fn sample() -> RecordBatch {
        let mut dict = StringDictionaryBuilder::<Int32Type>::new();
        let mut list = ListBuilder::new(arrow_array::builder::Int32Builder::new());
        for i in 0..6 {
            dict.append_value(format!("d{}", i % 3));
            list.values().append_value(i);
            list.append(i % 4 != 0);
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "s",
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    None,
                    Some("ccc"),
                    Some(""),
                    Some("e"),
                    Some("ff"),
                ])),
            ),
            ("d", Arc::new(dict.finish())),
            ("l", Arc::new(list.finish())),
            (
                "m",
                Arc::new(
                    Decimal128Array::from(vec![1, -2, 3, 4, 5, 6])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ),
        ];
        RecordBatch::try_from_iter(columns).unwrap()
    }

    /// The decoder is untrusted even behind the checksum: flip each payload byte, fix up the
    /// checksum so verification passes, and decoding must give batches or `Corrupt`, never a
    /// panic.
    #[test]
    fn checksum_valid_garbage_is_an_error_not_a_panic() {
        let root = tempfile::tempdir().unwrap();
        let dir = SpillDir::create(root.path()).unwrap();
        let batch = sample();
        let mut writer = dir.run_writer(batch.schema(), SpillOptions::default());
        writer
            .append(5, &[batch.clone(), batch.slice(1, 4)])
            .unwrap();
        let segment = writer.finish().unwrap().remove(0);
        let original = std::fs::read(segment.path()).unwrap();
        let crc_at = original.len() - 8;

        let mut decode_errors = 0;
        for at in HEADER_LEN..original.len() - TRAILER_LEN {
            let mut bytes = original.clone();
            bytes[at] ^= 0x5a;
            let crc = crc32c::crc32c(&bytes[..crc_at]);
            bytes[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
            let expected = IndexEntry {
                checksum: crc,
                ..segment.inner.entry.clone()
            };
            match decode_segment(&bytes[..], &expected) {
                Ok(_) => {}
                Err(Fault::Corrupt(_)) => decode_errors += 1,
                Err(other) => panic!("byte {at}: {other:?}"),
            }
        }
        assert!(decode_errors > 0);
        let expected = arrow_select::concat::concat_batches(
            &batch.schema(),
            &[batch.clone(), batch.slice(1, 4)],
        )
        .unwrap();
        let read = decode_segment(&original[..], &segment.inner.entry.clone()).unwrap();
        assert_eq!(read, vec![expected.clone()]);
        assert_eq!(segment.read().unwrap(), vec![expected]);
    }

    #[test]
    fn a_short_source_is_a_source_fault_and_reads_as_truncated() {
        let bytes = [0u8; 10];
        let mut buf = [0u8; 4];
        assert!(bytes[..].read_at(&mut buf, 6).is_ok());
        let error = bytes[..].read_at(&mut buf, 7).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        assert!(bytes[..].read_at(&mut buf, u64::MAX).is_err());
        let expected = IndexEntry {
            schema: Arc::new(arrow_schema::Schema::empty()),
            partition: 1,
            offset: 0,
            len: 100,
            rows: 0,
            batches: 0,
            checksum: 0,
        };
        let fault = decode_segment(&bytes[..], &expected).unwrap_err();
        let error = fault.into_error(Path::new("/d"), Path::new("/d/f"), &expected);
        assert!(
            matches!(&error, SpillError::Corrupt { reason, .. } if reason.contains("truncated")),
            "{error}"
        );
    }
}
