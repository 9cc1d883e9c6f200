//! The output directory: one file per partition, committed all at once.
//!
//! Partition `p` is written to `DIR/.part-<p>.<ext>.tmp` (hidden, and with a suffix no reader
//! takes for data). Only when every partition is complete, and verified with `--verify`, does
//! [`OutputDir::commit`] rename them to `DIR/part-<p>.<ext>`, after removing `part-*` files of an
//! earlier run that this one does not replace. If the run fails before that, dropping the
//! [`OutputDir`] removes the temporary files: a failed run never leaves output that looks
//! complete. Ctrl-C is such a failure ([`crate::interrupt`]). A crash — power loss, SIGKILL — can
//! leave `.tmp` files behind; they are hidden and never mistaken for output, and the next run
//! into the same directory removes them when it starts ([`OutputDir::create`]). Two runs into
//! one directory at the same time are not supported.
//!
//! How each file is encoded is [`crate::part_writer`]'s.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_schema::Schema;

use crate::error::CliError;
use crate::part_writer::{OutputOptions, PartitionWriter};

/// An output directory being filled; removes its temporary files on drop unless committed.
#[derive(Debug)]
pub(crate) struct OutputDir {
    dir: PathBuf,
    options: OutputOptions,
    partitions: u32,
    committed: bool,
}

impl OutputDir {
    /// Creates `dir` if needed, checks that files can be created in it, before any work, and
    /// removes the temporary `.part-*.tmp` files an earlier, killed run left there.
    pub(crate) fn create(
        dir: &Path,
        options: OutputOptions,
        partitions: u32,
    ) -> Result<Self, CliError> {
        std::fs::create_dir_all(dir).map_err(|e| CliError::output(dir, e))?;
        let probe = dir.join(".arrow-shards-probe.tmp");
        File::create(&probe).map_err(|e| CliError::output(dir, e))?;
        // Best effort: the probe is empty and hidden.
        let _ = std::fs::remove_file(&probe);
        remove_leftovers(dir)?;
        Ok(OutputDir {
            dir: dir.to_owned(),
            options,
            partitions,
            committed: false,
        })
    }

    /// The name partition `p` has once committed.
    pub(crate) fn final_path(&self, p: u32) -> PathBuf {
        self.dir
            .join(format!("part-{p:05}.{}", self.options.format.extension()))
    }

    /// The name partition `p` is written under.
    pub(crate) fn temp_path(&self, p: u32) -> PathBuf {
        self.dir.join(format!(
            ".part-{p:05}.{}.tmp",
            self.options.format.extension()
        ))
    }

    /// A writer of partition `p`'s temporary file.
    pub(crate) fn writer(&self, p: u32, schema: &Schema) -> Result<PartitionWriter, CliError> {
        self.options.writer(self.temp_path(p), schema)
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
        remove_entries(&self.dir, |entry, name| {
            part_index(name)
                .is_some_and(|p| p >= self.partitions || self.final_path(p) != entry.path())
        })
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

/// Removes the `.part-NNNNN.{parquet,arrow,arrows}.tmp` regular files of `dir` (a killed run's;
/// a symlink of that name is neither followed nor removed).
fn remove_leftovers(dir: &Path) -> Result<(), CliError> {
    remove_entries(dir, |entry, name| {
        name.strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .and_then(part_index)
            .is_some()
            && entry.file_type().is_ok_and(|t| t.is_file())
    })
}

/// Removes the entries of `dir` for which `doomed(entry, name)` holds.
fn remove_entries(
    dir: &Path,
    doomed: impl Fn(&std::fs::DirEntry, &str) -> bool,
) -> Result<(), CliError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CliError::output(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| CliError::output(dir, e))?;
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| doomed(&entry, n)) {
            std::fs::remove_file(entry.path()).map_err(|e| CliError::output(&entry.path(), e))?;
        }
    }
    Ok(())
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
