//! The output directory: the partitions' files, committed all at once.
//!
//! Every file is written under a temporary name in `DIR` (hidden, and with a suffix no reader
//! takes for data; [`crate::file_names`] has the names of each `--layout`). Only when every
//! partition is complete, and verified with `--verify`, does [`OutputDir::commit`] remove the
//! output files of an earlier run that this one does not replace, then rename each temporary
//! file to its final name (making the `KEY=<p>` directories of `--layout hive`). If the run
//! fails before that, dropping the [`OutputDir`] removes the temporary files: a failed run
//! never leaves output that looks complete. Ctrl-C is such a failure ([`crate::interrupt`]). A
//! crash — power loss, SIGKILL — can leave `.tmp` files behind; they are hidden and never
//! mistaken for output, and the next run into the same directory removes them when it starts
//! ([`OutputDir::create`]). Two runs into one directory at the same time are not supported.
//!
//! An earlier run's output files, which the commit removes unless this run wrote the same
//! name: `part-NNNNN.<ext>` and `part-NNNNN-FFFF.<ext>` in `DIR`, and `part-FFFF.<ext>` in
//! `DIR/KEY=<n>/` directories (KEY this run's `--hive-key`, `partition` by default; such a
//! directory left empty is removed too), `<ext>` one of parquet, arrow, arrows. Other files
//! are left alone.
//!
//! How each file is encoded is [`crate::part_writer`]'s (with the columns written plain, chosen
//! here once from the input's first batch: [`crate::plain_columns`]); how a partition is split
//! into files is up to its user, [`crate::part_files`].
//!
//! # Locking
//! One mutex, over the list of files started; held only to push to or read the list, never
//! across I/O. The plain columns are a `OnceLock` set once before any row reaches the buffer
//! ([`crate::plain_columns`] says how); no lock is taken inside it.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::args::FormatArg;
use crate::codec_memory::CodecMemory;
use crate::error::CliError;
use crate::file_names::{FileNames, is_hive_file_name, is_temp_name, parse_flat_name};
use crate::part_writer::{FileCaps, OutputOptions, PartitionWriter};
use crate::plain_columns::PlainColumns;
use crate::spare_threads::SpareThreads;

/// One file started by this run.
#[derive(Debug, Clone)]
struct Started {
    temp: PathBuf,
    /// Relative to the output directory.
    final_name: PathBuf,
}

/// An output directory being filled; removes its temporary files on drop unless committed.
#[derive(Debug)]
pub(crate) struct OutputDir {
    dir: PathBuf,
    options: OutputOptions,
    names: FileNames,
    /// Every file started, in the order started.
    started: Mutex<Vec<Started>>,
    /// Parquet columns written without a dictionary, chosen from the input's first batch.
    plain: PlainColumns,
    /// Output threads with nothing left to write, lent to the parquet writers.
    spare: Arc<SpareThreads>,
    committed: bool,
}

impl OutputDir {
    /// Creates `dir` if needed, checks that files can be created in it, before any work, and
    /// removes the temporary `.part-*.tmp` files an earlier, killed run left there.
    pub(crate) fn create(dir: &Path, options: OutputOptions) -> Result<Self, CliError> {
        std::fs::create_dir_all(dir).map_err(|e| CliError::output(dir, e))?;
        let probe = dir.join(".arrow-shards-probe.tmp");
        File::create(&probe).map_err(|e| CliError::output(dir, e))?;
        // Best effort: the probe is empty and hidden.
        let _ = std::fs::remove_file(&probe);
        remove_leftovers(dir)?;
        let names = options.file_names();
        Ok(OutputDir {
            dir: dir.to_owned(),
            options,
            names,
            started: Mutex::new(Vec::new()),
            plain: PlainColumns::default(),
            spare: Arc::default(),
            committed: false,
        })
    }

    /// The temporary path of file `index` of partition `p`.
    pub(crate) fn temp_path(&self, p: u32, index: u32) -> PathBuf {
        self.dir.join(self.names.temp_name(p, index))
    }

    /// The caps per file.
    pub(crate) fn caps(&self) -> FileCaps {
        self.options.caps
    }

