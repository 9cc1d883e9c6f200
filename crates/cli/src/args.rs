//! The command line: `shuffle` and `gen`, their flags, and the parsers for sizes.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Shuffle parquet or Arrow IPC files into hash partitions through an arrow-shards buffer.
///
/// Rows are hashed on the key columns and written as typed shards into a memory-first buffer
/// that spills to disk when it runs out of its memory limit; each partition is then read back
/// exactly once and written as one output file.
#[derive(Debug, Parser)]
#[command(name = "arrow-shards", version, about, long_about)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Hash-partition the rows of INPUT... on the key columns into N partitions.
    ///
    /// Reads the inputs on --threads threads (parquet row groups and files decode in
    /// parallel), hashes each row's key and writes each batch into the buffer split by
    /// partition (spilling beyond --memory-limit). At the same time --threads more threads take
    /// each partition's complete batches out of the buffer and append them to its file
    /// (DIR/part-00000.parquet ... one file per partition, empty partitions included; see
    /// --layout, --max-rows-per-file, --max-bytes-per-file), so output is written while the
    /// input is read; the rest after the input (with --sort-by, all of it after the input).
    /// Without --output the partitions are only read and counted: the benchmark mode.
    ///
    /// The partition of a row is a 64-bit hash of its key mod N: FNV-1a over a canonical
    /// little-endian encoding of each key value (integers widened to 64 bits; equal strings hash
    /// equally as Utf8, LargeUtf8, Utf8View or dictionary values), folded over the key columns
    /// with the MurmurHash3 finalizer. It is the same on every run and platform (see the
    /// `hash` module of arrow-shards-cli). Rows whose key columns are all null go to partition 0.
    Shuffle(Box<ShuffleArgs>),
    /// Generate test data.
    Gen(GenArgs),
}

/// Flags of `arrow-shards shuffle`.
#[derive(Debug, Args)]
pub(crate) struct ShuffleArgs {
    /// Parquet files, Arrow IPC files (file or stream format), or directories of them.
    ///
    /// A directory contributes its files ending in .parquet, .arrow, .arrows, .ipc or .feather
    /// (not hidden files), in name order, then those of its hive-style `key=value`
    /// subdirectories, recursively (other subdirectories are skipped); each such key becomes a
    /// Utf8 column holding the directory's value (`__HIVE_DEFAULT_PARTITION__` is null). All
    /// inputs must share a schema and the same keys.
    #[arg(required = true, value_name = "INPUT")]
    pub(crate) inputs: Vec<PathBuf>,

