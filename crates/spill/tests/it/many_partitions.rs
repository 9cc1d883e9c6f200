//! 10,000 partitions in one run: one file, a bounded number of descriptors.

use arrow_shards_spill::{SpillDir, SpillOptions};

use crate::common::ints_and_strings;

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn ten_thousand_partitions_in_one_run() {
    let root = tempfile::tempdir().unwrap();
    let dir = SpillDir::create(root.path()).unwrap();
    let schema = ints_and_strings(0, 1).schema();
    let before = open_descriptors();
    let mut writer = dir.run_writer(schema, SpillOptions::default());
    let mut most = 0;
    for partition in 0..10_000u32 {
        let batch = ints_and_strings(i64::from(partition) * 3, 3);
        writer.append(partition, &[batch]).unwrap();
        if partition % 1000 == 0 {
            most = most.max(open_descriptors());
        }
    }
    let segments = writer.finish().unwrap();
    // other tests run in parallel threads of this process and open a few files each
    assert!(
        most < before + 32,
        "{most} descriptors open while writing, {before} before"
    );
    assert_eq!(segments.len(), 10_000);
    let metrics = dir.metrics();
    assert_eq!(
        (metrics.files, metrics.files_created, metrics.segments),
        (1, 1, 10_000)
    );
    for (partition, segment) in segments.iter().enumerate() {
        assert_eq!(segment.partition(), partition as u32);
        assert_eq!(
            segment.read().unwrap(),
            vec![ints_and_strings(partition as i64 * 3, 3)]
        );
    }
    assert!(open_descriptors() < before + 32);
}
