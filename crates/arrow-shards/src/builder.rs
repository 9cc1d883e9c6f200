//! Building a [`ShardBuffer`]: every setting, its default, and the checks `build()` makes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;
use arrow_shards_memory::{BoundedPool, MemoryPool, UnboundedPool};
use arrow_shards_merge::{ReadBudget, ReadSlots};
use arrow_shards_spill::{Compression, SpillOptions, SpillStorage};

use crate::buffer::ShardBuffer;
use crate::compact::CompactConfig;
use crate::config::{Config, SpillConfig};
use crate::error::ConfigError;

/// Default fraction of the memory limit at which the spiller starts.
pub const DEFAULT_SPILL_THRESHOLD: f64 = 0.8;
/// Default fraction of the memory limit the spiller spills down to.
pub const DEFAULT_SPILL_TARGET: f64 = 0.6;
/// Default most in-memory bytes one spill round writes.
pub const DEFAULT_MAX_SPILL_ROUND_BYTES: usize = 64 << 20;
/// Default most in-memory bytes in one spilled segment (a reader decodes one segment at a time).
pub const DEFAULT_SPILL_SEGMENT_BYTES: usize = 4 << 20;
/// Default rows per batch handed out by readers.
pub const DEFAULT_READ_BATCH_ROWS: usize = 8192;
/// Default [`ShardBufferBuilder::with_read_stall_timeout`]: a reader waiting for memory
/// fails after a minute in which the pool released nothing.
pub const DEFAULT_READ_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Default most spilled-segment reads that the buffer's [`PartitionStream`](crate::PartitionStream)s
/// run at once, together: twice the machine's cores (`std::thread::available_parallelism`),
/// at least 4.
pub fn default_max_concurrent_reads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .saturating_mul(2)
        .max(4)
}
/// Default rows at which a partition's open batch is cut (and below which a written batch is
/// copied into it).
pub const DEFAULT_COMPACT_TARGET_ROWS: usize = 8192;
/// Default bytes at which a partition's open batch is cut (and below which a written batch is
/// copied into it); with a memory limit, at most an eighth of it.
pub const DEFAULT_COMPACT_TARGET_BYTES: usize = 4 << 20;
/// The largest compaction target in bytes (`Utf8` offsets are 32-bit).
pub const MAX_COMPACT_TARGET_BYTES: usize = 1 << 30;

/// Settings for a [`ShardBuffer`]; made by [`ShardBuffer::builder`].
#[derive(Debug)]
#[must_use]
pub struct ShardBufferBuilder {
    schema: SchemaRef,
    num_partitions: u32,
    memory_limit: Option<usize>,
    pool: Option<Arc<dyn MemoryPool>>,
    write_timeout: Option<Duration>,
    disk_when_nothing_to_spill: bool,
    read_batch_rows: Option<usize>,
    concurrent_reads: usize,
    read_stall_timeout: Option<Duration>,
    spill_enabled: bool,
    spill_dir: Option<PathBuf>,
    spill_quota: Option<u64>,
    spill_overflow: Option<Arc<dyn SpillStorage>>,
    sweep_on_build: bool,
    spill_threshold: f64,
    spill_target: f64,
    max_spill_round_bytes: usize,
    spill_segment_bytes: usize,
    spill_options: SpillOptions,
    compact_target_rows: usize,
    compact_target_bytes: usize,
}

impl ShardBuffer {
    /// Starts building a buffer for batches of `schema` spread over `num_partitions` partitions.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use arrow_schema::{DataType, Field, Schema};
    /// use arrow_shards::ShardBuffer;
    ///
    /// let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    /// let buffer = ShardBuffer::builder(schema, 16).with_memory_limit(64 << 20).build().unwrap();
    /// assert_eq!(buffer.num_partitions(), 16);
    /// ```
    pub fn builder(schema: SchemaRef, num_partitions: u32) -> ShardBufferBuilder {
        ShardBufferBuilder::new(schema, num_partitions)
    }
}