    /// Key columns, comma separated; rows with equal keys land in the same partition.
    #[arg(
        long,
        short,
        required = true,
        value_delimiter = ',',
        value_name = "COL[,COL...]"
    )]
    pub(crate) key: Vec<String>,

    /// Number of output partitions.
    #[arg(long, short, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) partitions: u32,

    /// Write one file per partition into DIR (created if missing; several per partition with
    /// a cap per file, in KEY=P directories with --layout hive).
    ///
    /// Files are written as DIR/.part-00000.parquet.tmp (.part-00000-0000.parquet.tmp when
    /// numbered) and renamed to their final names only once every partition is complete (and
    /// verified, with --verify); on failure or Ctrl-C (SIGINT, SIGTERM: exit status 130, 143)
    /// the temporary files are removed, and a run starts by removing the .part-*.tmp files a
    /// killed run left in DIR. An earlier run's output files (part-NNNNN[-FFFF].EXT in DIR,
    /// part-FFFF.EXT in DIR/KEY=N/, KEY the --hive-key) are replaced or removed; other files
    /// stay. An empty partition gets a valid file with no rows.
    #[arg(long, short, value_name = "DIR")]
    pub(crate) output: Option<PathBuf>,

    /// Memory the run may hold, e.g. 64MiB, 1GB, 500000 (bytes): a twelfth per --threads (at
    /// most half) is kept for input batches in flight and allocator caches, the buffer gets the
    /// rest (spilling its largest partitions from 80% of that). The output writers' open
    /// parquet row groups, their codecs' state included, are charged to the buffer's part
    /// too, at most half of it: beyond
    /// that row groups are cut early (never below 8,192 rows, a partition's last excepted)
    /// and what the writers cannot take stays in the buffer, which spills it. Default:
    /// unlimited (nothing is ever spilled).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) memory_limit: Option<u64>,

    /// Directory under which the buffer makes its private spill directory (removed at the
    /// end, also after a failure). Default: the system temp directory.
    #[arg(long, value_name = "DIR", conflicts_with = "no_spill")]
    pub(crate) spill_dir: Option<PathBuf>,

    /// An object store behind the local spill directory (`s3://bucket/prefix`; S3 or an
    /// S3-compatible server, credentials and endpoint from the environment as the object_store
    /// crate reads them: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    /// AWS_ENDPOINT_URL, AWS_ALLOW_HTTP). Spill runs go there when the local directory is full
    /// (ENOSPC, or --spill-quota). Acts only under --memory-limit.
    #[arg(long, value_name = "URL", conflicts_with = "no_spill")]
    pub(crate) spill_to: Option<String>,

    /// Most bytes of spill files in the local spill directory at once; runs past it go to
    /// --spill-to. 0 sends every run there. Default: as much as the filesystem holds.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "spill_to")]
    pub(crate) spill_quota: Option<u64>,

    /// Never spill: the whole input must fit in --memory-limit, or the run fails.
    #[arg(long)]
    pub(crate) no_spill: bool,

    /// Compression of spilled data (the buffer's spill files; see --compression for the output).
    /// Only segments of at least 1 MiB are compressed; smaller ones (many partitions under a
    /// small limit) are written as they are.
    #[arg(long, value_enum, value_name = "CODEC", default_value_t = CompressionArg::None)]
    pub(crate) spill_compression: CompressionArg,

    /// Compression of the output files. Default: snappy for parquet, none for Arrow IPC (which
    /// takes lz4 and zstd but not snappy).
    #[arg(long, value_enum, value_name = "CODEC")]
    pub(crate) compression: Option<OutputCompression>,

    /// Zstandard level of parquet output with --compression zstd, 1 (the default, fastest) to
    /// 22; Polars and DuckDB write level 3. Refused with any other codec, and with Arrow IPC
    /// output (whose writer has no level).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..=22))]
    pub(crate) compression_level: Option<i32>,

    /// Most rows per parquet row group (a partition with more rows gets several). Under
    /// --memory-limit a row group may be cut earlier, at 8,192 rows or more (or this value if
    /// smaller), when the writers hold their share of the limit.
    #[arg(long, value_name = "N", default_value_t = 1_048_576, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) row_group_rows: u32,

    /// Parquet column statistics (min, max, null count) to write: per page and column chunk,
    /// per column chunk only, or none.
    #[arg(long, value_enum, value_name = "WHICH", default_value_t = StatisticsArg::Page)]
    pub(crate) statistics: StatisticsArg,

    /// Most bytes of a parquet column chunk's dictionary: a column is dictionary encoded until
    /// its dictionary reaches SIZE, then the rest of its row group is written plain (so
    /// columns with few distinct values keep their dictionary, and the others stop building
    /// one early). `off` writes every column plain.
    #[arg(long, value_name = "SIZE|off", default_value = "1MiB", value_parser = parse_dictionary_limit)]
    pub(crate) dictionary_limit: u64,

    /// Writes a parquet column without a dictionary when more than RATIO of its non-null values
    /// in a sample of the input (the first batch decoded, up to 65,536 rows, at least 1,024
    /// values) are distinct: a dictionary of such a column costs time and rarely saves bytes.
    /// 1 keeps a dictionary on every column (up to --dictionary-limit).
    #[arg(long, value_name = "RATIO", default_value_t = crate::plain_columns::DEFAULT_RATIO, value_parser = parse_ratio)]
    pub(crate) dictionary_distinct_ratio: f64,

    /// Target bytes of a parquet data page before compression (a page also ends at 20,000
    /// rows).
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size)]
    pub(crate) data_page_size: u64,

    /// Rows per batch, for reading the inputs and for reading partitions back.
    #[arg(long, value_name = "N", default_value_t = 8192, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) batch_rows: u32,

    /// Rows at which the buffer's per-partition open batches are cut: smaller shards are
    /// copied into them (compaction on write). 0 keeps every shard as written.
    #[arg(long, value_name = "N", default_value_t = 8192)]
    pub(crate) compact_rows: u32,

    /// Sort each partition's rows by these columns, comma separated, each ascending with
    /// nulls last unless followed by modifiers: `:desc`, `:asc`, `:nulls_first`,
    /// `:nulls_last` (e.g. l_shipdate:desc,l_orderkey). Within --memory-limit: a partition
    /// larger than the output thread's part of the writers' share is sorted in runs written
    /// under the spill directory and merged. With it nothing is written while the input is
    /// read (a partition's first row is known only after its last). Default: rows in the
    /// order the buffer hands them over.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "COL[:MOD...][,...]",
        value_parser = crate::sort_key::parse_sort_column
    )]
    pub(crate) sort_by: Vec<crate::sort_key::SortColumn>,

    /// Format of the output files.
    #[arg(long, value_enum, default_value_t = FormatArg::Parquet)]
    pub(crate) format: FormatArg,

    /// How the output files are laid out in DIR: flat (DIR/part-00000.parquet ...) or hive
    /// (DIR/partition=0/part-0000.parquet ..., one `KEY=P` directory per partition P, as
    /// Polars' partition_by and DuckDB's PARTITION_BY write them; reading DIR back as input
    /// gives every row a Utf8 column KEY holding its partition number).
    #[arg(long, value_enum, value_name = "LAYOUT", default_value_t = LayoutArg::Flat)]
    pub(crate) layout: LayoutArg,

    /// The key of --layout hive's directories (DIR/KEY=P/); it must not be a column of the
    /// input, which would then hold it twice when read back.
    #[arg(long, value_name = "KEY", default_value = "partition", value_parser = parse_hive_key)]
    pub(crate) hive_key: String,

    /// Most rows per output file: a partition with more gets several files, each of N rows
    /// but its last unless --max-bytes-per-file completes it first (named part-00000-0000.parquet, part-00000-0001.parquet ...; with --layout hive
    /// part-0000.parquet, part-0001.parquet ... in its directory). Default: no limit.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_rows_per_file: Option<u64>,

    /// Approximate most bytes per output file, e.g. 128MiB: a file is completed, and the
    /// partition goes on in a new one, once its size reaches SIZE, checked after every 1,024
    /// rows or fewer appended (Arrow IPC: the bytes written; parquet: the bytes written plus
    /// the parquet writer's estimate of the open row group, so compressed files often end
    /// below SIZE and uncompressed ones above it). A file may pass SIZE by the encoding of up
    /// to 1,024 rows, its footer and, for parquet, what the estimate missed (docs/cli.md).
    /// Default: no limit.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) max_bytes_per_file: Option<u64>,

    /// Threads that decode and partition input batches; as many more write the output while
    /// the input is read. An output thread with no partition left to write helps the others
    /// encode their parquet columns (with --partitions below N from the start).
    /// Default: the number of cores.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) threads: Option<u32>,

    /// Print one JSON object with the figures of the run on stdout, instead of the table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Check that rows in == rows out and that every key sits in exactly one partition.
    #[arg(long)]
    pub(crate) verify: bool,

    /// No progress bar and no summary table (errors and --json still print).
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

