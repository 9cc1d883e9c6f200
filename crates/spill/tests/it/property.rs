//! Random batches of random types -> run -> read back equals the input.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_shards_spill::{Compression, SpillDir, SpillOptions};
use proptest::prelude::*;

use crate::common::{self, KINDS, Rng, concat};

/// Column kinds, seed, per-batch (rows, extra rows sliced away), null percent, coalesce rows,
/// codec index.
type Case = (Vec<usize>, u64, Vec<(usize, usize)>, u64, usize, usize);

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(0..KINDS, 1..5),
        any::<u64>(),
        // per batch: rows and extra rows to slice away
        prop::collection::vec((0usize..300, 0usize..20), 0..6),
        prop_oneof![Just(0u64), Just(10), Just(60), Just(100)],
        prop_oneof![Just(0usize), Just(1), Just(97), Just(8192)],
        0usize..3,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_batches_round_trip((kinds, seed, shapes, nulls, coalesce, codec) in case()) {
        let schema = common::schema(&kinds);
        let mut rng = Rng::new(seed);
        let batches: Vec<RecordBatch> = shapes
            .iter()
            .map(|&(rows, extra)| common::batch(&schema, &kinds, &mut rng, rows, extra, nulls))
            .collect();
        let compression = [Compression::None, Compression::Lz4, Compression::Zstd { level: 1 }][codec];
        let root = tempfile::tempdir().unwrap();
        let dir = SpillDir::create(root.path()).unwrap();
        let options = SpillOptions::default().with_compression(compression).with_compress_min_bytes(0).with_coalesce_rows(coalesce);
        let mut writer = dir.run_writer(Arc::clone(&schema), options);
        // the same batches as two partitions, the second reversed
        writer.append(1, &batches).unwrap();
        let reversed: Vec<RecordBatch> = batches.iter().rev().cloned().collect();
        writer.append(2, &reversed).unwrap();
        let segments = writer.finish().unwrap();
        for (segment, input) in segments.iter().zip([&batches, &reversed]) {
            let read = segment.read().unwrap();
            prop_assert_eq!(concat(&schema, &read), concat(&schema, input));
            if coalesce == 0 {
                prop_assert_eq!(&read, input);
            } else {
                prop_assert!(read.iter().all(|b| b.num_rows() > 0 && b.num_rows() <= coalesce.max(input.iter().map(|b| b.num_rows()).max().unwrap_or(0))));
            }
            prop_assert_eq!(segment.rows(), input.iter().map(|b| b.num_rows() as u64).sum::<u64>());
        }
    }
}
