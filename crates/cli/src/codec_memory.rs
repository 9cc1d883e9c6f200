//! What the output codec holds: the memory of a parquet writer's compressors, which the
//! parquet crate's own count (`ArrowWriter::memory_size`) leaves out, charged to the run's
//! budget beside the open row groups ([`crate::part_writer`], [`crate::writer_memory`]).
//!
//! The parquet crate (60.1, `parquet::compression`) makes one codec per column writer when a
//! row group opens and drops them all when it is cut. A column's codec first compresses when
//! its first data page is complete (at `--data-page-size` bytes or 20,000 rows, the crate's
//! page row limit), and the cut compresses the last page of every column and its dictionary
//! page. Per codec:
//!
//! - **zstd** (`zstd::bulk`): a compression context and a decompression context per column,
//!   made with the row group ([`CodecMemory::context`]: their sizes as zstd reports them,
//!   `ZSTD_sizeof_CCtx` of a new context and `ZSTD_sizeof_DCtx`, 99 KiB together); the
//!   compression context's workspace is allocated at its first page, sized by the level and the
//!   page's size, and kept until the row group is cut ([`CodecMemory::workspace`]: measured
//!   once per run by compressing a page of the largest size a page may have, the larger of
//!   `--data-page-size` and `--dictionary-limit`, at most 8 MiB: 564 KiB at level 1, 1.24 MiB
//!   at level 3 with the defaults). zstd allocates through C `malloc`, not the Rust allocator.
//! - **snappy** (`snap::raw::Encoder`): a 2 KiB hash table inside the codec, and a 32 KiB one
//!   (16,384 `u16`) allocated at the first page of more than 1 KiB and kept.
//! - **lz4** (`LZ4_RAW`, `lz4_flex`'s block API): nothing kept; each page compressed allocates
//!   a 16 KiB hash table (4,096 `u32`) and frees it.
//! - **none**: nothing.
//!
//! Each compressed page is also written into a buffer of up to the codec's bound on the page
//! (a page and a sixth), freed or shrunk once compressed ([`CodecMemory::scratch`]).
//!
//! Not charged: Arrow IPC output's codec. Its writer keeps one zstd compression context per
//! open file (`arrow_ipc`'s `CompressionContext`; lz4 frames keep nothing), which the output
//! threads do not count.
//!
//! How it is charged: an open row group is charged its columns' contexts, plus their
//! workspaces once it holds as many rows as a page may ([`CodecMemory::open_row_group`]); the
//! output threads are charged, once per thread and for as long as any of them runs, what
//! cutting one row group takes at its peak: every column's workspace and one call's scratch
//! ([`CodecMemory::cut`]), since a cut compresses every column before any codec is freed. A
//! thread done with its partitions stays charged: it is lent to the writers still at work
//! ([`crate::spare_threads`]), and compresses one page at a time for them, so the pages in
//! flight never outnumber the scratches charged. Both are upper bounds: a workspace sized for
//! a smaller page is smaller, and memory that zstd allocates but never writes is not resident.

use zstd_safe::{CCtx, CParameter, DCtx};

use crate::args::OutputCompression;

/// Rows at which the parquet crate completes a data page (its `DEFAULT_DATA_PAGE_ROW_COUNT_LIMIT`,
/// which the CLI keeps): from then on a column's codec has compressed a page.
pub(crate) const PAGE_ROWS: usize = 20_000;

/// The largest page zstd's workspace is measured for.
const ZSTD_PROBE_MAX: usize = 8 << 20;

/// `snap::raw::Encoder`'s table kept inside it: 1,024 `u16`.
const SNAPPY_SMALL_TABLE: usize = 2 << 10;

/// `snap::raw::Encoder`'s table allocated at the first page of more than 1 KiB: 16,384 `u16`.
const SNAPPY_BIG_TABLE: usize = 32 << 10;

/// `lz4_flex`'s hash table, allocated and freed by every page compressed: 4,096 `u32`.
const LZ4_TABLE: usize = 16 << 10;

/// What one parquet column writer's codec holds, and what compressing takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CodecMemory {
    /// Bytes per column while a row group is open.
    pub(crate) context: usize,
    /// Bytes per column from its first compressed page until the row group is cut.
    pub(crate) workspace: usize,
    /// Bytes one page's compression allocates and frees.
    pub(crate) scratch: usize,
}