/// `--spill-compression`: how the buffer compresses what it spills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CompressionArg {
    /// No compression.
    None,
    /// LZ4 frame compression (faster than none when the run spills much to a slow disk,
    /// slower on a fast one: docs/benchmarks.md).
    Lz4,
    /// Zstandard, level 1.
    Zstd,
}

/// `--compression`: the codec of the output files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputCompression {
    /// Snappy (parquet only; the parquet default).
    Snappy,
    /// Zstandard, level 1 unless --compression-level says otherwise.
    Zstd,
    /// LZ4 (parquet's LZ4_RAW; Arrow IPC's LZ4 frame).
    Lz4,
    /// No compression.
    None,
}

/// `--statistics`: which parquet column statistics are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StatisticsArg {
    /// Per page and per column chunk (parquet's default).
    Page,
    /// Per column chunk only.
    Chunk,
    /// None.
    None,
}

/// `--format`: the output file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FormatArg {
    /// Parquet (snappy compressed unless --compression says otherwise): DIR/part-00000.parquet.
    Parquet,
    /// Arrow IPC file format (uncompressed unless --compression): DIR/part-00000.arrow. A dictionary column must keep
    /// one dictionary per partition (the IPC file format cannot replace it); use arrow-stream or
    /// parquet for dictionaries that change from batch to batch.
    Arrow,
    /// Arrow IPC stream format (uncompressed unless --compression): DIR/part-00000.arrows. Allows any dictionaries.
    ArrowStream,
}

