//! The run's encoded IPC schema message (format 2): written once at the start of each run file
//! (`format.rs`, the schema record), kept in memory with every segment's index entry, and fed
//! to the decoder before a segment's own messages, so a segment holds only its dictionaries
//! and record batches.
//!
//! arrow-ipc's `StreamEncoder` writes the schema message before the first batch it encodes and
//! has no way to leave it out; a segment still needs a fresh encoder (so its dictionaries travel
//! with it), so the writer cuts the schema message off the front of each segment's first
//! encoded batch ([`strip_schema`]), checking the bytes it cuts are exactly the run's.

use arrow_buffer::Buffer;
use arrow_ipc::writer::{IpcWriteOptions, StreamEncoder};
use arrow_schema::{ArrowError, Schema};

/// An IPC stream's end-of-stream marker, which a `StreamEncoder` ends with: continuation
/// marker, zero length. Format 2 segments store none; the decoder is given one after them.
pub(crate) const END_OF_STREAM: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// `schema`'s IPC schema message as `StreamEncoder` writes it with `options`: continuation
/// marker, metadata length, flatbuffer (padded), no body.
pub(crate) fn encode_schema_message(
    schema: &Schema,
    options: IpcWriteOptions,
) -> Result<Buffer, ArrowError> {
    // an encoder that encodes no batch writes the schema message, then the end-of-stream marker
    let pieces = StreamEncoder::try_new_with_options(schema, options)?.finish()?;
    let mut bytes: Vec<u8> = pieces.iter().flat_map(|p| p.as_slice()).copied().collect();
    if !bytes.ends_with(&END_OF_STREAM) {
        return Err(ArrowError::IpcError(
            "an empty ipc stream did not end with the end-of-stream marker".into(),
        ));
    }
    bytes.truncate(bytes.len() - END_OF_STREAM.len());
    Ok(Buffer::from_vec(bytes))
}

/// `pieces` (a segment encoder's first output) without the leading `schema` message; an error
/// if they do not start with exactly its bytes.
pub(crate) fn strip_schema(pieces: Vec<Buffer>, schema: &[u8]) -> Result<Vec<Buffer>, ArrowError> {
    let mut left = schema;
    let mut out = Vec::with_capacity(pieces.len());
    for piece in pieces {
        if left.is_empty() {
            out.push(piece);
            continue;
        }
        let n = left.len().min(piece.len());
        if piece.as_slice()[..n] != left[..n] {
            break;
        }
        left = &left[n..];
        if n < piece.len() {
            out.push(piece.slice(n));
        }
    }
    if !left.is_empty() {
        return Err(ArrowError::IpcError(
            "the encoder's schema message differs from the run's".into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int32Array, RecordBatch};
    use arrow_schema::{DataType, Field};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_first_batch_starts_with_the_schema_message_and_loses_it() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int32Array::from(vec![1]))],
        )
        .unwrap();
        let message = encode_schema_message(&schema, IpcWriteOptions::default()).unwrap();
        let mut encoder = StreamEncoder::try_new(&schema).unwrap();
        let first = encoder.encode(&batch).unwrap();
        let second: Vec<u8> = encoder
            .encode(&batch)
            .unwrap()
            .iter()
            .flat_map(|p| p.as_slice())
            .copied()
            .collect();
        let stripped: Vec<u8> = strip_schema(first, &message)
            .unwrap()
            .iter()
            .flat_map(|p| p.as_slice())
            .copied()
            .collect();
        // without its schema message, the first batch is encoded as any later one
        assert_eq!(stripped, second);

        let other = Schema::new(vec![Field::new("b", DataType::Int32, false)]);
        let other = encode_schema_message(&other, IpcWriteOptions::default()).unwrap();
        let first = StreamEncoder::try_new(&schema)
            .unwrap()
            .encode(&batch)
            .unwrap();
        assert!(strip_schema(first, &other).is_err());
    }
}
