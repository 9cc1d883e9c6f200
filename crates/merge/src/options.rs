//! How a [`Merger`](crate::Merger) shapes its output and how far it reads ahead.

/// The row count a [`Merger`](crate::Merger) aims for when it coalesces, unless told otherwise.
pub const DEFAULT_TARGET_ROWS: usize = 8192;

use crate::{ReadBudget, ReadSlots};

/// Options for a [`Merger`](crate::Merger): output batch size, read-ahead depth and the slots
/// that bound concurrent segment reads.
///
/// ```
/// use arrow_shards_merge::{MergeOptions, ReadSlots};
///
/// let slots = ReadSlots::new(2);
/// let options = MergeOptions::new()
///     .with_target_rows(4096)
///     .with_read_ahead(2)
///     .with_read_slots(slots.clone());
/// assert_eq!(options.target_rows(), Some(4096));
/// assert_eq!(options.read_slots(), Some(&slots));
/// assert_eq!(MergeOptions::new().with_pass_through().target_rows(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeOptions {
    target_rows: Option<usize>,
    read_ahead: usize,
    read_slots: Option<ReadSlots>,
    read_budget: Option<ReadBudget>,
}

impl Default for MergeOptions {
    fn default() -> Self {
        Self {
            target_rows: Some(DEFAULT_TARGET_ROWS),
            read_ahead: 1,
            read_slots: None,
            read_budget: None,
        }
    }
}

impl MergeOptions {
    /// The defaults: coalesce to [`DEFAULT_TARGET_ROWS`] rows, read one segment ahead.
    pub fn new() -> Self {
        Self::default()
    }

    /// Coalesces small batches into batches of exactly `rows` rows (see
    /// [`Merger`](crate::Merger) for the exceptions). A target of 0 means no target: the same
    /// as [`MergeOptions::with_pass_through`]. The coalescer allocates room for one target
    /// batch per column up front; a target above the partition's row count is cut down to it.
    ///
    /// Default: [`DEFAULT_TARGET_ROWS`] (8192).
    pub fn with_target_rows(mut self, rows: usize) -> Self {
        self.target_rows = (rows > 0).then_some(rows);
        self
    }

    /// Hands every batch over as it was written or decoded: no coalescing, no copy. Memory
    /// batches come out pointer-identical (the same `Arc`'d buffers).
    ///
    /// Default: off (coalescing to [`DEFAULT_TARGET_ROWS`] rows).
    pub fn with_pass_through(mut self) -> Self {
        self.target_rows = None;
        self
    }

    /// How many spilled segments [`MergeStream`](crate::MergeStream) may read and decode ahead
    /// of the one being handed over. Each costs up to one segment's memory; a read ahead starts
    /// only if the segment's `memory_bytes` fit under the pool's limit, so under memory
    /// pressure the stream reads only what it needs (see [`Merger`](crate::Merger)'s memory
    /// section for the bound). 0 reads a segment only when the previous one is used up. The
    /// blocking [`Merger`](crate::Merger) iterator reads on the calling thread and never ahead.
    ///
    /// Default: 1.
    pub fn with_read_ahead(mut self, segments: usize) -> Self {
        self.read_ahead = segments;
        self
    }

    /// Makes the stream's segment reads wait for one of `slots` (shared with other streams)
    /// before they start, and give it back once the segment is decoded. The blocking
    /// [`Merger`](crate::Merger) iterator reads on the calling thread and takes no slot.
    ///
    /// Default: none (every stream starts its reads at once).
    pub fn with_read_slots(mut self, slots: ReadSlots) -> Self {
        self.read_slots = Some(slots);
        self
    }

    /// Makes the segment read a merge needs wait for room in the pool (or take the budget's
    /// one overdraft) instead of forcing a grow, and reads ahead only within the limit; see
    /// [`ReadBudget`]. Share one budget among the readers that share a pool.
    ///
    /// Default: none (the read a merge needs is reserved with a forced grow; see
    /// [`Merger`](crate::Merger)'s memory section).
    pub fn with_read_budget(mut self, budget: ReadBudget) -> Self {
        self.read_budget = Some(budget);
        self
    }

    /// The budget reads wait on, if any.
    pub fn read_budget(&self) -> Option<&ReadBudget> {
        self.read_budget.as_ref()
    }

    /// The target output row count, or `None` for pass-through.
    pub fn target_rows(&self) -> Option<usize> {
        self.target_rows
    }

    /// Segments read ahead by the stream.
    pub fn read_ahead(&self) -> usize {
        self.read_ahead
    }

    /// The slots the stream's reads wait for, if any.
    pub fn read_slots(&self) -> Option<&ReadSlots> {
        self.read_slots.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_docs() {
        let o = MergeOptions::default();
        assert_eq!(o.target_rows(), Some(8192));
        assert_eq!(o.read_ahead(), 1);
        assert_eq!(o.read_slots(), None);
    }

    #[test]
    fn zero_target_means_pass_through() {
        assert_eq!(
            MergeOptions::new().with_target_rows(0),
            MergeOptions::new().with_pass_through()
        );
        assert_eq!(
            MergeOptions::new()
                .with_pass_through()
                .with_target_rows(10)
                .target_rows(),
            Some(10)
        );
    }
}