impl CodecMemory {
    /// What `compression` holds (zstd at `zstd_level`) for pages of at most `page_bytes`;
    /// nothing for Arrow IPC output (`parquet` false): not charged (see the module docs).
    pub(crate) fn of(
        compression: OutputCompression,
        parquet: bool,
        zstd_level: i32,
        page_bytes: usize,
    ) -> Self {
        let bound = page_bytes.saturating_add(page_bytes / 6).saturating_add(64);
        match compression {
            _ if !parquet => CodecMemory::default(),
            OutputCompression::None => CodecMemory::default(),
            OutputCompression::Snappy => CodecMemory {
                context: SNAPPY_SMALL_TABLE,
                workspace: SNAPPY_BIG_TABLE,
                scratch: bound,
            },
            OutputCompression::Lz4 => CodecMemory {
                context: 0,
                workspace: 0,
                scratch: LZ4_TABLE.saturating_add(bound),
            },
            OutputCompression::Zstd => {
                let (fresh, grown) = zstd_compression_context(zstd_level, page_bytes);
                CodecMemory {
                    context: fresh + DCtx::create().sizeof(),
                    workspace: grown.saturating_sub(fresh),
                    scratch: bound,
                }
            }
        }
    }

    /// Bytes an open row group of `columns` leaf columns holding `rows` rows is charged.
    pub(crate) fn open_row_group(&self, columns: usize, rows: usize) -> usize {
        let per_column = if rows >= PAGE_ROWS {
            self.context + self.workspace
        } else {
            self.context
        };
        columns.saturating_mul(per_column)
    }

    /// Bytes an output thread is charged while it runs: cutting one row group of `columns`
    /// leaf columns, at its peak.
    pub(crate) fn cut(&self, columns: usize) -> usize {
        columns
            .saturating_mul(self.workspace)
            .saturating_add(self.scratch)
    }
}

/// A zstd compression context's size as zstd reports it, new and after compressing one page
/// of `page_bytes` (at most [`ZSTD_PROBE_MAX`]) at `level`; its workspace depends on the level
/// and the page's size, not on its bytes, so the page is zeros.
fn zstd_compression_context(level: i32, page_bytes: usize) -> (usize, usize) {
    let mut context = CCtx::create();
    let fresh = context.sizeof();
    let page = vec![0u8; page_bytes.clamp(1, ZSTD_PROBE_MAX)];
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(page.len()));
    // A level zstd refuses (the flag's range is zstd's) or a failed compression leaves the
    // context as new: the workspace is then counted as 0, never as an error of the run.
    if context
        .set_parameter(CParameter::CompressionLevel(level))
        .is_ok()
    {
        let _ = context.compress2(&mut out, &page[..]);
    }
    (fresh, context.sizeof().max(fresh))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parquet(compression: OutputCompression, level: i32) -> CodecMemory {
        CodecMemory::of(compression, true, level, 1 << 20)
    }

    #[test]
    fn every_codec_is_charged_what_it_holds() {
        let snappy = parquet(OutputCompression::Snappy, 1);
        assert_eq!(
            (snappy.context, snappy.workspace),
            (SNAPPY_SMALL_TABLE, SNAPPY_BIG_TABLE)
        );
        let lz4 = parquet(OutputCompression::Lz4, 1);
        assert_eq!((lz4.context, lz4.workspace), (0, 0));
        assert!(lz4.scratch > LZ4_TABLE + (1 << 20), "{lz4:?}");
        let zstd_1 = parquet(OutputCompression::Zstd, 1);
        let zstd_3 = parquet(OutputCompression::Zstd, 3);
        // a new compression context and the decompression context beside it: 99 KiB
        assert!(zstd_1.context > 64 << 10, "{zstd_1:?}");
        // the level 1 workspace for a 1 MiB page: 564 KiB; level 3's 1.24 MiB
        assert!(zstd_1.workspace > 256 << 10, "{zstd_1:?}");
        assert!(
            zstd_3.workspace > 2 * zstd_1.workspace,
            "{zstd_1:?} {zstd_3:?}"
        );
        // smaller pages, smaller workspace
        let small = CodecMemory::of(OutputCompression::Zstd, true, 3, 16 << 10);
        assert!(small.workspace < zstd_3.workspace, "{small:?} {zstd_3:?}");
        for codec in [
            OutputCompression::Snappy,
            OutputCompression::Lz4,
            OutputCompression::Zstd,
        ] {
            assert!(parquet(codec, 1).scratch > 1 << 20, "{codec:?}");
            assert_eq!(
                CodecMemory::of(codec, false, 1, 1 << 20),
                CodecMemory::default(),
                "Arrow IPC: {codec:?}"
            );
        }
        assert_eq!(parquet(OutputCompression::None, 1), CodecMemory::default());
    }

    #[test]
    fn open_row_groups_hold_the_workspace_from_a_page_and_a_cut_all_of_it() {
        let zstd = parquet(OutputCompression::Zstd, 1);
        assert_eq!(zstd.open_row_group(16, 8192), 16 * zstd.context);
        assert_eq!(
            zstd.open_row_group(16, PAGE_ROWS),
            16 * (zstd.context + zstd.workspace)
        );
        assert_eq!(zstd.cut(16), 16 * zstd.workspace + zstd.scratch);
        let none = parquet(OutputCompression::None, 1);
        assert_eq!(none.open_row_group(16, 1 << 20) + none.cut(16), 0);
    }
}
