//! Writing runs and reading segments back.

use arrow_shards_spill::{SpillDir, SpillOptions};

use crate::common::ints_and_strings;

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
    let expected =
        arrow_select::concat::concat_batches(&a.schema(), &[a.clone(), a.slice(10, 20)]).unwrap();
    assert_eq!(segments[0].read().unwrap(), vec![expected]);
    assert_eq!(segments[1].read().unwrap(), vec![b]);
    let metrics = dir.metrics();
    assert_eq!((metrics.runs, metrics.segments, metrics.files), (1, 2, 1));
    assert_eq!(metrics.bytes_on_disk, segments[0].len() + segments[1].len());
    drop(segments);
    assert_eq!(dir.metrics().files, 0);
    assert_eq!(dir.metrics().bytes_on_disk, 0);
}
