//! The output directory: one file per partition, committed all at once.
//!
//! Partition `p` is written to `DIR/.part-<p>.<ext>.tmp` (hidden, and with a suffix no reader
//! takes for data). Only when every partition is complete, and verified with `--verify`, does
//! [`OutputDir::commit`] rename them to `DIR/part-<p>.<ext>`, after removing `part-*` files of an
//! earlier run that this one does not replace. If the run fails before that, dropping the
//! [`OutputDir`] removes the temporary files: a failed run never leaves output that looks
//! complete. (A crash — power loss, SIGKILL — can leave `.tmp` files behind; they are hidden and
//! never mistaken for output.)
//!
//! Parquet output is snappy compressed; Arrow output is the IPC file (`.arrow`) or stream
//! (`.arrows`) format, uncompressed.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_ipc::writer::{FileWriter, StreamWriter};
use arrow_schema::Schema;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::args::FormatArg;
use crate::error::CliError;

/// An output directory being filled; removes its temporary files on drop unless committed.
#[derive(Debug)]
pub(crate) struct OutputDir {
    dir: PathBuf,
    format: FormatArg,
    partitions: u32,
    committed: bool,
}

impl OutputDir {
    /// Creates `dir` if needed and checks that files can be created in it, before any work.
    pub(crate) fn create(dir: &Path, format: FormatArg, partitions: u32) -> Result<Self, CliError> {
        std::fs::create_dir_all(dir).map_err(|e| CliError::output(dir, e))?;
        let probe = dir.join(".arrow-shards-probe.tmp");
        File::create(&probe).map_err(|e| CliError::output(dir, e))?;
        // Best effort: the probe is empty and hidden.
        let _ = std::fs::remove_file(&probe);
        Ok(OutputDir {
            dir: dir.to_owned(),
            format,
            partitions,
            committed: false,
        })
    }

    /// The name partition `p` has once committed.
    pub(crate) fn final_path(&self, p: u32) -> PathBuf {
        self.dir
            .join(format!("part-{p:05}.{}", self.format.extension()))
    }

    /// The name partition `p` is written under.
    pub(crate) fn temp_path(&self, p: u32) -> PathBuf {
        self.dir
            .join(format!(".part-{p:05}.{}.tmp", self.format.extension()))
    }

    /// A writer of partition `p`'s temporary file.
    pub(crate) fn writer(&self, p: u32, schema: &Schema) -> Result<PartitionWriter, CliError> {
        let path = self.temp_path(p);
        let file = File::create(&path).map_err(|e| CliError::output(&path, e))?;
        let inner = match self.format {
            FormatArg::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .build();
                let writer = ArrowWriter::try_new(file, schema.clone().into(), Some(props))
                    .map_err(|e| CliError::output(&path, e))?;
                Inner::Parquet(Box::new(writer))
            }
            FormatArg::Arrow => {
                let writer = FileWriter::try_new(BufWriter::new(file), schema)
                    .map_err(|e| CliError::output(&path, e))?;
                Inner::Arrow(Box::new(writer))
            }
            FormatArg::ArrowStream => {
                let writer = StreamWriter::try_new(BufWriter::new(file), schema)
                    .map_err(|e| CliError::output(&path, e))?;
                Inner::ArrowStream(Box::new(writer))
            }
        };
        Ok(PartitionWriter {
            path,
            inner,
            rows: 0,
        })
    }

    /// Renames every partition's temporary file to its final name, after removing earlier
    /// runs' `part-*` files that this run does not replace.
    pub(crate) fn commit(mut self) -> Result<(), CliError> {
        self.remove_stale()?;
        for p in 0..self.partitions {
            let (from, to) = (self.temp_path(p), self.final_path(p));
            std::fs::rename(&from, &to).map_err(|e| CliError::output(&to, e))?;
        }
        self.committed = true;
        Ok(())
    }

    /// Removes `part-NNNNN.{parquet,arrow,arrows}` files this run will not write.
    fn remove_stale(&self) -> Result<(), CliError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| CliError::output(&self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| CliError::output(&self.dir, e))?;
            let name = entry.file_name();
            let Some(index) = name.to_str().and_then(part_index) else {
                continue;
            };
            let ours = index < self.partitions && self.final_path(index) == entry.path();
            if !ours {
                std::fs::remove_file(entry.path())
                    .map_err(|e| CliError::output(&entry.path(), e))?;
            }
        }
        Ok(())
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for p in 0..self.partitions {
            // Most may not exist yet; nothing useful can be done about other failures here.
            let _ = std::fs::remove_file(self.temp_path(p));
        }
    }
}

/// The partition index of an output file name `part-NNNNN.{parquet,arrow,arrows}`.
fn part_index(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("part-")?;
    let digits = [".parquet", ".arrow", ".arrows"]
        .iter()
        .find_map(|ext| rest.strip_suffix(ext))?;
    if digits.len() < 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

enum Inner {
    Parquet(Box<ArrowWriter<File>>),
    Arrow(Box<FileWriter<BufWriter<File>>>),
    ArrowStream(Box<StreamWriter<BufWriter<File>>>),
}

/// Writes one partition's temporary file: create, `write` batches, `finish`.
pub(crate) struct PartitionWriter {
    path: PathBuf,
    inner: Inner,
    rows: u64,
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

    /// Writes the footer and flushes; returns the rows written.
    pub(crate) fn finish(self) -> Result<u64, CliError> {
        let path = self.path;
        match self.inner {
            Inner::Parquet(w) => {
                w.close().map_err(|e| CliError::output(&path, e))?;
            }
            Inner::Arrow(w) => {
                let mut buffered = w.into_inner().map_err(|e| CliError::output(&path, e))?;
                buffered.flush().map_err(|e| CliError::output(&path, e))?;
            }
            Inner::ArrowStream(w) => {
                let mut buffered = w.into_inner().map_err(|e| CliError::output(&path, e))?;
                buffered.flush().map_err(|e| CliError::output(&path, e))?;
            }
        }
        Ok(self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names_are_recognised_exactly() {
        assert_eq!(part_index("part-00000.parquet"), Some(0));
        assert_eq!(part_index("part-00042.arrow"), Some(42));
        assert_eq!(part_index("part-00007.arrows"), Some(7));
        assert_eq!(part_index("part-123456.parquet"), Some(123_456));
        for other in [
            "part-1.parquet",
            ".part-00000.parquet.tmp",
            "part-0000x.arrow",
            "data.parquet",
        ] {
            assert_eq!(part_index(other), None, "{other}");
        }
    }
}