impl ShardBufferBuilder {
    pub(crate) fn new(schema: SchemaRef, num_partitions: u32) -> Self {
        Self {
            schema,
            num_partitions,
            memory_limit: None,
            pool: None,
            write_timeout: None,
            disk_when_nothing_to_spill: false,
            read_batch_rows: Some(DEFAULT_READ_BATCH_ROWS),
            concurrent_reads: default_max_concurrent_reads(),
            read_stall_timeout: Some(DEFAULT_READ_STALL_TIMEOUT),
            spill_enabled: true,
            spill_dir: None,
            spill_quota: None,
            spill_overflow: None,
            sweep_on_build: true,
            spill_threshold: DEFAULT_SPILL_THRESHOLD,
            spill_target: DEFAULT_SPILL_TARGET,
            max_spill_round_bytes: DEFAULT_MAX_SPILL_ROUND_BYTES,
            spill_segment_bytes: DEFAULT_SPILL_SEGMENT_BYTES,
            spill_options: SpillOptions::default(),
            compact_target_rows: DEFAULT_COMPACT_TARGET_ROWS,
            compact_target_bytes: DEFAULT_COMPACT_TARGET_BYTES,
        }
    }

    /// Compaction on write: a batch written with fewer rows than this (and smaller than
    /// [`with_compact_target_bytes`](Self::with_compact_target_bytes)) is copied into its
    /// partition's open batch, which becomes an ordinary batch when it reaches this many rows
    /// (or the byte target, or when the partition is spilled or read). Larger batches are kept
    /// as written, without a copy. `0` turns compaction off: every batch is kept as written
    /// (then tiny shards each cost a batch's fixed overhead; see `docs/memory-accounting.md`).
    ///
    /// Default: 8192 (see `docs/benchmarks.md`, "Small shards").
    pub fn with_compact_target_rows(mut self, rows: usize) -> Self {
        self.compact_target_rows = rows;
        self
    }

    /// The byte side of compaction (see
    /// [`with_compact_target_rows`](Self::with_compact_target_rows)): an open batch is cut when
    /// its variable-length data reaches this many bytes, and a written batch whose rows take
    /// this many bytes is kept as written. With a memory limit the target used is at most an
    /// eighth of the limit, so open batches stay small against small budgets; a limit too small
    /// for a few open batches turns compaction off. The open batch of a partition with a
    /// subscriber ([`ShardBuffer::subscribe`]) is cut sooner under a limit: at its share of a
    /// quarter of the limit (`limit / (4 x partitions)`, at least a few hundred bytes per
    /// column), so that subscribers take their rows from memory while producers write instead
    /// of waiting for them to be spilled (1,024 partitions would otherwise reach the row target
    /// only at the end of a 6M-row input).
    /// At most 1 GiB.
    ///
    /// Default: 4 MiB.
    pub fn with_compact_target_bytes(mut self, bytes: usize) -> Self {
        self.compact_target_bytes = bytes;
        self
    }

    /// Caps the bytes this buffer may hold in memory, with a pool of its own. A limit of 0
    /// keeps nothing in memory: with spilling every batch goes straight to disk, without it
    /// every non-empty batch is refused. Exclusive with
    /// [`with_memory_pool`](Self::with_memory_pool).
    ///
    /// Default: unlimited (an [`UnboundedPool`] that still counts; nothing is ever spilled).
    pub fn with_memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// Draws memory from `pool`, which other buffers (other shuffles in this process) may share.
    /// While the *pool* is above the threshold, a spill takes the largest partition across every
    /// buffer on it (pools that keep [`SpillPeers`](arrow_shards_memory::SpillPeers), as
    /// [`BoundedPool`](arrow_shards_memory::BoundedPool) does), so an idle buffer holding more makes room for a busy one.
    ///
    /// Default: a pool of this buffer's own, sized by `with_memory_limit`.
    pub fn with_memory_pool(mut self, pool: Arc<dyn MemoryPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Bounds how long a write waits for room. With spilling, writers otherwise wait as long as
    /// the spiller and readers need; without spilling they otherwise fail at once. Async writes
    /// time out with tokio's timer, so they need a tokio runtime with time enabled.
    ///
    /// Default: none (wait for the spiller with spilling on; fail at once with spilling off).
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = Some(timeout);
        self
    }

    /// With spilling, a write refused while this buffer holds nothing it could spill (no
    /// spillable partition, no spill running) and no other spilling buffer shares its pool goes
    /// straight to disk as its own segment instead of waiting for a release that only the
    /// pool's other consumers could give (DataFusion's operators on a session pool: the
    /// DataFusion integration turns it on).
    ///
    /// Default: off: a write then waits (up to the write timeout). Not yet the default because,
    /// with it on, the Dask plugin's full-disk test left a shuffle run open after its error
    /// (not diagnosed; docs/reliability.md).
    pub fn with_disk_when_nothing_to_spill(mut self, enabled: bool) -> Self {
        self.disk_when_nothing_to_spill = enabled;
        self
    }

