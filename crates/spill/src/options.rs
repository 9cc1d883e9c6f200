//! How a run is written: compression, coalescing, file rotation.

use arrow_ipc::writer::IpcWriteOptions;
use arrow_ipc::{CompressionType, MetadataVersion};
use arrow_schema::ArrowError;

/// Compression of the IPC message bodies in a segment.
///
/// Compression is slower than a local disk on our machines (LZ4 ~0.55 GB/s, ZSTD(1) ~0.38 GB/s
/// against ~1.6 GB/s sequential writes), so it pays only when disk bandwidth or space is scarce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Bodies are written as they are in memory.
    #[default]
    None,
    /// LZ4 frame compression of each buffer.
    Lz4,
    /// ZSTD compression of each buffer at `level` (1..=22; negative levels are faster).
    Zstd {
        /// The ZSTD level.
        level: i32,
    },
}

impl Compression {
    /// The code stored in a segment header's flags.
    pub(crate) fn code(self) -> u16 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
            Compression::Zstd { .. } => 2,
        }
    }
}

/// Options for a [`RunWriter`](crate::RunWriter).
///
/// ```
/// use arrow_shards_spill::{Compression, SpillOptions};
/// let options = SpillOptions::default()
///     .with_compression(Compression::Lz4)
///     .with_coalesce_rows(4096)
///     .with_max_file_bytes(256 << 20);
/// assert_eq!(options.coalesce_rows(), 4096);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillOptions {
    compression: Compression,
    compress_min_bytes: usize,
    coalesce_rows: usize,
    max_file_bytes: u64,
    sync_on_finish: bool,
}

/// Default size below which a segment is written uncompressed: 1 MiB.
pub const DEFAULT_COMPRESS_MIN_BYTES: usize = 1 << 20;
/// Default target rows per IPC message when coalescing.
pub const DEFAULT_COALESCE_ROWS: usize = 8192;
/// Default size past which a run continues in a new file: 1 GiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1 << 30;

impl Default for SpillOptions {
    fn default() -> Self {
        Self {
            compression: Compression::None,
            compress_min_bytes: DEFAULT_COMPRESS_MIN_BYTES,
            coalesce_rows: DEFAULT_COALESCE_ROWS,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            sync_on_finish: false,
        }
    }
}

impl SpillOptions {
    /// Compression of message bodies. Default: [`Compression::None`].
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// With compression on, a segment whose batches hold fewer than `bytes` in memory is
    /// written uncompressed (its header and messages say so; readers need nothing). arrow-ipc
    /// compresses each buffer in a frame of its own, and on small segments (thousands of
    /// partitions under a small limit: a few hundred rows each) the frames cost more than they
    /// save. `0` compresses every segment. Default: 1 MiB (the CLI's SF 1 shuffle under
    /// 256 MiB on this project's machine: with LZ4 on every segment the 4096-partition run
    /// took 27-40% longer than with LZ4 from 1 MiB, which was no slower at 64 partitions;
    /// docs/benchmarks.md).
    pub fn with_compress_min_bytes(mut self, bytes: usize) -> Self {
        self.compress_min_bytes = bytes;
        self
    }

    /// Target rows per IPC message: a segment's consecutive small batches are concatenated
    /// into batches of at most this many rows before encoding, so 100-row shards do not become
    /// 100-row messages (each message costs its metadata, padding and a decode step). Batches
    /// of at least half this size, and a small batch with no small neighbour, are written as
    /// they are. `0` turns coalescing off: every batch, including empty
    /// ones, becomes one message and batch boundaries are kept. Default: 8192.
    pub fn with_coalesce_rows(mut self, rows: usize) -> Self {
        self.coalesce_rows = rows;
        self
    }

    /// Size in bytes past which a run continues in a new file. Rotation happens between
    /// segments (a segment never spans files), so a file may exceed this by one segment.
    /// Default: 1 GiB.
    pub fn with_max_file_bytes(mut self, bytes: u64) -> Self {
        self.max_file_bytes = bytes;
        self
    }

    /// Whether [`RunWriter::finish`](crate::RunWriter::finish) calls `fdatasync` on the run's
    /// last file (and rotation on each full one). Spill files never need to survive a crash —
    /// [`sweep`](crate::sweep) deletes them — and reads are served by the page cache, so this
    /// only trades throughput for surfacing late write-back errors. Default: false.
    pub fn with_sync_on_finish(mut self, sync: bool) -> Self {
        self.sync_on_finish = sync;
        self
    }

    /// The compression setting.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// The smallest segment (bytes in memory) that is compressed.
    pub fn compress_min_bytes(&self) -> usize {
        self.compress_min_bytes
    }

    /// The coalescing target in rows (`0` = off).
    pub fn coalesce_rows(&self) -> usize {
        self.coalesce_rows
    }

    /// The rotation size in bytes.
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes
    }

    /// Checks the settings the IPC writer will be given (the ZSTD level, for one), so a bad
    /// setting fails when a buffer is built rather than at its first spill.
    pub fn validate(&self) -> Result<(), arrow_schema::ArrowError> {
        self.ipc_write_options().map(|_| ())
    }

    /// Whether finished files are synced.
    pub fn sync_on_finish(&self) -> bool {
        self.sync_on_finish
    }

    /// The IPC writer options for these settings.
    ///
    /// [`validate`](Self::validate) checks the same at configuration time.
    ///
    /// Buffers are padded to 16 bytes, not 8: `i128` (decimals, intervals) and view arrays need
    /// 16-byte alignment, and a body written at 8 is copied again on read to realign it. The
    /// extra padding is at most 8 bytes per buffer.
    pub(crate) fn ipc_write_options(&self) -> Result<IpcWriteOptions, ArrowError> {
        let options = IpcWriteOptions::try_new(16, false, MetadataVersion::V5)?;
        match self.compression {
            Compression::None => Ok(options),
            Compression::Lz4 => options.try_with_compression(Some(CompressionType::LZ4_FRAME)),
            Compression::Zstd { level } => options
                .try_with_compression(Some(CompressionType::ZSTD))?
                .try_with_compression_level(Some(level)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_documented_values() {
        let options = SpillOptions::default();
        assert_eq!(options.compression(), Compression::None);
        assert_eq!(options.compress_min_bytes(), 1 << 20);
        assert_eq!(options.coalesce_rows(), 8192);
        assert_eq!(options.max_file_bytes(), 1 << 30);
        assert!(!options.sync_on_finish());
    }

    #[test]
    fn zstd_level_is_validated() {
        let good = SpillOptions::default().with_compression(Compression::Zstd { level: 3 });
        assert!(good.ipc_write_options().is_ok());
        let bad = SpillOptions::default().with_compression(Compression::Zstd { level: 1000 });
        assert!(bad.ipc_write_options().is_err());
    }
}
