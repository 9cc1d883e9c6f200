//! Writing runs and reading segments back.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_shards_memory::sizing::{batch_allocations, batch_memory_size};
use arrow_shards_spill::{Compression, SpillDir, SpillOptions};

use crate::common::{self, KINDS, Rng, concat, ints_and_strings};

#[test]
fn two_partitions_round_trip_in_one_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let a = ints_and_strings(0, 1000);
    let b = ints_and_strings(5000, 10);
    let mut writer = dir.run_writer(a.schema(), SpillOptions::default());
    writer.append(3, &[a.clone(), a.slice(10, 20)]).unwrap();
    writer.append(4, std::slice::from_ref(&b)).unwrap();
    let segments = writer.finish().unwrap();
    assert_eq!(segments.len(), 2);
    assert_eq!(segments[0].partition(), 3);
    assert_eq!(segments[0].rows(), 1020);
    assert_eq!(
        segments[1].offset(),
        segments[0].offset() + segments[0].len()
    );
    let expected = concat(&a.schema(), &[a.clone(), a.slice(10, 20)]);
    assert_eq!(segments[0].read().unwrap(), vec![expected]);
    assert_eq!(segments[1].read().unwrap(), vec![b]);
    // reading does not consume: a segment can be read again
    assert_eq!(segments[1].read().unwrap().len(), 1);
    let metrics = dir.metrics();
    assert_eq!((metrics.runs, metrics.segments, metrics.files), (1, 2, 1));
    // the file: its schema record, then the two segments
    assert_eq!(
        metrics.bytes_on_disk,
        segments[0].offset() + segments[0].len() + segments[1].len()
    );
    assert_eq!(metrics.rows_spilled, 1030);
    assert_eq!(metrics.segments_read, 3);
    assert_eq!(
        metrics.bytes_spilled,
        (segments[0].memory_bytes() + segments[1].memory_bytes()) as u64
    );
    drop(segments);
    assert_eq!(dir.metrics().files, 0);
    assert_eq!(dir.metrics().bytes_on_disk, 0);
}

#[test]
fn every_type_round_trips_with_every_codec() {
    let kinds: Vec<usize> = (0..KINDS).collect();
    let schema = common::schema(&kinds);
    let mut rng = Rng::new(7);
    let batches: Vec<RecordBatch> = (0..4)
        .map(|i| common::batch(&schema, &kinds, &mut rng, 50 * i, 13, 20))
        .collect();
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    for compression in [
        Compression::None,
        Compression::Lz4,
        Compression::Zstd { level: 3 },
    ] {
        for coalesce in [0, 8192] {
            let options = SpillOptions::default()
                .with_compression(compression)
                .with_compress_min_bytes(0)
                .with_coalesce_rows(coalesce);
            let mut writer = dir.run_writer(Arc::clone(&schema), options);
            writer.append(0, &batches).unwrap();
            let segments = writer.finish().unwrap();
            let read = segments[0].read().unwrap();
            if coalesce == 0 {
                assert_eq!(read, batches, "{compression:?}");
            } else {
                assert_eq!(read.len(), 1);
                assert_eq!(read[0], concat(&schema, &batches), "{compression:?}");
            }
        }
    }
}

#[test]
fn coalescing_turns_small_shards_into_target_sized_messages() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let shards: Vec<RecordBatch> = (0..100).map(|i| ints_and_strings(i * 100, 100)).collect();
    let (sizes, messages) = coalesced_sizes(&dir, &shards, 4096);
    // greedy groups of at most 4096 rows: 40 shards each
    assert_eq!(sizes, vec![4000, 4000, 2000]);
    assert_eq!(messages, 3);
}

/// Writes `batches` as one segment coalesced to `coalesce_rows`, reads it back and checks it
/// holds the same rows; the rows of each batch read, and the segment's message count.
fn coalesced_sizes(
    dir: &Arc<SpillDir>,
    batches: &[RecordBatch],
    coalesce_rows: usize,
) -> (Vec<usize>, u64) {
    let schema = batches[0].schema();
    let mut writer = dir.run_writer(
        Arc::clone(&schema),
        SpillOptions::default().with_coalesce_rows(coalesce_rows),
    );
    writer.append(1, batches).unwrap();
    let segment = writer.finish().unwrap().remove(0);
    let read = segment.read().unwrap();
    assert_eq!(concat(&schema, &read), concat(&schema, batches));
    (
        read.iter().map(|b| b.num_rows()).collect(),
        segment.batches(),
    )
}

#[test]
fn batches_of_half_the_target_pass_through_and_split_the_groups() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let mut start = 0;
    let batches: Vec<RecordBatch> = [100, 3000, 2048, 100, 0, 100, 2047, 2047]
        .into_iter()
        .map(|rows| {
            let batch = ints_and_strings(start, rows);
            start += rows as i64;
            batch
        })
        .collect();
    let (sizes, messages) = coalesced_sizes(&dir, &batches, 4096);
    // 100 alone; 3000 and 2048 (>= 2048) as they are; 100 + 0 + 100 + 2047 (2247 rows) in one
    // batch; the last 2047 would pass 4096, so it starts a group of its own
    assert_eq!(sizes, vec![100, 3000, 2048, 2247, 2047]);
    assert_eq!(messages, 5);
}

#[test]
fn coalescing_off_keeps_boundaries_and_empty_batches() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batches = vec![
        ints_and_strings(0, 3),
        ints_and_strings(3, 0),
        ints_and_strings(3, 5),
    ];
    let mut writer = dir.run_writer(
        batches[0].schema(),
        SpillOptions::default().with_coalesce_rows(0),
    );
    writer.append(1, &batches).unwrap();
    writer.append(2, &[]).unwrap();
    let segments = writer.finish().unwrap();
    assert_eq!(segments[0].read().unwrap(), batches);
    assert_eq!(segments[0].batches(), 3);
    assert_eq!(segments[1].read().unwrap(), Vec::<RecordBatch>::new());
    assert_eq!(segments[1].rows(), 0);
}

