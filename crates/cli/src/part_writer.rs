//! Writing one output file: the output options (`--format`, `--compression`,
//! `--compression-level`, `--row-group-rows`, `--statistics`) turned into a parquet or Arrow
//! IPC writer.
//!
//! Parquet is snappy compressed by default, with row groups of at most 1,048,576 rows (the
//! parquet crate's default), statistics per page and column chunk, dictionaries of at most
//! `--dictionary-limit` bytes per column chunk (1 MiB, the parquet crate's default; `off`: all
//! plain) and data pages of `--data-page-size` bytes (1 MiB, the crate's default), except that
//! columns whose sampled values are mostly distinct are written plain
//! ([`crate::plain_columns`]): docs/benchmarks.md has these measured against Polars' writer.
//! Arrow IPC output is uncompressed by default and takes lz4 or zstd (its format has no
//! snappy).
//!
//! Parquet files are written by [`ParquetFile`]: the parquet crate's `ArrowWriter` taken apart,
//! so that a row group's columns can be encoded on output threads with nothing else to do
//! ([`crate::parquet_file`]); the bytes are `ArrowWriter`'s either way.
//!
//! In flight per writer: parquet encodes a row group in memory before writing it, so each open
//! writer holds up to one encoded row group (at most `--row-group-rows` rows, compressed) plus
//! its page buffers and its columns' codecs ([`PartitionWriter::memory_size`],
//! [`crate::codec_memory`]); the output threads charge it to the run's budget and cut a row
//! group early under memory pressure
//! ([`PartitionWriter::cut_row_group`], see [`crate::read_back`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
use arrow_schema::Schema;
use parquet::arrow::ArrowSchemaConverter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::args::{FormatArg, LayoutArg, OutputCompression, ShuffleArgs, StatisticsArg};
use crate::codec_memory::CodecMemory;
use crate::error::CliError;
use crate::file_names::FileNames;
use crate::parquet_file::ParquetFile;
use crate::spare_threads::SpareThreads;

/// Rows appended between two checks of a file's size against `--max-bytes-per-file`
/// ([`crate::part_files`] says what the caps guarantee).
pub(crate) const BYTES_CHECK_ROWS: usize = 1024;

/// The most rows and bytes per output file; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FileCaps {
    /// `--max-rows-per-file` (at least 1).
    pub(crate) rows: Option<u64>,
    /// `--max-bytes-per-file` (at least 1).
    pub(crate) bytes: Option<u64>,
}

impl FileCaps {
    /// Whether a partition may span several files.
    pub(crate) fn any(&self) -> bool {
        self.rows.is_some() || self.bytes.is_some()
    }

    /// Rows that may go into `writer` before the next check: up to the rows cap, and at most
    /// [`BYTES_CHECK_ROWS`] under a bytes cap.
    pub(crate) fn room(&self, writer: &PartitionWriter) -> usize {
        let rows = self.rows.map_or(usize::MAX, |cap| {
            usize::try_from(cap.saturating_sub(writer.rows())).unwrap_or(usize::MAX)
        });
        match self.bytes {
            Some(_) => rows.min(BYTES_CHECK_ROWS),
            None => rows,
        }
    }

    /// Whether `writer`'s file is full.
    pub(crate) fn full(&self, writer: &PartitionWriter) -> bool {
        self.rows.is_some_and(|cap| writer.rows() >= cap)
            || self.bytes.is_some_and(|cap| writer.size() >= cap)
    }
}

/// How every output file is written.
#[derive(Debug, Clone)]
pub(crate) struct OutputOptions {
    /// The file format.
    pub(crate) format: FormatArg,
    /// The codec (already checked to suit the format).
    pub(crate) compression: OutputCompression,
    /// `--compression-level` of parquet zstd (1 to 22; 1 by default).
    pub(crate) zstd_level: i32,
    /// What the codec of each parquet column writer holds.
    pub(crate) codec: CodecMemory,
    /// Most rows per parquet row group.
    pub(crate) row_group_rows: usize,
    /// Parquet statistics.
    pub(crate) statistics: StatisticsArg,
    /// Most bytes of a parquet column chunk's dictionary, 0 for none.
    pub(crate) dictionary_limit: usize,
    /// Target bytes of a parquet data page.
    pub(crate) data_page_size: usize,
    /// `--dictionary-distinct-ratio` ([`crate::plain_columns`]).
    pub(crate) dictionary_distinct_ratio: f64,
    /// Where the files go in the output directory.
    pub(crate) layout: LayoutArg,
    /// The key of `--layout hive`'s directories.
    pub(crate) hive_key: String,
    /// The most rows and bytes per file.
    pub(crate) caps: FileCaps,
}

