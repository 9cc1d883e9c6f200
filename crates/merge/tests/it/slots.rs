//! Streams sharing [`ReadSlots`]: every stream still returns its partition exactly once, in
//! order, and the slots and the pool are whole again afterwards.

use arrow_array::RecordBatch;
use arrow_shards_merge::{MergeOptions, Merger, PartitionSources, ReadSlots};
use arrow_shards_spill::SpillDir;
use futures::StreamExt;
use proptest::prelude::*;

use crate::common::*;
use crate::segments::{runtime, spill};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn streams_sharing_slots_each_return_their_rows_once_in_order(
        partitions in proptest::collection::vec(
            proptest::collection::vec(0usize..700, 1..6), 1..10),
        capacity in 1usize..4,
        read_ahead in 0usize..3,
        target in proptest::option::of(1usize..900),
    ) {
        let schema = schema();
        let tmp = tempfile::tempdir().unwrap();
        let dir = SpillDir::create(tmp.path()).unwrap();
        let pool = pool();
        let slots = ReadSlots::new(capacity);
        // each partition: one segment per batch, then read by its own stream
        let inputs: Vec<Vec<RecordBatch>> =
            partitions.iter().map(|sizes| batches(&schema, sizes)).collect();
        let streams: Vec<_> = inputs
            .iter()
            .map(|input| {
                let runs: Vec<_> = input.chunks(1).map(<[RecordBatch]>::to_vec).collect();
                let sources =
                    PartitionSources::new(schema.clone()).with_segments(spill(&dir, &schema, &runs));
                let options = MergeOptions::new()
                    .with_target_rows(target.unwrap_or(0))
                    .with_read_ahead(read_ahead)
                    .with_read_slots(slots.clone());
                Merger::new(sources, options, pool.clone()).into_stream()
            })
            .collect();
        let outputs = runtime().block_on(futures::future::join_all(streams.into_iter().map(
            |stream| async move {
                let batches: Vec<RecordBatch> = stream.map(|b| b.unwrap()).collect().await;
                batches
            },
        )));
        for (input, output) in inputs.iter().zip(&outputs) {
            prop_assert_eq!(concat(&schema, output), concat(&schema, input));
        }
        prop_assert_eq!(slots.available(), capacity);
        prop_assert_eq!(pool.reserved(), 0);
        dir.close().unwrap();
    }
}
