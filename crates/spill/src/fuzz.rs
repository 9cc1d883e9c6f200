//! The decode fuzz targets' logic (feature `test-utils`), next to the decoder it tests. The
//! cargo-fuzz targets in `fuzz/` call it, and so do the stable replay tests
//! (`crates/arrow-shards/tests/it/fuzz_replay.rs`), so CI runs the very functions the fuzzer
//! runs, over the committed corpus and seeded random inputs.
//!
//! Both targets feed their input straight to the I/O-free verifier and decoder (`decode/`),
//! as the bytes of a run file in memory: no file is written per input. What reading a segment
//! adds around it (open, positioned reads, close) is tested with real files by the corruption
//! tests.
//!
//! - [`DecodeTarget`] (`segment_decode`): untrusted bytes as a run file. A real run (three
//!   segments of [`decode_schema`]: strings, dictionaries, lists and views) is written once and
//!   its index entries kept; each input is then read as that run file, segment by segment,
//!   which is exactly the path a corrupted disk takes (each decoded with the run's schema
//!   message the writer kept, as a read does). A read must either return the rows that were
//!   written (the input left that segment's bytes intact) or fail with [`SpillError::Corrupt`]
//!   naming the file and the segment's offset; never panic. The file's schema record is read
//!   from the input too: it must be the one written or be refused.
//! - [`PayloadTarget`] (`ipc_payload`): untrusted bytes as the Arrow IPC payload of a segment
//!   (its dictionary and record batch messages) whose frame and checksum are *valid*, so they
//!   reach arrow-ipc's decoder, after the run's real schema message. `segment_decode`
//!   cannot get there: any change to a segment's bytes fails the CRC32C first. This is the case
//!   of bytes that were bad before they were checksummed (or a CRC collision): the decoder must
//!   still return an error, never panic past `catch_unwind`, abort, hang or hand out invalid
//!   arrays.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder, StringDictionaryBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray, StringViewArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use arrow_select::concat::concat_batches;

use crate::decode::{Fault, IndexEntry, decode_segment, read_schema_record};
use crate::format::{HEADER_LEN, TRAILER_LEN, Trailer};
use crate::{SegmentRef, SpillDir, SpillError, SpillOptions};

/// The schema of the fuzzed runs: an id, strings, a dictionary, a list and string views.
pub fn decode_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "tag",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            true,
        ),
        Field::new("list", DataType::new_list(DataType::Int32, true), true),
        Field::new("view", DataType::Utf8View, true),
    ]))
}

/// A batch of [`decode_schema`] with ids `start..start + rows`.
pub fn decode_batch(start: i64, rows: usize) -> RecordBatch {
    let ids = Int64Array::from_iter_values(start..start + rows as i64);
    let names: StringArray = (0..rows)
        .map(|i| (i % 7 != 0).then(|| format!("name-{}", start + i as i64)))
        .collect();
    let mut tags = StringDictionaryBuilder::<Int32Type>::new();
    let mut list = ListBuilder::new(Int32Builder::new());
    for i in 0..rows {
        tags.append_value(["red", "green", "blue"][i % 3]);
        for v in 0..(i % 4) as i32 {
            list.values().append_value(v);
        }
        list.append(i % 5 != 0);
    }
    let views: StringViewArray = (0..rows)
        .map(|i| {
            Some(format!(
                "a longer string value number {i} that is not inlined"
            ))
        })
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(ids),
        Arc::new(names),
        Arc::new(tags.finish()),
        Arc::new(list.finish()),
        Arc::new(views),
    ];
    RecordBatch::try_new(decode_schema(), columns).expect("columns match the schema")
}

/// Writes one run of `plan` (partition, batches) and returns its segments and file bytes.
fn write_run(
    plan: &[(u32, Vec<RecordBatch>)],
    options: SpillOptions,
) -> (Vec<SegmentRef>, Vec<u8>) {
    let dir = SpillDir::create(&std::env::temp_dir()).expect("spill dir");
    let mut writer = dir.run_writer(decode_schema(), options);
    for (partition, batches) in plan {
        writer.append(*partition, batches).expect("append");
    }
    let segments = writer.finish().expect("finish");
    let bytes = std::fs::read(segments[0].path()).expect("run file");
    (segments, bytes)
}