impl OutputOptions {
    /// The options of `args`, or why they do not go together (a usage error).
    pub(crate) fn from_args(args: &ShuffleArgs) -> Result<Self, String> {
        let compression = match (args.format, args.compression) {
            (FormatArg::Parquet, None) => OutputCompression::Snappy,
            (_, None) => OutputCompression::None,
            (FormatArg::Arrow | FormatArg::ArrowStream, Some(OutputCompression::Snappy)) => {
                return Err(
                    "--compression snappy is for parquet output; Arrow IPC takes lz4, zstd or none"
                        .to_owned(),
                );
            }
            (_, Some(codec)) => codec,
        };
        let zstd_level = match (args.compression_level, compression, args.format) {
            (None, _, _) => 1,
            (Some(level), OutputCompression::Zstd, FormatArg::Parquet) => level,
            (Some(_), OutputCompression::Zstd, _) => {
                return Err(
                    "--compression-level is for parquet output; the Arrow IPC writer has no level"
                        .to_owned(),
                );
            }
            (Some(_), _, _) => {
                return Err("--compression-level is for --compression zstd".to_owned());
            }
        };
        let page_bytes = args.data_page_size.max(args.dictionary_limit);
        Ok(OutputOptions {
            format: args.format,
            compression,
            zstd_level,
            codec: CodecMemory::of(
                compression,
                args.format == FormatArg::Parquet,
                zstd_level,
                usize::try_from(page_bytes).unwrap_or(usize::MAX),
            ),
            row_group_rows: args.row_group_rows as usize,
            statistics: args.statistics,
            dictionary_limit: usize::try_from(args.dictionary_limit).unwrap_or(usize::MAX),
            data_page_size: usize::try_from(args.data_page_size).unwrap_or(usize::MAX),
            dictionary_distinct_ratio: args.dictionary_distinct_ratio,
            layout: args.layout,
            hive_key: args.hive_key.clone(),
            caps: FileCaps {
                rows: args.max_rows_per_file,
                bytes: args.max_bytes_per_file,
            },
        })
    }

    /// How the files are named.
    pub(crate) fn file_names(&self) -> FileNames {
        FileNames::new(self.layout, &self.hive_key, self.format, self.caps.any())
    }

    /// The parquet writer's properties; the columns named in `plain` without a dictionary.
    fn parquet_properties(&self, plain: &[String]) -> WriterProperties {
        let compression = match self.compression {
            OutputCompression::Snappy => Compression::SNAPPY,
            // the flag's range (1 to 22) is zstd's; level 1 is the default
            OutputCompression::Zstd => {
                Compression::ZSTD(ZstdLevel::try_new(self.zstd_level).unwrap_or_default())
            }
            OutputCompression::Lz4 => Compression::LZ4_RAW,
            OutputCompression::None => Compression::UNCOMPRESSED,
        };
        let statistics = match self.statistics {
            StatisticsArg::Page => EnabledStatistics::Page,
            StatisticsArg::Chunk => EnabledStatistics::Chunk,
            StatisticsArg::None => EnabledStatistics::None,
        };
        let builder = WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(self.row_group_rows.max(1)))
            .set_statistics_enabled(statistics)
            .set_dictionary_enabled(self.dictionary_limit > 0)
            .set_dictionary_page_size_limit(self.dictionary_limit.max(1))
            .set_data_page_size_limit(self.data_page_size.max(1));
        plain
            .iter()
            .fold(builder, |builder, name| {
                builder.set_column_dictionary_enabled(ColumnPath::from(name.as_str()), false)
            })
            .build()
    }

    fn ipc_options(&self) -> Result<IpcWriteOptions, arrow_schema::ArrowError> {
        let codec = match self.compression {
            OutputCompression::Zstd => Some(CompressionType::ZSTD),
            OutputCompression::Lz4 => Some(CompressionType::LZ4_FRAME),
            OutputCompression::None | OutputCompression::Snappy => None,
        };
        IpcWriteOptions::default().try_with_compression(codec)
    }

    /// A writer of a new file at `path`; parquet columns named in `plain` without a
    /// dictionary, encoded with the threads `spare` lends ([`crate::parquet_file`]).
    pub(crate) fn writer(
        &self,
        path: PathBuf,
        schema: &Schema,
        plain: &[String],
        spare: &Arc<SpareThreads>,
    ) -> Result<PartitionWriter, CliError> {
        let file = File::create(&path).map_err(|e| CliError::output(&path, e))?;
        let fail = |e| CliError::output(&path, e);
        let inner = match self.format {
            FormatArg::Parquet => {
                let props = self.parquet_properties(plain);
                let writer =
                    ParquetFile::try_new(file, schema.clone().into(), props, Arc::clone(spare))
                        .map_err(|e| CliError::output(&path, e))?;
                Inner::Parquet(Box::new(writer))
            }
            FormatArg::Arrow => Inner::Arrow(Box::new(
                self.ipc_options()
                    .and_then(|o| FileWriter::try_new_with_options(Counted::new(file), schema, o))
                    .map_err(fail)?,
            )),
            FormatArg::ArrowStream => Inner::ArrowStream(Box::new(
                self.ipc_options()
                    .and_then(|o| StreamWriter::try_new_with_options(Counted::new(file), schema, o))
                    .map_err(fail)?,
            )),
        };
        Ok(PartitionWriter {
            path,
            inner,
            rows: 0,
            codec: self.codec,
            columns: leaf_columns(schema),
        })
    }
}

