//! The inputs: finding the files, checking they share a schema, and reading them in batches of
//! at most `--batch-rows` rows (a file is never held in memory whole).
//!
//! The inputs are split into **units** a thread decodes alone: each row group of a parquet file
//! (its footer read once, when the file is recognised) and each Arrow IPC file whole. Every
//! input thread has its own [`BatchStream`], which claims the next unit from a shared counter
//! when its current one ends, so row groups of one file and several files decode on every
//! thread at once (one stream behind a mutex would decode one batch at a time for all
//! threads). Rows of different units thus reach the buffer in no fixed order; within a unit they
//! keep theirs.
//!
//! A file's format is recognised by its first bytes: `PAR1` is parquet, `ARROW1` an Arrow IPC
//! file; anything else is tried as an Arrow IPC stream. The extension does not matter for a file
//! named on the command line; in a directory, only files ending in .parquet, .arrow, .arrows,
//! .ipc or .feather are taken (hidden files, such as our own `.part-*.tmp`, are skipped), and
//! those of its `key=value` subdirectories, whose keys become columns ([`crate::hive`]).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};
use arrow_shards_memory::sizing::batch_memory_size;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};

use crate::error::CliError;
use crate::hive::{self, HiveValues};

/// Extensions a directory's files must have to be read.
const INPUT_EXTENSIONS: [&str; 5] = ["parquet", "arrow", "arrows", "ipc", "feather"];

/// How an input file is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Parquet.
    Parquet,
    /// Arrow IPC file format (`ARROW1` ... footer).
    ArrowFile,
    /// Arrow IPC stream format.
    ArrowStream,
}

/// One input file, recognised and with its schema read.
#[derive(Debug, Clone)]
pub(crate) struct InputFile {
    /// Where it is.
    pub(crate) path: PathBuf,
    /// How it is encoded.
    pub(crate) format: Format,
    /// Its row count, when the format states it up front (parquet).
    pub(crate) rows: Option<u64>,
    /// A parquet file's footer, read once and shared by every thread decoding its row groups.
    metadata: Option<ArrowReaderMetadata>,
    /// Its hive partition values (`key=value` directories), added to its rows as columns.
    hive: HiveValues,
}

/// All inputs, in order, and the schema they share.
#[derive(Debug)]
pub(crate) struct Inputs {
    /// The files, in command-line order, each directory's files in name order.
    pub(crate) files: Vec<InputFile>,
    /// The shared schema: the first file's fields, nullable where any file's is, no metadata.
    pub(crate) schema: SchemaRef,
}

impl Inputs {
    /// Finds and recognises the files named by `paths`, and checks their schemas agree.
    pub(crate) fn open(paths: &[PathBuf]) -> Result<Self, CliError> {
        let mut files = Vec::new();
        let mut schemas = Vec::new();
        for (path, hive) in expand(paths)? {
            let (mut file, schema) = recognise(&path)?;
            file.hive = hive;
            files.push(file);
            schemas.push(schema);
        }
        let schema = shared_schema(&files, &schemas)?;
        Ok(Inputs { files, schema })
    }

    /// The total row count, when every file states it.
    pub(crate) fn total_rows(&self) -> Option<u64> {
        self.files.iter().map(|f| f.rows).sum()
    }

    /// The units of all files, for threads to share: each thread reads them with a
    /// [`BatchStream`] of its own ([`Units::stream`]), in batches of at most `batch_rows` rows.
    pub(crate) fn units(&self, batch_rows: usize) -> Units {
        let mut units = Vec::new();
        for (file, input) in self.files.iter().enumerate() {
            match &input.metadata {
                Some(metadata) => {
                    units.extend((0..metadata.metadata().num_row_groups()).map(|g| Unit {
                        file,
                        row_group: Some(g),
                    }))
                }
                None => units.push(Unit {
                    file,
                    row_group: None,
                }),
            }
        }
        Units {
            files: self.files.clone(),
            units,
            next: AtomicUsize::new(0),
            schema: self.schema.clone(),
            batch_rows: batch_rows.max(1),
        }
    }
}

