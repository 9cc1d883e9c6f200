//! `--verify`: checking the partitions read back against the input.
//!
//! Three checks:
//! 1. rows in == rows out (counted on the way in and on the way out);
//! 2. every row read from partition `p` hashes to `p` (so no row strayed into another
//!    partition);
//! 3. every key sits in exactly one partition: each row's key is fingerprinted with the hash
//!    under a second seed ([`VERIFY_SEED`]), and a fingerprint seen in two partitions is an
//!    error. This catches a key split across partitions even if the partition hash itself were
//!    inconsistent between the write and the read.
//!
//! Each reading thread keeps its own [`PartitionCheck`]; they are merged at the end.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use arrow_array::RecordBatch;

use crate::error::CliError;
use crate::hash::{KeyHasher, VERIFY_SEED, partition_of};

/// One thread's view of the partitions it read.
#[derive(Debug)]
pub(crate) struct PartitionCheck {
    partition_hash: KeyHasher,
    fingerprint: KeyHasher,
    partitions: u32,
    /// key fingerprint -> the partition it was seen in
    seen: HashMap<u64, u32>,
    hashes: Vec<u64>,
    fingerprints: Vec<u64>,
}

impl PartitionCheck {
    /// A check of `partitions` partitions keyed like `hasher`.
    pub(crate) fn new(hasher: &KeyHasher, partitions: u32) -> Self {
        PartitionCheck {
            partition_hash: hasher.clone(),
            fingerprint: hasher.with_seed(VERIFY_SEED),
            partitions,
            seen: HashMap::new(),
            hashes: Vec::new(),
            fingerprints: Vec::new(),
        }
    }

    /// Checks the rows of `batch`, read from `partition`.
    pub(crate) fn check(&mut self, partition: u32, batch: &RecordBatch) -> Result<(), CliError> {
        let failed = |e| CliError::VerifyFailed(format!("cannot hash partition {partition}: {e}"));
        self.partition_hash
            .hash_rows(batch, &mut self.hashes)
            .map_err(failed)?;
        self.fingerprint
            .hash_rows(batch, &mut self.fingerprints)
            .map_err(failed)?;
        for (row, (&hash, &fingerprint)) in self.hashes.iter().zip(&self.fingerprints).enumerate() {
            let expected = partition_of(hash, self.partitions);
            if expected != partition {
                return Err(CliError::VerifyFailed(format!(
                    "a row read from partition {partition} (row {row} of a batch) hashes to partition {expected}"
                )));
            }
            record(&mut self.seen, fingerprint, partition)?;
        }
        Ok(())
    }

    /// Merges `other`'s keys into this one, checking no key is in two partitions.
    pub(crate) fn merge(&mut self, other: PartitionCheck) -> Result<(), CliError> {
        for (fingerprint, partition) in other.seen {
            record(&mut self.seen, fingerprint, partition)?;
        }
        Ok(())
    }

    /// Distinct keys seen.
    pub(crate) fn distinct_keys(&self) -> usize {
        self.seen.len()
    }
}

fn record(seen: &mut HashMap<u64, u32>, fingerprint: u64, partition: u32) -> Result<(), CliError> {
    match seen.entry(fingerprint) {
        Entry::Vacant(slot) => {
            slot.insert(partition);
            Ok(())
        }
        Entry::Occupied(slot) if *slot.get() == partition => Ok(()),
        Entry::Occupied(slot) => Err(CliError::VerifyFailed(format!(
            "a key (fingerprint {fingerprint:#018x}) is in partitions {} and {partition}",
            slot.get()
        ))),
    }
}

/// Checks rows in == rows out.
pub(crate) fn check_row_counts(rows_in: u64, rows_out: u64) -> Result<(), CliError> {
    if rows_in == rows_out {
        Ok(())
    } else {
        Err(CliError::VerifyFailed(format!(
            "{rows_in} rows in but {rows_out} rows out"
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array};

    use super::*;
    use crate::hash::PARTITION_SEED;

    fn setup(keys: Vec<i64>) -> (RecordBatch, KeyHasher) {
        let batch =
            RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(keys)) as ArrayRef)])
                .unwrap();
        let hasher = KeyHasher::new(&batch.schema(), &["k".into()], PARTITION_SEED).unwrap();
        (batch, hasher)
    }

    fn partition_of_key(hasher: &KeyHasher, batch: &RecordBatch, parts: u32) -> u32 {
        let mut h = Vec::new();
        hasher.hash_rows(batch, &mut h).unwrap();
        partition_of(h[0], parts)
    }

    #[test]
    fn a_row_in_the_wrong_partition_is_caught() {
        let (batch, hasher) = setup(vec![7]);
        let right = partition_of_key(&hasher, &batch, 4);
        let mut check = PartitionCheck::new(&hasher, 4);
        check.check(right, &batch).unwrap();
        let err = check.check((right + 1) % 4, &batch).unwrap_err();
        assert!(err.to_string().contains("hashes to partition"), "{err}");
    }

    #[test]
    fn a_key_in_two_partitions_is_caught_across_threads() {
        let (batch, hasher) = setup(vec![7, 7]);
        // with one partition every row hashes "right", so only the fingerprint check can fail
        let mut a = PartitionCheck::new(&hasher, 1);
        a.check(0, &batch).unwrap();
        let mut b = PartitionCheck::new(&hasher, 1);
        b.seen.insert(*a.seen.keys().next().unwrap(), 3);
        let err = a.merge(b).unwrap_err();
        assert!(err.to_string().contains("is in partitions"), "{err}");
    }

    #[test]
    fn row_counts_must_match() {
        check_row_counts(5, 5).unwrap();
        assert_eq!(
            check_row_counts(5, 4).unwrap_err().to_string(),
            "verification failed: 5 rows in but 4 rows out"
        );
    }
}