    /// What each parquet column writer's codec holds ([`crate::codec_memory`]).
    pub(crate) fn codec_memory(&self) -> CodecMemory {
        self.options.codec
    }

    /// A writer of file `index` of partition `p`, under its temporary name (listed first,
    /// so that it is removed even if creating it fails halfway).
    pub(crate) fn file(
        &self,
        p: u32,
        index: u32,
        schema: &SchemaRef,
    ) -> Result<PartitionWriter, CliError> {
        let temp = self.temp_path(p, index);
        self.list().push(Started {
            temp: temp.clone(),
            final_name: self.names.final_name(p, index),
        });
        self.options
            .writer(temp, schema, self.plain.names(), &self.spare)
    }

    /// The output threads lent to the parquet writers ([`crate::spare_threads`]).
    pub(crate) fn spare_threads(&self) -> &SpareThreads {
        &self.spare
    }

    /// Chooses the parquet columns to write plain from `batch`, if it is the first input batch
    /// decoded: to be called before that batch is written to the buffer.
    pub(crate) fn sample_input(&self, batch: &RecordBatch) {
        if self.options.format == FormatArg::Parquet {
            self.plain
                .sample(batch, self.options.dictionary_distinct_ratio);
        }
    }

    /// The parquet columns written plain ([`crate::plain_columns`]).
    pub(crate) fn plain_columns(&self) -> &[String] {
        self.plain.names()
    }

    /// Removes earlier runs' output files that this run does not replace, then renames every
    /// temporary file to its final name.
    pub(crate) fn commit(mut self) -> Result<(), CliError> {
        let started = self.list().clone();
        let finals: HashSet<PathBuf> = started
            .iter()
            .map(|s| self.dir.join(&s.final_name))
            .collect();
        self.remove_stale(&finals)?;
        for file in &started {
            let to = self.dir.join(&file.final_name);
            if let Some(parent) = to.parent().filter(|p| *p != self.dir) {
                std::fs::create_dir_all(parent).map_err(|e| CliError::output(parent, e))?;
            }
            std::fs::rename(&file.temp, &to).map_err(|e| CliError::output(&to, e))?;
        }
        self.committed = true;
        Ok(())
    }

    /// Removes the output files of earlier runs (see the module docs) not in `keep`.
    fn remove_stale(&self, keep: &HashSet<PathBuf>) -> Result<(), CliError> {
        remove_entries(&self.dir, |entry, name| {
            parse_flat_name(name).is_some() && !keep.contains(&entry.path())
        })?;
        let entries = std::fs::read_dir(&self.dir).map_err(|e| CliError::output(&self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| CliError::output(&self.dir, e))?;
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if !(is_dir
                && entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| self.names.is_hive_dir(n)))
            {
                continue;
            }
            let sub = entry.path();
            remove_entries(&sub, |entry, name| {
                is_hive_file_name(name) && !keep.contains(&entry.path())
            })?;
            // Only succeeds if empty: other files are left where they are.
            let _ = std::fs::remove_dir(&sub);
        }
        Ok(())
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<Started>> {
        // A thread that panicked while pushing left a whole list: use it.
        self.started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for file in self.list().iter() {
            // Nothing useful can be done about a failure here.
            let _ = std::fs::remove_file(&file.temp);
        }
    }
}

/// Removes the `.part-NNNNN[-FFFF].{parquet,arrow,arrows}.tmp` regular files of `dir` (a killed
/// run's; a symlink of that name is neither followed nor removed).
fn remove_leftovers(dir: &Path) -> Result<(), CliError> {
    remove_entries(dir, |entry, name| {
        is_temp_name(name) && entry.file_type().is_ok_and(|t| t.is_file())
    })
}

/// Removes the regular files and symlinks of `dir` for which `doomed(entry, name)` holds.
fn remove_entries(
    dir: &Path,
    doomed: impl Fn(&std::fs::DirEntry, &str) -> bool,
) -> Result<(), CliError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CliError::output(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| CliError::output(dir, e))?;
        let name = entry.file_name();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir && name.to_str().is_some_and(|n| doomed(&entry, n)) {
            std::fs::remove_file(entry.path()).map_err(|e| CliError::output(&entry.path(), e))?;
        }
    }
    Ok(())
}
