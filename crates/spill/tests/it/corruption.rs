//! Every flipped byte and every truncation of a small run: each read is either the original
//! data or `Corrupt`, never a panic or wrong data.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_shards_spill::{Compression, SegmentRef, SpillDir, SpillError, SpillOptions};

use crate::common::{self, Rng};

/// A small run of three one-batch segments with a decimal, strings, a dictionary and a list.
fn small_run(
    dir: &Arc<SpillDir>,
    compression: Compression,
) -> (Vec<SegmentRef>, Vec<Vec<RecordBatch>>) {
    let kinds = [5, 13, 20, 21];
    let schema = common::schema(&kinds);
    let mut rng = Rng::new(3);
    let inputs: Vec<Vec<RecordBatch>> = (0..3)
        .map(|p| vec![common::batch(&schema, &kinds, &mut rng, 2 + p, 1, 30)])
        .collect();
    let options = SpillOptions::default()
        .with_compression(compression)
        .with_compress_min_bytes(0)
        .with_coalesce_rows(0);
    let mut writer = dir.run_writer(schema, options);
    for (partition, batches) in inputs.iter().enumerate() {
        writer.append(partition as u32, batches).unwrap();
    }
    (writer.finish().unwrap(), inputs)
}

/// Reads every segment: the one(s) in `damaged` must be `Corrupt`, the others intact.
fn check(
    segments: &[SegmentRef],
    inputs: &[Vec<RecordBatch>],
    damaged: impl Fn(&SegmentRef) -> bool,
    case: &str,
) {
    for (segment, input) in segments.iter().zip(inputs) {
        match segment.read() {
            Ok(read) => {
                assert!(
                    !damaged(segment),
                    "{case}: damaged segment {} read fine",
                    segment.partition()
                );
                assert_eq!(&read, input, "{case}: wrong data");
            }
            Err(SpillError::Corrupt {
                partition,
                offset,
                reason,
                ..
            }) => {
                assert!(
                    damaged(segment),
                    "{case}: intact segment {} at {}+{} reported corrupt: {reason}",
                    segment.partition(),
                    segment.offset(),
                    segment.len()
                );
                assert_eq!((partition, offset), (segment.partition(), segment.offset()));
            }
            Err(other) => panic!("{case}: expected Corrupt, got {other}"),
        }
    }
}

fn flips_and_truncations(compression: Compression) {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let (segments, inputs) = small_run(&dir, compression);
    let path = segments[0].path().to_path_buf();
    let original = std::fs::read(&path).unwrap();
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    let contains = |at: u64| move |s: &SegmentRef| s.offset() <= at && at < s.offset() + s.len();

    for at in 0..original.len() {
        // alternate a one-bit flip and an all-bits flip
        let mask = if at % 2 == 0 { 0x01u8 } else { 0xff };
        file.write_all_at(&[original[at] ^ mask], at as u64)
            .unwrap();
        check(
            &segments,
            &inputs,
            contains(at as u64),
            &format!("byte {at} ^ {mask:#x}"),
        );
        file.write_all_at(&original[at..=at], at as u64).unwrap();
    }

    // shortest last, so each cut keeps the bytes before it
    for cut in (0..original.len() as u64).rev() {
        file.set_len(cut).unwrap();
        check(
            &segments,
            &inputs,
            |s| s.offset() + s.len() > cut,
            &format!("truncated at {cut}"),
        );
    }
    file.set_len(0).unwrap();
    file.write_all_at(&original, 0).unwrap();
    check(&segments, &inputs, |_| false, "restored");
}

#[test]
fn flipped_or_truncated_bytes_are_corrupt_never_wrong_data() {
    flips_and_truncations(Compression::None);
}

#[test]
fn flipped_or_truncated_compressed_bytes_are_corrupt_never_wrong_data() {
    flips_and_truncations(Compression::Lz4);
}
