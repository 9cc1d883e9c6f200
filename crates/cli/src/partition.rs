//! The partition of every row of an input batch.
//!
//! Rows are hashed ([`crate::hash`]) and mapped to a partition; the batch goes to the buffer
//! whole with these ids ([`arrow_shards::ShardBuffer::write_partitioned_blocking`]), which
//! groups the rows by partition with one counting pass and copies each partition's rows into
//! its open batch. No shard per partition is made here: at 1024 partitions an 8192-row batch
//! would be 1024 `take`s of ~8 rows each, which cost more than the rows.

use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::ArrowError;

use crate::hash::{KeyHasher, partition_of};

/// Computes partition ids; one per thread (it keeps scratch space for the hashes).
#[derive(Debug)]
pub(crate) struct Partitioner {
    hasher: KeyHasher,
    partitions: u32,
    hashes: Vec<u64>,
}

impl Partitioner {
    /// A partitioner into `partitions` partitions by the keys of `hasher`.
    pub(crate) fn new(hasher: KeyHasher, partitions: u32) -> Self {
        Partitioner {
            hasher,
            partitions,
            hashes: Vec::new(),
        }
    }

    /// The partition of each row of `batch`, in row order: an array the buffer's slices of the
    /// batch take zero-copy slices of.
    pub(crate) fn partition_ids(&mut self, batch: &RecordBatch) -> Result<UInt32Array, ArrowError> {
        if batch.num_rows() == 0 {
            return Ok(UInt32Array::from(Vec::<u32>::new()));
        }
        self.hasher.hash_rows(batch, &mut self.hashes)?;
        let ids: Vec<u32> = self
            .hashes
            .iter()
            .map(|&h| partition_of(h, self.partitions))
            .collect();
        Ok(UInt32Array::from(ids))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array};

    use super::*;
    use crate::hash::PARTITION_SEED;

    fn batch(keys: Vec<i64>) -> RecordBatch {
        RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(keys)) as ArrayRef)]).unwrap()
    }

    fn partitioner(b: &RecordBatch, n: u32) -> Partitioner {
        Partitioner::new(
            KeyHasher::new(&b.schema(), &["k".into()], PARTITION_SEED).unwrap(),
            n,
        )
    }

    #[test]
    fn equal_keys_get_equal_partitions_in_range() {
        let b = batch((0..1000).map(|i| i % 37).collect());
        let mut p = partitioner(&b, 8);
        let ids = p.partition_ids(&b).unwrap().values().to_vec();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|&id| id < 8));
        for (row, &id) in ids.iter().enumerate() {
            assert_eq!(id, ids[row % 37], "row {row}");
        }
        let used: std::collections::BTreeSet<_> = ids.iter().collect();
        assert!(used.len() > 4, "37 keys spread over 8 partitions: {used:?}");
    }

    #[test]
    fn empty_batches_give_no_ids() {
        let b = batch(vec![]);
        assert!(partitioner(&b, 4).partition_ids(&b).unwrap().is_empty());
    }
}
