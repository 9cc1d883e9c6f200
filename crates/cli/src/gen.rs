//! `arrow-shards gen`: deterministic test tables, streamed to parquet.
//!
//! Two tables, each a [`RecordBatchReader`] whose batches go straight to an `ArrowWriter`
//! (zstd level 3), so memory stays small at any size:
//! - `lineitem`: TPC-H lineitem from tpchgen-arrow, row groups of at most 128Ki rows;
//! - `all-types` ([`all_types`]): 13 columns of many Arrow types, row groups of 14,300 rows.
//!
//! Both are deterministic: the same size always gives the same rows (and, with the same parquet
//! version, the same bytes). The file is written under a temporary name beside FILE and renamed
//! when complete; on failure the temporary file is removed.

pub(crate) mod all_types;

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatchReader;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

use crate::args::GenSize;
use crate::error::CliError;

/// Rows per generated batch.
const BATCH_ROWS: usize = 8192;
/// Rows per lineitem row group: bounds what a reader must hold for one column chunk.
const LINEITEM_ROW_GROUP_ROWS: usize = 128 * 1024;

/// What `gen` wrote.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Generated {
    /// Rows written.
    pub(crate) rows: u64,
    /// Size of the file.
    pub(crate) bytes: u64,
}

/// Generates the table into the output file.
pub(crate) fn run(size: GenSize, output: &Path) -> Result<Generated, CliError> {
    match size {
        GenSize::Lineitem { scale } => {
            let batches =
                LineItemArrow::new(LineItemGenerator::new(scale, 1, 1)).with_batch_size(BATCH_ROWS);
            write_renamed(batches, "tpchgen", LINEITEM_ROW_GROUP_ROWS, output)
        }
        GenSize::AllTypes { rows } => {
            let batches = all_types::AllTypes::new(rows, BATCH_ROWS);
            write_renamed(batches, "all-types", all_types::ROW_GROUP_ROWS, output)
        }
    }
}

/// Writes `batches` to a temporary file beside `output`, then renames it to `output`.
/// `source` names the generator in an error from its batches.
fn write_renamed(
    batches: impl RecordBatchReader,
    source: &str,
    row_group_rows: usize,
    output: &Path,
) -> Result<Generated, CliError> {
    let temp = temp_path(output);
    let result = write(batches, source, row_group_rows, &temp).and_then(|rows| {
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

fn write(
    batches: impl RecordBatchReader,
    source: &str,
    row_group_rows: usize,
    temp: &Path,
) -> Result<u64, CliError> {
    let file = File::create(temp).map_err(|e| CliError::output(temp, e))?;
    let level = ZstdLevel::try_new(3).map_err(|e| CliError::Internal(e.to_string()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(row_group_rows))
        .build();
    let mut writer = ArrowWriter::try_new(file, batches.schema(), Some(props))
        .map_err(|e| CliError::output(temp, e))?;
    let mut rows = 0;
    for batch in batches {
        let batch = batch.map_err(|e| CliError::Internal(format!("{source}: {e}")))?;
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
