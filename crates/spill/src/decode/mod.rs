//! Verifying and decoding one segment's bytes, without I/O of its own: the bytes come from a
//! [`Source`], a run file (`read.rs`) or a slice in memory (the fuzz targets, tests).
//!
//! This file owns the entry ([`decode_segment`]) and the second pass; `source.rs` the source,
//! the index entry and the faults, `verify.rs` the first pass.
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
//! verifier. Decoding proper happens only on verified bytes: first the run's schema message
//! (the writer's, kept in the index entry; format 2 segments carry none), then the segment's
//! dictionaries and batches. It is still guarded: errors and panics become
//! [`SpillError::Corrupt`](crate::SpillError::Corrupt). The decoded batches must conform to the
//! run's schema ([`crate::check_schema`]) and are re-labelled with it.

#[cfg(any(test, feature = "test-utils"))]
mod schema_record;
mod source;
mod verify;

use std::panic::{AssertUnwindSafe, catch_unwind};

use arrow_array::RecordBatch;
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_schema::{ArrowError, Schema, SchemaRef};

use crate::ipc_checks::{check_message, check_schema_message};
use crate::panic::panic_message;
use crate::schema::{check_schema, conform_batch};
use crate::unchecked::SegmentDecoder;

#[cfg(any(test, feature = "test-utils"))]
pub(crate) use schema_record::read_schema_record;
use source::corrupt;
pub(crate) use source::{Fault, IndexEntry, Source};
use verify::{Message, SCRATCH, verify};

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

/// Second pass: reads each body into its own 64-byte aligned allocation, checks it has the CRC
/// the first pass verified (a file could have changed in between), and only then decodes it,
/// guarding against decoder errors and panics.
fn decode<S: Source + ?Sized>(
    source: &S,
    expected: &IndexEntry,
    messages: Vec<Message>,
) -> Result<Vec<RecordBatch>, Fault> {
    let decoded = catch_unwind(AssertUnwindSafe(|| {
        decode_messages(source, expected, messages)
    }));
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

/// Decodes the verified `messages` after the run's schema message; without validating the
/// arrays again if the segment was written here (each body's CRC32C is checked just before it
/// is decoded, and the schema message is the one the writer encoded, kept in memory).
fn decode_messages<S: Source + ?Sized>(
    source: &S,
    expected: &IndexEntry,
    messages: Vec<Message>,
) -> Result<Decoded, Fault> {
    let arrow = |e: ArrowError| corrupt(format!("ipc decode failed: {e}"));
    let mut decoder = SegmentDecoder::new(expected.written_here);
    // the run's schema message first: the writer kept it in memory with the index entry
    check_before_decoding(&expected.schema_message, &[], None)?;
    let no_body = Buffer::from_vec(Vec::<u8>::new());
    if decoder
        .decode(&expected.schema_message, &no_body)
        .map_err(arrow)?
        .is_some()
    {
        return Err(corrupt("the run's schema message decoded as a batch"));
    }
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
        // checked against the run's schema, which the schema message fed first encodes (the
        // writer encoded it from that schema; the decoded schema is checked against it below)
        check_before_decoding(&message.meta, &body, Some(&expected.schema))?;
        if let Some(batch) = decoder.decode(&message.meta, &body).map_err(arrow)? {
            batches.push(batch);
        }
    }
    // format 2 segments store no end-of-stream marker: the frame's length ended the messages
    let schema = decoder
        .schema()
        .ok_or_else(|| corrupt("ipc stream has no schema"))?;
    Ok((schema, batches))
}

/// The checks arrow-ipc 59 lacks (`ipc_checks.rs`), on a message's metadata (its 8-byte
/// prefix first) and body.
fn check_before_decoding(meta: &[u8], body: &[u8], schema: Option<&Schema>) -> Result<(), Fault> {
    let Some(flatbuffer) = meta.get(8..).filter(|f| !f.is_empty()) else {
        return Ok(()); // no message: the decoder refuses what is left
    };
    // a segment's messages were parsed with the verifier in the first pass; the run's schema
    // message is refused by the decoder if this fails
    let Ok(message) = arrow_ipc::root_as_message(flatbuffer) else {
        return Ok(());
    };
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

    use std::io;
    use std::path::Path;

    use super::*;
    use crate::format::{HEADER_LEN, TRAILER_LEN};
    use crate::{SpillDir, SpillError, SpillOptions};

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

    /// Bytes this process did not write are validated even behind a matching checksum: flip
    /// each payload byte, fix up the checksum so verification passes, and decoding must give
    /// batches or `Corrupt`, never a panic.
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
        let start = segment.offset() as usize + HEADER_LEN;
        for at in start..original.len() - TRAILER_LEN {
            let mut bytes = original.clone();
            bytes[at] ^= 0x5a;
            let crc = crc32c::crc32c(&bytes[..crc_at]);
            bytes[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
            let expected = IndexEntry {
                checksum: crc,
                written_here: false,
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
            schema_message: Buffer::from_vec(Vec::<u8>::new()),
            partition: 1,
            offset: 0,
            len: 100,
            rows: 0,
            batches: 0,
            checksum: 0,
            written_here: false,
        };
        let fault = decode_segment(&bytes[..], &expected).unwrap_err();
        let error = fault.into_error(Path::new("/d"), Path::new("/d/f"), &expected);
        assert!(
            matches!(&error, SpillError::Corrupt { reason, .. } if reason.contains("truncated")),
            "{error}"
        );
    }
}