impl FormatArg {
    /// The file extension, without the dot.
    pub(crate) fn extension(self) -> &'static str {
        match self {
            FormatArg::Parquet => "parquet",
            FormatArg::Arrow => "arrow",
            FormatArg::ArrowStream => "arrows",
        }
    }
}

/// `--layout`: where the output files go in the output directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LayoutArg {
    /// All files in DIR: part-00000.parquet ... (part-00000-0000.parquet ... with a cap per
    /// file).
    Flat,
    /// One directory per partition, DIR/KEY=P/ (KEY from --hive-key, P the partition number
    /// without leading zeros), holding part-0000.parquet, part-0001.parquet ...
    Hive,
}

/// Flags of `arrow-shards gen`.
///
/// Each table takes its own size flag: `--scale` for lineitem, `--rows` for all-types.
/// [`GenArgs::size`] checks the pair and names the flag that is missing or does not apply.
#[derive(Debug, Args)]
pub(crate) struct GenArgs {
    /// The table to generate.
    #[arg(value_enum)]
    pub(crate) table: GenTable,

    /// TPC-H scale factor of lineitem (1 gives about 6 million rows). Required for lineitem,
    /// refused for all-types.
    #[arg(long, short, value_name = "SF", value_parser = parse_scale)]
    pub(crate) scale: Option<f64>,

    /// Rows of all-types. Refused for lineitem (its size is --scale). Default: 100000.
    #[arg(long, short, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) rows: Option<u64>,

    /// The parquet file to write (zstd compressed; written to a temporary name, then renamed).
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: PathBuf,
}

/// Rows of `gen all-types` without `--rows`.
pub(crate) const ALL_TYPES_DEFAULT_ROWS: u64 = 100_000;

/// How much of a table `gen` makes, checked against the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum GenSize {
    /// lineitem at a TPC-H scale factor.
    Lineitem {
        /// `--scale`.
        scale: f64,
    },
    /// all-types with a number of rows.
    AllTypes {
        /// `--rows`, or [`ALL_TYPES_DEFAULT_ROWS`].
        rows: u64,
    },
}

impl GenArgs {
    /// The table and its size, or a usage message naming the flag that is missing or that
    /// belongs to the other table.
    pub(crate) fn size(&self) -> Result<GenSize, String> {
        match (self.table, self.scale, self.rows) {
            (GenTable::Lineitem, Some(scale), None) => Ok(GenSize::Lineitem { scale }),
            (GenTable::Lineitem, None, None) => {
                Err("`gen lineitem` needs --scale SF (e.g. --scale 0.01)".to_owned())
            }
            (GenTable::Lineitem, _, Some(_)) => Err(
                "--rows applies to `gen all-types` only; the size of lineitem is set by --scale"
                    .to_owned(),
            ),
            (GenTable::AllTypes, None, rows) => Ok(GenSize::AllTypes {
                rows: rows.unwrap_or(ALL_TYPES_DEFAULT_ROWS),
            }),
            (GenTable::AllTypes, Some(_), _) => Err(
                "--scale applies to `gen lineitem` only; the size of all-types is set by --rows"
                    .to_owned(),
            ),
        }
    }
}

/// Tables `gen` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum GenTable {
    /// TPC-H lineitem, generated by tpchgen-arrow: Int64 keys, Decimal128, Date32, Utf8View.
    Lineitem,
    /// 13 columns of many Arrow types (nulls, NaN, dictionary, list, struct, decimal,
    /// timestamp with time zone, large strings up to 300 bytes), seeded: row i is the same at
    /// any --rows. Row groups of 14300 rows.
    AllTypes,
}

