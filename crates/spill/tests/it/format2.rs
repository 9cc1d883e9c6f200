//! Format 2's layout, measured on written run files: the schema record once at the start of each
//! file, a segment that is its frame plus its own dictionary and record batch messages, and a
//! format 1 segment refused by name.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::MetadataVersion;
use arrow_ipc::writer::{IpcWriteOptions, StreamEncoder};
use arrow_schema::Schema;
use arrow_shards_spill::fuzz::{decode_batch, decode_schema};
use arrow_shards_spill::{SpillDir, SpillError, SpillOptions};

/// Segment header and trailer.
const FRAME: u64 = 48;
/// Schema record bytes around the schema message.
const SCHEMA_RECORD_FRAME: u64 = 24;
/// An IPC stream's end-of-stream marker, which format 1 wrote in every segment.
const END_OF_STREAM: u64 = 8;

/// The IPC encoding the writer uses (uncompressed).
fn ipc_options() -> IpcWriteOptions {
    IpcWriteOptions::try_new(16, false, MetadataVersion::V5).unwrap()
}

/// Bytes of the encapsulated schema message of `schema`.
fn schema_message_len(schema: &Schema) -> u64 {
    let encoder = StreamEncoder::try_new_with_options(schema, ipc_options()).unwrap();
    let stream: usize = encoder.finish().unwrap().iter().map(|b| b.len()).sum();
    stream as u64 - END_OF_STREAM
}

/// Bytes of the dictionary and record batch messages of `batch` encoded alone.
fn messages_len(batch: &RecordBatch) -> u64 {
    let mut encoder = StreamEncoder::try_new_with_options(&batch.schema(), ipc_options()).unwrap();
    let first: usize = encoder.encode(batch).unwrap().iter().map(|b| b.len()).sum();
    first as u64 - schema_message_len(&batch.schema())
}

#[test]
fn a_file_holds_its_schema_once_and_a_segment_only_its_messages() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let schema = decode_schema();
    let options = SpillOptions::default().with_coalesce_rows(0);
    let mut writer = dir.run_writer(Arc::clone(&schema), options);
    let batches = [decode_batch(0, 7), decode_batch(7, 30)];
    writer.append(2, &batches[..1]).unwrap();
    writer.append(0, &[]).unwrap();
    writer.append(9, &batches[1..]).unwrap();
    let segments = writer.finish().unwrap();

    let s = schema_message_len(&schema);
    eprintln!("schema message of the fuzz schema: {s} bytes");
    let file = std::fs::read(segments[0].path()).unwrap();
    assert_eq!(&file[..8], b"ASHSCHEM");
    assert_eq!(segments[0].offset(), s + SCHEMA_RECORD_FRAME);
    assert_eq!(segments[0].len(), FRAME + messages_len(&batches[0]));
    assert_eq!(
        segments[1].len(),
        FRAME,
        "an empty segment is its frame alone"
    );
    assert_eq!(segments[2].len(), FRAME + messages_len(&batches[1]));
    let total: u64 = segments.iter().map(|seg| seg.len()).sum();
    assert_eq!(file.len() as u64, s + SCHEMA_RECORD_FRAME + total);
    assert_eq!(dir.metrics().bytes_written, file.len() as u64);
    // format 1 wrote the schema message and an end-of-stream marker in each segment instead
    let format_1 = total + segments.len() as u64 * (s + END_OF_STREAM);
    assert_eq!(
        format_1 - file.len() as u64,
        2 * s + 3 * END_OF_STREAM - SCHEMA_RECORD_FRAME
    );
    assert_eq!(segments[2].read().unwrap(), &batches[1..]);
}

#[test]
fn each_file_of_a_rotating_run_opens_with_the_schema_record() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let options = SpillOptions::default().with_max_file_bytes(1);
    let mut writer = dir.run_writer(decode_schema(), options);
    for partition in 0..3 {
        writer.append(partition, &[decode_batch(0, 5)]).unwrap();
    }
    let segments = writer.finish().unwrap();
    let s = schema_message_len(&decode_schema());
    for segment in &segments {
        assert_eq!(
            segment.offset(),
            s + SCHEMA_RECORD_FRAME,
            "one segment per file"
        );
        let file = std::fs::read(segment.path()).unwrap();
        assert_eq!(&file[..8], b"ASHSCHEM");
        assert_eq!(segment.read().unwrap(), vec![decode_batch(0, 5)]);
    }
}

#[test]
fn a_format_1_segment_is_refused_naming_its_version() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let mut writer = dir.run_writer(decode_schema(), SpillOptions::default());
    writer.append(1, &[decode_batch(0, 3)]).unwrap();
    let segment = writer.finish().unwrap().remove(0);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment.path())
        .unwrap();
    file.write_all_at(&1u16.to_le_bytes(), segment.offset() + 8)
        .unwrap();
    match segment.read() {
        Err(SpillError::Corrupt { file, reason, .. }) => {
            assert_eq!(file, segment.path());
            assert!(reason.contains("format version 1"), "{reason}");
        }
        other => panic!("a format 1 segment must be refused as corrupt, got {other:?}"),
    }
}