/// The `segment_decode` target: each input is read as the run file of a real run.
#[derive(Debug)]
pub struct DecodeTarget {
    /// Each segment's index entry and its rows, concatenated.
    segments: Vec<(IndexEntry, RecordBatch)>,
    /// The path the run file had, which errors name.
    file: PathBuf,
    original: Vec<u8>,
}

impl DecodeTarget {
    /// Writes the real run: partitions 3, 0 and 7, of 2, 1 and 3 batches.
    pub fn new() -> Self {
        let plan: [(u32, Vec<RecordBatch>); 3] = [
            (3, vec![decode_batch(0, 5), decode_batch(5, 3)]),
            (0, vec![decode_batch(100, 1)]),
            (
                7,
                vec![
                    decode_batch(200, 4),
                    decode_batch(204, 2),
                    decode_batch(206, 6),
                ],
            ),
        ];
        let (refs, original) = write_run(&plan, SpillOptions::default());
        let file = refs[0].path().to_path_buf();
        let segments = refs
            .iter()
            .zip(plan)
            .map(|(segment, (_, batches))| {
                let rows = concat_batches(&decode_schema(), &batches).expect("concat");
                (segment.inner.entry.clone(), rows)
            })
            .collect();
        Self {
            segments,
            file,
            original,
        }
    }

    /// The bytes of the real run file (the seed of the corpus).
    pub fn original(&self) -> &[u8] {
        &self.original
    }

    /// Reads every segment from `data` as the run file: each read returns exactly the rows
    /// written or a `Corrupt` error naming the file and the segment's offset (panics if not).
    /// Returns how many segments read back intact.
    pub fn run(&self, data: &[u8]) -> usize {
        self.check_schema_record(data);
        let mut intact = 0;
        for (expected, rows) in &self.segments {
            match decode_segment(data, expected) {
                Ok(batches) => {
                    let got = concat_batches(&decode_schema(), &batches).expect("concat");
                    assert_eq!(
                        &got, rows,
                        "a segment read without error must hold exactly what was written"
                    );
                    intact += 1;
                }
                Err(fault) => {
                    let error = fault.into_error(&self.file, &self.file, expected);
                    assert_corrupt(error, &self.file, expected);
                }
            }
        }
        intact
    }
}

impl DecodeTarget {
    /// The schema record of `data` is the one written, or refused as corrupt.
    fn check_schema_record(&self, data: &[u8]) {
        let written = &self.segments[0].0.schema_message;
        match read_schema_record(data) {
            Ok(message) => assert_eq!(
                &message, written,
                "a schema record read without error must hold the run's schema message"
            ),
            Err(Fault::Corrupt(reason)) => assert!(!reason.is_empty()),
            Err(Fault::Source(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
        }
    }
}

impl Default for DecodeTarget {
    fn default() -> Self {
        Self::new()
    }
}

/// What one input of [`PayloadTarget`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Decoded into valid batches of the run's schema and row count.
    Decoded,
    /// Refused as `Corrupt` by a check.
    Corrupt,
    /// Refused as `Corrupt` because arrow-ipc panicked (caught by the decoder).
    DecoderPanic,
}

/// The `ipc_payload` target: each input is the payload of a validly framed segment.
///
/// A real segment (partition 4, four batches of [`decode_schema`], coalescing off so each batch
/// is its own message with its own dictionary) is written once; each input becomes the payload
/// of a new frame (the real header, the input, a trailer with the index's rows and batches and
/// the input's CRC32C), alone at offset 0 of the bytes read, read with an index entry that
/// expects that length and checksum and the run's real schema message. A read
/// must return batches of the run's schema and the index's row count whose arrays pass full
/// validation (exactly the written rows when the input is the real payload), or fail with
/// `SpillError::Corrupt` naming the file and offset 0.
#[derive(Debug)]
pub struct PayloadTarget {
    expected: IndexEntry,
    file: PathBuf,
    header: Vec<u8>,
    payload: Vec<u8>,
    rows: RecordBatch,
}

impl PayloadTarget {
    /// Writes the real segment.
    pub fn new() -> Self {
        let batches = vec![
            decode_batch(0, 5),
            decode_batch(5, 0),
            decode_batch(5, 9),
            decode_batch(14, 2),
        ];
        let rows = concat_batches(&decode_schema(), &batches).expect("concat");
        let options = SpillOptions::default().with_coalesce_rows(0);
        let (segments, bytes) = write_run(&[(4, batches)], options);
        let segment = &segments[0];
        // the only segment of its file, after the schema record
        let start = segment.offset() as usize;
        assert_eq!(start + segment.len() as usize, bytes.len());
        Self {
            expected: IndexEntry {
                offset: 0,
                ..segment.inner.entry.clone()
            },
            file: segment.path().to_path_buf(),
            header: bytes[start..start + HEADER_LEN].to_vec(),
            payload: bytes[start + HEADER_LEN..bytes.len() - TRAILER_LEN].to_vec(),
            rows,
        }
    }

