//! `arrow-shards gen lineitem`: TPC-H lineitem from tpchgen-arrow, streamed to parquet.
//!
//! The generator is deterministic: the same scale factor always gives the same rows (and, with
//! the same parquet version, the same bytes). Batches of 8192 rows go straight to an
//! `ArrowWriter` (zstd level 3, row groups of at most 128Ki rows), so memory stays small at any
//! scale. The file is written under a temporary name beside FILE and renamed when complete.

use std::fs::File;
use std::path::{Path, PathBuf};

use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

use crate::args::{GenArgs, GenTable};
use crate::error::CliError;

/// Rows per generated batch.
const BATCH_ROWS: usize = 8192;
/// Rows per parquet row group: bounds what a reader must hold for one column chunk.
const ROW_GROUP_ROWS: usize = 128 * 1024;

/// What `gen` wrote.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Generated {
    /// Rows written.
    pub(crate) rows: u64,
    /// Size of the file.
    pub(crate) bytes: u64,
}

/// Generates the table into the output file.
pub(crate) fn run(args: &GenArgs) -> Result<Generated, CliError> {
    match args.table {
        GenTable::Lineitem => lineitem(args.scale, &args.output),
    }
}

fn lineitem(scale: f64, output: &Path) -> Result<Generated, CliError> {
    let batches =
        LineItemArrow::new(LineItemGenerator::new(scale, 1, 1)).with_batch_size(BATCH_ROWS);
    let temp = temp_path(output);
    let result = write(batches, &temp).and_then(|rows| {
        std::fs::rename(&temp, output).map_err(|e| CliError::output(output, e))?;
        let bytes = std::fs::metadata(output)
            .map_err(|e| CliError::output(output, e))?
            .len();
        Ok(Generated { rows, bytes })
    });
    if result.is_err() {
        // Best effort: leave nothing that looks like output behind.
        let _ = std::fs::remove_file(&temp);
    }
    result
}

fn write(batches: LineItemArrow, temp: &Path) -> Result<u64, CliError> {
    let file = File::create(temp).map_err(|e| CliError::output(temp, e))?;
    let level = ZstdLevel::try_new(3).map_err(|e| CliError::Internal(e.to_string()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build();
    let mut writer = ArrowWriter::try_new(file, LineItemArrow::schema_ref(), Some(props))
        .map_err(|e| CliError::output(temp, e))?;
    let mut rows = 0;
    for batch in batches {
        let batch = batch.map_err(|e| CliError::Internal(format!("tpchgen: {e}")))?;
        rows += batch.num_rows() as u64;
        writer
            .write(&batch)
            .map_err(|e| CliError::output(temp, e))?;
    }
    writer.close().map_err(|e| CliError::output(temp, e))?;
    Ok(rows)
}

/// `dir/.name.tmp` beside `path`.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp"))
}