    /// Rows per batch handed out by readers: small batches are coalesced up to this many rows,
    /// batches at or above it pass through uncopied. `0` hands batches over as the buffer holds
    /// them, without coalescing on read: with compaction on (the default) small writes were
    /// already copied into batches of up to the compaction target on write, so 58 writes of a
    /// few rows come back as one batch; to get every write back as written, turn compaction off
    /// too ([`with_compact_target_rows(0)`](Self::with_compact_target_rows)).
    ///
    /// Default: 8192.
    pub fn with_read_batch_rows(mut self, rows: usize) -> Self {
        self.read_batch_rows = (rows > 0).then_some(rows);
        self
    }

    /// The most spilled-segment reads that this buffer's [`PartitionStream`](crate::PartitionStream)s
    /// run at once, all streams together: a stream's read (each on a tokio blocking thread)
    /// waits for a free slot, and gives it back once the segment is decoded. Many partitions
    /// read at once (an engine polling all its output streams) otherwise start one blocking
    /// thread per segment read, and each thread decodes into its own allocator arena, which
    /// costs resident memory far past what the pool counts (see `docs/datafusion.md`). The
    /// blocking [`PartitionReader`](crate::PartitionReader) iterator reads on the caller's
    /// thread and is not bounded. `0` removes the bound.
    ///
    /// Default: [`default_max_concurrent_reads`] (twice the cores, at least 4).
    pub fn with_max_concurrent_reads(mut self, reads: usize) -> Self {
        self.concurrent_reads = reads;
        self
    }

