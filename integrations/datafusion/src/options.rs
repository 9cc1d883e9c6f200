//! [`ShardRepartitionOptions`]: how the optimizer rule picks exchanges to replace and how each
//! exchange's buffer is set up.

use std::time::Duration;

/// Options of [`ShardRepartitionRule`](crate::ShardRepartitionRule) and
/// [`ShardRepartitionExec`](crate::ShardRepartitionExec).
///
/// ```
/// use std::time::Duration;
/// use arrow_shards_datafusion::ShardRepartitionOptions;
///
/// let options = ShardRepartitionOptions::default()
///     .with_min_output_partitions(64)
///     .with_write_timeout(Some(Duration::from_secs(60)));
/// assert_eq!(options.min_output_partitions, 64);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ShardRepartitionOptions {
    /// The rule replaces a `RepartitionExec` only if it has at least this many output
    /// partitions (default 1: every hash or round-robin one). The buffer pays off with many
    /// output partitions or a memory limit; see docs/datafusion.md.
    pub min_output_partitions: usize,
    /// How long a write may wait for memory before the query fails with `ResourcesExhausted`
    /// (default 60 s). The buffer wakes its writers when it frees memory itself; memory that
    /// other operators free in the same session pool sends no wake-up, so with nothing of its
    /// own left to spill a writer waits for this timeout. `None`: wait for ever.
    pub write_timeout: Option<Duration>,
    /// The most spilled-segment reads the exchange's output streams run at once, all together
    /// (default: the buffer's, `arrow_shards::default_max_concurrent_reads()`, twice the
    /// cores and at least 4). DataFusion polls every output stream at once; unbounded, each
    /// read takes its own blocking thread and allocator arena (docs/datafusion.md). `0`: no
    /// bound.
    pub max_concurrent_reads: usize,
    /// When output partitions get their rows (default [`ExchangeMode::Streaming`]).
    pub mode: ExchangeMode,
}

/// When an exchange's output partitions get their rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ExchangeMode {
    /// Each output stream subscribes to its partition when it is first polled and yields
    /// batches as the inputs write them (the buffer's streaming read): inputs never wait for
    /// outputs, only for memory, and a slow or idle output costs spill, never a deadlock. An
    /// output dropped early (a `LIMIT` above it) abandons its partition: the rows written to it
    /// afterwards are discarded and the other outputs go on.
    #[default]
    Streaming,
    /// Every output waits until every input is done, then reads its partition: a barrier,
    /// for stage boundaries.
    Materialize,
}

impl Default for ShardRepartitionOptions {
    fn default() -> Self {
        Self {
            min_output_partitions: 1,
            write_timeout: Some(Duration::from_secs(60)),
            max_concurrent_reads: arrow_shards::default_max_concurrent_reads(),
            mode: ExchangeMode::default(),
        }
    }
}

impl ShardRepartitionOptions {
    /// Sets [`min_output_partitions`](Self::min_output_partitions).
    pub fn with_min_output_partitions(mut self, partitions: usize) -> Self {
        self.min_output_partitions = partitions;
        self
    }

    /// Sets [`write_timeout`](Self::write_timeout).
    pub fn with_write_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Sets [`mode`](Self::mode).
    pub fn with_mode(mut self, mode: ExchangeMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets [`max_concurrent_reads`](Self::max_concurrent_reads).
    pub fn with_max_concurrent_reads(mut self, reads: usize) -> Self {
        self.max_concurrent_reads = reads;
        self
    }
}