    /// The real segment's IPC payload (the seed of the corpus).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Frames `payload` validly and reads it (panics if the outcome breaks the rules above).
    pub fn run(&self, payload: &[u8]) -> Outcome {
        let (rows, batches) = (self.expected.rows, self.expected.batches);
        let mut frame = Vec::with_capacity(payload.len() + HEADER_LEN + TRAILER_LEN);
        frame.extend_from_slice(&self.header);
        frame.extend_from_slice(payload);
        let payload_len = payload.len() as u64;
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&frame),
            &Trailer::covered(payload_len, rows, batches),
        );
        let trailer = Trailer {
            payload_len,
            rows,
            batches,
            crc,
        };
        frame.extend_from_slice(&trailer.encode());
        // forged bytes behind a valid checksum: not this process's writer's, so validated
        let expected = IndexEntry {
            len: frame.len() as u64,
            checksum: crc,
            written_here: false,
            ..self.expected.clone()
        };
        match decode_segment(&frame[..], &expected) {
            Ok(batches) => {
                self.check_decoded(&batches, payload);
                Outcome::Decoded
            }
            Err(fault) => {
                let error = fault.into_error(&self.file, &self.file, &expected);
                let panicked = error.to_string().contains("ipc decoder panicked");
                assert_corrupt(error, &self.file, &expected);
                if panicked {
                    Outcome::DecoderPanic
                } else {
                    Outcome::Corrupt
                }
            }
        }
    }

    fn check_decoded(&self, batches: &[RecordBatch], payload: &[u8]) {
        let mut rows = 0;
        for batch in batches {
            assert_eq!(
                batch.schema(),
                decode_schema(),
                "decoded with the run's schema"
            );
            for column in batch.columns() {
                column
                    .to_data()
                    .validate_full()
                    .expect("a decoded array must be valid");
                assert_eq!(column.len(), batch.num_rows());
            }
            rows += batch.num_rows() as u64;
        }
        assert_eq!(rows, self.expected.rows, "the index's row count");
        let got = concat_batches(&decode_schema(), batches).expect("valid batches concatenate");
        if payload == self.payload.as_slice() {
            assert_eq!(got, self.rows, "the real payload reads back exactly");
        }
    }
}

impl Default for PayloadTarget {
    fn default() -> Self {
        Self::new()
    }
}

/// Asserts that reading segment `expected` of `file` failed as `Corrupt`, naming the file, the
/// segment's offset and its partition.
fn assert_corrupt(error: SpillError, file: &Path, expected: &IndexEntry) {
    match error {
        SpillError::Corrupt {
            file: named,
            offset,
            partition,
            reason,
        } => {
            assert_eq!(named, file);
            assert_eq!(offset, expected.offset);
            assert_eq!(partition, expected.partition);
            assert!(!reason.is_empty());
        }
        other => panic!("bad bytes must be reported as corrupt, not as {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_inputs_read_back_and_damage_is_corrupt() {
        let decode = DecodeTarget::new();
        assert_eq!(decode.run(decode.original()), 3);
        let written = &decode.segments[0].0.schema_message;
        assert_eq!(
            read_schema_record(decode.original()).ok(),
            Some(written.clone())
        );
        let mut damaged = decode.original().to_vec();
        damaged[20] ^= 1;
        assert!(matches!(
            read_schema_record(&damaged[..]),
            Err(Fault::Corrupt(_))
        ));
        assert_eq!(decode.run(&decode.original()[..100]), 0);
        assert_eq!(decode.run(&[]), 0);
        let payload = PayloadTarget::new();
        assert_eq!(payload.run(payload.payload()), Outcome::Decoded);
        assert_eq!(payload.run(&payload.payload()[..40]), Outcome::Corrupt);
    }
}