    /// How readers get memory for a spilled segment: with a timeout, the read a
    /// reader needs waits for room in the pool instead of forcing it past the limit, and one
    /// reader at a time may overdraw by one segment so that reading always goes on (the
    /// buffer-wide [`ReadBudget`](arrow_shards_merge::ReadBudget), shared by every reader of
    /// this buffer, streaming or not; see `docs/memory-accounting.md`). A wait in which the pool
    /// releases nothing for `timeout` fails the read with `ReadStalled`. `None`: every reader
    /// reserves the segment it needs with a forced grow (each reader at once may then pass the
    /// limit by a segment).
    ///
    /// Default: `Some(`[`DEFAULT_READ_STALL_TIMEOUT`]`)` (60 s). An async stream's read waits
    /// for room as a task, before it takes a read slot, so a slot is only held by a read that
    /// has its memory; the wait's timeout needs no tokio time driver.
    pub fn with_read_stall_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.read_stall_timeout = timeout;
        self
    }

    /// Spills under `dir`, in a private subdirectory created at `build()` and removed on close.
    ///
    /// Default: the system temp dir (`std::env::temp_dir()`).
    pub fn with_spill_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spill_dir = Some(dir.into());
        self
    }

    /// Spill tiers: each run goes to the local spill directory (under
    /// [`with_spill_dir`](Self::with_spill_dir)'s root) while its run files stay within
    /// `local_quota` bytes (`None`: while the filesystem has room), and to `overflow` (an
    /// object store, `arrow_shards_spill::ObjectStoreSpill` with the spill crate's feature
    /// `object-store`) when the local directory is full: a run refused locally with
    /// [`SpillError::DiskFull`](arrow_shards_spill::SpillError::DiskFull) (the quota, ENOSPC or
    /// EDQUOT) is written again, whole, to `overflow`. A quota of `Some(0)` sends every run to
    /// `overflow` (the local directory is still created, empty).
    ///
    /// `overflow` may be shared by several buffers; the buffer never closes it (its segments'
    /// objects are deleted when the buffer drops them), the caller does. The metrics count the
    /// local tier in the spill fields and the overflow in `overflow_*`.
    ///
    /// Default: one tier, the local directory without quota.
    pub fn with_spill_tiers(
        mut self,
        local_quota: Option<u64>,
        overflow: Arc<dyn SpillStorage>,
    ) -> Self {
        self.spill_quota = local_quota;
        self.spill_overflow = Some(overflow);
        self
    }

    /// Whether `build()` sweeps the spill root for the leftovers of crashed processes: the
    /// first buffer built over a root in a process removes the spill directories under it
    /// whose owner process is dead (see [`arrow_shards_spill::sweep`]: only directories with
    /// this library's marker, made by this user in this pid namespace; nothing else is
    /// touched). Later builds over the same root skip it.
    ///
    /// Default: true.
    pub fn with_sweep_on_build(mut self, sweep: bool) -> Self {
        self.sweep_on_build = sweep;
        self
    }

    /// Whether the buffer may spill to disk (it only does with a memory limit). Without, it
    /// never touches disk: a write that does not fit waits (`with_write_timeout`) or fails with
    /// `MemoryExhausted`, handing its batch back. `false` together with a spill setting (a spill
    /// directory, say) is refused by `build()`.
    ///
    /// Default: true.
    pub fn with_spill(mut self, enabled: bool) -> Self {
        self.spill_enabled = enabled;
        self
    }

    /// Fraction of the pool's limit at which the spiller starts, in `(0, 1]`.
    ///
    /// Default: 0.8 (see `docs/architecture.md` for the measurement behind it).
    pub fn with_spill_threshold(mut self, fraction: f64) -> Self {
        self.spill_threshold = fraction;
        self
    }

    /// Fraction of the pool's limit the spiller spills down to, in `[0, threshold)`.
    ///
    /// Default: 0.6.
    pub fn with_spill_target(mut self, fraction: f64) -> Self {
        self.spill_target = fraction;
        self
    }

    /// The most in-memory bytes one spill round writes (one run file); more rounds follow while
    /// the pool is above the target. At least one partition is spilled per round, and at least
    /// [`MIN_SPILL_ROUND_BYTES`](crate::MIN_SPILL_ROUND_BYTES) (64 KiB) or everything spillable when this limit allows it.
    ///
    /// Default: 64 MiB.
    pub fn with_max_spill_round_bytes(mut self, bytes: usize) -> Self {
        self.max_spill_round_bytes = bytes;
        self
    }

    /// The most in-memory bytes in one spilled segment: a partition's batches in one round are
    /// split into segments of at most this size (a larger batch is a segment of its own). A
    /// reader decodes one segment at a time, so this bounds how far a read may take the pool
    /// past its limit (see `docs/memory-accounting.md`).
    ///
    /// Default: 4 MiB.
    pub fn with_spill_segment_bytes(mut self, bytes: usize) -> Self {
        self.spill_segment_bytes = bytes;
        self
    }

    /// Compression of spilled data. Only segments of at least 1 MiB in memory are compressed
    /// (`SpillOptions::with_compress_min_bytes`): arrow-ipc frames each buffer, and on small
    /// segments the frames cost more than they save.
    ///
    /// Default: [`Compression::None`]. LZ4 made the CLI's SF 1 shuffle faster while it spilled
    /// much to a slow disk (64 partitions under 256 MiB: 2.57 against 3.64 s) and slower when
    /// the same disk was fast (2.67 against 2.28 s), on this project's machine
    /// (`docs/benchmarks.md`).
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.spill_options = self.spill_options.with_compression(compression);
        self
    }

    /// Size past which a spill run continues in a new file.
    ///
    /// Default: 1 GiB.
    pub fn with_spill_file_bytes(mut self, bytes: u64) -> Self {
        self.spill_options = self.spill_options.with_max_file_bytes(bytes);
        self
    }

    /// Checks the settings and builds the buffer. With spilling on and a bounded pool, sweeps
    /// the spill root once per process (see [`with_sweep_on_build`](Self::with_sweep_on_build)),
    /// creates the private spill directory and starts the spiller thread.
    pub fn build(mut self) -> Result<ShardBuffer, ConfigError> {
        if self.num_partitions == 0 {
            return Err(ConfigError::NoPartitions);
        }
        let pool: Arc<dyn MemoryPool> = match (self.pool.take(), self.memory_limit) {
            (Some(_), Some(_)) => return Err(ConfigError::LimitAndPool),
            (Some(pool), None) => pool,
            (None, Some(limit)) => Arc::new(BoundedPool::new(limit)),
            (None, None) => Arc::new(UnboundedPool::new()),
        };
        if !(self.spill_threshold > 0.0 && self.spill_threshold <= 1.0) {
            return Err(invalid(
                "spill_threshold",
                self.spill_threshold,
                "must be in (0, 1]",
            ));
        }
        if !(self.spill_target >= 0.0 && self.spill_target < self.spill_threshold) {
            return Err(invalid(
                "spill_target",
                self.spill_target,
                "must be in [0, spill_threshold)",
            ));
        }
        if self.max_spill_round_bytes == 0 {
            return Err(invalid("max_spill_round_bytes", 0, "must be at least 1"));
        }
        if self.spill_segment_bytes == 0 {
            return Err(invalid("spill_segment_bytes", 0, "must be at least 1"));
        }
        self.check_spill_settings(pool.limit().is_some())?;
        if self.compact_target_bytes == 0 || self.compact_target_bytes > MAX_COMPACT_TARGET_BYTES {
            return Err(invalid(
                "compact_target_bytes",
                self.compact_target_bytes,
                "must be in [1, 1 GiB]",
            ));
        }
        let compact = CompactConfig::new(
            &self.schema,
            self.compact_target_rows,
            self.compact_target_bytes,
            pool.limit(),
            self.num_partitions,
        );
        let config = Config {
            write_timeout: self.write_timeout,
            disk_when_nothing_to_spill: self.disk_when_nothing_to_spill,
            read_batch_rows: self.read_batch_rows,
            read_slots: (self.concurrent_reads > 0).then(|| ReadSlots::new(self.concurrent_reads)),
            read_budget: self.read_stall_timeout.map(ReadBudget::new),
            compact,
        };
        let spill = match (self.spill_enabled, pool.limit()) {
            (true, Some(limit)) => Some(SpillConfig {
                root: self.spill_dir.unwrap_or_else(std::env::temp_dir),
                threshold_bytes: fraction_of(limit, self.spill_threshold),
                target_bytes: fraction_of(limit, self.spill_target),
                max_round_bytes: self.max_spill_round_bytes,
                segment_bytes: self.spill_segment_bytes,
                options: self.spill_options,
                local_quota: self.spill_quota,
                overflow: self.spill_overflow,
            }),
            _ => None,
        };
        if let Some(spill) = spill.as_ref().filter(|_| self.sweep_on_build) {
            crate::leftovers::sweep_once(&spill.root);
        }
        ShardBuffer::from_parts(self.schema, self.num_partitions, pool, config, spill)
    }
}