#[test]
fn runs_rotate_to_new_files_between_segments() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 2000);
    let mut writer = dir.run_writer(
        batch.schema(),
        SpillOptions::default().with_max_file_bytes(20_000),
    );
    for partition in 0..6 {
        writer
            .append(partition, std::slice::from_ref(&batch))
            .unwrap();
    }
    let segments = writer.finish().unwrap();
    assert!(segments[0].len() > 20_000, "each segment fills a file");
    let mut paths: Vec<_> = segments.iter().map(|s| s.path().to_path_buf()).collect();
    paths.dedup();
    assert_eq!(paths.len(), 6);
    assert_eq!(dir.metrics().files, 6);
    for segment in &segments {
        // each file opens with the schema record, then its one segment
        assert_eq!(segment.offset(), segments[0].offset());
        assert_eq!(segment.read().unwrap(), vec![batch.clone()]);
    }
    // a file goes as soon as its last segment does
    let first = segments[0].path().to_path_buf();
    drop(segments.into_iter().skip(1).collect::<Vec<_>>());
    assert_eq!(dir.metrics().files, 0);
    assert!(!first.exists());
}

#[test]
fn a_decoded_batch_pins_only_its_own_message() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batches: Vec<RecordBatch> = (0..10).map(|i| ints_and_strings(i * 8192, 8192)).collect();
    let mut writer = dir.run_writer(batches[0].schema(), SpillOptions::default());
    writer.append(0, &batches).unwrap();
    let segment = writer.finish().unwrap().remove(0);
    let read = segment.read().unwrap();
    assert_eq!(read.len(), 10);
    for batch in &read {
        let size = batch_memory_size(batch) as u64;
        // one message body (~segment/10) plus allocation rounding, never the whole segment
        assert!(
            size < segment.len() / 5,
            "batch pins {size} of a {} byte segment",
            segment.len()
        );
        assert!(size >= segment.len() / 20);
        // zero-copy: every array of the batch lives in the one allocation of its message body
        assert_eq!(
            batch_allocations(batch).len(),
            1,
            "{:?}",
            batch_allocations(batch)
        );
    }
    // dropping the other batches really frees them: each batch stands alone
    let kept = read[3].clone();
    drop(read);
    assert_eq!(kept, batches[3]);
}

#[test]
fn sliced_view_arrays_are_compacted_before_writing() {
    use arrow_array::StringViewArray;
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let strings = StringViewArray::from_iter_values(
        (0..100_000).map(|i| format!("a long string value {i:08}")),
    );
    let big = RecordBatch::try_from_iter([("s", Arc::new(strings) as _)]).unwrap();
    let slice = big.slice(500, 10);
    let mut writer = dir.run_writer(big.schema(), SpillOptions::default().with_coalesce_rows(0));
    writer.append(0, std::slice::from_ref(&slice)).unwrap();
    let segment = writer.finish().unwrap().remove(0);
    assert!(segment.len() < 10_000, "segment is {} bytes", segment.len());
    assert_eq!(segment.read().unwrap(), vec![slice]);
}

#[test]
fn schema_mismatch_is_refused_before_writing() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 3);
    let other =
        RecordBatch::try_from_iter([("x", Arc::new(arrow_array::Int32Array::from(vec![1])) as _)])
            .unwrap();
    let mut writer = dir.run_writer(batch.schema(), SpillOptions::default());
    let error = writer.append(0, &[other]).unwrap_err();
    assert!(
        matches!(
            error,
            arrow_shards_spill::SpillError::SchemaMismatch { partition: 0, .. }
        ),
        "{error}"
    );
    assert_eq!(dir.metrics().files_created, 0);
}

#[test]
fn invalid_zstd_level_is_reported_on_append() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let batch = ints_and_strings(0, 3);
    let options = SpillOptions::default().with_compression(Compression::Zstd { level: 99 });
    let mut writer = dir.run_writer(batch.schema(), options);
    let error = writer.append(0, &[batch]).unwrap_err();
    assert!(
        matches!(error, arrow_shards_spill::SpillError::InvalidOptions { .. }),
        "{error}"
    );
}

#[test]
fn segments_under_the_compression_threshold_are_written_uncompressed() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let small = ints_and_strings(0, 10);
    let large = ints_and_strings(10, 20_000);
    let options = SpillOptions::default()
        .with_compression(Compression::Lz4)
        .with_compress_min_bytes(large.get_array_memory_size() / 2);
    let mut writer = dir.run_writer(small.schema(), options);
    writer.append(0, std::slice::from_ref(&small)).unwrap();
    writer.append(1, std::slice::from_ref(&large)).unwrap();
    let segments = writer.finish().unwrap();
    let codec = |segment: &arrow_shards_spill::SegmentRef| {
        let bytes = std::fs::read(segment.path()).unwrap();
        let at = segment.offset() as usize + 10; // the header's compression field
        u16::from_le_bytes([bytes[at], bytes[at + 1]])
    };
    assert_eq!(
        codec(&segments[0]),
        0,
        "the small segment is not compressed"
    );
    assert_eq!(codec(&segments[1]), 1, "the large one is (LZ4)");
    assert!(segments[1].len() < large.get_array_memory_size() as u64 / 2);
    assert_eq!(segments[0].read().unwrap(), vec![small]);
    assert_eq!(concat(&large.schema(), &segments[1].read().unwrap()), large);
}