/// Parses a human size such as `64MiB`, `1GB`, `1.5 GiB` or `4096` (bytes) with bytesize.
///
/// `KB`, `MB`, `GB` are powers of 1000; `KiB`, `MiB`, `GiB` powers of 1024. Zero is refused:
/// a buffer that may hold nothing cannot make progress.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty size; expected e.g. 64MiB or 1GB".to_owned());
    }
    let size: bytesize::ByteSize = trimmed
        .parse()
        .map_err(|e| format!("not a size ({e}); expected e.g. 64MiB or 1GB"))?;
    if size.as_u64() == 0 {
        return Err("the size must be greater than zero".to_owned());
    }
    Ok(size.as_u64())
}

/// A `--dictionary-distinct-ratio`: a number from 0 to 1.
pub(crate) fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("{text:?} is not a ratio from 0 to 1 (e.g. 0.5)")),
    }
}

/// A `--dictionary-limit`: a size, or `off` (0: no dictionary encoding).
pub(crate) fn parse_dictionary_limit(text: &str) -> Result<u64, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(0);
    }
    parse_size(text).map_err(|e| format!("{e}, or off"))
}

/// Checks a `--hive-key`: a directory name's key, so not empty, without `/`, `=` or `%`
/// (which a hive reader would decode) and not hidden.
pub(crate) fn parse_hive_key(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("the hive key must not be empty".to_owned());
    }
    if let Some(bad) = text.chars().find(|c| matches!(c, '/' | '\\' | '=' | '%')) {
        return Err(format!("the hive key must not hold {bad:?}"));
    }
    if text.starts_with('.') {
        return Err(
            "the hive key must not start with '.' (readers skip hidden directories)".to_owned(),
        );
    }
    Ok(text.to_owned())
}

fn parse_scale(text: &str) -> Result<f64, String> {
    let scale: f64 = text
        .trim()
        .parse()
        .map_err(|e| format!("not a number ({e})"))?;
    if !(scale.is_finite() && scale > 0.0) {
        return Err("the scale factor must be a positive number".to_owned());
    }
    Ok(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_binary_and_decimal_units() {
        assert_eq!(parse_size("64MiB"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 2kb "), Ok(2000));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for bad in ["", "  ", "lots", "12XB", "-5MiB", "0", "0MiB", "MiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn hive_keys_must_make_a_directory_name() {
        assert_eq!(parse_hive_key("part"), Ok("part".to_owned()));
        for bad in ["", "a/b", "a=b", "a%2F", ".p", "a\\b"] {
            assert!(parse_hive_key(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn scale_must_be_positive() {
        assert_eq!(parse_scale("0.01"), Ok(0.01));
        assert!(parse_scale("0").is_err());
        assert!(parse_scale("-1").is_err());
        assert!(parse_scale("nan").is_err());
        assert!(parse_scale("x").is_err());
    }

    fn gen_args(line: &str) -> Result<GenSize, String> {
        let cli = Cli::try_parse_from(line.split_whitespace()).map_err(|e| e.to_string())?;
        match cli.command {
            Command::Gen(args) => args.size(),
            Command::Shuffle(_) => unreachable!("not a gen line: {line}"),
        }
    }

    #[test]
    fn each_table_takes_its_own_size_flag() {
        assert_eq!(
            gen_args("a gen lineitem --scale 0.5 -o x"),
            Ok(GenSize::Lineitem { scale: 0.5 })
        );
        assert_eq!(
            gen_args("a gen all-types --rows 7 -o x"),
            Ok(GenSize::AllTypes { rows: 7 })
        );
        assert_eq!(
            gen_args("a gen all-types -o x"),
            Ok(GenSize::AllTypes {
                rows: ALL_TYPES_DEFAULT_ROWS
            })
        );
        let missing = gen_args("a gen lineitem -o x").unwrap_err();
        assert!(missing.contains("needs --scale"), "{missing}");
        let rows = gen_args("a gen lineitem --scale 1 --rows 5 -o x").unwrap_err();
        assert!(
            rows.starts_with("--rows applies to `gen all-types` only"),
            "{rows}"
        );
        let scale = gen_args("a gen all-types --scale 1 -o x").unwrap_err();
        assert!(
            scale.starts_with("--scale applies to `gen lineitem` only"),
            "{scale}"
        );
        assert!(gen_args("a gen all-types --rows 0 -o x").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