impl ShardBufferBuilder {
    /// The spill settings given with a value other than their default.
    fn spill_settings_given(&self) -> Vec<&'static str> {
        let defaults = SpillOptions::default();
        [
            ("with_spill_dir", self.spill_dir.is_some()),
            ("with_spill_tiers", self.spill_overflow.is_some()),
            (
                "with_spill_threshold",
                self.spill_threshold != DEFAULT_SPILL_THRESHOLD,
            ),
            (
                "with_spill_target",
                self.spill_target != DEFAULT_SPILL_TARGET,
            ),
            (
                "with_max_spill_round_bytes",
                self.max_spill_round_bytes != DEFAULT_MAX_SPILL_ROUND_BYTES,
            ),
            (
                "with_spill_segment_bytes",
                self.spill_segment_bytes != DEFAULT_SPILL_SEGMENT_BYTES,
            ),
            (
                "with_compression",
                self.spill_options.compression() != defaults.compression(),
            ),
            (
                "with_spill_file_bytes",
                self.spill_options.max_file_bytes() != defaults.max_file_bytes(),
            ),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }

    /// Refuses spill settings that could not act: with spilling off, or without a limit.
    fn check_spill_settings(&self, limited: bool) -> Result<(), ConfigError> {
        let given = self.spill_settings_given();
        if let Some(&setting) = given.first() {
            if !self.spill_enabled {
                return Err(ConfigError::Conflict {
                    setting,
                    other: "with_spill(false)",
                    why: "spilling is off: drop the spill setting or turn spilling on",
                });
            }
            if !limited {
                return Err(ConfigError::Conflict {
                    setting,
                    other: "no memory limit",
                    why: "the buffer only spills under a memory limit: set with_memory_limit \
                          (or a bounded pool), or drop the spill setting",
                });
            }
        }
        self.spill_options
            .validate()
            .map_err(|e| ConfigError::InvalidCompression {
                value: format!("{:?}", self.spill_options.compression()),
                source: Arc::new(e),
            })
    }
}

fn fraction_of(limit: usize, fraction: f64) -> usize {
    (limit as f64 * fraction) as usize
}

fn invalid(setting: &'static str, value: impl ToString, why: &'static str) -> ConfigError {
    ConfigError::Invalid {
        setting,
        value: value.to_string(),
        why,
    }
}
