//! The first pass over a segment's bytes: walk the whole segment through a small reused
//! buffer, checking the frame, every IPC length and the CRC32C, and remember each message's
//! metadata, body position and the running CRC before and after its body ([`Message`]), for the
//! decoding pass to read each body again and check it is unchanged.
//!
//! The IPC framing (continuation marker, metadata length, metadata flatbuffer's body length) is
//! parsed before the checksum is known, to find where each message ends: every length is checked
//! against the segment's remaining bytes, the flatbuffer is parsed with its verifier, and the
//! buffers a message declares must lie inside its body. A format 2 segment holds dictionary and
//! record batch messages only (the schema is the run's): any other message, or an end-of-stream
//! marker, is refused here, and the frame's payload length is where the messages end.

use arrow_buffer::Buffer;

use crate::format::{FRAME_LEN, HEADER_LEN, Header, TRAILER_CRC_COVERED, TRAILER_LEN, Trailer};

use super::source::{Fault, IndexEntry, Source, corrupt};

/// One IPC message of a verified segment.
pub(crate) struct Message {
    /// Continuation marker, metadata length and metadata flatbuffer, as verified.
    pub(crate) meta: Buffer,
    /// Where the body is in the run file.
    pub(crate) body_offset: u64,
    /// Body length in bytes (0 for bodiless messages).
    pub(crate) body_len: u64,
    /// The segment's running CRC32C just before the body, and just after it, as the verifying
    /// pass saw them: the second pass appends the body it reads to the first and must get the
    /// second (no per-body CRC to combine: `crc32c_combine` cost ~3% of a many-segment read).
    pub(crate) crc_before: u32,
    pub(crate) crc_after: u32,
}

const CONTINUATION: [u8; 4] = [0xff; 4];

/// Scratch buffer of the verifying pass, reused for every chunk of a segment.
pub(crate) const SCRATCH: usize = 256 * 1024;

/// First pass: reads the whole segment through a small reused buffer, checking frame, message
/// lengths and checksum. Message bodies are not kept: the second pass reads each into its own
/// allocation and decodes it at once, which lets the allocator hand back warm memory (holding
/// every body before decoding made reads ~2.5x slower, all in page faults).
pub(crate) fn verify<S: Source + ?Sized>(
    source: &S,
    expected: &IndexEntry,
) -> Result<Vec<Message>, Fault> {
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
    while walk.pos < walk.len {
        messages.push(walk.next_message()?);
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

    /// The next message (at least one byte of the payload is left).
    fn next_message(&mut self) -> Result<Message, Fault> {
        if self.len - self.pos < 8 {
            return Err(corrupt(format!(
                "the payload ends inside an ipc message prefix ({} bytes left)",
                self.len - self.pos
            )));
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
            return Err(corrupt(
                "an ipc end-of-stream marker in a segment (format 2 segments have none)",
            ));
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
        Ok(message)
    }

    /// The body length the metadata flatbuffer declares, checked against the bytes left and
    /// against the buffers the message declares.
    fn body_len(&self, flatbuffer: &[u8]) -> Result<u64, Fault> {
        let message = arrow_ipc::root_as_message(flatbuffer)
            .map_err(|e| corrupt(format!("malformed ipc message metadata: {e}")))?;
        let kind = message.header_type();
        if !matches!(
            kind,
            arrow_ipc::MessageHeader::RecordBatch | arrow_ipc::MessageHeader::DictionaryBatch
        ) {
            return Err(corrupt(format!(
                "a {kind:?} ipc message in a segment (format 2 segments hold only dictionary \
                 and record batch messages)"
            )));
        }
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