/// The parquet leaf columns of `schema` (a column writer, and a codec, each); for a schema
/// parquet cannot take (the writer then fails to open), its top-level fields.
pub(crate) fn leaf_columns(schema: &Schema) -> usize {
    ArrowSchemaConverter::new()
        .convert(schema)
        .map_or(schema.fields().len(), |descriptor| descriptor.num_columns())
}

enum Inner {
    Parquet(Box<ParquetFile>),
    Arrow(Box<FileWriter<Counted>>),
    ArrowStream(Box<StreamWriter<Counted>>),
}

/// A buffered file that counts the bytes written to it.
struct Counted {
    file: BufWriter<File>,
    bytes: u64,
}

impl Counted {
    fn new(file: File) -> Self {
        Counted {
            file: BufWriter::new(file),
            bytes: 0,
        }
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Writes one partition's file: create, `write` batches, `finish`.
pub(crate) struct PartitionWriter {
    path: PathBuf,
    inner: Inner,
    rows: u64,
    /// What each column's codec holds, and how many columns there are.
    codec: CodecMemory,
    columns: usize,
}

impl PartitionWriter {
    /// Appends `batch`.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), CliError> {
        let result = match &mut self.inner {
            Inner::Parquet(w) => w.write(batch).map_err(|e| CliError::output(&self.path, e)),
            Inner::Arrow(w) => w.write(batch).map_err(|e| {
                if e.to_string().contains("Dictionary replacement") {
                    CliError::DictionaryReplaced {
                        path: self.path.clone(),
                    }
                } else {
                    CliError::output(&self.path, e)
                }
            }),
            Inner::ArrowStream(w) => w.write(batch).map_err(|e| CliError::output(&self.path, e)),
        };
        self.rows += batch.num_rows() as u64;
        result
    }

    /// Rows written so far.
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// The file's size so far: for parquet the bytes written plus the parquet writer's
    /// estimate of the open row group once encoded ([`ParquetFile::in_progress_size`]); for
    /// Arrow IPC the bytes written (each batch is written as it comes). Without the footer.
    pub(crate) fn size(&self) -> u64 {
        match &self.inner {
            Inner::Parquet(w) => (w.bytes_written() + w.in_progress_size()) as u64,
            Inner::Arrow(w) => w.get_ref().bytes,
            Inner::ArrowStream(w) => w.get_ref().bytes,
        }
    }

    /// Rows in the open parquet row group (0 for Arrow IPC, which has none).
    pub(crate) fn open_rows(&self) -> usize {
        match &self.inner {
            Inner::Parquet(w) => w.in_progress_rows(),
            Inner::Arrow(_) | Inner::ArrowStream(_) => 0,
        }
    }

    /// Bytes this writer holds in memory: parquet's open row group (its encoded pages, the
    /// open page and dictionary of each column, as the parquet crate counts them) and its
    /// columns' codecs ([`CodecMemory::open_row_group`]); Arrow IPC writes each batch as it
    /// comes and holds only its small write buffer, counted as 0.
    pub(crate) fn memory_size(&self) -> usize {
        match &self.inner {
            Inner::Parquet(w) => match w.in_progress_rows() {
                0 => w.memory_size(),
                rows => w.memory_size() + self.codec.open_row_group(self.columns, rows),
            },
            Inner::Arrow(_) | Inner::ArrowStream(_) => 0,
        }
    }

    /// Cuts the open parquet row group: writes it to the file, freeing what it held.
    pub(crate) fn cut_row_group(&mut self) -> Result<(), CliError> {
        match &mut self.inner {
            Inner::Parquet(w) => w.flush().map_err(|e| CliError::output(&self.path, e)),
            Inner::Arrow(_) | Inner::ArrowStream(_) => Ok(()),
        }
    }

    /// Writes the footer and flushes; returns the rows written.
    pub(crate) fn finish(self) -> Result<u64, CliError> {
        let path = self.path;
        let fail = |e| CliError::output(&path, e);
        match self.inner {
            Inner::Parquet(w) => {
                w.close().map_err(|e| CliError::output(&path, e))?;
            }
            Inner::Arrow(w) => flush(w.into_inner().map_err(fail)?.file, &path)?,
            Inner::ArrowStream(w) => flush(w.into_inner().map_err(fail)?.file, &path)?,
        }
        Ok(self.rows)
    }
}

fn flush(mut buffered: BufWriter<File>, path: &Path) -> Result<(), CliError> {
    buffered.flush().map_err(|e| CliError::output(path, e))
}

/// Options of a test's parquet writer: `compression` (zstd at `zstd_level`), row groups up to
/// 1,048,576 rows, the other flags' defaults, flat layout, no caps.
#[cfg(test)]
pub(crate) fn test_options(compression: OutputCompression, zstd_level: i32) -> OutputOptions {
    OutputOptions {
        format: FormatArg::Parquet,
        compression,
        zstd_level,
        codec: CodecMemory::of(compression, true, zstd_level, 1 << 20),
        row_group_rows: 1 << 20,
        statistics: StatisticsArg::Page,
        dictionary_limit: 1 << 20,
        data_page_size: 1 << 20,
        dictionary_distinct_ratio: crate::plain_columns::DEFAULT_RATIO,
        layout: LayoutArg::Flat,
        hive_key: "partition".to_owned(),
        caps: FileCaps::default(),
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{ArrayRef, Int64Array, StringArray};

    use super::*;
    use crate::codec_memory::PAGE_ROWS;

    fn options(compression: OutputCompression, zstd_level: i32) -> OutputOptions {
        test_options(compression, zstd_level)
    }

    fn batch(rows: usize) -> RecordBatch {
        let numbers: ArrayRef = Arc::new(Int64Array::from_iter_values(
            (0..rows as i64).map(|i| i * 7),
        ));
        let words: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("row {i} of the batch")),
        ));
        RecordBatch::try_from_iter([("n", numbers), ("w", words)]).unwrap()
    }

    /// An open row group is charged its two columns' codecs beside what the parquet crate
    /// counts (before a page is complete the parquet part is the same for every codec); from
    /// a page's worth of rows their workspaces too; after the cut nothing.
    #[test]
    fn open_row_groups_are_charged_their_codecs() {
        let dir = tempfile::tempdir().unwrap();
        let small = batch(100);
        let schema = small.schema();
        assert_eq!(leaf_columns(&schema), 2);
        let open = |compression, level, rows: usize| {
            let options = options(compression, level);
            let path = dir
                .path()
                .join(format!("{compression:?}-{level}-{rows}.parquet"));
            let mut writer = options.writer(path, &schema, &[], &Arc::default()).unwrap();
            writer.write(&batch(rows)).unwrap();
            (options.codec, writer)
        };
        let (_, none) = open(OutputCompression::None, 1, 100);
        let plain = none.memory_size();
        assert!(plain > 0);
        for (compression, level) in [
            (OutputCompression::Snappy, 1),
            (OutputCompression::Lz4, 1),
            (OutputCompression::Zstd, 1),
            (OutputCompression::Zstd, 3),
        ] {
            let (codec, mut writer) = open(compression, level, 100);
            assert_eq!(
                writer.memory_size(),
                plain + 2 * codec.context,
                "{compression:?} {level}"
            );
            writer.cut_row_group().unwrap();
            assert_eq!(writer.memory_size(), 0, "{compression:?} {level}");
            writer.finish().unwrap();

            let (codec, writer) = open(compression, level, PAGE_ROWS);
            assert!(
                writer.memory_size() >= 2 * (codec.context + codec.workspace),
                "{compression:?} {level}"
            );
            writer.finish().unwrap();
        }
        let zstd = options(OutputCompression::Zstd, 1).codec;
        assert!(zstd.context > 0 && zstd.workspace > 0, "{zstd:?}");
        none.finish().unwrap();
    }
}
