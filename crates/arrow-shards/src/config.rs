//! The settings of a built buffer, as the buffer, the spiller and the readers use them (made by
//! [`crate::ShardBufferBuilder::build`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow_shards_merge::{ReadBudget, ReadSlots};
use arrow_shards_spill::{SpillOptions, SpillStorage};

use crate::compact::CompactConfig;

/// The settings of a built buffer.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) write_timeout: Option<Duration>,
    /// A refused write with nothing to spill anywhere on the pool goes to disk.
    pub(crate) disk_when_nothing_to_spill: bool,
    pub(crate) read_batch_rows: Option<usize>,
    /// Shared by every reader's stream; `None`: reads unbounded.
    pub(crate) read_slots: Option<ReadSlots>,
    /// Shared by every reader; `None`: forced grows.
    pub(crate) read_budget: Option<ReadBudget>,
    pub(crate) compact: Option<CompactConfig>,
}

/// The least in-memory bytes a spill round takes (or everything spillable, if less), unless
/// [`with_max_spill_round_bytes`](crate::ShardBufferBuilder::with_max_spill_round_bytes) is smaller:
/// under a small budget a round would otherwise free only what the writer that woke it needs,
/// a few KiB, and make thousands of runs and files per MB written.
pub const MIN_SPILL_ROUND_BYTES: usize = 64 << 10;

/// The spill settings of a built buffer, in bytes.
#[derive(Debug, Clone)]
pub(crate) struct SpillConfig {
    pub(crate) root: PathBuf,
    pub(crate) threshold_bytes: usize,
    pub(crate) target_bytes: usize,
    pub(crate) max_round_bytes: usize,
    pub(crate) segment_bytes: usize,
    pub(crate) options: SpillOptions,
    /// The local directory's byte quota (`with_spill_tiers`).
    pub(crate) local_quota: Option<u64>,
    /// Where runs go when the local directory is full (`with_spill_tiers`).
    pub(crate) overflow: Option<Arc<dyn SpillStorage>>,
}
