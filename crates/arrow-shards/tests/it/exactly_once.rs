//! Property: every partition reads back exactly the rows written to it, in each producer's order,
//! nothing twice, whatever the schema, partition count and interleaving of writers.

use arrow_shards::{Error, ShardBuffer};
use proptest::prelude::*;

use crate::common::{KINDS, assert_partition, schema, write_concurrently};

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_row_comes_back_once_in_producer_order(
        kinds in proptest::collection::vec(0..KINDS, 0..6),
        partitions in 1u32..2000,
        producers in 1usize..=8,
        batches in 1usize..60,
        max_rows in 0usize..50,
        seal_first in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let schema = schema(&kinds);
        let buffer = ShardBuffer::builder(schema, partitions).build().unwrap();
        let written = write_concurrently(&buffer, seed, producers, batches, max_rows);
        if seal_first {
            (0..partitions).for_each(|p| buffer.seal(p).unwrap());
        } else {
            buffer.finish().unwrap();
        }
        for p in 0..partitions {
            let read = buffer.read(p).unwrap().concat().unwrap();
            assert_partition(&read, p, &written);
            let again = matches!(buffer.read(p), Err(Error::AlreadyRead { .. }));
            prop_assert!(again, "second read of {} was not refused", p);
        }
        let metrics = buffer.close().unwrap();
        let rows: u64 = written.values().flatten().map(|b| b.num_rows() as u64).sum();
        prop_assert_eq!(metrics.rows_read, rows);
        prop_assert_eq!(metrics.rows_written, rows);
        prop_assert_eq!(metrics.reserved, 0);
        prop_assert_eq!(metrics.pool_reserved, 0);
    }
}
