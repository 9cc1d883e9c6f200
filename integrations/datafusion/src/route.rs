//! Which output partition each input row goes to: the same routing as DataFusion's
//! `RepartitionExec`, so plans that rely on two hash exchanges agreeing (a partitioned join's
//! two sides) keep working when only one of them is ours.

use datafusion::arrow::array::RecordBatch;
use datafusion::common::hash_utils::create_hashes;
use datafusion::error::Result;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::repartition::REPARTITION_RANDOM_STATE;

/// Where a batch's rows go.
#[derive(Debug)]
pub(crate) enum Route {
    /// Row by row: `hash(exprs) % partitions` with `RepartitionExec`'s seed.
    Hash {
        exprs: Vec<PhysicalExprRef>,
        partitions: u32,
        hashes: Vec<u64>,
    },
    /// Whole batches in turn, as `RepartitionExec` does.
    RoundRobin { partitions: u32, next: u32 },
}

/// Where one batch goes.
pub(crate) enum Destination {
    /// One partition id per row.
    Rows(Vec<u32>),
    /// The whole batch to one partition.
    Whole(u32),
}

impl Route {
    pub(crate) fn hash(exprs: Vec<PhysicalExprRef>, partitions: u32) -> Self {
        Self::Hash {
            exprs,
            partitions,
            hashes: Vec::new(),
        }
    }

    /// Round robin, the first batch going to `first` (spread over the input partitions).
    pub(crate) fn round_robin(partitions: u32, first: u32) -> Self {
        Self::RoundRobin {
            partitions,
            next: first % partitions.max(1),
        }
    }

    pub(crate) fn destination(&mut self, batch: &RecordBatch) -> Result<Destination> {
        match self {
            Route::Hash {
                exprs,
                partitions,
                hashes,
            } => {
                let arrays = exprs
                    .iter()
                    .map(|expr| expr.evaluate(batch)?.into_array(batch.num_rows()))
                    .collect::<Result<Vec<_>>>()?;
                hashes.clear();
                hashes.resize(batch.num_rows(), 0);
                create_hashes(&arrays, REPARTITION_RANDOM_STATE.random_state(), hashes)?;
                let n = u64::from(*partitions);
                Ok(Destination::Rows(
                    hashes.iter().map(|hash| (hash % n) as u32).collect(),
                ))
            }
            Route::RoundRobin { partitions, next } => {
                let partition = *next;
                *next = (*next + 1) % *partitions;
                Ok(Destination::Whole(partition))
            }
        }
    }
}
