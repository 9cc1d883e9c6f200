//! Which output partition each input row goes to: the same routing as DataFusion's
//! `RepartitionExec`, so plans that rely on two hash exchanges agreeing (a partitioned join's
//! two sides) keep working when only one of them is ours.

use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::common::hash_utils::create_hashes;
use datafusion::error::Result;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::repartition::REPARTITION_RANDOM_STATE;

/// Where a batch's rows go.
#[derive(Debug)]
pub(crate) enum Route {
    /// Row by row: `hash(exprs) % partitions` with `RepartitionExec`'s seed.
    Hash(HashRoute),
    /// Whole batches in turn, as `RepartitionExec` does.
    RoundRobin(RoundRobin),
}

/// Hash routing: each row's partition from its key columns.
#[derive(Debug)]
pub(crate) struct HashRoute {
    exprs: Vec<PhysicalExprRef>,
    partitions: u32,
    hashes: Vec<u64>,
}

/// Round robin: each whole batch to the next partition.
#[derive(Debug)]
pub(crate) struct RoundRobin {
    partitions: u32,
    next: u32,
}

impl Route {
    pub(crate) fn hash(exprs: Vec<PhysicalExprRef>, partitions: u32) -> Self {
        Self::Hash(HashRoute {
            exprs,
            partitions,
            hashes: Vec::new(),
        })
    }

    /// Round robin, the first batch going to `first` (spread over the input partitions).
    pub(crate) fn round_robin(partitions: u32, first: u32) -> Self {
        Self::RoundRobin(RoundRobin {
            partitions,
            next: first % partitions.max(1),
        })
    }
}

impl HashRoute {
    /// The partition of each row of `batch`.
    pub(crate) fn ids(&mut self, batch: &RecordBatch) -> Result<UInt32Array> {
        let arrays = self
            .exprs
            .iter()
            .map(|expr| expr.evaluate(batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<_>>>()?;
        self.hashes.clear();
        self.hashes.resize(batch.num_rows(), 0);
        create_hashes(
            &arrays,
            REPARTITION_RANDOM_STATE.random_state(),
            &mut self.hashes,
        )?;
        let n = u64::from(self.partitions);
        let ids = self.hashes.iter().map(|hash| (hash % n) as u32);
        Ok(UInt32Array::from_iter_values(ids))
    }
}

impl RoundRobin {
    /// The partition of the next batch.
    pub(crate) fn next_partition(&mut self) -> u32 {
        let partition = self.next;
        self.next = (self.next + 1) % self.partitions.max(1);
        partition
    }
}
