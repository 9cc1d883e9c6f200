//! The `ipc_payload` fuzz target's logic: untrusted bytes as the Arrow IPC payload of a segment
//! whose frame and checksum are *valid*, so they reach arrow-ipc's decoder. `segment_decode`
//! cannot get there: any change to a segment's bytes fails the CRC32C first. This is the case
//! of bytes that were bad before they were checksummed (or a CRC collision): the decoder must
//! still return an error, never panic past `catch_unwind`, abort, hang or hand out invalid
//! arrays.
//!
//! A real segment (partition 4, four batches of [`decode_schema`], coalescing off so each batch
//! is its own message with its own dictionary) is written once; each input becomes the payload
//! of a new frame (the real header, the input, a trailer with the index's rows and batches and
//! the input's CRC32C) written over the run file, and is read through a `SegmentRef` that
//! expects that length and checksum. A read must return batches of the run's schema and the
//! index's row count whose arrays pass full validation (exactly the written rows when the input
//! is the real payload), or fail with `SpillError::Corrupt` naming the file and offset 0.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_shards_spill::{SegmentRef, SpillDir, SpillOptions};

use crate::fuzz_logic::{assert_corrupt, decode_batch, decode_schema};

/// Frame bytes around the payload: header 16, trailer 32 (see docs/spill-format.md).
const HEADER_LEN: usize = 16;
const TRAILER_LEN: usize = 32;

/// What one input came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Decoded into valid batches of the run's schema and row count.
    Decoded,
    /// Refused as `Corrupt` by a check.
    Corrupt,
    /// Refused as `Corrupt` because arrow-ipc panicked (caught by the spill crate).
    DecoderPanic,
}

pub(crate) struct PayloadTarget {
    // Kept for their drop: the directory and the run file go with the target.
    _root: tempfile::TempDir,
    _dir: Arc<SpillDir>,
    segment: SegmentRef,
    file: PathBuf,
    header: Vec<u8>,
    payload: Vec<u8>,
    expected: RecordBatch,
}

impl PayloadTarget {
    pub(crate) fn new() -> Self {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = SpillDir::create(root.path()).expect("spill dir");
        let options = SpillOptions::default().with_coalesce_rows(0);
        let mut writer = dir.run_writer(decode_schema(), options);
        let batches = [
            decode_batch(0, 5),
            decode_batch(5, 0),
            decode_batch(5, 9),
            decode_batch(14, 2),
        ];
        writer.append(4, &batches).expect("append");
        let segment = writer.finish().expect("finish").remove(0);
        assert_eq!(segment.offset(), 0, "the only segment of its file");
        let file = segment.path().to_path_buf();
        let bytes = std::fs::read(&file).expect("run file");
        let expected =
            arrow_select::concat::concat_batches(&decode_schema(), &batches).expect("concat");
        Self {
            _root: root,
            _dir: dir,
            header: bytes[..HEADER_LEN].to_vec(),
            payload: bytes[HEADER_LEN..bytes.len() - TRAILER_LEN].to_vec(),
            segment,
            file,
            expected,
        }
    }

    /// The real segment's IPC payload (the seed of the corpus).
    pub(crate) fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Frames `payload` validly, writes it over the run file and reads it back.
    pub(crate) fn run(&self, payload: &[u8]) -> Outcome {
        let mut frame = Vec::with_capacity(payload.len() + HEADER_LEN + TRAILER_LEN);
        frame.extend_from_slice(&self.header);
        frame.extend_from_slice(payload);
        frame.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        frame.extend_from_slice(&self.segment.rows().to_le_bytes());
        frame.extend_from_slice(&self.segment.batches().to_le_bytes());
        let crc = crc32c::crc32c(&frame);
        frame.extend_from_slice(&crc.to_le_bytes());
        frame.extend_from_slice(b"SEND");
        std::fs::write(&self.file, &frame).expect("rewrite the run file");

        let segment = self.segment.reframed_for_testing(frame.len() as u64, crc);
        match segment.read() {
            Ok(batches) => {
                let mut rows = 0;
                for batch in &batches {
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
                assert_eq!(rows, segment.rows(), "the index's row count");
                let got = arrow_select::concat::concat_batches(&decode_schema(), &batches)
                    .expect("valid batches concatenate");
                if payload == self.payload.as_slice() {
                    assert_eq!(got, self.expected, "the real payload reads back exactly");
                }
                Outcome::Decoded
            }
            Err(error) => {
                let panicked = error.to_string().contains("ipc decoder panicked");
                assert_corrupt(error, &segment);
                if panicked {
                    Outcome::DecoderPanic
                } else {
                    Outcome::Corrupt
                }
            }
        }
    }
}