/// One piece of input a thread decodes alone: a parquet row group, or an Arrow IPC file.
#[derive(Debug, Clone, Copy)]
struct Unit {
    /// Index into the files.
    file: usize,
    /// The row group, for parquet.
    row_group: Option<usize>,
}

/// The units of every input, claimed one at a time by the threads' [`BatchStream`]s.
///
/// # Locking
/// No locks: the next unit is an atomic counter.
#[derive(Debug)]
pub(crate) struct Units {
    files: Vec<InputFile>,
    units: Vec<Unit>,
    next: AtomicUsize,
    schema: SchemaRef,
    batch_rows: usize,
}

impl Units {
    /// A thread's reader of the units it claims.
    pub(crate) fn stream(&self) -> BatchStream<'_> {
        BatchStream {
            units: self,
            current: None,
            pending: None,
            stats: ReadStats::default(),
        }
    }

    /// The next unclaimed unit.
    fn claim(&self) -> Option<Unit> {
        self.units
            .get(self.next.fetch_add(1, Ordering::Relaxed))
            .copied()
    }
}

/// Directories replaced by their input files (with their hive values); plain paths checked to
/// exist.
fn expand(paths: &[PathBuf]) -> Result<Vec<(PathBuf, HiveValues)>, CliError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(unreadable(path))?;
        if !meta.is_dir() {
            out.push((path.clone(), HiveValues::new()));
            continue;
        }
        let before = out.len();
        walk(path, &HiveValues::new(), &mut out)?;
        if out.len() == before {
            return Err(CliError::EmptyDirectory { path: path.clone() });
        }
    }
    Ok(out)
}

fn unreadable(path: &Path) -> impl Fn(std::io::Error) -> CliError + use<> {
    let path = path.to_owned();
    move |source| CliError::InputUnreadable {
        path: path.clone(),
        source,
    }
}

/// The input files of `dir` in name order, then those of its `key=value` subdirectories in
/// name order, each with `values` and its own directories' values.
fn walk(
    dir: &Path,
    values: &HiveValues,
    out: &mut Vec<(PathBuf, HiveValues)>,
) -> Result<(), CliError> {
    let mut found = Vec::new();
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable(dir))? {
        let entry = entry.map_err(unreadable(dir))?;
        let entry_path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        if entry_path.is_dir() {
            if let Some(segment) = hive::parse_segment(&name) {
                subdirs.push((entry_path, segment));
            }
            continue;
        }
        let wanted = entry_path
            .extension()
            .is_some_and(|e| INPUT_EXTENSIONS.iter().any(|w| e.eq_ignore_ascii_case(w)))
            && entry_path.is_file();
        if wanted {
            found.push(entry_path);
        }
    }
    found.sort();
    out.extend(found.into_iter().map(|f| (f, values.clone())));
    subdirs.sort();
    for (subdir, segment) in subdirs {
        let mut inner = values.clone();
        inner.push(segment);
        walk(&subdir, &inner, out)?;
    }
    Ok(())
}

/// Recognises the format of `path` by its first bytes and reads its schema.
fn recognise(path: &Path) -> Result<(InputFile, SchemaRef), CliError> {
    let unreadable = |source| CliError::InputUnreadable {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(unreadable)?;
    let mut magic = [0u8; 6];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..]).map_err(unreadable)? {
            0 => break,
            n => got += n,
        }
    }
    let file = File::open(path).map_err(unreadable)?;
    let magic = &magic[..got];
    let input = |format, rows| InputFile {
        path: path.to_owned(),
        format,
        rows,
        metadata: None,
        hive: HiveValues::new(),
    };
    if magic.starts_with(b"PAR1") {
        let metadata = ArrowReaderMetadata::load(&file, ArrowReaderOptions::default())
            .map_err(|e| CliError::decode(path, e))?;
        let rows = u64::try_from(metadata.metadata().file_metadata().num_rows()).ok();
        let schema = metadata.schema().clone();
        let parquet = InputFile {
            metadata: Some(metadata),
            ..input(Format::Parquet, rows)
        };
        return Ok((parquet, schema));
    }
    if magic == b"ARROW1" {
        let reader = FileReader::try_new(BufReader::new(file), None)
            .map_err(|e| CliError::decode(path, e))?;
        return Ok((input(Format::ArrowFile, None), reader.schema()));
    }
    if magic.is_empty() {
        return Err(CliError::NotArrowData {
            path: path.to_owned(),
            reason: "the file is empty".into(),
        });
    }
    // The stream decoder's own message ("expected 1936287860 metadata bytes") would only confuse.
    match StreamReader::try_new(BufReader::new(file), None) {
        Ok(reader) => Ok((input(Format::ArrowStream, None), reader.schema())),
        Err(_) => Err(CliError::NotArrowData {
            path: path.to_owned(),
            reason: "it has neither magic bytes and does not decode as an Arrow stream".into(),
        }),
    }
}

