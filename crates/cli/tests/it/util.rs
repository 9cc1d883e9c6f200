//! Running the binary, and writing and reading the files it consumes and produces.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_ipc::writer::{FileWriter, StreamWriter};
use arrow_schema::SchemaRef;
use assert_cmd::Command;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The `arrow-shards` command.
pub(crate) fn arrow_shards() -> Command {
    assert_cmd::cargo::cargo_bin_cmd!("arrow-shards")
}

/// `arrow-shards shuffle INPUT... FLAGS`, with the flags as one whitespace-separated string
/// (paths that may contain spaces go in `inputs` or are added with `.arg`).
pub(crate) fn shuffle<P: AsRef<Path>>(inputs: &[P], flags: &str) -> Command {
    let mut command = arrow_shards();
    command.arg("shuffle");
    for input in inputs {
        command.arg(input.as_ref());
    }
    command.args(flags.split_whitespace());
    command
}

/// `arrow-shards gen all-types --rows ROWS --output FILE`, expected to succeed.
pub(crate) fn gen_all_types(file: &Path, rows: u64) {
    arrow_shards()
        .args(["gen", "all-types", "--rows", &rows.to_string(), "--output"])
        .arg(file)
        .assert()
        .success()
        .stdout(predicates::str::contains(format!("wrote {rows} rows to")));
}

/// A committed fixture.
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(name)
}

/// The lineitem SF 0.01 fixture.
pub(crate) fn lineitem() -> PathBuf {
    fixture("lineitem-sf0.01.parquet")
}

/// Every batch of a parquet file, and its schema.
pub(crate) fn read_parquet(path: &Path) -> (SchemaRef, Vec<RecordBatch>) {
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
    let schema = builder.schema().clone();
    let batches = builder
        .build()
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (schema, batches)
}

/// Every batch of an Arrow IPC file, and its schema.
pub(crate) fn read_arrow_file(path: &Path) -> (SchemaRef, Vec<RecordBatch>) {
    let reader = FileReader::try_new(File::open(path).unwrap(), None).unwrap();
    let schema = reader.schema();
    (schema, reader.collect::<Result<Vec<_>, _>>().unwrap())
}

/// Every batch of an Arrow IPC stream, and its schema.
pub(crate) fn read_arrow_stream(path: &Path) -> (SchemaRef, Vec<RecordBatch>) {
    let reader = StreamReader::try_new(File::open(path).unwrap(), None).unwrap();
    let schema = reader.schema();
    (schema, reader.collect::<Result<Vec<_>, _>>().unwrap())
}

/// The output files of `dir` by partition number: every `part-NNNNN.<ext>` file read whole.
/// Panics on any other visible file in `dir`.
pub(crate) fn read_parts(dir: &Path, ext: &str) -> BTreeMap<u32, (SchemaRef, Vec<RecordBatch>)> {
    let mut parts = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let index = name
            .strip_prefix("part-")
            .and_then(|r| r.strip_suffix(&format!(".{ext}")))
            .unwrap_or_else(|| panic!("unexpected file {name} in {}", dir.display()));
        let path = dir.join(&name);
        let read = match ext {
            "parquet" => read_parquet(&path),
            "arrow" => read_arrow_file(&path),
            _ => read_arrow_stream(&path),
        };
        parts.insert(index.parse().unwrap(), read);
    }
    parts
}

/// Every entry of `dir`, hidden ones included, sorted.
pub(crate) fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Writes `batches` as a parquet file.
pub(crate) fn write_parquet(path: &Path, batches: &[RecordBatch]) {
    let mut w =
        ArrowWriter::try_new(File::create(path).unwrap(), batches[0].schema(), None).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}

/// Writes `batches` as an Arrow IPC stream.
pub(crate) fn write_arrow_stream(path: &Path, batches: &[RecordBatch]) {
    let mut w = StreamWriter::try_new(File::create(path).unwrap(), &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
}

/// Writes `batches` as an Arrow IPC file.
pub(crate) fn write_arrow_file(path: &Path, batches: &[RecordBatch]) {
    let mut w = FileWriter::try_new(File::create(path).unwrap(), &batches[0].schema()).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
}

/// The JSON object a `--json` run printed (stdout must hold nothing else).
pub(crate) fn json(stdout: &[u8]) -> serde_json::Value {
    let text = std::str::from_utf8(stdout).unwrap();
    assert_eq!(
        text.lines().count(),
        1,
        "stdout must be one JSON line: {text}"
    );
    serde_json::from_str(text).unwrap()
}

/// Total rows of `batches`.
pub(crate) fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// The rows of `batches` over `columns` (by name), each encoded with arrow-row, sorted: two
/// tables hold the same rows, each as often, exactly when their multisets are equal.
pub(crate) fn row_multiset(batches: &[RecordBatch], columns: &[&str]) -> Vec<Vec<u8>> {
    let Some(first) = batches.first() else {
        return Vec::new();
    };
    let schema = first.schema();
    let fields = columns
        .iter()
        .map(|c| {
            let field = schema.field_with_name(c).unwrap();
            arrow_row::SortField::new(field.data_type().clone())
        })
        .collect();
    let converter = arrow_row::RowConverter::new(fields).unwrap();
    let mut rows = Vec::new();
    for batch in batches {
        let arrays: Vec<_> = columns
            .iter()
            .map(|c| batch.column_by_name(c).unwrap().clone())
            .collect();
        let converted = converter.convert_columns(&arrays).unwrap();
        rows.extend(converted.iter().map(|r| r.as_ref().to_vec()));
    }
    rows.sort_unstable();
    rows
}

/// The names of the columns of `schema`.
pub(crate) fn column_names(schema: &SchemaRef) -> Vec<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
}