/// The schema all files share, or the first difference.
fn shared_schema(files: &[InputFile], schemas: &[SchemaRef]) -> Result<SchemaRef, CliError> {
    let (Some(first), Some(first_file)) = (schemas.first(), files.first()) else {
        // clap requires at least one input and empty directories are refused
        return Err(CliError::Internal("no input files".into()));
    };
    let mut fields: Vec<Field> = first
        .fields()
        .iter()
        .map(|f| {
            f.as_ref()
                .clone()
                .with_metadata(std::collections::HashMap::new())
        })
        .collect();
    for (file, schema) in files.iter().zip(schemas).skip(1) {
        let mismatch = |detail: String| CliError::SchemaMismatch {
            path: file.path.clone(),
            first: first_file.path.clone(),
            detail,
        };
        if schema.fields().len() != fields.len() {
            return Err(mismatch(format!(
                "{} columns instead of {}",
                schema.fields().len(),
                fields.len()
            )));
        }
        for (index, (ours, theirs)) in fields.iter_mut().zip(schema.fields()).enumerate() {
            if ours.name() != theirs.name() || ours.data_type() != theirs.data_type() {
                return Err(mismatch(format!(
                    "column {index} is {}: {} instead of {}: {}",
                    theirs.name(),
                    theirs.data_type(),
                    ours.name(),
                    ours.data_type()
                )));
            }
            if theirs.is_nullable() && !ours.is_nullable() {
                ours.set_nullable(true);
            }
        }
    }
    let keys: Vec<&str> = first_file.hive.iter().map(|(k, _)| k.as_str()).collect();
    for file in files {
        let theirs: Vec<&str> = file.hive.iter().map(|(k, _)| k.as_str()).collect();
        if theirs != keys {
            return Err(CliError::SchemaMismatch {
                path: file.path.clone(),
                first: first_file.path.clone(),
                detail: format!(
                    "its key=value directories name [{}] instead of [{}]",
                    theirs.join(", "),
                    keys.join(", ")
                ),
            });
        }
    }
    for key in keys {
        if fields.iter().any(|f| f.name() == key) {
            return Err(CliError::SchemaMismatch {
                path: first_file.path.clone(),
                first: first_file.path.clone(),
                detail: format!("its directory key {key} is also one of its columns"),
            });
        }
        fields.push(Field::new(key, arrow_schema::DataType::Utf8, true));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// What reading the inputs has cost so far (one thread's, or the sum of all threads').
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReadStats {
    /// Rows handed out.
    pub(crate) rows: u64,
    /// Arrow in-memory bytes of the decoded batches (each decoded batch counted once, by
    /// distinct allocation, however it is sliced).
    pub(crate) bytes: u64,
    /// Time spent opening and decoding.
    pub(crate) time: Duration,
}

impl ReadStats {
    /// The sum of two threads' figures.
    pub(crate) fn add(self, other: ReadStats) -> ReadStats {
        ReadStats {
            rows: self.rows + other.rows,
            bytes: self.bytes + other.bytes,
            time: self.time + other.time,
        }
    }
}

type BatchIter = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

/// One thread's batches: the units it claims, each read in order, sliced to at most
/// `batch_rows` rows, each with the shared schema.
pub(crate) struct BatchStream<'a> {
    units: &'a Units,
    current: Option<(&'a InputFile, BatchIter)>,
    /// The rest of a decoded batch larger than `batch_rows`.
    pending: Option<RecordBatch>,
    stats: ReadStats,
}

impl BatchStream<'_> {
    /// The next batch, or `None` at the end of the last input.
    pub(crate) fn next_batch(&mut self) -> Result<Option<RecordBatch>, CliError> {
        let started = Instant::now();
        let result = self.next_inner();
        self.stats.time += started.elapsed();
        if let Ok(Some(batch)) = &result {
            self.stats.rows += batch.num_rows() as u64;
        }
        result
    }

    /// What reading has cost so far.
    pub(crate) fn stats(&self) -> ReadStats {
        self.stats
    }

    fn next_inner(&mut self) -> Result<Option<RecordBatch>, CliError> {
        let batch_rows = self.units.batch_rows;
        loop {
            if let Some(batch) = self.pending.take() {
                if batch.num_rows() > batch_rows {
                    self.pending = Some(batch.slice(batch_rows, batch.num_rows() - batch_rows));
                    return Ok(Some(batch.slice(0, batch_rows)));
                }
                return Ok(Some(batch));
            }
            if self.current.is_none() {
                let Some(unit) = self.units.claim() else {
                    return Ok(None);
                };
                let file = &self.units.files[unit.file];
                let batches = open_batches(file, unit.row_group, batch_rows)?;
                self.current = Some((file, batches));
            }
            let Some((file, batches)) = self.current.as_mut() else {
                continue;
            };
            let file: &InputFile = file;
            let path = &file.path;
            match batches.next() {
                None => self.current = None,
                Some(Err(e)) => return Err(CliError::decode(path, e)),
                Some(Ok(batch)) if batch.num_rows() == 0 => {}
                Some(Ok(batch)) => {
                    self.stats.bytes += batch_memory_size(&batch) as u64;
                    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                    let mut columns = batch.columns().to_vec();
                    columns.extend(hive::columns(&file.hive, batch.num_rows()));
                    let batch = RecordBatch::try_new_with_options(
                        self.units.schema.clone(),
                        columns,
                        &options,
                    )
                    .map_err(|e| CliError::decode(path, e))?;
                    self.pending = Some(batch);
                }
            }
        }
    }
}

/// A reader of one unit: `row_group` of a parquet file (decoded with the footer read when the
/// file was recognised), or a whole Arrow IPC file.
fn open_batches(
    file: &InputFile,
    row_group: Option<usize>,
    batch_rows: usize,
) -> Result<BatchIter, CliError> {
    let path = &file.path;
    let handle = File::open(path).map_err(|source| CliError::InputUnreadable {
        path: path.clone(),
        source,
    })?;
    Ok(match (file.format, &file.metadata) {
        (Format::Parquet, Some(metadata)) => {
            let builder =
                ParquetRecordBatchReaderBuilder::new_with_metadata(handle, metadata.clone())
                    .with_batch_size(batch_rows);
            let builder = match row_group {
                Some(g) => builder.with_row_groups(vec![g]),
                None => builder,
            };
            Box::new(builder.build().map_err(|e| CliError::decode(path, e))?)
        }
        (Format::Parquet, None) => Box::new(
            ParquetRecordBatchReaderBuilder::try_new(handle)
                .and_then(|b| b.with_batch_size(batch_rows).build())
                .map_err(|e| CliError::decode(path, e))?,
        ),
        (Format::ArrowFile, _) => Box::new(
            FileReader::try_new(BufReader::new(handle), None)
                .map_err(|e| CliError::decode(path, e))?,
        ),
        (Format::ArrowStream, _) => Box::new(
            StreamReader::try_new(BufReader::new(handle), None)
                .map_err(|e| CliError::decode(path, e))?,
        ),
    })
}
